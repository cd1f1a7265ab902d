"""SimCSE (Gao et al., 2021): contrastive learning with dropout (unsupervised) or NLI (supervised) positives.

The contrastive objective itself lives in ``losses.py`` and is computed by ``csekit.trainers.SimCSETrainer``; the model
only maps tokens to embeddings.

Example::

    model = SimCSEModel.from_encoder("bert-base-uncased", pooler_type="cls", temperature=0.05)
    out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])  # (B, 2, T) -> (B, 2, H)
"""

import torch
from torch import nn

from .configuration_simcse import SimCSEConfig
from .modeling_encoder import SentenceEncoderPreTrainedModel


class MLPHead(nn.Module):
    """Linear + tanh over the [CLS] vector (SimCSE's ``MLPLayer``)."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.activation = nn.Tanh()

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(features))


class SimCSEModel(SentenceEncoderPreTrainedModel):
    """Encoder + pooler, with SimCSE's MLP head on top of [CLS] when ``pooler_type="cls"``."""

    config_class = SimCSEConfig

    def __init__(self, config: SimCSEConfig):
        super().__init__(config)
        self.mlp = MLPHead(config.hidden_size) if config.pooler_type == "cls" else None
        self.post_init()

    def head(self, pooled: torch.Tensor) -> torch.Tensor:
        if self.mlp is None or (self.config.mlp_only_train and not self.training):
            return pooled
        return self.mlp(pooled)

    def inference_head_layers(self) -> list:
        if self.mlp is None or self.config.mlp_only_train:
            return []
        return [(self.mlp.dense, self.mlp.activation)]
