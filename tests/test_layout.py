"""The layout rule (README, "Layout"): one driver per section at a path that mirrors its notebook,
one test file per driver, notebooks import exactly their own driver, no private imports across
modules, the inventories generated from the docstrings and ``_toc.yml`` are up to date, and every
code cell a reader sees fits the page (at most 20 lines, none wider than the code box)."""

import ast
import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LIB = ROOT / "lib" / "replearn"
spec = importlib.util.spec_from_file_location("inventory", ROOT / "scripts" / "inventory.py")
inventory = importlib.util.module_from_spec(spec)
spec.loader.exec_module(inventory)
SECTIONS = inventory.sections()


def notebook_imports(path: Path) -> set[str]:
    """Modules under ``replearn.experiments`` that the notebook's code cells import."""
    found = set()
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("replearn.experiments"):
                found |= {f"{node.module}.{a.name}" if node.module.count(".") == 2 else node.module
                          for a in node.names}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("replearn.experiments")}
    return found


@pytest.mark.parametrize("sec", SECTIONS, ids=[s["number"] for s in SECTIONS])
def test_every_section_has_its_driver_and_tests(sec):
    assert (ROOT / sec["driver"]).is_file(), f"section {sec['number']}: no driver at {sec['driver']}"
    assert (ROOT / sec["test"]).is_file(), f"section {sec['number']}: no tests at {sec['test']}"
    imported = notebook_imports(ROOT / sec["notebook"])
    drivers = {m for m in imported if is_driver(m)}
    assert drivers == {sec["module"]}, f"{sec['notebook']} must import exactly its own driver {sec['module']}, " \
                                       f"imports {sorted(drivers)}"
    chapter = sec["module"].rsplit(".", 1)[0]
    assert all(m.rsplit(".", 1)[0] == chapter for m in imported - drivers), \
        f"{sec['notebook']} imports another chapter's set-up: {sorted(imported - drivers)}"


def is_driver(module: str) -> bool:
    """A section's driver (``...chNN_chapter.sMM_section``), not a set-up its chapter's drivers share."""
    return re.fullmatch(r"s\d\d_\w+", module.rsplit(".", 1)[-1]) is not None


def setups() -> dict[str, Path]:
    """The chapters' shared set-ups (e.g. ``ch05_fedrep/cifar_federation.py``, the CIFAR federation
    that 5.7-5.9 run): modules of a chapter folder that are not drivers, by dotted name."""
    return {f"replearn.{'.'.join(p.relative_to(LIB).with_suffix('').parts)}": p
            for p in (LIB / "experiments").glob("ch*/*.py") if p.name != "__init__.py" and not is_driver(p.stem)}


def test_no_driver_without_a_section():
    drivers = {str(p.relative_to(ROOT)) for p in (LIB / "experiments").rglob("*.py")
               if p.name != "__init__.py" and is_driver(p.stem)}
    assert drivers == {s["driver"] for s in SECTIONS}, "drivers must sit at chNN_chapter/sMM_section.py of a notebook"
    tests = {str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "experiments").rglob("test_*.py")}
    assert tests == {s["test"] for s in SECTIONS}


def _private_uses(path: Path) -> list[str]:
    tree, bad = ast.parse(path.read_text()), []
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("replearn")):
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    bad.append(f"{path.name}:{node.lineno} imports {a.name}")
                aliases[a.asname or a.name] = a.name
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("replearn"):
                    aliases[a.asname or a.name.split(".")[0]] = a.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            bad.append(f"{path.name}:{node.lineno} uses {node.value.id}.{node.attr}")
    return bad


def test_no_private_names_across_modules():
    bad = [b for p in sorted(LIB.rglob("*.py")) for b in _private_uses(p)]
    assert bad == []


