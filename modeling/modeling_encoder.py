"""Base class of every csekit model: a Hugging Face encoder, a pooler and a method-specific head."""

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedModel
from transformers.utils import ModelOutput
from transformers.utils import logging as transformers_logging

from .adapters import ADAPTER_FOLDER, adapter_folder_problem, merged_state_dict, write_adapter_folder
from .bidirectional import set_attention_direction
from .configuration_encoder import SentenceEncoderConfig
from .decoder_tokenizer import prepare_decoder_tokenizer
from .encoding import BatchCache, encode_sentences
from .errors import LayoutDisagreement
from .folder_commit import ARGUMENTS_FILE, staged_save
from .packing import (
    PackedSequences,
    PackingUnsupported,
    packing_unsupported,
    position_offset,
    restore_attention,
    use_packed_attention,
)
from .pooler_types import DECODER_BACKBONES
from .pooling import STATIC_EMBEDDINGS_LAYER, encoder_layer_states, pool
from .sentence_transformers_layout import (
    PROMPT_NAME,
    inherited_settings,
    layout_disagreement,
    weights_with_dense_head,
    write_sentence_transformers_layout,
)

logger = transformers_logging.get_logger(__name__)


@dataclass
class SentenceEmbeddingOutput(ModelOutput):
    """Output of a csekit encoder.

    Args:
        embeddings: ``(batch, hidden)`` sentence vectors, or ``(batch, views, hidden)`` when the input had a views
            axis. In training these are what the contrastive loss sees (after the head).
        pooled: the same shape, the pooler output before the head.
    """

    embeddings: Optional[torch.FloatTensor] = None
    pooled: Optional[torch.FloatTensor] = None


