"""Load anything `csekit evaluate` can score as ``embed(sentences) -> vectors``: a csekit folder, a plain Hugging Face
encoder folder, a sentence-transformers folder (scored as sentence-transformers computes it: `csekit.st_folder`),
the embedded all-MiniLM-L6-v2, or a Hub id (through the Hugging Face cache, see [`csekit.loading`][csekit.loading])."""

from pathlib import Path
from typing import Optional

import torch
from transformers import AutoConfig, AutoModel

from ..errors import DataError
from ..loading import resolve_device, resolve_model_path
from ..modeling.encoding import encode_sentences
from ..modeling.pooler_types import DECODER_BACKBONES, causal_pooler_problem
from ..modeling.pooling import POOLER_TYPES, encoder_layer_states, pool, resolve_pooling_layers
from ..preflight import (
    PROBE_SENTENCE,
    check_model_inputs,
    is_csekit_model,
    load_tokenizer,
    prepare_decoder_tokenizer,
    read_model_config,
)
from ..st_folder import (
    adapter_base,
    describe_modules,
    is_st_folder,
    load_st_embedder,
    module_entries,
    pipeline_name,
    plain_max_length,
    plain_pipeline,
    transformer_folder,
)


class HFSentenceEncoder:
    """A plain Hugging Face encoder with a SimCSE-style pooler, for evaluation.

    ``cls`` uses the encoder's own ``pooler_output`` (linear + tanh over [CLS]), as SimCSE's ``evaluation.py``
    does; the other poolers are the shared ones from ``modeling.pooling``.
    """

    def __init__(self, model, tokenizer, pooler: str, pooling_layers: Optional[list] = None):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.pooler = pooler
        try:
            self.layers = resolve_pooling_layers(pooler, pooling_layers, model.config.num_hidden_layers)
        except ValueError as error:
            raise DataError(f"pooler {pooler!r}: {error}") from None

    def embed_batch(self, batch: dict) -> torch.Tensor:
        """``(batch, hidden)`` vectors of one tokenized batch, pooled with this encoder's pooler."""
        outputs, hidden_states, static = encoder_layer_states(self.model, self.layers, **batch)
        if self.pooler == "cls":
            if getattr(outputs, "pooler_output", None) is None:
                raise DataError("pooler 'cls' needs an encoder with a pooler layer; use cls_before_pooler or avg")
            return outputs.pooler_output
        return pool(self.pooler, self.layers, hidden_states, batch["attention_mask"], static)


def finite_embeddings(name: str, vectors):
    """``vectors`` when every entry is finite; a [`DataError`][csekit.evaluation.encoders.DataError] otherwise (every
    score from them would be NaN or
    meaningless, so none is reported)."""
    import numpy as np

    bad = int((~np.isfinite(vectors)).any(axis=-1).sum())
    if bad:
        raise DataError(f"{name}: {bad} of {len(vectors)} sentence embeddings hold NaN or infinite values; no score is "
                        "reported (check the model's weights and that it is a supported encoder)")
    return vectors


def load_embedder(
    name_or_path: str, pooler: Optional[str] = None, max_length: Optional[int] = None, batch_size: int = 128,
    device: Optional[str] = None, truncate_dim: Optional[int] = None, backend: str = "torch",
    pooling_layers: Optional[list] = None,
):
    """``(embed, info)``: ``embed(sentences) -> (n, d) numpy`` and a dict describing model and pooler.

    ``device``: where the model runs (see [`resolve_device`][csekit.evaluation.encoders.resolve_device]; default a GPU
    when there is one).
    ``truncate_dim``: score the first ``d`` coordinates of every vector (a Matryoshka size); checked against the
    model's vector size before anything is encoded. ``pooling_layers``: the layers of ``pooler="layers"`` on a
    transformers encoder. ``backend="onnx"``: ``name_or_path`` is a folder written by
    ``csekit export-onnx``, run through onnxruntime on CPU (its graph holds the pooling: ``pooler`` is refused).
    """
    if backend == "onnx":
        if pooler is not None:
            raise DataError("--pooler: an ONNX export's pooling is inside its graph")
        from ..publishing.onnx_export import load_onnx_embedder

        embed, info = load_onnx_embedder(name_or_path, batch_size, max_length)
    elif backend == "torch":
        embed, info = _load_embedder(name_or_path, pooler, max_length, batch_size, device, pooling_layers)
    else:
        raise DataError(f"unknown backend {backend!r}; choose torch or onnx")
    info = {**info, "dimension": int(embed([PROBE_SENTENCE]).shape[-1])}  # the vectors', whatever a config declares
    if truncate_dim is None:
        return embed, info
    if truncate_dim > info["dimension"]:
        raise DataError(f"--truncate-dim {truncate_dim}: {name_or_path} returns {info['dimension']}-dimensional "
                        "vectors")
    return (lambda sentences, prompt=None: embed(sentences, prompt)[:, :truncate_dim]), {**info,
                                                                                         "truncate_dim": truncate_dim}


