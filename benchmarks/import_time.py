"""Import cost of csekit's entry points: wall time in fresh interpreters and which heavy libraries each one pulls in.

    python benchmarks/import_time.py [--modules csekit csekit.trainers csekit.cli] [--rounds 7]
        [--before OLD_CHECKOUT --before-modules modeling trainers trainers.cli]
    python benchmarks/import_time.py --commands [--rounds 7]     # the CPU cost of `csekit ... --help`, `csekit card`

Every round starts one fresh ``python -c "import X"`` per module, modules alternating within the round, so a busy
machine slows all of them alike. Reported: median and min-max seconds over the rounds, the heavy libraries found in
``sys.modules`` afterwards, and whether matplotlib's backend was switched (a global side effect). The baseline
``import transformers; from transformers import PreTrainedModel`` is what any Hugging Face model class costs.
``--commands`` instead measures the command line: the CPU seconds (user + system, of the child process) of
``python -m csekit --help``, of each sub-command's ``--help`` and each method's ``csekit train METHOD --help``, and of
``csekit card`` on a small model (a 2-layer, hidden-32 SimCSE folder with MiniLM's tokenizer; its recorded STS scores
are placeholders, only the time is measured) with its figure present and with the figure drawn (``--figure always``,
STS-B train from ``CSEKIT_DATA_DIR``), against ``python -c pass`` run in the same rounds, ``import torch,
transformers`` for scale, and ``from transformers import PreTrainedModel`` (transformers' model code, which loading
any model imports: the floor of drawing the figure); the table reports each command's median cost over the bare
start.
``--before`` also times modules of another checkout (e.g. the layout before the ``csekit`` namespace, whose top-level
``modeling`` / ``trainers`` import from the checkout folder), interleaved in the same rounds; installed modules are
imported from a neutral working folder, so a checkout never shadows them.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile

HEAVY = ("sklearn", "matplotlib", "jinja2", "scipy", "datasets", "accelerate", "sentence_transformers", "pandas")
BASELINE = "transformers+PreTrainedModel"
PROBE = """
import json, sys, time
start = time.perf_counter()
{statement}
seconds = time.perf_counter() - start
backend = None
if "matplotlib" in sys.modules:
    backend = sys.modules["matplotlib"].rcParams._get_backend_or_none()
print(json.dumps({{"seconds": seconds, "heavy": [m for m in {heavy!r} if m in sys.modules], "backend": backend}}))
"""


def measure(module: str, folder: str) -> dict:
    """One fresh interpreter importing ``module`` with ``folder`` as its working folder (first on ``sys.path``)."""
    statement = ("import transformers; from transformers import PreTrainedModel" if module == BASELINE
                 else f"import {module}")
    result = subprocess.run([sys.executable, "-c", PROBE.format(statement=statement, heavy=HEAVY)],
                            capture_output=True, text=True, check=True, cwd=folder)
    return json.loads(result.stdout.strip().splitlines()[-1])


BARE = "python -c pass"
TORCH = "import torch, transformers"
MODEL_CODE = "from transformers import PreTrainedModel"
HELP_COMMANDS = ("--help", "evaluate --help", "extract --help", "card --help", "download --help", "train --help")


def cpu_seconds(command: list, folder: str) -> float:
    """User + system CPU seconds of one child process running ``command``."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(command, capture_output=True, check=True, cwd=folder)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def small_model_folder(folder: str) -> str:
    """A csekit SimCSE folder (2 layers, hidden 32, MiniLM's tokenizer) with placeholder STS scores: a card's input."""
    from pathlib import Path

    from transformers import AutoTokenizer, BertConfig

    from csekit.evaluation.sts import STS_TASKS
    from csekit.loading import embedded_minilm_path
    from csekit.modeling import SimCSEConfig, SimCSEModel

    path = Path(folder) / "small-simcse"
    encoder = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
                         vocab_size=30522)
    model = SimCSEModel(SimCSEConfig(encoder_config=encoder.to_dict(), pooler_type="avg"))
    model.tokenizer = AutoTokenizer.from_pretrained(embedded_minilm_path())
    model.save_pretrained(path)
    model.tokenizer.save_pretrained(path)
    (path / "eval_results.json").write_text(json.dumps({"sts": dict.fromkeys((*STS_TASKS, "avg"), 50.0)}))
    return str(path)


def time_commands(rounds: int) -> None:
    from csekit.methods import METHODS

    jobs = {BARE: [sys.executable, "-c", "pass"], TORCH: [sys.executable, "-c", TORCH],
            MODEL_CODE: [sys.executable, "-c", MODEL_CODE]}
    jobs.update({f"csekit {command}": [sys.executable, "-m", "csekit", *command.split()] for command in HELP_COMMANDS})
    jobs.update({f"csekit train {name} --help": [sys.executable, "-m", "csekit", "train", name, "--help"]
                 for name in METHODS})
    models = tempfile.TemporaryDirectory()
    folder = small_model_folder(models.name)
    card = [sys.executable, "-m", "csekit", "card", folder]
    jobs["csekit card (figure drawn)"] = [*card, "--figure", "always"]
    jobs["csekit card (figure present)"] = card
    runs = {label: [] for label in jobs}
    with tempfile.TemporaryDirectory() as neutral:
        for _ in range(rounds):
            for label, command in jobs.items():
                runs[label].append(cpu_seconds(command, neutral))
    models.cleanup()
    bare = statistics.median(runs[BARE])
    print("| command | median CPU s | min-max CPU s | over the bare start, s |")
    print("|---|---:|---:|---:|")
    for label, samples in runs.items():
        print(f"| `{label}` | {statistics.median(samples):.2f} | {min(samples):.2f}-{max(samples):.2f} | "
              f"{statistics.median(samples) - bare:.2f} |")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modules", nargs="+", default=["csekit", "csekit.trainers", "csekit.cli"])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--before", default=None, help="Another checkout whose --before-modules are timed too.")
    parser.add_argument("--before-modules", nargs="+", default=["modeling", "trainers", "trainers.cli"])
    parser.add_argument("--commands", action="store_true", help="Time the command line's --help instead.")
    args = parser.parse_args(argv)
    if args.commands:
        return time_commands(args.rounds)
    with tempfile.TemporaryDirectory() as neutral:
        jobs = [(BASELINE, BASELINE, neutral)] + [(module, module, neutral) for module in args.modules]
        if args.before:
            jobs += [(f"{module} (before)", module, args.before) for module in args.before_modules]
        runs = {label: [] for label, _, _ in jobs}
        for _ in range(args.rounds):
            for label, module, folder in jobs:
                runs[label].append(measure(module, folder))
    print("| import | median s | min-max s | heavy libraries loaded | matplotlib backend set |")
    print("|---|---:|---:|---|---|")
    for label, samples in runs.items():
        seconds = [sample["seconds"] for sample in samples]
        last = samples[-1]
        print(f"| `{label}` | {statistics.median(seconds):.2f} | {min(seconds):.2f}-{max(seconds):.2f} | "
              f"{', '.join(last['heavy']) or '-'} | {last['backend'] or '-'} |")


if __name__ == "__main__":
    main()
