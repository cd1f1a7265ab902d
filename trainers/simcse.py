"""SimCSE trainer: InfoNCE between two dropout views, with hard negatives when the batch has them (Gao et al., 2021,
eq. 1 unsupervised, eq. 5 supervised; ``hard_negative_weight`` is the authors' log-space weight on the own hard
negative, 0 by default)."""

from ..modeling.losses import info_nce_loss
from .trainer import ContrastiveTrainer


class SimCSETrainer(ContrastiveTrainer):
    """SimCSE: InfoNCE between view 0 and view 1, with view 2 as hard negatives when present."""

    def compute_losses(self, model, outputs, inputs) -> dict:
        config = self.accelerator.unwrap_model(model).config
        embeddings = outputs.embeddings  # (batch, views, hidden)
        contrastive = info_nce_loss(
            embeddings[:, 0],
            embeddings[:, 1],
            hard_negatives=embeddings[:, 2] if embeddings.shape[1] > 2 else None,
            temperature=config.temperature,
            hard_negative_weight=config.hard_negative_weight,
            rank=self.accelerator.process_index,
            world_size=self.accelerator.num_processes,
        )
        return {"loss": contrastive, "contrastive": contrastive}


__all__ = ["SimCSETrainer"]
