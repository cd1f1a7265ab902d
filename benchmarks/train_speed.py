"""Training speed: csekit's SimCSE on packed batches, on padded batches, and sentence-transformers, each through its
own Trainer, in alternating rounds.

Workloads (``--workloads``), batch 64, max length 32 (wiki) and 128 (NLI, SimCSE's supervised setting),
all-MiniLM-L6-v2, mean pooling, temperature 0.05 == MNRL scale 20:

* ``wiki``: unsupervised pairs of wiki sentences (each sentence with itself; dropout makes the views differ);
* ``nli``: supervised NLI triplets (sent0, sent1, hard_neg: SimCSE's supervised loss with hard negatives against
  MNRL with a negative column), from ``--nli-file``.

csekit runs the SimCSE recipe's model, collator, trainer and training arguments (``csekit train simcse
--pooler_type avg`` with STS-B dev evaluation and checkpoints off): once packed (``--padding_free true``, the
default) and once padded (``--padding_free false``: each view padded on its own). sentence-transformers runs
``SentenceTransformerTrainer`` + ``MultipleNegativesRankingLoss``, which tokenizes and pads each column on its own.
A callback times the optimizer steps after ``--warmup`` of them, end to end: collation, forward, loss, backward,
clipping, AdamW and the Trainer's bookkeeping. The sides alternate round by round (a fresh model and Trainer each
round), so background load hits all alike. Reported: median and min-max over the rounds of the wall and
process-CPU seconds per step, tokens per second, and the per-round ratios (> 1: the first side is faster).

Tokens. Both Trainers draw uniformly random batches, so a step's expected work is measured on ``--sample-batches``
random batches of the same data: real tokens per step, and the positions each layout makes the layers run on
(packed: the real tokens; padded: every view at its own longest sentence, as both padded sides pad). Their ratio,
padded positions / packed positions, is the most packing can gain. Tokens per second = real tokens per step /
wall seconds per step.

The compute floor: the FLOPs of one step (``torch.utils.flop_counter``: every matmul and attention, forward and
backward), the mean over 3 of those random batches for each layout, over this CPU's measured rate for one 1024^3
float32 matmul with the same threads, both in CPU seconds of this process (a busy machine dilutes wall time, not CPU
time). "CPU x floor" = CPU seconds per step / the floor of the side's layout (sentence-transformers: padded).

``--variant`` times both libraries with one more feature on: ``cached`` (csekit ``--mini_batch_size 16``, 16 examples
a chunk; sentence-transformers ``CachedMultipleNegativesRankingLoss(mini_batch_size=16)``, 16 sentences of a column a
chunk) or ``matryoshka`` (csekit ``--matryoshka_dims 256 128 64``; sentence-transformers ``MatryoshkaLoss`` over MNRL
with dims 384, 256, 128, 64, weights 1). Results go to ``train_speed_<variant>.{json,md}``.

``--bert-base-steps N`` (default 3; 0 skips) also runs a bert-base-shaped model (12 x 768, random weights, the
MiniLM tokenizer) for N steps per side, one round, on the wiki workload: CPU seconds per step and their ratios.

    OMP_NUM_THREADS=2 python benchmarks/train_speed.py [--steps 6] [--warmup 1] [--rounds 5] [--output DIR]
        [--variant plain|cached|matryoshka]
"""

import argparse
import random
import shlex
import sys
import tempfile
import time

import torch
from transformers import AutoTokenizer, BertConfig, BertModel

from common import (
    TrainerStepTimer,
    count_flops,
    format_spread,
    interleaved,
    machine_description,
    matmul_tflops,
    set_threads,
    spread,
    timing_parser,
    write_outputs,
)
from csekit.data import read_sentences, resolve_data_file
from csekit.download import WIKI1M_QUICKSTART_SENTENCES
from csekit.loading import embedded_minilm_path
from csekit.recipes.simcse import RECIPE as SIMCSE
from csekit.trainers.data import load_training_dataset

