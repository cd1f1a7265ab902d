"""Speed: benchmarks/gpu_throughput.py and gradient_cache.py stay runnable on the CPU at tiny sizes and their JSON
holds what RESULTS.md reads; the speed-ups in the training path leave their outputs unchanged. matryoshka.py runs
end to end on the tiny backbone."""

import inspect
import json
import re

import pytest
import torch
import yaml

from conftest import LOWER_BOUNDS, REPO_ROOT
from csekit.data import read_sentences
from csekit.trainers.collators import ContrastiveCollator

WIKI1M_STEPS = 15_625  # one wiki1m epoch: 1,000,000 sentences / 64


@pytest.fixture
def gpu_throughput(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO_ROOT / "benchmarks"))  # as `python benchmarks/gpu_throughput.py` runs it
    import gpu_throughput

    return gpu_throughput


def test_gpu_throughput_runs_on_cpu_and_reports_every_field(gpu_throughput, minilm_path, data_dir, tmp_path, capsys):
    # every other sentence longer than 32 tokens, so that every batch pads to the 32-token cap and has padding
    lines = (data_dir / "wiki" / "wiki1m_for_simcse.txt").read_text().splitlines()
    wiki = tmp_path / "wiki.txt"
    wiki.write_text("\n".join(" ".join(lines[i : i + 4 if i % 8 == 0 else i + 1]) for i in range(0, 800, 4)) + "\n")
    gpu_throughput.main(["--device", "cpu", "--size", "tiny", "--steps", "2", "--warmup", "1", "--st",
                         "--trainer-steps", "2", "--profile", "--peak-tflops", "1.0", "--threads", "1",
                         "--model-config", str(minilm_path), "--data-file", str(wiki), "--output", str(tmp_path)])
    record = json.loads((tmp_path / "gpu_throughput.json").read_text())
    assert (tmp_path / "gpu_throughput.md").read_text().startswith("Command: `python benchmarks/gpu_throughput.py")
    assert record["errors"] == []
    results = {r["name"]: r for r in record["results"]}
    assert list(results) == [f"{method} {layout}" for method in ("SimCSE", "WhitenedCSE", "CMLM-CSE")
                             for layout in ("packed", "padded")] + ["sentence-transformers MNRL"]
    assert record["model"] == {"layers": 2, "hidden": 32} and record["precision"] == "fp32"
    for r in results.values():
        seconds = r["seconds_per_step"]
        assert r["steps"] == 2 and seconds > 0 and r["step_seconds"]["min"] <= r["step_seconds"]["max"]
        assert r["steps_per_second"] == pytest.approx(1 / seconds)
        # every batch reaches the 32-token cap: 64 sentences x 2 views x 32 padded positions per step; a packed
        # batch runs on its real tokens only
        if r["padding_free"]:
            assert r["tokens_per_second"] == r["real_tokens_per_second"] and r["padding_share"] == 0
        else:
            assert r["tokens_per_second"] * seconds == pytest.approx(64 * 2 * 32)
            assert r["real_tokens_per_second"] < r["tokens_per_second"]
        assert r["epoch_seconds"] == pytest.approx(WIKI1M_STEPS * seconds)
        assert r["epoch_seconds_with_collation"] > r["epoch_seconds"]
        assert r["achieved_tflops"] == pytest.approx(r["tflop_per_step"] / seconds)
        assert r["mfu"] == pytest.approx(r["achieved_tflops"] / 1.0)
        simcse = results["SimCSE padded" if r["padding_free"] is False else "SimCSE packed"]
        assert r["step_time_vs_simcse"] == pytest.approx(seconds / simcse["seconds_per_step"])
        slug = "sentence_transformers_mnrl" if r["method"] == "st" else r["name"].lower().replace("-", "_").replace(
            " ", "_")
        assert (tmp_path / f"profile_{slug}.txt").is_file()
    for layout in ("packed", "padded"):
        simcse = results[f"SimCSE {layout}"]
        # the formula 6ND + 12LHA counts the two views: it must agree with the FLOPs torch counts on the real step
        assert simcse["formula_tflop_per_step"] == pytest.approx(simcse["counted_tflop_per_step"], rel=0.02)
        # CMLM-CSE adds the auxiliary network's work
        assert results[f"CMLM-CSE {layout}"]["counted_tflop_per_step"] > simcse["counted_tflop_per_step"]
    # packing skips the padding's work; sentence-transformers runs SimCSE's model on each column padded on its own
    assert results["SimCSE packed"]["counted_tflop_per_step"] < results["SimCSE padded"]["counted_tflop_per_step"]
    assert results["sentence-transformers MNRL"]["counted_tflop_per_step"] == pytest.approx(
        results["SimCSE padded"]["counted_tflop_per_step"], rel=0.02)
    names = [t["name"] for t in record["trainer"]]
    assert names == ["SimCSE, Trainer.train() (recipe defaults)", "sentence-transformers, SentenceTransformerTrainer",
                     *(f"SimCSE, Trainer.train() {name}" for name, _ in gpu_throughput.TRAINER_VARIANTS[1:])]
    timed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("timing ")]
    assert timed[:len(names)] == [f"timing {name} ..." for name in names]  # the headline rows first
    for t in record["trainer"]:
        assert t["seconds_per_step"] > 0 and t["steps"] == 1
        assert t["epoch_seconds"] == pytest.approx(WIKI1M_STEPS * t["seconds_per_step"])
    assert record["target"]["run"] and record["target"]["met"] == (record["target"]["epoch_seconds"] <= 300)


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_a_compiled_bare_step_is_the_trainers_step_compiled_with_the_named_backend_and_mode(
        gpu_throughput, minilm_path, data_dir, tmp_path, monkeypatch, mode):
    """A compiled bare row compiles the recipe trainer's step (its forward and losses, one function) with
    ``--compile-backend`` and the row's mode, as ``--torch_compile_backend`` / ``--torch_compile_mode`` do through
    ``Trainer.train()``: each graph of the step reaches the named backend (``aot_eager`` here, recorded) with that
    mode (none for ``default``), and inductor compiles nothing."""
    from torch._dynamo.backends import registry

    aot_eager, compiles = registry.lookup_backend("aot_eager"), []

    def recording(graph, example_inputs, **kwargs):
        compiles.append(kwargs)
        return aot_eager(graph, example_inputs)

    monkeypatch.setitem(registry._COMPILER_FNS, "aot_eager", recording)
    folder = tmp_path / "encoder"
    gpu_throughput.save_random_encoder(minilm_path, "tiny", folder)
    sentences = read_sentences(data_dir / "wiki" / "wiki1m_for_simcse.txt")[:16]
    torch._dynamo.reset()
    inductor = torch._dynamo.utils.counters["inductor"].copy()
    try:
        run = gpu_throughput.csekit_run("simcse", str(folder), "tiny", torch.device("cpu"), "fp32", mode,
                                        [sentences], padding_free=False, backend="aot_eager")
        run.step(run.batches[0])
    finally:
        torch._dynamo.reset()
    assert compiles, "the step never reached the named backend"
    assert all(kwargs == ({} if mode == "default" else {"mode": mode}) for kwargs in compiles), compiles
    assert torch._dynamo.utils.counters["inductor"] == inductor