def _imported(node) -> list[str]:
    """The dotted modules an import statement names (``from a import b`` gives ``a`` and ``a.b``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.module:
        return [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return []


def test_drivers_import_no_other_driver():
    """A driver imports the library and its chapter's set-ups, never another driver; a set-up imports
    no driver."""
    bad = []
    for p in sorted((LIB / "experiments").glob("ch*/*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                bad.append(f"{p.relative_to(LIB)} imports .{node.module} (relative)")
            for m in _imported(node):
                if m.startswith("replearn.experiments.ch") and m.count(".") == 3 and is_driver(m):
                    bad.append(f"{p.relative_to(LIB)} imports {m}")
    assert bad == [], "code shared by sections belongs in a set-up of the chapter or in the library proper"


def test_every_setup_serves_its_chapters_drivers():
    used = {m for p in (LIB / "experiments").glob("ch*/s[0-9][0-9]_*.py")
            for node in ast.walk(ast.parse(p.read_text())) for m in _imported(node)}
    assert setups() and all(name in used for name in setups()), f"unused set-ups: {sorted(set(setups()) - used)}"


#: The library below the book: what learns (``theory``, ``neural``) and the settings and tables it is
#: configured and shown with import nothing from the book's tooling or from the sections' drivers.
BELOW_THE_BOOK = [p for p in sorted(LIB.rglob("*.py"))
                  if p.relative_to(LIB).parts[0] in ("theory", "neural", "settings.py", "table.py", "checks.py",
                                                     "backend.py")]


@pytest.mark.parametrize("path", BELOW_THE_BOOK, ids=lambda p: str(p.relative_to(LIB)))
def test_the_library_imports_nothing_from_the_book(path):
    bad = [f"line {node.lineno}: {m}" for node in ast.walk(ast.parse(path.read_text())) for m in _imported(node)
           if m.startswith(("replearn.book", "replearn.experiments"))
           or (isinstance(node, ast.ImportFrom) and node.module == "replearn"
               and any(a.name in ("book", "experiments") for a in node.names))]
    assert bad == []


@pytest.mark.parametrize("path", sorted(LIB.rglob("*.py")), ids=lambda p: str(p.relative_to(LIB)))
def test_no_import_hides_in_a_function(path):
    """Every module's dependencies within replearn are at its top, where a reader looks for them
    (none imported inside a function, to break a cycle or otherwise)."""
    tree = ast.parse(path.read_text())
    hidden = [f"{fn.name}, line {node.lineno}" for fn in ast.walk(tree)
              if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
              for node in ast.walk(fn) if any(m.startswith("replearn") for m in _imported(node))]
    assert hidden == []


def test_generated_inventories_are_up_to_date():
    assert inventory.stale(write=False) == [], "run `python scripts/inventory.py`"


def test_section_numbers_follow_the_toc():
    for sec in SECTIONS:
        heading = re.match(r"book/(\d+)_\w+/(\d+)_", sec["notebook"])
        assert sec["number"] == f"{int(heading.group(1))}.{int(heading.group(2))}"


def test_library_tour_names_only_functions_that_exist():
    import importlib

    text = (ROOT / "book" / "appendix" / "library_tour.md").read_text()
    table = text[text.index("## Where to find each piece"):text.index("## The section drivers")]
    modules = {p.stem for p in LIB.glob("*.py") if not p.stem.startswith("_")}
    named = set(re.findall(r"`(\w+)\.(\w+)", table))
    assert len(named) > 30
    missing = [f"{m}.{n}" for m, n in sorted(named)
               if m in modules and not hasattr(importlib.import_module(f"replearn.{m}"), n)]
    assert missing == [], "the library tour names functions that do not exist"


#: The code box of the book's HTML pages shows about 88 characters of a line (a longer one is cut
#: and scrolls); a code cell the reader sees holds at most this many lines (the rest of what a
#: section needs lives in its driver).
CODE_WIDTH = 88
CELL_LINES = 20
#: Tags under which a code cell's input is not shown on the page.
HIDDEN_INPUT = {"hide-input", "remove-input", "remove-cell"}
NOTEBOOKS = sorted(p for p in (ROOT / "book").rglob("*.ipynb")
                   if "_build" not in p.parts and ".ipynb_checkpoints" not in p.parts)


def oversized_cells(nb: dict) -> list[str]:
    """Where the visible code cells of the notebook ``nb`` (its JSON) are longer than
    :data:`CELL_LINES` lines or have a line wider than :data:`CODE_WIDTH` characters."""
    bad = []
    for index, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code" or HIDDEN_INPUT & set(cell.get("metadata", {}).get("tags", [])):
            continue
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        lines = source.splitlines()
        if len(lines) > CELL_LINES:
            bad.append(f"cell {index}: {len(lines)} lines (at most {CELL_LINES})")
        bad += [f"cell {index}, line {n}: {len(line)} characters (at most {CODE_WIDTH})"
                for n, line in enumerate(lines, 1) if len(line) > CODE_WIDTH]
    return bad


def test_oversized_cells_are_found():
    def code(source, tags=()):
        return {"cell_type": "code", "source": source, "metadata": {"tags": list(tags)}}

    long = "\n".join(f"x{i} = {i}" for i in range(CELL_LINES + 1))
    wide = "y = " + "1 + " * 30 + "1"
    nb = {"cells": [code(long), code(wide), code(long, ["hide-input"]), code(wide, ["remove-cell"]),
                    {"cell_type": "markdown", "source": wide, "metadata": {}},
                    code("\n".join(["z = 0"] * CELL_LINES) + "\n")]}
    assert oversized_cells(nb) == [f"cell 0: {CELL_LINES + 1} lines (at most {CELL_LINES})",
                                   f"cell 1, line 1: {len(wide)} characters (at most {CODE_WIDTH})"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[str(p.relative_to(ROOT / "book")) for p in NOTEBOOKS])
def test_visible_code_cells_fit_the_page(path):
    bad = oversized_cells(json.loads(path.read_text()))
    assert bad == [], (f"{path.relative_to(ROOT)}: a visible code cell must fit the page; move what it does "
                       "into the section's driver, wrap its lines or split it:\n  " + "\n  ".join(bad))
