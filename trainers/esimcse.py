"""ESimCSE training: the repetition collator and the trainer (Wu et al., 2022; the authors' code is caskcsg/sentemb
``ESimCSE/``: ``train.py`` for the repetition, ``esimcse/models.py`` and ``esimcse/trainers.py`` for the loss and
the momentum queue).

`ESimCSECollator` returns two views per sentence, ``(B, 2, T)`` (or their packed row): view 0 the sentence, view 1
its repeated copy. [`ESimCSETrainer`][csekit.trainers.esimcse.ESimCSETrainer] trains an `ESimCSEForPreTraining` with
InfoNCE from view 0 to view 1 over the batch's positives and the momentum queue, and logs ``loss_contrastive`` and,
with Matryoshka sizes, ``loss_matryoshka_<d>``.
"""

import math
import random
from dataclasses import dataclass, field, replace

import torch

from ..errors import DataError
from ..modeling import ESimCSEConfig
from ..modeling.losses import info_nce_loss
from .collators import TEXT_IDS, ContrastiveCollator, packed_batch, text_id
from .simcse import SimCSETrainer


def repeat_subwords(token_ids: list, dup_rate: float, rng: random.Random) -> list:
    """The authors' ``--dup_type bpe`` repetition of one tokenized sentence (special tokens included, after
    truncation): ``dup_len = randrange(min(10, int(dup_rate * N)))`` positions drawn without replacement among
    ``1 .. N - 2`` (never the first and last token, [CLS] and [SEP]), each token doubled in place. A sentence with
    ``int(dup_rate * N) == 0`` is kept as it is (no draw)."""
    length = len(token_ids)
    most = int(dup_rate * length)
    if most <= 0:
        return list(token_ids)
    doubled = set(rng.sample(range(1, length - 1), rng.randrange(min(10, most))))
    return [token for index, token in enumerate(token_ids) for _ in range(2 if index in doubled else 1)]


def repeat_words(sentence: str, dup_rate: float, rng: random.Random) -> str:
    """The authors' ``--dup_type word`` repetition of one sentence, before tokenization: its ``" "``-separated words,
    ``dup_len = randrange(min(10, n, max(2, int(dup_rate * n))))`` of the words ``0 .. n - 2`` (never the last) each
    followed by a copy of itself."""
    words = sentence.split(" ")
    count = len(words)
    doubled = set(rng.sample(range(0, count - 1), rng.randrange(min(10, count, max(2, int(dup_rate * count))))))
    return " ".join(f"{word} {word}" if index in doubled else word for index, word in enumerate(words))


@dataclass
class ESimCSECollator(ContrastiveCollator):
    """Two views of each unsupervised sentence: the sentence and its repeated copy (the config's ``dup_rate`` and
    ``repetition_unit``).

    Args:
        config: the model's [`ESimCSEConfig`][csekit.modeling.configuration_esimcse.ESimCSEConfig].

    Each sentence's draws come from its own generator (``randomness.py``) keyed by the example and not by the epoch:
    the authors repeat once, when the dataset is tokenized (``datasets.map``), so a sentence keeps its copy in every
    epoch. The copy of a subword repetition may exceed ``max_length`` by up to 9 tokens, as there (repeated after
    truncation).
    """

    config: ESimCSEConfig = field(kw_only=True)

    @property
    def draws_at_random(self) -> bool:
        return self.config.dup_rate > 0

    def __call__(self, features: list) -> dict:
        if any(set(feature) & {"sent1", "hard_neg"} for feature in features):
            raise DataError("ESimCSE trains on unsupervised sentences (one text column); the batch has pairs")
        sentences = [feature["sent0"] for feature in features]
        randoms = replace(self.draws, epoch=0).python_randoms(features, "repetition")
        if self.config.repetition_unit == "word":
            copies = self.token_ids([repeat_words(text, self.config.dup_rate, rng)
                                     for text, rng in zip(sentences, randoms)])
            originals = self.token_ids(sentences)
        else:
            originals = self.token_ids(sentences)
            copies = [repeat_subwords(ids, self.config.dup_rate, rng) for ids, rng in zip(originals, randoms)]
        batch = self.pack_ids([originals, copies]) if self.padding_free else self.pad_ids([originals, copies])
        if self.text_ids:
            batch[TEXT_IDS] = torch.tensor([[text_id(text)] for text in sentences])
        return batch

    def pad_ids(self, views: list) -> dict:
        """``(B, views, T)`` tensors of the views' token ids, padded to the longest of them all (the tokenizer's
        padding side and pad token; ``attention_mask`` and ``token_type_ids`` as the tokenizer gives them)."""
        batch_size = len(views[0])
        flat = [{"input_ids": ids} for example in range(batch_size) for ids in (view[example] for view in views)]
        padded = self.tokenizer.pad(flat, padding=True, return_tensors="pt", pad_to_multiple_of=self.pad_to_multiple_of)
        padded = {name: value.view(batch_size, len(views), -1) for name, value in padded.items()}
        if "token_type_ids" in self.tokenizer.model_input_names:  # single sentences: all zeros, as tokenizing gives
            padded["token_type_ids"] = torch.zeros_like(padded["input_ids"])
        return padded

    def pack_ids(self, views: list) -> dict:
        """The views' token ids as one packed row (``modeling/packing.py``), example-major."""
        sequences = [view[example] for example in range(len(views[0])) for view in views]
        return packed_batch(sequences, len(views), self.pad_to_multiple_of)


