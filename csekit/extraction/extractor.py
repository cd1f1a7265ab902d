"""Training-free sentence-embedding extraction (Stankevičius & Lukoševičius 2024) with a hidden-state cache.

One extraction setting ("cell") is ``model x layers x template x aggregation x post-processing``:

* model: a transformer (csekit folder, HF folder, ``all-MiniLM-L6-v2``, ``random-bert``: bert-base-uncased
  architecture with seeded random weights) or a static model (``re``, ``avg:MODEL``, ``MODEL+avg:W``), see
  :func:`load_source` and ``static_models.py``;
* layers: ``last``, ``first_last`` (1 + last), ``1_2_last`` or ``+``-joined indices (``-1`` static token embeddings,
  ``0`` embedding output, ``i`` block i), see :func:`resolve_layers`;
* template: ``none`` or T0-T4 (``prompts.py``);
* aggregation: ``avg``, ``idf-w`` (idf of the reference corpus), ``idf-t`` (idf of the target texts), ``no-biases``
  (drop frequent/punctuation/subword tokens), ``mask`` (mean of the template's mask positions);
* post-processing: a chain from ``postprocessing.py``, fitted on the target texts or (``^W``) the reference corpus.

Performance: the token states of ``(model, texts, template, layers)`` are computed once by :class:`HiddenStateCache`
and re-weighted per aggregation, so a whole aggregation x post-processing grid costs one encoding pass per dataset.
"""

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import AutoConfig, AutoModel, AutoTokenizer

from ..data import read_reference_corpus, resolve_data_file
from ..errors import DataError
from ..loading import resolve_device, resolve_model_path
from ..modeling.encoding import deduplicate
from ..modeling.modeling_encoder import build_encoder
from ..modeling.pooling import STATIC_EMBEDDINGS_LAYER, masked_mean, mean_layer_states
from .idf import bias_token_table, inverse_document_frequency, normalized_token_weights, tokenize_ids
from .postprocessing import PostProcessingChain
from .prompts import mask_token_weights, resolve_template
from .static_models import AveragedStaticSource, MixedSource, RandomEmbeddingSource

LAYER_PRESETS = ("last", "first_last", "1_2_last")
AGGREGATIONS = ("avg", "idf-w", "idf-t", "no-biases", "mask")
DEFAULT_REFERENCE = "wiki/wikitext-2-raw/wiki.test.raw"
DEFAULT_AVG_CORPUS = ("wiki/wikitext-2-raw/wiki.test.raw", "wiki/wiki1m_for_simcse.head11914.txt")
BERT_TOKENIZER_DIR = "bert-base-uncased-tokenizer"


# ------------------------------------------------------------------------------------------------ models
def bert_tokenizer_path(data_dir) -> Path:
    """The bert-base-uncased tokenizer + config folder: ``$CSEKIT_BERT_TOKENIZER``, else ``models/`` next to the
    data folder (the shared layout)."""
    candidate = Path(os.environ.get("CSEKIT_BERT_TOKENIZER") or Path(data_dir).parent / "models" / BERT_TOKENIZER_DIR)
    if not (candidate / "config.json").is_file():
        raise DataError(f"{candidate}: no bert-base-uncased tokenizer/config folder; set CSEKIT_BERT_TOKENIZER")
    return candidate


class TransformerSource:
    """Token states of a Hugging Face encoder for any layer list (``-1`` = static word embeddings).

    The model runs on its own device; states come back as float32 on the CPU, where the cache keeps them.
    """

    uses_layers = True

    def __init__(self, name: str, model, tokenizer):
        self.name = name
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.num_hidden_layers = model.config.num_hidden_layers

    def token_states(self, batch: dict, layers: Sequence[int]) -> torch.Tensor:
        """``(batch, seq_len, hidden)`` states averaged over ``layers``."""
        batch = {key: value.to(self.model.device) for key, value in batch.items()}
        with torch.inference_mode():
            outputs = self.model(**batch, output_hidden_states=True)
            static = None
            if STATIC_EMBEDDINGS_LAYER in layers:
                static = self.model.get_input_embeddings()(batch["input_ids"])
            return mean_layer_states(layers, outputs.hidden_states, static).float().cpu()

    def token_mask(self, input_ids: torch.Tensor) -> Optional[torch.Tensor]:
        return None


