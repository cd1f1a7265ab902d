"""Training-free sentence-embedding extraction (Stankevičius & Lukoševičius 2024) with a hidden-state cache.

One extraction setting ("cell") is ``model x layers x template x aggregation x post-processing``:

* model: a transformer (csekit folder, HF folder, ``all-MiniLM-L6-v2``, ``random-bert``: bert-base-uncased
  architecture with seeded random weights) or a static model (``re``, ``avg:MODEL``, ``MODEL+avg:W``), see
  [`load_source`][csekit.extraction.extractor.load_source] and ``static_models.py``;
* layers: ``last``, ``first_last`` (1 + last), ``1_2_last`` or ``+``-joined indices (``-1`` static token embeddings,
  ``0`` embedding output, ``i`` block i), see [`resolve_layers`][csekit.extraction.extractor.resolve_layers];
* template: ``none`` or T0-T4 (``prompts.py``);
* aggregation: ``avg`` (mean over the text's tokens t1..tN, paper eq. 3: ``[CLS]``/``[SEP]`` are not among them),
  ``idf-w`` (idf of the reference corpus), ``idf-t`` (idf of the target texts), ``no-biases`` (drop
  frequent/punctuation/subword tokens), ``mask`` (mean of the template's mask positions); how template tokens and
  ``[MASK]`` are weighted is one rule, in ``idf.py``;
* post-processing: a chain from ``postprocessing.py``, fitted on the target texts (the *fit set*, see
  [`Extractor.embed`][csekit.extraction.extractor.Extractor.embed]) or (``^W``) the reference corpus.

Performance: the token states of ``(model, texts, template, layers)`` are computed once by
[`HiddenStateCache`][csekit.extraction.extractor.HiddenStateCache]
and re-weighted per aggregation, so a whole aggregation x post-processing grid costs one encoding pass per dataset.
With a cache folder the states also go to disk, keyed by content fingerprints (weights, tokenizer, texts, averaging
corpus), stored as safetensors and verified on every load
([`HiddenStateCache`][csekit.extraction.extractor.HiddenStateCache]).
"""

import json
import logging
import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import AutoConfig, AutoModel, AutoTokenizer

from ..data import read_reference_corpus, resolve_data_file
from ..download import CORPORA, WIKI1M_QUICKSTART_SENTENCES
from ..errors import DataError
from ..fingerprint import combine, data_fingerprint, module_fingerprint, tokenizer_fingerprint
from ..loading import resolve_device, resolve_model_path
from ..modeling.encoding import deduplicate
from ..modeling.modeling_encoder import build_encoder
from ..modeling.pooling import STATIC_EMBEDDINGS_LAYER, encoder_layer_states, masked_mean, mean_layer_states
from ..preflight import check_model_inputs, load_tokenizer, read_model_config
from ..tensor_cache import entry_path, load_entry, save_entry
from .idf import (
    bias_token_table,
    framing_token_ids,
    inverse_document_frequency,
    normalized_token_weights,
    text_token_mask,
    tokenize_ids,
)
from .postprocessing import PostProcessingChain
from .prompts import mask_token_weights, resolve_template
from .settings import AGGREGATIONS, LAYER_PRESETS
from .static_models import AveragedStaticSource, MixedSource, RandomEmbeddingSource

DEFAULT_REFERENCE = "wiki/wikitext-2-raw/wiki.test.raw"
# (file in the data folder, sentences read): WikiText-2 test and the quickstart's first 11,914 wiki1m sentences
DEFAULT_AVG_CORPUS = (("wiki/wikitext-2-raw/wiki.test.raw", None),
                      (CORPORA["wiki1m"].target, WIKI1M_QUICKSTART_SENTENCES))
