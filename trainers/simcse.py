"""SimCSE trainer: InfoNCE between two dropout views, with hard negatives when the batch has them (Gao et al., 2021,
eq. 1 unsupervised, eq. 5 supervised; ``hard_negative_weight`` is the authors' log-space weight on the own hard
negative, 0 by default)."""

from ..modeling.losses import info_nce_loss
from .trainer import ContrastiveTrainer


class SimCSETrainer(ContrastiveTrainer):
    """SimCSE: InfoNCE between view 0 and view 1, with view 2 as hard negatives when present."""

    def compute_losses(self, model, outputs, inputs) -> dict:
        config = self.unwrapped(model).config
        hard_negatives = outputs.embeddings.shape[1] > 2
        candidate_mask = self.duplicate_mask(inputs, hard_negatives)

        def term(embeddings):  # (batch, views, size)
            return info_nce_loss(
                embeddings[:, 0],
                embeddings[:, 1],
                hard_negatives=embeddings[:, 2] if hard_negatives else None,
                temperature=config.temperature,
                hard_negative_weight=config.hard_negative_weight,
                rank=self.accelerator.process_index,
                world_size=self.accelerator.num_processes,
                candidate_mask=candidate_mask,
            )

        contrastive = term(outputs.embeddings)
        total, sizes = self.with_matryoshka(model, outputs, term, contrastive)
        return {"loss": total, "contrastive": contrastive, **sizes}

    @classmethod
    def negatives_per_anchor(cls, examples_per_step: int, columns: tuple) -> int:
        """Every other example's positive, and every example's hard negative when the data has them."""
        return examples_per_step * (2 if "hard_neg" in columns else 1) - 1


__all__ = ["SimCSETrainer"]
