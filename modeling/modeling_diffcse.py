r"""DiffCSE (Chuang et al., 2022): SimCSE plus conditional replaced-token detection, trained only in training.

Method. Each sentence ``x`` gives SimCSE's two dropout views and their InfoNCE loss. Each view is also masked (a
share ``masking_ratio`` of its tokens, BERT's 80/10/10) into ``x'``; a frozen masked-LM generator fills it,
``x'' = argmax G(x')``, and a discriminator ``D``, conditioned on the view's sentence vector ``h`` (it takes the place
of the first token's embedding), predicts for every position whether ``x''`` differs from ``x`` there (eq. 2-3):

$$ L = L_{\mathrm{contrast}} + \lambda\, L_{\mathrm{RTD}}, \qquad
   L_{\mathrm{RTD}} = \frac{1}{|P|} \sum_{p \in P} \mathrm{CE}\big(D(x'', h)_p,\ [x''_p \neq x_p]\big) $$

as the authors' code computes it (voidism/DiffCSE ``diffcse/models.py`` ``cl_forward`` and their patched BERT's
``cls_input``):

* ``h`` is the vector after the training head (``before_mlp`` off in their runs); with ``--batchnorm`` that head is
  ``ProjectionMLP``, whose batch normalisation sees the whole local batch of both views;
* ``x''`` is the generator's argmax at *every* position (not only the masked ones), the first token kept; a position
  counts as replaced wherever ``x''`` differs from ``x`` (a generator may "replace" an unmasked token);
* ``h`` replaces the discriminator's first embedding after its LayerNorm and dropout;
* ``P`` is every position of the padded batch, padding included (their ``CrossEntropyLoss`` over
  ``view(-1, 2)`` with padding labelled 0);
* the discriminator starts as a copy of the pretrained encoder, its two-way head (``electra_head``) with
  ``torch.nn.Linear``'s own initialisation; the generator runs in the model's mode (a submodule of their model: its
  dropout is on while training) under ``no_grad``.

Design, as CMLM-CSE's: [`DiffCSEModel`][csekit.modeling.modeling_diffcse.DiffCSEModel] is published (encoder, pooler
and the training head); `DiffCSEForPreTraining` adds ``generator``, ``discriminator`` and ``electra_head``, which
checkpoints keep and the final model folder does not.
"""

import copy
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AutoConfig, AutoModelForMaskedLM

from .configuration_diffcse import DiffCSEConfig
from .modeling_encoder import SentenceEmbeddingOutput, SentenceEncoderForTraining
from .modeling_simcse import SimCSEModel


class ProjectionMLP(nn.Module):
    """The authors' ``--batchnorm`` head: Linear(H, 2H, no bias), BatchNorm, ReLU, Linear(2H, H, no bias),
    BatchNorm without affine parameters."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(hidden_size, 2 * hidden_size, bias=False), nn.BatchNorm1d(2 * hidden_size), nn.ReLU(),
            nn.Linear(2 * hidden_size, hidden_size, bias=False), nn.BatchNorm1d(hidden_size, affine=False))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features)


@dataclass
class DiffCSEPreTrainingOutput(SentenceEmbeddingOutput):
    """Output of `DiffCSEForPreTraining`.

    Args:
        embeddings: ``(batch, 2, hidden)`` the two dropout views after the head (for InfoNCE).
        pooled: the same, before the head.
        rtd_loss: scalar replaced-token-detection cross-entropy, mean over every padded position of both views
            (``None`` without ``mlm_input_ids``).
        rtd_accuracy: the discriminator's accuracy over the real tokens (logged, no gradient).
    """

    rtd_loss: Optional[torch.FloatTensor] = None
    rtd_accuracy: Optional[torch.FloatTensor] = None


class DiffCSEModel(SimCSEModel):
    """The published DiffCSE encoder: SimCSE's encoder + pooler with the authors' projection head (``batchnorm``)
    or SimCSE's MLP, used in training only by default (``mlp_only_train``)."""

    config_class = DiffCSEConfig

    def __init__(self, config: DiffCSEConfig):
        super().__init__(config)
        if self.mlp is not None and config.batchnorm:
            self.mlp = ProjectionMLP(config.hidden_size)
            self.mlp.apply(self._init_weights)

    def inference_head_layers(self) -> Optional[list]:
        if self.mlp is not None and not self.config.mlp_only_train and self.config.batchnorm:
            return None  # batch normalisation is not a sentence-transformers Dense chain
        return super().inference_head_layers()


def generator_architecture(settings: dict) -> dict:
    """A generator config's settings without the folder it was read from (``config.generator_config``)."""
    return {key: value for key, value in settings.items() if key != "_name_or_path"}


def load_generator(name_or_path: str, vocab_size: int) -> nn.Module:
    """The frozen masked-LM generator at ``name_or_path`` (float32; a folder or a Hub id through the cache)."""
    generator = AutoModelForMaskedLM.from_pretrained(name_or_path, dtype=torch.float32)
    if generator.config.vocab_size != vocab_size:
        raise ValueError(f"{name_or_path}: the generator's vocabulary has {generator.config.vocab_size} tokens, the "
                         f"encoder's {vocab_size}; DiffCSE's generator must share the encoder's tokenizer")
    return generator.requires_grad_(False)


