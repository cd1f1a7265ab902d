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


@pytest.mark.parametrize("weight", [0.0, 1.0])
def test_k_hard_negatives_a_row_are_candidates_of_every_anchor(weight):
    """``(B, k, H)`` hard negatives: each anchor's denominator sums every row's positive and every row's k negatives,
    its own k weighted (eq. 5 with k negatives, a loop here); at weight 0 it is sentence-transformers'
    ``MultipleNegativesRankingLoss`` on the n-tuple (anchor, positive, negative_1..k), scale 1/tau."""
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    rows, k, tau = 4, 3, 0.1
    a, p = torch.randn(rows, 6, dtype=torch.float64), torch.randn(rows, 6, dtype=torch.float64)
    h = torch.randn(rows, k, 6, dtype=torch.float64)
    cos = torch.nn.functional.cosine_similarity
    total = 0.0
    for i in range(rows):
        terms = [math.exp(cos(a[i], p[j], dim=0).item() / tau) for j in range(rows)]
        terms += [math.exp(cos(a[i], h[j, c], dim=0).item() / tau + (weight if i == j else 0.0))
                  for j in range(rows) for c in range(k)]
        total += -math.log(math.exp(cos(a[i], p[i], dim=0).item() / tau) / sum(terms))
    loss = info_nce_loss(a, p, h, temperature=tau, hard_negative_weight=weight)
    assert loss.item() == pytest.approx(total / rows, rel=1e-10)
    if weight == 0.0:
        mnrl = MultipleNegativesRankingLoss(model=None, scale=1 / tau)
        assert loss.item() == pytest.approx(mnrl.compute_loss_from_embeddings([a, p, *h.unbind(1)], None).item(),
                                            rel=1e-10)


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


def direct_info_nce_torch(anchors, positives, hard_negatives, queue, mask, temperature, weight):
    """ESimCSE eq. 6 / MoCo with SimCSE's hard negatives, one anchor at a time and differentiable: the denominator sums
    every positive, every hard negative (the own one weighted) and every queue entry, less the masked candidates."""
    cos = torch.nn.functional.cosine_similarity
    # (vector, the anchor whose logit gets the weight: its own hard negative; -1 for none)
    candidates = [(vector, -1) for vector in positives]
    candidates += [(vector, j) for j, vector in enumerate(hard_negatives)]
    candidates += [(vector, -1) for vector in queue]
    losses = []
    for i in range(len(anchors)):
        terms = []
        for index, (vector, weighted_anchor) in enumerate(candidates):
            if not mask[i, index]:
                bonus = weight if weighted_anchor == i else 0.0
                terms.append(torch.exp(cos(anchors[i], vector, dim=0) / temperature + bonus))
        numerator = torch.exp(cos(anchors[i], positives[i], dim=0) / temperature)
        losses.append(-torch.log(numerator / torch.stack(terms).sum()))
    return torch.stack(losses).mean()


def test_extra_negatives_join_every_denominator_with_their_mask_columns():
    """A queue of extra negatives (ESimCSE's momentum queue): loss and gradients equal the per-anchor formula in
    float64, its columns masked like the in-batch ones, its gradient reaching the queue when it has one."""
    generator = torch.Generator().manual_seed(0)
    a, p, h = (torch.randn(4, 6, dtype=torch.float64, generator=generator, requires_grad=True) for _ in range(3))
    queue = torch.randn(5, 6, dtype=torch.float64, generator=generator, requires_grad=True)
    mask = torch.zeros(4, 4 + 4 + 5, dtype=torch.bool)
    mask[0, 9], mask[2, 1], mask[3, 12] = True, True, True  # a queue entry, an in-batch positive, the last entry
    loss = info_nce_loss(a, p, h, temperature=0.05, hard_negative_weight=0.5, candidate_mask=mask,
                         extra_negatives=queue)
    expected = direct_info_nce_torch(a, p, h, queue, mask, 0.05, 0.5)
    torch.testing.assert_close(loss, expected, rtol=1e-12, atol=1e-12)
    got = torch.autograd.grad(loss, (a, p, h, queue))
    want = torch.autograd.grad(expected, (a, p, h, queue))
    for mine, theirs in zip(got, want):
        torch.testing.assert_close(mine, theirs, rtol=1e-10, atol=1e-12)
    assert info_nce_loss(a, p, h, temperature=0.05, hard_negative_weight=0.5) < loss  # more negatives, larger loss
    with pytest.raises(ValueError, match=r"extra_negatives must be \(Q, 6\)"):
        info_nce_loss(a, p, extra_negatives=queue[:, :3])