def test_step_ops_counts_the_trainers_compiled_step_inside_its_graphs(gpu_throughput, minilm_path, data_dir,
                                                                        tmp_path):
    """``step_ops.py``'s compiled rows: its counting backend (a function, not a name) is the one the trainer's
    compiled step runs, so the ops counted inside the graphs are the step's, and none of them reads the host."""
    import step_ops

    folder = tmp_path / "encoder"
    gpu_throughput.save_random_encoder(minilm_path, "tiny", folder)
    sentences = read_sentences(data_dir / "wiki" / "wiki1m_for_simcse.txt")[:16]
    graph_counter = step_ops.OpCounter()
    torch._dynamo.reset()
    try:
        run = gpu_throughput.csekit_run("simcse", str(folder), "tiny", torch.device("cpu"), "fp32", "default",
                                        [sentences] * 2, padding_free=False,
                                        backend=step_ops.counting_backend(graph_counter))
        row = step_ops.counted(run, run.batches, graph_counter)
    finally:
        torch._dynamo.reset()
    assert graph_counter.ops > 0 and graph_counter.host_reads == 0  # the graphs ran, op by op, under the counter
    assert row["aten_ops"] > graph_counter.ops / 2 and row["host_reads"] == 0


def test_gpu_throughput_rejects_an_unknown_method_in_one_line(gpu_throughput, minilm_path, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        gpu_throughput.main(["--device", "cpu", "--size", "tiny", "--steps", "1", "--warmup", "0", "--methods",
                             "simcse,nope", "--model-config", str(minilm_path), "--output", str(tmp_path)])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert error.startswith("error: --methods") and error.count("\n") == 1


class CountingTokenizer:
    def __init__(self, tokenizer):
        self.tokenizer, self.texts = tokenizer, 0

    def __call__(self, texts, **kwargs):
        self.texts += len(texts)
        return self.tokenizer(texts, **kwargs)


@pytest.mark.parametrize("views", [2, 3])
def test_unsupervised_collation_tokenizes_once_and_equals_tokenizing_every_view(tokenizer, data_dir, views):
    sentences = read_sentences(data_dir / "wiki" / "wiki1m_for_simcse.txt")[:64]
    counting = CountingTokenizer(tokenizer)
    batch = ContrastiveCollator(counting, max_length=32, unsupervised_views=views)([{"sent0": s} for s in sentences])
    assert counting.texts == 64  # each sentence tokenized once, not once per view
    # reference: every view's copy of the sentences tokenized, padded to the longest of the whole batch
    reference = tokenizer(sentences * views, padding=True, truncation=True, max_length=32, return_tensors="pt")
    assert set(batch) == set(reference)
    for key, value in reference.items():
        assert batch[key].shape == (64, views, value.shape[-1])
        for view in range(views):
            assert torch.equal(batch[key][:, view], value[view * 64 : (view + 1) * 64])


def test_gradient_cache_benchmark_runs_each_configuration_in_its_own_process(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(REPO_ROOT / "benchmarks"))
    import gradient_cache

    gradient_cache.main(["--size", "tiny", "--batch", "8", "--mini-batches", "4", "--rounds", "1", "--device", "cpu",
                         "--threads", "1", "--output", str(tmp_path)])
    record = json.loads((tmp_path / "gradient_cache.json").read_text())
    assert list(record["results"]) == ["uncached", "cached M=4"]
    for name, result in record["results"].items():
        (run,) = result["runs"]
        assert run["cached"] == (name != "uncached") and run["seconds"] > 0 and run["activation_bytes"] > 0
    assert (tmp_path / "gradient_cache.md").read_text().startswith("Command: `python benchmarks/gradient_cache.py")


def test_matryoshka_benchmark_trains_both_variants_and_scores_every_size(monkeypatch, tiny_backbone, corpus, tmp_path,
                                                                          capsys):
    """One seed of each variant through the real recipe (``seeds.run_seed``), then the table: the plain run scored at
    every size as ``csekit evaluate --truncate-dim`` scores it, the Matryoshka run's sizes read from its record."""
    from conftest import recipe_flags
    from csekit import cli

    monkeypatch.syspath_prepend(str(REPO_ROOT / "benchmarks"))
    import matryoshka

    config = tmp_path / "tiny.yaml"
    settings = {"model_name_or_path": str(tiny_backbone), "train_file": str(corpus), "max_steps": 2,
                "per_device_train_batch_size": 8, "max_seq_length": 16, "save_strategy": "no",
                "eval_strategy": "no", "load_best_model_at_end": False, "report_to": "none"}
    flags = recipe_flags("simcse")
    settings.update((key.lstrip("-"), value) for key, value in zip(flags[::2], flags[1::2]))
    config.write_text(yaml.safe_dump(settings))
    root, table = tmp_path / "runs", tmp_path / "matryoshka.md"
    matryoshka.main(["--config", str(config), "--seeds", "1", "--dims", "16", "8", "--output-root", str(root),
                     "--table", str(table)])
    scores = json.loads((root / "scores.json").read_text())
    assert list(scores) == ["start", "plain/seed1", "matryoshka/seed1"]
    assert all(list(by_size) == ["32", "16", "8"] for by_size in scores.values())
    for variant in ("plain", "matryoshka"):
        output = tmp_path / f"{variant}.json"
        assert cli.main(["evaluate", str(root / variant / "seed1"), "--truncate-dim", "8", "--output",
                         str(output)]) == 0
        assert json.loads(output.read_text())["sts"]["avg"] == scores[f"{variant}/seed1"]["8"]
    text = table.read_text()
    assert text.startswith("Command: `python benchmarks/matryoshka.py") and "| **matryoshka mean ± std** |" in text
    capsys.readouterr()


def gpu_check_on_the_cpu(minilm_path, data_dir, output, steps: str, *extra: str) -> str:
    """``benchmarks/gpu_check.sh --cpu --only STEPS``: its one results file, after checking that the script exited 0
    and that each step ran and exited 0."""
    import subprocess

    result = subprocess.run(["bash", str(REPO_ROOT / "benchmarks" / "gpu_check.sh"), "--cpu", "--data-dir",
                             str(data_dir), "--model-config", str(minilm_path), "--output", str(output), "--only",
                             steps, *extra], capture_output=True, text=True, timeout=1200)
    report = (output / "gpu_check.md").read_text()
    assert result.returncode == 0, report
    for name in steps.split(","):
        assert f"- {name}: exit 0 in " in report
    return report


@pytest.mark.boundary  # sentence-transformers' MNRL and token budget
def test_gpu_check_runs_its_steps_on_the_cpu_and_writes_one_results_file(minilm_path, data_dir, tmp_path):
    """``benchmarks/gpu_check.sh --cpu``: the GPU check's steps at tiny sizes, so the script a lent GPU runs first
    cannot rot (a step that fails or is missing shows in the one results file, and the script exits 1). The compiled
    step has its own test below (minutes of compilation, so the two run side by side, and the lower-bounds pass,
    which keeps torch, skips it). The lower-bounds pass runs the steps that reach another library
    (sentence-transformers, peft): the gradient caching benchmark is csekit's code on torch, and the device tests
    reach the libraries where test_gradient_cache.py and test_finite.py do, which run there."""
    steps = ["gpu_throughput", "decoder_lora", "tests", "gradient_cache", "token_budget"]
    if LOWER_BOUNDS:
        steps = [name for name in steps if name not in ("tests", "gradient_cache")]
    report = gpu_check_on_the_cpu(minilm_path, data_dir, tmp_path, ",".join(steps))
    assert (LOWER_BOUNDS or "passed" in report) and "## token_budget" in report and "| csekit tokens 128 |" in report
    st_row = next(line for line in report.splitlines() if line.startswith("| sentence-transformers tokens 128 |"))
    from sentence_transformers.sentence_transformer.losses import CachedMultipleNegativesRankingLoss

    if "mini_batch_num_tokens" in inspect.signature(CachedMultipleNegativesRankingLoss).parameters:
        assert re.match(r"\| sentence-transformers tokens 128 \| \d+\.\d+ \(", st_row), st_row
    else:  # an older sentence-transformers: the row says why, the check still passes
        assert "has no token budget" in st_row
    assert "| SimCSE packed |" in report and "| sentence-transformers MNRL |" in report
    for row in ("SimCSE, Trainer.train() (recipe defaults)", "sentence-transformers, SentenceTransformerTrainer",
                "Qwen3-shaped decoder", "| csekit packed |", "| csekit padded |"):  # every job of the eager steps
        assert row in report, row
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(["gpu_check.md", *(f"{s}.log" for s in steps)])


def test_gpu_check_runs_its_compiled_step_on_the_cpu(minilm_path, data_dir, tmp_path):
    """``gpu_check.sh --cpu`` runs the compiled step too: every compiled job of the GPU call (the ``Trainer.train()``
    rows with ``--torch_compile``, ``reduce-overhead`` and sentence-transformers', then the compiled bare steps),
    traced by dynamo and differentiated by AOTAutograd as inductor's input is (``--compile-backend aot_eager``).
    Inductor's code generation for the CPU adds minutes of C++ compilation and is torch's: the same jobs through it
    are timed in benchmarks/RESULTS.md, and on a GPU the check runs inductor."""
    report = gpu_check_on_the_cpu(minilm_path, data_dir, tmp_path, "gpu_throughput_compiled", "--compile-backend",
                                  "aot_eager")
    assert "python benchmarks/gpu_throughput.py --device cpu --compile --compile-modes default,reduce-overhead " \
           "--compile-backend aot_eager " in report
    for row in ("SimCSE, Trainer.train() --torch_compile true |",
                "SimCSE, Trainer.train() --torch_compile true --torch_compile_mode reduce-overhead",
                "sentence-transformers, SentenceTransformerTrainer torch_compile",
                "SimCSE, Trainer.train() --torch_compile true --padding_free true",
                "SimCSE padded (torch.compile)", "SimCSE padded (torch.compile, reduce-overhead)",
                "SimCSE packed (torch.compile)", "sentence-transformers MNRL (torch.compile)"):
        assert row in report, row
    assert sorted(path.name for path in tmp_path.iterdir()) == ["gpu_check.md", "gpu_throughput_compiled.log"]


def test_every_benchmark_script_imports():
    """Each script of benchmarks/ imports as `python benchmarks/X.py` runs it (the folder first on the path): a name
    it takes from a sibling or from csekit that is gone fails here, not on the machine that runs it next."""
    import subprocess
    import sys

    names = sorted(path.stem for path in (REPO_ROOT / "benchmarks").glob("*.py"))
    code = ("import importlib, sys\n"
            f"sys.path.insert(0, {str(REPO_ROOT / 'benchmarks')!r})\n"
            f"for name in {names!r}:\n"
            "    importlib.import_module(name)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


def test_step_ops_counts_a_compiled_step_inside_its_graphs(gpu_throughput):
    """A compiled step's ops are counted inside its graphs (``counting_backend``): a dispatch mode around the
    compiled call would make dynamo run the frame eagerly and count the eager step. The eager forward here reads a
    value on the host (``.item()``) where the traced one does not: only the eager count may show the read."""
    import step_ops
    from gpu_throughput import Run

    torch._dynamo.reset()
    weight = torch.nn.Parameter(torch.ones(4))

    def forward_loss(batch):
        loss = (weight * batch).square().sum()
        if not torch.compiler.is_compiling():
            loss = loss * (loss.item() > -1)
        return loss

    def step_of(forward):
        def step(batch):
            forward(batch).backward()
            weight.grad = None
        return step

    batches = [torch.arange(4.0) + i for i in range(3)]
    graph_counter = step_ops.OpCounter()
    compiled = torch.compile(forward_loss, backend=step_ops.counting_backend(graph_counter))
    eager = step_ops.counted(Run("eager", step_of(forward_loss), step_of(forward_loss), batches, 0.0), batches)
    traced = step_ops.counted(Run("compiled", step_of(compiled), step_of(forward_loss), batches, 0.0,
                                  forward_loss=forward_loss), batches, graph_counter)
    torch._dynamo.reset()
    assert eager["host_reads"] == 1 and traced["host_reads"] == 0
    assert 0 < traced["aten_ops"] < eager["aten_ops"]