BATCH, MAX_LENGTH, TEMPERATURE = 64, 32, 0.05
WORKLOAD_MAX_LENGTH = {"wiki": 32, "nli": 128}  # SimCSE's unsupervised and supervised settings
TRAIN_FILE = "wiki/wiki1m_for_simcse.txt"  # `csekit download wiki1m`
NLI_FILE = "nli/snli_devtest_for_simcse.csv"  # sent0,sent1,hard_neg triplets (SimCSE's supervised format)
ST_COLUMNS = {"sent0": "anchor", "sent1": "positive", "hard_neg": "negative"}
SIDES = ("csekit packed", "csekit padded", "sentence-transformers")
BERT_BASE = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
CHUNK = 16  # --variant cached: examples (csekit) / sentences of a column (sentence-transformers) per chunk
MATRYOSHKA_DIMS = (256, 128, 64)  # --variant matryoshka: below MiniLM's 384
VARIANT_FLAGS = {"plain": [], "cached": ["--mini_batch_size", str(CHUNK)],
                 "matryoshka": ["--matryoshka_dims", *map(str, MATRYOSHKA_DIMS)]}


def st_loss(model, variant: str):
    """sentence-transformers' loss for ``variant``: MNRL, its cached form, or MNRL inside ``MatryoshkaLoss``."""
    from sentence_transformers.sentence_transformer import losses

    if variant == "cached":
        return losses.CachedMultipleNegativesRankingLoss(model, scale=1 / TEMPERATURE, mini_batch_size=CHUNK)
    loss = losses.MultipleNegativesRankingLoss(model, scale=1 / TEMPERATURE)
    if variant == "matryoshka":
        size = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension  # ST < 6
        dims = [size(), *MATRYOSHKA_DIMS]
        return losses.MatryoshkaLoss(model, loss, matryoshka_dims=dims)
    return loss


def recipe_flags(output_dir, steps, device, bf16=False, extra=(), max_length=MAX_LENGTH) -> list:
    """The recipe's command line for a timed run: paper defaults, no STS-B dev evaluation, no checkpoints."""
    flags = ["--output_dir", output_dir, "--max_steps", str(steps), "--per_device_train_batch_size", str(BATCH),
             "--max_seq_length", str(max_length), "--eval_strategy", "no", "--save_strategy", "no",
             "--load_best_model_at_end", "false", "--disable_tqdm", "true", "--report_to", "none", "--seed", "0"]
    flags += ["--use_cpu", "true"] if device.type == "cpu" else []
    return flags + (["--bf16", "true"] if bf16 else []) + list(extra)


def csekit_trainer_run(model_path, train_file, steps, warmup, device, bf16=False, extra_flags=(), recipe=SIMCSE,
                       max_length=MAX_LENGTH):
    """One ``recipe``-built model trained ``steps`` steps by its trainer; ``{"wall", "cpu"}`` seconds per step."""
    with tempfile.TemporaryDirectory() as out:
        model_args, data_args, training_args, extra = recipe.parse(
            recipe_flags(out, steps, device, bf16, extra_flags, max_length) + ["--train_file", str(train_file)]
        )
        torch.manual_seed(0)
        model = recipe.build_model(str(model_path), model_args)
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        model.tokenizer = tokenizer
        timer = TrainerStepTimer(warmup, device)
        recipe.trainer_class(
            model=model, args=training_args, processing_class=tokenizer, callbacks=[timer],
            train_dataset=load_training_dataset(data_args.train_file, data_args.data_dir, BATCH),
            data_collator=recipe.collator(tokenizer, model, data_args, extra),
        ).train()
    return {"wall": timer.seconds_per_step, "cpu": timer.cpu_seconds_per_step}


