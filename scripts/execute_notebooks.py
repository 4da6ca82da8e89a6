"""Re-run notebooks in place so their stored outputs come from the current code.

Usage: python scripts/execute_notebooks.py [NOTEBOOK ...]   (default: every notebook under book/)

Each notebook runs top to bottom in a fresh python3 kernel with its own folder as the working
directory; widget state is stored so static HTML shows the widgets' saved state. A notebook
that raises, or writes anything to stderr (warnings, progress bars), fails the run: strict
nbval would reject such outputs anyway. Execution metadata (timings) is dropped so stored
notebooks only change when their outputs do.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent


def notebooks(args: list[str]) -> list[Path]:
    if args:
        return [Path(a).resolve() for a in args]
    return sorted(p for p in (ROOT / "book").rglob("*.ipynb")
                  if ".ipynb_checkpoints" not in p.parts and "_build" not in p.parts)


def normalise(nb: nbformat.NotebookNode) -> None:
    """Drop run-specific metadata; number executed cells 1, 2, ..."""
    nb.metadata.pop("papermill", None)
    count = 0
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            count += 1 if cell.source.strip() else 0
            cell.execution_count = count if cell.source.strip() else None
            for out in cell.get("outputs", []):
                if "execution_count" in out:
                    out["execution_count"] = cell.execution_count


def check(nb: nbformat.NotebookNode, path: Path) -> list[str]:
    problems = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                problems.append(f"{path.name} cell {i}: wrote to stderr: {out.get('text', '')[:200]!r}")
            if "image/svg+xml" in out.get("data", {}):
                problems.append(f"{path.name} cell {i}: SVG output (use PNG figures)")
    return problems


def execute(path: Path) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, kernel_name="python3", timeout=1200, store_widget_state=True,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    problems = check(nb, path)
    if not problems:
        normalise(nb)
        nbformat.write(nb, path)
    return problems


def main(args: list[str]) -> int:
    # A non-inline backend in the environment (MPLBACKEND=Agg, as the unit tests use) would reach the
    # kernels: plt.show() then stores no figure, and strict nbval, which runs with the inline backend,
    # rejects every plot cell. The kernels always get Jupyter's inline backend.
    os.environ.pop("MPLBACKEND", None)
    failed = False
    for path in notebooks(args):
        try:
            problems = execute(path)
        except Exception as exc:  # noqa: BLE001 - report which notebook broke, then go on
            problems = [f"{path.name}: {type(exc).__name__}: {str(exc)[-2000:]}"]
        rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        print(f"{rel}: {'OK' if not problems else 'FAILED'}")
        for p in problems:
            print("   ", p)
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
