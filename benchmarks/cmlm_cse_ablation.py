"""Run a grid of CMLM-CSE ablations and write the best STS-B dev score of each as a markdown table.

    python benchmarks/cmlm_cse_ablation.py --table 4 5 --output-root outputs/cmlm_ablation \
        --markdown benchmarks/results/cmlm_cse_ablation.md -- --config recipes/configs/minilm_compare.yaml \
        --extractor_layers 4 --fusion_layers 2

    python benchmarks/cmlm_cse_ablation.py --run "mask 40%=--mask_rate 0.4" --run "lambda 0.05=--mlm_weight 0.05" ...

Every run is ``accelerate launch --cpu recipes/cmlm_cse.py BASE_FLAGS RUN_FLAGS --seed S --do_test_eval False``
into ``OUTPUT_ROOT/<run name>``: the ablations are selected and reported on STS-B dev only, never on the test sets
(as the paper's Tables 2-5). A run whose ``dev_result.json`` exists is not repeated, so an interrupted grid resumes.
``--table`` adds the paper's grids (Table 6 adapted to the 6-layer MiniLM; edit ``PAPER_TABLES`` for BERT-base).
"""

import argparse
import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

from common import emit

PAPER_TABLES = {
    "2": {"w/o MLM loss": "--mlm_weight 0", "w/o contrastive loss": "--contrastive_weight 0", "full": ""},
    "3": {"word repetition 32%": "--contrastive_augmentation word_repetition --word_repetition_rate 0.32",
          "drop one word": "--contrastive_augmentation drop_one_word", "no augmentation": ""},
    "4": {f"mask {rate}%": f"--mask_rate {rate / 100}" for rate in (15, 20, 25, 30, 40, 45)},
    "5": {f"lambda {value}": f"--mlm_weight {value}" for value in (0, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1)},
    # MiniLM's 6 blocks hold extractor + fusioner, as BERT-base's 12 hold every cell of the paper's Table 6 (the
    # default fusion_init="next_layers" needs it)
    "6": {f"extractor {e} / fusioner {f}": f"--extractor_layers {e} --fusion_layers {f}"
          for e, f in ((2, 2), (2, 3), (2, 4), (3, 2), (3, 3), (4, 1), (4, 2), (5, 1))},
}


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", name).strip("-").lower()


def best_dev(output_dir: Path) -> dict:
    """Best STS-B dev score and the last logged losses, from the newest checkpoint's trainer state."""
    states = sorted(output_dir.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
    if not states:
        raise SystemExit(f"error: {output_dir} has no checkpoint: did the run save at its eval steps?")
    state = json.loads(states[-1].read_text())
    losses = [entry for entry in state["log_history"] if "loss_mlm" in entry]
    return {
        "dev": state["best_metric"],
        "best_step": state.get("best_global_step"),
        "loss_contrastive": losses[-1]["loss_contrastive"] if losses else None,
        "loss_mlm": losses[-1]["loss_mlm"] if losses else None,
    }


def run(name: str, flags: str, base: list, seed: int, root: Path, recipe: str) -> dict:
    output_dir = root / slug(name)
    result_file = output_dir / "dev_result.json"
    if not result_file.exists():
        command = [sys.executable, "-m", "accelerate.commands.launch", "--cpu", "--num_processes", "1", recipe,
                   *base, *shlex.split(flags), "--seed", str(seed), "--output_dir", str(output_dir),
                   "--do_test_eval", "False"]
        print("$", shlex.join(command), flush=True)
        start = time.time()
        subprocess.run(command, check=True)
        record = {"name": name, "flags": flags, **best_dev(output_dir), "wall_seconds": round(time.time() - start)}
        result_file.write_text(json.dumps(record, indent=2) + "\n")
    return json.loads(result_file.read_text())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--table", nargs="+", default=[], choices=sorted(PAPER_TABLES),
                        help="Add the grid of these paper tables.")
    parser.add_argument("--run", action="append", default=[], metavar="NAME=FLAGS",
                        help="One more run: a row name and its recipe flags (repeatable).")
    parser.add_argument("--seed", type=int, default=42, help="Training seed of every run.")
    parser.add_argument("--recipe", default="recipes/cmlm_cse.py", help="Recipe script.")
    parser.add_argument("--output-root", required=True, help="Each run trains into OUTPUT_ROOT/<run name>.")
    parser.add_argument("--markdown", default=None, help="Write the table here (also printed).")
    parser.add_argument("base_args", nargs=argparse.REMAINDER, help="After '--': flags shared by every run.")
    args = parser.parse_args(argv)
    grid = {}
    for table in args.table:
        grid.update(PAPER_TABLES[table])
    for item in args.run:
        name, separator, flags = item.partition("=")
        if not separator or not name.strip():
            parser.error(f"--run {item!r}: expected NAME=FLAGS")
        grid[name.strip()] = flags.strip()
    if not grid:
        parser.error("nothing to run: give --table and/or --run")
    base = args.base_args[1:] if args.base_args[:1] == ["--"] else args.base_args
    records = [run(name, flags, base, args.seed, Path(args.output_root), args.recipe) for name, flags in grid.items()]
    command = shlex.join(argv if argv is not None else sys.argv[1:])
    lines = [f"Command: `python benchmarks/cmlm_cse_ablation.py {command}`",
             "", "| run | flags | best STS-B dev | at step | last L_contrast | last L_MLM | wall s |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in records:
        lines.append(f"| {r['name']} | `{r['flags'] or '(base)'}` | {r['dev']:.2f} | {r['best_step']} | "
                     f"{r['loss_contrastive']} | {r['loss_mlm']} | {r['wall_seconds']} |")
    emit("\n".join(lines), args.markdown)


if __name__ == "__main__":
    main()