def st_trainer_run(make_model, sentences, steps, warmup, device, bf16=False, torch_compile=False, columns=None,
                   variant="plain", compile_backend="inductor"):
    """``SentenceTransformerTrainer`` with MNRL (scale 1/tau) for ``steps`` steps; ``{"wall", "cpu"}`` s per step.
    ``columns`` (``{"anchor": [...], "positive": [...], "negative": [...]}``) replaces the unsupervised pairs of
    ``sentences``."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    model = make_model()
    timer = TrainerStepTimer(warmup, device)
    with tempfile.TemporaryDirectory() as out:
        args = SentenceTransformerTrainingArguments(
            output_dir=out, max_steps=steps, per_device_train_batch_size=BATCH, learning_rate=3e-5, seed=0,
            logging_strategy="no", save_strategy="no", eval_strategy="no", report_to="none",
            use_cpu=device.type == "cpu", bf16=bf16, dataloader_drop_last=True, disable_tqdm=True,
            torch_compile=torch_compile, **({"torch_compile_backend": compile_backend} if torch_compile else {}),
        )
        SentenceTransformerTrainer(
            model=model, args=args,
            train_dataset=Dataset.from_dict(columns or {"anchor": sentences, "positive": sentences}),
            loss=st_loss(model, variant), callbacks=[timer],
        ).train()
    return {"wall": timer.seconds_per_step, "cpu": timer.cpu_seconds_per_step}


def sample_batches(examples, count) -> list:
    """``count`` batches of ``BATCH`` examples drawn uniformly, as both Trainers' random samplers draw them."""
    rng = random.Random(0)
    return [rng.sample(examples, BATCH) for _ in range(count)]


def step_work(model_path, examples, count, max_length=MAX_LENGTH) -> dict:
    """Expected work of one step over ``count`` random batches: real tokens, positions per layout, and the FLOPs of
    one packed and one padded step (mean over the first 3 batches)."""
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model_args, data_args = SIMCSE.parse(["--pooler_type", "avg", "--max_seq_length", str(max_length)])[:2]
    work = {"real_tokens": 0.0, "positions": {"packed": 0.0, "padded": 0.0}, "flops": {}}
    batches = sample_batches(examples, count)
    for layout in ("packed", "padded"):
        model = SIMCSE.build_model(str(model_path), model_args).train()
        data_args.padding_free = layout == "packed"
        collator = SIMCSE.collator(tokenizer, model, data_args, None)
        flops = []
        for index, features in enumerate(batches):
            batch = collator(features)
            if layout == "packed":
                positions = batch["sequence_lengths"].sum().item()
                work["real_tokens"] += positions / count
            else:  # each view at its own longest sentence
                mask = batch["attention_mask"]
                positions = (mask.shape[0] * mask.sum(-1).amax(0)).sum().item()
            work["positions"][layout] += positions / count
            if index < 3:
                flops.append(count_flops(lambda: model(**batch).embeddings.sum().backward()))
        work["flops"][layout] = sum(flops) / len(flops)
    return work


def minilm_st_model(model_path, device, max_length=MAX_LENGTH):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_path), device=device.type)
    model.max_seq_length = max_length
    return model


def save_bert_base_shaped(model_path, folder) -> str:
    """A random bert-base-shaped encoder with MiniLM's vocabulary and tokenizer, saved as a sentence-transformers
    folder would be read (mean pooling by default)."""
    torch.manual_seed(0)
    config = BertConfig.from_pretrained(model_path, **BERT_BASE)
    BertModel(config, add_pooling_layer=False).save_pretrained(folder)
    AutoTokenizer.from_pretrained(model_path).save_pretrained(folder)
    return folder


def st_random_model(folder, device):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer

    transformer = Transformer(folder, max_seq_length=MAX_LENGTH)
    return SentenceTransformer(modules=[transformer, Pooling(BERT_BASE["hidden_size"], "mean")], device=device.type)


def side_runs(model_path, make_st_model, train_file, st_columns, steps, warmup, device, variant="plain",
              max_length=MAX_LENGTH) -> dict:
    """The three sides on one workload, as ``interleaved`` candidates."""
    sentences = None if st_columns else read_sentences(train_file, limit=WIKI1M_QUICKSTART_SENTENCES)
    avg = ["--pooler_type", "avg", *VARIANT_FLAGS[variant]]
    return {
        "csekit packed": lambda: csekit_trainer_run(model_path, train_file, steps, warmup, device,
                                                    extra_flags=avg + ["--padding_free", "true"],
                                                    max_length=max_length),
        "csekit padded": lambda: csekit_trainer_run(model_path, train_file, steps, warmup, device,
                                                    extra_flags=avg + ["--padding_free", "false"],
                                                    max_length=max_length),
        "sentence-transformers": lambda: st_trainer_run(make_st_model, sentences, steps, warmup, device,
                                                        columns=st_columns, variant=variant),
    }


