"""CMLM-CSE (Zhang & Chen): SimCSE plus a conditional-MLM auxiliary network used only in training.

Method. The sentence x goes twice through the encoder (two dropout views, InfoNCE as in SimCSE) giving the sentence
embedding h. In parallel x is masked (BERT's 80/10/10) into x' and read by a *frozen* lexical feature extractor, the
pretrained embeddings + first ``extractor_layers`` blocks, giving token states h'. h replaces h'[:, 0] (the [CLS]
slot), ``h'' = [h ; h'_{1:}]``, and a semantic feature fusioner (``fusion_layers`` transformer blocks) + an MLM head
predicts the masked tokens. Because the extractor cannot learn, lowering the MLM loss needs h to carry what the
lexical features lack. ``L = L_contrast + lambda * L_MLM`` (trainer).

The MLM head, which the paper does not describe (no code was released), follows the SimCSE family the paper builds
on ("the same settings as the unsupervised SimCSE": SimCSE's ``--do_mlm`` loads the pretrained
``cls.predictions``):

* its transform (dense + activation + LayerNorm) and output bias are the checkpoint's pretrained MLM head (BERT's
  ``cls.predictions.*``, RoBERTa's ``lm_head.*``), read at `CMLMCSEForPreTraining.from_encoder`; a backbone
  saved without one (the embedded MiniLM is a plain ``BertModel``) gets a fresh head, and the log says so;
* its vocabulary projection is the *frozen extractor's* word-embedding matrix (the pretrained one, BERT's tying),
  never the trained encoder's: L_MLM then reaches the encoder only through h, as the method intends. Tied to the
  trained embeddings, L_MLM would update every vocabulary row directly (30,522 rows on BERT), bypassing h.

Design: two classes over one config.

* [`CMLMCSEModel`][csekit.modeling.modeling_cmlm_cse.CMLMCSEModel] is what gets published: encoder + pooler (+ SimCSE's
training-only MLP with
  ``pooler_type="cls"``). It *is* a SimCSE model with its own config class, so inference speed equals SimCSE's and
  the saved folder holds no auxiliary weights.
* `CMLMCSEForPreTraining` is the training-only subclass: the same encoder parameters (same state-dict keys)
  plus ``auxiliary`` (`CMLMAuxiliaryNetwork`). The Trainer trains, checkpoints and resumes this class, so the
  fusioner, the MLM head and their optimizer state are in every checkpoint; the frozen extractor has
  ``requires_grad=False``, so the optimizer never sees it.
  [`CMLMCSEForPreTraining.sentence_encoder`][csekit.modeling.modeling_encoder.SentenceEncoderForTraining.sentence_encoder]
  returns the publishable [`CMLMCSEModel`][csekit.modeling.modeling_cmlm_cse.CMLMCSEModel]
  (``CMLMCSETrainer.save_model`` saves that one as the final model).

The extractor is copied from the encoder when the auxiliary network is built, i.e. from the *pretrained* weights
(``from_encoder``); it stays in eval mode (no dropout) and runs under ``torch.no_grad``, so it is bit-identical for
the whole run.

Backbones: BERT-family encoders whose ``AutoModel`` has ``.embeddings`` and an ``.encoder.layer`` list (BERT,
RoBERTa, MiniLM, ELECTRA, ...).

Example::

    model = CMLMCSEForPreTraining.from_encoder("all-MiniLM-L6-v2-folder", pooler_type="avg",
                                               extractor_layers=4, fusion_layers=2)
    out = model(input_ids=views, attention_mask=mask, mlm_input_ids=masked, mlm_labels=labels)
    out.embeddings  # (B, 2, H) for InfoNCE; out.mlm_loss: scalar
    model.sentence_encoder().save_pretrained("published")  # encoder + pooler only
"""

import copy
import logging
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoModelForMaskedLM, PreTrainedModel
from transformers.activations import ACT2FN
from transformers.masking_utils import create_bidirectional_mask
from transformers.utils import logging as transformers_logging

