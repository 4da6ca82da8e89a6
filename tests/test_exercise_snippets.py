"""Every code snippet in the book's exercises and solutions runs.

A reader copies ``s08.run_transfer(...)`` out of an exercise into the notebook; if the settings
have moved on (a field renamed or moved into a nested config), the snippet raises ``TypeError``
and the exercise is broken without any notebook failing. This test collects, for every
notebook, the inline code spans and fenced code blocks of its ``{exercise}`` and ``{solution}``
directives that parse as Python and contain a call, and executes them in order (one namespace
per exercise and its solution), in a namespace holding what the notebook's own code defines
cheaply: its imports and its settings and data objects (``cfg = ...current()``, ``cifar = ...``).

Nothing is trained: the section drivers' functions (``replearn.experiments.*``), the neural
training and transfer modules and ``data.load_cifar`` are replaced by stand-ins that check that
the call's arguments fit the function's signature and return a placeholder. Everything else
runs: settings are built and validated (``current(...)``, ``dataclasses.replace(...)``), linear
helpers are called. A snippet that names something the notebook only computes later (``res``,
``model``) or uses ``...`` as a placeholder is not runnable on its own and is skipped; the test
checks that enough snippets ran, among them the ones that once raised.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import importlib
import inspect
import json
import pkgutil
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted(p for p in (ROOT / "book").rglob("*.ipynb") if "_build" not in p.parts
                   and ".ipynb_checkpoints" not in p.parts)
DIRECTIVE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|:{3,})\{(?:exercise|solution)\}[^\n]*\n(?P<body>.*?)"
                       r"^(?P=indent)(?P=fence)[ \t]*$", re.S | re.M)
ROLE = re.compile(r"\{[\w:.-]+\}`[^`]*`")
CODE_BLOCK = re.compile(r"^[ \t]*(`{3,})(?:python|\{code-cell\}[^\n]*|\{code-block\}\s*python)?[ \t]*\n(.*?)^[ \t]*\1[ \t]*$",
                        re.S | re.M)
INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
SETUP_NAMES = {"cfg", "cifar", "cifar10", "cifar100"}
HEAVY_MODULES = ("replearn.neural", "replearn.experiments.ch04_fedavg.cifar_transfer", "replearn.experiments.ch05_fedrep.cifar_federation")


class Placeholder:
    """What a stubbed (training) call returns: any attribute, item or call gives another one."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Placeholder()

    def __call__(self, *args, **kwargs):
        return Placeholder()

    def __getitem__(self, key):
        return Placeholder()

    def __iter__(self):
        return iter(())


def _stub(func):
    signature = inspect.signature(func)

    def stand_in(*args, **kwargs):
        signature.bind(*args, **kwargs)      # TypeError for arguments the function does not take
        return Placeholder()

    stand_in.__name__ = func.__name__
    return stand_in


def _stub_module(monkeypatch, module) -> None:
    for name, obj in vars(module).items():
        if inspect.isfunction(obj) and obj.__module__ == module.__name__ and not name.startswith("_"):
            monkeypatch.setattr(module, name, _stub(obj))


@pytest.fixture
def no_training(monkeypatch):
    import replearn.neural.data
    import replearn.experiments

    for info in pkgutil.walk_packages(replearn.experiments.__path__, "replearn.experiments."):
        _stub_module(monkeypatch, importlib.import_module(info.name))
    for name in HEAVY_MODULES:
        _stub_module(monkeypatch, importlib.import_module(name))
    monkeypatch.setattr(replearn.neural.data, "load_cifar", _stub(replearn.neural.data.load_cifar))


def snippets(path: Path) -> list[list[str]]:
    """The runnable-looking snippets of each exercise/solution block of a notebook, in order."""
    nb = json.loads(path.read_text())
    md = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    groups = []
    for m in DIRECTIVE.finditer(md):
        body = m["body"]
        found = [b for _, b in CODE_BLOCK.findall(body)]
        body = CODE_BLOCK.sub("", body)
        found += INLINE.findall(ROLE.sub("", body))
        code = []
        for s in found:
            try:
                tree = ast.parse(s)
            except SyntaxError:
                continue
            if any(isinstance(n, ast.Call) for n in ast.walk(tree)):
                code.append(s)
        if code:
            groups.append(code)
    # a solution continues its exercise: run their snippets in one namespace
    return groups


def setup_code(path: Path) -> str:
    """The notebook's imports and its settings/data assignments, as source."""
    nb = json.loads(path.read_text())
    keep = []
    for cell in nb["cells"]:
        if cell["cell_type"] != "code" or "remove-cell" in cell.get("metadata", {}).get("tags", []):
            continue
        src = "".join(cell["source"])
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        for stmt in tree.body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                keep.append(ast.get_source_segment(src, stmt))
            elif isinstance(stmt, ast.Assign) and {n.id for t in stmt.targets for n in ast.walk(t)
                                                   if isinstance(n, ast.Name)} & SETUP_NAMES:
                keep.append(ast.get_source_segment(src, stmt))
    return "\n".join(keep)


def free_names(code: str) -> set[str]:
    tree = ast.parse(code)
    stored = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    stored |= {a.arg for n in ast.walk(tree) if isinstance(n, ast.Lambda) for a in n.args.args}
    loaded = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return loaded - stored - set(dir(builtins))


def has_ellipsis(code: str) -> bool:
    return any(isinstance(n, ast.Constant) and n.value is Ellipsis for n in ast.walk(ast.parse(code)))


def run_notebook_snippets(path: Path) -> tuple[list[str], list[str]]:
    """Run a notebook's snippets; return (ran, skipped). Raises what a snippet raises."""
    base = {"dataclasses": dataclasses, "replace": dataclasses.replace, "__name__": "__exercise__"}
    exec(compile(setup_code(path), f"{path.name}:setup", "exec"), base)
    ran, skipped = [], []
    for group in snippets(path):
        ns = dict(base)
        for code in group:
            if has_ellipsis(code) or free_names(code) - set(ns):
                skipped.append(code)
                continue
            try:
                exec(compile(code, f"{path.name}: {code}", "exec"), ns)
            except Exception as exc:
                where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
                raise AssertionError(f"{where}: the exercise snippet `{code}` raises "
                                     f"{type(exc).__name__}: {exc}") from exc
            ran.append(code)
    return ran, skipped


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[str(p.relative_to(ROOT / "book")) for p in NOTEBOOKS])
def test_exercise_snippets_run(path, no_training):
    run_notebook_snippets(path)


def test_enough_snippets_run(no_training):
    ran, skipped = [], []
    for path in NOTEBOOKS:
        r, s = run_notebook_snippets(path)
        ran += r
        skipped += s
    assert len(ran) >= 20, f"only {len(ran)} snippets ran; skipped: {skipped}"
    # the two that once raised TypeError (settings fields moved into TrainConfig) are among them
    assert any("s08.run_transfer" in c for c in ran) and any("rounds=40" in c for c in ran), ran


def test_a_broken_snippet_fails(tmp_path, no_training):
    import nbformat
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("from replearn.experiments.ch04_fedavg import s08_transfer as s08\n"
                                          "cfg = s08.TransferSettings.current()"),
                nbformat.v4.new_markdown_cell("```{exercise} x\n:label: x\n\nRun "
                                              "`s08.run_transfer(s08.TransferSettings.current(lr=0.05))`.\n```")]
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    with pytest.raises(AssertionError, match="raises TypeError"):
        run_notebook_snippets(path)