def ratio(timings, faster, slower, key) -> str:
    return format_spread([s[key] / f[key] for f, s in zip(timings[faster], timings[slower])])


def workload_lines(name, timings, work, floors, rounds) -> list:
    packed, padded = work["positions"]["packed"], work["positions"]["padded"]
    layout = {"csekit packed": "packed", "csekit padded": "padded", "sentence-transformers": "padded"}
    rows = []
    for side, runs in timings.items():
        wall = spread(r["wall"] for r in runs)["median"]
        cpu = spread(r["cpu"] for r in runs)["median"]
        walls, cpus = format_spread([r["wall"] for r in runs]), format_spread([r["cpu"] for r in runs])
        positions = work["positions"][layout[side]]
        rows.append(f"| {side} | {walls} | {cpus} | {work['real_tokens'] / wall:,.0f} | {positions:,.0f} | "
                    f"{cpu / floors[layout[side]]:.2f} |")
    return [
        f"**{name}**: {work['real_tokens']:,.0f} real tokens per step; the layers run on {packed:,.0f} positions "
        f"packed and {padded:,.0f} padded (ratio {padded / packed:.2f}: the most packing can gain).", "",
        "| side | wall s/step, median (min–max) | CPU s/step | real tokens/s | positions/step | CPU x floor |",
        "|---|---:|---:|---:|---:|---:|", *rows, "",
        f"Per-round ratios ({rounds} rounds), wall (CPU): sentence-transformers / csekit packed "
        f"**{ratio(timings, 'csekit packed', 'sentence-transformers', 'wall')}** "
        f"({ratio(timings, 'csekit packed', 'sentence-transformers', 'cpu')}); "
        f"csekit padded / csekit packed {ratio(timings, 'csekit packed', 'csekit padded', 'wall')} "
        f"({ratio(timings, 'csekit packed', 'csekit padded', 'cpu')}); "
        f"sentence-transformers / csekit padded {ratio(timings, 'csekit padded', 'sentence-transformers', 'wall')} "
        f"({ratio(timings, 'csekit padded', 'sentence-transformers', 'cpu')}).",
        f"Floor: {work['flops']['packed'] / 1e12:.3f} TFLOP per packed step, {work['flops']['padded'] / 1e12:.3f} "
        f"per padded step / {floors['rate'] / 1e9:.0f} GFLOP per CPU-second = {floors['packed']:.2f} and "
        f"{floors['padded']:.2f} CPU s/step.", "",
    ]


def parse_args(argv=None) -> argparse.Namespace:
    parser = timing_parser(__doc__)
    parser.add_argument("--workloads", default="wiki,nli", help="Comma-separated, of: wiki, nli.")
    parser.add_argument("--train-file", default=TRAIN_FILE, help="wiki sentences (a path, or in the data folder).")
    parser.add_argument("--nli-file", default=NLI_FILE, help="NLI triplets CSV (a path, or in the data folder).")
    parser.add_argument("--sample-batches", type=int, default=200, help="Random batches measuring a step's tokens.")
    parser.add_argument("--bert-base-steps", type=int, default=3, help="Steps per side of the bert-base-shaped run.")
    parser.add_argument("--variant", choices=sorted(VARIANT_FLAGS), default="plain",
                        help="plain, or with gradient caching or Matryoshka terms on both sides.")
    parser.add_argument("--output", default=None, help="Folder for train_speed[_<variant>].json and .md.")
    args = parser.parse_args(argv)
    unknown = [w for w in workloads(args) if w not in WORKLOAD_MAX_LENGTH]
    if unknown:
        parser.error(f"--workloads: unknown workload {unknown[0]!r} (wiki, nli)")
    return args


def workloads(args) -> list:
    return [w.strip() for w in args.workloads.split(",") if w.strip()]


