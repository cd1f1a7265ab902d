"""Shuffled Group Whitening (SGW) and the whitening variants it is ablated against (WhitenedCSE, Zhuo et al., 2023).

Whitening maps centred features ``Z`` (N, d) to ``H = Z W`` with ``W Σ Wᵀ = I`` (eq. 2). With the eigendecomposition
``Σ = U Λ Uᵀ``:

* ``pca``: ``W = U Λ^-1/2`` (features end up in the eigenbasis, whose order and signs change from batch to batch);
* ``zca``: ``W = U Λ^-1/2 Uᵀ`` (eq. 3-4), rotated back to the original axes;
* ``group``: ZCA inside each of ``num_groups`` blocks of ``d / num_groups`` consecutive channels (eq. 5: "divide it
  into k groups", each Z_k an N × d/k matrix);
* ``shuffled_group``: permute the channels at random, ZCA inside each group, undo the permutation (eq. 6). Every
  draw uses a new permutation, so several draws on the same features give different "views" of them.

All groups of all draws are decomposed by one batched ``torch.linalg.eigh`` on a ``(draws * groups, g, g)`` tensor,
in float32 with autocast disabled. ``eps`` is added to the eigenvalues so a batch smaller than the group (rank-deficient
covariance) stays finite. When gradients flow through ``W`` they use the Daleckii-Krein formula with a closed-form
divided difference, which stays finite for the repeated (near-zero) eigenvalues of such a batch, where the autograd
rule of ``eigh`` divides by zero.

In training the module whitens with the statistics of the batch and updates running estimates with momentum
(eq. 13: ``μ_n = β μ_{n-1} + (1-β) x̄``, same for Σ). In eval mode it whitens with those running estimates only, so an
embedding does not depend on the other sentences of its batch; groups are then the fixed consecutive blocks (no
shuffle: a random permutation would make inference non-deterministic). The paper states eq. 13 for its PCA/ZCA
comparison (§5.2); the authors' released SGW registers running buffers but never updates or reads them, and their
inference does not whiten (``WhitenedCSEConfig.inference_representation``).

The authors' transform (``shuffled_group_whitening.py``) is ``_whiten_batch`` with ``eps=0``: centre by the batch
mean, permute, covariance ``/ N`` per group, ``W = U Λ^-1/2 Uᵀ`` with the covariance detached, un-permute
(``tests/test_whitenedcse.py`` checks output and input gradient against a direct implementation).

Example::

    # 192 groups of 2 channels
    sgw = GroupWhitening(hidden_size=384, num_groups=192, kind="shuffled_group")
    # (3, N, 384): three SGW draws of the same (N, 384) features
    views = sgw(features.expand(3, -1, -1))
"""

from typing import Optional

import torch
from torch import nn

WHITENING_TYPES = ("none", "pca", "zca", "group", "shuffled_group")
GROUPED_WHITENING = ("group", "shuffled_group")


class _InverseSqrtPSD(torch.autograd.Function):
    """``(C + eps I)^-1/2`` of a batch of symmetric PSD matrices ``(b, g, g)``, with a gradient that exists for
    repeated eigenvalues.

    Returns ``(W, U, inv_sqrt)``: the ZCA matrix and the eigen pair it came from (``U`` and ``inv_sqrt`` carry no
    gradient; PCA uses them without one).
    """

    @staticmethod
    def forward(ctx, covariance: torch.Tensor, eps: float):
        eigenvalues, eigenvectors = torch.linalg.eigh(covariance)
        # round-off can make the eigenvalues of a rank-deficient covariance slightly negative
        shifted = eigenvalues.clamp_min(0) + eps
        inv_sqrt = shifted.rsqrt()
        whitening = (eigenvectors * inv_sqrt.unsqueeze(-2)) @ eigenvectors.transpose(-1, -2)
        ctx.save_for_backward(eigenvectors, shifted)
        ctx.mark_non_differentiable(eigenvectors, inv_sqrt)
        return whitening, eigenvectors, inv_sqrt

    @staticmethod
    def backward(ctx, grad_whitening, _grad_eigenvectors, _grad_inv_sqrt):
        eigenvectors, shifted = ctx.saved_tensors
        root = shifted.sqrt()
        # divided difference of f(s) = s^-1/2: (f(a) - f(b)) / (a - b) = -1 / (√a √b (√a + √b)); equals f'(a) at a = b
        root_i, root_j = root.unsqueeze(-1), root.unsqueeze(-2)
        loewner = -1.0 / (root_i * root_j * (root_i + root_j))
        grad = 0.5 * (grad_whitening + grad_whitening.transpose(-1, -2))
        inner = eigenvectors.transpose(-1, -2) @ grad @ eigenvectors
        return eigenvectors @ (inner * loewner) @ eigenvectors.transpose(-1, -2), None


def whitening_matrices(covariance: torch.Tensor, kind: str, eps: float, differentiable: bool) -> torch.Tensor:
    """Whitening matrices ``(b, g, g)`` for covariances ``(b, g, g)`` (float32), applied as ``x @ W``.

    ``differentiable=False`` stops the gradient through ``W`` (the authors' released code); PCA is never
    differentiable in ``W`` (its eigenvector basis has no stable gradient).
    """
    if not differentiable or kind == "pca":
        covariance = covariance.detach()
    whitening, eigenvectors, inv_sqrt = _InverseSqrtPSD.apply(covariance, eps)
    if kind == "pca":
        return eigenvectors * inv_sqrt.unsqueeze(-2)
    return whitening


