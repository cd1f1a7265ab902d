"""Gradient caching by a token budget against a fixed count, and against sentence-transformers' own token budget.

    OMP_NUM_THREADS=2 python benchmarks/token_budget.py --output benchmarks/results          # the setting below
    python benchmarks/token_budget.py --size tiny --batch 8 --budgets 128 --counts 2 --rounds 1   # CI size

Workload: supervised SimCSE / MNRL with hard negatives on ``--batch`` NLI triplets (anchor, entailment,
contradiction) drawn with a fixed seed from ``--nli-file`` (in the data folder: ``csekit download nli``), with their
real length spread, tokenized to at most ``--max-length`` 128 tokens; a bert-base-shaped encoder with random weights
(12 layers, hidden 768; ``--size tiny``: 2 layers, hidden 32) and MiniLM's vocabulary, mean pooling, float32. Both
libraries read the same saved encoder. A step is one training step without the optimizer:

* ``csekit tokens T``: ``SimCSETrainer.training_step`` with ``--mini_batch_tokens T`` on the recipe's packed batch
  (the default layout): chunks of whole triplets holding at most T real tokens;
* ``csekit M=m``: the same with ``--mini_batch_size m`` (m triplets, 3m sentences a chunk);
* ``sentence-transformers tokens T``: ``CachedMultipleNegativesRankingLoss(mini_batch_num_tokens=T)`` on the padded
  columns its collator makes (each column chunked by T non-padding tokens, each chunk cut to its own longest row),
  loss and backward.

Each configuration (each budget T of ``--budgets`` for both libraries, each count m of ``--counts``) runs in its own
process, so one's memory never counts in another's, and the configurations alternate for ``--rounds`` rounds. A
process builds its model, runs one untimed step on the first 4 triplets, then one timed step on the whole batch.
Activation memory is the step's resident peak minus the resident size before it, measured as
``benchmarks/gradient_cache.py`` measures it (``VmHWM`` reset through ``/proc/self/clear_refs``, glibc's mmap
threshold at 1 MiB); on a GPU ``torch.cuda.max_memory_allocated``. Reported: medians and min-max of seconds per
step, real tokens per second, activation memory, and each configuration's ratios to the first ``csekit tokens T``.

Results: ``token_budget.json`` and ``token_budget.md`` in ``--output``, rewritten after every process.

``--chunks-only`` measures what decides peak memory without running a model: over ``--chunk-batches`` random batches
of the same data (tokenized as the recipe tokenizes them), the real tokens of each batch's largest chunk under each
count m and each budget T (``trainers/gradient_cache.py`` ``chunk_bounds``): a fixed count's peak follows its
longest chunk, a budget's never passes T. Results: ``token_budget_chunks.{json,md}``.
"""

import argparse
import inspect
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import device_description, spread, synchronize, write_outputs  # noqa: E402
from gradient_cache import SIZES, peak, reset_peak  # noqa: E402

NLI_FILE = "nli/snli_devtest_for_simcse.csv"
TEMPERATURE = 0.05  # SimCSE's; MNRL's scale 1 / 0.05 = 20, its default
WARMUP_TRIPLETS = 4


def nli_triplets(path: str, count) -> list:
    """``count`` (anchor, entailment, contradiction) rows drawn with seed 0 from a sent0,sent1,hard_neg CSV (every
    row when ``count`` is ``None``)."""
    import csv

    with open(path, newline="", encoding="utf-8") as handle:
        rows = [(row["sent0"], row["sent1"], row["hard_neg"]) for row in csv.DictReader(handle)]
    return rows if count is None else random.Random(0).sample(rows, count)