BERT_BASE = "bert-base-uncased"
CACHE_FORMAT = "csekit-hidden-states-v1"

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------ models
def bert_tokenizer_path() -> Path:
    """The bert-base-uncased tokenizer + config folder (``re`` and ``random-bert`` need no weights): the folder
    ``$CSEKIT_BERT_TOKENIZER`` names, else the Hub's ``bert-base-uncased`` through the Hugging Face cache (its
    configs and tokenizer files only)."""
    return Path(resolve_model_path(os.environ.get("CSEKIT_BERT_TOKENIZER") or BERT_BASE, require_weights=False))


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
            _, hidden_states, static = encoder_layer_states(self.model, layers, **batch)
            return mean_layer_states(layers, hidden_states, static).float().cpu()

    def token_mask(self, input_ids: torch.Tensor) -> Optional[torch.Tensor]:
        return None

    @cached_property
    def fingerprint(self) -> str:
        """Every weight, the architecture config (not its folder path) and the tokenizer: what the states depend on."""
        config = self.model.config.to_dict()
        config.pop("_name_or_path", None)
        return combine(
            "transformer", module_fingerprint(self.model), json.dumps(config, sort_keys=True, default=str),
            tokenizer_fingerprint(self.tokenizer),
        )


def load_transformer(name: str, data_dir, seed: int = 42, device: Optional[str] = None) -> TransformerSource:
    """A csekit folder (its backbone), an HF folder, ``all-MiniLM-L6-v2``, or ``random-bert``, on ``device``
    ([`resolve_device`][csekit.loading.resolve_device])."""
    device = resolve_device(device)
    if name == "random-bert":
        folder = bert_tokenizer_path()
        torch.manual_seed(seed)  # drawn on the CPU, so the weights are the same whatever the device
        model = build_encoder(AutoConfig.from_pretrained(folder, local_files_only=True)).to(device)
        return TransformerSource(f"random-bert(seed={seed})", model, AutoTokenizer.from_pretrained(folder))
    path = resolve_model_path(name)
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    tokenizer = load_tokenizer(name, path)
    check_model_inputs(name, read_model_config(path), tokenizer, None, "--max-length")
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
            corpus = [s for path, limit in DEFAULT_AVG_CORPUS
                      for s in read_reference_corpus(resolve_data_file(path, data_dir), limit)]
        source = AveragedStaticSource(load_transformer(name, data_dir, seed, device), corpus)
        if averaged_sources is not None:
            averaged_sources[name] = source
        return source

    if spec == "re":
        return RandomEmbeddingSource(AutoTokenizer.from_pretrained(bert_tokenizer_path()), seed=seed)
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


BATCH_FIELDS = ("rows", "input_ids", "attention_mask", "states")


def save_encoded(path: Path, encoded: EncodedTexts, key: str) -> None:
    """One checked safetensors entry (`csekit.tensor_cache`): tensors ``<batch>.<field>``, metadata format, key
    and counts."""
    tensors = {f"{index}.{name}": tensor
               for index, batch in enumerate(encoded.batches) for name, tensor in zip(BATCH_FIELDS, batch)}
    save_entry(path, tensors, {"format": CACHE_FORMAT, "key": key, "count": str(encoded.count),
                               "batches": str(len(encoded.batches))})


def load_encoded(path: Path, key: str):
    """``(EncodedTexts, None)`` for a valid entry of ``key``, else ``(None, reason)``: the entry's metadata and
    checksum (`csekit.tensor_cache.load_entry`), then every shape and the rows covering the texts."""
    tensors, metadata, reason = load_entry(path, {"format": CACHE_FORMAT, "key": key})
    if reason is not None:
        return None, reason
    try:
        count, batches = int(metadata["count"]), int(metadata["batches"])
        encoded = EncodedTexts(count, [tuple(tensors[f"{i}.{name}"] for name in BATCH_FIELDS) for i in range(batches)])
    except (KeyError, ValueError):
        return None, "missing tensors or counts"
    if len(tensors) != batches * len(BATCH_FIELDS):
        return None, "unexpected tensors"
    for rows, input_ids, attention_mask, states in encoded.batches:
        if not (rows.dim() == 1 and input_ids.dim() == 2 and input_ids.shape == attention_mask.shape
                and states.dim() == 3 and states.shape[:2] == input_ids.shape and len(rows) == len(input_ids)):
            return None, "inconsistent shapes"
    rows = torch.cat([batch[0] for batch in encoded.batches]) if batches else torch.zeros(0, dtype=torch.long)
    if not torch.equal(rows.sort().values, torch.arange(count)):
        return None, "rows do not cover the texts"
    return encoded, None


