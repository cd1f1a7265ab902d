"""Worker for tests/test_conformance.py: csekit recipes through their real training loops, one job after another.

Launched as ``accelerate launch [--multi_gpu --num_processes N --main_process_port P | --cpu] tests/dist_worker.py
JOBS.json``. ``JOBS.json`` is a list of ``{"method", "argv", "options"}``; each job runs the recipe
``csekit.recipes.<method>`` on ``argv`` (its ``--output_dir`` is the job's folder) exactly as ``accelerate launch
recipes/<method>.py`` would, with these test-only changes (``options``):

* ``float64``: the model is trained in float64 (with a random tiny encoder, float32 summation order alone moves a
  gradient by ~0.5%; in float64 a real mismatch stands out);
* ``whitening_shards`` (WhitenedCSE, one process): the whitening module whitens each of that many consecutive shards
  of the batch with its own statistics and the same random draws, and keeps the running statistics of the first shard
  only: what N processes do (statistics of the local batch, same seed on every rank, DDP broadcasts rank 0's
  buffers).

Every process writes ``<job>/record_rank<r>.json``: the token ids of each training batch it saw, its local loss per
step and, for a method that pools sentences through a frozen encoder first (CLSR), how many it pooled. A job that
raises a ``DataError`` records the message. Every process then leaves with ``os._exit`` after a barrier.
"""

import dataclasses
import gc
import importlib
import json
import os
import sys
from pathlib import Path

import torch
from accelerate import PartialState
from transformers import Trainer

from csekit.errors import DataError
from csekit.methods import get_method
from csekit.recipe_run import ContrastiveRecipe, run_recipe


class Record:
    def __init__(self):
        self.batches, self.losses, self.pooled_sentences = [], [], 0


def recording_trainer(trainer_class, record: Record):
    class Recording(trainer_class):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            result = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            if model.training:
                if "sequence_lengths" in inputs:  # packed: view 0 is every `views`-th sequence of the row
                    lengths = inputs["sequence_lengths"]
                    sequences = inputs["input_ids"][0].split(lengths.flatten().tolist())[:: lengths.shape[1]]
                    self.record.batches.append([sequence.tolist() for sequence in sequences])
                else:
                    tokens, mask = inputs["input_ids"][:, 0], inputs["attention_mask"][:, 0].bool()
                    self.record.batches.append([row[keep].tolist() for row, keep in zip(tokens, mask)])
                loss = result[0] if return_outputs else result
                self.record.losses.append(loss.item())
            return result

    Recording.record = record
    return Recording


def whiten_in_shards(whitening, shards: int) -> None:
    """Make ``whitening`` (training mode) whiten each of ``shards`` batch shards alone, as that many processes would,
    and return its input's dtype (it computes in float32; the float64 test model needs float64 back)."""
    forward = whitening.forward

    def sharded(features, *args, **kwargs):
        if not whitening.training:
            return forward(features, *args, **kwargs).to(features.dtype)
        rng, first_shard_buffers, parts = torch.get_rng_state(), None, []
        for index, part in enumerate(features.chunk(shards, dim=-2)):
            torch.set_rng_state(rng)  # every rank draws the same permutations (same seed)
            parts.append(forward(part, *args, **kwargs).to(features.dtype))
            if index == 0:
                first_shard_buffers = {k: v.clone() for k, v in whitening.state_dict().items()}
        whitening.load_state_dict(first_shard_buffers)  # DDP broadcasts rank 0's buffers
        return torch.cat(parts, dim=-2)

    whitening.forward = sharded


@dataclasses.dataclass
class TestRecipe(ContrastiveRecipe):
    options: dict = dataclasses.field(default_factory=dict)

    def build_model(self, model_path, model_args):
        model = super().build_model(model_path, model_args)
        if hasattr(model, "whitening"):
            whiten_in_shards(model.whitening, self.options.get("whitening_shards") or 1)
        return model.double() if self.options.get("float64") else model


def run_contrastive(method: str, argv: list, options: dict, record: Record) -> None:
    recipe = get_method(method).recipe_module.RECIPE
    fields = {f.name: getattr(recipe, f.name) for f in dataclasses.fields(ContrastiveRecipe)}
    fields["trainer_class"] = recording_trainer(recipe.trainer_class, record)
    test_recipe = TestRecipe(**fields, options=options)
    run_recipe(test_recipe, *test_recipe.parse(argv))


def run_cached(method: str, argv: list, record: Record) -> None:
    """A method whose trainer is not a ``Trainer`` (CLSR): its model pools sentences with ``encode_pooled``."""
    model_class = get_method(method).model_class
    encode_pooled = model_class.encode_pooled

    def counting(self, sentences, *args, **kwargs):
        record.pooled_sentences += len(sentences)
        return encode_pooled(self, sentences, *args, **kwargs)

    model_class.encode_pooled = counting
    get_method(method).recipe_module.main(argv)


def main(jobs_path: str) -> None:
    # the imports live as long as the process: frozen, each job's Trainer.train() ends with a gc.collect() that skips
    # them (tests/conftest.py pytest_collection_finish)
    gc.collect()
    gc.freeze()
    for job in json.loads(Path(jobs_path).read_text()):
        importlib.import_module(job["recipe"])  # a method registered outside csekit registers on import
        record, error = Record(), None
        try:
            if not issubclass(get_method(job["method"]).trainer_class, Trainer):
                run_cached(job["method"], job["argv"], record)
            else:
                run_contrastive(job["method"], job["argv"], job.get("options", {}), record)
        except DataError as raised:
            error = str(raised)
        state = PartialState()  # the recipe set it up
        output = Path(job["argv"][job["argv"].index("--output_dir") + 1])
        output.mkdir(parents=True, exist_ok=True)
        (output / f"record_rank{state.process_index}.json").write_text(json.dumps(dict(
            vars(record), error=error, num_processes=state.num_processes)))
        state.wait_for_everyone()
    # Everything is written: skip interpreter teardown. Tearing gloo down there aborted a rank ("terminate called
    # without an active exception") or, after an explicit destroy_process_group, hung one (torch 2.13, a few runs
    # in twenty on a loaded 2-core machine).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1])