def flatten_views(tensor: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """``(batch, views, seq_len)`` -> ``(batch * views, seq_len)``; ``(batch, seq_len)`` and ``None`` unchanged."""
    return None if tensor is None else tensor.reshape(-1, tensor.shape[-1])


def build_encoder(encoder_config, name_or_path: Optional[str] = None) -> PreTrainedModel:
    """The backbone without its task pooler (BERT's tanh pooler would be an unused parameter under DDP).

    A checkpoint is loaded in float32 whatever dtype it was stored in: transformers 5 keeps the stored dtype, and a
    bf16/fp16 checkpoint trained in its own dtype would lose AdamW's small updates. Mixed precision is autocast's job
    (``--bf16``/``--fp16``), over float32 weights.
    """
    def without_pooler(load, *args, **kwargs):
        try:
            return load(*args, add_pooling_layer=False, **kwargs)
        except TypeError:  # architectures without a pooler do not take the argument
            return load(*args, **kwargs)

    if not name_or_path:
        return without_pooler(AutoModel.from_config, encoder_config)
    # transformers' load report would list the checkpoint's pooler and pretraining heads (BERT's cls.*, dropped on
    # purpose by a base model) as UNEXPECTED: it is silenced for this call, and what matters, weights the checkpoint
    # lacks or holds in another shape, is logged below
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()
    try:
        model, info = without_pooler(AutoModel.from_pretrained, name_or_path, dtype=torch.float32,
                                     output_loading_info=True)
    finally:
        transformers_logging.set_verbosity(verbosity)
    problems = {"missing (newly initialised)": list(info.get("missing_keys", ())),
                "mismatched": [str(item) for item in info.get("mismatched_keys", ())]}
    for kind, keys in problems.items():
        if keys:
            logger.warning("%s: %d %s weight(s) while loading the backbone: %s", name_or_path, len(keys), kind,
                           ", ".join(sorted(keys)[:10]) + (" ..." if len(keys) > 10 else ""))
    return model


def load_csekit_model(name_or_path: str) -> Optional["SentenceEncoderPreTrainedModel"]:
    """The csekit model saved in ``name_or_path`` (float32), or ``None`` when the folder holds a plain backbone. A
    published csekit model is then fine-tuned further from its encoder (and head, see ``take_head_of``)."""
    config = AutoConfig.from_pretrained(name_or_path)
    if not isinstance(config, SentenceEncoderConfig):
        return None
    return AutoModel.from_pretrained(name_or_path, dtype=torch.float32)


class SentenceEncoderPreTrainedModel(PreTrainedModel):
    """Encoder + pooling shared by every csekit model (each registered method's, `csekit.methods`).

    Subclasses add their head in ``__init__`` and override
    [`head`][csekit.modeling.modeling_encoder.SentenceEncoderPreTrainedModel.head]; the forward pass stays the same:
    ``tokens -> encoder -> pool -> head``. Inputs may carry a views axis, ``(batch, views, seq_len)``, which is
    flattened for the encoder and restored on the outputs, so two dropout views cost one encoder call.
    """

    config_class = SentenceEncoderConfig
    base_model_prefix = "encoder"
    supports_gradient_checkpointing = True
    _supports_sdpa = True

    def __init__(self, config: SentenceEncoderConfig):
        super().__init__(config)
        self.encoder = build_encoder(config.encoder_config)
        self.set_attention_direction()
        self.pooling_layers = config.resolved_pooling_layers
        self._tokenizer = None

    @classmethod
    def from_encoder(cls, encoder_name_or_path: str, **config_kwargs) -> "SentenceEncoderPreTrainedModel":
        """Start from a pretrained backbone folder (BERT, RoBERTa, a sentence-transformers folder, ...), or from a
        folder or Hub id saved by csekit (any method): then from its encoder, and its head where it matches.

        ``config_kwargs`` are the method's config fields (``pooler_type``, ``temperature``, ...); the head is
        freshly initialised (unless taken from a csekit model) and the encoder weights are the pretrained ones.
        """
        if not isinstance(encoder_name_or_path, (str, os.PathLike)):  # a loaded model: its folder is what is read
            raise TypeError(f"{cls.__name__}.from_encoder: a {type(encoder_name_or_path).__name__} object; pass the "
                            "folder or Hub id it was loaded from (a sentence-transformers folder is a backbone too)")
        encoder_name_or_path = os.fspath(encoder_name_or_path)
        source = load_csekit_model(encoder_name_or_path)
        encoder = source.encoder if source is not None else build_encoder(None, encoder_name_or_path)
        # the inference settings the starting folder records are kept unless the caller sets them
        settings = inherited_settings(encoder_name_or_path)
        if config_kwargs.get("max_length") is None:
            config_kwargs["max_length"] = source.config.max_length if source is not None else None
            config_kwargs["max_length"] = config_kwargs["max_length"] or settings.pop("max_seq_length", None)
        settings.pop("max_seq_length", None)
        config_kwargs.setdefault("sentence_transformers_settings", settings or None)
        model = cls(cls.config_class(encoder_config=encoder.config.to_dict(), **config_kwargs))
        model.encoder = encoder
        model.set_attention_direction()
        model.config.name_or_path = encoder_name_or_path
        if source is not None:
            model.take_head_of(source, encoder_name_or_path)
        return model

    def set_attention_direction(self) -> None:
        """Make the encoder's attention what the config says (``bidirectional``, a decoder's conversion:
        ``bidirectional.py``), both ways: an encoder taken from a bidirectional csekit model attends causally again
        under a config without it. An encoder family is never touched (its attention is bidirectional already)."""
        if self.config.bidirectional or self.config.encoder_config.model_type in DECODER_BACKBONES:
            set_attention_direction(self.encoder, self.config.bidirectional)

    def take_head_of(self, source: "SentenceEncoderPreTrainedModel", name: str) -> bool:
        """Continue from ``source``'s head (a csekit model this one is fine-tuned from) when it matches this model's
        head parameter for parameter (names and shapes; the auxiliary training networks aside); otherwise the head
        stays fresh. Logged either way. Returns whether the head was taken."""
        def head_weights(model):
            auxiliary = tuple(f"{name}." for name in getattr(model, "auxiliary_modules", ()))
            return {key: value for key, value in model.state_dict().items()
                    if not key.startswith(("encoder.", *auxiliary))}

        own, theirs = head_weights(self), head_weights(source)
        if not own:
            return False
        if own.keys() == theirs.keys() and all(own[key].shape == theirs[key].shape for key in own):
            self.load_state_dict(theirs, strict=False)
            logger.info("%s: continuing from its encoder and its head (%s)", name, ", ".join(sorted(own)))
            return True
        logger.warning("%s: continuing from its encoder; its head (%s) does not match this method's (%s), which "
                       "starts fresh", name, ", ".join(sorted(theirs)) or "none", ", ".join(sorted(own)))
        return False

    def _init_weights(self, module):
        std = self.config.encoder_config.initializer_range
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=std)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        """Map pooled ``(n, hidden)`` vectors to embeddings; identity unless a method adds a head."""
        return pooled

    def inference_head_layers(self) -> Optional[list]:
        """[`head`][csekit.modeling.modeling_encoder.SentenceEncoderPreTrainedModel.head] in eval mode as
        ``[(nn.Linear, activation module), ...]``, the sentence-transformers Dense
        modules of the saved folder: ``[]`` for the identity, ``None`` when the head is not such a chain. A method
        that overrides [`head`][csekit.modeling.modeling_encoder.SentenceEncoderPreTrainedModel.head] overrides this
        too."""
        return [] if type(self).head is SentenceEncoderPreTrainedModel.head else None

    def sentence_vectors(self, outputs: SentenceEmbeddingOutput) -> Optional[torch.Tensor]:
        """The vectors [`encode`][csekit.modeling.modeling_encoder.SentenceEncoderPreTrainedModel.encode] returns, from
        a training forward's ``outputs`` with their graph and the views
        of ``outputs.embeddings``: the pooled vectors through
        [`inference_head_layers`][csekit.modeling.modeling_encoder.SentenceEncoderPreTrainedModel.inference_head_layers]
        (what the Matryoshka terms truncate). ``None`` when the inference head is not such a chain."""
        layers = self.inference_head_layers()
        if layers is None:
            return None
        vectors = outputs.pooled
        for linear, activation in layers:
            vectors = activation(linear(vectors))
        return vectors

    def after_optimizer_step(self) -> None:
        """Called by the trainer once per optimizer step, after the update and before the gradients are cleared:
        the place for state that follows the weights (a momentum encoder, a moving average, a queue). Nothing by
        default. Buffers it keeps are part of the checkpoint, so a resumed run continues them exactly."""

    def save_pretrained(self, save_directory, *args, **kwargs) -> None:
        """transformers' save, plus the sentence-transformers files when the tokenizer is known (it is for every
        model csekit trains or loads), so the folder also loads with ``SentenceTransformer(folder)``, written whole
        or not at all ([`staged_save`][csekit.modeling.folder_commit.staged_save]: into a folder beside it, then
        committed under the folder's lock; another model's records and card in it are removed)
        (`sentence_transformers_layout`). The inference head is stored once, in the Dense modules, unless
        [`saving_checkpoint`][csekit.modeling.modeling_encoder.SentenceEncoderPreTrainedModel.saving_checkpoint] is set
        (the trainer sets it while writing a checkpoint).

        The folder is whole, as a recipe writes it: weights, config, the tokenizer and the sentence-transformers
        files. The tokenizer is ``model.tokenizer`` (set by the trainer from its ``processing_class``, or loaded from
        the folder the model came from); a model that knows none is refused in one line before anything is written,
        since its folder could encode no text."""
        save_adapter = kwargs.pop("save_adapter", False) and not self.saving_checkpoint
        problem = save_adapter and adapter_folder_problem(self)
        if problem:
            raise ValueError(f"{type(self).__name__}.save_pretrained({str(save_directory)!r}, save_adapter=True): "
                             f"{problem}; or save the merged weights (save_adapter=False)")
        kwargs["save_adapter"] = bool(save_adapter)
        tokenizer = self.known_tokenizer()
        if tokenizer is None and not self.saving_checkpoint:  # (a checkpoint's tokenizer is the trainer's to write)
            raise ValueError(f"{type(self).__name__}.save_pretrained({str(save_directory)!r}): no tokenizer to save "
                             "beside the weights, so the folder could not encode text; set model.tokenizer = "
                             "AutoTokenizer.from_pretrained(...) first")
        if self.saving_checkpoint or not kwargs.get("is_main_process", True):  # a checkpoint is staged by its writer
            return self.write_folder(save_directory, tokenizer, *args, **kwargs)
        with staged_save(save_directory) as staging:
            self.write_folder(staging, tokenizer, *args, **kwargs)
            if self.training_arguments is not None:  # the run that trained it, committed with its weights
                (staging / ARGUMENTS_FILE).write_text(json.dumps(self.training_arguments, indent=2) + "\n",
                                                               encoding="utf-8")

    def write_folder(self, folder, tokenizer, *args, save_adapter: bool = False, **kwargs) -> None:
        """transformers' files, and with a ``tokenizer`` its files and the sentence-transformers files, into
        ``folder`` (for a final save, the staging folder ``save_pretrained`` commits). A model trained with LoRA is
        saved merged (`merged_state_dict`: the backbone's own names, no adapter tensors), so the folder is the plain
        model it encodes as; a checkpoint keeps its adapters for the resume. ``save_adapter`` adds the trained adapter
        as its own sentence-transformers folder, ``adapter/`` (`write_adapter_folder`)."""
        merged = None if self.saving_checkpoint else merged_state_dict(self, kwargs.get("state_dict"))
        if merged is not None:
            kwargs["state_dict"] = merged
        super().save_pretrained(folder, *args, **kwargs)
        if tokenizer is not None and kwargs.get("is_main_process", True):
            tokenizer.save_pretrained(folder)
            write_sentence_transformers_layout(self, folder, tokenizer, head_in_dense=not self.saving_checkpoint)
            if save_adapter:
                write_adapter_folder(self, Path(folder) / ADAPTER_FOLDER, tokenizer)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """transformers' loading; a local folder whose sentence-transformers files say another model than its config
        (another pooling, prompt, length or head: `layout_disagreement`) is refused in one line
        ([`LayoutDisagreement`][csekit.modeling.errors.LayoutDisagreement]), since ``SentenceTransformer(folder)``
        would encode otherwise than this model. Not when the call overrides a method setting (``pooler_type=...``):
        the caller then asks for another model than the folder's on purpose."""
        model = super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        folder = Path(pretrained_model_name_or_path) if isinstance(pretrained_model_name_or_path, (str, os.PathLike)) \
            else None
        if folder is None or not (folder / "modules.json").is_file() or model.config.method_settings() != type(
                model.config).from_pretrained(folder).method_settings():  # (the settings a caller overrode are its own)
            return model
        tokenizer = model.known_tokenizer()
        problem = tokenizer is not None and layout_disagreement(model, tokenizer, folder)
        if problem:
            raise LayoutDisagreement(f"{folder}: {problem}, so SentenceTransformer(folder) would load another model "
                                     "than this config; save the model again with csekit")
        return model

    def known_tokenizer(self):
        """``model.tokenizer`` when it is set or loads from the folder the model came from (``config.name_or_path``),
        else ``None``."""
        if self._tokenizer is None and self.config.name_or_path:
            try:
                return self.tokenizer
            except (OSError, ValueError):  # no tokenizer files there (a bare checkpoint), or no such folder any more
                return None
        return self._tokenizer

    saving_checkpoint = False  # see save_pretrained
    # the arguments of the run that trained the model (a dict of argument groups, as JSON values), set by csekit's
    # trainers; a final save writes them as training_args.json in the same commit as the weights (the card's
    # training table), never a pickle
    training_arguments: Optional[dict] = None

    @staticmethod
    def _load_pretrained_model(model, state_dict, checkpoint_files, load_config, *args, **kwargs):
        """transformers' loading, given the head stored in the sentence-transformers Dense modules under the csekit
        names (`weights_with_dense_head`); other folders load unchanged."""
        if state_dict is None and checkpoint_files:
            state_dict = weights_with_dense_head(model, checkpoint_files)
        return PreTrainedModel._load_pretrained_model(model, state_dict, checkpoint_files, load_config, *args,
                                                      **kwargs)

    def pool_tokens(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: Optional[torch.Tensor] = None,
        token_weights: Optional[torch.Tensor] = None,
        encoder: Optional[nn.Module] = None,
    ) -> torch.Tensor:
        """Run the encoder (or ``encoder``, a copy of it such as a momentum encoder) on ``(n, seq_len)`` padded
        tokens and pool to ``(n, hidden)``."""
        layers = self.pooling_layers
        extra = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        _, hidden_states, static = encoder_layer_states(encoder or self.encoder, layers, input_ids, attention_mask,
                                                        **extra)
        return pool(self.config.pooler_type, layers, hidden_states, attention_mask, static, token_weights)

    def pool_packed(self, input_ids: torch.Tensor, sequence_lengths: torch.Tensor,
                    encoder: Optional[nn.Module] = None, layout: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Run the encoder on a packed ``(1, N)`` row of ``sequence_lengths.numel()`` sentences (see ``packing.py``)
        and pool to ``(sentences, hidden)``. The positions restart at every sentence (from the backbone's own first
        position id), the boundaries reach the attention function through the backbone's ``**kwargs``, and the
        layers the pooler reads are scattered back to the padded layout for the same
        [`pool`][csekit.modeling.modeling_encoder.pool]. Token type ids
        are the backbone's default zeros, as a tokenizer gives them for single sentences. ``layout``: the padded
        batch's attention mask, whose width lets a compiled or accelerated step lay the row out with no host read
        ([`of_batch`][csekit.modeling.packing.PackedSequences.of_batch])."""
        packed = PackedSequences.of_batch(sequence_lengths, layout, input_ids.shape[-1])
        layers = self.pooling_layers
        encoder = encoder or self.encoder
        position_ids = (packed.positions + position_offset(encoder))[None]
        _, hidden_states, static = encoder_layer_states(encoder, layers, input_ids, None,
                                                        position_ids=position_ids, **packed.attention_kwargs())
        hidden_states = {i: packed.unpack(hidden_states[i]) for i in layers if i != STATIC_EMBEDDINGS_LAYER}
        return pool(self.config.pooler_type, layers, hidden_states, packed.attention_mask, packed.unpack(static))

    def pool_views(
        self,
        input_ids: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        token_type_ids: Optional[torch.Tensor] = None,
        token_weights: Optional[torch.Tensor] = None,
        sequence_lengths: Optional[torch.Tensor] = None,
        encoder: Optional[nn.Module] = None,
    ) -> torch.Tensor:
        """Pooled ``(batch[, views], hidden)`` vectors of a padded ``(batch[, views], seq_len)`` batch or, given
        ``sequence_lengths (batch, views)``, of a packed ``(1, N)`` row (whose ``attention_mask``, when given, is the
        padded batch's: ``(batch, views, seq_len)``).

        Padded views of different lengths (supervised columns: premise, entailment, contradiction) are encoded
        one view at a time, each cut to its own longest sentence, as sentence-transformers pads each column: the
        encoder never computes positions that only another column needed. ``encoder``: another network than
        ``self.encoder`` of the same architecture (a momentum encoder).
        """
        if sequence_lengths is not None:
            if token_weights is not None:
                raise ValueError("token_weights are not supported for packed batches")
            return self.pool_packed(input_ids, sequence_lengths, encoder, attention_mask).reshape(
                *sequence_lengths.shape, -1)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        inputs = (input_ids, attention_mask, token_type_ids, token_weights)
        if input_ids.dim() == 3 and input_ids.shape[1] > 1 and not torch.compiler.is_compiling():
            # one past the last real token of each view (right or left padding alike); compiled, the views run
            # together at the batch's length (the same vectors: padding is masked), with no host read
            ends = (attention_mask * torch.arange(1, input_ids.shape[-1] + 1, device=input_ids.device)).amax((0, 2))
            if (ends != ends[0]).any():
                views = [[None if t is None else t[:, view, : int(end)] for t in inputs]
                         for view, end in enumerate(ends.tolist())]
                return torch.stack([self.pool_tokens(*view, encoder=encoder) for view in views], dim=1)
        return self.pool_tokens(*map(flatten_views, inputs), encoder=encoder).reshape(*input_ids.shape[:-1], -1)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        token_type_ids: Optional[torch.Tensor] = None,
        token_weights: Optional[torch.Tensor] = None,
        sequence_lengths: Optional[torch.Tensor] = None,
    ) -> SentenceEmbeddingOutput:
        """Encode tokens of shape ``(batch, seq_len)`` or ``(batch, views, seq_len)`` into sentence vectors, or a
        packed row ``(1, N)`` with ``sequence_lengths (batch, views)`` into ``(batch, views, hidden)``."""
        pooled = self.pool_views(input_ids, attention_mask, token_type_ids, token_weights, sequence_lengths)
        embeddings = self.head(pooled.reshape(-1, pooled.shape[-1]))
        return SentenceEmbeddingOutput(embeddings=embeddings.reshape(*pooled.shape[:-1], -1), pooled=pooled)

    # --------------------------------------------------------------------------------------------- gradient caching
    def example_tokens(self, inputs: dict) -> torch.Tensor:
        """``(batch,)``: the token positions the encoder computes for each example of a training batch of
        [`forward`][csekit.modeling.modeling_encoder.SentenceEncoderPreTrainedModel.forward]'s arguments, all its views
        together: a packed row's real tokens, or a padded batch's width per view (padding is computed too). Gradient
        caching's token budget (``--mini_batch_tokens``) counts these."""
        lengths = inputs.get("sequence_lengths")
        if lengths is not None:
            return lengths.sum(dim=1)
        input_ids = inputs["input_ids"]
        views = 1 if input_ids.dim() == 2 else input_ids.shape[1]
        return torch.full((input_ids.shape[0],), views * input_ids.shape[-1], dtype=torch.long)

    def split_chunks(self, inputs: dict, bounds: list) -> list:
        """A training batch of [`forward`][csekit.modeling.modeling_encoder.SentenceEncoderPreTrainedModel.forward]'s
        arguments cut into chunks of whole examples, the ``(start, end)`` ranges ``bounds`` (consecutive, covering the
        batch), each in the batch's own layout: padded tensors by rows, a packed row by the token spans of its
        examples (the row is example-major, ``packing.py``). A tensor this model cannot cut is refused, never sliced
        by guess."""
        lengths = inputs.get("sequence_lengths")
        batch = int((inputs["input_ids"] if lengths is None else lengths).shape[0])
        if [end for _, end in bounds[:-1]] != [start for start, _ in bounds[1:]] or (
                bounds[0][0], bounds[-1][1]) != (0, batch) or any(end <= start for start, end in bounds):
            raise ValueError(f"chunks {bounds} do not cut a batch of {batch} into consecutive non-empty ranges")
        by_rows = {name: value for name, value in inputs.items() if value is not None and name != "input_ids"}
        if lengths is None:
            by_rows["input_ids"] = inputs["input_ids"]
        elif set(by_rows) - {"sequence_lengths", "attention_mask"}:  # (a packed batch's mask is its padded layout)
            raise ValueError(f"cannot cut {', '.join(sorted(set(by_rows) - {'sequence_lengths', 'attention_mask'}))} "
                             "of a packed batch into chunks")
        for name, value in by_rows.items():
            if value.shape[0] != batch:
                raise ValueError(f"cannot cut {name} {tuple(value.shape)} into chunks of a batch of {batch}")
        chunks = [{**dict.fromkeys(inputs), **{name: value[start:end] for name, value in by_rows.items()}}
                  for start, end in bounds]
        if lengths is not None:  # the packed row, by the token spans of its examples
            offsets = [0, *lengths.sum(dim=1).cumsum(0).tolist()]
            for chunk, (start, end) in zip(chunks, bounds):
                chunk["input_ids"] = inputs["input_ids"][:, offsets[start] : offsets[end]]
        return chunks

    def chunk_forward(self, **inputs) -> SentenceEmbeddingOutput:
        """The part of the training forward computed sentence by sentence: on a chunk of a batch
        ([`split_chunks`][csekit.modeling.modeling_encoder.SentenceEncoderPreTrainedModel.split_chunks])
        it gives what [`merge_chunks`][csekit.modeling.modeling_encoder.SentenceEncoderPreTrainedModel.merge_chunks]
        joins into [`forward`][csekit.modeling.modeling_encoder.SentenceEncoderPreTrainedModel.forward]'s output for
        the whole batch. Gradient caching
        (``trainers/gradient_cache.py``) runs it twice per chunk. Here the whole forward: encoder, pooler and a head
        that maps each sentence alone. A method whose head mixes the sentences of a batch overrides both."""
        return self(**inputs)

    def merge_chunks(self, outputs: list, chunks: list) -> SentenceEmbeddingOutput:
        """[`forward`][csekit.modeling.modeling_encoder.SentenceEncoderPreTrainedModel.forward]'s output for a whole
        batch from its chunks'
        [`chunk_forward`][csekit.modeling.modeling_encoder.SentenceEncoderPreTrainedModel.chunk_forward] outputs, in
        order:
        ``merge_chunks([chunk_forward(**c) for c in chunks], chunks)`` equals ``forward(**batch)``, in value and in
        gradient."""
        return SentenceEmbeddingOutput(embeddings=torch.cat([output.embeddings for output in outputs]),
                                       pooled=torch.cat([output.pooled for output in outputs]))

    # ----------------------------------------------------------------------------------------------- packed batches
    def packing_unsupported(self) -> Optional[str]:
        """Why this model cannot train on packed batches (``packing.py``), or ``None`` when it can."""
        return packing_unsupported(self.encoder)

    def use_packed_attention(self) -> None:
        """Let the encoder run packed batches; padded ones are encoded as before (``packing.py``)."""
        use_packed_attention(self)

    @torch.no_grad()
    def use_packed_attention_if_exact(self, token_ids: Sequence[Sequence[int]], tolerance: float = 1e-4
                                      ) -> Optional[str]:
        """Switch to packed batches only if they are exact for this backbone: ``token_ids`` (a few probe sentences)
        are pooled padded with the backbone's own attention, then packed, in eval mode (no dropout); a packed
        attention that raises [`PackingUnsupported`][csekit.modeling.packing.PackingUnsupported], or pooled vectors
        that differ by more than
        ``tolerance`` relative to their largest entry (float32 rounding is ~1e-6), leave the model as it was.
        Returns why packing stays off, or ``None`` when the model now runs packed batches."""
        was_training = self.training
        self.eval()
        device = next(self.parameters()).device
        try:
            longest = max(len(ids) for ids in token_ids)
            padded = torch.zeros(len(token_ids), longest, dtype=torch.long, device=device)
            mask = torch.zeros_like(padded)
            for row, ids in enumerate(token_ids):
                padded[row, : len(ids)] = torch.tensor(ids)
                mask[row, : len(ids)] = 1
            reference = self.pool_tokens(padded, mask)
            previous = use_packed_attention(self)
            row = torch.tensor([token for ids in token_ids for token in ids], device=device)[None]
            lengths = torch.tensor([[len(ids)] for ids in token_ids], device=device)
            try:
                packed = self.pool_packed(row, lengths, layout=mask)
            except PackingUnsupported as error:
                restore_attention(previous)
                return str(error)
            difference = float((packed - reference).abs().max() / reference.abs().max().clamp(min=1e-12))
            if not difference <= tolerance:
                restore_attention(previous)
                return (f"on probe sentences its packed output differs from the padded one by {difference:.1e} "
                        f"(relative; exact is ~1e-6)")
            return None
        finally:
            self.train(was_training)

    # ----------------------------------------------------------------------------------------------- inference API
    @property
    def tokenizer(self):
        """The tokenizer saved next to the weights, loaded on first use (set it to use another one); a decoder
        backbone's is made ready to pad and pool as csekit trains decoders
        ([`prepare_decoder_tokenizer`][csekit.modeling.decoder_tokenizer.prepare_decoder_tokenizer]), as a trainer
        makes it: a model built on a decoder's folder encodes before any training too."""
        if self._tokenizer is None:
            # a model built from the folder's own code (trust_remote_code=True: its classes live in transformers'
            # dynamic modules) passes that consent on; AutoTokenizer would otherwise ask again on stdin
            remote = type(self).__module__.startswith("transformers_modules")
            tokenizer = AutoTokenizer.from_pretrained(self.config.name_or_path,
                                                      **({"trust_remote_code": True} if remote else {}))
            self._tokenizer = prepare_decoder_tokenizer(tokenizer, self.config.encoder_config.model_type,
                                                        self.config.pooler_type, self.config.name_or_path)
        return self._tokenizer

    @tokenizer.setter
    def tokenizer(self, tokenizer):
        self._tokenizer = tokenizer

    def prompts(self) -> dict:
        """``{name: text}``: the prompts the folder's sentence-transformers files name (its ``prompts``), the
        model's own ``prompt`` under ``PROMPT_NAME`` (``"default"``)."""
        settings = self.config.sentence_transformers_settings or {}
        own = {} if self.config.prompt is None else {PROMPT_NAME: self.config.prompt}
        return {**(settings.get("prompts") or {}), **own}

    def encode_with(
        self,
        embed_batch: Callable[[dict], torch.Tensor],
        sentences: Sequence[str],
        batch_size: int = 64,
        max_length: Optional[int] = None,
        show_progress_bar: Optional[bool] = None,
        desc: Optional[str] = None,
        cache: Optional[BatchCache] = None,
        prompt: Optional[str] = None,
    ) -> torch.Tensor:
        """Run ``embed_batch`` (tokenized batch -> ``(batch, d)``) over ``sentences`` in eval mode, in length-sorted
        batches; returns ``(len(sentences), d)`` float32 on CPU in the input order. Each sentence is preceded by
        ``prompt`` (default: the model's, ``config.default_prompt``; ``""``: none), as sentence-transformers prepends
        a prompt. ``cache``: keeps the tokenized batches for the next call with the same sentences
        ([`BatchCache`][csekit.modeling.encoding.BatchCache])."""
        if isinstance(sentences, str):
            raise TypeError("encode expects a list of sentences, not a single string")
        prompt = self.config.default_prompt if prompt is None else prompt
        was_training = self.training
        self.eval()
        try:
            return encode_sentences(
                embed_batch,
                self.tokenizer,
                [prompt + sentence for sentence in sentences] if prompt else sentences,
                batch_size=batch_size,
                max_length=max_length or self.config.max_length,
                device=self.device,
                show_progress_bar=show_progress_bar,
                desc=desc,
                cache=cache,
            )
        finally:
            self.train(was_training)

    def encode(
        self,
        sentences: Sequence[str],
        batch_size: int = 64,
        max_length: Optional[int] = None,
        normalize: bool = False,
        convert_to_numpy: bool = True,
        show_progress_bar: Optional[bool] = None,
        truncate_dim: Optional[int] = None,
        prompt: Optional[str] = None,
        prompt_name: Optional[str] = None,
    ):
        """Sentence embeddings for a list of texts, in inference mode (no dropout, no training-only head).

        Returns ``(len(sentences), hidden)`` as a numpy array (or a CPU float32 tensor with
        ``convert_to_numpy=False``); ``truncate_dim`` keeps the first ``d`` coordinates (a Matryoshka size,
        ``config.matryoshka_dims``), as sentence-transformers' ``truncate_dim`` does; ``normalize`` then scales each
        row to unit length. ``prompt`` (a text) or ``prompt_name`` (one of the folder's sentence-transformers
        prompts) precedes every sentence, as in sentence-transformers' ``encode``; by default the model's own prompt
        (``config.default_prompt``), ``prompt=""`` for none.
        """
        if prompt is None and prompt_name is not None:
            prompts = self.prompts()
            if prompt_name not in prompts:
                raise ValueError(f"prompt_name {prompt_name!r}: the model's prompts are {sorted(prompts) or 'none'}")
            prompt = prompts[prompt_name]
        vectors = self.encode_with(
            lambda batch: self(**batch).embeddings, sentences, batch_size, max_length, show_progress_bar,
            prompt=prompt,
        )
        if truncate_dim is not None:
            if isinstance(truncate_dim, bool) or not isinstance(truncate_dim, int) or \
                    not 0 < truncate_dim <= vectors.shape[-1]:
                raise ValueError(f"truncate_dim must be a size between 1 and {vectors.shape[-1]} (the vectors' "
                                 f"size), got {truncate_dim!r}")
            vectors = vectors[:, :truncate_dim].contiguous()
        if normalize:
            vectors = nn.functional.normalize(vectors, dim=-1)
        return vectors.numpy() if convert_to_numpy else vectors


class SentenceEncoderForTraining:
    """Base of a training-only model: a published sentence encoder
    ([`published_class`][csekit.modeling.modeling_encoder.SentenceEncoderForTraining.published_class]) plus networks
    used
    only in training
    ([`auxiliary_modules`][csekit.modeling.modeling_encoder.SentenceEncoderForTraining.auxiliary_modules], e.g.
    CMLM-CSE's conditional-MLM network).

    List it first among the bases, before the published class: ``class XForPreTraining(SentenceEncoderForTraining,
    XModel)``. Training checkpoints hold the whole training model, so a resume restores the auxiliary networks and
    their optimizer state; the trainer's final ``save_model`` writes
    [`sentence_encoder`][csekit.modeling.modeling_encoder.SentenceEncoderForTraining.sentence_encoder] only, the model
    users
    load.
    """

    published_class: type = None
    auxiliary_modules: tuple = ()
    frozen_modules: tuple = ()  # submodules that never train (names as get_submodule takes them)

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """A training checkpoint (auxiliary networks included), its
        [`frozen_modules`][csekit.modeling.modeling_encoder.SentenceEncoderForTraining.frozen_modules] frozen again
        (loading materialises parameters that require grad)."""
        model = super().from_pretrained(*args, **kwargs)
        for name in cls.frozen_modules:
            model.get_submodule(name).requires_grad_(False)
        return model

    def sentence_encoder(self) -> SentenceEncoderPreTrainedModel:
        """A [`published_class`][csekit.modeling.modeling_encoder.SentenceEncoderForTraining.published_class] model
        with a copy of this model's weights, the auxiliary networks left out."""
        published = self.published_class(self.config)
        prefixes = tuple(f"{name}." for name in self.auxiliary_modules)
        published.load_state_dict({k: v for k, v in self.state_dict().items() if not k.startswith(prefixes)},
                                  strict=True)
        published.tokenizer = self.known_tokenizer()
        return published.to(self.device).train(self.training)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        token_type_ids: Optional[torch.Tensor] = None,
        token_weights: Optional[torch.Tensor] = None,
        sequence_lengths: Optional[torch.Tensor] = None,
        **method_inputs,
    ) -> SentenceEmbeddingOutput:
        """The published model's forward on the encoder's inputs, then the method's training terms
        ([`training_output`][csekit.modeling.modeling_encoder.SentenceEncoderForTraining.training_output]) from the
        same inputs and the batch's entries of the method's own (``mlm_input_ids``, ``mlm_labels``, ...)."""
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids,
                  "token_weights": token_weights, "sequence_lengths": sequence_lengths}
        return self.training_output(super().forward(**inputs), inputs, **method_inputs)

    def training_output(self, output: SentenceEmbeddingOutput, inputs: dict,
                        **method_inputs) -> SentenceEmbeddingOutput:
        """The extension point of a training model: ``output`` (the sentence vectors of ``inputs``, the encoder's
        batch entries) with the method's training terms added, computed from ``method_inputs`` (the batch's other
        entries, which an override names as its parameters). Default: ``output``, and no other entry."""
        if method_inputs:
            raise TypeError(f"{type(self).__name__} takes no batch entries {sorted(method_inputs)}")
        return output

