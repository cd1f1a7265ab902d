"""A momentum encoder and its queue of negatives (MoCo, He et al., 2020; ESimCSE eq. 5-6): a training piece any
method can hold.

The momentum encoder is a copy of the trained encoder that follows it, ``theta_m <- m theta_m + (1 - m) theta``, and
never receives a gradient; it encodes keys (sentence vectors of the current batch, without dropout) that join a FIFO
queue, the oldest leaving first. The loss contrasts every anchor with the queue (``info_nce_loss(...,
extra_negatives=queue)``); the batch's own keys join it after the step.

Order of a step, as the owning model and its trainer run it:

1. forward: the keys of the batch are encoded by the momentum encoder as it stands (``no_grad``, eval mode);
2. loss: the queue as it stands is the extra negatives; the keys, gathered from every process in rank order (so the
   queue is the same everywhere and N processes hold what one process with the whole batch holds), are staged;
3. after the optimizer step (``after_optimizer_step``): the momentum encoder follows the updated weights, then the
   staged keys are enqueued.

Updating after step ``t`` with the weights ``theta_{t+1}`` is the same recurrence as updating at the start of step
``t + 1`` before encoding its keys (ESimCSE's code), so from the same start the keys of every step are encoded by
the same weights as there. The start is the owning method's choice: a copy of the encoder (MoCo), or a fresh
initialisation (`reinitialize`, ESimCSE's code). Staged keys of several micro-batches (gradient accumulation) join the
queue together, once per optimizer step.

The queue and its length are buffers: a checkpoint holds them with the momentum encoder, and a resumed run continues
them exactly.
"""

import copy
from typing import Optional

import torch
from torch import nn


class MomentumEncoder(nn.Module):
    """A momentum copy of ``encoder`` and queues of ``queue_size`` keys of size ``width``.

    Args:
        encoder: the trained network to follow (copied now, frozen).
        momentum: ``m`` of the update, in [0, 1): 0 makes the copy equal to the encoder after every step.
        queue_size: the most keys a queue keeps (0: no queue).
        width: the keys' size.
        queues: the names of the queues, one per kind of key (a method's training vectors, and the inference vectors
            its Matryoshka terms use); every one is enqueued at once, so they always hold the same sentences.
    """

    def __init__(self, encoder: nn.Module, momentum: float, queue_size: int, width: int, queues: tuple = ("keys",)):
        super().__init__()
        if not 0 <= momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        self.momentum = momentum
        self.encoder = copy.deepcopy(encoder).requires_grad_(False)
        self.queue_names = tuple(queues)
        for name in self.queue_names:
            self.register_buffer(f"queue_{name}", torch.zeros(queue_size, width))
        self.register_buffer("queue_length", torch.zeros((), dtype=torch.long))
        self.register_buffer("queue_epoch", torch.zeros((), dtype=torch.long))
        self.staged = []

    def train(self, mode: bool = True) -> "MomentumEncoder":
        super().train(mode)
        self.encoder.eval()  # keys are encoded without dropout, whatever the trainer's mode
        return self

    @torch.no_grad()
    def reinitialize(self, std: float) -> None:
        """Draw the momentum encoder's weights afresh as BERT initialises a model: every Linear and Embedding weight
        from a normal distribution of standard deviation ``std`` (the config's ``initializer_range``), biases 0,
        LayerNorm weights 1 (from the global generator, which the run's seed sets)."""
        for module in self.encoder.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.normal_(mean=0.0, std=std)
            if isinstance(module, nn.LayerNorm):
                module.weight.fill_(1.0)
            if isinstance(module, (nn.Linear, nn.LayerNorm)) and module.bias is not None:
                module.bias.zero_()

    @torch.no_grad()
    def follow(self, encoder: nn.Module) -> None:
        """``theta_m <- m theta_m + (1 - m) theta`` for every parameter of ``encoder`` (the trained one)."""
        mine, theirs = dict(self.encoder.named_parameters()), dict(encoder.named_parameters())
        if mine.keys() != theirs.keys():
            raise ValueError("the momentum encoder and the encoder it follows have different parameters")
        for name, parameter in mine.items():
            parameter.mul_(self.momentum).add_(theirs[name].detach().to(parameter.dtype), alpha=1 - self.momentum)

    def queue(self, name: str = "keys") -> Optional[torch.Tensor]:
        """The queue ``name``'s keys, oldest first, ``(length, width)``; ``None`` while it is empty."""
        length = int(self.queue_length)
        if length == 0:
            return None
        keys = getattr(self, f"queue_{name}")
        return keys[keys.shape[0] - length:]

    def queue_slots(self, name: str = "keys") -> tuple:
        """``(slots, empty)``: every slot of the queue ``name``, ``(queue_size, width)``, and ``(queue_size,)`` True
        where a slot holds no key yet. Fixed shapes and no host read, so a compiled step takes it as it is; a loss
        that masks the empty slots equals one over [`queue`][csekit.modeling.momentum.MomentumEncoder.queue]."""
        slots = getattr(self, f"queue_{name}")
        return slots, torch.arange(slots.shape[0], device=slots.device) < slots.shape[0] - self.queue_length

    def stage(self, **keys: torch.Tensor) -> None:
        """Keep one micro-batch's keys (every queue's, each ``(n, width)``, gathered from every process) until
        [`enqueue_staged`][csekit.modeling.momentum.MomentumEncoder.enqueue_staged]."""
        if set(keys) != set(self.queue_names):
            raise ValueError(f"stage the keys of every queue ({', '.join(self.queue_names)}), got {', '.join(keys)}")
        self.staged.append({name: value.detach() for name, value in keys.items()})

    @torch.no_grad()
    def enqueue_staged(self) -> None:
        """Append the staged keys (in the order staged) to the queues, keeping the newest ``queue_size``."""
        staged, self.staged = self.staged, []
        size = getattr(self, f"queue_{self.queue_names[0]}").shape[0]
        if not staged or size == 0:
            return
        length = int(self.queue_length)
        new_length = min(size, length + sum(item[self.queue_names[0]].shape[0] for item in staged))
        for name in self.queue_names:
            buffer = getattr(self, f"queue_{name}")
            keys = torch.cat([buffer[size - length:], *(item[name].to(buffer) for item in staged)])
            buffer[size - new_length:] = keys[keys.shape[0] - new_length:]
        self.queue_length.fill_(new_length)

    def start_epoch(self, epoch: int) -> None:
        """Empty the queues when ``epoch`` is not the epoch they were filled in (ESimCSE's code starts every epoch
        with an empty queue); a run resumed inside an epoch keeps them."""
        if int(self.queue_epoch) != epoch:
            self.queue_length.zero_()
            self.queue_epoch.fill_(epoch)
            self.staged = []


__all__ = ["MomentumEncoder"]
