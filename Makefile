# Two commands do all set-up on a fresh machine:
#   make book   create .venv if missing, install, build the HTML book from the stored outputs
#   make test   create .venv if missing, install, run the unit tests and strict nbval on every notebook
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
FLOWER_STAMP := $(VENV)/.installed-flower
NOTEBOOKS := $(shell find book -name '*.ipynb' -not -path '*/.ipynb_checkpoints/*' -not -path '*/_build/*' | sort)

export PYTHONHASHSEED := 0
export PYDEVD_DISABLE_FILE_VALIDATION := 1
export REPLEARN_PROFILE ?= default
# The CIFAR sections read the data directory from REPLEARN_DATA (see README, "Data"). When it is
# unset and the offline CIFAR subsets sit in ../shared/data (our machines and CI), use them.
SHARED_DATA := $(abspath $(CURDIR)/../shared/data)
ifeq ($(origin REPLEARN_DATA), undefined)
ifneq ($(wildcard $(SHARED_DATA)/cifar10_subset.npz),)
export REPLEARN_DATA := $(SHARED_DATA)
endif
endif

.PHONY: flower-simulation book test data data-preflight unit nbval nbval-portable execute results bench lab launch-check constraints clean

# Every notebook runs once under strict nbval, two at a time (pytest-xdist, one notebook per worker,
# one thread each). The notebooks that train CNNs on CIFAR (float64, a minute or two each) run on
# the default kernel path (`nbval`); all others on a second kernel path (`nbval-portable`), so their
# stored outputs, made on the default path, are checked against another one (README, "Portable
# outputs"; the CIFAR notebooks' portability was checked by hand: README, "Results files").
NEURAL_NOTEBOOKS := $(filter %/07_feature_similarity.ipynb %/08_transfer.ipynb %/09_cka.ipynb \
	%/07_cifar_personalisation.ipynb %/08_local_epochs.ipynb %/09_new_clients_cifar.ipynb,$(NOTEBOOKS))
PORTABLE_NOTEBOOKS := $(filter-out $(NEURAL_NOTEBOOKS),$(NOTEBOOKS))
# A second BLAS/LAPACK and kernel path on this same machine: MKL's reproducibility mode
# COMPATIBLE (torch's CPU wheels link MKL), torch's AVX2 kernels instead of AVX-512 where the CPU
# has them, and one thread. An output that depends on the kernel path or the thread count
# differs here, so it fails on every machine instead of only on CI's (README, "Portable outputs").
PORTABLE_ENV := MKL_CBWR=COMPATIBLE ATEN_CPU_CAPABILITY=avx2 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
# two notebooks at a time, each whole notebook in one worker (its cells depend on each other)
XDIST := -n 2 --dist loadfile

$(STAMP): requirements.txt constraints.txt pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check -q -r requirements.txt
	$(BIN)/python -m pip install --disable-pip-version-check -q --no-deps --no-build-isolation -e .
	@touch $(STAMP)

# Optional extra for replearn.neural.flower (Flower + its Ray simulation engine); the unit tests use it.
$(FLOWER_STAMP): $(STAMP) requirements-flower.txt
	$(BIN)/python -m pip install --disable-pip-version-check -q -r requirements-flower.txt
	@touch $(FLOWER_STAMP)

book: $(STAMP)
	$(BIN)/jupyter-book build . --all -W -n --keep-going
	$(BIN)/python scripts/check_rendered.py _build/html
	@echo "Book built: file://$(CURDIR)/_build/html/index.html"

# `make data` first: the CIFAR notebooks need the offline subsets in the data directory
# ($REPLEARN_DATA, else ~/.cache/replearn). scripts/prepare_data.py verifies them against their
# recorded SHA-256, or downloads the official archives and rebuilds them; without them and without
# a network it stops at once (its preflight runs before the environment is set up) and says how to
# get them (README, "Data").
test: data unit nbval nbval-portable

data-preflight:
	@$(PYTHON) scripts/prepare_data.py --preflight

data: data-preflight $(STAMP)
	$(BIN)/python scripts/prepare_data.py

unit: $(FLOWER_STAMP)
	MPLBACKEND=Agg $(BIN)/python -m pytest tests -q -n 2

nbval: data $(STAMP)
	OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest -q -p no:cacheprovider $(XDIST) --nbval \
		--nbval-current-env --nbval-sanitize-with nbval_sanitize.cfg $(NEURAL_NOTEBOOKS)