def load_transformer(name: str, data_dir, seed: int = 42, device: Optional[str] = None) -> TransformerSource:
    """A csekit folder (its backbone), an HF folder, ``all-MiniLM-L6-v2``, or ``random-bert``, on ``device``
    (:func:`~csekit.loading.resolve_device`)."""
    device = resolve_device(device)
    if name == "random-bert":
        folder = bert_tokenizer_path(data_dir)
        torch.manual_seed(seed)  # drawn on the CPU, so the weights are the same whatever the device
        model = build_encoder(AutoConfig.from_pretrained(folder, local_files_only=True)).to(device)
        return TransformerSource(f"random-bert(seed={seed})", model, AutoTokenizer.from_pretrained(folder))
    path = resolve_model_path(name)
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    if config.model_type.startswith("csekit-"):
        model = AutoModel.from_pretrained(path, local_files_only=True).encoder
    else:
        model = build_encoder(None, path)
    return TransformerSource(name, model.to(device), tokenizer)


def load_source(
    spec: str, data_dir, avg_corpus: Optional[Sequence[str]] = None, seed: int = 42,
    averaged_sources: Optional[dict] = None, device: Optional[str] = None,
):
    """A token-state source from a model spec: ``re``, ``random-bert``, ``avg:MODEL``, ``MODEL+avg:W`` or a model.

    ``averaged_sources`` (a dict the caller keeps) shares one Avg model per base model between specs, so
    ``avg:M`` and every ``M+avg:W`` of a grid average the corpus once.
    """
    def averaged(name):
        if averaged_sources is not None and name in averaged_sources:
            return averaged_sources[name]
        corpus = avg_corpus
        if corpus is None:
            corpus = [s for p in DEFAULT_AVG_CORPUS for s in read_reference_corpus(resolve_data_file(p, data_dir))]
        source = AveragedStaticSource(load_transformer(name, data_dir, seed, device), corpus)
        if averaged_sources is not None:
            averaged_sources[name] = source
        return source

    if spec == "re":
        return RandomEmbeddingSource(AutoTokenizer.from_pretrained(bert_tokenizer_path(data_dir)), seed=seed)
    if spec.startswith("avg:"):
        return averaged(spec[len("avg:"):])
    match = re.fullmatch(r"(.+)\+avg:(-?[0-9.]+)", spec)
    if match:
        static = averaged(match.group(1))
        return MixedSource(static.source, static, float(match.group(2)))
    return load_transformer(spec, data_dir, seed, device)


def resolve_layers(spec: str, num_hidden_layers: int) -> list:
    """``last`` / ``first_last`` / ``1_2_last`` or ``+``-joined indices (``last`` allowed) -> absolute layers."""
    presets = {"last": [num_hidden_layers], "first_last": [1, num_hidden_layers], "1_2_last": [1, 2, num_hidden_layers]}
    if spec in presets:
        return presets[spec]
    try:
        layers = [num_hidden_layers if part == "last" else int(part) for part in spec.split("+")]
    except ValueError:
        raise DataError(f"bad layer spec {spec!r}: use {', '.join(LAYER_PRESETS)} or '+'-joined indices") from None
    bad = [layer for layer in layers if not STATIC_EMBEDDINGS_LAYER <= layer <= num_hidden_layers]
    if bad:
        raise DataError(
            f"layer(s) {bad} out of range for {num_hidden_layers} layers "
            f"(-1 static, 0 embeddings, 1..{num_hidden_layers})"
        )
    return layers


# ------------------------------------------------------------------------------------------------ hidden-state cache
@dataclass
class EncodedTexts:
    """Token states of a list of texts, as length-sorted padded batches: ``rows`` (B,) positions in the input list,
    ``input_ids``/``attention_mask`` (B, T), ``states`` (B, T, hidden)."""

    count: int
    batches: list = field(default_factory=list)


def texts_fingerprint(texts: Sequence[str]) -> str:
    digest = hashlib.sha1()
    for text in texts:
        digest.update(text.encode("utf-8") + b"\0")
    return digest.hexdigest()[:16]


