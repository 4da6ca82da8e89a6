"""Re-run notebooks in place so their stored outputs come from the current code.

Usage: python scripts/execute_notebooks.py [NOTEBOOK ...]   (default: every notebook under book/)

Each notebook runs top to bottom in a fresh python3 kernel with its own folder as the working
directory; widget state is stored so static HTML shows the widgets' saved state. A notebook
that raises, or writes anything to stderr (warnings, progress bars), fails the run: strict
nbval would reject such outputs anyway. Per-cell execution metadata (timings) is dropped so that
the cells of a stored notebook only change when their outputs do.

One record of each successful run is kept, in the notebook's metadata under
``metadata["replearn"]["execution"]`` (``book/_ext/execution_status.py``): the notebook's wall time
(seconds, kernel start-up included), the profile (``REPLEARN_PROFILE``), the data it ran on
(``none``, ``offline subsets`` or ``full datasets``), the UTC date, the CPU model, torch's thread count
and the status ``ok``. The book's "Execution status" page and the run times its introduction quotes
are generated from these records. The record changes at every execution; nothing compares it
(strict nbval compares cell outputs only). A notebook whose run fails is left as it was, record
included.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import execution_status  # noqa: E402  (book/_ext: the records' format, shared with the book's status page)


def notebooks(args: list[str]) -> list[Path]:
    if args:
        return [Path(a).resolve() for a in args]
    return sorted(p for p in (ROOT / "book").rglob("*.ipynb")
                  if ".ipynb_checkpoints" not in p.parts and "_build" not in p.parts)


def merge_streams(outputs: list) -> list:
    """``outputs`` with each run of consecutive stream outputs of the same name (stdout, stderr)
    merged into one: how the kernel's prints were cut into messages depends on timing (a loaded
    machine sends one print per message), not on what they printed."""
    merged: list = []
    for out in outputs:
        last = merged[-1] if merged else None
        if (last is not None and out.get("output_type") == "stream" == last.get("output_type")
                and out.get("name") == last.get("name")):
            text = _text(last.get("text")) + _text(out.get("text"))
            merged[-1] = nbformat.NotebookNode({**last, "text": text})
        else:
            merged.append(out)
    return merged


def _text(text) -> str:
    return "".join(text) if isinstance(text, list) else (text or "")


def normalise(nb: nbformat.NotebookNode) -> None:
    """Drop run-specific metadata; merge consecutive prints (:func:`merge_streams`); number executed
    cells 1, 2, ..."""
    nb.metadata.pop("papermill", None)
    count = 0
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs = merge_streams(cell.get("outputs", []))
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


def run_environment() -> dict:
    """The profile and torch's thread count the kernels run with (they inherit this environment)."""
    import torch

    from replearn.settings import profile_name

    return {"profile": profile_name(), "threads": torch.get_num_threads()}


def execute(path: Path, environment: dict | None = None) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, kernel_name="python3", timeout=1200, store_widget_state=True,
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    problems = check(nb, path)
    if not problems:
        normalise(nb)
        execution_status.record_execution(nb, seconds, **(environment or run_environment()))
        nbformat.write(nb, path)
    return problems


def main(args: list[str]) -> int:
    # A non-inline backend in the environment (MPLBACKEND=Agg, as the unit tests use) would reach the
    # kernels: plt.show() then stores no figure, and strict nbval, which runs with the inline backend,
    # rejects every plot cell. The kernels always get Jupyter's inline backend.
    os.environ.pop("MPLBACKEND", None)
    failed = False
    environment = run_environment()
    for path in notebooks(args):
        start = time.perf_counter()
        try:
            problems = execute(path, environment)
        except Exception as exc:  # noqa: BLE001 - report which notebook broke, then go on
            problems = [f"{path.name}: {type(exc).__name__}: {str(exc)[-2000:]}"]
        rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        took = execution_status.format_duration(time.perf_counter() - start)
        print(f"{rel}: {'OK' if not problems else 'FAILED'} ({took})")
        for p in problems:
            print("   ", p)
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
