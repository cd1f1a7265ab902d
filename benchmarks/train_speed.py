"""SimCSE training speed vs sentence-transformers' MultipleNegativesRankingLoss, both through their own Trainers.

Same model (all-MiniLM-L6-v2, mean pooling), batch 64, max length 32, the same wiki sentences, unsupervised pairs
(each sentence with itself; dropout makes the views differ), temperature 0.05 == MNRL scale 20. csekit runs the
SimCSE recipe's model, collator, trainer and training arguments (``csekit train simcse --pooler_type avg`` with STS-B
dev evaluation and checkpoints off); sentence-transformers runs ``SentenceTransformerTrainer``. A callback times the
optimizer steps after ``--warmup`` of them, end to end: collation, forward, loss, backward, clipping, AdamW and the
Trainer's bookkeeping. The two sides alternate round by round (a fresh model and Trainer each round), so background
load hits both alike. Reported: median and min-max over the rounds of the wall and process-CPU seconds per step and
of the per-round ratio (sentence-transformers time / csekit time: > 1 means csekit is faster).

The compute floor: the FLOPs of one step (``torch.utils.flop_counter``: every matmul, forward and backward) over
this CPU's measured rate for one 1024^3 float32 matmul with the same threads, both in CPU seconds of this process
(a busy machine dilutes wall time, not CPU time). "CPU x floor" = CPU seconds per step / floor.

    OMP_NUM_THREADS=2 python benchmarks/train_speed.py [--steps 6] [--warmup 1] [--rounds 5] [--output DIR]
"""

import argparse
import shlex
import sys
import tempfile
import time

import torch
from transformers import AutoTokenizer

from common import (
    TrainerStepTimer,
    count_flops,
    format_spread,
    interleaved,
    machine_description,
    matmul_tflops,
    set_threads,
    spread,
    write_outputs,
)
from csekit.data import read_sentences, resolve_data_file
from csekit.download import WIKI1M_QUICKSTART_SENTENCES
from csekit.loading import embedded_minilm_path
from csekit.recipes.simcse import RECIPE as SIMCSE
from csekit.trainers.data import load_training_dataset

BATCH, MAX_LENGTH, TEMPERATURE = 64, 32, 0.05
TRAIN_FILE = "wiki/wiki1m_for_simcse.txt"  # `csekit download wiki1m`


def recipe_flags(output_dir, steps, device, bf16=False, extra=()) -> list:
    """The recipe's command line for a timed run: paper defaults, no STS-B dev evaluation, no checkpoints."""
    flags = ["--output_dir", output_dir, "--max_steps", str(steps), "--per_device_train_batch_size", str(BATCH),
             "--max_seq_length", str(MAX_LENGTH), "--eval_strategy", "no", "--save_strategy", "no",
             "--load_best_model_at_end", "false", "--disable_tqdm", "true", "--report_to", "none", "--seed", "0"]
    flags += ["--use_cpu", "true"] if device.type == "cpu" else []
    return flags + (["--bf16", "true"] if bf16 else []) + list(extra)


