"""Run a WhitenedCSE ablation grid with recipes/whitenedcse.py and write a markdown table (STS-B dev + 7 STS tests).

    python benchmarks/whitenedcse_ablation.py --preset table3 --seeds 42 \
        --output-root outputs/whitenedcse_ablation --table benchmarks/results/whitenedcse_table3.md \
        -- --config recipes/configs/minilm_compare.yaml

    python benchmarks/whitenedcse_ablation.py --grid whitening=group,shuffled_group --grid num_groups=96,192 ...

``--grid KEY=V1,V2`` (repeatable; the cells are the cartesian product) sets recipe flags per cell; ``--preset`` is a
paper table: ``table3`` (whitening none/pca/zca/group/shuffled_group), ``table4`` (the paper's k = 32..384 groups x
with/without shuffle, ``--num_groups k``; k that do not divide the hidden size are skipped), ``table5`` (paper positive
number 2..5 = ``num_positives`` 1..4), ``loss`` (L1 vs L2). Flags after ``--`` are passed to every cell. Each cell
trains under each seed into ``OUTPUT_ROOT/<cell>/seedS`` (skipped when its ``eval_results.json`` exists, so a grid
resumes) via ``benchmarks/seeds.py``. The table reports the best STS-B dev Spearman (the selection metric, from the
trainer state) and the test scores, averaged over seeds.
"""

import argparse
import itertools
import json
import shlex
import statistics
import sys
from pathlib import Path

from common import emit
from csekit.evaluation.sts import STS_SHORT_NAMES
from seeds import TASKS, run_seed

PRESETS = {
    "table3": {"whitening": ["none", "pca", "zca", "group", "shuffled_group"]},
    "table4": {"whitening": ["shuffled_group", "group"],
               "num_groups": ["32", "48", "64", "96", "128", "192", "256", "384"]},
    "table5": {"num_positives": ["1", "2", "3", "4"]},
    "loss": {"loss_type": ["L1", "L2"]},
}


def parse_grid(items: list) -> dict:
    grid = {}
    for item in items:
        key, _, values = item.partition("=")
        if not key or not values:
            raise SystemExit(f"--grid {item!r}: expected KEY=V1,V2,...")
        grid[key.strip().lstrip("-")] = [value.strip() for value in values.split(",") if value.strip()]
    return grid


def best_dev(output_dir: Path) -> float:
    """Best STS-B dev Spearman of a run (x100, as the evaluator reports it), from the last checkpoint's trainer
    state."""
    states = sorted(output_dir.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
    if not states:
        return float("nan")
    return json.loads(states[-1].read_text())["best_metric"]


def hidden_size(recipe_args: list) -> int:
    """The backbone's hidden size (``--model_name_or_path`` flag, else the ``--config`` YAML, else the recipe default),
    to skip table-4 group counts that cannot divide it."""
    import yaml
    from transformers import AutoConfig

    from csekit.loading import resolve_model_path

    flags = argparse.ArgumentParser(add_help=False)
    flags.add_argument("--config")
    flags.add_argument("--model_name_or_path")
    known, _ = flags.parse_known_args(recipe_args)
    values = yaml.safe_load(Path(known.config).read_text()) or {} if known.config else {}
    name = known.model_name_or_path or values.get("model_name_or_path", "bert-base-uncased")
    return AutoConfig.from_pretrained(resolve_model_path(name)).hidden_size


def grid_cells(grid: dict, recipe_args: list) -> list:
    """Every combination of the grid's values; a ``num_groups`` that does not divide the hidden size is skipped (and
    said)."""
    keys = list(grid)
    cells = [dict(zip(keys, values)) for values in itertools.product(*grid.values())]
    if "num_groups" in grid:
        hidden = hidden_size(recipe_args)
        skipped = sorted({cell["num_groups"] for cell in cells if hidden % int(cell["num_groups"])}, key=int)
        if skipped:
            print(f"skipping num_groups {', '.join(skipped)}: they do not divide the hidden size {hidden}")
        cells = [cell for cell in cells if not hidden % int(cell["num_groups"])]
    return cells


def cell_row(cell: dict, args, recipe_args: list) -> str:
    """One cell trained for every seed: its table row (best STS-B dev, test scores, means over seeds)."""
    name = "-".join(f"{key}_{value}" for key, value in cell.items())
    flags = [token for key, value in cell.items() for token in (f"--{key}", value)]
    records = [run_seed(args.recipe, seed, Path(args.output_root) / name / f"seed{seed}", recipe_args + flags)
               for seed in args.seeds]
    devs = [best_dev(Path(args.output_root) / name / f"seed{seed}") for seed in args.seeds]
    scores = [statistics.mean(record["sts"][task] for record in records) for task in TASKS]
    label = ", ".join(f"{key}={value}" for key, value in cell.items())
    return f"| {label} | {statistics.mean(devs):.2f} | " + " | ".join(f"{s:.2f}" for s in scores) + " |"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS), help="A paper ablation table (see above).")
    parser.add_argument("--grid", action="append", default=[], help="KEY=V1,V2 recipe flag values (repeatable).")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42], help="Seeds per cell.")
    parser.add_argument("--recipe", default="recipes/whitenedcse.py", help="Recipe run for every cell.")
    parser.add_argument("--output-root", default="outputs/whitenedcse_ablation", help="Cells train under here.")
    parser.add_argument("--table", default=None, help="Write the markdown table here (also printed).")
    parser.add_argument("recipe_args", nargs=argparse.REMAINDER, help="After '--': flags for every cell.")
    args = parser.parse_args(argv)
    recipe_args = args.recipe_args[1:] if args.recipe_args[:1] == ["--"] else args.recipe_args
    grid = {**PRESETS.get(args.preset, {}), **parse_grid(args.grid)}
    if not grid:
        parser.error("give --preset or at least one --grid KEY=V1,V2")
    rows = [cell_row(cell, args, recipe_args) for cell in grid_cells(grid, recipe_args)]
    command = shlex.join(sys.argv[1:] if argv is None else argv)
    lines = [
        f"Command: `python benchmarks/whitenedcse_ablation.py {command}`",
        f"(seeds {' '.join(map(str, args.seeds))}; mean over seeds; STS-B dev = best dev Spearman, the selection "
        "metric)",
        "",
        "| cell | STS-B dev | " + " | ".join(STS_SHORT_NAMES.get(t, t) for t in TASKS) + " |",
        "|---|---:|" + "---:|" * len(TASKS),
        *rows,
    ]
    emit("\n".join(lines), args.table)


if __name__ == "__main__":
    main()
