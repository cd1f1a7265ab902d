"""Matryoshka training against plain training: STS test at the full size and at each truncated size, several seeds.

    CSEKIT_DATA_DIR=... python benchmarks/matryoshka.py --seeds 42 43 44 --dims 256 128 64 \
        --output-root outputs/matryoshka --table benchmarks/results/matryoshka.md [--variant plain|matryoshka]

Each seed trains the recipe twice from the same start (``--config``, default the quickstart: all-MiniLM-L6-v2, 100
steps, batch 64): once as configured ("plain") and once with ``--matryoshka_dims DIMS``. Runs go through
``benchmarks/seeds.py``'s ``run_seed`` (``ROOT/<variant>/seedS``; a finished run is not trained again, so an
interrupted grid resumes and ``--variant`` lets two processes share it). Every trained model, and the starting model,
is scored as ``csekit evaluate --truncate-dim d`` scores it: the 7 STS test sets (SentEval "all", Spearman x 100) on
the first d coordinates of the vectors ``encode`` returns, each sentence encoded once. A Matryoshka run's scores are
the ones its recipe recorded (``eval_results.json`` ``matryoshka_sts``, computed that way; ``tests/test_matryoshka.py``
checks they equal ``evaluate --truncate-dim``); the plain runs and the starting model are encoded here.
"""

import argparse
import json
import shlex
import statistics
import sys
from pathlib import Path

import yaml

from common import emit
from seeds import DEFAULT_LAUNCH, run_seed

VARIANTS = ("plain", "matryoshka")


def scores_by_size(model: str, sizes: list, data_dir: str) -> dict:
    """``{size: 7-task STS average}`` for ``model``'s vectors cut to each size (the full size first)."""
    from csekit.evaluation.encoders import load_embedder
    from csekit.evaluation.run_scores import encoded_once, scores_at_sizes
    from csekit.evaluation.sts import STS_TASKS, STSEvaluator

    embed, info = load_embedder(model, batch_size=128)
    scores = scores_at_sizes(STSEvaluator(data_dir, STS_TASKS, split="test"), encoded_once(embed),
                             [info["dimension"], *sizes])
    return {size: values["avg"] for size, values in scores.items()}


def mean_and_spread(values: list) -> str:
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.2f} ± {spread:.2f}"


def score_table(scores: dict, base: str, seeds: list, argv) -> list:
    """The markdown lines: the start model, each variant's seeds, their mean and spread, and the per-seed gain."""
    sizes = list(scores["start", None])
    header = "| model | " + " | ".join(f"{size}" for size in sizes) + " |"
    lines = [f"Command: `python benchmarks/matryoshka.py {shlex.join(argv if argv is not None else sys.argv[1:])}`",
             "", "STS test, 7-task average (Spearman x 100), at each vector size (the first d coordinates)", "",
             header, "|---|" + "---:|" * len(sizes),
             f"| {base} (start) | " + " | ".join(f"{scores['start', None][s]:.2f}" for s in sizes) + " |"]
    for variant in VARIANTS:
        for seed in seeds:
            lines.append(f"| {variant} (seed {seed}) | "
                         + " | ".join(f"{scores[variant, seed][s]:.2f}" for s in sizes) + " |")
        lines.append(f"| **{variant} mean ± std** | " + " | ".join(
            f"**{mean_and_spread([scores[variant, seed][s] for seed in seeds])}**" for s in sizes) + " |")
    lines.append("| **matryoshka − plain, per seed** | " + " | ".join(
        " / ".join(f"{scores['matryoshka', seed][s] - scores['plain', seed][s]:+.2f}" for seed in seeds)
        for s in sizes) + " |")
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="recipes/configs/quickstart.yaml")
    parser.add_argument("--recipe", default="recipes/simcse.py")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    parser.add_argument("--dims", type=int, nargs="+", default=[256, 128, 64])
    parser.add_argument("--output-root", default="outputs/matryoshka")
    parser.add_argument("--variant", choices=VARIANTS, default=None, help="Train only this variant (no table).")
    parser.add_argument("--launch", default=DEFAULT_LAUNCH, help="accelerate launch flags (default: %(default)s).")
    parser.add_argument("--table", default=None, help="Write the markdown table here (also printed).")
    args = parser.parse_args(argv)

    from csekit.data import resolve_data_dir

    data_dir = str(resolve_data_dir(None))
    root = Path(args.output_root)
    flags = {"plain": [], "matryoshka": ["--matryoshka_dims", *map(str, args.dims)]}
    variants = [args.variant] if args.variant else VARIANTS
    records = {(variant, seed): run_seed(args.recipe, seed, root / variant / f"seed{seed}",
                                         ["--config", args.config, *flags[variant]], shlex.split(args.launch))
               for seed in args.seeds for variant in variants}
    if args.variant:
        return
    with open(args.config) as handle:
        base = yaml.safe_load(handle)["model_name_or_path"]
    scores = {("start", None): scores_by_size(base, args.dims, data_dir)}
    for (variant, seed), record in records.items():
        if variant == "matryoshka":  # the recipe scored every trained size as evaluate --truncate-dim does
            scores[variant, seed] = {max(scores["start", None]): record["sts"]["avg"],
                                     **{int(size): values["avg"] for size, values in record["matryoshka_sts"].items()}}
        else:
            scores[variant, seed] = scores_by_size(record["model"], args.dims, data_dir)

    lines = score_table(scores, base, args.seeds, argv)
    (root / "scores.json").write_text(json.dumps(
        {f"{variant}" + (f"/seed{seed}" if seed is not None else ""): {str(s): v for s, v in by_size.items()}
         for (variant, seed), by_size in scores.items()}, indent=2) + "\n")
    emit("\n".join(lines), args.table)


if __name__ == "__main__":
    main()
