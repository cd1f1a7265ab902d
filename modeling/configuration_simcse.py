"""SimCSE configuration (Gao et al., 2021, "SimCSE: Simple Contrastive Learning of Sentence Embeddings")."""

from huggingface_hub.dataclasses import strict

from .configuration_encoder import SentenceEncoderConfig


@strict
class SimCSEConfig(SentenceEncoderConfig):
    r"""Configuration of [`SimCSEModel`][csekit.modeling.modeling_simcse.SimCSEModel].

    Defaults are the paper's unsupervised BERT setting: [CLS] pooling with an MLP (linear + tanh) used only in
    training, InfoNCE over cosine similarities at temperature 0.05.

    Args:
        temperature: InfoNCE temperature tau (> 0).
        hard_negative_weight: added to the logit of each anchor's own hard negative in supervised training
            (SimCSE's ``hard_negative_weight``; 0 = plain softmax over all candidates).
        mlp_only_train: use the MLP head in training only; inference then returns the [CLS] vector before the
            head (the unsupervised SimCSE recipe). Only meaningful with ``pooler_type="cls"``.
    """

    model_type = "csekit-simcse"

    temperature: float = 0.05
    hard_negative_weight: float = 0.0
    mlp_only_train: bool = True

    def validate_temperature(self):
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
