"""csekit models: configs, models, poolers and losses.

The names below are imported on first use (PEP 562), so reading the pooler names costs no torch. ``import csekit``
registers every config/model with ``AutoConfig``/``AutoModel`` (:func:`register_auto_classes`, run by
:mod:`csekit.auto_registration` once transformers' Auto classes are imported, or on first use of a class here) and
marks them for ``auto_map`` + code export, so saved folders also load with ``trust_remote_code=True`` without csekit.
"""

if __name__ != "csekit.modeling":  # the checkout's folder imported by its own name (repository root on sys.path)
    raise ImportError(f"{__name__} is installed as csekit.modeling: import csekit (pip install -e . in a checkout)")

from importlib import import_module

from .pooler_types import POOLER_TYPES

_EXPORTS = {
    "CLSRConfig": "configuration_clsr",
    "CMLMCSEConfig": "configuration_cmlm_cse",
    "SentenceEncoderConfig": "configuration_encoder",
    "SimCSEConfig": "configuration_simcse",
    "WhitenedCSEConfig": "configuration_whitenedcse",
    "info_nce_loss": "losses",
    "nt_xent_loss": "losses",
    "CLSRModel": "modeling_clsr",
    "CMLMCSEForPreTraining": "modeling_cmlm_cse",
    "CMLMCSEModel": "modeling_cmlm_cse",
    "SentenceEmbeddingOutput": "modeling_encoder",
    "SentenceEncoderPreTrainedModel": "modeling_encoder",
    "SimCSEModel": "modeling_simcse",
    "WhitenedCSEModel": "modeling_whitenedcse",
}
_MODEL_CLASSES = ("SimCSEModel", "CLSRModel", "WhitenedCSEModel", "CMLMCSEModel")  # the classes AutoModel maps to
_registered = False


def __getattr__(name):
    if name == "MODEL_CLASSES":
        value = tuple(__getattr__(class_name) for class_name in _MODEL_CLASSES)
    elif name in _EXPORTS:
        value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
        register_auto_classes()  # a class in hand is a class transformers can find, and save with its code
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def register_auto_classes() -> None:
    """Register every csekit config with ``AutoConfig`` and model with ``AutoModel``, and mark them for code export
    (``auto_map`` in saved configs). Idempotent."""
    global _registered
    if _registered:
        return
    _registered = True
    from transformers import AutoConfig, AutoModel

    for model_class in __getattr__("MODEL_CLASSES"):
        config_class = model_class.config_class
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
        AutoModel.register(config_class, model_class, exist_ok=True)
        config_class.register_for_auto_class()
        model_class.register_for_auto_class("AutoModel")


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS) | {"MODEL_CLASSES"})


__all__ = ["MODEL_CLASSES", "POOLER_TYPES", "register_auto_classes", *sorted(_EXPORTS)]