nbval-portable: data $(STAMP)
	$(PORTABLE_ENV) $(BIN)/python -m pytest -q -p no:cacheprovider $(XDIST) --nbval --nbval-current-env \
		--nbval-sanitize-with nbval_sanitize.cfg $(PORTABLE_NOTEBOOKS)

execute: $(STAMP)
	$(BIN)/python scripts/execute_notebooks.py $(NOTEBOOKS)

# Results files of the neural sections at a larger profile (see README, "Results files"):
#   make results PROFILE=long  (CPU, 20-90 min per section)   make results PROFILE=paper  (GPU)
# Resumes from per-seed checkpoints; SECTIONS="4.7 5.7" runs only those.
results: PROFILE ?= long
results: $(STAMP)
	REPLEARN_PROFILE=$(PROFILE) $(BIN)/python scripts/run_results.py --profile $(PROFILE) $(SECTIONS)

# Every registered method on Flower's simulation engine (Ray), each equal to its in-process run;
# `make test` runs three there and every method on the in-process grid (about 3 minutes here).
flower-simulation: $(FLOWER_STAMP)
	REPLEARN_FLOWER_SIMULATION=all $(BIN)/python -m pytest tests/test_flower.py -k simulation_engine -q

bench: $(STAMP)
	@for f in bench/*.py; do echo "== $$f"; MPLBACKEND=Agg $(BIN)/python $$f || exit 1; done

# JupyterLab, pinned by constraints-lab.txt on top of constraints.txt. Jupyter refuses to run as
# root without --allow-root: pass it (or any other option of `jupyter lab`) in LAB_ARGS, e.g.
#   make lab LAB_ARGS="--allow-root --no-browser --ip=127.0.0.1 --port=8888"
LAB_STAMP := $(VENV)/.installed-lab
LAB_ARGS ?=
$(LAB_STAMP): $(STAMP) constraints-lab.txt
	$(BIN)/python -m pip install --disable-pip-version-check -q -c constraints.txt -c constraints-lab.txt jupyterlab
	@touch $(LAB_STAMP)

lab: $(LAB_STAMP)
	@if [ "$$(id -u)" = 0 ] && [[ " $(LAB_ARGS) " != *" --allow-root "* ]]; then \
		echo "make lab: running as root, which Jupyter refuses; run: make lab LAB_ARGS=--allow-root" >&2; exit 2; fi
	$(BIN)/jupyter lab $(LAB_ARGS) book

# The environments behind the book's Binder and Colab buttons, built offline in a fresh venv
# from binder/ and the Colab setup cell, then checked (README, "Launching"; takes a few minutes).
launch-check:
	PYTHON=$(PYTHON) bash scripts/check_launch_env.sh

# The built book in a real browser (README, "Checking the book in a browser"): every page of
# _build/html (built first if missing) in headless Chromium at 1400 and 400 px wide; fails on a page
# that scrolls sideways, content out of its column or cut off, a widget that does not render, a
# console error or an image that does not load. Installs Debian's chromium if it is missing;
# options of scripts/browser_check.py go in BROWSER_CHECK_ARGS, e.g. BROWSER_CHECK_ARGS="--widths 400".
# The six CIFAR sections (4.7-4.9, 5.7-5.9) are lectures: each fails above 12 screens at 1400 px
# (their audit material lives on the reproduction pages of Appendix B).
SECTION_LENGTH_ARGS := --max-screens 12 --screens-page '*04_fedavg/0[789]_*' --screens-page '*05_fedrep/0[789]_*'
.PHONY: browser-check
browser-check: $(STAMP)
	@test -x "$${CHROMIUM:-/usr/bin/chromium}" || { echo "browser-check: installing Debian's chromium"; \
		SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
		$$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
	@test -f _build/html/index.html || $(MAKE) book
	$(BIN)/python scripts/browser_check.py _build/html $(SECTION_LENGTH_ARGS) $(BROWSER_CHECK_ARGS)

constraints:
	rm -rf /tmp/replearn-constraints && $(PYTHON) -m venv /tmp/replearn-constraints
	/tmp/replearn-constraints/bin/pip install -q $$(grep -v '^-c' requirements.txt | grep -v '^#')
	{ head -2 constraints.txt; /tmp/replearn-constraints/bin/pip freeze | sed 's/+cpu$$//'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

clean:
	rm -rf _build
