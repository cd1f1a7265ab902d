"""The csekit comparison report: every method from the same base model, data, steps and seeds, in one table.

    python benchmarks/compare.py [--methods NAME,...]
        [--seeds 42 43 44] [--no-train] [--suites transfer,clustering,geometry] [--cards]

* SimCSE, WhitenedCSE, CMLM-CSE and ESimCSE train with their recipes under ``recipes/configs/minilm_compare.yaml`` (the
  shared budget) through ``benchmarks/seeds.py``, into ``OUTPUT_ROOT/<method>/seed<S>`` (WhitenedCSE: its
  defaults, into ``OUTPUT_ROOT/whitenedcse_k_groups``); a seed whose ``eval_results.json`` exists is reused, never
  retrained. ``--no-train`` only collects what exists.
* CLSR trains its head on top of the frozen base model (``recipes/clsr.py`` with the base and mean pooling, the STS-B
  train pairs scored >= 4 that share no sentence with an evaluation set, batch 64, 500 epochs, its paper defaults
  otherwise), also per seed.
* The training-free row runs ``csekit extract`` on the base model with the settings of ``--extraction``.
* STS columns are means over the seeds found (the average also ± sample std); the transfer / clustering /
  geometry suites are scored on the first seed's model only (CPU budget), cached in its ``eval_results.json``.
* Training time is the mean of the ``wall_seconds`` that seeds.py records per seed (training + STS test scoring,
  on whatever load the machine had).

The table goes into the ``## Comparison`` section of ``--results`` (replaced on every run) and, with ``--cards``,
into ``comparison.md`` + a regenerated ``README.md`` of each method's first-seed model folder.
"""

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from csekit.data import DATA_DIR_HELP  # noqa: E402
from csekit.evaluation.sts import STS_COLUMNS as STS_COLUMNS_WITH_AVERAGE  # noqa: E402
from seeds import DEFAULT_LAUNCH, run_seed  # noqa: E402  (sibling script)

REPO_ROOT = Path(__file__).resolve().parent.parent
STS_COLUMNS = tuple(column for column in STS_COLUMNS_WITH_AVERAGE if column[0] != "avg")
SECTION = "## Comparison"


@dataclass
class Method:
    name: str
    recipe: str
    recipe_args: list = field(default_factory=list)
    shared_config: bool = True  # trains under the shared comparison budget (the YAML)
    folder: str = ""  # runs live in OUTPUT_ROOT/<folder>/seed<S> (default: the method key)


METHODS = {
    "simcse": Method("SimCSE", "recipes/simcse.py"),
    # the recipe defaults: the paper's k read as a number of groups, 192 groups of 2 channels on MiniLM (groups of
    # 192 channels are refused: wider than the batch of 64)
    "whitenedcse": Method("WhitenedCSE (192 groups)", "recipes/whitenedcse.py", folder="whitenedcse_k_groups"),
    # MiniLM has 6 blocks: a 4-block extractor and a 2-block fusioner (the paper's 8 + 3 do not fit)
    "cmlm_cse": Method("CMLM-CSE (extractor 4, fusioner 2)", "recipes/cmlm_cse.py",
                       ["--extractor_layers", "4", "--fusion_layers", "2"]),
    # ESimCSE with its defaults (subword repetition 0.32, a queue of 160 keys, momentum 0.995). DiffCSE is not here:
    # its generator, a masked LM with MiniLM's vocabulary (the paper: distilbert-base-uncased), is not on this machine
    "esimcse": Method("ESimCSE", "recipes/esimcse.py"),
    # CLSR on the STS-B train pairs scored >= 4 that share no sentence with an evaluation set (181 pairs, so batch
    # 64) for 500 epochs: its NLI / 2000-epoch default is ~40 min per seed here
    "clsr": Method("CLSR (head on the frozen base, clean STS-B>=4 pairs, 500 epochs)", "recipes/clsr.py",
                   ["--model_name_or_path", "all-MiniLM-L6-v2", "--pooler_type", "avg", "--train_file", "stsb",
                    "--per_device_train_batch_size", "64", "--num_train_epochs", "500"], shared_config=False),
}
EXTRACTION = "extraction"


def method_folder(key: str, args) -> Path:
    return Path(args.output_root) / (METHODS[key].folder or key)


