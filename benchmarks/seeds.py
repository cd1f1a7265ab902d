"""Run a training recipe under several seeds and report 7-task STS as mean ± std.

    python benchmarks/seeds.py --recipe recipes/simcse.py --seeds 42 43 44 --name SimCSE \
        --output-root outputs/seeds/simcse --table benchmarks/results/simcse_seeds.md -- --config ... [recipe flags]

Each seed runs ``accelerate launch LAUNCH RECIPE ... --seed S --output_dir ROOT/seedS`` (LAUNCH defaults to
``--cpu --num_processes 1``; ``--launch "--num_processes 1 --mixed_precision bf16"`` trains on a GPU), skipped
if ``ROOT/seedS/eval_results.json`` exists, so an interrupted grid resumes, then the per-seed scores and the
mean ± std (sample std) are written as a markdown table. Wall time per seed is recorded too.
"""

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import emit
from csekit.evaluation.sts import STS_SHORT_NAMES, STS_TASKS

TASKS = (*STS_TASKS, "avg")
DEFAULT_LAUNCH = "--cpu --num_processes 1"


def run_seed(recipe: str, seed: int, output_dir: Path, recipe_args: list, launch_args: list = None) -> dict:
    results_file = output_dir / "eval_results.json"
    if not results_file.exists():
        launch_args = shlex.split(DEFAULT_LAUNCH) if launch_args is None else launch_args
        command = [sys.executable, "-m", "accelerate.commands.launch", *launch_args, recipe,
                   *recipe_args, "--seed", str(seed), "--output_dir", str(output_dir)]
        print("$", shlex.join(command), flush=True)
        start = time.time()
        subprocess.run(command, check=True)
        record = json.loads(results_file.read_text())
        record["wall_seconds"] = round(time.time() - start, 1)
        results_file.write_text(json.dumps(record, indent=2) + "\n")
    return json.loads(results_file.read_text())


def format_rows(name: str, records: dict) -> list:
    lines = []
    for seed, record in records.items():
        cells = " | ".join(f"{record['sts'][t]:.2f}" for t in TASKS)
        lines.append(f"| {name} (seed {seed}) | {cells} | {record.get('wall_seconds', float('nan')):.0f} |")
    means = []
    for task in TASKS:
        values = [record["sts"][task] for record in records.values()]
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        means.append(f"**{statistics.mean(values):.2f}** ± {spread:.2f}")
    lines.append(f"| **{name} mean ± std** | " + " | ".join(means) + " | |")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", required=True, help="Recipe script, e.g. recipes/simcse.py.")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44])
    parser.add_argument("--name", required=True, help="Row label in the table.")
    parser.add_argument("--output-root", required=True, help="Each seed trains into OUTPUT_ROOT/seedS.")
    parser.add_argument(
        "--launch", default=DEFAULT_LAUNCH, help="accelerate launch flags (default: %(default)s)."
    )
    parser.add_argument("--table", default=None, help="Write the markdown table here (also printed).")
    parser.add_argument("recipe_args", nargs=argparse.REMAINDER, help="After '--': flags passed to the recipe.")
    args = parser.parse_args(argv)
    recipe_args = args.recipe_args[1:] if args.recipe_args[:1] == ["--"] else args.recipe_args
    records = {seed: run_seed(args.recipe, seed, Path(args.output_root) / f"seed{seed}", recipe_args,
                              shlex.split(args.launch))
               for seed in args.seeds}
    header = "| run | " + " | ".join(STS_SHORT_NAMES.get(t, t) for t in TASKS) + " | wall s |"
    lines = [f"Command: `python benchmarks/seeds.py {shlex.join(argv if argv is not None else sys.argv[1:])}`", "",
             header, "|---|" + "---:|" * (len(TASKS) + 1), *format_rows(args.name, records)]
    emit("\n".join(lines), args.table)


if __name__ == "__main__":
    main()
