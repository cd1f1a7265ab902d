"""CLSR configuration (Qiu, Ding & Chen, "Contrastive Learning of Sentence Representations")."""

from typing import Optional

from huggingface_hub.dataclasses import strict

from .configuration_encoder import SentenceEncoderConfig

ENCODER_LAYOUTS = ("simclr", "literal")


@strict
class CLSRConfig(SentenceEncoderConfig):
    r"""Configuration of [`CLSRModel`][csekit.modeling.modeling_clsr.CLSRModel]: a frozen encoder, its pooler, and the
    trained MLP encoder ``e``.

    Defaults follow the paper: mean pooling of the last layer (its Table 4 prefers it to [CLS]), an MLP with one
    hidden layer whose output has the backbone's hidden size, NT-Xent at temperature 0.1. The projection head ``h``
    is a training-only module (``csekit.trainers.clsr``), so it has no field here and is not saved.

    The encoder ``e`` is ambiguous in the paper (no code was released). Sec. 3: "a simple Multi-Layer Perceptron
    (MLP) with 1 hidden layer and ReLU nonlinearity on the output"; Sec. 4.1: "a simple MLP with only 1 hidden layer
    and a 768-dimensional output layer"; Sec. 4.3: "a simple 2-layer MLP". ``encoder_layout`` picks a reading:

    * ``"simclr"`` (default): ``Linear -> ReLU -> Linear``, SimCLR's MLP ``W2 relu(W1 x)`` that the paper says it
      follows; the ReLU sits on the hidden layer's output and the embedding can take any sign.
    * ``"literal"``: ``Linear -> ReLU -> Linear -> ReLU``, the words taken as written: the same MLP plus a ReLU on
      the output layer, so every embedding is non-negative (all cosines >= 0).

    Args:
        pooler_type: pooling of the frozen backbone (``avg`` = mean of the last layer; ``cls_before_pooler`` = the
            [CLS] vector; any csekit pooler works).
        mlp_hidden_size: width of ``e``'s hidden layer; ``None`` = the backbone's hidden size.
        representation_size: output size of ``e`` (the sentence embedding); ``None`` = the backbone's hidden size.
        temperature: NT-Xent temperature tau (> 0).
        encoder_layout: ``simclr`` (Linear-ReLU-Linear, default) or ``literal`` (Linear-ReLU-Linear-ReLU, the
            paper's "ReLU nonlinearity on the output" read literally); see above.
    """

    model_type = "csekit-clsr"

    pooler_type: str = "avg"
    mlp_hidden_size: Optional[int] = None
    representation_size: Optional[int] = None
    temperature: float = 0.1
    encoder_layout: str = "simclr"

    def validate_temperature(self):
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")

    def validate_encoder_layout(self):
        if self.encoder_layout not in ENCODER_LAYOUTS:
            raise ValueError(f"encoder_layout must be one of {', '.join(ENCODER_LAYOUTS)}, got {self.encoder_layout!r}")

    fields_without_flags = ("matryoshka_dims", "matryoshka_weights")  # refused (below): no recipe flags

    def validate_matryoshka(self):
        if self.matryoshka_dims is not None or self.matryoshka_weights is not None:
            raise ValueError("matryoshka_dims: CLSR does not train Matryoshka sizes (its loss is the paper's on the "
                             "full representation e); train the sizes with simcse, whitenedcse or cmlm_cse")

    def validate_mlp_sizes(self):
        for name in ("mlp_hidden_size", "representation_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 (or None for the backbone's hidden size), got {value}")

    @property
    def resolved_mlp_hidden_size(self) -> int:
        return self.mlp_hidden_size or self.hidden_size

    @property
    def resolved_representation_size(self) -> int:
        return self.representation_size or self.hidden_size

    @property
    def embedding_size(self) -> int:
        return self.resolved_representation_size
