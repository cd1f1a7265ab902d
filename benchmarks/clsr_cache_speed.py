"""CLSR: training the head on cached pooled vectors vs recomputing the frozen encoder every epoch.

    python benchmarks/clsr_cache_speed.py [--model all-MiniLM-L6-v2]
        [--train_data stsb] [--test_overlap keep] [--batch_size 512] [--cached_epochs 20] [--recompute_epochs 2]
        [--rounds 2] [--target_epochs 2000] [--torch_threads N] [--output benchmarks/results/clsr_cache_speed.md]

Both variants run the same head step (e + h, NT-Xent, LARS) on the same batches; they differ only in where the
pooled vectors come from: an index into the cached tensor, or ``model.encode_pooled`` on the batch's sentences
(the frozen encoder, no gradient). The two are interleaved in rounds inside this one process, so machine load hits
both alike. The recompute variant is far too slow to run for 2000 epochs, so its per-epoch time is measured over a
few epochs and *extrapolated*; the cached total includes building the cache once (timed here on a fresh cache).
"""

import argparse
import statistics
import sys
import tempfile
import time

import torch
from torch import nn
from transformers import AutoTokenizer

from common import emit
from csekit.loading import resolve_model_path
from csekit.modeling import CLSRModel, nt_xent_loss
from csekit.trainers.clsr_data import build_pair_corpus, held_out_sentences, load_positive_pairs
from csekit.trainers.embedding_cache import EmbeddingCache
from csekit.trainers.lars import LARS, lars_param_groups


def run_epochs(model, projection, optimizer, pairs, batch, epochs, vectors_for, generator) -> float:
    """Seconds per epoch of head training, with ``vectors_for(rows) -> (2 * batch, hidden)`` supplying inputs."""
    start = time.perf_counter()
    for _ in range(epochs):
        order = torch.randperm(len(pairs), generator=generator)
        for step in range(len(pairs) // batch):
            rows = pairs[order[step * batch : (step + 1) * batch]].T.reshape(-1)
            projected = projection(model.mlp(vectors_for(rows)))
            loss = nt_xent_loss(projected[:batch], projected[batch:], model.config.temperature)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    return (time.perf_counter() - start) / epochs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="all-MiniLM-L6-v2", help="Frozen backbone (folder or embedded name).")
    parser.add_argument("--pooler_type", default="avg", help="Backbone pooling.")
    parser.add_argument("--train_data", default="stsb", help="nli, stsb or a sent0,sent1 .csv.")
    parser.add_argument("--data_dir", default=None, help="Data folder (default: the usual lookup).")
    parser.add_argument("--test_overlap", default="keep", choices=["drop", "keep"],
                        help="Pairs sharing a sentence with an evaluation set (as the recipe's flag). Default keep: "
                        "this benchmark only times epochs and scores nothing, and the 181 clean STS-B pairs are "
                        "fewer than one batch of 512.")
    parser.add_argument("--batch_size", type=int, default=512, help="Positive pairs per batch.")
    parser.add_argument("--encode_batch_size", type=int, default=128, help="Sentences per encoder forward pass.")
    parser.add_argument("--cached_epochs", type=int, default=20, help="Cached epochs timed per round.")
    parser.add_argument("--recompute_epochs", type=int, default=1, help="Recompute epochs timed per round.")
    parser.add_argument("--rounds", type=int, default=2, help="Interleaved rounds (cached, then recompute).")
    parser.add_argument("--target_epochs", type=int, default=2000, help="Epoch count the totals are projected to.")
    parser.add_argument("--output", default=None, help="Also write the markdown table here.")
    parser.add_argument("--torch_threads", type=int, default=None, help="CPU threads for torch (default: torch's).")
    args = parser.parse_args(argv)
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)

    path = resolve_model_path(args.model)
    model = CLSRModel.from_encoder(path, pooler_type=args.pooler_type)
    model.tokenizer = AutoTokenizer.from_pretrained(path)
    corpus = build_pair_corpus(*load_positive_pairs(args.train_data, args.data_dir),
                               held_out_sentences(args.data_dir), drop=args.test_overlap == "drop")
    if len(corpus.pairs) < args.batch_size:
        raise SystemExit(f"{len(corpus.pairs)} pairs, fewer than one batch of {args.batch_size}: lower --batch_size "
                         "or pass --test_overlap keep")
    with tempfile.TemporaryDirectory() as cache_dir:  # a fresh cache: the build time is part of the cached cost
        start = time.perf_counter()
        cached = EmbeddingCache(cache_dir).get(model, corpus.sentences, batch_size=args.encode_batch_size).vectors
        build_seconds = time.perf_counter() - start
        start = time.perf_counter()
        EmbeddingCache(cache_dir).get(model, corpus.sentences)
        hit_seconds = time.perf_counter() - start

    torch.manual_seed(0)
    size = model.mlp.dense_out.out_features
    projection = nn.Linear(size, size)
    optimizer = LARS(lars_param_groups(nn.ModuleDict({"e": model.mlp, "h": projection}), 1e-4), lr=0.5)
    generator = torch.Generator().manual_seed(0)
    sentences = corpus.sentences

    def recompute(rows):
        return model.encode_pooled([sentences[i] for i in rows.tolist()], batch_size=args.encode_batch_size,
                                   show_progress_bar=False).clone()  # leave inference mode for autograd

    cached_times, recompute_times = [], []
    for round_index in range(args.rounds):
        cached_times.append(run_epochs(model, projection, optimizer, corpus.pairs, args.batch_size,
                                       args.cached_epochs, lambda rows: cached[rows], generator))
        recompute_times.append(run_epochs(model, projection, optimizer, corpus.pairs, args.batch_size,
                                          args.recompute_epochs, recompute, generator))
        print(f"round {round_index + 1}: cached {cached_times[-1]:.3f} s/epoch, "
              f"recompute {recompute_times[-1]:.2f} s/epoch", flush=True)
    cached_epoch = statistics.median(cached_times)
    recompute_epoch = statistics.median(recompute_times)
    cached_total = build_seconds + args.target_epochs * cached_epoch
    recompute_total = args.target_epochs * recompute_epoch
    command = "python benchmarks/clsr_cache_speed.py " + " ".join(sys.argv[1:] if argv is None else argv)
    lines = [
        f"Command: `{command}` ({torch.get_num_threads()} threads)",
        "",
        f"{args.model} ({args.pooler_type}), {args.train_data}: {len(corpus.pairs)} pairs, {len(sentences)} "
        f"sentences, batch {args.batch_size} pairs, {len(corpus.pairs) // args.batch_size} step(s)/epoch. Medians of "
        f"{args.rounds} interleaved rounds ({args.cached_epochs} cached / {args.recompute_epochs} recompute epochs "
        "each).",
        "",
        "| variant | one-off cost | s/epoch | projected total for "
        f"{args.target_epochs} epochs |",
        "|---|---:|---:|---:|",
        f"| cached vectors (this trainer) | cache build {build_seconds:.1f} s (a later hit: {hit_seconds:.2f} s) | "
        f"{cached_epoch:.3f} | {cached_total / 60:.1f} min |",
        f"| recompute encoder every epoch | - | {recompute_epoch:.2f} | {recompute_total / 3600:.1f} h "
        "(extrapolated) |",
        "",
        f"Speed-up per epoch: **{recompute_epoch / cached_epoch:.0f}x**; over {args.target_epochs} epochs including "
        f"the cache build: **{recompute_total / cached_total:.0f}x**.",
    ]
    emit("\n".join(lines), args.output)


if __name__ == "__main__":
    main()
