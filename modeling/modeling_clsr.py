"""CLSR (Qiu, Ding & Chen): a small MLP trained contrastively on top of a frozen pretrained encoder.

The backbone ``m`` (BERT, RoBERTa, a sentence-transformers model, ...) is never updated; its pooled sentence vector
goes through the MLP encoder ``e`` whose output is the sentence representation. Training adds a linear projection
head ``h`` and the NT-Xent loss (``losses.nt_xent_loss``); both live in ``csekit.trainers.clsr``, which trains ``e`` on
cached pooled vectors, so the saved model is just frozen encoder + pooling + ``e``.

Example::

    model = CLSRModel.from_encoder("all-MiniLM-L6-v2-folder", pooler_type="avg")
    pooled = model.encode_pooled(sentences)          # (n, hidden), what the embedding cache stores
    vectors = model.encode(sentences)                # (n, representation_size) = e(pooled)
"""

from typing import Optional, Sequence

import torch
from torch import nn

from .configuration_clsr import CLSRConfig
from .modeling_encoder import SentenceEncoderPreTrainedModel


class CLSRMLPEncoder(nn.Module):
    """The paper's encoder ``e``: ``Linear(hidden, mlp_hidden) -> ReLU -> Linear(mlp_hidden, representation)``, and
    with ``output_activation`` one more ReLU on the output.

    The paper's "MLP with 1 hidden layer and ReLU nonlinearity on the output" has two readings
    (``CLSRConfig.encoder_layout``): SimCLR's MLP, whose ReLU is on the hidden layer's output (default), or the text
    as written, a ReLU after the output layer too (``output_activation=True``), which makes every embedding
    non-negative.

    Args:
        features: ``(n, hidden)`` pooled vectors. Returns ``(n, representation)``.
    """

    def __init__(self, hidden_size: int, mlp_hidden_size: int, representation_size: int,
                 output_activation: bool = False):
        super().__init__()
        self.dense_in = nn.Linear(hidden_size, mlp_hidden_size)
        self.activation = nn.ReLU()
        self.dense_out = nn.Linear(mlp_hidden_size, representation_size)
        self.output_activation = nn.ReLU() if output_activation else nn.Identity()

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.output_activation(self.dense_out(self.activation(self.dense_in(features))))


class CLSRModel(SentenceEncoderPreTrainedModel):
    """Frozen encoder + pooler, followed by the trainable MLP encoder ``e`` (``self.mlp``).

    The backbone has ``requires_grad=False``, runs under ``torch.no_grad`` and stays in eval mode even when the
    model is put in training mode, so its pooled vectors are deterministic and match the cached ones exactly.
    """

    config_class = CLSRConfig

    def __init__(self, config: CLSRConfig):
        super().__init__(config)
        self.mlp = CLSRMLPEncoder(
            config.hidden_size, config.resolved_mlp_hidden_size, config.resolved_representation_size,
            output_activation=config.encoder_layout == "literal",
        )
        self.post_init()
        self._freeze_encoder()

    @classmethod
    def from_encoder(cls, encoder_name_or_path: str, **config_kwargs) -> "CLSRModel":
        model = super().from_encoder(encoder_name_or_path, **config_kwargs)
        model._freeze_encoder()  # the pretrained backbone replaced the one frozen in __init__
        return model

    @classmethod
    def from_pretrained(cls, *args, **kwargs) -> "CLSRModel":
        model = super().from_pretrained(*args, **kwargs)
        model._freeze_encoder()  # loading materialises fresh parameters, which require grad by default
        return model

    def _freeze_encoder(self) -> None:
        self.encoder.requires_grad_(False)
        self.encoder.eval()

    def train(self, mode: bool = True) -> "CLSRModel":
        super().train(mode)
        self.encoder.eval()  # no dropout in the frozen backbone: training and inference see the same features
        return self

    def pool_tokens(self, input_ids, attention_mask, token_type_ids=None, token_weights=None,
                    encoder=None) -> torch.Tensor:
        with torch.no_grad():
            return super().pool_tokens(input_ids, attention_mask, token_type_ids, token_weights, encoder)

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.mlp(pooled)

    def inference_head_layers(self) -> list:
        return [(self.mlp.dense_in, self.mlp.activation), (self.mlp.dense_out, self.mlp.output_activation)]

    def encode_pooled(
        self,
        sentences: Sequence[str],
        batch_size: int = 64,
        max_length: Optional[int] = None,
        show_progress_bar: Optional[bool] = None,
    ) -> torch.Tensor:
        """Pooled backbone vectors ``(len(sentences), hidden)`` (float32, CPU), before ``e``: the cacheable part."""
        return self.encode_with(
            lambda batch: self.pool_tokens(**batch), sentences, batch_size, max_length, show_progress_bar,
            desc="Pooling (frozen encoder)",
        )