class HiddenStateCache:
    """Token states per key (source fingerprint, texts, template, layers, max length), in memory and optionally on disk.

    ``enabled=False`` re-encodes on every request (the baseline of ``benchmarks/extraction_cache.py``). In memory,
    [`release`][csekit.extraction.extractor.HiddenStateCache.release] drops every entry except those of kept texts (the
    reference corpus), so a grid over many datasets
    holds one dataset at a time. With ``directory`` set, entries also go to ``<sha256 of the key>.safetensors`` files
    and survive runs: the key holds content fingerprints (see
        [`Extractor.token_states`][csekit.extraction.extractor.Extractor.token_states]), never a model name, so
    overwritten weights or another averaging corpus get a new entry; a file that is unreadable, truncated, not
    safetensors, or fails its metadata / shape / checksum checks is rebuilt (``rebuilt`` lists them), never used.
    """

    def __init__(self, directory: Optional[str] = None, enabled: bool = True):
        self.directory = Path(directory) if directory else None
        self.enabled = enabled
        self.entries = {}
        self.encodings = 0
        self.rebuilt = []

    def path_for(self, key: dict) -> Optional[Path]:
        return None if self.directory is None else entry_path(self.directory, json.dumps(key, sort_keys=True))

    def get(self, key: dict, compute: Callable[[], EncodedTexts]) -> EncodedTexts:
        if not self.enabled:
            self.encodings += 1
            return compute()
        canonical = json.dumps(key, sort_keys=True)
        if canonical in self.entries:
            return self.entries[canonical]
        path = self.path_for(key)
        if path is not None and path.exists():
            encoded, reason = load_encoded(path, canonical)
            if reason is None:
                self.entries[canonical] = encoded
                return encoded
            logger.warning("hidden-state cache %s is invalid (%s); rebuilding it", path, reason)
            self.rebuilt.append((path, reason))
        self.encodings += 1
        self.entries[canonical] = compute()
        if path is not None:
            save_encoded(path, self.entries[canonical], canonical)
        return self.entries[canonical]

    def release(self, keep_fingerprints: Sequence[str] = ()) -> None:
        """Drop the in-memory entries whose texts fingerprint is not in ``keep_fingerprints``."""
        self.entries = {key: value for key, value in self.entries.items()
                        if json.loads(key)["texts"] in keep_fingerprints}


