"""Configuration shared by every csekit sentence encoder: the backbone config and how it is pooled."""

import dataclasses
import math

from huggingface_hub.dataclasses import strict
from transformers import AutoConfig, PreTrainedConfig

try:  # transformers >= 5.21 builds a nested config from its spec
    from transformers.configuration_utils import SubConfigSpec
except ImportError:  # transformers 5.5-5.20: the config builds it (``__post_init__``), as their composite configs do
    SubConfigSpec = None

from .pooler_types import DECODER_BACKBONES, causal_pooler_problem
from .pooling import resolve_pooling_layers
from .prompts import default_prompt


@strict
class SentenceEncoderConfig(PreTrainedConfig):
    r"""Base configuration of a csekit sentence encoder.

    The backbone (any Hugging Face encoder: BERT, RoBERTa, MiniLM, ...) is described by its own config, nested as
    ``encoder_config``, so ``config.json`` alone rebuilds the whole model without a separate backbone download.

    Args:
        encoder_config: config (or its dict) of the backbone encoder; defaults to a bert-base config.
        pooler_type: one of ``cls``, ``cls_before_pooler``, ``avg``, ``avg_first_last``, ``avg_top2``, ``layers``,
            ``last_token``, ``weighted_avg`` (see ``pooling.py``). A decoder backbone (``DECODER_BACKBONES``) takes
            any but the first-token poolers ``cls`` and ``cls_before_pooler``.
        pooling_layers: layer indices averaged when ``pooler_type="layers"`` (-1 static token embeddings,
            0 embedding output, i block i).
        max_length: default truncation length for ``encode`` and the folder's sentence-transformers
            ``max_seq_length``; ``None`` keeps the tokenizer's model maximum. A model trained from a
            sentence-transformers folder starts from that folder's ``max_seq_length``.
        sentence_transformers_settings: the inference settings of the sentence-transformers folder the model was
            trained from (``normalize``, ``do_lower_case``, ``similarity_fn_name``, ``prompts``,
            ``default_prompt_name``), written again into this model's sentence-transformers files; ``None`` for
            another backbone.
        matryoshka_dims: Matryoshka sizes (Kusupati et al., 2022): the contrastive term is also applied to the
            first d coordinates of the vectors, for each d below their size; ``None``: off (the papers' setting).
        matryoshka_weights: each size's weight (the full size weighs 1); ``None``: 1 each, as MRL.
        prompt: an instruction prepended to every text, in training, evaluation and ``encode`` (``"query: "``, as
            e5 and Qwen3-Embedding prompt), and written as the folder's default sentence-transformers prompt, whose
            tokens are pooled with the sentence's (``include_prompt``). ``None``: the default prompt of the
            sentence-transformers folder the model was trained from, if it has one, else none.
        bidirectional: a decoder backbone (Qwen, Llama, Mistral, Gemma) attends both ways, LLM2Vec's conversion:
            each token sees every real token of its sentence, not only those before it. sentence-transformers
            cannot load such a folder as it trains (``AutoModel`` can; ``export-st --layout remote-code``).
    """

    model_type = "csekit-encoder"
    if SubConfigSpec is not None:
        sub_configs_defaults = {"encoder_config": SubConfigSpec(config_class=AutoConfig, model_type="bert")}
    else:
        sub_configs = {"encoder_config": AutoConfig}

    encoder_config: PreTrainedConfig | dict | None = None
    pooler_type: str = "cls"
    pooling_layers: list[int] | None = None
    max_length: int | None = None
    sentence_transformers_settings: dict | None = None
    matryoshka_dims: list[int] | None = None
    matryoshka_weights: list[float] | None = None
    prompt: str | None = None
    bidirectional: bool = False

    def __post_init__(self, **kwargs):
        if SubConfigSpec is None and not isinstance(self.encoder_config, PreTrainedConfig):
            settings = dict(self.encoder_config or {})
            self.encoder_config = AutoConfig.for_model(settings.pop("model_type", "bert"), **settings)
        super().__post_init__(**kwargs)

    def validate_finite(self):
        """Every float setting of every csekit config (temperature, loss weights, rates, momentum, ...) is a finite
        number: a NaN compares False with every bound, so a range check alone would let it through."""
        for item in dataclasses.fields(self):
            value = getattr(self, item.name, None)
            for number in value if isinstance(value, list) else (value,):
                if isinstance(number, float) and not math.isfinite(number):
                    raise ValueError(f"{item.name} must be a finite number, got {number}")

    def validate_matryoshka(self):
        dims, weights = self.matryoshka_dims, self.matryoshka_weights
        if dims is None:
            if weights is not None:
                raise ValueError("matryoshka_weights needs matryoshka_dims (the sizes they weigh)")
            return
        size = self.embedding_size
        bad = [d for d in dims if isinstance(d, bool) or not isinstance(d, int) or not 0 < d < size]
        if not dims or bad:
            raise ValueError(f"matryoshka_dims must be sizes between 1 and {size - 1} (below the embedding size "
                             f"{size}, whose term is always there), got {dims}")
        if len(set(dims)) != len(dims):
            raise ValueError(f"matryoshka_dims lists a size twice: {dims}")
        if weights is not None:
            if len(weights) != len(dims):
                raise ValueError(f"matryoshka_weights has {len(weights)} weights for {len(dims)} matryoshka_dims")
            if not all(isinstance(w, (int, float)) and not isinstance(w, bool) and math.isfinite(w) and w > 0
                       for w in weights):
                raise ValueError(f"matryoshka_weights must be finite numbers > 0, got {weights}")

    def method_settings(self) -> dict:
        """The settings of the method and its inference (this class's dataclass fields below ``PreTrainedConfig``,
        the backbone's nested config aside): two configs of one model with equal settings encode alike."""
        inherited = {field.name for field in dataclasses.fields(PreTrainedConfig)} | {"encoder_config"}
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)
                if field.name not in inherited}

    @property
    def embedding_size(self) -> int:
        """The size of the vectors the model returns (a method whose head changes it overrides this)."""
        return self.hidden_size

    def validate_pooling(self):
        resolve_pooling_layers(self.pooler_type, self.pooling_layers, self.encoder_config.num_hidden_layers)
        problem = causal_pooler_problem(self.encoder_config.model_type, self.pooler_type, self.bidirectional)
        if problem:
            raise ValueError(f"pooler_type {self.pooler_type!r}: {problem}")

    def validate_bidirectional(self):
        family = self.encoder_config.model_type
        if self.bidirectional and family not in DECODER_BACKBONES:
            raise ValueError(f"bidirectional: {family!r} is not a decoder family csekit converts "
                             f"({', '.join(DECODER_BACKBONES)}); an encoder's attention is bidirectional already")

    # why a method cannot train with a prompt (its collator edits the tokenized sentence), ``""`` where it can
    prompt_refused = ""

    def validate_prompt(self):
        if self.prompt is not None and self.prompt_refused:
            raise ValueError(f"prompt {self.prompt!r}: {self.prompt_refused}; train without a prompt")
        if self.prompt is not None and not self.prompt.strip():
            raise ValueError(f"prompt must hold words, got {self.prompt!r}; leave it unset for no prompt")

    @property
    def default_prompt(self) -> str:
        """The text prepended to every sentence: ``prompt``, else the default prompt of the sentence-transformers
        folder the model was trained from, else ``""``."""
        return default_prompt(self.prompt, self.sentence_transformers_settings)

    @property
    def hidden_size(self) -> int:
        return self.encoder_config.hidden_size

    @property
    def resolved_pooling_layers(self) -> list:
        return resolve_pooling_layers(self.pooler_type, self.pooling_layers, self.encoder_config.num_hidden_layers)
