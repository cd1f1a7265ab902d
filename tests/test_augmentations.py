"""trainers/augmentations.py: word repetition and word deletion (CMLM-CSE's Table 3), drawn from a given generator."""

import random

import pytest

from csekit.errors import DataError
from csekit.trainers.augmentations import DropOneWord, WordRepetition, contrastive_augmentation

WORDS = "one two three four five six seven eight nine ten eleven twelve thirteen".split()


def test_word_repetition_duplicates_the_rate_of_the_words_in_place():
    repeated = WordRepetition(0.32)([" ".join(WORDS)], 1, [random.Random(0)])[0].split()
    assert len(repeated) == len(WORDS) + round(0.32 * len(WORDS))
    assert [w for i, w in enumerate(repeated) if i == 0 or repeated[i - 1] != w] == WORDS  # in-place duplicates


def test_drop_one_word_deletes_one_word_and_keeps_a_one_word_sentence():
    dropped = DropOneWord()([" ".join(WORDS), "single"], 1, [random.Random(0), random.Random(1)])
    assert len(dropped[0].split()) == len(WORDS) - 1 and set(dropped[0].split()) < set(WORDS)
    assert dropped[1] == "single"


def test_the_draws_are_the_generators_alone():
    """The same generator state gives the same augmentation, whatever the other sentences of the call."""
    alone = WordRepetition(0.32)([" ".join(WORDS)], 1, [random.Random(5)])
    beside = WordRepetition(0.32)(["a b c", " ".join(WORDS)], 1, [random.Random(1), random.Random(5)])
    assert beside[1] == alone[0]
    assert DropOneWord()([" ".join(WORDS)], 1, [random.Random(5)]) == DropOneWord()(
        ["x y", " ".join(WORDS)], 1, [random.Random(2), random.Random(5)])[1:]


def test_unknown_augmentation_and_bad_rate_are_refused():
    with pytest.raises(DataError, match="unknown contrastive augmentation"):
        contrastive_augmentation("shuffle")
    with pytest.raises(DataError, match="word_repetition_rate must be in"):
        contrastive_augmentation("word_repetition", 0.0)
