#!/usr/bin/env bash
# The six CIFAR sections' gpu profiles in one go, for a session that is lent a GPU machine
# (issue 28, item 6). Run from the repository root on that machine:
#
#   bash scripts/gpu_run.sh                 # every section; results under $OUT/gpu (or book/results/gpu)
#   bash scripts/gpu_run.sh 4.7 5.8         # chosen sections
#
# It uses the machine's own PyTorch and the library from lib/ (nothing is installed), the offline
# CIFAR subsets from $REPLEARN_DATA (the machine has no internet: the subsets must travel with the
# working tree or sit in a folder named there), and prints each section's launch estimate before
# it starts (scripts/run_results.py). Every finished engine run is stored under
# <out>/gpu/.checkpoints, so a run cut short by the device's time limit resumes when called again.
# Test it on the CPU first: REPLEARN_ALLOW_CPU=1 bash scripts/gpu_run.sh 4.9 (slow, but the same path).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/lib${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONHASHSEED=0
python - <<'PY'
import os, sys, torch
if not torch.cuda.is_available() and not os.environ.get("REPLEARN_ALLOW_CPU"):
    sys.exit("no CUDA device: the gpu profiles are sized for one GPU (set REPLEARN_ALLOW_CPU=1 to test on a CPU)")
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'CPU'}", flush=True)
PY
python scripts/run_results.py --profile gpu --out "${OUT:-book/results}" "$@"
