"""csekit training: the shared ``Trainer`` subclass, collators, training data, augmentations, the recipe's flags
(:mod:`.arguments`) and run (:mod:`.runner`). Each method's trainer (and its other classes) is exported by name from
the method registry (:data:`csekit.methods.METHODS`), imported on first use."""

if __name__ != "csekit.trainers":  # the checkout's folder imported by its own name (repository root on sys.path)
    raise ImportError(f"{__name__} is installed as csekit.trainers: import csekit (pip install -e . in a checkout)")

from ..methods import METHODS, load_object
from .collators import ContrastiveCollator
from .data import load_training_dataset
from .embedding_cache import EmbeddingCache
from .trainer import ContrastiveTrainer


def _method_classes() -> dict:
    """``{name: "module:Name"}`` of the registered methods' classes that live in this package."""
    return {name: reference for method in METHODS.values() for name, reference in method.classes.items()
            if reference.startswith(f"{__name__}.")}


def __getattr__(name):
    if name not in _method_classes():
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = globals()[name] = load_object(_method_classes()[name])
    return value


def __dir__():
    return sorted(set(globals()) | set(_method_classes()))


__all__ = ["ContrastiveCollator", "ContrastiveTrainer", "EmbeddingCache", "load_training_dataset",
           *sorted(_method_classes())]
