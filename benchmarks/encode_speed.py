"""Encoding speed: csekit's ``model.encode`` vs ``SentenceTransformer.encode`` on the same model and sentences.

all-MiniLM-L6-v2, mean pooling, max length 256 on both sides, batch 64, the STS-B test sentences (2,758 texts),
normalised embeddings as numpy. Each side batches its own way: csekit encodes every distinct text once, in batches
sorted by token length; sentence-transformers encodes every text, in batches sorted by character length. The
"tokens encoded" column counts the token positions each backbone received (padding included), which is the work
those choices save. The two sides alternate round by round so background load hits both alike;
reported are the median and min-max over the rounds of wall and process-CPU seconds and of the per-round ratio
(csekit sentences/s over sentence-transformers'), and the largest difference between the two sides' embeddings.
On the CPU also the compute floor: the FLOPs of csekit's pass (``torch.utils.flop_counter``) over the rate of one
1024^3 float32 matmul, both per CPU-second of this process; "CPU x floor" = CPU seconds / floor.

    OMP_NUM_THREADS=2 python benchmarks/encode_speed.py [--rounds 5] [--sentences 2758] [--output DIR]
"""

import argparse
import shlex
import sys
import time

import numpy as np
import torch
from sentence_transformers import SentenceTransformer

from common import (
    Stopwatch,
    count_flops,
    device_description,
    format_spread,
    interleaved,
    matmul_tflops,
    set_threads,
    spread,
    synchronize,
    write_outputs,
)
from csekit.data import resolve_data_dir
from csekit.evaluation.sts import load_sts_task
from csekit.loading import embedded_minilm_path, resolve_device
from csekit.modeling import SimCSEModel


def encoder_tokens(encoder, encode) -> dict:
    """Token positions (padding included) and real tokens the backbone ``encoder`` receives while ``encode`` runs."""
    counts, forward = {"padded": 0, "real": 0}, encoder.forward

    def counting_forward(*args, **kwargs):  # sentence-transformers calls .forward itself, so no module hook sees it
        counts["padded"] += kwargs["input_ids"].numel()
        counts["real"] += int(kwargs["attention_mask"].sum())
        return forward(*args, **kwargs)

    encoder.forward = counting_forward
    try:
        encode()
    finally:
        del encoder.forward
    return counts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="Alternating rounds per side (at least 5 for a spread).")
    parser.add_argument("--sentences", type=int, default=2758)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: OMP_NUM_THREADS).")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: %(default)s).")
    parser.add_argument("--output", default=None, help="Folder for encode_speed.json and encode_speed.md.")
    args = parser.parse_args(argv)
    set_threads(args.threads)
    device = resolve_device(args.device)
    pairs = load_sts_task(resolve_data_dir(), "STSBenchmark")
    sentences = (pairs.sentences1 + pairs.sentences2)[: args.sentences]

    ours = SimCSEModel.from_encoder(str(embedded_minilm_path()), pooler_type="avg", max_length=256).to(device).eval()
    theirs = SentenceTransformer(str(embedded_minilm_path()), device=str(device))
    outputs = {}

    def timed(name, encode):
        def run():
            with Stopwatch() as watch:
                outputs[name] = encode()
                synchronize(device)
            return {"wall": watch.seconds, "cpu": watch.cpu_seconds}

        return run

    timings = interleaved({
        "csekit": timed("csekit", lambda: ours.encode(sentences, batch_size=args.batch_size, normalize=True)),
        "sentence-transformers": timed("sentence-transformers", lambda: theirs.encode(
            sentences, batch_size=args.batch_size, normalize_embeddings=True, convert_to_numpy=True)),
    }, args.rounds)
    difference = float(np.abs(outputs["csekit"] - outputs["sentence-transformers"]).max())
    count = len(sentences)
    ours_runs, theirs_runs = timings["csekit"], timings["sentence-transformers"]
    tokens = {"csekit": encoder_tokens(ours.encoder, lambda: ours.encode(sentences, batch_size=args.batch_size)),
              "sentence-transformers": encoder_tokens(theirs[0].auto_model, lambda: theirs.encode(
                  sentences, batch_size=args.batch_size))}
    floor = None
    if device.type == "cpu":
        flops = count_flops(lambda: ours.encode(sentences, batch_size=args.batch_size, show_progress_bar=False))
        floor = flops / (matmul_tflops(device, torch.float32, clock=time.process_time) * 1e12)

    def times_floor(runs):
        return f"{spread(r['cpu'] for r in runs)['median'] / floor:.2f}" if floor else "–"

    command = f"python benchmarks/encode_speed.py {shlex.join(argv if argv is not None else sys.argv[1:])}"
    lines = [
        f"Command: `{command}`", f"Machine: {device_description(device)}", "",
        f"| side | sentences/s, median (min–max) | wall s for {count} | CPU s | CPU x floor | tokens encoded "
        "(real) |", "|---|---:|---:|---:|---:|---:|",
        *[f"| {name} | {format_spread([count / r['wall'] for r in runs], 0)} | "
          f"{format_spread([r['wall'] for r in runs])} | {format_spread([r['cpu'] for r in runs])} | "
          f"{times_floor(runs)} | {tokens[name]['padded']:,} ({tokens[name]['real']:,}) |"
          for name, runs in timings.items()],
        "",
        f"Ratio csekit / sentence-transformers sentences/s, per round: wall "
        f"**{format_spread([t['wall'] / o['wall'] for o, t in zip(ours_runs, theirs_runs)])}**, CPU "
        f"{format_spread([t['cpu'] / o['cpu'] for o, t in zip(ours_runs, theirs_runs)])} ({args.rounds} rounds); "
        f"max |embedding difference| {difference:.1e}.",
    ]
    if floor:
        lines.append(f"Floor: {flops / 1e12:.3f} TFLOP for the pass = {floor:.1f} CPU s at this CPU's matmul rate.")
    print("\n".join(lines))
    if args.output:
        write_outputs(args.output, "encode_speed", {
            "command": command, "machine": device_description(device), "rounds": args.rounds, "sentences": count,
            "seconds": {name: [r["wall"] for r in runs] for name, runs in timings.items()},
            "cpu_seconds": {name: [r["cpu"] for r in runs] for name, runs in timings.items()},
            "max_embedding_difference": difference, "floor_cpu_seconds": floor, "encoder_tokens": tokens,
        }, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
