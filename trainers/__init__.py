"""csekit training: a ``Trainer`` subclass per method computing its combined loss, collators, training data, the
recipe runner, and CLSR's cached-vector head trainer."""

if __name__ != "csekit.trainers":  # the checkout's folder imported by its own name (repository root on sys.path)
    raise ImportError(f"{__name__} is installed as csekit.trainers: import csekit (pip install -e . in a checkout)")

from .clsr import CLSRTrainer, CLSRTrainingArguments
from .cmlm_cse import CMLMCSECollator, CMLMCSETrainer
from .collators import ContrastiveCollator
from .data import load_training_dataset
from .embedding_cache import EmbeddingCache
from .simcse import SimCSETrainer
from .trainer import ContrastiveTrainer
from .whitenedcse import WhitenedCSETrainer

__all__ = [
    "CLSRTrainer",
    "CLSRTrainingArguments",
    "CMLMCSECollator",
    "CMLMCSETrainer",
    "ContrastiveCollator",
    "ContrastiveTrainer",
    "EmbeddingCache",
    "SimCSETrainer",
    "WhitenedCSETrainer",
    "load_training_dataset",
]
