"""Memory and time of a gradient-cached step (``--mini_batch_size``) against the uncached step.

    python benchmarks/gradient_cache.py --output benchmarks/results                       # the issue's setting
    python benchmarks/gradient_cache.py --batch 128 --rounds 2 --output benchmarks/results   # what a 24 GiB CPU holds
    python benchmarks/gradient_cache.py --skip-uncached --mini-batches 32 --name gradient_cache_batch512 --output OUT
    python benchmarks/gradient_cache.py --device cuda --largest --output OUT                 # + the largest batch
    python benchmarks/gradient_cache.py --size tiny --batch 16 --mini-batches 4 --rounds 1   # CI size

Workload: supervised SimCSE (triplets: anchor, entailment, contradiction; InfoNCE with hard negatives) on a
bert-base-shaped encoder with random weights (12 layers, hidden 768, 12 heads, vocabulary 30,522; ``--size tiny``: 2
layers, hidden 32), ``--batch`` triplets of ``--max-length`` tokens each (every sentence full length, padded layout),
float32. A step is ``SimCSETrainer.training_step``: the forward passes, the loss, every backward pass, as the
Trainer runs it; the optimizer is not part of it.

Each configuration (uncached, and each ``--mini-batches`` M) runs in its own process, so one's memory never counts
in another's; the configurations alternate for ``--rounds`` rounds. A process builds the model, runs one untimed step
on ``--mini-batches``' smallest batch (the gradients and the allocator's first growth), then one timed step on the
whole batch. Activation memory is the step's peak minus what the process held when it began: on the CPU the
resident peak (Linux ``VmHWM``, reset before the step through ``/proc/self/clear_refs``) minus the resident size
then, with glibc's mmap threshold fixed at 1 MiB so freed activations leave the resident set; on a GPU
``torch.cuda.max_memory_allocated`` minus ``memory_allocated``. ``--largest`` (GPU) also searches, by
doubling then bisecting, the largest batch that fits with and without caching (M = the smallest mini-batch).

Results: ``gradient_cache.json`` and ``gradient_cache.md`` in ``--output``, rewritten after every process.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import device_description, spread, synchronize, write_outputs  # noqa: E402

SIZES = {"base": dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072),
         "tiny": dict(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64)}


def build_trainer(size: str, batch: int, mini_batch: int, device: str, workdir: str):
    from transformers import BertConfig

    from csekit.modeling import SimCSEConfig, SimCSEModel
    from csekit.trainers import SimCSETrainer
    from csekit.trainers.arguments import CSETrainingArguments

    torch.manual_seed(0)
    encoder = BertConfig(**SIZES[size], vocab_size=30522, max_position_embeddings=512)
    model = SimCSEModel(SimCSEConfig(encoder_config=encoder.to_dict(), pooler_type="cls"))
    args = CSETrainingArguments(output_dir=workdir, per_device_train_batch_size=batch,
                                mini_batch_size=mini_batch or None, report_to="none", eval_strategy="no",
                                save_strategy="no", load_best_model_at_end=False, use_cpu=device == "cpu")
    trainer = SimCSETrainer(model=model, args=args)
    trainer.current_gradient_accumulation_steps = 1
    return trainer


def triplets(batch: int, length: int, device: torch.device) -> dict:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(1000, 30000, (batch, 3, length), generator=generator)
    ids[..., 0], ids[..., -1] = 101, 102  # [CLS] ... [SEP]
    return {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids).to(device)}


def process_status(field: str) -> int:
    """A ``/proc/self/status`` memory field (``VmRSS``: resident now; ``VmHWM``: the resident peak), in bytes."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith(f"{field}:"))
    return int(line.split()[1]) * 1024  # kB