def save_encoder(size: str, folder: str) -> None:
    """The random encoder both libraries read: MiniLM's tokenizer and vocabulary, ``SIZES[size]`` layers."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    from csekit.loading import embedded_minilm_path

    torch.manual_seed(0)
    config = BertConfig.from_pretrained(embedded_minilm_path(), **SIZES[size], max_position_embeddings=512)
    BertModel(config, add_pooling_layer=False).save_pretrained(folder)
    AutoTokenizer.from_pretrained(embedded_minilm_path()).save_pretrained(folder)


def csekit_step(folder: str, rows: list, flags: list, max_length: int, device: str, workdir: str):
    """``(step, warmup)`` closures of the SimCSE recipe's trainer with ``flags`` and its packed collated batches."""
    from transformers import AutoTokenizer

    from csekit.recipes.simcse import RECIPE

    argv = ["--model_name_or_path", folder, "--output_dir", workdir, "--per_device_train_batch_size", str(len(rows)),
            "--max_seq_length", str(max_length), "--pooler_type", "avg", "--temperature", str(TEMPERATURE),
            "--report_to", "none", "--eval_strategy", "no", "--save_strategy", "no", "--load_best_model_at_end",
            "false", "--disable_tqdm", "true", *(["--use_cpu", "true"] if device == "cpu" else []), *flags]
    model_args, data_args, training_args, extra = RECIPE.parse(argv)
    torch.manual_seed(0)
    model = RECIPE.build_model(folder, model_args)
    model.tokenizer = AutoTokenizer.from_pretrained(folder)
    collator = RECIPE.collator(model.tokenizer, model, data_args, extra)
    trainer = RECIPE.trainer_class(model=model, args=training_args, data_collator=collator)
    trainer.current_gradient_accumulation_steps = 1
    device = trainer.args.device
    examples = [{"sent0": a, "sent1": p, "hard_neg": n, "example_index": i} for i, (a, p, n) in enumerate(rows)]
    def collate(rows):
        return {k: v.to(device) if hasattr(v, "to") else v for k, v in collator(rows).items()}

    batch, warm = collate(examples), collate(examples[:WARMUP_TRIPLETS])
    tokens = int(batch["sequence_lengths"].sum()) if "sequence_lengths" in batch else int(batch["attention_mask"].sum())
    return (lambda: trainer.training_step(trainer.model, batch), lambda: trainer.training_step(trainer.model, warm),
            tokens, device)


class NotMeasurable(RuntimeError):
    """A configuration the installed libraries cannot run: its row says why instead of the figures."""


