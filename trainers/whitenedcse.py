"""WhitenedCSE trainer: the multi-positive contrastive loss (Zhuo et al., 2023, eq. 7 / eq. 8).

The model returns the anchor and its positives as ``embeddings`` of shape ``(batch, 1 + m, hidden)``; the loss is
eq. 7 (``loss_type="L1"``) or eq. 8 (``"L2"``) over the per-positive InfoNCE terms. Logged components:
``loss_contrastive`` (the total) and ``loss_positive_<p>`` (each positive's mean InfoNCE term, unweighted).
"""

import logging

from ..modeling.losses import multi_positive_info_nce_terms, multi_positive_l1_loss, multi_positive_l2_loss

from .trainer import ContrastiveTrainer

logger = logging.getLogger(__name__)
MULTI_POSITIVE_LOSSES = {"L1": multi_positive_l1_loss, "L2": multi_positive_l2_loss}


class WhitenedCSETrainer(ContrastiveTrainer):
    """Multi-positive InfoNCE between view 0 (anchor) and views 1..m (positives) of the model output."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        config = self.accelerator.unwrap_model(self.model).config
        channels = config.group_size if config.whitening in ("group", "shuffled_group") else config.hidden_size
        batch = self.args.per_device_train_batch_size
        if config.whitening != "none" and batch <= channels:
            # the centred batch spans at most batch - 1 directions, so whitening maps it onto a regular simplex
            logger.warning(
                "WhitenedCSE: %d-channel whitening groups with %d sentences per process are rank-deficient: every "
                "group's whitened batch is a regular simplex (all pairs equally similar). Use groups smaller than "
                "the batch (the paper's k read as a number of groups: group_size = hidden / k) or a larger batch.",
                channels, batch,
            )

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