def condition_on_sentence_vectors(module: nn.Module, inputs, output: torch.Tensor) -> torch.Tensor:
    """A forward hook of the discriminator's embeddings: the first position of ``output`` (after LayerNorm and
    dropout) replaced by ``module.sentence_vectors`` when they are set (the authors' ``cls_input``)."""
    vectors = getattr(module, "sentence_vectors", None)
    if vectors is None:  # the discriminator called on its own
        return output
    return torch.cat([vectors.unsqueeze(1).to(output.dtype), output[:, 1:]], dim=1)


class DiffCSEForPreTraining(SentenceEncoderForTraining, DiffCSEModel):
    """Training-time DiffCSE: [`DiffCSEModel`][csekit.modeling.modeling_diffcse.DiffCSEModel] + the frozen
    ``generator``, the ``discriminator`` (a copy of the encoder) and its two-way ``electra_head``.

    ``forward`` returns the views' embeddings and, given ``mlm_input_ids`` (both views masked, ``(B, 2, T)``), the
    replaced-token-detection loss. Without them it is the plain encoder (``encode`` works).
    """

    published_class = DiffCSEModel
    auxiliary_modules = ("generator", "discriminator", "electra_head")
    frozen_modules = ("generator",)

    def __init__(self, config: DiffCSEConfig):
        super().__init__(config)
        settings = generator_architecture(config.generator_config or
                                          AutoConfig.from_pretrained(config.generator_name_or_path).to_dict())
        self.generator = AutoModelForMaskedLM.from_config(AutoConfig.for_model(**settings)).requires_grad_(False)
        config.generator_config = settings
        self.discriminator = copy.deepcopy(self.encoder)
        self.electra_head = nn.Linear(config.hidden_size, 2)
        self.condition_discriminator()

    def condition_discriminator(self) -> None:
        """Hook the discriminator's embeddings once (`condition_on_sentence_vectors`): while
        ``replaced_token_detection`` runs, their first position is the sentence vector ``h``. A hook kept for the
        model's life, not added per call, so a compiled step has no graph break; it reads the vectors from the module
        it hooks, so a copy of the model conditions on its own."""
        embeddings = self.discriminator.embeddings
        embeddings.sentence_vectors = None
        embeddings.register_forward_hook(condition_on_sentence_vectors)

    @classmethod
    def from_encoder(cls, encoder_name_or_path: str, **config_kwargs) -> "DiffCSEForPreTraining":
        """Pretrained backbone and generator; the discriminator starts as a copy of the pretrained encoder, the
        ``electra_head`` with ``nn.Linear``'s initialisation (the authors assign it after loading)."""
        model = super().from_encoder(encoder_name_or_path, **config_kwargs)
        generator = load_generator(model.config.generator_name_or_path, model.config.encoder_config.vocab_size)
        model.generator = generator
        model.config.generator_config = generator_architecture(generator.config.to_dict())
        model.discriminator = copy.deepcopy(model.encoder)
        model.condition_discriminator()
        model.electra_head.reset_parameters()
        return model

    def packing_unsupported(self) -> Optional[str]:
        return ("DiffCSE's replaced-token loss averages over every position of the padded batch, padding included, "
                "as the authors' code does")

    def training_output(self, output: SentenceEmbeddingOutput, inputs: dict,
                        mlm_input_ids: Optional[torch.Tensor] = None) -> DiffCSEPreTrainingOutput:
        """The ``(B, 2, T)`` views' vectors; given ``mlm_input_ids`` (their masked copies, the same shape), L_RTD
        added."""
        if mlm_input_ids is None:
            return DiffCSEPreTrainingOutput(embeddings=output.embeddings, pooled=output.pooled)
        input_ids = inputs["input_ids"]
        if inputs["sequence_lengths"] is not None or input_ids.dim() != 3:
            raise ValueError("DiffCSE's replaced-token detection needs padded (batch, views, seq_len) inputs")
        rtd_loss, accuracy = self.replaced_token_detection(input_ids, inputs["attention_mask"],
                                                           inputs["token_type_ids"], mlm_input_ids, output.embeddings)
        return DiffCSEPreTrainingOutput(embeddings=output.embeddings, pooled=output.pooled, rtd_loss=rtd_loss,
                                        rtd_accuracy=accuracy)

    def replaced_token_detection(self, input_ids, attention_mask, token_type_ids, mlm_input_ids, embeddings) -> tuple:
        """``(L_RTD, accuracy)``: the generator fills the masked views, the discriminator conditioned on each view's
        vector predicts which positions were replaced."""
        def flat(tensor):
            return None if tensor is None else tensor.reshape(-1, tensor.shape[-1])

        tokens, masked, token_types = flat(input_ids), flat(mlm_input_ids), flat(token_type_ids)
        mask = torch.ones_like(tokens) if attention_mask is None else flat(attention_mask)
        with torch.no_grad():
            filled = self.generator(input_ids=masked, attention_mask=mask).logits.argmax(-1)
        filled[:, 0] = tokens[:, 0]  # the first token ([CLS] / <s>) stays
        replaced = (filled != tokens).long() * mask
        conditioned = self.discriminator.embeddings
        conditioned.sentence_vectors = embeddings.reshape(-1, embeddings.shape[-1])  # h takes the first position
        try:
            extra = {} if token_types is None else {"token_type_ids": token_types}
            hidden = self.discriminator(input_ids=filled * mask, attention_mask=mask, **extra).last_hidden_state
        finally:
            conditioned.sentence_vectors = None
        logits = self.electra_head(hidden)
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        loss = F.cross_entropy(logits.reshape(-1, 2), replaced.reshape(-1))
        with torch.no_grad():
            accuracy = ((logits.argmax(-1) == replaced) * mask).sum() / mask.sum().clamp(min=1)
        return loss, accuracy
