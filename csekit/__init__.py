"""csekit: train, evaluate and publish contrastive sentence-embedding models in the Hugging Face ecosystem.

    import csekit                        # csekit's configs and models are found by AutoConfig / AutoModel
    from transformers import AutoModel
    model = AutoModel.from_pretrained("outputs/simcse")        # or a Hub id
    vectors = model.encode(["A man plays a guitar."], normalize=True)

``import csekit`` itself loads neither torch nor transformers: the registration with the Auto classes runs when
transformers' Auto classes are imported (`csekit.auto_registration`), and every name below is imported on first
use (PEP 562), so the ``csekit`` command line starts in a fraction of a second.

Sub-packages: ``csekit.modeling`` (configs, models, poolers, losses), ``csekit.trainers`` (one Trainer per method,
the training stages of a run), ``csekit.recipes`` (``accelerate launch -m csekit.recipes.simcse``),
``csekit.evaluation``, ``csekit.extraction``, ``csekit.publishing``, ``csekit.recipe_run`` (a recipe's run, stage by
stage) and the ``csekit`` command line (``csekit.cli``).
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version

from .auto_registration import register_when_transformers_auto_is_imported
from .errors import DataError

try:
    __version__ = version("csekit")
except PackageNotFoundError:  # imported from a source tree that was not installed
    __version__ = "unknown"

register_when_transformers_auto_is_imported()

# name -> the module that defines it, imported on first access: the shared names here, every method's classes from
# the method registry (csekit.methods)
_SHARED = {
    **dict.fromkeys(("SentenceEncoderConfig", "SentenceEncoderPreTrainedModel"), "csekit.modeling"),
    **dict.fromkeys(("ContrastiveCollator", "ContrastiveTrainer"), "csekit.trainers"),
    **dict.fromkeys(("STS_TASKS", "STSEvaluator", "load_embedder"), "csekit.evaluation"),
}


def _lazy() -> dict:
    from .methods import classes_in

    return {**_SHARED, **{name: reference.partition(":")[0] for name, reference in classes_in().items()}}


def __getattr__(name):
    module = _lazy().get(name)
    if module is None:
        raise AttributeError(f"module 'csekit' has no attribute {name!r}")
    value = globals()[name] = getattr(import_module(module), name)
    return value


def __dir__():
    return sorted(set(globals()) | set(_lazy()))


__all__ = ["DataError", *sorted(_lazy())]
