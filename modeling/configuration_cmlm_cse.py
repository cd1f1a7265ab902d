"""CMLM-CSE configuration (Zhang & Chen, "CMLM-CSE: Based on Conditional MLM Contrastive Learning for Sentence
Embeddings")."""

from huggingface_hub.dataclasses import strict

from .configuration_simcse import SimCSEConfig

FUSION_INITS = ("next_layers", "top_layers", "random")


@strict
class CMLMCSEConfig(SimCSEConfig):
    r"""Configuration of :class:`CMLMCSEModel` and of its training-only auxiliary network.

    The published model is a SimCSE encoder (every :class:`SimCSEConfig` field applies); the fields below describe
    the conditional-MLM auxiliary network used in training (``CMLMCSEForPreTraining``). Defaults are the paper's
    BERT-base setting: extractor 8, fusioner 3, mask rate 15%, lambda 0.005.

    Args:
        extractor_layers: transformer blocks of the frozen lexical feature extractor (the first blocks of the
            *pretrained* encoder, with its embeddings); ``1 <= extractor_layers < num_hidden_layers``.
        fusion_layers: transformer blocks of the semantic feature fusioner (>= 1).
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

    extractor_layers: int = 8
    fusion_layers: int = 3
    fusion_init: str = "next_layers"
    mask_rate: float = 0.15
    mlm_weight: float = 0.005
    contrastive_weight: float = 1.0

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
