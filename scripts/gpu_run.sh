#!/usr/bin/env bash
# The six CIFAR sections' gpu profiles in one go, for a session that is lent a GPU machine
# (issue 28, item 6). Run from the repository root on that machine:
#
#   bash scripts/gpu_run.sh                 # every section; results under book/results/gpu (copied to $OUT)
#   bash scripts/gpu_run.sh 4.7 5.8         # chosen sections
#
# It uses the machine's own PyTorch (python3, or $PYTHON) and the library from lib/ (nothing is
# installed), and the offline CIFAR subsets from $REPLEARN_DATA. The machine has no internet and a
# call carries at most 64 MiB, so the subsets travel in parts (scripts/gpu_data.py): pack them here
# (`python scripts/gpu_data.py pack`), carry .gpudata/1, .gpudata/2, ... in consecutive calls while
# the machine is warm, and run this script in the call that carries the last part: with
# REPLEARN_DATA unset and .gpudata/ present, it unpacks the parts first (checked by sha256).
# It prints each section's launch estimate before it starts (scripts/run_results.py). Every
# finished engine run is stored under book/results/gpu/.checkpoints (ignored by git, so a warm
# machine keeps it between calls): a run cut short by the call's time limit resumes when called
# again. The finished results files are copied to $OUT (at most 8 files come back; these are 6).
# Test it on the CPU first: REPLEARN_ALLOW_CPU=1 bash scripts/gpu_run.sh 4.9 (slow, but the same path).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
export PYTHONPATH="$PWD/lib${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONHASHSEED=0 PYTHONUNBUFFERED=1
if [ -z "${REPLEARN_DATA:-}" ] && [ -d .gpudata ]; then
    "$PYTHON" scripts/gpu_data.py unpack
    export REPLEARN_DATA="$PWD/.gpudata/data"
fi
"$PYTHON" - <<'PY'
import os, sys, torch
if not torch.cuda.is_available() and not os.environ.get("REPLEARN_ALLOW_CPU"):
    sys.exit("no CUDA device: the gpu profiles are sized for one GPU (set REPLEARN_ALLOW_CPU=1 to test on a CPU)")
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'CPU'}", flush=True)
PY
status=0
"$PYTHON" scripts/run_results.py --profile gpu --out book/results "$@" || status=$?
if [ -n "${OUT:-}" ] && compgen -G "book/results/gpu/*.json" > /dev/null; then
    cp book/results/gpu/*.json "$OUT"/
fi
exit "$status"