class GroupWhitening(nn.Module):
    """Batch whitening of ``(N, d)`` or ``(draws, N, d)`` features, one of
    [`WHITENING_TYPES`][csekit.modeling.whitening.WHITENING_TYPES].

    Args:
        hidden_size: ``d``.
        num_groups: k, the number of groups for ``group`` / ``shuffled_group``, each of ``d / k`` channels (k must
            divide ``d``; the authors' ``num_groups``); ``pca`` and ``zca`` whiten all ``d`` channels as one group.
        kind: ``none`` (identity), ``pca``, ``zca``, ``group`` or ``shuffled_group``.
        eps: added to the covariance eigenvalues.
        momentum: ``β`` of eq. 13 for the running mean/covariance used in eval mode.
        differentiable: let gradients flow through the whitening matrix (the released code stops them).

    Buffers ``running_mean`` (d,) and ``running_covariance`` (d, d) are saved with the model.
    """

    def __init__(
        self,
        hidden_size: int,
        num_groups: int = 1,
        kind: str = "shuffled_group",
        eps: float = 1e-5,
        momentum: float = 0.9,
        differentiable: bool = False,
    ):
        super().__init__()
        if kind not in WHITENING_TYPES:
            raise ValueError(f"unknown whitening {kind!r}; choose one of {', '.join(WHITENING_TYPES)}")
        self.hidden_size = hidden_size
        self.num_groups = num_groups if kind in GROUPED_WHITENING else 1
        if self.num_groups < 1 or hidden_size % self.num_groups:
            raise ValueError(f"num_groups {num_groups} does not divide the hidden size {hidden_size}")
        self.kind = kind
        self.eps = eps
        self.momentum = momentum
        self.differentiable = differentiable
        self.register_buffer("running_mean", torch.zeros(hidden_size))
        self.register_buffer("running_covariance", torch.eye(hidden_size))

    @property
    def group_size(self) -> int:
        """Channels per group, ``d / num_groups``."""
        return self.hidden_size // self.num_groups

    def extra_repr(self) -> str:
        return f"{self.hidden_size}, num_groups={self.num_groups}, kind={self.kind}, eps={self.eps}"

    def forward(self, features: torch.Tensor, permutations: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Whiten ``(N, d)`` or ``(draws, N, d)`` features; returns float32 of the same shape.

        In training each draw is whitened with its own batch statistics and (``shuffled_group``) its own random
        permutation, or ``permutations`` ``(draws, d)`` when given; eval mode uses the running statistics.
        """
        if self.kind == "none":
            return features
        squeeze = features.dim() == 2
        draws = features.unsqueeze(0) if squeeze else features
        with torch.autocast(device_type=draws.device.type, enabled=False):
            draws = draws.float()
            if self.training:
                whitened = self._whiten_batch(draws, permutations)
            else:
                whitened = self._whiten_running(draws)
        return whitened.squeeze(0) if squeeze else whitened

    def _whiten_batch(self, draws: torch.Tensor, permutations: Optional[torch.Tensor]) -> torch.Tensor:
        num_draws, n, d = draws.shape
        groups, size = self.num_groups, self.group_size
        mean = draws.mean(dim=1, keepdim=True)
        centred = draws - mean
        self._update_running_stats(mean, centred)
        if self.kind == "shuffled_group":
            if permutations is None:
                permutations = torch.rand(num_draws, d, device=draws.device).argsort(dim=-1)
            centred = centred.gather(-1, permutations.unsqueeze(1).expand(-1, n, -1))
        # (draws, N, groups, g) -> (draws * groups, N, g): every group of every draw is one batch entry
        grouped = centred.reshape(num_draws, n, groups, size).permute(0, 2, 1, 3).reshape(num_draws * groups, n, size)
        covariance = grouped.transpose(1, 2) @ grouped / n
        whitened = grouped @ whitening_matrices(covariance, self.kind, self.eps, self.differentiable)
        whitened = whitened.reshape(num_draws, groups, n, size).permute(0, 2, 1, 3).reshape(num_draws, n, d)
        if self.kind == "shuffled_group":
            inverse = permutations.argsort(dim=-1)
            whitened = whitened.gather(-1, inverse.unsqueeze(1).expand(-1, n, -1))
        return whitened

    @torch.no_grad()
    def _update_running_stats(self, mean: torch.Tensor, centred: torch.Tensor) -> None:
        """Eq. 13 with the batch statistics averaged over the draws (they are draws of the same distribution)."""
        n = centred.shape[1]
        batch_mean = mean.mean(dim=(0, 1))
        batch_covariance = (centred.transpose(1, 2) @ centred / n).mean(dim=0)
        beta = self.momentum
        self.running_mean.mul_(beta).add_(batch_mean, alpha=1 - beta)
        self.running_covariance.mul_(beta).add_(batch_covariance, alpha=1 - beta)

    def _whiten_running(self, draws: torch.Tensor) -> torch.Tensor:
        groups, size = self.num_groups, self.group_size
        covariance = self.running_covariance.float()
        # the diagonal (g, g) blocks of the running covariance, one per consecutive group
        blocks = covariance.reshape(groups, size, groups, size).diagonal(dim1=0, dim2=2).permute(2, 0, 1)
        whitening = whitening_matrices(blocks, self.kind, self.eps, differentiable=False)
        centred = draws - self.running_mean.float()
        leading = centred.shape[:-1]
        grouped = centred.reshape(-1, groups, size).transpose(0, 1)  # (groups, rows, g)
        return (grouped @ whitening).transpose(0, 1).reshape(*leading, self.hidden_size)
