"""CMLM-CSE training: the masking collator and the trainer (the contrastive-side augmentations of the paper's
Table 3 are [`augmentations`][csekit.trainers.augmentations]).

Paper: Zhang & Chen, "CMLM-CSE: Based on Conditional MLM Contrastive Learning for Sentence Embeddings".

Inputs: one unsupervised sentence per example. `CMLMCSECollator` returns the two SimCSE views
``input_ids (B, 2, T)`` (view 0 is always the original sentence; optional augmentation touches view 1 only, the
"contrastive side") plus view 0 masked for the MLM side, ``mlm_input_ids (B, T)`` and ``mlm_labels (B, T)``
(-100 on unmasked positions). [`CMLMCSETrainer`][csekit.trainers.cmlm_cse.CMLMCSETrainer] trains a
`CMLMCSEForPreTraining` with
``L = contrastive_weight * L_contrast + mlm_weight * L_MLM`` and logs ``loss_contrastive`` and ``loss_mlm`` (and
``loss_matryoshka_<d>``: with Matryoshka sizes L_contrast is SimCSE's term plus its weighted prefix terms).

Example::

    model = CMLMCSEForPreTraining.from_encoder(path, pooler_type="avg", extractor_layers=4, fusion_layers=2)
    trainer = CMLMCSETrainer(model=model, args=args, train_dataset=wiki,
                             data_collator=CMLMCSECollator(tokenizer, max_length=32, config=model.config),
                             processing_class=tokenizer, sts_evaluator=STSEvaluator(data_dir, ["STSBenchmark"], "dev"))
    trainer.train()
    trainer.save_model("out")  # the encoder + pooler only; checkpoints keep the auxiliary network
"""

from dataclasses import dataclass, field

import torch

from ..errors import DataError
from ..modeling import CMLMCSEConfig
from ..modeling.modeling_cmlm_cse import IGNORE_INDEX
from ..modeling.packing import view_tokens
from .collators import ContrastiveCollator
from .masking import mask_tokens, special_token_ids
from .simcse import SimCSETrainer


@dataclass
class CMLMCSECollator(ContrastiveCollator):
    """[`ContrastiveCollator`][csekit.trainers.collators.ContrastiveCollator] (two views) + a masked copy of view 0
    with BERT's 80/10/10 rule.

    Args:
        config: the model's [`CMLMCSEConfig`][csekit.modeling.configuration_cmlm_cse.CMLMCSEConfig]; its ``mask_rate``
            (validated there) is the
            probability that a non-special token is selected. Special and padding tokens never are; of the selected
            tokens 80% become the mask token, 10% a random token and 10% stay unchanged.

    Returns the parent's ``(B, 2, T)`` tensors (view 0 untouched) plus ``mlm_input_ids`` and ``mlm_labels`` of shape
    ``(B, T)``; packed (``padding_free``), the parent's row plus view 0's sentences masked, as a ``(1, N0)`` row.

    The rule is [`mask_tokens`][csekit.trainers.masking.mask_tokens] (``DataCollatorForLanguageModeling``'s), drawn
    over each sentence's real tokens from that sentence's own generator (``randomness.py``): the same sentence gets
    the same masks padded or packed, in any batch, before or after a resume.
    """

    config: CMLMCSEConfig = field(kw_only=True)

    def __post_init__(self):
        self.special_ids = special_token_ids(self.tokenizer, "CMLM-CSE")

    def __call__(self, features: list) -> dict:
        batch = super().__call__(features)
        if self.padding_free:  # the tokens of view 0's sequences, in order
            lengths = batch["sequence_lengths"]
            originals = view_tokens(batch["input_ids"], lengths, 0)
            rows = list(originals[0].split(lengths[:, 0].tolist()))
        else:
            originals = batch["input_ids"][:, 0]
            rows = [tokens[mask.bool()] for tokens, mask in zip(originals, batch["attention_mask"][:, 0])]
        generators = self.draws.torch_generators(features, "mlm")
        masked = [self.mask_tokens(tokens, generator) for tokens, generator in zip(rows, generators)]
        inputs, labels = originals.clone(), torch.full_like(originals, IGNORE_INDEX)
        if self.padding_free:
            inputs[0], labels[0] = torch.cat([m[0] for m in masked]), torch.cat([m[1] for m in masked])
        else:
            for row, (tokens, targets) in enumerate(masked):  # real tokens first (right padding) or last (left)
                where = batch["attention_mask"][row, 0].bool()
                inputs[row, where], labels[row, where] = tokens, targets
        batch["mlm_input_ids"], batch["mlm_labels"] = inputs, labels
        return batch

    @property
    def draws_at_random(self) -> bool:
        return True

    def mask_tokens(self, tokens: torch.Tensor, generator: torch.Generator) -> tuple:
        """``(inputs, labels)`` of one sentence's real tokens ``(L,)``:
        [`mask_tokens`][csekit.trainers.masking.mask_tokens] at the config's ``mask_rate``."""
        return mask_tokens(tokens, self.config.mask_rate, self.tokenizer, self.special_ids, generator)


class CMLMCSETrainer(SimCSETrainer):
    """Trains `CMLMCSEForPreTraining`: SimCSE's InfoNCE + ``mlm_weight`` x conditional MLM.

    Checkpoints hold the whole training model (auxiliary network included, so ``resume_from_checkpoint`` restores
    fusioner, head and their optimizer state); the final ``save_model`` writes only the publishable encoder (the
    model is a [`SentenceEncoderForTraining`][csekit.modeling.modeling_encoder.SentenceEncoderForTraining]).
    """

    data_columns = (("sent0",),)  # unsupervised sentences: two dropout views and the masked copy of one sentence

    @classmethod
    def default_collator(cls, tokenizer, model, max_length: int = 32, padding_free: bool = False) -> CMLMCSECollator:
        """[`CMLMCSECollator`][csekit.trainers.cmlm_cse.CMLMCSECollator] on the model's config."""
        return CMLMCSECollator(tokenizer, max_length=max_length, config=model.config, padding_free=padding_free)

    def compute_losses(self, model, outputs, inputs) -> dict:
        config = self.unwrapped(model).config
        # SimCSE's side: "loss" is L_contrast (with its Matryoshka terms when configured), logged term by term
        contrastive_side = super().compute_losses(model, outputs, inputs)
        if outputs.mlm_loss is None:
            raise DataError("CMLM-CSE batches need mlm_input_ids/mlm_labels: use CMLMCSECollator")
        mlm = outputs.mlm_loss
        if self.accelerator.num_processes > 1:
            # the model's loss is the mean over this process's masked tokens; rescale it so that DDP's gradient average
            # is the mean over the masked tokens of all processes, as one process with the whole batch computes
            masked = (inputs["mlm_labels"] != IGNORE_INDEX).sum()
            all_masked = self.accelerator.reduce(masked, reduction="sum").clamp(min=1)
            mlm = mlm * masked * self.accelerator.num_processes / all_masked
        total = config.contrastive_weight * contrastive_side["loss"] + config.mlm_weight * mlm
        return {**contrastive_side, "loss": total, "mlm": mlm}
