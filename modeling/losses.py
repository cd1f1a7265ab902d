"""Contrastive losses and the cross-process gather they share.

Distributed training follows open_clip's ``loss.py``: the caller says explicitly whether to gather candidates
across processes. Gathering uses ``torch.distributed.nn.functional.all_gather``, whose backward sums the gradient
of every process's loss into each local slice. With DDP's gradient averaging this makes N processes with local
batch B compute exactly the gradient of one process with the concatenated batch N*B (tested in
``tests/test_distributed.py``).
"""

from typing import Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F


def distributed_rank_and_world() -> tuple:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def gather_with_grad(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate ``tensor`` from every process along dim 0, keeping gradients (identity on one process)."""
    _, world = distributed_rank_and_world()
    if world == 1:
        return tensor
    from torch.distributed.nn.functional import all_gather

    return torch.cat(all_gather(tensor.contiguous()), dim=0)


def cosine_logits(anchors: torch.Tensor, candidates: torch.Tensor, temperature: float) -> torch.Tensor:
    """``cos(anchor_i, candidate_j) / temperature`` as ``(n_anchors, n_candidates)``, always in float32."""
    anchors = F.normalize(anchors.float(), dim=-1)
    candidates = F.normalize(candidates.float(), dim=-1)
    return anchors @ candidates.T / temperature


def info_nce_loss(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    hard_negatives: Optional[torch.Tensor] = None,
    temperature: float = 0.05,
    hard_negative_weight: float = 0.0,
    gather_across_processes: bool = False,
) -> torch.Tensor:
    r"""InfoNCE with in-batch negatives (SimCSE eq. 1 and, with hard negatives, eq. 5).

    .. math:: \ell_i = -\log \frac{e^{\cos(h_i, h_i^+)/\tau}}{\sum_j e^{\cos(h_i, h_j^+)/\tau}
              + \sum_j e^{(\cos(h_i, h_j^-) + w\,[i=j])/\tau}}

    SimCSE adds the hard-negative weight ``w`` to the logit (after the temperature), as here.

    Args:
        anchors: ``(B, H)`` local anchors.
        positives: ``(B, H)``; ``positives[i]`` is the positive of ``anchors[i]``, every other row a negative.
        hard_negatives: optional ``(B, H)``; ``hard_negatives[i]`` is anchor i's hard negative, all rows are
            negatives for every anchor.
        temperature: tau.
        hard_negative_weight: ``w`` above, added to each anchor's own hard-negative logit.
        gather_across_processes: use the positives/hard negatives of every process as candidates (labels are
            offset by rank). The loss stays the mean over local anchors.
    Returns:
        scalar loss (float32).
    """
    if gather_across_processes:
        rank, _ = distributed_rank_and_world()
        positives = gather_with_grad(positives)
        hard_negatives = None if hard_negatives is None else gather_with_grad(hard_negatives)
    else:
        rank = 0
    batch = anchors.shape[0]
    labels = torch.arange(batch, device=anchors.device) + rank * batch
    logits = cosine_logits(anchors, positives, temperature)
    if hard_negatives is not None:
        negative_logits = cosine_logits(anchors, hard_negatives, temperature)
        own_hard_negative = F.one_hot(labels, negative_logits.shape[1]).to(negative_logits.dtype)
        negative_logits = negative_logits + hard_negative_weight * own_hard_negative
        logits = torch.cat([logits, negative_logits], dim=1)
    return F.cross_entropy(logits, labels)
