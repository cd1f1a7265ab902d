"""csekit models. Importing this package registers every config/model with ``AutoConfig``/``AutoModel`` and marks
them for ``auto_map`` + code export, so saved folders also load with ``trust_remote_code=True`` without csekit."""

if __name__ != "csekit.modeling":  # the checkout's folder imported by its own name (repository root on sys.path)
    raise ImportError(f"{__name__} is installed as csekit.modeling: import csekit (pip install -e . in a checkout)")

from transformers import AutoConfig, AutoModel

from .configuration_clsr import CLSRConfig
from .configuration_cmlm_cse import CMLMCSEConfig
from .configuration_encoder import SentenceEncoderConfig
from .configuration_simcse import SimCSEConfig
from .configuration_whitenedcse import WhitenedCSEConfig
from .losses import info_nce_loss, nt_xent_loss
from .modeling_clsr import CLSRModel
from .modeling_cmlm_cse import CMLMCSEForPreTraining, CMLMCSEModel
from .modeling_encoder import SentenceEmbeddingOutput, SentenceEncoderPreTrainedModel
from .modeling_simcse import SimCSEModel
from .modeling_whitenedcse import WhitenedCSEModel
from .pooling import POOLER_TYPES

MODEL_CLASSES = (SimCSEModel, CLSRModel, WhitenedCSEModel, CMLMCSEModel)

for _model_class in MODEL_CLASSES:
    _config_class = _model_class.config_class
    AutoConfig.register(_config_class.model_type, _config_class, exist_ok=True)
    AutoModel.register(_config_class, _model_class, exist_ok=True)
    _config_class.register_for_auto_class()
    _model_class.register_for_auto_class("AutoModel")

__all__ = [
    "CLSRConfig",
    "CLSRModel",
    "CMLMCSEConfig",
    "CMLMCSEForPreTraining",
    "CMLMCSEModel",
    "MODEL_CLASSES",
    "POOLER_TYPES",
    "SentenceEmbeddingOutput",
    "SentenceEncoderConfig",
    "SentenceEncoderPreTrainedModel",
    "SimCSEConfig",
    "SimCSEModel",
    "WhitenedCSEConfig",
    "WhitenedCSEModel",
    "info_nce_loss",
    "nt_xent_loss",
]
