"""SimCSE trainer: InfoNCE between two dropout views, with hard negatives when the batch has them (Gao et al., 2021,
eq. 1 unsupervised, eq. 5 supervised; ``hard_negative_weight`` is the authors' log-space weight on the own hard
negative, 0 by default). Beyond the paper's triplets, a row may carry k hard negatives (``hard_neg_1..hard_neg_k``):
every one of them is a candidate of every anchor, as in sentence-transformers' ``MultipleNegativesRankingLoss``."""

from ..modeling.losses import info_nce_loss
from .data import NEGATIVES
from .trainer import ContrastiveTrainer


class SimCSETrainer(ContrastiveTrainer):
    """SimCSE: InfoNCE between view 0 and view 1, with views 2 onward as hard negatives when present."""

    data_columns = ContrastiveTrainer.data_columns + (("sent0", "sent1", NEGATIVES),)

    def compute_losses(self, model, outputs, inputs) -> dict:
        config = self.unwrapped(model).config
        hard_negatives = outputs.embeddings.shape[1] > 2
        candidate_mask = self.duplicate_mask(inputs, hard_negatives)

        def term(embeddings):  # (batch, views, size)
            return info_nce_loss(
                embeddings[:, 0],
                embeddings[:, 1],
                hard_negatives=embeddings[:, 2:] if hard_negatives else None,
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
        """Every other example's positive, and every example's hard negatives when the data has them."""
        return examples_per_step * max(1, len(columns) - 1) - 1


__all__ = ["SimCSETrainer"]
