"""Several training datasets in one run (``trainers/multi_dataset.py``): a dict of datasets in Python, ``--train_file``
given more than once (or a YAML list) on the command line.

Oracles: sentence-transformers' own ``ProportionalBatchSampler`` and ``RoundRobinBatchSampler`` for which dataset
each step draws from and how many steps each gets; accelerate's own ``BatchSamplerShard`` for what each of N processes
is handed; the uninterrupted run for a resumed one; the batch as the collator receives it for "one dataset a step"."""

import json
import shutil
from collections import Counter

import pytest
import torch
from datasets import Dataset, DatasetDict
from transformers import Trainer

from conftest import load_weights, recipe_flags, save_tiny_backbone
from csekit import cli
from csekit.errors import DataError
from csekit.methods import METHODS
from csekit.modeling import SimCSEModel
from csekit.trainers import CSETrainingArguments, SimCSETrainer
from csekit.trainers.arguments import config_kwargs
from csekit.trainers.multi_dataset import DatasetMix, MultiDatasetBatchSampler

WIKI = [f"sentence {i} tells of the {['red', 'old', 'quiet'][i % 3]} harbour {i * 7}" for i in range(40)]
NLI = {"sent0": [f"premise {i} of a man" for i in range(24)], "sent1": [f"a person {i}" for i in range(24)],
       "hard_neg": [f"nobody {i} at all" for i in range(24)]}
SIZES = {"wiki": 40, "nli": 24, "pairs": 17}


def mix_of(sizes: dict) -> DatasetMix:
    return DatasetMix({name: Dataset.from_dict({"sent0": [f"{name} {i}" for i in range(size)]})
                       for name, size in sizes.items()})


def dataset_of(mix: DatasetMix, rows: list) -> str:
    """The one dataset ``rows`` (indices of the mix) come from."""
    names = {next(name for name, offset, size in zip(mix.datasets, mix.offsets, mix.sizes)
                  if offset <= row < offset + size) for row in rows}
    assert len(names) == 1, names
    return names.pop()


def sentence_transformers_turns(mix: DatasetMix, strategy: str, batch_size: int) -> list:
    """The dataset of each batch of sentence-transformers' own sampler over the same datasets."""
    try:
        from sentence_transformers.base.sampler import ProportionalBatchSampler, RoundRobinBatchSampler
    except ImportError:  # sentence-transformers 5
        from sentence_transformers.sampler import ProportionalBatchSampler, RoundRobinBatchSampler
    datasets = list(mix.datasets.values())
    concatenated = torch.utils.data.ConcatDataset(datasets)
    samplers = [torch.utils.data.BatchSampler(torch.utils.data.RandomSampler(range(len(dataset))), batch_size, True)
                for dataset in datasets]
    kind = ProportionalBatchSampler if strategy == "proportional" else RoundRobinBatchSampler
    return [dataset_of(mix, rows) for rows in kind(concatenated, samplers, torch.Generator(), seed=0)]


@pytest.mark.parametrize("strategy", ["proportional", "round_robin"])
def test_each_step_draws_from_one_dataset_as_sentence_transformers_samplers_do(strategy):
    """Each batch holds one dataset's rows, no row twice an epoch; the steps each dataset gets are
    sentence-transformers' (round robin: in the same order), and the order is the seed's and the epoch's alone."""
    mix = mix_of(SIZES)
    sampler = MultiDatasetBatchSampler(mix, batch_size=8, strategy=strategy, seed=5)
    batches = list(sampler)
    assert len(batches) == len(sampler) and all(len(rows) == 8 for rows in batches)
    turns = [dataset_of(mix, rows) for rows in batches]
    rows = [row for batch in batches for row in batch]
    assert len(rows) == len(set(rows))
    theirs = sentence_transformers_turns(mix, strategy, 8)
    if strategy == "round_robin":  # whole rounds until the smallest is used up (sentence-transformers 5 went on
        assert turns == ["wiki", "nli", "pairs"] * 2  # into a last partial round, which 6 leaves out)
        assert theirs[:len(turns)] == turns and len(theirs) - len(turns) < len(SIZES)
    else:
        assert Counter(turns) == Counter(theirs)
        assert turns != sorted(turns, key=list(SIZES).index)  # shuffled turns
    assert sampler.shares() == {name: count / len(turns) for name, count in Counter(turns).items()}
    again = MultiDatasetBatchSampler(mix, batch_size=8, strategy=strategy, seed=5)
    assert list(again) == batches  # the same seed and epoch: the same batches
    again.set_epoch(1)
    next_turns = [dataset_of(mix, rows) for rows in again]
    assert list(again) != batches and Counter(next_turns) == Counter(turns)
    assert (next_turns != turns) == (strategy == "proportional")  # turns shuffled anew each epoch


