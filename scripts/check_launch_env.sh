#!/usr/bin/env bash
# Build the environments behind the book's launch buttons in a fresh venv, offline, and check them.
#
# Usage: scripts/check_launch_env.sh [VENV_DIR]     (make launch-check; default: a temporary folder)
#
# Binder: like repo2docker, `pip install -r binder/requirements.txt` in the repository root, then
# binder/postBuild, then every command through binder/start. The one difference: the PyTorch CPU
# index that binder/requirements.txt adds is not reachable here, so that line is dropped and
# pip's configured indexes (which hold the same CPU build of torch) serve torch instead.
# Colab: the setup cell of scripts/add_setup_cell.py, run where replearn is missing, must install
# it (here from a copy of this checkout's package files instead of the repository URL, and not in
# editable mode, as on Colab), and print nothing once it is there.
# Then one notebook runs in the Binder environment, and `pip check` must find no conflict.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PYTHON=${PYTHON:-python3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
VENV=${1:-$WORK/venv}
step() { echo "== $*"; }

step "fresh venv in $VENV"
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"
export PIP_DISABLE_PIP_VERSION_CHECK=1

step "binder/requirements.txt (without the PyTorch CPU index line)"
grep -v 'download.pytorch.org' binder/requirements.txt | sed "s#^-r \.\./#-r $ROOT/#" > "$WORK/requirements.txt"
"$PY" -m pip install -q -r "$WORK/requirements.txt"

step "Colab setup cell where replearn is missing: installs it"
# from a copy of what the package build reads (a non-editable build writes build/ into its source)
mkdir "$WORK/src"
cp -r pyproject.toml README.md lib "$WORK/src/"
find "$WORK/src" \( -name '*.egg-info' -o -name __pycache__ \) -prune -exec rm -rf {} +
"$PY" - "$ROOT" "$WORK/src" <<'PY'
import subprocess, sys
sys.path.insert(0, sys.argv[1] + "/scripts")
import add_setup_cell
source = add_setup_cell.setup_source(f"replearn @ file://{sys.argv[2]}")
run = lambda: subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, check=True)
first = run()
check = subprocess.run([sys.executable, "-c", "import replearn, replearn.experiments, replearn.data; "
                        "print(replearn.__file__)"], capture_output=True, text=True, check=True)
assert "site-packages" in check.stdout, check.stdout  # a real (non-editable) install, as on Colab
again = run()
assert again.stdout == again.stderr == "", (again.stdout, again.stderr)
print("installed", check.stdout.strip(), "; second run printed nothing")
PY
"$PY" -m pip uninstall -q -y replearn

step "binder/postBuild"
PATH="$VENV/bin:$PATH" bash binder/postBuild
PATH="$VENV/bin:$PATH" binder/start "$PY" -c "
from replearn import data
assert data.download_enabled(), 'binder/start should switch CIFAR downloading on'
import replearn, myst_nb, ipywidgets, torch
print('replearn', replearn.__version__, 'from', replearn.__file__, '| torch', torch.__version__)"

step "one notebook runs in the Binder environment"
"$PY" - "$ROOT/book/01_arm/01_model.ipynb" <<'PY'
import sys, nbformat
from nbclient import NotebookClient
nb = nbformat.read(sys.argv[1], as_version=4)
NotebookClient(nb, kernel_name="python3", timeout=600).execute()
errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
assert not errors, errors
print(f"{sys.argv[1]}: {sum(c.cell_type == 'code' for c in nb.cells)} code cells ran")
PY

step "pip check"
"$PY" -m pip check
echo "launch environments OK"
