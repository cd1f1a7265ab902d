"""Every recipe under ``accelerate launch --multi_gpu --num_processes 2`` on CPU (two gloo processes), through its real
``Trainer`` loop (``run_recipe``: dataloader sharding, DDP, the loss's cross-process gather, checkpointing).

* SimCSE and CMLM-CSE: two processes with batch B end exactly where one process with batch 2B does (the global batch
  is the same rows in the same order; float64, dropout off; loss of each step and weights after 2 steps).
* WhitenedCSE: the contrastive candidates are gathered as for SimCSE, but the whitening statistics are those of each
  process's local batch (as in the authors' code): two processes equal one process that whitens each half of its
  batch alone (and keeps rank 0's running statistics), and differ from one process that whitens the whole batch.
* CLSR: the embedding caches are pooled by both processes (each a share), equal one process's, and the head trained
  on them equals one process's.

The three launches run at once (two of them with two processes each, as when two suites share a host), each on a
free rendezvous port and under a deadline that kills it and shows its stderr. See ``dist_worker.py`` for the
test-only hooks (float64, fixed MLM masks, per-shard whitening).
"""

import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from conftest import BoundedProcess, free_ports, load_weights, recipe_flags, save_tiny_backbone

WORKER = Path(__file__).with_name("dist_worker.py")
BATCH = 4  # per process; one process gets 2 * BATCH
LAUNCH_TIMEOUT = 420


def contrastive_argv(backbone: Path, corpus: Path, output_dir: Path, batch: int, method: str, *extra) -> list:
    return ["--model_name_or_path", backbone, "--train_file", corpus, "--output_dir", output_dir,
            "--per_device_train_batch_size", batch, "--max_steps", 2, "--learning_rate", "1e-3", "--max_seq_length",
            16, "--eval_strategy", "no", "--save_steps", 2, "--load_best_model_at_end", "false", "--do_test_eval",
            "false", "--logging_steps", 1, "--seed", 7, "--report_to", "none", "--disable_tqdm", "true",
            *recipe_flags(method), *extra]


def job(method: str, output_dir: Path, argv: list, **options) -> dict:
    return {"method": method, "argv": [str(a) for a in argv] + ["--output_dir", str(output_dir)], "options": options}


def launch(jobs: list, jobs_file: Path, num_processes: int, port=None) -> BoundedProcess:
    jobs_file.write_text(json.dumps(jobs))
    # On a CPU-only host `--multi_gpu` is what starts N processes (`--cpu --num_processes 2` silently runs one);
    # the recipes' training arguments then put them in one gloo group
    mode = ["--multi_gpu", "--main_process_port", port] if num_processes > 1 else ["--cpu"]
    command = [sys.executable, "-m", "accelerate.commands.launch", *mode, "--num_processes", num_processes,
               "--num_machines", 1, "--mixed_precision", "no", "--dynamo_backend", "no", WORKER, jobs_file]
    return BoundedProcess(command, LAUNCH_TIMEOUT)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tokenizer, corpus, data_dir) -> Path:
    root = tmp_path_factory.mktemp("distributed")
    backbone = save_tiny_backbone(root / "backbone", tokenizer, dropout=0.0)
    pairs = root / "pairs.csv"
    nli = (data_dir / "nli" / "snli_devtest_pairs.tsv").read_text().splitlines()[1:]
    entailed = [line.split("\t")[1:3] for line in nli if line.endswith("\tentailment")][:64]
    pairs.write_text("sent0,sent1\n" + "".join(f'"{a}","{b}"\n' for a, b in entailed))

    def contrastive(method, name, batch, *extra, **options):
        argv = contrastive_argv(backbone, corpus, root / name, batch, method, *extra)
        return job(method, root / name, argv, float64=True, **options)

    def clsr(name):
        argv = ["--model_name_or_path", backbone, "--train_file", pairs, "--cache_dir", root / name / "cache",
                "--num_train_epochs", 3, "--per_device_train_batch_size", 16, "--warmup_epochs", 1, "--eval_epochs", 1,
                "--do_test_eval", "false", "--seed", 7]
        return job("clsr", root / name / "output", argv)

    # the float32 whitening leaves float32 rounding in the gradients, which Adam's first steps turn into +-lr for
    # parameters whose gradient is ~0: plain SGD keeps the WhitenedCSE comparison at rounding level
    whitened = ("--optim", "sgd", "--temperature", "1.0")
    two_a = [contrastive("simcse", "simcse_2", BATCH), contrastive("cmlm_cse", "cmlm_2", BATCH, fixed_masks=True)]
    # CLSR first: its own process-group set-up is under test, not the one a Trainer job leaves behind
    two_b = [clsr("clsr_2"), contrastive("whitenedcse", "white_2", BATCH, *whitened)]
    one = [contrastive("simcse", "simcse_1", 2 * BATCH), contrastive("cmlm_cse", "cmlm_1", 2 * BATCH, fixed_masks=True),
           contrastive("whitenedcse", "white_1_shards", 2 * BATCH, *whitened, whitening_shards=2),
           contrastive("whitenedcse", "white_1_whole", 2 * BATCH, *whitened), clsr("clsr_1")]
    port_a, port_b = free_ports(2)
    processes = [launch(two_a, root / "two_a.json", 2, port_a), launch(two_b, root / "two_b.json", 2, port_b),
                 launch(one, root / "one.json", 1)]
    try:
        for process in processes:
            process.wait()
    finally:
        for process in processes:
            process.kill()
    return root


