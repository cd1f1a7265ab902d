"""Import cost of csekit's entry points: wall time in fresh interpreters and which heavy libraries each one pulls in.

    python benchmarks/import_time.py [--modules csekit csekit.trainers csekit.cli] [--rounds 7]

Every round starts one fresh ``python -c "import X"`` per module, modules alternating within the round, so a busy
machine slows all of them alike. Reported: median and min-max seconds over the rounds, the heavy libraries found in
``sys.modules`` afterwards, and whether matplotlib's backend was switched (a global side effect). The baseline
``import transformers; from transformers import PreTrainedModel`` is what any Hugging Face model class costs.
"""

import argparse
import json
import statistics
import subprocess
import sys

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


def measure(module: str) -> dict:
    statement = ("import transformers; from transformers import PreTrainedModel" if module == BASELINE
                 else f"import {module}")
    result = subprocess.run([sys.executable, "-c", PROBE.format(statement=statement, heavy=HEAVY)],
                            capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--modules", nargs="+", default=["csekit", "csekit.trainers", "csekit.cli"])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    modules = [BASELINE] + args.modules
    runs = {module: [] for module in modules}
    for _ in range(args.rounds):
        for module in modules:
            runs[module].append(measure(module))
    print(f"| import | median s | min-max s | heavy libraries loaded | matplotlib backend set |")
    print("|---|---:|---:|---|---|")
    for module, samples in runs.items():
        seconds = [sample["seconds"] for sample in samples]
        last = samples[-1]
        print(f"| `{module}` | {statistics.median(seconds):.2f} | {min(seconds):.2f}-{max(seconds):.2f} | "
              f"{', '.join(last['heavy']) or '-'} | {last['backend'] or '-'} |")


if __name__ == "__main__":
    main()
