"""DiffCSE configuration (Chuang et al., 2022, "DiffCSE: Difference-based Contrastive Learning for Sentence
Embeddings")."""

from huggingface_hub.dataclasses import strict

from .configuration_simcse import SimCSEConfig


@strict
class DiffCSEConfig(SimCSEConfig):
    r"""Configuration of [`DiffCSEModel`][csekit.modeling.modeling_diffcse.DiffCSEModel] and of its training-only
    generator and discriminator.

    The published model is a SimCSE encoder whose training head is, by default, the authors' two-layer projection
    with batch normalisation. The fields below are DiffCSE's conditional replaced-token detection, with the defaults
    of the authors' BERT-base run (voidism/DiffCSE ``run_diffcse.sh``): generator ``distilbert-base-uncased``,
    masking ratio 0.30, lambda 0.005, ``--batchnorm``.

    Args:
        generator_name_or_path: the frozen masked-LM generator that fills the masked tokens: any ``*ForMaskedLM``
            folder or Hub id sharing the encoder's vocabulary (the authors: ``distilbert-base-uncased`` for BERT,
            ``distilroberta-base`` for RoBERTa).
        masking_ratio: share of (non-special) tokens masked before the generator fills them, with BERT's 80/10/10
            replacement.
        lambda_weight: lambda in ``L = L_contrast + lambda * L_RTD``.
        batchnorm: the training head is the authors' ``ProjectionMLP`` (Linear 2H without bias, BatchNorm, ReLU,
            Linear H without bias, BatchNorm without affine) instead of SimCSE's Linear + tanh (``pooler_type
            cls`` only).
        generator_config: the generator's architecture, recorded when it is loaded so a checkpoint rebuilds it (no
            flag).
    """

    model_type = "csekit-diffcse"
    # generator_config: recorded from the generator, never set by hand; prompt: refused (prompt_refused);
    # bidirectional: no decoder trains with DiffCSE (the registry's not_on_decoders)
    fields_without_flags = ("generator_config", "prompt", "bidirectional")
    prompt_refused = "DiffCSE replaces tokens of the tokenized sentence, which would replace the prompt's too"
    # further models, each field with the kind of model the method needs (csekit/preflight.py AUXILIARY_CHECKS):
    # checked before any work, as --model_name_or_path is
    model_path_fields = {"generator_name_or_path": "masked-lm"}

    generator_name_or_path: str = "distilbert-base-uncased"
    masking_ratio: float = 0.30
    lambda_weight: float = 0.005
    batchnorm: bool = True
    generator_config: dict | None = None

    def validate_diffcse(self):
        if not 0 < self.masking_ratio < 1:
            raise ValueError(f"masking_ratio must be in (0, 1), got {self.masking_ratio}")
        if self.lambda_weight < 0:
            raise ValueError(f"lambda_weight must be >= 0, got {self.lambda_weight}")
