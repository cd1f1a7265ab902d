"""csekit training: the shared ``Trainer`` subclass, collators, training data, augmentations, the recipe's flags
([`arguments`][csekit.trainers.arguments]) and the training stages of a run ([`runner`][csekit.trainers.runner]).
Each method's trainer (and its other classes) is exported by name from
the method registry ([`csekit.methods.METHODS`][csekit.methods.METHODS]), imported on first use."""

if __name__ != "csekit.trainers":  # the checkout's folder imported by its own name (repository root on sys.path)
    raise ImportError(f"{__name__} is installed as csekit.trainers: import csekit (pip install -e . in a checkout)")

from ..methods import classes_in, load_object
from .arguments import CSETrainingArguments
from .collators import ContrastiveCollator
from .data import load_training_dataset
from .embedding_cache import EmbeddingCache
from .trainer import ContrastiveTrainer


def __getattr__(name):
    if name not in classes_in(__name__):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = globals()[name] = load_object(classes_in(__name__)[name])
    return value


def __dir__():
    return sorted(set(globals()) | set(classes_in(__name__)))


__all__ = ["CSETrainingArguments", "ContrastiveCollator", "ContrastiveTrainer", "EmbeddingCache",
           "load_training_dataset", *sorted(classes_in(__name__))]
