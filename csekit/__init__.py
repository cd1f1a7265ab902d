"""csekit: train, evaluate and publish contrastive sentence-embedding models in the Hugging Face ecosystem.

    import csekit                        # registers csekit's configs and models with AutoConfig / AutoModel
    from transformers import AutoModel
    model = AutoModel.from_pretrained("outputs/simcse")        # or a Hub id
    vectors = model.encode(["A man plays a guitar."], normalize=True)

The models and configs are imported with the package (they are what the registration needs). Everything else is
imported on first use, so ``import csekit`` costs what transformers costs: the trainers, the evaluation suites,
extraction and publishing (scikit-learn, matplotlib, datasets, sentence-transformers) load only when touched.

Sub-packages: ``csekit.modeling`` (configs, models, poolers, losses), ``csekit.trainers`` (one Trainer per method,
the recipe runner), ``csekit.recipes`` (``accelerate launch -m csekit.recipes.simcse``), ``csekit.evaluation``,
``csekit.extraction``, ``csekit.publishing``, and the ``csekit`` command line (``csekit.cli``).
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version

from .errors import DataError
from .modeling import (
    CLSRConfig,
    CLSRModel,
    CMLMCSEConfig,
    CMLMCSEForPreTraining,
    CMLMCSEModel,
    SentenceEncoderConfig,
    SentenceEncoderPreTrainedModel,
    SimCSEConfig,
    SimCSEModel,
    WhitenedCSEConfig,
    WhitenedCSEModel,
)

try:
    __version__ = version("csekit")
except PackageNotFoundError:  # imported from a source tree that was not installed
    __version__ = "unknown"

# name -> the sub-package that defines it, imported on first access (PEP 562)
_LAZY = {
    **dict.fromkeys(
        ("CLSRTrainer", "CMLMCSETrainer", "ContrastiveCollator", "ContrastiveTrainer", "SimCSETrainer",
         "WhitenedCSETrainer"),
        "csekit.trainers",
    ),
    **dict.fromkeys(("STS_TASKS", "STSEvaluator", "load_embedder"), "csekit.evaluation"),
}


def __getattr__(name):
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'csekit' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "CLSRConfig",
    "CLSRModel",
    "CMLMCSEConfig",
    "CMLMCSEForPreTraining",
    "CMLMCSEModel",
    "DataError",
    "SentenceEncoderConfig",
    "SentenceEncoderPreTrainedModel",
    "SimCSEConfig",
    "SimCSEModel",
    "WhitenedCSEConfig",
    "WhitenedCSEModel",
    *sorted(_LAZY),
]