class ESimCSETrainer(SimCSETrainer):
    """Trains `ESimCSEForPreTraining`: InfoNCE from each sentence to its repeated copy, with the batch's other copies
    and the momentum queue as negatives (eq. 6).

    The queue of a step holds the keys of earlier steps only; the step's own keys, gathered from every process, are
    staged here and join the queue after the optimizer step (``after_optimizer_step``). It starts empty at every
    epoch, as in the authors' trainer. Checkpoints hold the momentum encoder and the queue; the final
    ``save_model`` writes the publishable encoder.
    """

    data_columns = (("sent0",),)  # unsupervised: the sentence and its repeated copy

    @classmethod
    def default_collator(cls, tokenizer, model, max_length: int = 32, padding_free: bool = False) -> ESimCSECollator:
        """[`ESimCSECollator`][csekit.trainers.esimcse.ESimCSECollator] on the model's config."""
        return ESimCSECollator(tokenizer, max_length=max_length, config=model.config, padding_free=padding_free)

    def compute_losses(self, model, outputs, inputs) -> dict:
        network = self.unwrapped(model)
        config, momentum = network.config, network.momentum
        training = outputs.queue_keys is not None
        # every slot of the queue, its empty ones masked: fixed shapes and no host read (the same loss as the
        # filled keys alone, since a masked logit adds exp(-inf) = 0)
        queue, empty = momentum.queue_slots("keys")
        queue_vectors = momentum.queue_slots("vectors")[0] if config.matryoshka_dims else None
        in_batch = self.duplicate_mask(inputs)

        def term(embeddings, negatives):  # (batch, 2, size), (queue_size, size) or None
            batch = embeddings.shape[0]
            mask = in_batch
            if mask is None:
                mask = torch.zeros(batch, batch * self.accelerator.num_processes, dtype=torch.bool,
                                   device=embeddings.device)
            if negatives is not None:  # the queue's keys are never masked, its empty slots always
                mask = torch.cat([mask, empty[None].expand(batch, -1)], dim=1)
            return info_nce_loss(embeddings[:, 0], embeddings[:, 1], temperature=config.temperature,
                                 rank=self.accelerator.process_index, world_size=self.accelerator.num_processes,
                                 candidate_mask=mask, extra_negatives=negatives)

        contrastive = term(outputs.embeddings, queue)
        total, sizes = self.with_matryoshka(
            model, outputs,
            lambda vectors: term(vectors, None if queue_vectors is None else queue_vectors[:, :vectors.shape[-1]]),
            contrastive)
        if training:
            keys = {"keys": outputs.queue_keys}
            if config.matryoshka_dims:
                keys["vectors"] = outputs.queue_vectors
            # half-precision keys are kept in float32 or wider (the queue's dtype)
            momentum.stage(**{name: self.gathered(value.detach().to(torch.promote_types(value.dtype, torch.float32)))
                              for name, value in keys.items()})
        return {"loss": total, "contrastive": contrastive, **sizes}

    def training_step(self, model, inputs, num_items_in_batch=None):
        """The step, after the queue is emptied at an epoch's start (decided here, on the host, outside the step's
        compiled code)."""
        self.unwrapped(model).momentum.start_epoch(math.floor((self.state.epoch or 0) + 1e-6))
        return super().training_step(model, inputs, num_items_in_batch)

    def gathered(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` of every process, in rank order."""
        return self.accelerator.gather(tensor) if self.accelerator.num_processes > 1 else tensor


__all__ = ["ESimCSECollator", "ESimCSETrainer", "repeat_subwords", "repeat_words"]