class HiddenStateCache:
    """Token states per ``(model, texts, template, layers, max_length)``, in memory and optionally on disk.

    ``enabled=False`` re-encodes on every request (the baseline of ``benchmarks/extraction_cache.py``). In memory,
    :meth:`release` drops every entry except those of kept texts (the reference corpus), so a grid over many datasets
    holds one dataset at a time; with ``directory`` set, entries also go to ``.pt`` files and survive runs.
    """

    def __init__(self, directory: Optional[str] = None, enabled: bool = True):
        self.directory = Path(directory) if directory else None
        self.enabled = enabled
        self.entries = {}
        self.encodings = 0

    def get(self, key: tuple, compute: Callable[[], EncodedTexts]) -> EncodedTexts:
        if not self.enabled:
            self.encodings += 1
            return compute()
        if key in self.entries:
            return self.entries[key]
        path = None
        if self.directory is not None:
            path = self.directory / (hashlib.sha1(repr(key).encode()).hexdigest()[:20] + ".pt")
            if path.is_file():
                self.entries[key] = torch.load(path, weights_only=False)
                return self.entries[key]
        self.encodings += 1
        self.entries[key] = compute()
        if path is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            torch.save(self.entries[key], path.with_suffix(".tmp"))
            path.with_suffix(".tmp").replace(path)  # never leave a half-written cache file
        return self.entries[key]

    def release(self, keep_fingerprints: Sequence[str] = ()) -> None:
        self.entries = {key: value for key, value in self.entries.items() if key[1] in keep_fingerprints}


def encode_token_states(source, texts: Sequence[str], layers, max_length, batch_size: int) -> EncodedTexts:
    """Length-sorted batched token states of ``texts`` (already templated)."""
    tokenizer = source.tokenizer
    truncation = dict(truncation=True, max_length=max_length) if max_length else dict(truncation=True)
    lengths = np.asarray([len(ids) for ids in tokenize_ids(tokenizer, texts, max_length)])
    order = np.argsort(-lengths, kind="stable")
    encoded = EncodedTexts(len(texts))
    starts = range(0, len(order), batch_size)
    for start in tqdm(starts, desc=f"Encoding {source.name}", disable=len(starts) < 10):
        rows = order[start : start + batch_size]
        batch = dict(tokenizer([texts[i] for i in rows], padding=True, return_tensors="pt", **truncation))
        states = source.token_states(batch, layers)
        encoded.batches.append((torch.as_tensor(rows), batch["input_ids"], batch["attention_mask"], states))
    return encoded


# ------------------------------------------------------------------------------------------------ one extraction cell
@dataclass
class ExtractionSetting:
    """One cell of the grid (everything but the model)."""

    layers: str = "last"
    template: str = "none"
    aggregation: str = "avg"
    postprocessing: PostProcessingChain = field(default_factory=lambda: PostProcessingChain([]))

    def validate(self):
        if self.aggregation not in AGGREGATIONS:
            raise DataError(f"unknown aggregation {self.aggregation!r}; choose from {', '.join(AGGREGATIONS)}")
        template = resolve_template(self.template)
        if self.aggregation == "mask" and (template is None or template.mask_count == 0):
            raise DataError("aggregation 'mask' needs a template with [MASK] slots (--templates T0..T4)")