from .configuration_cmlm_cse import CMLMCSEConfig
from .modeling_encoder import SentenceEmbeddingOutput, SentenceEncoderForTraining
from .modeling_simcse import SimCSEModel
from .packing import PackedSequences, position_offset

logger = logging.getLogger(__name__)

IGNORE_INDEX = -100
# transformers' MLM heads that `MLMHead` reproduces: the name of each of its weights in the
# ``AutoModelForMaskedLM`` state dict, and the activation their forward applies (None: ``config.hidden_act``)
MLM_HEADS = (
    ({"dense": "cls.predictions.transform.dense", "LayerNorm": "cls.predictions.transform.LayerNorm",
      "bias": "cls.predictions.bias"}, None),  # BertLMPredictionHead (BERT, MiniLM, ...)
    ({"dense": "lm_head.dense", "LayerNorm": "lm_head.layer_norm", "bias": "lm_head.bias"}, "gelu"),  # RobertaLMHead
)
MLM_HEAD_KEYS = ("dense.weight", "dense.bias", "LayerNorm.weight", "LayerNorm.bias", "bias")


@dataclass
class CMLMCSEPreTrainingOutput(SentenceEmbeddingOutput):
    """Output of `CMLMCSEForPreTraining`.

    Args:
        embeddings: ``(batch, views, hidden)`` sentence vectors for the contrastive loss.
        pooled: the same shape, before the head.
        mlm_loss: scalar conditional-MLM cross-entropy, mean over the masked tokens of the batch (``None`` without
            ``mlm_input_ids``).
    """

    mlm_loss: Optional[torch.FloatTensor] = None


class CMLMCSEModel(SimCSEModel):
    """The published CMLM-CSE encoder: exactly a SimCSE encoder + pooler (the auxiliary network is training-only)."""

    config_class = CMLMCSEConfig


def _layer_stack(encoder: PreTrainedModel) -> nn.ModuleList:
    stack = getattr(getattr(encoder, "encoder", None), "layer", None)
    if not isinstance(stack, nn.ModuleList) or not hasattr(encoder, "embeddings"):
        raise ValueError(
            f"CMLM-CSE needs a BERT-family backbone with .embeddings and .encoder.layer; "
            f"{type(encoder).__name__} has no such layer stack"
        )
    return stack


class MLMHead(nn.Module):
    """BERT's MLM prediction head without its output matrix: dense -> activation -> LayerNorm, then logits against
    the given word-embedding matrix plus the head's own output bias (``BertLMPredictionHead`` / ``RobertaLMHead``)."""

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = ACT2FN[config.hidden_act]
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden_states: torch.Tensor, word_embeddings: torch.Tensor) -> torch.Tensor:
        return F.linear(self.LayerNorm(self.activation(self.dense(hidden_states))), word_embeddings, self.bias)


def pretrained_mlm_head(encoder_name_or_path: str, config) -> Optional[dict]:
    """The state dict of `MLMHead` taken from the checkpoint's pretrained MLM head, or ``None`` when the
    checkpoint has none (loaded through ``AutoModelForMaskedLM``: safetensors, shards and legacy names handled)."""
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()  # its load report of a missing head is this function's answer
    try:
        mlm, info = AutoModelForMaskedLM.from_pretrained(encoder_name_or_path, output_loading_info=True)
    except ValueError:  # no masked-LM class for this architecture
        return None
    finally:
        transformers_logging.set_verbosity(verbosity)
    weights, missing = mlm.state_dict(), set(info["missing_keys"])
    for names, activation in MLM_HEADS:
        theirs = {}
        for key in MLM_HEAD_KEYS:
            module, dot, leaf = key.partition(".")
            theirs[key] = names[module] + dot + leaf
        if not set(theirs.values()) <= weights.keys():
            continue  # another architecture's head
        if missing & set(theirs.values()):
            return None  # the architecture has this head, the checkpoint does not (a plain BertModel)
        if activation not in (None, config.hidden_act):
            raise ValueError(f"{encoder_name_or_path}: its MLM head applies {activation}, but its hidden_act is "
                             f"{config.hidden_act!r}, which csekit's MLMHead would apply")
        return {key: weights[name].clone() for key, name in theirs.items()}
    return None


