"""csekit models: configs, models, poolers and losses.

The names below are imported on first use (PEP 562), so reading the pooler names costs no torch. The methods' classes
come from the method registry ([`csekit.methods.METHODS`][csekit.methods.METHODS]): this module keeps no list of
methods. ``import
csekit`` registers every method's config/model with ``AutoConfig``/``AutoModel`` (`register_auto_classes`, run
by `csekit.auto_registration` once transformers' Auto classes are imported, or on first use of a class here) and
marks them for ``auto_map`` + code export, so saved folders also load with ``trust_remote_code=True`` without csekit.

Only this package file reads the registry; the configuration and modeling files import nothing outside this folder
(``trust_remote_code`` copies them into a folder of their own).
"""

if __name__ != "csekit.modeling":  # the checkout's folder imported by its own name (repository root on sys.path)
    raise ImportError(f"{__name__} is installed as csekit.modeling: import csekit (pip install -e . in a checkout)")

from importlib import import_module

from ..methods import METHODS, classes_in, load_object
from .pooler_types import POOLER_TYPES

# the names every method shares (the methods' own classes: the registry)
_SHARED = {
    "SentenceEncoderConfig": "configuration_encoder",
    "info_nce_loss": "losses",
    "nt_xent_loss": "losses",
    "SentenceEmbeddingOutput": "modeling_encoder",
    "SentenceEncoderForTraining": "modeling_encoder",
    "SentenceEncoderPreTrainedModel": "modeling_encoder",
}
_registered = False
_configs_registered = False


def __getattr__(name):
    if name == "MODEL_CLASSES":  # the classes AutoModel maps to, one per registered method
        value = tuple(method.model_class for method in METHODS.values())
    elif name in _SHARED:
        value = getattr(import_module(f".{_SHARED[name]}", __name__), name)
    elif name in classes_in(__name__):
        value = load_object(classes_in(__name__)[name])
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name != "MODEL_CLASSES":
        globals()[name] = value
    register_auto_classes()  # a class in hand is a class transformers can find, and save with its code
    return value


def register_method(method) -> None:
    """Register one method's config with ``AutoConfig`` and model with ``AutoModel``, marked for code export
    (``auto_map`` in saved configs). Idempotent."""
    from transformers import AutoConfig, AutoModel

    model_class = method.model_class
    config_class = model_class.config_class
    AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
    AutoModel.register(config_class, model_class, exist_ok=True)
    config_class.register_for_auto_class()
    model_class.register_for_auto_class("AutoModel")


def register_method_config(method) -> None:
    """Register one method's config with ``AutoConfig`` (marked for code export). Idempotent."""
    from transformers import AutoConfig

    config_class = method.config_class
    AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
    config_class.register_for_auto_class()


def register_auto_configs() -> None:
    """Register every registered method's config with ``AutoConfig`` only: reading a csekit ``config.json`` (a model
    card, a check) then needs none of the model code, nor transformers' ``modeling_utils``, seconds of imports.
    Idempotent; `register_auto_classes` registers the models too."""
    global _configs_registered
    if _configs_registered or _registered:
        return
    _configs_registered = True
    for method in METHODS.values():
        register_method_config(method)


def register_auto_classes() -> None:
    """Register every registered method (`register_method`); methods registered later are registered as they
    arrive ([`csekit.methods.register`][csekit.methods.register]). Idempotent."""
    global _registered
    if _registered:
        return
    _registered = True
    for method in METHODS.values():
        register_method(method)


def __dir__():
    return sorted(set(globals()) | set(_SHARED) | set(classes_in(__name__)) | {"MODEL_CLASSES"})


__all__ = ["MODEL_CLASSES", "POOLER_TYPES", "register_auto_classes", "register_auto_configs", "register_method",
           "register_method_config",
           *sorted(_SHARED), *sorted(classes_in(__name__))]
