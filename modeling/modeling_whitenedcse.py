"""WhitenedCSE (Zhuo et al., 2023): SimCSE with Shuffled Group Whitening in the head and several positives.

Training: tokens ``(batch, views, seq_len)`` -> encoder -> pool -> per-view backbone features; the head whitens
``1 + num_positives`` draws of them (anchor + positives, see ``WhitenedCSEConfig.positive_source``), then applies
linear + tanh. The multi-positive loss (``losses.py``) is computed by ``csekit.trainers.WhitenedCSETrainer``.

Inference (eval mode, ``encode``): the representation chosen by ``config.inference_representation``, computed with
running statistics only, so a sentence's vector does not depend on its batch.

Example::

    model = WhitenedCSEModel.from_encoder("bert-base-uncased", pooler_type="cls", num_groups=384, num_positives=2)
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])  # (B, 2, T) -> (B, 3, H)
    anchors, positives = out.embeddings[:, 0], out.embeddings[:, 1:]
"""

from typing import Optional

import torch

from .configuration_whitenedcse import WhitenedCSEConfig
from .modeling_encoder import SentenceEmbeddingOutput, SentenceEncoderPreTrainedModel
from .modeling_simcse import MLPHead
from .whitening import GroupWhitening


class WhitenedCSEModel(SentenceEncoderPreTrainedModel):
    """Encoder + pooler + (whitening -> linear -> tanh) head.

    In training ``forward`` returns ``embeddings`` of shape ``(batch, 1 + num_positives, hidden)``: index 0 the
    anchor, the rest its positives; ``pooled`` keeps the ``(batch, views, hidden)`` backbone features.
    """

    config_class = WhitenedCSEConfig

    def __init__(self, config: WhitenedCSEConfig):
        super().__init__(config)
        self.whitening = GroupWhitening(
            config.hidden_size,
            config.num_groups,
            kind=config.whitening,
            eps=config.whitening_eps,
            momentum=config.whitening_momentum,
            differentiable=config.whitening_gradient,
        )
        self.mlp = MLPHead(config.hidden_size)
        self.post_init()

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        """Inference representation of pooled ``(n, hidden)`` features (see ``config.inference_representation``)."""
        if self.training:
            raise RuntimeError("WhitenedCSEModel.head is the inference path; training goes through forward")
        representation = self.config.inference_representation
        if representation == "pooled":
            return pooled
        if representation == "head_no_whitening":
            return self.mlp(pooled)
        whitened = self.whitening(pooled)
        return whitened if representation == "whitened" else self.mlp(whitened)

    def inference_head_layers(self) -> Optional[list]:
        representation = self.config.inference_representation
        if representation == "pooled":
            return []
        if representation == "head_no_whitening":
            return [(self.mlp.dense, self.mlp.activation)]
        return None  # group whitening with running statistics is not a sentence-transformers module

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        token_type_ids: Optional[torch.Tensor] = None,
        token_weights: Optional[torch.Tensor] = None,
        sequence_lengths: Optional[torch.Tensor] = None,
    ) -> SentenceEmbeddingOutput:
        """Eval mode: ``(batch[, views], seq_len)`` -> sentence vectors. Training: ``(batch, views, seq_len)`` with
        ``config.num_views`` views, or their packed row with ``sequence_lengths (batch, views)`` -> anchor +
        positives ``(batch, 1 + num_positives, hidden)``."""
        if not self.training:
            return super().forward(input_ids, attention_mask, token_type_ids, token_weights, sequence_lengths)
        return self.whitened_views(self.training_views(input_ids, attention_mask, token_type_ids, token_weights,
                                                       sequence_lengths))

    def training_views(self, input_ids, attention_mask=None, token_type_ids=None, token_weights=None,
                       sequence_lengths=None) -> torch.Tensor:
        """The backbone features ``(batch, views, hidden)`` of a training batch, sentence by sentence."""
        views = self.config.num_views
        shape = tuple(input_ids.shape if sequence_lengths is None else sequence_lengths.shape)
        if len(shape) != (3 if sequence_lengths is None else 2) or shape[1] != views:
            raise ValueError(
                f"WhitenedCSE training expects {views} views per sentence for positive_source="
                f"{self.config.positive_source!r}: input_ids (batch, {views}, seq_len) or sequence_lengths "
                f"(batch, {views}), got {shape}"
            )
        return self.pool_views(input_ids, attention_mask, token_type_ids, token_weights, sequence_lengths)

    def whitened_views(self, pooled: torch.Tensor) -> SentenceEmbeddingOutput:
        """The training head on a whole batch's features: the whitening's statistics (and shuffled groups) are the
        batch's, so it never runs on part of a batch."""
        draws = pooled.transpose(0, 1)  # (views, batch, hidden)
        if self.config.positive_source == "sgw":
            # anchor: one draw of view 0; positives: num_positives independent draws of view 1
            draws = torch.cat([draws[:1], draws[1:2].expand(self.config.num_positives, -1, -1)])
        embeddings = self.mlp(self.whitening(draws))  # (1 + num_positives, batch, hidden)
        return SentenceEmbeddingOutput(embeddings=embeddings.transpose(0, 1), pooled=pooled)

    def sentence_vectors(self, outputs: SentenceEmbeddingOutput) -> Optional[torch.Tensor]:
        """The inference vectors of the training views, laid out as ``embeddings`` (with ``sgw``, view 1 repeated
        for each of the ``num_positives`` positives whitening draws from it)."""
        vectors = super().sentence_vectors(outputs)
        if vectors is not None and self.config.positive_source == "sgw":
            vectors = torch.cat([vectors[:, :1], vectors[:, 1:2].expand(-1, self.config.num_positives, -1)], dim=1)
        return vectors

    def chunk_forward(self, **inputs) -> SentenceEmbeddingOutput:
        """In training, the backbone features only: the whitening needs the whole batch
        ([`merge_chunks`][csekit.modeling.modeling_whitenedcse.WhitenedCSEModel.merge_chunks])."""
        if not self.training:
            return super().chunk_forward(**inputs)
        return SentenceEmbeddingOutput(pooled=self.training_views(**inputs))

    def merge_chunks(self, outputs: list, chunks: list) -> SentenceEmbeddingOutput:
        if not self.training:
            return super().merge_chunks(outputs, chunks)
        return self.whitened_views(torch.cat([output.pooled for output in outputs]))
