"""Tests of scripts/add_setup_cell.py: the Colab setup cell is inserted once, kept up to date,
prints nothing where replearn and myst-nb import, and installs exactly what is missing."""

import importlib.util
import io
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import add_setup_cell as setup  # noqa: E402


def _notebook(path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# 9.9 A section"),
                nbformat.v4.new_code_cell("x = 1\nprint(x)", outputs=[
                    nbformat.v4.new_output("stream", name="stdout", text="1\n")], execution_count=1),
                nbformat.v4.new_markdown_cell("text"), nbformat.v4.new_code_cell("y = 2")]
    nbformat.write(nb, path)
    return nb


def test_inserted_once_before_the_first_code_cell_and_idempotent(tmp_path):
    path = tmp_path / "nb.ipynb"
    before = _notebook(path)
    assert setup.main([str(path)]) == 0
    nb = nbformat.read(path, as_version=4)
    assert [c.cell_type for c in nb.cells] == ["markdown", "code", "code", "markdown", "code"]
    cell = nb.cells[1]
    assert cell.source == setup.setup_source() and cell.outputs == [] and cell.execution_count is None
    assert cell.metadata["tags"] == ["remove-cell", "replearn-setup"]
    assert [c.source for c in nb.cells[2:]] == [c.source for c in before.cells[1:]]
    assert nb.cells[2].outputs == before.cells[1].outputs  # stored outputs kept
    nbformat.validate(nb)
    text = path.read_text()
    assert setup.main([str(path)]) == 0 and path.read_text() == text  # second run: no change
    assert setup.main(["--check", str(path)]) == 0


def test_outdated_or_misplaced_cell_is_replaced_not_duplicated(tmp_path, capsys):
    path = tmp_path / "nb.ipynb"
    _notebook(path)
    setup.main(["--source", "replearn @ file:///old", str(path)])
    assert setup.main(["--check", str(path)]) == 1
    assert "lack the current setup cell" in capsys.readouterr().out
    setup.main([str(path)])
    nb = nbformat.read(path, as_version=4)
    ours = [c for c in nb.cells if "replearn-setup" in c.metadata.get("tags", [])]
    assert len(ours) == 1 and ours[0].source == setup.setup_source() and nb.cells[1] is not None
    nb.cells.append(nb.cells.pop(1))  # moved to the end by hand: put back in front
    nbformat.write(nb, path)
    setup.main([str(path)])
    nb = nbformat.read(path, as_version=4)
    assert "replearn-setup" in nb.cells[1].metadata["tags"] and len(nb.cells) == 5


def test_requirements_come_from_the_config_and_constraints():
    source = setup.setup_source()
    repo = "https://github.com/adaptivity-book/adaptivity-shared-representations"
    assert f"replearn @ git+{repo}.git@main" in source
    assert "myst-nb==1.4.0" in source
    with pytest.raises(SystemExit, match="not pinned"):
        setup.pinned("no-such-package")


def _run(source):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        exec(compile(source, "<setup cell>", "exec"), {})
    return out.getvalue(), err.getvalue()


def _unset_download(monkeypatch):
    """Unset REPLEARN_DOWNLOAD such that the variable the cell sets is removed after the test."""
    monkeypatch.setenv("REPLEARN_DOWNLOAD", "0")
    monkeypatch.delenv("REPLEARN_DOWNLOAD")


def test_cell_does_nothing_where_everything_imports(monkeypatch):
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: calls.append(a))
    _unset_download(monkeypatch)
    assert _run(setup.setup_source()) == ("", "")
    assert calls == [] and "REPLEARN_DOWNLOAD" not in __import__("os").environ
    # on Colab (google.colab imported by its kernel) downloads are switched on all the same
    monkeypatch.setitem(sys.modules, "google.colab", type(sys)("google.colab"))
    assert _run(setup.setup_source()) == ("", "")
    assert calls == [] and __import__("os").environ["REPLEARN_DOWNLOAD"] == "1"


def test_cell_installs_what_is_missing_and_switches_downloads_on(monkeypatch):
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, **k: calls.append((cmd, k)))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "replearn" else real(name, *a))
    _unset_download(monkeypatch)
    _run(setup.setup_source("replearn @ file:///checkout"))
    pip = [sys.executable, "-m", "pip", "install", "-q", "replearn @ file:///checkout"]
    assert calls == [(pip, {"check": True})]
    assert __import__("os").environ["REPLEARN_DOWNLOAD"] == "1"
