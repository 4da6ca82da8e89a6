"""Fail when a built page shows raw markup instead of rendered math or roles, or cannot render offline.

Usage: python scripts/check_rendered.py [HTML_DIR]      (default: _build/html)

A MyST source can build without a warning and still show the reader raw LaTeX: a line of a
``$...$`` span that starts with ``+`` or ``-`` becomes a list item and the rest of the formula
prints as ``\\eta_j \\sum_{s<t}`` in italics; a role with a typo prints as ``{glu:text}`x```.
This script reads every page of the built book, keeps the text a reader sees outside rendered
math (MathJax's ``span.math`` / ``div.math``), ``<script>``, ``<style>``, ``<pre>``/``<code>`` and
notebook output areas, and reports each stray ``$``, LaTeX command (``\\frac``) or MyST role
(``{cite}``) with the page and a snippet around it. It also reports the page's scripts that break
it for a reader (:func:`find_script_problems`): a script loaded from another host (the book reads
offline: MathJax and the widget manager are served from ``_static/``), the same inline script
twice (two ``const THEBE_JS_URL`` declarations throw in the browser), and saved widget state
without the local widget manager that renders it (the explorers would be blank). It exits with
status 1 if it found any of these.
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path

# Elements whose text is not prose, and classes of the containers that hold rendered math,
# code or a notebook's stored outputs (myst-nb: div.cell_output; Sphinx: div.highlight).
SKIP_TAGS = {"head", "script", "style", "pre", "code", "kbd", "samp", "textarea", "noscript",
             "template", "svg", "math"}
SKIP_CLASSES = {"math", "cell_output", "output", "highlight", "MathJax", "MathJax_Preview"}
VOID_TAGS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
             "source", "track", "wbr"}

STRAY = re.compile(
    r"(?P<dollar>\$)"                                  # a math delimiter that was not parsed
    r"|(?P<command>\\[A-Za-z]+)"                       # a LaTeX command: \frac, \eta, \operatorname
    r"|(?<![\w^}\\])(?P<role>\{[A-Za-z][\w.:-]*\}`?)")  # a MyST role: {cite}, {glue:text}`label`
# (a brace right after a letter, _, ^ or } is a LaTeX argument, reported with its command)


class VisibleText(HTMLParser):
    """Collects the text of an HTML page that is not inside a skipped element."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool]] = []       # (tag, skipped) for every open element
        self.parts: list[str] = []

    @property
    def skipping(self) -> bool:
        return bool(self.stack) and self.stack[-1][1]

    def handle_starttag(self, tag, attrs):
        if tag in VOID_TAGS:
            return
        classes = set((dict(attrs).get("class") or "").split())
        skip = self.skipping or tag in SKIP_TAGS or bool(classes & SKIP_CLASSES)
        self.stack.append((tag, skip))
        if tag in ("p", "div", "li", "td", "th", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "dd", "dt"):
            self.parts.append("\n")

    def handle_startendtag(self, tag, attrs):
        pass                                           # <br/>, <img/>: no text

    def handle_endtag(self, tag):
        # close the innermost open element of this name (and anything left open inside it)
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                break

    def handle_data(self, data):
        if not self.skipping:
            self.parts.append(data)

    def text(self) -> str:
        return "".join(self.parts)


def visible_text(html: str) -> str:
    """The text of ``html`` that a reader sees as prose (see the module docstring)."""
    parser = VisibleText()
    parser.feed(html)
    parser.close()
    return parser.text()


def find_stray(html: str, width: int = 40) -> list[str]:
    """Each stray ``$``, LaTeX command or MyST role in the prose of ``html``, as
    ``'kind: ...snippet...'``, in order of appearance."""
    text = visible_text(html)
    found = []
    for m in STRAY.finditer(text):
        start, end = max(0, m.start() - width), min(len(text), m.end() + width)
        snippet = re.sub(r"\s+", " ", text[start:end]).strip()
        found.append(f"{m.lastgroup}: ...{snippet}...")
    return found


class Scripts(HTMLParser):
    """Collects every ``<script>``: its ``src`` (or None), ``type`` and inline body."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.scripts: list[dict] = []
        self._open: dict | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "script":
            a = dict(attrs)
            self._open = {"src": a.get("src"), "type": a.get("type") or "", "body": ""}
            self.scripts.append(self._open)

    def handle_endtag(self, tag):
        if tag == "script":
            self._open = None

    def handle_data(self, data):
        if self._open is not None:
            self._open["body"] += data


#: The script that renders saved ipywidgets state (book/_ext/local_widgets.py serves it).
WIDGET_MANAGER = "_static/widgets/embed-amd.js"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def find_script_problems(html: str) -> list[str]:
    """Each script of ``html`` that breaks the page for a reader, as ``'kind: detail'``:
    ``external-script`` (a ``src`` on another host), ``duplicate-script`` (an inline script that
    appeared before), ``widgets`` (widget state but no local widget manager)."""
    parser = Scripts()
    parser.feed(html)
    parser.close()
    found, bodies = [], set()
    for script in parser.scripts:
        src = script["src"]
        if src and re.match(r"(?i)^(https?:)?//", src):
            found.append(f"external-script: {src}")
        elif not src and script["type"] != WIDGET_STATE and script["body"].strip():
            body = script["body"].strip()
            if body in bodies:
                found.append("duplicate-script: " + " ".join(body.split())[:80])
            bodies.add(body)
    has_state = any(s["type"] == WIDGET_STATE for s in parser.scripts)
    if has_state and not any((s["src"] or "").split("?")[0].endswith(WIDGET_MANAGER) for s in parser.scripts):
        found.append(f"widgets: saved widget state but no {WIDGET_MANAGER} to render it")
    return found


def pages(root: Path) -> list[Path]:
    """The book's HTML pages under ``root``, without Sphinx's own folders (_static, _sources...)."""
    return sorted(p for p in root.rglob("*.html")
                  if not any(part.startswith("_") for part in p.relative_to(root).parts[:-1]))


def main(argv: list[str]) -> int:
    root = Path(argv[0] if argv else "_build/html")
    if not root.is_dir():
        print(f"check_rendered: no built book at {root}; run `make book` (or jupyter-book build .) first",
              file=sys.stderr)
        return 2
    files = pages(root)
    if not files:
        print(f"check_rendered: {root} holds no HTML pages", file=sys.stderr)
        return 2
    bad = 0
    for page in files:
        html = page.read_text(encoding="utf-8")
        stray = list(dict.fromkeys(find_stray(html) + find_script_problems(html)))
        for item in stray:
            print(f"{page.relative_to(root)}: {item}")
        bad += len(stray)
    if bad:
        print(f"check_rendered: {bad} stray $ / LaTeX command / MyST role in the rendered text or broken "
              f"scripts in {len(files)} pages (fix the markdown source: usually a line of a $...$ span that "
              "starts with +, - or a number, or a misspelt role; scripts: see book/_ext)", file=sys.stderr)
        return 1
    print(f"check_rendered: {len(files)} pages, no raw math or roles in the rendered text, no broken scripts")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