def records(run: Path) -> list:
    found = [json.loads(path.read_text()) for path in sorted(run.glob("record_rank*.json"))]
    assert [r["num_processes"] for r in found] == [len(found)] * len(found) and all(r["error"] is None for r in found)
    return found


def final_weights(run: Path) -> dict:
    return load_weights(run / "checkpoint-2")


def assert_two_processes_see_the_global_batch(one: Path, two: Path) -> tuple:
    """Returns (single-process losses, process-averaged losses)."""
    (single,), ranks = records(one), records(two)
    assert len(ranks) == 2, "the two processes did not form one group (each trained alone as rank 0)"
    rank0, rank1 = ranks
    assert len(single["batches"]) == 2
    for step in range(2):  # rows [0:B] and [B:2B] of one process's batch of 2B, in order
        assert rank0["batches"][step] + rank1["batches"][step] == single["batches"][step]
    averaged = [(a + b) / 2 for a, b in zip(rank0["losses"], rank1["losses"])]
    return single["losses"], averaged


def assert_same_weights(reference: dict, other: dict, rtol: float, atol: float, keys=None) -> None:
    assert reference.keys() == other.keys()
    for name in keys or reference:
        torch.testing.assert_close(other[name], reference[name], rtol=rtol, atol=atol, msg=name)


def test_simcse_two_processes_equal_one_process_with_the_doubled_batch(runs):
    single, averaged = assert_two_processes_see_the_global_batch(runs / "simcse_1", runs / "simcse_2")
    assert averaged == pytest.approx(single, rel=1e-12)
    assert single[1] != pytest.approx(single[0], rel=1e-6)  # the first step moved the model
    weights = final_weights(runs / "simcse_1")
    assert weights["encoder.embeddings.word_embeddings.weight"].dtype == torch.float64
    # 1 and 2 processes sum the gradient in another order; Adam divides each element by its own size, so an element
    # whose batch terms nearly cancel carries that float64 rounding into the update (seen: 4e-9 relative on one
    # mlp.dense.bias entry). A missing gather or label offset moves the losses above, by far more.
    assert_same_weights(weights, final_weights(runs / "simcse_2"), rtol=1e-8, atol=1e-12)


def test_cmlm_cse_two_processes_equal_one_process_with_the_doubled_batch(runs):
    # the fixed masks select 2 word pieces per sentence but 1 in a one-word sentence: the processes hold different
    # numbers of masked tokens, so this also checks that the MLM term is a mean over all processes' masked tokens
    single, averaged = assert_two_processes_see_the_global_batch(runs / "cmlm_1", runs / "cmlm_2")
    assert averaged == pytest.approx(single, rel=1e-6)  # the model computes its MLM cross-entropy in float32
    weights = final_weights(runs / "cmlm_1")
    assert any(name.startswith("auxiliary.fusioner.") for name in weights)
    assert_same_weights(weights, final_weights(runs / "cmlm_2"), rtol=1e-9, atol=1e-12)


def test_whitenedcse_whitens_with_the_statistics_of_each_process(runs):
    single, averaged = assert_two_processes_see_the_global_batch(runs / "white_1_shards", runs / "white_2")
    whole, _ = assert_two_processes_see_the_global_batch(runs / "white_1_whole", runs / "white_2")
    # equal: one process whitening each half of its batch alone, with rank 0's running statistics kept
    assert averaged == pytest.approx(single, rel=1e-6)
    two, shards, whole_batch = (final_weights(runs / name) for name in ("white_2", "white_1_shards", "white_1_whole"))
    assert_same_weights(shards, two, rtol=1e-6, atol=1e-7)  # float32 whitening and loss inside
    running = [name for name in two if name.startswith("whitening.") and "running" in name]
    assert len(running) == 2 and two["whitening.running_mean"].abs().max() > 0  # trained, not the initial zeros
    # not equal: one process whitening its whole batch of 2B: the loss, the weights and the running statistics
    # all move by orders of magnitude more than the rounding between the equal runs
    assert whole[0] != pytest.approx(single[0], rel=1e-4)
    for name in running + ["mlp.dense.weight"]:
        rounding, other = ((two[name] - run[name]).abs().max().item() for run in (shards, whole_batch))
        assert other > 1000 * rounding and other > 1e-7, name


def test_clsr_caches_are_pooled_by_every_process_and_the_head_equals_one_process(runs):
    (single,), ranks = records(runs / "clsr_1" / "output"), records(runs / "clsr_2" / "output")
    assert len(ranks) == 2, "the two processes did not form one group (each ran alone as rank 0)"
    rank0, rank1 = ranks
    assert 0 < rank0["pooled_sentences"] < single["pooled_sentences"]
    assert rank0["pooled_sentences"] + rank1["pooled_sentences"] == single["pooled_sentences"]
    one_cache, two_cache = sorted((runs / "clsr_1" / "cache").iterdir()), sorted((runs / "clsr_2" / "cache").iterdir())
    assert [p.name for p in one_cache] == [p.name for p in two_cache] and len(one_cache) == 2  # train + STS-B dev
    for one_entry, two_entry in zip(one_cache, two_cache):
        torch.testing.assert_close(load_file(two_entry)["vectors"], load_file(one_entry)["vectors"], rtol=0, atol=1e-5)
    one_model, two_model = (load_weights(runs / name / "output") for name in ("clsr_1", "clsr_2"))
    assert_same_weights(one_model, two_model, rtol=0, atol=1e-5)
    result = json.loads((runs / "clsr_2" / "output" / "eval_results.json").read_text())
    assert result["train_cache"] == "built by 2 processes"
