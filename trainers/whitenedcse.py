"""WhitenedCSE trainer: the multi-positive contrastive loss (Zhuo et al., 2023, eq. 7 / eq. 8).

The model returns the anchor and its positives as ``embeddings`` of shape ``(batch, 1 + m, hidden)``; the loss is
eq. 7 (``loss_type="L1"``) or eq. 8 (``"L2"``) over the per-positive InfoNCE terms, weighted by
``config.positive_weights``. Logged components: ``loss_contrastive`` (eq. 7/8 on the full vectors),
``loss_positive_<p>`` (each positive's mean InfoNCE term, unweighted) and, with Matryoshka sizes,
``loss_matryoshka_<d>``.
"""

import logging

from ..errors import DataError
from ..modeling.losses import multi_positive_info_nce_terms, multi_positive_l1_loss, multi_positive_l2_loss
from ..modeling.whitening import GROUPED_WHITENING
from .trainer import ContrastiveTrainer

logger = logging.getLogger(__name__)
MULTI_POSITIVE_LOSSES = {"L1": multi_positive_l1_loss, "L2": multi_positive_l2_loss}


class WhitenedCSETrainer(ContrastiveTrainer):
    """Multi-positive InfoNCE between view 0 (anchor) and views 1..m (positives) of the model output.

    Raises:
        DataError: before training, when a whitening group has at least as many channels as the per-process batch
            has sentences (``group``/``shuffled_group``).
    """

    data_columns = (("sent0",),)  # unsupervised: the views of one sentence are its positives (a hard negative is not)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        config = self.accelerator.unwrap_model(self.model).config
        width, batch = config.group_width, self.args.per_device_train_batch_size
        # the centred batch spans at most batch - 1 directions: a group of >= batch channels is whitened onto a
        # regular simplex (every pair of sentences at cosine -1/(batch-1)), which carries no similarity
        if config.whitening in GROUPED_WHITENING and width >= batch:
            raise DataError(
                f"WhitenedCSE: num_groups {config.num_groups} gives whitening groups of {width} channels, not fewer "
                f"than the {batch} sentences per process (per_device_train_batch_size), so each group's batch would "
                f"be whitened onto a regular simplex; use more groups (2 channels each, as the paper's bert-base run: "
                f"--num_groups {config.hidden_size // 2}) or a larger batch"
            )
        if config.whitening in ("pca", "zca") and width >= batch:  # Table 3's rows: allowed, but say what they do
            logger.warning(
                "WhitenedCSE: %s whitening of %d channels with %d sentences per process is rank-deficient: every "
                "batch is whitened onto a regular simplex (all pairs equally similar).", config.whitening, width, batch,
            )

    def compute_losses(self, model, outputs, inputs) -> dict:
        config = self.unwrapped(model).config
        candidate_mask = self.duplicate_mask(inputs)

        def positive_terms(embeddings):  # (batch, 1 + m, size) -> (batch, m)
            return multi_positive_info_nce_terms(
                embeddings[:, 0],
                embeddings[:, 1:],
                temperature=config.temperature,
                rank=self.accelerator.process_index,
                world_size=self.accelerator.num_processes,
                candidate_mask=candidate_mask,
            )

        def term(embeddings):
            return MULTI_POSITIVE_LOSSES[config.loss_type](positive_terms(embeddings), config.positive_weights)

        terms = positive_terms(outputs.embeddings)
        contrastive = MULTI_POSITIVE_LOSSES[config.loss_type](terms, config.positive_weights)
        total, sizes = self.with_matryoshka(model, outputs, term, contrastive)
        losses = {"loss": total, "contrastive": contrastive, **sizes}
        for index, value in enumerate(terms.mean(dim=0), start=1):
            losses[f"positive_{index}"] = value
        return losses
