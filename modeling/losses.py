"""Contrastive losses and the cross-process gather they share.

Distributed training follows open_clip's ``loss.py``: the caller passes its ``rank`` and ``world_size`` (a trainer
takes them from its accelerator), and with ``world_size > 1`` the candidates of every process are gathered. Gathering
uses ``torch.distributed.nn.functional.all_gather``, whose backward sums the gradient
of every process's loss into each local slice. With DDP's gradient averaging this makes N processes with local
batch B compute exactly the gradient of one process with the concatenated batch N*B (tested in
``tests/test_conformance.py``).
"""

from typing import Optional, Sequence

import torch
import torch.nn.functional as F


class _ContiguousGradient(torch.autograd.Function):
    """Identity whose backward hands on a contiguous gradient.

    ``torch.distributed.nn.functional.all_gather``'s backward on gloo scatters into ``empty_like`` buffers of the
    incoming gradients; for a strided (e.g. transposed) gradient the bytes land in the wrong elements (torch 2.13).
    """

    @staticmethod
    def forward(ctx, tensor):
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx, grad):
        return grad.contiguous()


def gather_with_grad(tensor: torch.Tensor, world_size: int) -> torch.Tensor:
    """Concatenate ``tensor`` from every process along dim 0, keeping gradients (identity on one process)."""
    if world_size == 1:
        return tensor
    from torch.distributed.nn.functional import all_gather

    return _ContiguousGradient.apply(torch.cat(all_gather(tensor.contiguous()), dim=0))


def cosine_logits(anchors: torch.Tensor, candidates: torch.Tensor, temperature: float) -> torch.Tensor:
    """``cos(anchor_i, candidate_j) / temperature`` as ``(n_anchors, n_candidates)``, in float32 or wider.

    bf16/fp16 embeddings are upcast: with tau = 0.05 the logits span +-20, where half precision loses the small
    differences the gradient is made of.
    """
    dtype = torch.promote_types(anchors.dtype, torch.float32)
    anchors = F.normalize(anchors.to(dtype), dim=-1)
    candidates = F.normalize(candidates.to(dtype), dim=-1)
    return anchors @ candidates.T / temperature


def false_negative_mask(text_ids: torch.Tensor, all_text_ids: torch.Tensor, rank: int = 0,
                        hard_negatives: bool = False) -> torch.Tensor:
    """The in-batch candidates that are copies, by text, of what each local anchor is meant to be close to
    (``--duplicate_negatives mask``): no sentence is pushed away from a copy of itself.

    Candidate ``j`` (row ``j``'s positive; with ``hard_negatives`` also row ``j``'s hard negatives, after them, one
    column of rows at a time, as [`info_nce_loss`][csekit.modeling.losses.info_nce_loss] orders them) is
    masked for anchor ``i`` when its text is anchor ``i``'s or anchor ``i``'s positive's, or, for a positive, when
    row ``j``'s anchor has anchor ``i``'s text (a premise with two entailed hypotheses: each entails the other's
    premise). Anchor ``i``'s own positive is never masked.

    Args:
        text_ids: ``(B, columns)`` integer identities of the local rows' texts: anchor, positive, hard negatives (one
            column: unsupervised, the positive is the anchor's own text).
        all_text_ids: the same for every process's rows, in rank order (``text_ids`` on one process).
        rank: this process's place (its anchors' labels are offset by ``rank * B``).
        hard_negatives: also mask among the hard-negative candidates (columns 2 onward).
    Returns:
        ``(B, N)``, or ``(B, (1 + k) N)`` with ``k`` hard negatives a row, boolean; ``N`` = the rows of
        ``all_text_ids``.
    """
    def column(ids, index):
        return ids[:, min(index, ids.shape[1] - 1)]

    anchor, positive = column(text_ids, 0)[:, None], column(text_ids, 1)[:, None]

    def copies(candidates):
        return (candidates[None] == anchor) | (candidates[None] == positive)

    mask = copies(column(all_text_ids, 1)) | (column(all_text_ids, 0)[None] == anchor)
    own = torch.arange(text_ids.shape[0], device=mask.device) + rank * text_ids.shape[0]
    mask[torch.arange(text_ids.shape[0], device=mask.device), own] = False
    if hard_negatives:
        mask = torch.cat([mask] + [copies(all_text_ids[:, c]) for c in range(2, all_text_ids.shape[1])], dim=1)
    return mask


