"""InfoNCE against a direct, loop-based implementation of SimCSE eq. 1 / eq. 5."""

import math

import pytest
import torch

from csekit.modeling.losses import cosine_logits, info_nce_loss


def direct_info_nce(anchors, positives, hard_negatives=None, temperature=0.05, weight=0.0):
    total = 0.0
    n = anchors.shape[0]
    cos = torch.nn.functional.cosine_similarity
    for i in range(n):
        terms = [math.exp(cos(anchors[i], positives[j], dim=0).item() / temperature) for j in range(n)]
        if hard_negatives is not None:
            terms += [
                math.exp(cos(anchors[i], hard_negatives[j], dim=0).item() / temperature + (weight if i == j else 0))
                for j in range(n)
            ]
        numerator = math.exp(cos(anchors[i], positives[i], dim=0).item() / temperature)
        total += -math.log(numerator / sum(terms))
    return total / n


@pytest.mark.parametrize("temperature", [0.05, 0.5])
def test_info_nce_matches_direct_formula(temperature):
    anchors, positives = torch.randn(5, 8, dtype=torch.float64), torch.randn(5, 8, dtype=torch.float64)
    expected = direct_info_nce(anchors, positives, temperature=temperature)
    assert info_nce_loss(anchors, positives, temperature=temperature).item() == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("weight", [0.0, 1.0, -2.0])
def test_info_nce_with_hard_negatives_and_weight(weight):
    a, p, h = (torch.randn(4, 6, dtype=torch.float64) for _ in range(3))
    expected = direct_info_nce(a, p, h, temperature=0.1, weight=weight)
    loss = info_nce_loss(a, p, h, temperature=0.1, hard_negative_weight=weight)
    assert loss.item() == pytest.approx(expected, rel=1e-5)


def test_identical_views_and_orthogonal_negatives_give_near_zero_loss():
    embeddings = torch.eye(4) * 3
    assert info_nce_loss(embeddings, embeddings, temperature=0.05).item() < 1e-8


def test_loss_is_float32_for_bfloat16_inputs():
    a, p = torch.randn(4, 16).bfloat16(), torch.randn(4, 16).bfloat16()
    logits = cosine_logits(a, p, 0.05)
    assert logits.dtype == torch.float32
    loss = info_nce_loss(a, p)
    assert loss.dtype == torch.float32
    reference = info_nce_loss(a.float(), p.float())
    assert loss.item() == pytest.approx(reference.item(), rel=1e-6)


def test_gradient_flows_to_both_views():
    a = torch.randn(3, 4, requires_grad=True)
    p = torch.randn(3, 4, requires_grad=True)
    info_nce_loss(a, p).backward()
    assert a.grad.abs().sum() > 0 and p.grad.abs().sum() > 0