def st_step(folder: str, rows: list, budget: int, max_length: int, device: str):
    """The same for sentence-transformers' ``CachedMultipleNegativesRankingLoss(mini_batch_num_tokens=budget)``."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import CachedMultipleNegativesRankingLoss
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    if "mini_batch_num_tokens" not in inspect.signature(CachedMultipleNegativesRankingLoss).parameters:
        raise NotMeasurable(f"sentence-transformers {version('sentence-transformers')} has no token budget "
                            "(CachedMultipleNegativesRankingLoss(mini_batch_num_tokens=...))")
    transformer = Transformer(folder, max_seq_length=max_length)
    model = SentenceTransformer(modules=[transformer, Pooling(transformer.get_embedding_dimension(), "mean")],
                                device=device)
    model.train()
    loss = CachedMultipleNegativesRankingLoss(model, scale=1 / TEMPERATURE, mini_batch_num_tokens=budget)

    def features(subset):
        return [{k: v.to(model.device) if torch.is_tensor(v) else v
                 for k, v in model.tokenize([row[column] for row in subset]).items()} for column in range(3)]

    batch, warm = features(rows), features(rows[:WARMUP_TRIPLETS])
    tokens = sum(int(feature["attention_mask"].sum()) for feature in batch)

    def run(inputs):
        model.zero_grad(set_to_none=True)
        value = loss(inputs, None)
        value.backward()
        return value

    return lambda: run(batch), lambda: run(warm), tokens, model.device


def measure(args) -> dict:
    """One configuration, in this process."""
    rows = nli_triplets(args.nli_path, args.batch)
    with tempfile.TemporaryDirectory() as workdir:
        folder = str(Path(workdir) / "encoder")
        save_encoder(args.size, folder)
        kind, value = args.config.split("=")
        if kind == "st":
            step, warmup, tokens, device = st_step(folder, rows, int(value), args.max_length, args.device)
        else:
            flag = "--mini_batch_tokens" if kind == "tokens" else "--mini_batch_size"
            step, warmup, tokens, device = csekit_step(folder, rows, [flag, value], args.max_length, args.device,
                                                       str(Path(workdir) / "out"))
        device = torch.device(device)
        warmup()
        synchronize(device)
        before = reset_peak(device)
        start = time.perf_counter()
        loss = step()
        synchronize(device)
        seconds = time.perf_counter() - start
    return {"activation_bytes": peak(device) - before, "seconds": seconds, "tokens": tokens, "loss": float(loss)}


def largest_chunks(args) -> dict:
    """``{chunking: [the largest chunk's real tokens, per random batch]}`` (``--chunks-only``)."""
    from transformers import AutoTokenizer

    from csekit.loading import embedded_minilm_path
    from csekit.trainers.gradient_cache import chunk_bounds

    tokenizer = AutoTokenizer.from_pretrained(embedded_minilm_path())
    rows = nli_triplets(args.nli_path, None)
    lengths = {}
    largest = {**{f"M={m}": [] for m in args.counts}, **{f"T={t}": [] for t in args.budgets}}
    generator = random.Random(1)
    for _ in range(args.chunk_batches):
        batch = generator.sample(range(len(rows)), args.batch)
        for index in batch:
            if index not in lengths:
                lengths[index] = sum(len(ids) for ids in tokenizer(list(rows[index]), truncation=True,
                                                                   max_length=args.max_length)["input_ids"])
        tokens = [lengths[index] for index in batch]
        for name in largest:
            kind, value = name.split("=")
            bounds = chunk_bounds(tokens, **({"mini_batch_size": int(value)} if kind == "M" else
                                             {"mini_batch_tokens": int(value)}))
            largest[name].append(max(sum(tokens[start:end]) for start, end in bounds))
    return largest


def chunks_markdown(record: dict) -> str:
    rows = ["| chunking | largest chunk, real tokens: median over batches | 95th percentile | max |",
            "|---|---:|---:|---:|"]
    for name, values in record["largest_chunk_tokens"].items():
        ordered = sorted(values)
        rows.append(f"| {name} | {statistics.median(ordered):.0f} | {ordered[int(0.95 * (len(ordered) - 1))]} | "
                    f"{ordered[-1]} |")
    return (f"Command: `{record['command']}`\n\n{record['batches']} random batches of {record['batch']} NLI triplets "
            f"(max length {record['max_length']}); a triplet's real tokens are its three sentences'.\n\n"
            + "\n".join(rows) + "\n")


def run_child(args, config: str) -> dict:
    if args.in_process:  # the CI check: one process, so its memory figures are not comparable
        args.config = config
        try:
            return measure(args)
        except NotMeasurable as reason:
            return {"error": str(reason)}
    command = [sys.executable, __file__, "--child", config, "--size", args.size, "--batch", str(args.batch),
               "--max-length", str(args.max_length), "--device", args.device, "--nli-path", args.nli_path]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(2**20)}  # see benchmarks/gradient_cache.py
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        return {"error": (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1]}
    return json.loads(lines[-1])


def markdown(record: dict) -> str:
    results = record["results"]
    base = results.get(f"csekit tokens {record['budgets'][0]}", {})
    rows = ["| configuration | seconds per step | real tokens/s | activation memory (GiB) | time x first | "
            "memory x first |", "|---|---:|---:|---:|---:|---:|"]
    for name, result in results.items():
        if "seconds" not in result:
            rows.append(f"| {name} | {result.get('error', 'not run')} | | | | |")
            continue
        seconds, memory = result["seconds"], result["memory_gib"]
        time_ratio = f"{seconds['median'] / base['seconds']['median']:.2f}" if "seconds" in base else ""
        memory_ratio = f"{memory['median'] / base['memory_gib']['median']:.2f}" if "seconds" in base else ""
        rows.append(f"| {name} | {seconds['median']:.2f} ({seconds['min']:.2f}-{seconds['max']:.2f}) | "
                    f"{result['tokens'] / seconds['median']:.0f} | {memory['median']:.3f} | {time_ratio} | "
                    f"{memory_ratio} |")
    machine = record["machine"].split(", load average")[0]
    return (f"Command: `{record['command']}`\n\nMachine: {machine}; load average at the start "
            f"{record['load_start']:.1f}, at the end {record.get('load_end', float('nan')):.1f}.\nWorkload: "
            f"{record['batch']} NLI triplets (max length {record['max_length']}), {record['size']} encoder, float32, "
            f"token budgets {', '.join(map(str, record['budgets']))}; medians (min-max) of {record['rounds']} "
            f"alternating round(s), each configuration in its own process.\n\n" + "\n".join(rows) + "\n")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default="base")
    parser.add_argument("--batch", type=int, default=64, help="Triplets per step.")
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--budgets", type=int, nargs="+", default=[1024, 512],
                        help="Token budgets T, each run by both libraries.")
    parser.add_argument("--counts", type=int, nargs="+", default=[8, 16, 32], help="csekit's fixed counts m.")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--nli-file", default=NLI_FILE, help="A sent0,sent1,hard_neg CSV (in the data folder).")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--output", default=None)
    parser.add_argument("--in-process", action="store_true",
                        help="Run every configuration in this process (a quick check; memory not comparable).")
    parser.add_argument("--chunks-only", action="store_true", help="Only the largest chunks over random batches.")
    parser.add_argument("--chunk-batches", type=int, default=1000)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--nli-path", default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def chunks_only(args, command: str) -> None:
    """``--chunks-only``: the largest chunk of each budget over random batches."""
    record = {"command": command, "batches": args.chunk_batches, "batch": args.batch, "max_length": args.max_length,
              "largest_chunk_tokens": largest_chunks(args)}
    text = chunks_markdown(record)
    print(text)
    if args.output:
        write_outputs(args.output, "token_budget_chunks", record, text)


