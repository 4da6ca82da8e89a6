"""The book's inventories, generated from one source each.

- the library's module table (README "Layout of the library", the module list in
  ``lib/replearn/__init__.py`` and the library tour's module list) from the first paragraph of
  each module's docstring;
- the chapter map (section number, notebook, driver, test file) from ``_toc.yml`` and the
  mirrored layout ``book/NN_chapter/MM_section.ipynb`` <-> ``lib/replearn/experiments/chNN_chapter/sMM_section.py``
  <-> ``tests/experiments/chNN_chapter/test_sMM_section.py``.

    python scripts/inventory.py           # rewrite the generated blocks in place
    python scripts/inventory.py --check   # exit 1 if a generated block is out of date

Each generated block sits between ``<!-- inventory:NAME -->`` and ``<!-- /inventory:NAME -->``
(HTML comments: invisible in the rendered README and book).
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
LIB = ROOT / "lib" / "replearn"
TARGETS = {"README.md": ("modules", "chapters"), "lib/replearn/__init__.py": ("modules-rst",),
           "book/appendix/library_tour.md": ("modules-tour", "chapters-tour")}


def first_paragraph(doc: str) -> str:
    """The first paragraph of a docstring on one line."""
    para = doc.strip().split("\n\n")[0]
    return " ".join(line.strip() for line in para.splitlines())


def library_modules() -> list[tuple[str, str]]:
    """``(module name, summary)`` for the library's three parts (``theory``, ``neural``,
    ``book``), each followed by its public modules and subpackages, then the shared modules and
    the drivers' package."""
    out = []

    def entry(path: Path, name: str) -> None:
        doc = ast.get_docstring(ast.parse(path.read_text()))
        if not doc:
            raise ValueError(f"{path} has no module docstring: its first paragraph is its entry in the inventories")
        out.append((name, first_paragraph(doc)))

    for part in ("theory", "neural", "book"):
        entry(LIB / part / "__init__.py", f"replearn.{part}")
        for path in sorted((LIB / part).iterdir()):
            if path.name.startswith("_"):
                continue
            if path.suffix == ".py":
                entry(path, f"replearn.{part}.{path.stem}")
            elif (path / "__init__.py").exists():
                entry(path / "__init__.py", f"replearn.{part}.{path.name}")
    for path in sorted(LIB.glob("*.py")):
        if not path.name.startswith("_"):
            entry(path, f"replearn.{path.stem}")
    entry(LIB / "experiments" / "__init__.py", "replearn.experiments")
    return out


def sections() -> list[dict]:
    """Every section notebook of ``_toc.yml`` with its number, title, driver and test file."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    out = []
    for part in toc["parts"]:
        for chapter in part["chapters"]:
            for sec in chapter.get("sections", []):
                rel = sec["file"]                                   # book/04_fedavg/08_transfer
                if not re.fullmatch(r"book/\d\d_\w+/\d\d_\w+", rel):
                    continue                                        # appendix pages (B.4.7 ...) are no sections
                _, chap, name = rel.split("/")
                cnum, cname = chap.split("_", 1)
                snum, sname = name.split("_", 1)
                nb = ROOT / f"{rel}.ipynb"
                title = _title(nb)
                out.append(dict(number=f"{int(cnum)}.{int(snum)}", title=title, notebook=f"{rel}.ipynb",
                                module=f"replearn.experiments.ch{cnum}_{cname}.s{snum}_{sname}",
                                driver=f"lib/replearn/experiments/ch{cnum}_{cname}/s{snum}_{sname}.py",
                                test=f"tests/experiments/ch{cnum}_{cname}/test_s{snum}_{sname}.py"))
    return out


def _title(nb: Path) -> str:
    import json
    for cell in json.loads(nb.read_text())["cells"]:
        if cell["cell_type"] == "markdown":
            m = re.match(r"#\s+(\S+)\s+(.*)", "".join(cell["source"]).strip().splitlines()[0])
            if m:
                return m.group(2).strip()
    raise ValueError(f"{nb} has no '# N.M Title' heading")


def markdown(text: str) -> str:
    """reST inline markup of a docstring (``code``, :mod:`x`, :func:`x`) as Markdown code spans."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def blocks() -> dict[str, str]:
    mods, secs = library_modules(), sections()
    md = [(m, markdown(s)) for m, s in mods]
    table = ["| module | holds |", "| --- | --- |"] + [f"| `{m}` | {s} |" for m, s in md]
    rst = [f"- :mod:`{m}`: {s}" for m, s in mods]
    star = re.compile(r"(?<![`$])\b([A-Za-z])_\*")                  # "B_*" in a docstring: math on the page
    tour = ["* `" + m + "`: " + star.sub(r"$\1_*$", s) for m, s in md]
    chap = ["| section | notebook | driver | tests |", "| --- | --- | --- | --- |"] + [
        f"| {s['number']} {s['title']} | `{s['notebook']}` | `{s['driver']}` | `{s['test']}` |"
        for s in secs]
    # the title as Markdown beside the link: a {doc} link shows a title as plain text, which lost
    # its math ("FedAvg learns $B_*$" read "FedAvg learns B *")
    chap_tour = ["| section | title | driver |", "| --- | --- | --- |"] + [
        f"| {{doc}}`{s['number']} <../{s['notebook'].removeprefix('book/').removesuffix('.ipynb')}>` "
        f"| {s['title']} | `{s['module']}` |" for s in secs]
    return {"modules": "\n".join(table), "modules-rst": "\n".join(rst), "modules-tour": "\n".join(tour),
            "chapters": "\n".join(chap), "chapters-tour": "\n".join(chap_tour)}


def render(text: str, name: str, body: str, path: str) -> str:
    pattern = re.compile(rf"(<!-- inventory:{re.escape(name)} -->\n)(?:.*?\n)?(<!-- /inventory:{re.escape(name)} -->)", re.S)
    if not pattern.search(text):
        raise ValueError(f"{path}: no block <!-- inventory:{name} --> ... <!-- /inventory:{name} -->")
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)


def stale(write: bool) -> list[str]:
    """Files whose generated blocks differ from :func:`blocks` (rewritten when ``write``)."""
    generated, out = blocks(), []
    for rel, names in TARGETS.items():
        path = ROOT / rel
        text = path.read_text()
        new = text
        for name in names:
            new = render(new, name, generated[name], rel)
        if new != text:
            out.append(rel)
            if write:
                path.write_text(new)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report out-of-date files")
    args = parser.parse_args(argv)
    changed = stale(write=not args.check)
    if args.check and changed:
        print("out of date (run `python scripts/inventory.py`):", ", ".join(changed))
        return 1
    for rel in changed:
        print(f"updated {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
