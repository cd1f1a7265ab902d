"""CMLM-CSE configuration (Zhang & Chen, "CMLM-CSE: Based on Conditional MLM Contrastive Learning for Sentence
Embeddings")."""

import logging
import math

from huggingface_hub.dataclasses import strict

from .configuration_simcse import SimCSEConfig

logger = logging.getLogger(__name__)
FUSION_INITS = ("next_layers", "top_layers", "random")
PAPER_LAYERS = {"encoder": 12, "extractor_layers": 8, "fusion_layers": 3}  # BERT-base: extractor 8, fusioner 3


def paper_auxiliary_layers(encoder_layers: int) -> dict:
    """The paper's extractor and fusioner depths for an encoder of ``encoder_layers`` blocks: 8 and 3 on BERT-base's
    12 (and on a deeper encoder, where they fit as they are); on a shallower one the same shares, 8/12 and 3/12 of
    its blocks, rounded half up, at least 1 each (6 blocks: 4 and 2; 2 blocks: 1 and 1)."""
    if encoder_layers >= PAPER_LAYERS["encoder"]:
        return {name: PAPER_LAYERS[name] for name in ("extractor_layers", "fusion_layers")}
    return {name: max(1, math.floor(PAPER_LAYERS[name] * encoder_layers / PAPER_LAYERS["encoder"] + 0.5))
            for name in ("extractor_layers", "fusion_layers")}


@strict
class CMLMCSEConfig(SimCSEConfig):
    r"""Configuration of [`CMLMCSEModel`][csekit.modeling.modeling_cmlm_cse.CMLMCSEModel] and of its training-only
    auxiliary network.

    The published model is a SimCSE encoder (every [`SimCSEConfig`][csekit.modeling.configuration_simcse.SimCSEConfig]
    field applies); the fields below describe
    the conditional-MLM auxiliary network used in training (``CMLMCSEForPreTraining``). Defaults are the paper's
    BERT-base setting: extractor 8, fusioner 3, mask rate 15%, lambda 0.005.

    Args:
        extractor_layers: transformer blocks of the frozen lexical feature extractor (the first blocks of the
            *pretrained* encoder, with its embeddings); ``1 <= extractor_layers < num_hidden_layers``. Default: the
            paper's 8 on a 12-block encoder, the same share on a shallower one (6 blocks: 4;
            `paper_auxiliary_layers`), said in one log line.
        fusion_layers: transformer blocks of the semantic feature fusioner (>= 1). Default: the paper's 3 on a
            12-block encoder, the same share on a shallower one (6 blocks: 2).
        fusion_init: where the fusioner's blocks start. ``"next_layers"`` (default) copies the pretrained blocks
            right after the extractor's, ``extractor_layers .. extractor_layers + fusion_layers - 1`` (needs
            ``extractor_layers + fusion_layers <= num_hidden_layers``); ``"top_layers"`` copies the top
            ``fusion_layers`` blocks; ``"random"`` initialises them like fresh blocks. The paper does not say (and
            no code was released). ``next_layers`` is the default because every cell of the paper's Table 6 keeps
            extractor + fusioner within BERT-base's 12 blocks (up to 8 + 4), the limit of this reading and of no
            other; extractor, fusioner and the pretrained MLM head are then the pretrained masked LM cut after
            block K + F (with K + F = all layers, exactly the pretrained ``*ForMaskedLM``), so the conditional MLM
            starts from a working masked LM. With K + F = the encoder's layers, ``next_layers`` and ``top_layers``
            are the same blocks.
        mask_rate: share of (non-special) tokens of the MLM input selected for prediction, with BERT's 80/10/10
            replacement (of the selected tokens 0.8 become ``[MASK]``, 0.1 a random token, 0.1 stay). The paper's
            headline uses 0.15 (Table 4 scans 0.15-0.45). The one source of the rate: the training collator reads
            it from this config.
        mlm_weight: lambda in ``L = contrastive_weight * L_contrast + lambda * L_MLM`` (0 = without MLM loss).
        contrastive_weight: weight of the contrastive loss (1 normally; 0 = the paper's "w/o contrastive loss").
    """

    model_type = "csekit-cmlm-cse"
    fields_without_flags = ("prompt", "bidirectional")  # refused: prompt_refused, and no decoder (the registry)
    prompt_refused = "CMLM-CSE masks tokens of the tokenized sentence, which would mask the prompt's too"

    extractor_layers: int | None = None
    fusion_layers: int | None = None
    fusion_init: str = "next_layers"
    mask_rate: float = 0.15
    mlm_weight: float = 0.005
    contrastive_weight: float = 1.0

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        unset = [name for name in ("extractor_layers", "fusion_layers") if getattr(self, name) is None]
        if unset:
            layers = self.encoder_config.num_hidden_layers
            depths = paper_auxiliary_layers(layers)
            for name in unset:
                setattr(self, name, depths[name])
            if layers < PAPER_LAYERS["encoder"]:
                logger.warning("CMLM-CSE on a %d-block encoder: %s, the paper's share of BERT-base's 12 blocks "
                               "(extractor 8, fusioner 3)", layers, ", ".join(f"{name}={depths[name]}"
                                                                             for name in unset))

    def validate_auxiliary_layers(self):
        layers = self.encoder_config.num_hidden_layers
        if not 1 <= self.extractor_layers < layers:
            raise ValueError(
                f"extractor_layers={self.extractor_layers} is impossible for an encoder with {layers} layers: the "
                f"frozen extractor must use between 1 and {layers - 1} of them (fewer than the encoder has)"
            )
        if self.fusion_layers < 1:
            raise ValueError(f"fusion_layers must be >= 1, got {self.fusion_layers}")
        if self.fusion_init not in FUSION_INITS:
            raise ValueError(f"fusion_init must be one of {', '.join(FUSION_INITS)}, got {self.fusion_init!r}")
        needed = {"next_layers": self.extractor_layers + self.fusion_layers, "top_layers": self.fusion_layers}
        if needed.get(self.fusion_init, 0) > layers:
            raise ValueError(
                f"extractor_layers={self.extractor_layers}, fusion_layers={self.fusion_layers} with "
                f"fusion_init={self.fusion_init!r} needs {needed[self.fusion_init]} pretrained blocks, but the encoder "
                f"has {layers}; use fewer layers, or fusion_init='top_layers'/'random'"
            )

    def validate_loss_weights(self):
        if not 0 < self.mask_rate < 1:
            raise ValueError(f"mask_rate must be in (0, 1), got {self.mask_rate}")
        if self.mlm_weight < 0 or self.contrastive_weight < 0:
            raise ValueError(
                f"loss weights must be >= 0, got mlm_weight={self.mlm_weight}, "
                f"contrastive_weight={self.contrastive_weight}"
            )
        if self.mlm_weight == 0 and self.contrastive_weight == 0:
            raise ValueError("mlm_weight and contrastive_weight are both 0: nothing would be trained")
