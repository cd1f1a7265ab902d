r"""ESimCSE (Wu et al., 2022): SimCSE with a word-repeated positive view and a queue of momentum-encoded negatives.

Method. Each sentence ``x`` is encoded with dropout as the anchor ``h`` and its repeated copy ``x+`` (some tokens
doubled in place, ``trainers/esimcse.py``) as the positive ``h+``: the two views no longer share their length. The
loss is SimCSE's InfoNCE with the other positives of the batch and the queue's ``M`` keys as negatives (eq. 6):

$$ \ell_i = -\log \frac{e^{\cos(h_i, h_i^+)/\tau}}{\sum_j e^{\cos(h_i, h_j^+)/\tau}
   + \sum_{m=1}^{M} e^{\cos(h_i, h_m^{\mathrm{queue}})/\tau}} $$

The keys are the original sentences (view 0) encoded by the momentum encoder (no dropout) and the *trained* MLP
head, as in the authors' code (caskcsg/sentemb ``ESimCSE/esimcse/models.py``: the momentum model is the ``BertModel``
alone and ``cls.mlp`` is applied to its output), detached. The momentum encoder starts as theirs does, with BERT's
random initialisation (``momentum_init="random"``: their ``cl_init`` re-initialises it and the checkpoint fills only
``bert.*``), so its keys come from a partly random encoder until the momentum has carried the trained weights in;
``momentum_init="copy"`` starts it as a copy of the pretrained encoder.

Design, as CMLM-CSE's: [`ESimCSEModel`][csekit.modeling.modeling_esimcse.ESimCSEModel] is what gets published, a
SimCSE encoder with its own config; `ESimCSEForPreTraining` adds the momentum encoder and its queue
([`MomentumEncoder`][csekit.modeling.momentum.MomentumEncoder]) as a training-only module: checkpoints hold it (a resume
continues the queue and the momentum weights exactly), the final model folder does not.
"""

from dataclasses import dataclass
from typing import Optional

import torch

from .configuration_esimcse import ESimCSEConfig
from .modeling_encoder import SentenceEmbeddingOutput, SentenceEncoderForTraining
from .modeling_simcse import SimCSEModel
from .momentum import MomentumEncoder
from .packing import laid_out_on_device, view_tokens


@dataclass
class ESimCSEPreTrainingOutput(SentenceEmbeddingOutput):
    """Output of `ESimCSEForPreTraining` in training.

    Args:
        embeddings: ``(batch, 2, hidden)``: the original sentence (anchor) and its repeated copy (positive).
        pooled: the same, before the head.
        queue_keys: ``(batch, hidden)`` the momentum encoder's vectors of view 0 through the head (the queue's keys).
        queue_vectors: ``(batch, hidden)`` the same through the inference head (the queue of the Matryoshka terms);
            ``None`` without ``matryoshka_dims``.
    """

    queue_keys: Optional[torch.FloatTensor] = None
    queue_vectors: Optional[torch.FloatTensor] = None


class ESimCSEModel(SimCSEModel):
    """The published ESimCSE encoder: exactly a SimCSE encoder + pooler (the momentum encoder is training-only)."""

    config_class = ESimCSEConfig


class ESimCSEForPreTraining(SentenceEncoderForTraining, ESimCSEModel):
    """Training-time ESimCSE: the encoder of [`ESimCSEModel`][csekit.modeling.modeling_esimcse.ESimCSEModel] +
    ``momentum`` ([`MomentumEncoder`][csekit.modeling.momentum.MomentumEncoder], with its queue).

    In training, ``forward`` on ``(batch, 2, seq_len)`` views (or their packed row) also returns the momentum keys
    of view 0; ``after_optimizer_step`` moves the momentum encoder and enqueues the keys the trainer staged.
    """

    published_class = ESimCSEModel
    auxiliary_modules = ("momentum",)
    frozen_modules = ("momentum.encoder",)

    def __init__(self, config: ESimCSEConfig):
        super().__init__(config)
        self.momentum = self._build_momentum()

    def _build_momentum(self) -> MomentumEncoder:
        queues = ("keys", "vectors") if self.config.matryoshka_dims else ("keys",)
        return MomentumEncoder(self.encoder, self.config.momentum, self.config.queue_size,
                               self.config.hidden_size, queues)

    @classmethod
    def from_encoder(cls, encoder_name_or_path: str, **config_kwargs) -> "ESimCSEForPreTraining":
        """Pretrained backbone; the momentum encoder starts as the config's ``momentum_init`` says: BERT's random
        initialisation (the authors' code) or a copy of the backbone."""
        model = super().from_encoder(encoder_name_or_path, **config_kwargs)
        model.momentum = model._build_momentum()
        if model.config.momentum_init == "random":
            model.momentum.reinitialize(getattr(model.encoder.config, "initializer_range", 0.02))
        return model

    def training_output(self, output: SentenceEmbeddingOutput, inputs: dict) -> ESimCSEPreTrainingOutput:
        """The views' vectors; in training with a queue, also the momentum keys of view 0 (the original sentence)."""
        keys = vectors = None
        if self.training and self.config.queue_size > 0 and output.embeddings.dim() == 3:
            keys, vectors = self.momentum_keys(inputs["input_ids"], inputs["attention_mask"],
                                               inputs["token_type_ids"], inputs["sequence_lengths"])
        return ESimCSEPreTrainingOutput(embeddings=output.embeddings, pooled=output.pooled, queue_keys=keys,
                                        queue_vectors=vectors)

    @torch.no_grad()
    def momentum_keys(self, input_ids, attention_mask=None, token_type_ids=None, sequence_lengths=None) -> tuple:
        """``(keys, vectors)`` of view 0: the momentum encoder's pooled vectors through the trained head (and,
        with Matryoshka sizes, through the inference head; else ``None``)."""
        if sequence_lengths is not None and laid_out_on_device(sequence_lengths, attention_mask):
            # the whole row, then view 0's vectors: a row cut to view 0's token count (a host read) is not traced
            pooled = self.pool_views(input_ids, attention_mask, sequence_lengths=sequence_lengths,
                                     encoder=self.momentum.encoder)[:, 0]
        elif sequence_lengths is not None:  # view 0's sequences of the example-major packed row
            pooled = self.pool_views(view_tokens(input_ids, sequence_lengths, 0),
                                     sequence_lengths=sequence_lengths[:, :1], encoder=self.momentum.encoder)[:, 0]
        else:
            def first(tensor):
                return None if tensor is None else tensor[:, 0]

            pooled = self.pool_views(input_ids[:, 0], first(attention_mask), first(token_type_ids),
                                     encoder=self.momentum.encoder)
        keys = self.head(pooled)
        vectors = self.sentence_vectors(SentenceEmbeddingOutput(pooled=pooled)) if self.config.matryoshka_dims \
            else None
        return keys, vectors

    def after_optimizer_step(self) -> None:
        """The momentum encoder follows the updated weights, then the step's staged keys join the queue."""
        self.momentum.follow(self.encoder)
        self.momentum.enqueue_staged()

    def merge_chunks(self, outputs: list, chunks: list) -> ESimCSEPreTrainingOutput:
        """The chunks' embeddings and keys joined in order (gradient caching)."""
        merged = super().merge_chunks(outputs, chunks)

        def joined(name):
            return None if getattr(outputs[0], name) is None else torch.cat([getattr(o, name) for o in outputs])

        return ESimCSEPreTrainingOutput(embeddings=merged.embeddings, pooled=merged.pooled,
                                        queue_keys=joined("queue_keys"), queue_vectors=joined("queue_vectors"))
