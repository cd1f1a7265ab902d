"""Random draws of data preparation that a resumed run repeats exactly.

A collator's random choices (CMLM-CSE's MLM masks, word repetition, word deletion) are drawn from generators of
their own, seeded by ``(seed, epoch, example, stream)``: never from the global random states. The draws of an example
then do not depend on when it is collated (transformers collates the first batch of a resumed run before it restores
the checkpoint's random state, and a dataloader worker collates ahead of the step), on which process collates it, on
what else is in its batch, or on the padded or packed layout. A resumed run's first batch is the uninterrupted run's
batch without saving any collator state, and the global random state, which dropout reads, is left to the forward
passes alone.

``example`` is the row's ``example_index`` (the training data's row number,
[`load_training_dataset`][csekit.trainers.data.load_training_dataset]);
rows without one (a dataset built by hand) are keyed by their text. ``epoch`` is set by the trainer at every epoch
start (`ExampleDraws.set_epoch`), so an example gets fresh draws in every epoch.
"""

import hashlib
import random
from dataclasses import dataclass

import torch

EXAMPLE_INDEX = "example_index"


def derived_seed(*parts) -> int:
    """A 63-bit seed of ``parts`` (the run's seed, the epoch, what is drawn ...), the same in every process and run."""
    text = "\x1e".join(str(part) for part in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") >> 1


def example_key(features: dict) -> str:
    """What identifies one training example: its row number, else its text."""
    if EXAMPLE_INDEX in features:
        return str(int(features[EXAMPLE_INDEX]))
    return "\x1f".join(str(value) for key, value in sorted(features.items()) if isinstance(value, str))


@dataclass
class ExampleDraws:
    """Seeds of per-example generators: ``seed`` (``--data_seed``, else ``--seed``) and the current ``epoch``."""

    seed: int = 42
    epoch: int = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def seed_of(self, features: dict, stream: str) -> int:
        return derived_seed(self.seed, self.epoch, stream, example_key(features))

    def torch_generators(self, features: list, stream: str) -> list:
        """One ``torch.Generator`` per example (CPU), for tensor draws such as masks."""
        return [torch.Generator().manual_seed(self.seed_of(item, stream)) for item in features]

    def python_randoms(self, features: list, stream: str) -> list:
        """One ``random.Random`` per example, for text-level draws such as word choices."""
        return [random.Random(self.seed_of(item, stream)) for item in features]


__all__ = ["EXAMPLE_INDEX", "ExampleDraws", "derived_seed", "example_key"]