def encode_token_states(source, texts: Sequence[str], layers, max_length, batch_size: int) -> EncodedTexts:
    """Length-sorted batched token states of ``texts`` (already templated), tokenized once and right-padded."""
    tokenizer = source.tokenizer
    token_ids = tokenize_ids(tokenizer, texts, max_length)
    lengths = np.asarray([len(ids) for ids in token_ids])
    order = np.argsort(-lengths, kind="stable")
    encoded = EncodedTexts(len(texts))
    starts = range(0, len(order), batch_size)
    for start in tqdm(starts, desc=f"Encoding {source.name}", disable=len(starts) < 10):
        rows = order[start : start + batch_size]
        input_ids = torch.full((len(rows), int(lengths[rows].max())), tokenizer.pad_token_id or 0, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for row, index in enumerate(rows):
            input_ids[row, : lengths[index]] = torch.as_tensor(token_ids[index])
            attention_mask[row, : lengths[index]] = 1
        states = source.token_states({"input_ids": input_ids, "attention_mask": attention_mask}, layers)
        encoded.batches.append((torch.as_tensor(rows), input_ids, attention_mask, states))
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
    """Turns a source + [`ExtractionSetting`][csekit.extraction.extractor.ExtractionSetting] into ``embed(texts) -> (n,
    d)`` for the evaluators.

    Args:
        reference: reference-corpus sentences (idf^W, most-frequent biases, ``^W`` post-processing).
        cache: shared [`HiddenStateCache`][csekit.extraction.extractor.HiddenStateCache].
        average_special_tokens: also average the tokenizer's framing tokens (``[CLS]``/``[SEP]``), as SimCSE's
            ``avg`` pooler and sentence-transformers' mean pooling do. Default ``False``: the text's own tokens
            t1..tN only (paper eq. 3). Only ``avg`` changes: idf gives them 0 (they occur in every text) and
            -biases drops them.
    """

    def __init__(self, reference: Sequence[str], cache: HiddenStateCache, max_length=None, batch_size: int = 64,
                 average_special_tokens: bool = False):
        self.reference = list(reference)
        self.reference_fingerprint = data_fingerprint(self.reference)
        self.cache = cache
        self.max_length = max_length
        self.batch_size = batch_size
        self.average_special_tokens = average_special_tokens
        self._tables = {}

    def _table(self, kind: str, tokenizer, texts=None) -> torch.Tensor:
        """Per-token-id weights, counted on raw (untemplated) sentences. idf^W and bias tables depend only on the
        tokenizer and the reference corpus, so they are computed once; idf^T depends on the fit set and is recomputed
        per dataset."""
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
        """Cached token states. The key is content only: the source's fingerprint (weights, tokenizer, and for
        ``avg:`` the averaging corpus), the texts, the template text, the layers and the max length."""
        layers = resolve_layers(setting.layers, source.num_hidden_layers) if source.uses_layers else [0]
        template = resolve_template(setting.template)
        filled = texts if template is None else template.fill(texts, source.tokenizer.mask_token or "")
        key = {
            "format": CACHE_FORMAT, "source": source.fingerprint, "texts": data_fingerprint(texts),
            "template": "none" if template is None else template.text, "layers": list(layers),
            "max_length": self.max_length,
        }
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
            table = self._table("idf-t", tokenizer, idf_texts)  # raw sentences, as idf-w (template rule: idf.py)
        framing = framing_token_ids(tokenizer)
        output = None
        for rows, input_ids, attention_mask, states in encoded.batches:
            if self.average_special_tokens:
                tokens = attention_mask.float()
            else:
                tokens = text_token_mask(input_ids, attention_mask, framing)
            if setting.aggregation == "avg":
                weights = tokens
            elif setting.aggregation == "mask":
                weights = mask_token_weights(input_ids, tokenizer, template.mask_count)
            else:
                weights = normalized_token_weights(input_ids, tokens, table)
            known = source.token_mask(input_ids)
            if known is not None:
                weights = weights * known
            pooled = masked_mean(states, weights)
            if output is None:
                output = torch.empty(encoded.count, pooled.shape[-1])
            output[rows] = pooled
        return output.numpy()

    def embed(self, source, texts: Sequence[str], setting: ExtractionSetting,
              fit_texts: Optional[Sequence[str]] = None) -> np.ndarray:
        """Sentence embeddings of ``texts`` (the whole target dataset) for one cell, post-processing fitted here.

        ``fit_texts`` is the *fit set*: the texts that target-fitted post-processing (steps without ``^W``) and idf^T
        learn from; default ``texts`` themselves. A text given several times (an STS sentence in several pairs) is
        encoded once but counts once per occurrence in the fit, as in SentEval's ``prepare``.
        """
        texts = list(texts)
        everything = texts if fit_texts is None else texts + list(fit_texts)
        distinct, positions = deduplicate(everything)
        idf_texts = texts if fit_texts is None else list(fit_texts)

        def pooled(sentences):
            parts = getattr(source, "parts", ((source, 1.0),))
            # idf^T always comes from the fit set, also when pooling the reference corpus for ^W fitting
            return sum(weight * self.aggregate(part, sentences, setting, idf_texts) for part, weight in parts)

        reference = pooled(self.reference) if setting.postprocessing.needs_reference else None
        vectors = pooled(distinct)[positions]
        target, fit = vectors[: len(texts)], (None if fit_texts is None else vectors[len(texts):])
        return setting.postprocessing.fit_transform(target, reference, fit)

    def embedder(self, source, setting: ExtractionSetting) -> Callable[..., np.ndarray]:
        """``embed(texts, fit_texts=None)`` for one cell (see
        [`embed`][csekit.extraction.extractor.Extractor.embed])."""
        return lambda texts, fit_texts=None: self.embed(source, texts, setting, fit_texts)


def load_reference(path: Optional[str], data_dir) -> list:
    return read_reference_corpus(resolve_data_file(path or DEFAULT_REFERENCE, str(data_dir) if data_dir else None))


__all__ = [
    "ExtractionSetting",
    "Extractor",
    "HiddenStateCache",
    "TransformerSource",
    "load_reference",
    "load_source",
    "resolve_layers",
]
