"""The finite check of every update, without a host read that stalls the step.

A non-finite loss or gradient must never reach a saved weight. Reading the check's flag on the host just before the
optimizer step would make the host wait for the whole backward on an accelerator, every step, with the device idle
while the next step is launched. Instead, for each update:

1. the flag (every micro-batch loss finite, and the gradient norm unless a gradient scaler handles overflow itself) is
   computed on the device;
2. an optimizer that takes a device-side skip (torch's fused Adam and AdamW, transformers' default ``optim``, read
   ``found_inf`` as torch's ``GradScaler`` sets it) leaves its weights and moments as they were when the flag is
   false;
3. the flag is copied to the host without waiting, and read at the next update, when the device is past it, or
   before anything reads or writes the weights: an evaluation, a checkpoint, a save, the end of ``train()``.

A non-finite update thus stops the run at the next update at most, naming its step and losses, and nothing after
the last finite update is ever saved.
"""

from dataclasses import dataclass
from typing import Optional

import torch

from ..errors import DataError


@dataclass
class PendingUpdate:
    """An update whose flag is on its way to the host: ``flag`` is a host tensor once ``copied`` has happened."""

    step: int
    flag: torch.Tensor
    copied: Optional[object]  # a CUDA event recorded after the copy; None when ``flag`` lives on the host already
    losses: list
    grad_norm: Optional[object]


def host_copy(flag: torch.Tensor) -> tuple:
    """``flag`` on the host without waiting for the device: a pinned copy queued on CUDA and the event that marks it
    done. A flag on any other device is kept as it is (reading it later waits for its device)."""
    if flag.device.type != "cuda":
        return flag, None
    host = torch.empty(flag.shape, dtype=flag.dtype, pin_memory=True)
    host.copy_(flag, non_blocking=True)
    copied = torch.cuda.Event()
    copied.record()
    return host, copied


def device_skip_target(optimizer) -> Optional[torch.optim.Optimizer]:
    """The torch optimizer under ``optimizer`` (accelerate wraps it) when it skips an update on the device for a
    ``found_inf`` of 1, as its fused kernels do; ``None`` otherwise."""
    inner = getattr(optimizer, "optimizer", optimizer)
    return inner if getattr(inner, "_step_supports_amp_scaling", False) else None


class FiniteCheck:
    """The flags of a run's updates: ``record`` each micro-batch's losses, ``queue`` each update just before its
    optimizer step, ``resolve`` wherever the weights must be known finite."""

    def __init__(self):
        self.losses_finite = None  # every micro-batch loss of the current update finite (a device tensor)
        self.losses = []  # the loss components of the update's micro-batches, for the message
        self.pending: Optional[PendingUpdate] = None

    def record(self, losses: dict) -> None:
        """Keep a micro-batch's loss components (``{"loss": total, name: component}``), and whether its loss is
        finite, on the device."""
        finite = torch.isfinite(losses["loss"].detach())
        self.losses_finite = finite if self.losses_finite is None else self.losses_finite & finite
        self.losses.append({name: value.detach() for name, value in losses.items()})

    def queue(self, step: int, grad_norm, optimizer, scaled: bool) -> None:
        """Check the previous update, then flag update ``step`` (the 1-based step number): its losses, and its
        gradient norm unless ``scaled`` (fp16's gradient scaler skips overflowing gradients itself, and owns the
        optimizer's ``found_inf``). A fused optimizer skips this update on the device when the flag is false."""
        self.resolve()
        finite = self.losses_finite if self.losses_finite is not None else torch.ones((), dtype=torch.bool)
        if grad_norm is not None and not scaled:
            norm = torch.as_tensor(grad_norm)
            finite = finite.to(norm.device) & torch.isfinite(norm)
        target = device_skip_target(optimizer)
        if target is not None and not scaled:
            target.found_inf = (~finite).float()  # 0-d, as GradScaler gives it
        self.pending = PendingUpdate(step, *host_copy(finite), self.losses, grad_norm)
        self.losses_finite, self.losses = None, []

    def resolve(self) -> None:
        """Read the queued update's flag (waiting for its copy only if the device is not past it yet), and stop the
        run in one line when its loss or gradient was not finite."""
        pending, self.pending = self.pending, None
        if pending is None:
            return
        if pending.copied is not None:
            pending.copied.synchronize()
        if bool(pending.flag):
            return
        bad = next((item for item in pending.losses if not torch.isfinite(item["loss"])),
                   pending.losses[-1] if pending.losses else {})
        losses = ", ".join(f"{'loss' if name == 'loss' else 'loss_' + name} {float(value):.4g}"
                           for name, value in bad.items())
        norm = float(pending.grad_norm) if pending.grad_norm is not None else "not computed"
        raise DataError(f"step {pending.step}: the loss or its gradient is not finite ({losses}, gradient norm "
                        f"{norm}); the run stopped and saved nothing of this update (checkpoints and --output_dir "
                        "keep only finite weights); lower --learning_rate or check the data")


__all__ = ["FiniteCheck", "device_skip_target", "host_copy"]