def workload_data(workload: str, args) -> tuple:
    """``(train_file, examples, columns, max_length, title)`` of one workload."""
    max_length = WORKLOAD_MAX_LENGTH[workload]
    if workload == "wiki":
        train_file = resolve_data_file(args.train_file)
        examples = [{"sent0": s} for s in read_sentences(train_file, limit=WIKI1M_QUICKSTART_SENTENCES)]
        return train_file, examples, None, max_length, f"wiki1m, unsupervised pairs, max length {max_length}"
    train_file = resolve_data_file(args.nli_file)
    examples = load_training_dataset(str(train_file), None, BATCH).to_list()
    columns = {ST_COLUMNS[key]: [e[key] for e in examples] for key in ST_COLUMNS}
    return train_file, examples, columns, max_length, f"NLI triplets (sent0, sent1, hard_neg), max length {max_length}"


def time_workload(workload: str, args, model_path, device, rate: float, record: dict) -> list:
    """Both sides on one workload, alternating rounds; its record entry; returns its markdown lines."""
    train_file, examples, columns, max_length, title = workload_data(workload, args)
    work = step_work(model_path, examples, args.sample_batches, max_length)
    floors = {"rate": rate, **{layout: flops / rate for layout, flops in work["flops"].items()}}
    timings = interleaved(side_runs(model_path, lambda: minilm_st_model(model_path, device, max_length), train_file,
                                    columns, args.steps, args.warmup, device, args.variant, max_length),
                          args.rounds, warmup=False)
    record["workloads"][workload] = {
        "train_file": train_file.name, "work": work, "floor_cpu_seconds_per_step": floors,
        "seconds_per_step": {side: [r["wall"] for r in runs] for side, runs in timings.items()},
        "cpu_seconds_per_step": {side: [r["cpu"] for r in runs] for side, runs in timings.items()},
    }
    return workload_lines(title, timings, work, floors, args.rounds)


def time_bert_base_shaped(args, model_path, device, record: dict) -> list:
    """One round of both sides on a bert-base-shaped random encoder; its record entry; its markdown lines."""
    train_file = resolve_data_file(args.train_file)
    with tempfile.TemporaryDirectory() as folder:
        save_bert_base_shaped(model_path, folder)
        runs = side_runs(folder, lambda: st_random_model(folder, device), train_file, None, args.bert_base_steps,
                         1, device)
        timings = interleaved(runs, 1, warmup=False)
    cpu = {side: results[0]["cpu"] for side, results in timings.items()}
    record["bert_base_shaped"] = {"steps": args.bert_base_steps, "cpu_seconds_per_step": cpu,
                                  "seconds_per_step": {side: r[0]["wall"] for side, r in timings.items()}}
    return [
        f"**bert-base-shaped** (12 x 768, random weights), wiki, batch 64 x max length 32, "
        f"{args.bert_base_steps} steps per side (1 untimed), one round: CPU s/step "
        + ", ".join(f"{side} {seconds:.1f}" for side, seconds in cpu.items())
        + f"; sentence-transformers / csekit packed **{cpu['sentence-transformers'] / cpu['csekit packed']:.2f}**,"
        f" csekit padded / csekit packed {cpu['csekit padded'] / cpu['csekit packed']:.2f}.", ""]


def main(argv=None):
    args = parse_args(argv)
    set_threads(args.threads)
    device = torch.device("cpu")
    model_path = embedded_minilm_path()
    rate = matmul_tflops(device, torch.float32, clock=time.process_time) * 1e12  # per CPU-second of this process
    command = f"python benchmarks/train_speed.py {shlex.join(argv if argv is not None else sys.argv[1:])}"
    lines = [f"Command: `{command}`", f"Machine: {machine_description()}", ""]
    record = {"command": command, "machine": machine_description(), "variant": args.variant,
              "rounds": args.rounds, "steps": args.steps,
              "warmup": args.warmup, "matmul_gflops": rate / 1e9, "workloads": {}}
    for workload in workloads(args):
        lines += time_workload(workload, args, model_path, device, rate, record)
        print("\n".join(lines), flush=True)
    if args.bert_base_steps:
        lines += time_bert_base_shaped(args, model_path, device, record)
    print("\n".join(lines))
    if args.output:
        name = "train_speed" if args.variant == "plain" else f"train_speed_{args.variant}"
        write_outputs(args.output, name, record, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