class CMLMAuxiliaryNetwork(nn.Module):
    """Frozen lexical feature extractor + semantic feature fusioner + MLM head projecting onto the extractor's
    (frozen) word embeddings.

    Built from the sentence encoder's *current* weights (call it on the pretrained encoder): the extractor is a
    frozen copy of the embeddings and the first ``extractor_layers`` blocks; the fusioner starts as a trainable copy
    of blocks ``K .. K+F-1`` (``fusion_init="next_layers"``) or of the top ``F`` blocks (``"top_layers"``).
    Randomly initialised parts (fusioner with ``fusion_init="random"``, the MLM head until the owner loads the
    pretrained one) are initialised by the owning model's ``_init_weights``.
    """

    def __init__(self, config: CMLMCSEConfig, encoder: PreTrainedModel):
        super().__init__()
        layers = _layer_stack(encoder)
        extractor = copy.deepcopy(encoder)
        extractor.encoder.layer = extractor.encoder.layer[: config.extractor_layers]
        extractor.config.num_hidden_layers = config.extractor_layers
        extractor.requires_grad_(False)
        self.extractor = extractor.eval()
        first = {"next_layers": config.extractor_layers, "top_layers": len(layers) - config.fusion_layers}
        if config.fusion_init in first:
            start = first[config.fusion_init]
            self.fusioner = copy.deepcopy(layers[start : start + config.fusion_layers])
        else:  # the backbone's own block class, weights set by the owner's _init_weights
            self.fusioner = nn.ModuleList(type(layers[0])(encoder.config) for _ in range(config.fusion_layers))
        self.head = MLMHead(encoder.config)
        # the fusioner's attention mask is built exactly as the backbone builds its own (sdpa / eager / ...)
        self.mask_config = encoder.config

    def train(self, mode: bool = True) -> "CMLMAuxiliaryNetwork":
        super().train(mode)
        self.extractor.eval()  # frozen features: never dropout, whatever the trainer's mode
        return self

    def forward(
        self,
        sentence_embeddings: torch.Tensor,
        mlm_input_ids: torch.Tensor,
        attention_mask: Optional[torch.Tensor],
        mlm_labels: torch.Tensor,
        token_type_ids: Optional[torch.Tensor] = None,
        sequence_lengths: Optional[torch.Tensor] = None,
        layout: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """Conditional-MLM loss.

        Args:
            sentence_embeddings: ``(B, H)`` h from the contrastive branch (gradients flow back into it).
            mlm_input_ids: ``(B, T)`` masked tokens x', or their packed ``(1, N)`` row.
            attention_mask: ``(B, T)`` (``None`` for a packed row).
            mlm_labels: original token ids on masked positions, ``-100`` elsewhere; ``mlm_input_ids``' shape.
            token_type_ids: optional ``(B, T)``.
            sequence_lengths: ``(B,)`` token counts of a packed row (``packing.py``).
            layout: ``(B, T)`` the padded batch's attention mask of a packed row (its width lays the row out with no
                host read: [`of_batch`][csekit.modeling.packing.PackedSequences.of_batch]).
        Returns:
            scalar cross-entropy, mean over the masked positions (0 with a gradient path if none is masked).
        """
        if sequence_lengths is None:
            extractor_inputs = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
            fusion_inputs = {}
        else:  # a packed row: the extractor's and the fusioner's attention stay within each sentence
            packed = PackedSequences.of_batch(sequence_lengths, layout, mlm_input_ids.shape[-1])
            fusion_inputs = packed.attention_kwargs()
            extractor_inputs = {"position_ids": (packed.positions + position_offset(self.extractor))[None],
                                **fusion_inputs}
        with torch.no_grad():
            lexical = self.extractor(input_ids=mlm_input_ids, attention_mask=attention_mask,
                                     **extractor_inputs).last_hidden_state
        embeddings = sentence_embeddings.to(lexical.dtype)
        if sequence_lengths is None:
            fused = torch.cat([embeddings.unsqueeze(1), lexical[:, 1:]], dim=1)
            mask = create_bidirectional_mask(config=self.mask_config, inputs_embeds=fused,
                                             attention_mask=attention_mask)
        else:  # h takes the first token of every sentence of the row
            fused, mask = lexical.index_copy(1, packed.cu_seq_lens[:-1].long(), embeddings.unsqueeze(0)), None
        for layer in self.fusioner:
            fused = layer(fused, mask, **fusion_inputs)
        # only masked positions reach the vocabulary projection: the loss ignores the rest, and V x H is the
        # expensive matmul of the whole auxiliary network. The projection is the frozen extractor's word embeddings
        # (detached, whatever their requires_grad): L_MLM reaches the trained encoder through h alone.
        # Compiled, every position is projected and the loss ignores the unmasked ones: a selection's shape depends
        # on the data, which a compiled graph cannot hold (the same loss, more matmul work).
        selected = mlm_labels != IGNORE_INDEX
        word_embeddings = self.extractor.get_input_embeddings().weight.detach()
        if torch.compiler.is_compiling():
            logits, labels = self.head(fused.flatten(0, -2), word_embeddings), mlm_labels.flatten()
        else:
            logits, labels = self.head(fused[selected], word_embeddings), mlm_labels[selected]
        # in the model's dtype, at least float32 (a bf16/fp16 step's logits are summed in float32; float64 stays)
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        return (F.cross_entropy(logits, labels, reduction="sum", ignore_index=IGNORE_INDEX)
                / selected.sum().clamp(min=1))


class CMLMCSEForPreTraining(SentenceEncoderForTraining, CMLMCSEModel):
    """Training-time CMLM-CSE: the encoder of [`CMLMCSEModel`][csekit.modeling.modeling_cmlm_cse.CMLMCSEModel] +
    `CMLMAuxiliaryNetwork`.

    ``forward`` returns the embeddings of every view (for InfoNCE) and, given ``mlm_input_ids``/``mlm_labels``, the
    conditional-MLM loss conditioned on view 0's embedding. Without them it is the plain encoder (``encode`` works).
    """

    published_class = CMLMCSEModel
    auxiliary_modules = ("auxiliary",)
    frozen_modules = ("auxiliary.extractor",)

    def __init__(self, config: CMLMCSEConfig):
        super().__init__(config)
        self.auxiliary = self._build_auxiliary()

    def _build_auxiliary(self) -> CMLMAuxiliaryNetwork:
        auxiliary = CMLMAuxiliaryNetwork(self.config, self.encoder)
        fresh = [auxiliary.head] + ([auxiliary.fusioner] if self.config.fusion_init == "random" else [])
        for module in fresh:
            module.apply(self._init_weights)
        return auxiliary

    @classmethod
    def from_encoder(cls, encoder_name_or_path: str, **config_kwargs) -> "CMLMCSEForPreTraining":
        """Pretrained backbone; the auxiliary network is rebuilt from it so the extractor (and with it the MLM
        head's output matrix) and the fusioner are the pretrained ones, and the MLM head is the checkpoint's
        pretrained head when it has one (fresh otherwise, logged)."""
        model = super().from_encoder(encoder_name_or_path, **config_kwargs)
        model.auxiliary = model._build_auxiliary()
        head = pretrained_mlm_head(encoder_name_or_path, model.config.encoder_config)
        if head is None:
            logger.warning("no MLM head in %s: the auxiliary head starts fresh", encoder_name_or_path)
        else:
            model.auxiliary.head.load_state_dict(head)
            logger.info("the auxiliary MLM head is the pretrained head of %s", encoder_name_or_path)
        return model

    def training_output(self, output: SentenceEmbeddingOutput, inputs: dict,
                        mlm_input_ids: Optional[torch.Tensor] = None,
                        mlm_labels: Optional[torch.Tensor] = None) -> CMLMCSEPreTrainingOutput:
        """The ``(B, V, T)`` views' vectors (or their packed row's, ``sequence_lengths (B, V)``); given
        ``mlm_input_ids``/``mlm_labels`` (view 0 masked: ``(B, T)``, or packed ``(1, N0)``), L_MLM added."""
        mlm_loss = None
        if mlm_input_ids is not None:
            if output.embeddings.dim() != 3 or mlm_labels is None:
                raise ValueError("the MLM branch needs (batch, views, seq_len) inputs and mlm_labels")
            lengths, mask, token_types = inputs["sequence_lengths"], inputs["attention_mask"], inputs["token_type_ids"]
            if lengths is not None:
                mlm_loss = self.auxiliary(output.embeddings[:, 0], mlm_input_ids, None, mlm_labels,
                                          sequence_lengths=lengths[:, 0], layout=None if mask is None else mask[:, 0])
            else:
                mask = torch.ones_like(mlm_input_ids) if mask is None else mask[:, 0]
                mlm_loss = self.auxiliary(output.embeddings[:, 0], mlm_input_ids, mask, mlm_labels,
                                          None if token_types is None else token_types[:, 0])
        return CMLMCSEPreTrainingOutput(embeddings=output.embeddings, pooled=output.pooled, mlm_loss=mlm_loss)

    def example_tokens(self, inputs: dict) -> torch.Tensor:
        """The encoder's tokens of each example and those of its masked copy of view 0, which the auxiliary network
        encodes."""
        names = ("mlm_input_ids", "mlm_labels")
        tokens = super().example_tokens({k: v for k, v in inputs.items() if k not in names})
        if inputs.get("mlm_input_ids") is None:
            return tokens
        lengths = inputs.get("sequence_lengths")
        return tokens + (lengths[:, 0] if lengths is not None else inputs["mlm_input_ids"].shape[-1])

    def split_chunks(self, inputs: dict, bounds: list) -> list:
        """The encoder's inputs cut as the base class does; the masked copy of view 0 by the same examples (its rows,
        or its packed row by view 0's token spans)."""
        names = ("mlm_input_ids", "mlm_labels")
        chunks = super().split_chunks({k: v for k, v in inputs.items() if k not in names}, bounds)
        if inputs.get("mlm_input_ids") is None:
            return chunks
        lengths = inputs.get("sequence_lengths")
        offsets = (None if lengths is None else [0, *lengths[:, 0].cumsum(0).tolist()])
        start = 0
        for chunk in chunks:
            end = start + int((chunk["input_ids"] if lengths is None else chunk["sequence_lengths"]).shape[0])
            for name in names:
                value = inputs[name]
                chunk[name] = value[start:end] if lengths is None else value[:, offsets[start] : offsets[end]]
            start = end
        return chunks

    def merge_chunks(self, outputs: list, chunks: list) -> CMLMCSEPreTrainingOutput:
        """The chunks' embeddings joined; L_MLM, each chunk's mean over its masked tokens, weighted back into the
        batch's mean over all its masked tokens."""
        merged = super().merge_chunks(outputs, chunks)
        mlm_loss = None
        if outputs[0].mlm_loss is not None:
            masked = [(chunk["mlm_labels"] != IGNORE_INDEX).sum() for chunk in chunks]
            mlm_loss = sum(output.mlm_loss * count for output, count in zip(outputs, masked)) / sum(masked).clamp(min=1)
        return CMLMCSEPreTrainingOutput(embeddings=merged.embeddings, pooled=merged.pooled, mlm_loss=mlm_loss)
