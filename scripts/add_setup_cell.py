"""Insert or update the standard setup cell that makes a notebook run on Colab.

Usage: python scripts/add_setup_cell.py [--check] [--source REQUIREMENT] [NOTEBOOK ...]
       (default: every notebook under book/)

A notebook opened from the book's Colab button runs on a machine without the book's library. The
setup cell, placed before a notebook's first code cell, installs ``replearn`` from the book's
repository (``repository.url`` / ``branch`` in ``_config.yml``) and ``myst-nb`` (the notebooks pass
numbers to the text with ``myst_nb.glue``; version from constraints.txt) -- only those of the two
that cannot be imported -- and, when it installed something or runs on Colab (where a restarted
runtime keeps the packages but not the environment), lets the CIFAR sections download their data
(``REPLEARN_DOWNLOAD=1``). Where both import, as in the book's own environment and on Binder, it
does nothing and prints nothing, so the stored outputs and nbval are unaffected. The cell is tagged
``remove-cell`` (the HTML book does not show it) and ``replearn-setup`` (how this script finds it
again): running the script twice changes nothing, and a changed template replaces the old cell
instead of adding a second one. ``--check`` changes nothing and exits 1 when a notebook lacks the
current cell. ``--source`` replaces the pip requirement for replearn (tests install from a local
checkout).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
TAG = "replearn-setup"
CELL_ID = "replearn-setup"

TEMPLATE = '''\
# Setup for Colab (or any Jupyter without the book's environment): installs the book's library
# replearn and myst-nb only if they are missing, and lets the CIFAR sections download their data
# there and on Colab. Where both are installed it does nothing and prints nothing.
import importlib.util as _util
import os as _os
import sys as _sys
_needed = {{"replearn": {replearn!r},
           "myst_nb": {myst_nb!r}}}
_missing = [req for mod, req in _needed.items() if _util.find_spec(mod) is None]
if _missing:
    import importlib, subprocess
    subprocess.run([_sys.executable, "-m", "pip", "install", "-q", *_missing], check=True)
    importlib.invalidate_caches()
if _missing or "google.colab" in _sys.modules:
    _os.environ.setdefault("REPLEARN_DOWNLOAD", "1")
del _util, _os, _sys, _needed, _missing'''


def pinned(name: str) -> str:
    """``name==version`` as pinned in constraints.txt."""
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if re.fullmatch(rf"{re.escape(name)}==\S+", line.strip(), flags=re.IGNORECASE):
            return line.strip()
    raise SystemExit(f"{name} is not pinned in constraints.txt")


def replearn_requirement() -> str:
    """``replearn @ git+<repository url>@<branch>`` from _config.yml."""
    repo = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    return f"replearn @ git+{repo['url'].rstrip('/')}.git@{repo.get('branch', 'main')}"


def setup_source(replearn: str | None = None) -> str:
    return TEMPLATE.format(replearn=replearn or replearn_requirement(), myst_nb=pinned("myst-nb"))


def setup_cell(source: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source, metadata={"tags": ["remove-cell", TAG]})
    cell.id = CELL_ID
    return cell


def update(nb: nbformat.NotebookNode, source: str) -> bool:
    """Put the setup cell with ``source`` before the first other code cell; True if ``nb`` changed."""
    ours = [i for i, c in enumerate(nb.cells) if TAG in c.get("metadata", {}).get("tags", [])]
    others = [c for c in nb.cells if TAG not in c.get("metadata", {}).get("tags", [])]
    first_code = next((i for i, c in enumerate(others) if c.cell_type == "code"), len(others))
    wanted = others[:first_code] + [setup_cell(source)] + others[first_code:]
    if len(ours) == 1:
        old = nb.cells[ours[0]]
        position_ok = [c is old for c in nb.cells].index(True) == first_code
        if position_ok and old.source == source and not old.get("outputs"):
            return False
    nb.cells = wanted
    return True


def notebooks(args: list[str]) -> list[Path]:
    if args:
        return [Path(a) for a in args]
    return sorted(p for p in (ROOT / "book").rglob("*.ipynb")
                  if ".ipynb_checkpoints" not in p.parts and "_build" not in p.parts)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a cell is missing")
    parser.add_argument("--source", help="pip requirement for replearn (default: the book's repository)")
    args = parser.parse_args(argv)
    source = setup_source(args.source)
    stale = []
    for path in notebooks(args.notebooks):
        nb = nbformat.read(path, as_version=4)
        if update(nb, source):
            stale.append(path)
            if not args.check:
                nbformat.write(nb, path)
    verb = "lack the current setup cell" if args.check else "updated"
    print(f"{len(stale)} notebook(s) {verb}" + "".join(f"\n  {p}" for p in stale))
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