def test_n_processes_are_handed_the_chunks_of_one_batch_of_one_dataset():
    """accelerate's own sharding of the sampler gives process i the i-th chunk of each step's batch: the N processes
    of a step train on one dataset's batch, the batch one process takes when it has it whole."""
    from accelerate.data_loader import BatchSamplerShard

    mix = mix_of(SIZES)
    whole = list(MultiDatasetBatchSampler(mix, batch_size=8, processes=1, seed=3))
    sharded = MultiDatasetBatchSampler(mix, batch_size=4, processes=2, seed=3)
    per_process = [list(BatchSamplerShard(sharded, num_processes=2, process_index=i)) for i in range(2)]
    assert [first + second for first, second in zip(*per_process)] == whole


@pytest.fixture(scope="module")
def backbone(tmp_path_factory, tokenizer):
    return save_tiny_backbone(tmp_path_factory.mktemp("backbone") / "backbone", tokenizer)


def arguments(folder, **overrides) -> CSETrainingArguments:
    values = dict(output_dir=str(folder), per_device_train_batch_size=8, max_steps=5, use_cpu=True, report_to="none",
                  save_steps=2, eval_strategy="no", load_best_model_at_end=False, seed=3, learning_rate=1e-3,
                  disable_tqdm=True, save_total_limit=None)
    return CSETrainingArguments(**{**values, **overrides})


def datasets() -> dict:
    return {"wiki": Dataset.from_dict({"sent0": WIKI}), "nli": Dataset.from_dict(NLI)}


def trainer_of(backbone, folder, data=None, model_settings=None, **overrides) -> SimCSETrainer:
    torch.manual_seed(0)  # the head's first weights, the same in every run compared
    model = SimCSEModel.from_encoder(str(backbone), pooler_type="cls", **(model_settings or {}))
    return SimCSETrainer(model=model, args=arguments(folder, **overrides),
                         train_dataset=datasets() if data is None else data)


def test_a_dict_of_datasets_trains_one_datasets_batch_a_step_and_is_recorded(backbone, tmp_path):
    """Every step's batch, as the collator gets it, is one dataset's (its columns: sentences, or triplets); the run
    record names each dataset with the hash of its texts and its share of the steps."""
    trainer = trainer_of(backbone, tmp_path / "out", DatasetDict(datasets()), num_train_epochs=2, max_steps=-1)
    seen = []
    collate = trainer.data_collator.collate_views

    def collate_views(views):
        seen.append(len(views))
        return collate(views)

    trainer.data_collator.collate_views = collate_views
    trainer.train()
    assert Counter(seen) == {2: 2 * 5, 3: 2 * 3}  # 5 wiki batches (2 dropout views), 3 NLI triplet batches an epoch
    record = trainer.run_record()["train_data"]
    assert record.startswith("wiki: sha256:") and "40 examples, 62.5% of the steps; nli: sha256:" in record
    assert record.endswith("24 examples, 37.5% of the steps")
    assert trainer.run_arguments()["data_args"]["train_dataset"] == record  # training_args.json, as the card shows it


