"""Several training datasets in one run, as sentence-transformers' trainer takes a dict of them: every step's batch
comes from one dataset, so an anchor's in-batch negatives are texts of its own source and a step's rows share their
columns (pairs in one dataset, triplets in another).

The order of the steps is sentence-transformers' ``MultiDatasetBatchSamplers``:

* ``proportional`` (its default): every batch of every dataset once an epoch, the datasets' turns shuffled, so each
  dataset's share of the steps is its share of the batches;
* ``round_robin``: the datasets in turn, one batch each, until the smallest is used up; each has an equal share.

Each dataset's rows are shuffled and cut into whole batches (the last partial one is left out, as
``--dataloader_drop_last`` does for one dataset). Every draw comes from a generator of its own, seeded by
``(seed, epoch, what)``: a resumed run takes the uninterrupted run's batches. A step of N processes is one batch of
N x ``per_device_train_batch_size`` rows of one dataset, handed out in N consecutive chunks (accelerate gives the
i-th chunk to process i), so N processes train what one process trains with the whole batch.
"""

import bisect
from typing import Optional

import torch

from ..errors import DataError
from .data import DATASET_PROMPT, data_fingerprint
from .randomness import EXAMPLE_INDEX, derived_seed

BATCH_SAMPLERS = ("proportional", "round_robin")


def is_dataset_dict(dataset) -> bool:
    """A dict (or ``DatasetDict``) of datasets, as a caller gives several."""
    return isinstance(dataset, dict) and any(hasattr(value, "column_names") for value in dataset.values())


def one_training_dataset(dataset):
    """``dataset``, or a [`DatasetMix`][csekit.trainers.multi_dataset.DatasetMix] of it when it is several."""
    return DatasetMix(dataset) if is_dataset_dict(dataset) else dataset


def generator(seed: int, epoch: int, what: str) -> torch.Generator:
    return torch.Generator().manual_seed(derived_seed(seed, epoch, what))


class DatasetMix(torch.utils.data.Dataset):
    """Named datasets read as one: row ``i`` of the mix is row ``i - offset`` of the dataset it falls in, and its
    ``example_index`` (from which a collator's random draws derive: ``randomness.py``) is ``i``, unique in the run."""

    def __init__(self, datasets: dict, source: str = "train_dataset"):
        if not datasets:
            raise DataError(f"{source}: an empty dict of datasets")
        for name, dataset in datasets.items():
            if not isinstance(name, str) or not name:
                raise DataError(f"{source}: dataset name {name!r}; name each dataset with a non-empty string")
            if not hasattr(dataset, "__len__") or not hasattr(dataset, "column_names"):
                raise DataError(f"{source}[{name!r}]: a {type(dataset).__name__}; several datasets are each a "
                                "datasets.Dataset of known size (a streaming one cannot be cut into batches up front)")
            if len(dataset) == 0:
                raise DataError(f"{source}[{name!r}]: no examples")
        self.datasets = dict(datasets)
        self.prompts = {}  # {name: prompt} of the datasets given one (``use_prompts``)
        self.sizes = [len(dataset) for dataset in self.datasets.values()]
        self.offsets = [sum(self.sizes[:k]) for k in range(len(self.sizes))]
        self._names, self._parts = list(self.datasets), list(self.datasets.values())

    def __len__(self) -> int:
        return sum(self.sizes)

    def __getitem__(self, index: int) -> dict:
        k = bisect.bisect_right(self.offsets, index) - 1
        row = dict(self._parts[k][int(index - self.offsets[k])])
        row[EXAMPLE_INDEX] = int(index)
        if self._names[k] in self.prompts:
            row[DATASET_PROMPT] = self.prompts[self._names[k]]
        return row

    def use_prompts(self, prompts: dict) -> None:
        """Give each named dataset its own prompt, which the collators put before its texts in place of the model's
        (``""``: none); a name that is not one of the datasets is one line."""
        unknown = [name for name in prompts if name not in self.datasets]
        if unknown:
            raise DataError(f"--dataset_prompts {unknown[0]}: not one of the datasets ({', '.join(self.datasets)})")
        self.prompts = dict(prompts)

    def sources(self, source: str = "train_dataset") -> dict:
        """``{name as a message names it: dataset}``."""
        return {f"{source}[{name!r}]": dataset for name, dataset in self.datasets.items()}


