"""csekit training and evaluation: Trainer subclasses, data loading, collators, evaluators and the CLI."""

from .clsr import CLSRTrainer
from .cmlm_cse import CMLMCSECollator, CMLMCSETrainer
from .collators import ContrastiveCollator
from .data import DataError, load_training_dataset, resolve_data_dir
from .embedding_cache import EmbeddingCache
from .sts import STS_TASKS, STSEvaluator
from .trainer import ContrastiveTrainer, SimCSETrainer
from .whitenedcse import WhitenedCSETrainer

__all__ = [
    "STS_TASKS",
    "CLSRTrainer",
    "CMLMCSECollator",
    "CMLMCSETrainer",
    "ContrastiveCollator",
    "ContrastiveTrainer",
    "DataError",
    "EmbeddingCache",
    "STSEvaluator",
    "SimCSETrainer",
    "WhitenedCSETrainer",
    "load_training_dataset",
    "resolve_data_dir",
]