def test_a_run_on_several_datasets_resumes_to_the_uninterrupted_result(backbone, tmp_path):
    """Resumed from its checkpoint at step 8, inside its second epoch (6 steps an epoch: 3 rounds of 2 datasets), a
    run on two datasets goes on into its third and ends with the uninterrupted run's weights: the same batches, each
    dataset's rows and turns redrawn from the seed and the epoch."""
    settings = dict(multi_dataset_batch_sampler="round_robin", max_steps=14, save_steps=4)
    trainer_of(backbone, tmp_path / "whole", **settings).train()
    shutil.copytree(tmp_path / "whole" / "checkpoint-8", tmp_path / "resumed" / "checkpoint-8")
    trainer_of(backbone, tmp_path / "resumed", **settings).train(resume_from_checkpoint=True)
    whole, resumed = load_weights(tmp_path / "whole" / "checkpoint-12"), load_weights(tmp_path / "resumed" /
                                                                                      "checkpoint-12")
    assert whole.keys() == resumed.keys()
    for name, tensor in whole.items():
        torch.testing.assert_close(resumed[name], tensor, rtol=0, atol=0, msg=name)
    other = tmp_path / "other"
    shutil.copytree(tmp_path / "whole" / "checkpoint-8", other / "checkpoint-8")
    changed = {**datasets(), "nli": Dataset.from_dict({**NLI, "sent1": NLI["sent1"][::-1]})}
    with pytest.raises(DataError, match="the training data"):  # other data under the same names
        trainer_of(backbone, other, changed, **settings).train(resume_from_checkpoint=True)
    with pytest.raises(DataError, match="the training data"):  # the same data, a dataset given a prompt
        trainer_of(backbone, other, dataset_prompts={"nli": "query: "}, **settings).train(resume_from_checkpoint=True)


@pytest.mark.parametrize("matryoshka", [None, [16, 8]], ids=["plain", "matryoshka"])
def test_gradient_caching_trains_several_datasets_as_without_it(matryoshka, tokenizer, tmp_path):
    """Gradient caching, and with Matryoshka sizes too: each step (sentences from one dataset, triplets from the
    other) logs every size's term and ends where the uncached run ends."""
    backbone = save_tiny_backbone(tmp_path / "backbone", tokenizer, dropout=0.0)
    logs = {}
    for name, size in (("whole", None), ("cached", 3)):
        trainer = trainer_of(backbone, tmp_path / name, model_settings={"matryoshka_dims": matryoshka}, max_steps=3,
                             save_steps=3, mini_batch_size=size, optim="sgd", logging_steps=1)
        trainer.train()
        logs[name] = [entry for entry in trainer.state.log_history if "loss" in entry]
    whole, cached = (load_weights(tmp_path / name / "checkpoint-3") for name in ("whole", "cached"))
    for name, tensor in whole.items():
        torch.testing.assert_close(cached[name], tensor, rtol=1e-4, atol=1e-6, msg=name)
    terms = [f"loss_matryoshka_{size}" for size in matryoshka or []]
    assert all(set(terms) <= set(entry) for entry in logs["whole"] + logs["cached"]) and len(logs["whole"]) == 3
    for step_whole, step_cached in zip(logs["whole"], logs["cached"]):
        assert all(step_cached[term] == pytest.approx(step_whole[term], rel=1e-4) for term in ["loss", *terms])


PROMPTED = [f"an old line {i} about the ferry" for i in range(24)]
HARBOUR = [f"the harbour {i} at dusk with its {['nets', 'boats'][i % 2]}" for i in range(24)]


@pytest.mark.parametrize("method", [pytest.param(method, id=method.name) for method in METHODS.values()
                                    if issubclass(method.trainer_class, Trainer)])