def collect_method(key: str, args) -> dict:
    """``{seed: record}`` of the method's runs, training missing seeds unless ``--no-train``."""
    method = METHODS[key]
    if not (REPO_ROOT / method.recipe).is_file():
        print(f"[skip] {method.name}: {method.recipe} does not exist yet", flush=True)
        return {}
    recipe_args = (["--config", args.config] if method.shared_config else []) + method.recipe_args
    records = {}
    for seed in args.seeds:
        output_dir = method_folder(key, args) / f"seed{seed}"
        if (output_dir / "eval_results.json").is_file() or not args.no_train:
            try:
                records[seed] = run_seed(method.recipe, seed, output_dir, recipe_args, shlex.split(args.launch))
            except subprocess.CalledProcessError as error:
                print(f"[skip] {method.name} seed {seed}: training failed ({error})", flush=True)
        else:
            print(f"[skip] {method.name} seed {seed}: no {output_dir}/eval_results.json and --no-train", flush=True)
    return records


def score_suites(model_dir: Path, suites: list, args) -> dict:
    """Transfer / clustering / geometry of one model folder, computed once and cached in its eval_results.json."""
    from csekit.data import resolve_data_dir
    from csekit.evaluation.encoders import load_embedder
    from csekit.evaluation.suites import evaluate_suites

    results_file = model_dir / "eval_results.json"
    record = json.loads(results_file.read_text())
    missing = [suite for suite in suites if suite not in record
               or (suite == "geometry" and "isoscore" not in record["geometry"])]
    if missing:
        embed, _ = load_embedder(str(model_dir), batch_size=128)
        scores = evaluate_suites(missing, resolve_data_dir(args.data_dir), embed, args.transfer_max_train,
                                 args.clustering_max_examples)
        for suite, values in scores.items():
            record[suite] = {**record.get(suite, {}), **values}
        results_file.write_text(json.dumps(record, indent=2) + "\n")
    return record


def run_extraction(args) -> dict:
    """The training-free row: ``csekit extract`` with ``--extraction`` settings (reused when its JSON exists)."""
    output = Path(args.output_root) / "extraction" / "extract.json"
    tasks = ",".join(["sts", *args.suites])
    if not output.is_file():
        command = [sys.executable, "-m", "csekit.cli", "extract", *shlex.split(args.extraction), "--tasks", tasks,
                   "--output", str(output)]
        if args.transfer_max_train:
            command += ["--transfer-max-train", str(args.transfer_max_train)]
        if args.clustering_max_examples:
            command += ["--clustering-max-examples", str(args.clustering_max_examples)]
        print("$", shlex.join(command), flush=True)
        start = time.time()
        subprocess.run(command, check=True)
        print(f"extraction took {time.time() - start:.0f} s", flush=True)
    rows = json.loads(output.read_text())
    rows = rows["rows"] if isinstance(rows, dict) else rows
    if len(rows) != 1:
        raise SystemExit(f"{output}: --extraction must name exactly one setting, found {len(rows)} rows")
    return rows[0]


def format_cell(values: list, digits: int = 2, spread: bool = False) -> str:
    if not values:
        return "–"
    mean = statistics.mean(values)
    if spread and len(values) > 1:
        return f"{mean:.{digits}f} ± {statistics.stdev(values):.{digits}f}"
    return f"{mean:.{digits}f}"


def table_row(name: str, seeds: list, sts_records: list, suites_record: dict, seconds: list) -> str:
    cells = [format_cell([r[task] for r in sts_records]) for task, _ in STS_COLUMNS]
    cells.append(format_cell([r["avg"] for r in sts_records], spread=True))
    for suite in ("transfer", "clustering"):
        cells.append(format_cell([suites_record[suite]["avg"]] if "avg" in suites_record.get(suite, {}) else []))
    for metric in ("alignment", "uniformity"):
        value = suites_record.get("geometry", {}).get(metric)
        cells.append(format_cell([] if value is None else [value], digits=3))
    cells.append(format_cell(seconds, digits=0) if seconds else "0 (none)")
    cells.append(" ".join(map(str, seeds)) or "–")
    return f"| {name} | " + " | ".join(cells) + " |"


def replace_section(path: Path, body: str) -> None:
    """Write ``body`` as the ``## Comparison`` section of ``path``, replacing an earlier one, keeping the rest."""
    text = path.read_text() if path.is_file() else "# csekit benchmark results\n"
    start = text.find(SECTION + "\n")
    if start >= 0:
        end = text.find("\n## ", start + len(SECTION))
        text = text[:start] + text[end + 1:] if end >= 0 else text[:start]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.rstrip("\n") + "\n\n" + body.rstrip("\n") + "\n")


