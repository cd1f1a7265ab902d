"""csekit training and evaluation: Trainer subclasses, data loading, collators, evaluators and the CLI."""

from .collators import ContrastiveCollator
from .data import DataError, load_training_dataset, resolve_data_dir
from .sts import STS_TASKS, STSEvaluator
from .trainer import ContrastiveTrainer, SimCSETrainer

__all__ = [
    "STS_TASKS",
    "ContrastiveCollator",
    "ContrastiveTrainer",
    "DataError",
    "STSEvaluator",
    "SimCSETrainer",
    "load_training_dataset",
    "resolve_data_dir",
]