class Extractor:
    """Turns a source + :class:`ExtractionSetting` into ``embed(texts) -> (n, d)`` for the evaluators.

    Args:
        reference: reference-corpus sentences (idf^W, most-frequent biases, ``^W`` post-processing).
        cache: shared :class:`HiddenStateCache`.
    """

    def __init__(self, reference: Sequence[str], cache: HiddenStateCache, max_length=None, batch_size: int = 64):
        self.reference = list(reference)
        self.reference_fingerprint = texts_fingerprint(self.reference)
        self.cache = cache
        self.max_length = max_length
        self.batch_size = batch_size
        self._tables = {}

    def _table(self, kind: str, tokenizer, texts=None) -> torch.Tensor:
        """Per-token-id weights. idf^W and bias tables depend only on the tokenizer and reference corpus, so they
        are computed once; idf^T depends on the target texts and is recomputed per dataset."""
        key = (kind, tokenizer.name_or_path, len(tokenizer))
        if kind == "idf-t":
            token_ids = tokenize_ids(tokenizer, texts, self.max_length)
            return torch.from_numpy(inverse_document_frequency(token_ids, len(tokenizer)))
        if key not in self._tables:
            reference_ids = tokenize_ids(tokenizer, self.reference, self.max_length)
            table = (
                inverse_document_frequency(reference_ids, len(tokenizer))
                if kind == "idf-w"
                else bias_token_table(tokenizer, reference_ids)
            )
            self._tables[key] = torch.from_numpy(table)
        return self._tables[key]

    def token_states(self, source, texts: list, setting: ExtractionSetting) -> EncodedTexts:
        layers = resolve_layers(setting.layers, source.num_hidden_layers) if source.uses_layers else [0]
        template = resolve_template(setting.template)
        filled = texts if template is None else template.fill(texts, source.tokenizer.mask_token or "")
        key = (source.name, texts_fingerprint(texts), setting.template, tuple(layers), self.max_length)
        encode = lambda: encode_token_states(source, filled, layers, self.max_length, self.batch_size)  # noqa: E731
        return self.cache.get(key, encode)

    def aggregate(self, source, texts: list, setting: ExtractionSetting, idf_texts: list) -> np.ndarray:
        """``(n, hidden)`` pooled vectors of one source (no post-processing)."""
        encoded = self.token_states(source, texts, setting)
        tokenizer = source.tokenizer
        template = resolve_template(setting.template)
        if setting.aggregation in ("idf-w", "no-biases"):
            table = self._table("idf-w" if setting.aggregation == "idf-w" else "biases", tokenizer)
        elif setting.aggregation == "idf-t":
            filled = idf_texts if template is None else template.fill(idf_texts, tokenizer.mask_token or "")
            table = self._table("idf-t", tokenizer, filled)
        output = None
        for rows, input_ids, attention_mask, states in encoded.batches:
            if setting.aggregation == "avg":
                weights = attention_mask.float()
            elif setting.aggregation == "mask":
                weights = mask_token_weights(input_ids, tokenizer, template.mask_count)
            else:
                weights = normalized_token_weights(input_ids, attention_mask, table)
            known = source.token_mask(input_ids)
            if known is not None:
                weights = weights * known
            pooled = masked_mean(states, attention_mask * weights)
            if output is None:
                output = torch.empty(encoded.count, pooled.shape[-1])
            output[rows] = pooled
        return output.numpy()

    def embed(self, source, texts: Sequence[str], setting: ExtractionSetting) -> np.ndarray:
        """Sentence embeddings of ``texts`` (the whole target dataset) for one cell, post-processing fitted here.

        A text given several times (an STS sentence in several pairs) is encoded once but counts once per occurrence
        in the post-processing fit and in idf^T, as in SentEval's ``prepare``.
        """
        texts = list(texts)
        distinct, positions = deduplicate(texts)

        def pooled(sentences):
            parts = getattr(source, "parts", ((source, 1.0),))
            # idf^T always comes from the target texts, also when pooling the reference corpus for ^W fitting
            return sum(weight * self.aggregate(part, sentences, setting, texts) for part, weight in parts)

        reference = pooled(self.reference) if setting.postprocessing.needs_reference else None
        return setting.postprocessing.fit_transform(pooled(distinct)[positions], reference)

    def embedder(self, source, setting: ExtractionSetting) -> Callable[[list], np.ndarray]:
        return lambda texts: self.embed(source, texts, setting)


def load_reference(path: Optional[str], data_dir) -> list:
    return read_reference_corpus(resolve_data_file(path or DEFAULT_REFERENCE, str(data_dir) if data_dir else None))


__all__ = [
    "AGGREGATIONS",
    "LAYER_PRESETS",
    "ExtractionSetting",
    "Extractor",
    "HiddenStateCache",
    "TransformerSource",
    "load_reference",
    "load_source",
    "resolve_layers",
]
