"""Exact gradient caching: the paper's batch on one GPU (Gao et al., 2021, "Scaling Deep Contrastive Learning Batch
Size under Memory Limited Setup", GradCache).

One derivation. A step's loss ``L`` reaches the encoder's parameters ``θ`` only through the outputs ``o_k = f_θ(x_k;
ξ_k)`` of its chunks ``x_k`` (``ξ_k``: the chunk's dropout draws), so

    dL/dθ = Σ_k (∂o_k/∂θ)ᵀ g_k,    g_k = ∂L/∂o_k.

[`GradientCache.step`][csekit.trainers.gradient_cache.GradientCache.step] computes exactly that, holding one chunk's
graph at a time:

1. every chunk is encoded without a graph (`chunk_forward`), the random state recorded before each;
2. the chunks' outputs, as leaves, are joined into the whole batch's output (`merge_chunks`: WhitenedCSE's
   whitening sees the whole batch here) and the loss is computed once, gathered across processes as without caching;
   one backward gives every ``g_k`` and the gradients of what runs after the join;
3. each chunk is encoded again with the graph, from its recorded random state (the same ``ξ_k``, so the same
   ``o_k``), and ``g_k`` is back-propagated through it. An output with a gradient of its own (CMLM-CSE's per-chunk
   L_MLM) gets its cached gradient the same way.

Memory for activations grows with the chunk, not the batch; each step costs one more forward pass of the encoder.

A chunk is a run of whole examples (every view of each): ``--mini_batch_size M`` cuts M examples a chunk,
``--mini_batch_tokens T`` (one or the other) as many consecutive examples as hold at most T of the tokens the encoder
computes ([`chunk_bounds`][csekit.trainers.gradient_cache.chunk_bounds]), so a chunk's activation memory follows T
whatever the sentences' lengths. The derivation holds for any cut, so both are exact.
"""

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch
from accelerate.utils import convert_to_fp32
from transformers.utils import ModelOutput

# the devices whose random state (the one dropout draws from) is saved and restored here
RANDOM_STATE_DEVICES = ("cpu", "cuda")


@dataclass
class RandomState:
    """The random state dropout draws from: the CPU generator's and, on a GPU, that device's."""

    cpu: torch.Tensor
    device_state: Optional[torch.Tensor] = None
    device: Optional[torch.device] = None

    @classmethod
    def capture(cls, device: torch.device) -> "RandomState":
        cuda = device.type == "cuda"
        return cls(torch.get_rng_state(), torch.cuda.get_rng_state(device) if cuda else None, device if cuda else None)

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.device_state is not None:
            torch.cuda.set_rng_state(self.device_state, self.device)


def unsupported_device(device: torch.device) -> Optional[str]:
    """Why gradient caching cannot be exact on ``device`` (``None`` when it can)."""
    if device.type in RANDOM_STATE_DEVICES:
        return None
    return (f"restoring dropout's random state between a chunk's two passes is implemented for "
            f"{' and '.join(RANDOM_STATE_DEVICES)} devices, not {device.type}")


def as_leaves(output: ModelOutput) -> ModelOutput:
    """``output`` with every tensor detached; floating ones become leaves that collect their gradient."""
    return type(output)(**{name: value.detach().requires_grad_(value.is_floating_point())
                           for name, value in output.items()})


def chunk_bounds(example_tokens: Sequence[int], mini_batch_size: Optional[int] = None,
                 mini_batch_tokens: Optional[int] = None) -> list:
    """The ``(start, end)`` example ranges a batch is cut into: ``mini_batch_size`` examples each (the last may be
    smaller), or, given ``mini_batch_tokens``, consecutive examples while their ``example_tokens`` add up to at most
    that budget. Examples stay whole and in order; one example over the budget is a chunk of its own."""
    batch = len(example_tokens)
    if mini_batch_tokens is None:
        return [(start, min(start + mini_batch_size, batch)) for start in range(0, batch, mini_batch_size)]
    bounds, start, used = [], 0, 0
    for index, tokens in enumerate(example_tokens):
        if index > start and used + tokens > mini_batch_tokens:
            bounds.append((start, index))
            start, used = index, 0
        used += tokens
    return [*bounds, (start, batch)] if batch else bounds


