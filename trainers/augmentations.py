"""Text augmentations of a positive view, shared by every method's collator (CMLM-CSE's Table 3 today).

An augmentation is a callable ``(sentences, view_index, randoms) -> sentences``: ``randoms`` holds one
``random.Random`` per sentence, drawn from that example's own generator (`randomness`), so a sentence is
augmented the same way in any batch, process or layout, and again after a resume. Collators call it on the views
they augment ([`ContrastiveCollator`][csekit.trainers.collators.ContrastiveCollator]'s ``augment``).
"""

from dataclasses import dataclass, field

from ..errors import DataError

CONTRASTIVE_AUGMENTATIONS = ("none", "word_repetition", "drop_one_word")


@dataclass
class WordRepetition:
    """Repeat ``rate`` of the words of each sentence in place (paper: "repeating 32% of the words").

    The sentence is split on whitespace; ``max(1, round(rate * n_words))`` distinct words are duplicated.
    """

    rate: float = 0.32

    def __call__(self, sentences: list, view_index: int, randoms: list) -> list:
        augmented = []
        for sentence, rng in zip(sentences, randoms, strict=True):
            words = sentence.split()
            repeated = set(rng.sample(range(len(words)), max(1, round(self.rate * len(words))))) if words else ()
            augmented.append(" ".join(f"{word} {word}" if i in repeated else word for i, word in enumerate(words)))
        return augmented


@dataclass
class DropOneWord:
    """Delete one random word of each sentence (sentences of one word are kept as they are)."""

    def __call__(self, sentences: list, view_index: int, randoms: list) -> list:
        augmented = []
        for sentence, rng in zip(sentences, randoms, strict=True):
            words = sentence.split()
            if len(words) > 1:
                del words[rng.randrange(len(words))]
            augmented.append(" ".join(words))
        return augmented


def contrastive_augmentation(name: str, word_repetition_rate: float = 0.32):
    """The collator ``augment`` callable for a Table 3 setting (``None`` for ``"none"``)."""
    if name not in CONTRASTIVE_AUGMENTATIONS:
        choices = ", ".join(CONTRASTIVE_AUGMENTATIONS)
        raise DataError(f"unknown contrastive augmentation {name!r}; choose one of {choices}")
    if name == "word_repetition":
        if not 0 < word_repetition_rate <= 1:
            raise DataError(f"word_repetition_rate must be in (0, 1], got {word_repetition_rate}")
        return WordRepetition(word_repetition_rate)
    return DropOneWord() if name == "drop_one_word" else None



@dataclass
class AugmentationArguments:
    """Recipe flags for the augmentation of the positive view (CMLM-CSE's Table 3): data settings, not model
    settings."""

    contrastive_augmentation: str = field(
        default="none",
        metadata={"help": f"Augmentation of the positive view (Table 3): {', '.join(CONTRASTIVE_AUGMENTATIONS)}."},
    )
    word_repetition_rate: float = field(
        default=0.32, metadata={"help": "Share of words repeated by --contrastive_augmentation word_repetition."}
    )


__all__ = ["AugmentationArguments", "CONTRASTIVE_AUGMENTATIONS", "DropOneWord", "WordRepetition",
           "contrastive_augmentation"]