def method_rows(methods: list, args) -> tuple:
    """``(table rows, first-seed folders)``: each method's runs collected (trained unless ``--no-train``) and scored;
    the training-free extraction row; CLSR's base model alone."""
    rows, card_folders = [], []
    for key in methods:
        if key == EXTRACTION:
            row = run_extraction(args)
            setting = " / ".join(str(row[k]) for k in ("layers", "aggregation", "postprocessing"))
            label = f"no training: extraction {setting}"
            rows.append(table_row(label, [], [row["sts"]], row, []))
            continue
        records = collect_method(key, args)
        if not records:
            continue
        first = method_folder(key, args) / f"seed{min(records)}"
        suites_record = score_suites(first, args.suites, args) if args.suites else records[min(records)]
        seconds = [r["wall_seconds"] for r in records.values() if "wall_seconds" in r]
        rows.append(table_row(METHODS[key].name, sorted(records), [r["sts"] for r in records.values()], suites_record,
                              seconds))
        if key == "clsr" and "base_sts" in records[min(records)]:
            base = [r["base_sts"] for r in records.values()]
            rows.append(table_row("base model alone (CLSR runs' base_sts)", sorted(records), base, {}, []))
        card_folders.append(first)

    return rows, card_folders


def report(rows: list, args, argv) -> str:
    """The Comparison section: command, what the rows are, the table."""
    header = ("| method | " + " | ".join(label for _, label in STS_COLUMNS) + " | STS avg | transfer avg | "
              "clustering avg | alignment | uniformity | train s | seeds |")
    table = "\n".join([header, "|---|" + "---:|" * (len(STS_COLUMNS) + 6) + "---|", *rows])
    command = "python benchmarks/compare.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    body = "\n".join([
        SECTION, "",
        f"Command: `{command}`", "",
        "All rows start from the embedded all-MiniLM-L6-v2 (6 layers, 384-d) on this 2-core CPU machine, with the "
        f"shared budget of `{args.config}` for the trained methods (CLSR: a head trained on the frozen base, "
        "settings in its row). These are **not** the papers' bert-base / full-wiki1m numbers (those are in each model "
        "card). STS: "
        "Spearman x 100, SentEval 'all', mean over the listed seeds (avg ± sample std); transfer / clustering "
        "(accuracy x 100) and alignment / uniformity (STS-B train, lower is better) on the first seed's model; "
        "train s: mean wall seconds per seed (training + STS test scoring) under the machine's varying load.", "",
        table, "",
    ])
    return body


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", default=",".join([*METHODS, EXTRACTION]),
                        help=f"Comma-separated: {', '.join(METHODS)}, {EXTRACTION} (default: %(default)s).")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43, 44], help="Training seeds.")
    parser.add_argument("--config", default="recipes/configs/minilm_compare.yaml", help="The shared training budget.")
    parser.add_argument("--output-root", default="outputs/seeds", help="Runs live in OUTPUT_ROOT/<method>/seed<S>.")
    parser.add_argument("--launch", default=DEFAULT_LAUNCH,
                        help="accelerate launch flags for every training run (default: %(default)s; e.g. "
                        "\"--num_processes 1 --mixed_precision bf16\" on a GPU).")
    parser.add_argument("--no-train", action="store_true", help="Only collect existing runs; train nothing.")
    parser.add_argument("--suites", default="transfer,clustering,geometry",
                        help="Extra suites scored on each method's first seed ('' for none).")
    parser.add_argument("--transfer-max-train", type=int, default=None, help="Cap transfer training examples per task.")
    parser.add_argument("--clustering-max-examples", type=int, default=None, help="Cap texts per clustering dataset.")
    parser.add_argument("--extraction", default="--models all-MiniLM-L6-v2 --layers last --aggregations avg "
                        "--postprocessing none", help="`csekit extract` flags naming ONE training-free setting.")
    parser.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    parser.add_argument("--results", default="benchmarks/RESULTS.md",
                        help="Markdown file whose Comparison section is rewritten.")
    parser.add_argument("--cards", action="store_true",
                        help="Also write comparison.md and regenerate README.md in each method's first-seed folder.")
    parser.add_argument("--card-figure", default="never", choices=("missing", "always", "never"),
                        help="With --cards: draw the alignment/uniformity figure when missing / always / never.")
    args = parser.parse_args(argv)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS and m != EXTRACTION]
    if unknown:
        parser.error(f"unknown method(s) {', '.join(unknown)}")
    args.methods = methods
    args.suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    return args


def main(argv=None):
    args = parse_args(argv)
    rows, card_folders = method_rows(args.methods, args)
    body = report(rows, args, argv)
    print(body)
    replace_section(Path(args.results), body)
    if args.cards:
        from csekit.publishing.model_card import COMPARISON_FILE, write_model_card

        for folder in card_folders:
            (folder / COMPARISON_FILE).write_text(body.replace(SECTION + "\n", "", 1).strip() + "\n")
            print("wrote", write_model_card(folder, figure=args.card_figure))


if __name__ == "__main__":
    main()