def csekit_trainer_run(model_path, train_file, steps, warmup, device, bf16=False, extra_flags=(), recipe=SIMCSE):
    """One ``recipe``-built model trained ``steps`` steps by its trainer; ``{"wall", "cpu"}`` seconds per step."""
    with tempfile.TemporaryDirectory() as out:
        model_args, data_args, training_args, extra = recipe.parse(
            recipe_flags(out, steps, device, bf16, extra_flags) + ["--train_file", str(train_file)]
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


def st_trainer_run(make_model, sentences, steps, warmup, device, bf16=False, torch_compile=False):
    """``SentenceTransformerTrainer`` with MNRL (scale 1/tau) for ``steps`` steps; ``{"wall", "cpu"}`` s per step."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    model = make_model()
    timer = TrainerStepTimer(warmup, device)
    with tempfile.TemporaryDirectory() as out:
        args = SentenceTransformerTrainingArguments(
            output_dir=out, max_steps=steps, per_device_train_batch_size=BATCH, learning_rate=3e-5, seed=0,
            logging_strategy="no", save_strategy="no", eval_strategy="no", report_to="none",
            use_cpu=device.type == "cpu", bf16=bf16, dataloader_drop_last=True, disable_tqdm=True,
            torch_compile=torch_compile,
        )
        SentenceTransformerTrainer(
            model=model, args=args, train_dataset=Dataset.from_dict({"anchor": sentences, "positive": sentences}),
            loss=MultipleNegativesRankingLoss(model, scale=1 / TEMPERATURE), callbacks=[timer],
        ).train()
    return {"wall": timer.seconds_per_step, "cpu": timer.cpu_seconds_per_step}


def step_flops(model_path, sentences) -> int:
    """FLOPs of one SimCSE training step (forward + backward of both views) on the first batch."""
    model_args = SIMCSE.parse(["--pooler_type", "avg"])[0]
    model = SIMCSE.build_model(str(model_path), model_args).train()
    collator = SIMCSE.collator(AutoTokenizer.from_pretrained(model_path), model, SIMCSE.parse([])[1], None)
    batch = collator([{"sent0": s} for s in sentences[:BATCH]])
    return count_flops(lambda: model(**batch).embeddings.sum().backward())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6, help="Optimizer steps per round (the first --warmup untimed).")
    parser.add_argument("--warmup", type=int, default=1, help="Untimed steps at the start of every round.")
    parser.add_argument("--rounds", type=int, default=5, help="Alternating rounds per side (at least 5 for a spread).")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: OMP_NUM_THREADS).")
    parser.add_argument("--train-file", default=TRAIN_FILE, help="Sentences (a path, or relative to the data folder).")
    parser.add_argument("--output", default=None, help="Folder for train_speed.json and train_speed.md.")
    args = parser.parse_args(argv)
    set_threads(args.threads)
    device = torch.device("cpu")
    model_path = embedded_minilm_path()
    train_file = resolve_data_file(args.train_file)
    sentences = read_sentences(train_file, limit=WIKI1M_QUICKSTART_SENTENCES)

    def st_model():
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(model_path), device="cpu")
        model.max_seq_length = MAX_LENGTH
        return model

    timings = interleaved({
        "csekit SimCSETrainer": lambda: csekit_trainer_run(model_path, train_file, args.steps, args.warmup, device,
                                                           extra_flags=["--pooler_type", "avg"]),
        "sentence-transformers MNRL": lambda: st_trainer_run(st_model, sentences, args.steps, args.warmup, device),
    }, args.rounds, warmup=False)  # each run's first --warmup steps are its warm-up
    ours, theirs = timings["csekit SimCSETrainer"], timings["sentence-transformers MNRL"]
    flops = step_flops(model_path, sentences)
    rate = matmul_tflops(device, torch.float32, clock=time.process_time) * 1e12  # per CPU-second of this process
    floor = flops / rate
    command = f"python benchmarks/train_speed.py {shlex.join(argv if argv is not None else sys.argv[1:])}"
    wall_ratio = format_spread([t["wall"] / o["wall"] for o, t in zip(ours, theirs)])
    cpu_ratio = format_spread([t["cpu"] / o["cpu"] for o, t in zip(ours, theirs)])
    lines = [
        f"Command: `{command}`", f"Machine: {machine_description()}", "",
        "| side | wall s/step, median (min–max) | CPU s/step | CPU x floor |", "|---|---:|---:|---:|",
        *[f"| {name} | {format_spread([r['wall'] for r in runs])} | {format_spread([r['cpu'] for r in runs])} | "
          f"{spread(r['cpu'] for r in runs)['median'] / floor:.2f} |" for name, runs in timings.items()],
        "",
        f"Ratio sentence-transformers / csekit, per round: wall **{wall_ratio}**, CPU {cpu_ratio} "
        f"({args.rounds} rounds).",
        f"Floor: {flops / 1e12:.3f} TFLOP per step / {rate / 1e9:.0f} GFLOP per CPU-second (one 1024^3 float32 "
        f"matmul, {torch.get_num_threads()} threads) = {floor:.2f} CPU s/step.",
    ]
    print("\n".join(lines))
    if args.output:
        write_outputs(args.output, "train_speed", {
            "command": command, "machine": machine_description(), "rounds": args.rounds, "steps": args.steps,
            "warmup": args.warmup,
            "seconds_per_step": {name: [r["wall"] for r in runs] for name, runs in timings.items()},
            "cpu_seconds_per_step": {name: [r["cpu"] for r in runs] for name, runs in timings.items()},
            "step_tflop": flops / 1e12, "matmul_gflops": rate / 1e9, "floor_seconds_per_step": floor,
        }, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