def test_each_dataset_is_collated_with_its_own_prompt(method, backbone, tokenizer, tmp_path):
    """``dataset_prompts={"ferry": "query: ", "wiki": ""}`` on a model prompted ``"passage: "``: every batch of
    ``ferry`` is its texts tokenized after ``"query: "`` (in place of the model's prompt, not after it), of ``wiki``
    its texts alone, of ``harbour`` (no prompt of its own) its texts after the model's (the tokenizer on the texts is
    the oracle), padded and packed, in every method that trains with a prompt; a method whose collator edits tokens
    (``prompt_refused``) refuses in one line."""
    torch.manual_seed(0)
    refused = method.config_class.prompt_refused
    argv = ["--model_name_or_path", str(backbone), *recipe_flags(method, backbone),  # (the registry's test model)
            *([] if refused else ["--prompt", "passage: "])]
    model = method.training_model_class.from_encoder(str(backbone), **config_kwargs(
        method.recipe_module.RECIPE.parse(argv)[0], method.config_class))
    texts = {"wiki": WIKI[:24], "ferry": PROMPTED, "harbour": HARBOUR}
    args = arguments(tmp_path / "out", dataset_prompts={"ferry": "query: ", "wiki": ""})
    trainer = method.trainer_class(model=model, args=args, processing_class=tokenizer, train_dataset={
        name: Dataset.from_dict({"sent0": sentences}) for name, sentences in texts.items()})
    if refused:
        with pytest.raises(DataError, match=f"^--dataset_prompts: {refused}"):
            trainer.preflight()
        return
    trainer.preflight()
    prompts = {"wiki": "", "ferry": "query: ", "harbour": "passage: "}
    expected = {name: {tuple(tokenizer(prompts[name] + text)["input_ids"]) for text in sentences}
                for name, sentences in texts.items()}
    for packed in (False, True):  # padded batches, and packed ones (the recipes' default on a CPU)
        trainer.data_collator.padding_free, seen = packed, Counter()
        for batch in trainer.get_train_dataloader():
            if packed:  # view 0 of each example: every `views`-th sequence of the row
                lengths = batch["sequence_lengths"]
                rows = {tuple(sequence.tolist()) for sequence in
                        batch["input_ids"][0].split(lengths.flatten().tolist())[:: lengths.shape[1]]}
            else:
                ids, mask = batch["input_ids"][:, 0], batch["attention_mask"][:, 0].bool()
                rows = {tuple(row[keep].tolist()) for row, keep in zip(ids, mask)}
            seen.update(name for name, sentences in expected.items() if rows <= sentences)
        assert seen == {"wiki": 3, "ferry": 3, "harbour": 3}, (packed, seen)
    record = trainer.run_record()["train_data"]
    assert "ferry: sha256:" in record and "prompt 'query: '" in record and "prompt ''" in record


BAD = [
    ("an empty dataset", {"wiki": Dataset.from_dict({"sent0": WIKI}), "none": Dataset.from_dict({"sent0": []})}, {},
     "train_dataset['none']: no examples"),
    ("a dataset without the method's columns", {"wiki": Dataset.from_dict({"sent0": WIKI}),
                                                "odd": Dataset.from_dict({"anchor": WIKI})}, {},
     "train_dataset['odd']: columns none of sent0"),
    ("a streaming dataset", {"wiki": Dataset.from_dict({"sent0": WIKI}),
                             "stream": Dataset.from_dict({"sent0": WIKI}).to_iterable_dataset()}, {},
     "train_dataset['stream']: a IterableDataset"),
    ("a dataset smaller than a step", {"wiki": Dataset.from_dict({"sent0": WIKI}),
                                       "few": Dataset.from_dict({"sent0": WIKI[:5]})}, {},
     "train_dataset['few']: 5 example(s), fewer than one step's batch of 8"),
    ("a blank text in one dataset", {"wiki": Dataset.from_dict({"sent0": WIKI[:9] + [" "]})}, {},
     "train_dataset['wiki'] row 10: sent0 is blank"),
    ("partial batches", datasets(), {"dataloader_drop_last": False}, "--dataloader_drop_last false"),
    ("a prompt for a dataset not in the dict", datasets(), {"dataset_prompts": {"other": "query: "}},
     "--dataset_prompts other: not one of the datasets (wiki, nli)"),
    ("a prompt item without its name", datasets(), {"dataset_prompts": ["query: "]},
     "--dataset_prompts 'query: ': give NAME=PROMPT items"),
    ("dataset prompts for one dataset", Dataset.from_dict({"sent0": WIKI}), {"dataset_prompts": {"wiki": "q: "}},
     "--dataset_prompts names datasets of several"),
    ("a dataset prompt leaving no room", datasets(), {"dataset_prompts": {"nli": "query " * 40}},
     "which leaves no room for the sentence at max_length 32"),
]