def measure_rounds(args, command: str) -> dict:
    """Every configuration once per round, alternating, each in its own process; the record is written after each
    measurement (a stopped run keeps what it measured)."""
    configurations = {**{f"csekit tokens {t}": f"tokens={t}" for t in args.budgets},
                      **{f"csekit M={m}": f"size={m}" for m in args.counts},
                      **{f"sentence-transformers tokens {t}": f"st={t}" for t in args.budgets}}
    record = {"command": command, "machine": device_description(torch.device(args.device)),
              "load_start": os.getloadavg()[0], "size": args.size, "batch": args.batch,
              "max_length": args.max_length, "budgets": args.budgets, "rounds": args.rounds, "results": {}}
    measured = {name: [] for name in configurations}
    for round_index in range(args.rounds):
        for name, config in configurations.items():
            result = run_child(args, config)
            measured[name].append(result)
            good = [r for r in measured[name] if "error" not in r]
            record["results"][name] = (
                {"seconds": spread(r["seconds"] for r in good),
                 "memory_gib": spread(r["activation_bytes"] / 2**30 for r in good),
                 "tokens": good[0]["tokens"], "runs": measured[name]}
                if good else {"error": result["error"], "runs": measured[name]})
            print(f"round {round_index + 1}/{args.rounds} {name}: {result}", flush=True)
            record["load_end"] = os.getloadavg()[0]
            if args.output:
                write_outputs(args.output, "token_budget", record, markdown(record))
    return record


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.child:
        args.config = args.child
        try:
            print(json.dumps(measure(args)))
        except NotMeasurable as reason:
            sys.exit(str(reason))
        return
    from csekit.data import resolve_data_file

    args.nli_path = str(resolve_data_file(args.nli_file, args.data_dir))
    command = "python benchmarks/token_budget.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.chunks_only:
        chunks_only(args, command)
        return
    record = measure_rounds(args, command)
    text = markdown(record)
    print(text)
    if args.output:
        write_outputs(args.output, "token_budget", record, text)


if __name__ == "__main__":
    main()
