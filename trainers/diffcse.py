"""DiffCSE training: the masking collator and the trainer (Chuang et al., 2022; the authors' code is
voidism/DiffCSE: ``train.py`` for the masking, ``diffcse/models.py`` for the losses).

`DiffCSECollator` returns SimCSE's two views of each sentence, ``(B, 2, T)``, and a masked copy of each view,
``mlm_input_ids (B, 2, T)``. [`DiffCSETrainer`][csekit.trainers.diffcse.DiffCSETrainer] trains a
`DiffCSEForPreTraining` with ``L = L_contrast + lambda_weight * L_RTD`` and logs ``loss_contrastive``, ``loss_rtd``
and ``rtd_accuracy`` (and ``loss_matryoshka_<d>`` with Matryoshka sizes).
"""

from dataclasses import dataclass, field

from ..errors import DataError
from ..modeling import DiffCSEConfig
from .collators import ContrastiveCollator
from .masking import mask_tokens, special_token_ids
from .simcse import SimCSETrainer


@dataclass
class DiffCSECollator(ContrastiveCollator):
    """Two views of each unsupervised sentence plus a masked copy of each, ``mlm_input_ids (B, 2, T)``.

    Args:
        config: the model's [`DiffCSEConfig`][csekit.modeling.configuration_diffcse.DiffCSEConfig]; its
            ``masking_ratio`` is the share of non-special tokens selected.

    The authors mask the padded batch of both views at once (``mask_tokens`` over ``(2B, T)``): every non-special
    token with probability ``masking_ratio`` (special and padding tokens never), then BERT's 80/10/10. Here each
    sentence's two views are masked one after the other by [`mask_tokens`][csekit.trainers.masking.mask_tokens] from
    that sentence's own generator (``randomness.py``), the same draws in any batch, process or resumed run. Padded
    batches only (the model refuses packed ones).
    """

    config: DiffCSEConfig = field(kw_only=True)

    def __post_init__(self):
        self.special_ids = special_token_ids(self.tokenizer, "DiffCSE")

    @property
    def draws_at_random(self) -> bool:
        return True

    def __call__(self, features: list) -> dict:
        if self.padding_free:
            raise DataError("DiffCSE trains on padded batches (its replaced-token loss counts every padded position)")
        if any(set(feature) & {"sent1", "hard_neg"} for feature in features):
            raise DataError("DiffCSE trains on unsupervised sentences (one text column); the batch has pairs")
        batch = super().__call__(features)  # the two views, padded
        masked = batch["input_ids"].clone()
        generators = self.draws.torch_generators(features, "mlm")
        for row, generator in enumerate(generators):
            for view in range(masked.shape[1]):
                where = batch["attention_mask"][row, view].bool()
                masked[row, view, where] = mask_tokens(batch["input_ids"][row, view, where], self.config.masking_ratio,
                                                       self.tokenizer, self.special_ids, generator)[0]
        batch["mlm_input_ids"] = masked
        return batch


class DiffCSETrainer(SimCSETrainer):
    """Trains `DiffCSEForPreTraining`: SimCSE's InfoNCE + ``lambda_weight`` x replaced-token detection.

    Each process averages L_RTD over its own padded batch and batch-normalises its own sentences (``ProjectionMLP``),
    as the authors' code does under DistributedDataParallel; the contrastive term gathers every process's
    sentences. Checkpoints hold the generator, discriminator and head; the final ``save_model`` writes the
    publishable encoder.
    """

    data_columns = (("sent0",),)  # unsupervised sentences: two dropout views and their masked copies

    @classmethod
    def default_collator(cls, tokenizer, model, max_length: int = 32, padding_free: bool = False) -> DiffCSECollator:
        """[`DiffCSECollator`][csekit.trainers.diffcse.DiffCSECollator] on the model's config."""
        return DiffCSECollator(tokenizer, max_length=max_length, config=model.config, padding_free=padding_free)

    def compute_losses(self, model, outputs, inputs) -> dict:
        config = self.unwrapped(model).config
        contrastive_side = super().compute_losses(model, outputs, inputs)
        if outputs.rtd_loss is None:
            raise DataError("DiffCSE batches need mlm_input_ids: use DiffCSECollator")
        if model.training:  # logged per optimizer step, summed over processes and micro-batches: their mean
            share = self.accelerator.num_processes * self.args.gradient_accumulation_steps
            self._count_sums["rtd_accuracy"] += outputs.rtd_accuracy.detach().float() / share
        total = contrastive_side["loss"] + config.lambda_weight * outputs.rtd_loss
        return {**contrastive_side, "loss": total, "rtd": outputs.rtd_loss}


__all__ = ["DiffCSECollator", "DiffCSETrainer"]