@pytest.mark.parametrize("data, overrides, words", [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_what_several_datasets_cannot_train_is_one_line_before_any_step(backbone, tmp_path, data, overrides, words):
    out = tmp_path / "out"
    with pytest.raises(DataError) as error:
        trainer_of(backbone, out, data, **overrides).train()
    assert words in str(error.value) and "\n" not in str(error.value)
    assert not out.exists() or not any(out.iterdir())


def test_the_command_line_trains_on_each_train_file_and_records_each(backbone, tmp_path, capsys):
    """``--train_file`` given twice and a YAML list are the same run; ``training_args.json`` (which the card shows)
    names each file with its hash and share; a file given twice is one line."""
    (tmp_path / "wiki.txt").write_text("\n".join(WIKI) + "\n")
    rows = "".join(f"{a},{b},{c}\n" for a, b, c in zip(*NLI.values()))
    (tmp_path / "nli.csv").write_text("sent0,sent1,hard_neg\n" + rows)
    common = ["--model_name_or_path", str(backbone), "--per_device_train_batch_size", "8", "--max_steps", "3",
              "--eval_strategy", "no", "--load_best_model_at_end", "false", "--do_test_eval", "false", "--report_to",
              "none", "--disable_tqdm", "true", "--seed", "4"]
    files = ["--train_file", str(tmp_path / "wiki.txt"), "--train_file", str(tmp_path / "nli.csv")]
    assert cli.main(["train", "simcse", *common, *files, "--output_dir", str(tmp_path / "flags")]) == 0
    (tmp_path / "run.yaml").write_text(f"train_file:\n  - {tmp_path / 'wiki.txt'}\n  - {tmp_path / 'nli.csv'}\n")
    assert cli.main(["train", "simcse", "--config", str(tmp_path / "run.yaml"), *common,
                     "--output_dir", str(tmp_path / "yaml")]) == 0
    data = json.loads((tmp_path / "flags" / "training_args.json").read_text())["data_args"]
    assert data["train_file"] == [str(tmp_path / "wiki.txt"), str(tmp_path / "nli.csv")]
    assert "wiki.txt: sha256:" in data["train_dataset"] and "24 examples, 37.5% of the steps" in data["train_dataset"]
    flags, yaml = (load_weights(tmp_path / name) for name in ("flags", "yaml"))
    assert all(torch.equal(yaml[name], tensor) for name, tensor in flags.items())
    capsys.readouterr()
    twice = ["--output_dir", str(tmp_path / "twice")]
    assert cli.main(["train", "simcse", *common, *files, files[0], files[1], *twice]) == 2
    assert "is given more than once" in capsys.readouterr().err
    assert not (tmp_path / "twice").exists()


def test_the_command_line_gives_a_train_file_its_own_prompt(backbone, tmp_path, capsys):
    """``--dataset_prompts FILE=PROMPT`` (a ``--train_file`` as given): the record names that file's prompt; a file
    that is not a ``--train_file``, and a prompt with one file, are one line with nothing written."""
    (tmp_path / "wiki.txt").write_text("\n".join(WIKI) + "\n")
    (tmp_path / "ferry.txt").write_text("\n".join(PROMPTED) + "\n")
    wiki, ferry = str(tmp_path / "wiki.txt"), str(tmp_path / "ferry.txt")
    common = ["train", "simcse", "--model_name_or_path", str(backbone), "--per_device_train_batch_size", "8",
              "--max_steps", "2", "--eval_strategy", "no", "--load_best_model_at_end", "false", "--do_test_eval",
              "false", "--report_to", "none", "--disable_tqdm", "true"]
    assert cli.main([*common, "--train_file", wiki, "--train_file", ferry, "--dataset_prompts", f"{ferry}=query: ",
                     "--output_dir", str(tmp_path / "out")]) == 0
    record = json.loads((tmp_path / "out" / "training_args.json").read_text())["data_args"]["train_dataset"]
    assert f"{ferry}: sha256:" in record and "prompt 'query: '" in record and record.count("prompt") == 1
    for files, line in (([wiki, ferry], f"--dataset_prompts {wiki}x: not one of the datasets"),
                        ([wiki], "--dataset_prompts names datasets of several")):
        capsys.readouterr()
        argv = [*common, *[item for name in files for item in ("--train_file", name)], "--dataset_prompts",
                f"{wiki}x=query: " if len(files) == 2 else f"{wiki}=query: ", "--output_dir", str(tmp_path / "bad")]
        assert cli.main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and line in err[0], err
        assert not (tmp_path / "bad").exists() or not any((tmp_path / "bad").iterdir())
