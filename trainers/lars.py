"""LARS optimizer as used by SimCLR (You et al. 2017, "Large Batch Training of Convolutional Networks").

Written by hand because no CPU-installable library here ships it (timm's ``Lars`` needs torchvision, which has no
CPU build for this torch). It follows SimCLR's ``lars_optimizer.py`` (classic momentum variant) step by step:

.. code-block:: text

    g      = grad + weight_decay * w                       (groups with weight decay)
    ratio  = eta * ||w|| / ||g||  if ||w|| > 0 and ||g|| > 0 else 1   (groups with layer adaptation)
    v      = momentum * v + lr * ratio * g
    w      = w - v                                          (nesterov: w - (momentum * v + lr * ratio * g))

As in SimCLR, biases (and any other 1-d parameter such as LayerNorm scales) get neither weight decay nor the trust
ratio; `lars_param_groups` builds those two groups.

Example::

    optimizer = LARS(lars_param_groups(head, weight_decay=1e-4), lr=0.5, momentum=0.9)
"""

import torch
from torch import nn
from torch.optim import Optimizer


class LARS(Optimizer):
    """Layer-wise adaptive rate scaling with classic momentum (SimCLR's default).

    Args:
        params: parameters or param groups; a group may set ``weight_decay`` and ``layer_adaptation`` (bool).
        lr: base learning rate (scaled per layer by the trust ratio).
        momentum: momentum coefficient.
        weight_decay: L2 coefficient added to the gradient before the trust ratio.
        trust_coefficient: ``eta`` in the trust ratio (SimCLR: 0.001).
        nesterov: Nesterov momentum.
    """

    def __init__(self, params, lr: float, momentum: float = 0.9, weight_decay: float = 0.0,
                 trust_coefficient: float = 0.001, nesterov: bool = False):
        if lr < 0:
            raise ValueError(f"lr must be >= 0, got {lr}")
        if not 0 <= momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        if weight_decay < 0 or trust_coefficient <= 0:
            raise ValueError("weight_decay must be >= 0 and trust_coefficient > 0")
        defaults = dict(lr=lr, momentum=momentum, weight_decay=weight_decay, trust_coefficient=trust_coefficient,
                        nesterov=nesterov, layer_adaptation=True)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                grad = param.grad
                if group["weight_decay"]:
                    grad = grad.add(param, alpha=group["weight_decay"])
                scaled_lr = torch.as_tensor(group["lr"], dtype=param.dtype, device=param.device)
                if group["layer_adaptation"]:
                    weight_norm, grad_norm = torch.linalg.vector_norm(param), torch.linalg.vector_norm(grad)
                    ratio = group["trust_coefficient"] * weight_norm / grad_norm
                    ratio = torch.where((weight_norm > 0) & (grad_norm > 0), ratio, torch.ones_like(ratio))
                    scaled_lr = scaled_lr * ratio
                state = self.state[param]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(param)
                velocity = state["momentum_buffer"]
                velocity.mul_(group["momentum"]).add_(grad * scaled_lr)
                if group["nesterov"]:
                    param.sub_(velocity * group["momentum"] + grad * scaled_lr)
                else:
                    param.sub_(velocity)
        return loss


def lars_param_groups(module: nn.Module, weight_decay: float) -> list:
    """Two groups, as SimCLR: matrices get weight decay + trust ratio, 1-d parameters (biases, norms) neither."""
    matrices, vectors = [], []
    for param in module.parameters():
        if param.requires_grad:
            (matrices if param.dim() > 1 else vectors).append(param)
    return [
        {"params": matrices, "weight_decay": weight_decay, "layer_adaptation": True},
        {"params": vectors, "weight_decay": 0.0, "layer_adaptation": False},
    ]
