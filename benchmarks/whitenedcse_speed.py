"""Training step time of WhitenedCSE vs SimCSE at the same backbone, batch and length, measured in one process.

    python benchmarks/whitenedcse_speed.py [--model all-MiniLM-L6-v2] [--pooler avg]
        [--batch-size 64] [--max-length 32] [--steps 8] [--warmup 2] [--num-groups K] [--num-positives 2]
        [--positive-source sgw] [--output benchmarks/results/whitenedcse_speed.md]

One step = forward + loss + backward + AdamW update, on the same tokenized wiki batches for both methods. The two
methods alternate step by step (interleaved, the order flipping every step), so a change in machine load affects
both alike; the ratio is the ratio of the median step times, in wall time and in process CPU time (all threads; on
a shared machine the CPU-time ratio is the steadier one). Also reported: the SGW head alone (forward + backward of
whitening over all draws).
"""

import argparse
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer

from csekit.data import resolve_data_file
from csekit.loading import resolve_model_path
from csekit.modeling import SimCSEModel, WhitenedCSEModel
from csekit.modeling.configuration_whitenedcse import dropout_views
from csekit.modeling.losses import info_nce_loss, multi_positive_info_nce_terms, multi_positive_l1_loss
from csekit.trainers.collators import ContrastiveCollator


def simcse_loss(model, batch):
    embeddings = model(**batch).embeddings
    return info_nce_loss(embeddings[:, 0], embeddings[:, 1], temperature=model.config.temperature)


def whitenedcse_loss(model, batch):
    embeddings = model(**batch).embeddings
    terms = multi_positive_info_nce_terms(embeddings[:, 0], embeddings[:, 1:], temperature=model.config.temperature)
    return multi_positive_l1_loss(terms, model.config.positive_weights)


def timed_step(model, optimizer, loss_fn, batch) -> tuple:
    """``(wall seconds, process CPU seconds)`` of one training step; CPU time is less sensitive to other jobs."""
    wall, cpu = time.perf_counter(), time.process_time()
    loss = loss_fn(model, batch)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - wall, time.process_time() - cpu


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="all-MiniLM-L6-v2", help="Backbone for both methods.")
    parser.add_argument("--pooler", default="avg", help="Pooler for both methods (the comparison config's).")
    parser.add_argument("--batch-size", type=int, default=64, help="Sentences per step.")
    parser.add_argument("--max-length", type=int, default=32, help="Truncation length.")
    parser.add_argument("--steps", type=int, default=8, help="Timed steps per method (after warm-up).")
    parser.add_argument("--warmup", type=int, default=2, help="Untimed steps per method first.")
    parser.add_argument("--num-groups", type=int, default=None,
                        help="WhitenedCSE whitening groups k (default: the config's paper rule for the backbone).")
    parser.add_argument("--num-positives", type=int, default=2, help="WhitenedCSE positives per anchor.")
    parser.add_argument("--positive-source", default="sgw", help="sgw or dropout (see WhitenedCSEConfig).")
    parser.add_argument("--train-file", default="wiki/wiki1m_for_simcse.txt", help="Sentences to batch.")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice).")
    parser.add_argument("--output", default=None, help="Also write the markdown result here.")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    path = resolve_model_path(args.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    sentences = resolve_data_file(args.train_file, None).read_text().splitlines()
    batches = [
        [{"sent0": text} for text in sentences[i * args.batch_size : (i + 1) * args.batch_size]]
        for i in range(args.warmup + args.steps)
    ]
    views = dropout_views(args.positive_source, args.num_positives)
    collate_simcse = ContrastiveCollator(tokenizer, max_length=args.max_length, unsupervised_views=2)
    collate_whitened = ContrastiveCollator(tokenizer, max_length=args.max_length, unsupervised_views=views)

    simcse = SimCSEModel.from_encoder(path, pooler_type=args.pooler).train()
    whitened = WhitenedCSEModel.from_encoder(
        path, pooler_type=args.pooler, num_groups=args.num_groups, num_positives=args.num_positives,
        positive_source=args.positive_source,
    ).train()
    runs = {
        "SimCSE": (simcse, torch.optim.AdamW(simcse.parameters(), lr=3e-5), simcse_loss, collate_simcse),
        "WhitenedCSE": (whitened, torch.optim.AdamW(whitened.parameters(), lr=3e-5), whitenedcse_loss,
                        collate_whitened),
    }
    times = {name: [] for name in runs}
    cpu_times = {name: [] for name in runs}
    for index, texts in enumerate(batches):
        order = list(runs) if index % 2 == 0 else list(reversed(runs))
        for name in order:
            model, optimizer, loss_fn, collate = runs[name]
            wall, cpu = timed_step(model, optimizer, loss_fn, collate(texts))
            if index >= args.warmup:
                times[name].append(wall)
                cpu_times[name].append(cpu)
        print(f"step {index}: " + ", ".join(f"{name} {values[-1]:.2f}s" for name, values in times.items() if values),
              flush=True)

    # the SGW head alone: (1 + m) draws of (batch, hidden) whitened with batch statistics, forward + backward
    features = torch.randn(1 + args.num_positives, args.batch_size, whitened.config.hidden_size, requires_grad=True)
    sgw_times = []
    for _ in range(20):
        start = time.perf_counter()
        whitened.whitening(features).sum().backward()
        sgw_times.append(time.perf_counter() - start)

    medians = {name: statistics.median(values) for name, values in times.items()}
    cpu_medians = {name: statistics.median(values) for name, values in cpu_times.items()}
    ratio = medians["WhitenedCSE"] / medians["SimCSE"]
    cpu_ratio = cpu_medians["WhitenedCSE"] / cpu_medians["SimCSE"]
    lines = [
        f"Command: `python benchmarks/whitenedcse_speed.py {shlex.join(sys.argv[1:] if argv is None else argv)}`",
        f"({args.model}, pooler {args.pooler}, batch {args.batch_size}, max length {args.max_length}, "
        f"{args.steps} interleaved steps after {args.warmup} warm-up, torch threads {torch.get_num_threads()}; "
        f"WhitenedCSE {whitened.config.num_groups} groups, {args.num_positives} positives, positives from "
        f"{args.positive_source})",
        "",
        "| method | median step s (wall) | min s | max s | median step s (process CPU) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, values in times.items():
        lines.append(f"| {name} | {medians[name]:.3f} | {min(values):.3f} | {max(values):.3f} | "
                     f"{cpu_medians[name]:.3f} |")
    lines += ["", f"**Step-time ratio WhitenedCSE / SimCSE: {ratio:.3f} wall, {cpu_ratio:.3f} CPU time** "
              f"(SGW head alone, forward + backward: {1000 * statistics.median(sgw_times):.1f} ms)"]
    text = "\n".join(lines)
    print(text)
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text + "\n")


if __name__ == "__main__":
    main()