def _load_embedder(name_or_path: str, pooler: Optional[str], max_length: Optional[int], batch_size: int,
                   device: Optional[str], pooling_layers: Optional[list] = None):
    device = resolve_device(device)
    if pooler is not None and pooler not in POOLER_TYPES:
        raise DataError(f"unknown pooler {pooler!r}; choose one of {', '.join(POOLER_TYPES)}")
    path = resolve_model_path(name_or_path, any_pipeline=pooler is None)
    if is_st_folder(path) and pooler is None and not is_csekit_model(path):
        # another library's pipeline, scored as sentence-transformers computes it (csekit.st_folder); csekit's own
        # folders (which carry those files too) are read by csekit's classes below
        return _load_st_folder(name_or_path, Path(path), max_length, batch_size, device)
    tokenizer = load_tokenizer(name_or_path, path)
    check_model_inputs(name_or_path, read_model_config(path), tokenizer, max_length, "--max-length")
    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as error:
        raise DataError(f"{name_or_path}: cannot read its config ({str(error).splitlines()[0]})") from None
    if config.model_type.startswith("csekit-"):
        overrides = {} if pooler is None else {"pooler_type": pooler}
        model = AutoModel.from_pretrained(path, local_files_only=True, dtype=torch.float32, **overrides)
        model = model.to(device).eval()
        model.tokenizer = tokenizer
        info = {"model": name_or_path, "pooler": model.config.pooler_type, "dimension": model.config.embedding_size}

        def embed(sentences, prompt=None):  # prompt: in place of the model's own (None: the model's)
            return finite_embeddings(name_or_path, model.encode(sentences, batch_size=batch_size,
                                                                max_length=max_length, prompt=prompt))

        return embed, info
    if config.model_type in DECODER_BACKBONES:  # pooled and tokenized as csekit trains a decoder
        problem = causal_pooler_problem(config.model_type, pooler)
        if problem:
            raise DataError(f"{name_or_path}: --pooler {pooler or 'cls (the default)'}: {problem}")
        prepare_decoder_tokenizer(tokenizer, config.model_type, pooler, name_or_path)
    return _load_plain(name_or_path, path, tokenizer, pooler or "cls", max_length, batch_size, device,
                       pooling_layers=pooling_layers)


def _load_plain(name_or_path: str, path, tokenizer, pooler: str, max_length: Optional[int], batch_size: int, device,
                info: Optional[dict] = None, pooling_layers: Optional[list] = None):
    """A transformers encoder at ``path`` pooled with ``pooler`` (and ``pooling_layers``, named in the record;
    ``info``: what the record says of a sentence-transformers pipeline this computes)."""
    # scored in float32 (SentEval's precision) whatever dtype the checkpoint was stored in
    model = AutoModel.from_pretrained(path, local_files_only=True, dtype=torch.float32).to(device)
    encoder = HFSentenceEncoder(model, tokenizer, pooler, pooling_layers)
    info = {**(info or {}), **({"pooling_layers": pooling_layers} if pooling_layers else {})}

    def embed(sentences, prompt=None):  # prompt: prepended to each text, as sentence-transformers prepends one
        texts = [prompt + sentence for sentence in sentences] if prompt else sentences
        vectors = encode_sentences(encoder.embed_batch, tokenizer, texts, batch_size, max_length, device)
        return finite_embeddings(name_or_path, vectors.numpy())

    return embed, {"model": name_or_path, "pooler": pooler, "dimension": model.config.hidden_size, **info}


def _load_st_folder(name_or_path: str, path: Path, max_length: Optional[int], batch_size: int, device):
    """A sentence-transformers folder of the dense family: ``SentenceTransformer(folder)``'s vectors, or without the
    library what csekit's own reader applies exactly (`csekit.st_folder.plain_pipeline`) or a one-line refusal."""
    entries = module_entries(path)
    backbone = transformer_folder(path, entries)
    if adapter_base(path, entries) is not None:  # (its backbone's config is the base model's, downloaded)
        backbone = None
    if backbone is not None and max_length is not None:  # a length past the position embeddings: one line
        check_model_inputs(name_or_path, read_model_config(backbone), load_tokenizer(name_or_path, backbone),
                           max_length, "--max-length")
    loaded = load_st_embedder(name_or_path, path, max_length, batch_size, device)
    if loaded is not None:
        embed, info = loaded
        return (lambda sentences, prompt=None: finite_embeddings(name_or_path, embed(sentences, prompt))), info
    pooler = plain_pipeline(name_or_path, path, entries)  # a root Transformer, or a one-line refusal
    tokenizer = load_tokenizer(name_or_path, path)
    check_model_inputs(name_or_path, read_model_config(path), tokenizer, max_length, "--max-length")
    max_length = max_length or plain_max_length(path, tokenizer)
    modules = describe_modules(path, entries)
    info = {"pooler": pipeline_name(modules), "modules": modules, "prompt": None, "max_length": max_length}
    return _load_plain(name_or_path, path, tokenizer, pooler, max_length, batch_size, device, info)


__all__ = ["HFSentenceEncoder", "finite_embeddings", "load_embedder"]
