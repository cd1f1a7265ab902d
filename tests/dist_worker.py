"""Worker for tests/test_distributed.py: one SimCSE step on this process's shard of a fixed batch.

Launched as ``accelerate launch --multi_gpu --num_processes N tests/dist_worker.py OUT.safetensors [--no-gather]``. The model goes
through ``accelerator.prepare`` (DDP when N > 1) and the loss gathers candidates across processes exactly as
``SimCSETrainer`` does. Rank 0 writes the process-averaged loss and the DDP-synchronised gradients.
"""

import os
import sys

import torch
from accelerate import Accelerator
from safetensors.torch import save_file
from transformers import AutoTokenizer

from csekit.modeling import SimCSEConfig, SimCSEModel
from csekit.trainers.collators import ContrastiveCollator
from csekit.loading import embedded_minilm_path
from csekit.trainers.trainer import SimCSETrainer

TRIPLETS = [
    ("a man is playing a guitar", "someone plays an instrument", "a woman is cooking"),
    ("the cat sleeps on the sofa", "a cat is asleep", "a dog runs in the park"),
    ("stocks fell sharply today", "markets dropped", "the weather is sunny"),
    ("he is reading a book", "a man reads", "children are swimming"),
    ("the train leaves at noon", "departure is at twelve", "she bought new shoes"),
    ("a child is drawing a picture", "a kid draws", "the car is parked outside"),
    ("rain is expected tomorrow", "it will rain", "the team won the final"),
    ("the soup is too salty", "there is too much salt", "birds fly south in winter"),
]


def build_model() -> SimCSEModel:
    torch.manual_seed(1234)
    encoder = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
                   attention_probs_dropout_prob=0.0, model_type="bert")
    return SimCSEModel(SimCSEConfig(encoder_config=encoder, pooler_type="cls", hard_negative_weight=0.5))


def shard_batch(rank: int, world: int) -> dict:
    tokenizer = AutoTokenizer.from_pretrained(embedded_minilm_path())
    collator = ContrastiveCollator(tokenizer, max_length=16)
    features = [dict(zip(("sent0", "sent1", "hard_neg"), t)) for t in TRIPLETS]
    # pad once over the whole batch so every shard has the same sequence length as the 1-process run
    batch = collator(features)
    per_rank = len(features) // world
    return {k: v[rank * per_rank : (rank + 1) * per_rank] for k, v in batch.items()}


class _StepTrainer(SimCSETrainer):
    """Just enough of SimCSETrainer to call its compute_losses outside a full Trainer."""

    def __init__(self, accelerator, gather: bool):  # noqa: D107 - deliberately skips Trainer.__init__
        self.accelerator = accelerator
        self.gather = gather

    @property
    def gather_across_processes(self) -> bool:
        return self.gather and super().gather_across_processes


def main(output_path: str, gather: bool) -> None:
    accelerator = Accelerator(cpu=True)
    # float64: with a random (anisotropic) encoder the gradients are small differences of large softmax terms, and
    # float32 summation order alone moves them by ~0.5%; in float64 any real mismatch stands out
    model = accelerator.prepare(build_model().double().train())
    batch = shard_batch(accelerator.process_index, accelerator.num_processes)
    trainer = _StepTrainer(accelerator, gather)
    loss = trainer.compute_losses(model, model(**batch), batch)["loss"]
    accelerator.backward(loss)
    mean_loss = accelerator.reduce(loss.detach(), reduction="mean")
    if accelerator.is_main_process:
        grads = {name: p.grad.detach().clone() for name, p in accelerator.unwrap_model(model).named_parameters()
                 if p.grad is not None}
        world = torch.tensor([accelerator.num_processes])
        save_file({"loss": mean_loss.reshape(1), "world_size": world, **grads}, output_path)
    accelerator.wait_for_everyone()
    # Everything is written: skip interpreter teardown. Tearing gloo down there aborted a rank ("terminate called
    # without an active exception") or, after an explicit destroy_process_group, hung one (torch 2.13, a few runs
    # in twenty on a loaded 2-core machine).
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1], gather=sys.argv[2:] != ["--no-gather"])