def reset_peak(device: torch.device) -> int:
    """Start a new peak; returns what the process holds now (the step's starting point)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device)
    with open("/proc/self/clear_refs", "w") as clear:  # Linux: "5" resets VmHWM to the current resident size
        clear.write("5")
    return process_status("VmRSS")


def peak(device: torch.device) -> int:
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else process_status("VmHWM")


def measure(size: str, batch: int, mini_batch: int, length: int, device_name: str, warmup_batch: int) -> dict:
    """One configuration, in this process: ``{"activation_bytes", "seconds", ...}``."""
    with tempfile.TemporaryDirectory() as workdir:
        trainer = build_trainer(size, batch, mini_batch, device_name, workdir)
        device = trainer.args.device
        trainer.training_step(trainer.model, triplets(min(warmup_batch, batch), length, device))  # untimed
        synchronize(device)
        inputs = triplets(batch, length, device)
        before = reset_peak(device)
        start = time.perf_counter()
        loss = trainer.training_step(trainer.model, inputs)
        synchronize(device)
        seconds = time.perf_counter() - start
        return {"activation_bytes": peak(device) - before, "seconds": seconds, "loss": float(loss),
                "cached": trainer.gradient_cache is not None}


def run_child(args, batch: int, mini_batch: int) -> dict:
    """`measure` in a fresh process (``None`` when it ran out of memory or failed)."""
    if args.in_process:  # the CI check: one process, so its memory figures are not comparable
        return measure(args.size, batch, mini_batch, args.max_length, args.device, min(args.mini_batches))
    command = [sys.executable, __file__, "--child", "--size", args.size, "--batch", str(batch), "--mini-batch",
               str(mini_batch), "--max-length", str(args.max_length), "--device", args.device,
               "--warmup-batch", str(min(args.mini_batches)), "--threads", str(args.threads)]
    # glibc serves blocks below its (adaptive, up to 32 MiB) mmap threshold from heaps it rarely returns: a fixed
    # 1 MiB threshold maps every activation-sized block on its own and unmaps it when freed, so the resident peak
    # is the step's live memory rather than the heaps' high-water mark
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(2**20)}
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        return {"error": (result.stderr.strip().splitlines() or [f"exit status {result.returncode}"])[-1]}
    return json.loads(lines[-1])


def largest_batch(args, mini_batch: int) -> int:
    """The largest batch (triplets) whose step fits on the device, by doubling then bisecting."""
    fits, low, high = (lambda b: "error" not in run_child(args, b, mini_batch)), 0, args.batch
    while fits(high):
        low, high = high, high * 2
    while high - low > max(1, low // 16):  # to within 1/16
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


def markdown(record: dict) -> str:
    rows = ["| step | mini-batch | activation memory (GiB) | x uncached | seconds per step | x uncached |",
            "|---|---:|---:|---:|---:|---:|"]
    base = record["results"].get("uncached", {})
    for name, result in record["results"].items():
        if "memory_gib" not in result:
            rows.append(f"| {name} | | {result.get('error', 'not run')} | | | |")
            continue
        memory, seconds = result["memory_gib"]["median"], result["seconds"]["median"]
        ratio_memory = f"{memory / base['memory_gib']['median']:.3f}" if "memory_gib" in base else "not run"
        ratio_time = f"{seconds / base['seconds']['median']:.2f}" if "seconds" in base else "not run"
        rows.append(f"| {name} | {result['mini_batch_size'] or '-'} | {memory:.2f} | {ratio_memory} | "
                    f"{seconds:.1f} ({result['seconds']['min']:.1f}-{result['seconds']['max']:.1f}) | "
                    f"{ratio_time} |")
    largest = "".join(f"\nLargest batch that fits, {name}: {value} triplets." for name, value in
                      record.get("largest_batch", {}).items())
    machine = record["machine"].split(", load average")[0]  # (the JSON keeps the load of the run)
    return (f"Command: `{record['command']}`\n\nMachine: {machine}.\nWorkload: supervised SimCSE, "
            f"{record['size']} encoder, {record['batch']} triplets x {record['max_length']} tokens, float32; "
            f"medians of {record['rounds']} alternating round(s), each configuration in its own process.\n\n"
            + "\n".join(rows) + "\n" + largest + "\n")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default="base")
    parser.add_argument("--batch", type=int, default=512, help="Triplets per step (default 512, the paper's).")
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--mini-batches", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's choice).")
    parser.add_argument("--largest", action="store_true", help="Also find the largest batch that fits (GPU).")
    parser.add_argument("--skip-uncached", action="store_true",
                        help="Run the cached configurations only (for a batch whose uncached step does not fit).")
    parser.add_argument("--output", default=None)
    parser.add_argument("--name", default="gradient_cache", help="Base name of the result files.")
    parser.add_argument("--in-process", action="store_true",
                        help="Run every configuration in this process (a quick check; memory not comparable).")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mini-batch", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--warmup-batch", type=int, default=32, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.child:
        print(json.dumps(measure(args.size, args.batch, args.mini_batch, args.max_length, args.device,
                                 args.warmup_batch)))
        return
    configurations = {**({} if args.skip_uncached else {"uncached": 0}),
                      **{f"cached M={m}": m for m in args.mini_batches}}
    measured = {name: [] for name in configurations}
    record = {"command": "python benchmarks/gradient_cache.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "machine": device_description(torch.device(args.device)),
              "size": args.size, "batch": args.batch, "max_length": args.max_length, "rounds": args.rounds,
              "results": {}}
    for round_index in range(args.rounds):
        for name, mini_batch in configurations.items():
            result = run_child(args, args.batch, mini_batch)
            measured[name].append(result)
            good = [r for r in measured[name] if "error" not in r]
            record["results"][name] = ({"mini_batch_size": mini_batch or None,
                                        "memory_gib": spread(r["activation_bytes"] / 2**30 for r in good),
                                        "seconds": spread(r["seconds"] for r in good), "runs": measured[name]}
                                       if good else {"error": result["error"], "runs": measured[name]})
            print(f"round {round_index + 1}/{args.rounds} {name}: {result}", flush=True)
            if args.output:
                write_outputs(args.output, args.name, record, markdown(record))
    if args.largest:
        smallest = min(args.mini_batches)
        record["largest_batch"] = {"uncached": largest_batch(args, 0), f"cached M={smallest}":
                                   largest_batch(args, smallest)}
    text = markdown(record)
    print(text)
    if args.output:
        write_outputs(args.output, args.name, record, text)


if __name__ == "__main__":
    main()