def info_nce_loss(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    hard_negatives: Optional[torch.Tensor] = None,
    temperature: float = 0.05,
    hard_negative_weight: float = 0.0,
    rank: int = 0,
    world_size: int = 1,
    candidate_mask: Optional[torch.Tensor] = None,
    extra_negatives: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    r"""InfoNCE with in-batch negatives (SimCSE eq. 1 and, with hard negatives, eq. 5), and optional extra negatives
    shared by every anchor (a momentum encoder's queue: MoCo, ESimCSE eq. 6).

    $$
    \ell_i = -\log \frac{e^{\cos(h_i, h_i^+)/\tau}}{\sum_j e^{\cos(h_i, h_j^+)/\tau}
             + \sum_j e^{\cos(h_i, h_j^-)/\tau + w\,[i=j]} + \sum_q e^{\cos(h_i, e_q)/\tau}}
    $$

    SimCSE adds the hard-negative weight ``w`` to the logit (after the temperature), as here.

    Args:
        anchors: ``(B, H)`` local anchors.
        positives: ``(B, H)``; ``positives[i]`` is the positive of ``anchors[i]``, every other row a negative.
        hard_negatives: optional ``(B, H)``, or ``(B, k, H)``: ``hard_negatives[i]`` is anchor i's hard negative
            (its ``k`` hard negatives); all are negatives for every anchor, placed after the positives one column
            of rows at a time (every row's first, then every row's second...), as sentence-transformers'
            ``MultipleNegativesRankingLoss`` places an n-tuple's.
        temperature: tau.
        hard_negative_weight: ``w`` above, added to each anchor's own hard-negative logits.
        rank, world_size: this process's place in the process group; with ``world_size > 1`` the positives and hard
            negatives of every process are the candidates (labels offset by ``rank``). The loss stays the mean over
            local anchors.
        candidate_mask: optional ``(B, candidates)`` boolean, True where a candidate leaves anchor i's denominator
            ([`false_negative_mask`][csekit.modeling.losses.false_negative_mask]); with ``extra_negatives`` its last
            ``Q`` columns are theirs.
        extra_negatives: optional ``(Q, H)`` negatives of every anchor, after the in-batch candidates; taken as
            given on each process (not gathered: a queue filled with every process's keys is the same everywhere).
            They usually carry no gradient (a queue is detached). For a Matryoshka size, pass them cut to it too.
    Returns:
        scalar loss (float32, or float64 for float64 inputs).
    """
    positives = gather_with_grad(positives, world_size)
    hard_negatives = None if hard_negatives is None else gather_with_grad(hard_negatives, world_size)
    batch = anchors.shape[0]
    labels = torch.arange(batch, device=anchors.device) + rank * batch
    logits = cosine_logits(anchors, positives, temperature)
    if hard_negatives is not None:
        columns = hard_negatives.unsqueeze(1) if hard_negatives.dim() == 2 else hard_negatives  # (N, k, H)
        negative_logits = cosine_logits(anchors, columns.transpose(0, 1).flatten(0, 1), temperature)
        own_hard_negative = F.one_hot(labels, columns.shape[0]).repeat(1, columns.shape[1]).to(negative_logits.dtype)
        negative_logits = negative_logits + hard_negative_weight * own_hard_negative
        logits = torch.cat([logits, negative_logits], dim=1)
    if extra_negatives is not None:
        if extra_negatives.dim() != 2 or extra_negatives.shape[1] != anchors.shape[1]:
            raise ValueError(f"extra_negatives must be (Q, {anchors.shape[1]}), got {tuple(extra_negatives.shape)}")
        logits = torch.cat([logits, cosine_logits(anchors, extra_negatives, temperature)], dim=1)
    if candidate_mask is not None:
        logits = logits.masked_fill(candidate_mask, float("-inf"))
    return F.cross_entropy(logits, labels)


def nt_xent_loss(first: torch.Tensor, second: torch.Tensor, temperature: float = 0.1) -> torch.Tensor:
    r"""NT-Xent over ``2m`` sentences (SimCLR; CLSR eq. 1).

    $$ \ell_{a,b} = -\log \frac{e^{\cos(v_a, v_b)/\tau}}{\sum_{i=1}^{2m} [i \neq a]\, e^{\cos(v_a, v_i)/\tau}} $$

    Every one of the ``2m`` sentences is an anchor once: its positive is its pair partner, the other ``2m - 2``
    sentences are negatives, and its similarity to itself is excluded. Both ``(a, b)`` and ``(b, a)`` count.

    Args:
        first: ``(m, d)``; ``first[i]`` and ``second[i]`` are a positive pair.
        second: ``(m, d)``.
        temperature: tau.
    Returns:
        scalar loss (float32), the mean of the ``2m`` terms.
    """
    if first.shape != second.shape or first.dim() != 2:
        raise ValueError(f"nt_xent_loss needs two (m, d) tensors of one shape, got {tuple(first.shape)} and "
                         f"{tuple(second.shape)}")
    pairs = first.shape[0]
    embeddings = torch.cat([first, second])
    logits = cosine_logits(embeddings, embeddings, temperature)
    # the indicator of eq. 1; in place (the division's backward does not need its output), about 2x faster on CPU
    # than masked_fill with an eye mask
    logits.fill_diagonal_(float("-inf"))
    index = torch.arange(pairs, device=logits.device)
    labels = torch.cat([index + pairs, index])
    return F.cross_entropy(logits, labels)


def multi_positive_info_nce_terms(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    temperature: float = 0.05,
    rank: int = 0,
    world_size: int = 1,
    candidate_mask: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    r"""Per-anchor, per-positive InfoNCE terms of WhitenedCSE (Zhuo et al., 2023, eq. 7-8).

    $$ \ell_{i,p} = -\log \frac{e^{\cos(h_i, h_{i,p}^+)/\tau}}{\sum_j e^{\cos(h_i, h_{j,p}^+)/\tau}} $$

    Positive ``p`` of anchor ``i`` competes with the ``p``-th positives of the other sentences (in-batch negatives,
    gathered across processes like [`info_nce_loss`][csekit.modeling.losses.info_nce_loss]).

    Args:
        anchors: ``(B, H)``.
        positives: ``(B, m, H)``; ``positives[i, p]`` is the ``p``-th positive of ``anchors[i]``.
        rank, world_size: as for [`info_nce_loss`][csekit.modeling.losses.info_nce_loss].
        candidate_mask: optional ``(B, N)`` boolean, True where sentence ``j``'s positives leave anchor ``i``'s
            denominators ([`false_negative_mask`][csekit.modeling.losses.false_negative_mask]), for every ``p``.
    Returns:
        ``(B, m)`` float32 losses ``ℓ_{i,p}``; combine them with
        [`multi_positive_l1_loss`][csekit.modeling.losses.multi_positive_l1_loss] or
        [`multi_positive_l2_loss`][csekit.modeling.losses.multi_positive_l2_loss].
    """
    positives = gather_with_grad(positives, world_size)
    batch, num_positives = anchors.shape[0], positives.shape[1]
    anchors = F.normalize(anchors.float(), dim=-1)
    candidates = F.normalize(positives.float(), dim=-1).transpose(0, 1)  # (m, N, H)
    logits = torch.einsum("bh,mnh->mbn", anchors, candidates) / temperature
    if candidate_mask is not None:
        logits = logits.masked_fill(candidate_mask, float("-inf"))
    labels = (torch.arange(batch, device=anchors.device) + rank * batch).repeat(num_positives)
    terms = F.cross_entropy(logits.reshape(num_positives * batch, -1), labels, reduction="none")
    return terms.reshape(num_positives, batch).T


def multi_positive_l1_loss(terms: torch.Tensor, positive_weights: Optional[Sequence[float]] = None) -> torch.Tensor:
    r"""WhitenedCSE eq. 7 ("L1"): :math:`\sum_p \lambda_p \ell_{i,p}`, averaged over anchors.

    ``terms``: ``(B, m)``; ``positive_weights``: the ``m`` weights ``λ_p`` (default all 1, a plain sum).
    """
    return (terms * _positive_weights(terms, positive_weights)).sum(dim=1).mean()


def multi_positive_l2_loss(terms: torch.Tensor, positive_weights: Optional[Sequence[float]] = None) -> torch.Tensor:
    r"""WhitenedCSE eq. 8 ("L2"), sum inside the log with the paper's negative sign on the positive similarity:

    $$
    \log \sum_p \lambda_p\, e^{-\cos(h_i, h_{i,p}^+)/\tau} \sum_j e^{\cos(h_i, h_{j,p}^+)/\tau}
    = \log \sum_p \lambda_p\, e^{\ell_{i,p}}
    $$

    averaged over anchors: a soft maximum of the per-positive losses, dominated by the least similar positive.
    (Eq. 8 as printed divides by the candidate sum and negates the log, which rewards pushing positives apart.)
    ``terms``: ``(B, m)``; ``positive_weights``: the ``m`` weights ``λ_p`` (default all 1).
    """
    return torch.logsumexp(terms + _positive_weights(terms, positive_weights).log(), dim=1).mean()


def _positive_weights(terms: torch.Tensor, positive_weights: Optional[Sequence[float]]) -> torch.Tensor:
    """``(m,)`` weights ``λ_p`` in the dtype of ``terms`` (all 1 when not given)."""
    if positive_weights is None:
        return terms.new_ones(terms.shape[1])
    weights = terms.new_tensor(positive_weights)
    if weights.shape != (terms.shape[1],):
        raise ValueError(f"positive_weights needs one weight per positive ({terms.shape[1]}), got "
                         f"{list(positive_weights)}")
    return weights
