"""WhitenedCSE trainer: the multi-positive contrastive loss (Zhuo et al., 2023, eq. 7 / eq. 8).

The model returns the anchor and its positives as ``embeddings`` of shape ``(batch, 1 + m, hidden)``; the loss is
eq. 7 (``loss_type="L1"``) or eq. 8 (``"L2"``) over the per-positive InfoNCE terms. Logged components:
``loss_contrastive`` (the total) and ``loss_positive_<p>`` (each positive's mean InfoNCE term, unweighted).
"""

from modeling.losses import multi_positive_info_nce_terms, multi_positive_l1_loss, multi_positive_l2_loss

from .trainer import ContrastiveTrainer

MULTI_POSITIVE_LOSSES = {"L1": multi_positive_l1_loss, "L2": multi_positive_l2_loss}


class WhitenedCSETrainer(ContrastiveTrainer):
    """Multi-positive InfoNCE between view 0 (anchor) and views 1..m (positives) of the model output."""

    def compute_losses(self, model, outputs, inputs) -> dict:
        config = self.accelerator.unwrap_model(model).config
        embeddings = outputs.embeddings  # (batch, 1 + m, hidden)
        terms = multi_positive_info_nce_terms(
            embeddings[:, 0],
            embeddings[:, 1:],
            temperature=config.temperature,
            gather_across_processes=self.gather_across_processes,
        )
        total = MULTI_POSITIVE_LOSSES[config.loss_type](terms, config.positive_weight)
        losses = {"loss": total, "contrastive": total}
        for index, term in enumerate(terms.mean(dim=0), start=1):
            losses[f"positive_{index}"] = term
        return losses