class GradientCache:
    """One training step of a batch encoded in chunks (the derivation above) of ``mini_batch_size`` examples or of
    at most ``mini_batch_tokens`` tokens (exactly one of the two is given).

    Args:
        mini_batch_size: examples per chunk (the last chunk may be smaller).
        device: where the model runs (its random state is restored for each chunk's second pass).
        mini_batch_tokens: the most tokens the encoder computes in one chunk
            ([`example_tokens`][csekit.modeling.modeling_encoder.SentenceEncoderPreTrainedModel.example_tokens]).
    """

    def __init__(self, mini_batch_size: Optional[int], device: torch.device, mini_batch_tokens: Optional[int] = None):
        if (mini_batch_size is None) == (mini_batch_tokens is None):
            raise ValueError("give one of mini_batch_size and mini_batch_tokens")
        self.mini_batch_size = mini_batch_size
        self.mini_batch_tokens = mini_batch_tokens
        self.device = device

    def bounds(self, model, inputs: dict) -> list:
        """The example ranges of ``inputs``' chunks ([`chunk_bounds`][csekit.trainers.gradient_cache.chunk_bounds])."""
        return chunk_bounds(model.example_tokens(inputs).tolist(), self.mini_batch_size, self.mini_batch_tokens)

    def step(self, model, inputs: dict, compute_losses: Callable[[ModelOutput], dict],
             backward: Callable[[torch.Tensor], None], autocast: Callable) -> dict:
        """Back-propagate one batch's loss into ``model``'s parameters, chunk by chunk.

        Args:
            model: the csekit model (unwrapped), in training mode.
            inputs: its batch (the model's arguments).
            compute_losses: the whole batch's output -> ``{"loss": total, ...}``.
            backward: back-propagates the total loss once (the trainer's loss scaling and ``accelerator.backward``).
            autocast: the forward passes' precision context (``accelerator.autocast``).
        Returns:
            the loss components, detached.
        """
        chunks = model.split_chunks(inputs, self.bounds(model, inputs))
        states, outputs = [], []
        with torch.no_grad():
            for chunk in chunks:
                states.append(RandomState.capture(self.device))
                with autocast():
                    outputs.append(model.chunk_forward(**chunk))
        leaves = [as_leaves(output) for output in outputs]
        del outputs
        with autocast():
            merged = model.merge_chunks(leaves, chunks)
        # half-precision outputs reach the loss as float32, as accelerate hands a mixed-precision forward's outputs
        losses = compute_losses(convert_to_fp32(merged))
        backward(losses["loss"])
        after = RandomState.capture(self.device)  # past the first passes' draws and the join's (shuffled groups)
        for chunk, state, leaf in zip(chunks, states, leaves):
            state.restore()
            with autocast():
                output = model.chunk_forward(**chunk)
            cached = [(output[name], value.grad) for name, value in leaf.items() if value.grad is not None]
            if cached:
                tensors, gradients = zip(*cached)
                torch.autograd.backward(tensors, gradients)
        after.restore()  # the second passes repeated the first passes' draws: the next step draws on from here
        return {name: value.detach() for name, value in losses.items()}


def average_gradients(parameters, world_size: int) -> None:
    """Average the gradients of ``parameters`` over the process group in one all-reduce (what DDP does in its
    backward; a cached step runs the model's own forward, outside DDP's)."""
    gradients = [parameter.grad for parameter in parameters if parameter.grad is not None]
    if world_size == 1 or not gradients:
        return
    flat = torch.cat([gradient.reshape(-1) for gradient in gradients])
    torch.distributed.all_reduce(flat)
    flat /= world_size
    for gradient, value in zip(gradients, flat.split([gradient.numel() for gradient in gradients])):
        gradient.copy_(value.view_as(gradient))


__all__ = ["GradientCache", "RandomState", "average_gradients", "chunk_bounds", "unsupported_device"]