class MultiDatasetBatchSampler(torch.utils.data.Sampler):
    """The batches of a [`DatasetMix`][csekit.trainers.multi_dataset.DatasetMix]'s rows, one dataset a step (the
    module docstring). Yields per-process chunks of ``batch_size`` rows, ``processes`` consecutive chunks a step."""

    def __init__(self, mix: DatasetMix, batch_size: int, processes: int = 1, strategy: str = "proportional",
                 seed: int = 42, drop_last: bool = True):
        if strategy not in BATCH_SAMPLERS:
            raise DataError(f"--multi_dataset_batch_sampler {strategy!r}: use one of {', '.join(BATCH_SAMPLERS)}")
        if not drop_last:
            raise DataError("--dataloader_drop_last false: with several datasets every step is a whole batch of one "
                            "dataset; leave it true")
        self.mix, self.batch_size, self.processes, self.strategy, self.seed = mix, batch_size, processes, strategy, seed
        self.epoch = 0
        step = batch_size * processes
        self.batches = [size // step for size in mix.sizes]  # whole steps of each dataset an epoch
        short = [name for name, count in zip(mix.datasets, self.batches) if count == 0]
        if short:
            raise DataError(f"train_dataset[{short[0]!r}]: {mix.sizes[self.batches.index(0)]} example(s), fewer than "
                            f"one step's batch of {step}")

    @classmethod
    def of_arguments(cls, mix: DatasetMix, args) -> "MultiDatasetBatchSampler":
        """The sampler a run of training arguments ``args`` draws with: its per-device batch, processes, strategy,
        ``data_seed`` (else ``seed``) and ``dataloader_drop_last``."""
        seed = args.data_seed if args.data_seed is not None else args.seed
        return cls(mix, args.per_device_train_batch_size, args.world_size,
                   getattr(args, "multi_dataset_batch_sampler", "proportional"), seed, args.dataloader_drop_last)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def steps(self) -> list:
        """Each dataset's steps an epoch: all its whole batches, or under round robin the smallest dataset's count."""
        return [min(self.batches)] * len(self.batches) if self.strategy == "round_robin" else list(self.batches)

    def turns(self) -> list:
        """The dataset of each step of the current epoch, in order."""
        if self.strategy == "round_robin":
            return list(range(len(self.batches))) * min(self.batches)
        turns = torch.tensor([k for k, count in enumerate(self.batches) for _ in range(count)])
        return turns[torch.randperm(len(turns), generator=generator(self.seed, self.epoch, "turns"))].tolist()

    def shares(self) -> dict:
        """``{dataset name: its share of an epoch's steps}``."""
        steps = self.steps()
        return {name: count / sum(steps) for name, count in zip(self.mix.datasets, steps)}

    def __iter__(self):
        orders = [(torch.randperm(size, generator=generator(self.seed, self.epoch, f"rows {k}")) + offset).tolist()
                  for k, (size, offset) in enumerate(zip(self.mix.sizes, self.mix.offsets))]
        taken = [0] * len(orders)
        step = self.batch_size * self.processes
        for k in self.turns():
            rows = orders[k][taken[k] * step:(taken[k] + 1) * step]
            taken[k] += 1
            for chunk in range(self.processes):
                yield rows[chunk * self.batch_size:(chunk + 1) * self.batch_size]

    def __len__(self) -> int:
        return sum(self.steps()) * self.processes


def mix_identity(mix: DatasetMix, shares: Optional[dict] = None) -> str:
    """What names the mixed data in a run record: each dataset's name, the hash of its texts
    ([`data_fingerprint`][csekit.trainers.data.data_fingerprint]), its prompt when it has one and its share of the
    steps."""
    shares = shares or {}
    return "; ".join(f"{name}: {data_fingerprint(dataset)}"
                     + (f", prompt {mix.prompts[name]!r}" if name in mix.prompts else "")
                     + (f", {shares[name]:.1%} of the steps" if name in shares else "")
                     for name, dataset in mix.datasets.items())


def use_dataset_prompts(dataset, value, prompt_refused: str = "") -> dict:
    """Give the datasets of ``dataset`` (a [`DatasetMix`][csekit.trainers.multi_dataset.DatasetMix]) the prompts of
    ``--dataset_prompts`` ``value`` ([`dataset_prompt_map`][csekit.trainers.multi_dataset.dataset_prompt_map]) and
    return them; one line for one dataset, or a method that cannot train with a prompt (its ``prompt_refused``)."""
    prompts = dataset_prompt_map(value)
    if not prompts:
        return {}
    if not isinstance(dataset, DatasetMix):
        raise DataError("--dataset_prompts names datasets of several (a dict of them, or --train_file given more than "
                        "once); for one dataset give the model's --prompt")
    if prompt_refused:
        raise DataError(f"--dataset_prompts: {prompt_refused}")
    dataset.use_prompts(prompts)
    return prompts


def dataset_prompt_map(value) -> dict:
    """``--dataset_prompts`` as ``{dataset name: prompt}``: a dict as given in Python, or the command line's
    ``NAME=PROMPT`` items (split at the first ``=``; ``NAME=`` is no prompt); anything else is one line."""
    if not value:
        return {}
    if isinstance(value, dict):  # (a dict's names are distinct)
        for name, prompt in value.items():
            if not isinstance(name, str) or not isinstance(prompt, str):
                raise DataError(f"--dataset_prompts {name!r}: {prompt!r}: a dataset name and its prompt are strings")
        return dict(value)
    items = []
    for item in value if isinstance(value, (list, tuple)) else [value]:
        if not isinstance(item, str) or "=" not in item:
            raise DataError(f"--dataset_prompts {item!r}: give NAME=PROMPT items (in Python a dict), NAME a dataset's "
                            "name (its --train_file)")
        items.append(tuple(item.split("=", 1)))
    names = [name for name, _ in items]
    if len(set(names)) < len(names):
        raise DataError(f"--dataset_prompts: {next(n for n in names if names.count(n) > 1)} is given more than once")
    return dict(items)


__all__ = ["BATCH_SAMPLERS", "DatasetMix", "MultiDatasetBatchSampler", "dataset_prompt_map", "is_dataset_dict",
           "mix_identity", "one_training_dataset", "use_dataset_prompts"]
