"""Every number the book's prose states is computed (myst-nb ``glue``), a setting or a quoted constant.

The scan reads every notebook's markdown cells and every ``.md`` page under ``book/``, masks what
is not prose -- math (``$...$``, ``$$...$$``, ``\\begin{...}`` environments, ``{math}`` roles and
math directives; an inline span that holds nothing but numbers, ``$0.883$`` or
``$0.57 \\to 0.43$``, is a number typeset as math and stays), MyST roles (``{glue:text}``, ``{cite}``,
``{ref}``, ``{eq}``, ...), code spans and code/glue blocks, directive options (``:label:``), targets ``(label)=``, URLs, HTML tags, comments,
headings' section numbers and references such as "Section 2.4" or "Theorem 4.1" -- and reports
every decimal number (``0.364``, ``1.5``, ``1e-3``) and every percentage (``87.5%``, ``12 %``) left.

A reported number must either come from a computation, in which case glue it (``glue("label",
value, display=False)`` in a code cell, ``{glue:text}`label:.3f``` in the markdown), or be a
setting the reader chooses / a constant quoted from a source, in which case list it in
``tests/prose_numbers_allowed.toml`` under the file's path with the reason::

    ["book/01_arm/03_lower_bound.ipynb"]
    "0.3" = "setting: ARM's step size beta (and the distance of the k = 1 example)"

An entry allows every occurrence of that number in that file. Entries that no longer match
anything fail :func:`test_allow_list_entries_are_used`, so the list cannot go stale.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
ALLOW_FILE = Path(__file__).with_name("prose_numbers_allowed.toml")

# Directives whose body is not prose: math, code, glue output, raw content, file inclusion.
SKIP_DIRECTIVES = re.compile(
    r"^(math|code|code-block|code-cell|sourcecode|literalinclude|raw|eval-rst|glue(:\w+)?|"
    r"bibliography|tableofcontents|toctree|mermaid|jupyter-execute|image)$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,}|:{3,})(?P<info>.*)$")
OPTION_LINE = re.compile(r"^\s*:[\w-]+:(\s.*)?$")

# What a "number" is: a decimal, a float in e-notation or a percentage (integers are counts,
# sizes and indices, mostly settings; a percentage or a decimal is almost always a measurement).
NUMBER = re.compile(
    r"(?<![\w.])(?:\d+(?:\.\d+)?[eE][-+]?\d+|\d+(?:\.\d+)?\s?%|\d*\.\d+(?:\.\d+)*)(?![\d])")

# Numbers that name something rather than measure it: "Section 2.4", "Theorem 4.1 and 4.2",
# "Fig. 3.2", "Eq. (5.1)", "Table 1.1"... The keyword may be followed by a list of numbers.
_REF_WORDS = (r"Sections?|Secs?\.|§|Chapters?|Chs?\.|Theorems?|Thms?\.|Lemmas?|Propositions?|Props?\.|"
              r"Corollar(?:y|ies)|Cor\.|Definitions?|Defs?\.|Assumptions?|Algorithms?|Algs?\.|"
              r"Figures?|Figs?\.|Tables?|Tabs?\.|Equations?|Eqs?\.|Appendix|Appendices|App\.|"
              r"Remarks?|Examples?|Exercises?|Steps?|Parts?|Conditions?|Claims?|Facts?|Lines?|"
              r"sections?|chapters?|theorems?|lemmas?|propositions?|figures?|tables?|equations?|"
              r"appendix|assumptions?|algorithms?|exercises?|remarks?|steps?")
_REF_NUM = r"\(?[A-Z]?\d+(?:\.\d+)*[a-z]?\)?"
REFERENCE = re.compile(rf"(?:{_REF_WORDS})\s*~?\s*{_REF_NUM}(?:\s*(?:,|and|or|to|–|—|-|&)\s*{_REF_NUM})*")
HEADING_NUMBER = re.compile(r"^(\s*#{1,6}\s+)[A-Z]?\d+(?:\.\d+)*\.?", re.M)


def _numbers_in_math(m: re.Match) -> str:
    """An inline math span that holds nothing but numbers (``$0.883$``, ``$12\\%$``,
    ``$0.574 \\to 0.427$``) is a number typeset as math: keep its numbers as prose. Any other
    span (``$\\beta = 0.3$``, ``$10^{-3}$``) is math and disappears."""
    plain = re.sub(r"\\%", "%", m.group()[1:-1])
    plain = re.sub(r"\\(?:to|pm|rightarrow|quad|qquad|[,;:! ])|~", " ", plain)
    return f" {plain} " if re.fullmatch(r"[\s\d.,%+\-]*\d[\s\d.,%+\-]*", plain) else " "


_MASKS = [
    re.compile(r"<!--.*?-->", re.S),                              # HTML comments
    re.compile(r"^\s*%.*$", re.M),                                # MyST comments
    re.compile(r"\{[\w:.-]+\}(`+).*?\1", re.S),                   # roles: {glue:text}`x`, {cite}`y`, ...
    re.compile(r"(`+).*?\1", re.S),                               # code spans (may hold a `$`)
    re.compile(r"\\\$"),                                          # escaped dollars (not math)
    re.compile(r"\$\$.*?\$\$(?:\s*\([^)\s]*\))?", re.S),          # display math and its label
    re.compile(r"\\begin\{([\w*]+)\}.*?\\end\{\1\}", re.S),       # amsmath environments
    (re.compile(r"\$(?:\\.|[^$\\])+?\$", re.S), _numbers_in_math),  # inline math (numbers alone stay)
    re.compile(r"^\s*\([\w:.-]+\)=\s*$", re.M),                   # targets (label)=
    re.compile(r"\{\{.*?\}\}", re.S),                             # substitutions
    re.compile(r"\]\([^)\s]*\)"),                                 # link targets [text](url)
    re.compile(r"<https?://[^>]*>"),                              # autolinks
    re.compile(r"https?://\S+"),                                  # bare URLs
    re.compile(r"</?[A-Za-z][^>]*>"),                             # HTML tags and attributes
    re.compile(r"\[\^[\w-]+\]"),                                  # footnote references
]


@dataclass(frozen=True)
class Hit:
    number: str
    snippet: str


def _strip_blocks(text: str) -> str:
    """Drop fenced code/math/glue blocks and directive option lines; keep prose directives' titles
    and bodies (a ``{prf:theorem}`` or ``{note}`` is prose). Nested fences are tracked on a stack."""
    out: list[str] = []
    stack: list[tuple[str, bool, bool]] = []  # (fence, skip body, still in option lines)
    for line in text.split("\n"):
        m = FENCE.match(line)
        if m:
            fence, info = m["fence"], m["info"].strip()
            if stack and fence[0] == stack[-1][0][0] and len(fence) >= len(stack[-1][0]) and not info:
                stack.pop()
                out.append("")
                continue
            if not (stack and stack[-1][1]):
                name = re.match(r"^\{([^}]*)\}\s*(.*)$", info)
                if name:
                    skip = bool(SKIP_DIRECTIVES.match(name[1]))
                    out.append("" if skip else name[2])          # a prose directive's title is prose
                else:
                    skip = True                                   # ```python, ``` ...: code
                    out.append("")
                stack.append((fence, skip, True))
                continue
        if stack:
            fence, skip, in_options = stack[-1]
            if skip:
                out.append("")
                continue
            if in_options and OPTION_LINE.match(line):
                out.append("")
                continue
            stack[-1] = (fence, skip, False)
        out.append(line)
    return "\n".join(out)


def _strip_front_matter(text: str) -> str:
    m = re.match(r"^---\n.*?\n---\n", text, re.S)
    return text[m.end():] if m else text


def _strip_generated(text: str) -> str:
    """Blocks generated from the code by ``scripts/inventory.py`` (between ``<!-- inventory:NAME -->``
    markers; ``tests/test_layout.py`` checks they are current) are not typed prose."""
    return re.sub(r"<!-- inventory:([\w-]+) -->.*?<!-- /inventory:\1 -->", " ", text, flags=re.S)


def prose(text: str) -> str:
    """The prose of a markdown cell or page: everything that is not math, code, a role, a
    reference, a URL, markup or a generated block replaced by spaces."""
    text = _strip_blocks(_strip_front_matter(_strip_generated(text)))
    for mask in _MASKS:
        pattern, replacement = mask if isinstance(mask, tuple) else (mask, " ")
        text = pattern.sub(replacement, text)
    text = HEADING_NUMBER.sub(r"\1", text)
    return REFERENCE.sub(" ", text)


def find_numbers(text: str) -> list[Hit]:
    """Every decimal number or percentage in the prose of ``text``, with a snippet around it."""
    masked = prose(text)
    hits = []
    for m in NUMBER.finditer(masked):
        number = re.sub(r"\s", "", m.group())
        start, end = max(0, m.start() - 40), min(len(masked), m.end() + 40)
        snippet = re.sub(r"\s+", " ", masked[start:end]).strip()
        hits.append(Hit(number, snippet))
    return hits


def book_files() -> list[Path]:
    files = [p for p in BOOK.rglob("*") if p.suffix in (".ipynb", ".md")
             and "_build" not in p.parts and ".ipynb_checkpoints" not in p.parts]
    return sorted(files)


def markdown_cells(path: Path) -> list[tuple[str, str]]:
    """``(where, text)`` pairs: each markdown cell of a notebook ("cell 3"), or the whole page."""
    if path.suffix == ".md":
        return [("page", path.read_text(encoding="utf-8"))]
    nb = nbformat.read(path, as_version=4)
    return [(f"cell {i}", c.source) for i, c in enumerate(nb.cells) if c.cell_type == "markdown"]


def load_allowed(path: Path = ALLOW_FILE) -> dict[str, dict[str, str]]:
    """The allow-list: ``{path relative to the repository: {number: reason}}``."""
    with path.open("rb") as f:
        data = tomllib.load(f)
    for path, entries in data.items():
        if not isinstance(entries, dict):
            raise ValueError(f"{ALLOW_FILE.name}: [{path!r}] must be a table of number = reason")
        for number, reason in entries.items():
            if not isinstance(reason, str) or len(reason.strip()) < 10:
                raise ValueError(f"{ALLOW_FILE.name}: [{path!r}] {number!r} needs a reason "
                                 "(a setting, a constant quoted from a source, ...)")
    return data


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def unexplained_numbers(path: Path, allowed: dict[str, dict[str, str]]) -> list[str]:
    ok = allowed.get(rel(path), {})
    return [f"{rel(path)} {where}: {hit.number!r} in '...{hit.snippet}...'"
            for where, text in markdown_cells(path) for hit in find_numbers(text)
            if hit.number not in ok]


# ---------------------------------------------------------------------------------------------
# The scanner on small strings.

def numbers(text: str) -> list[str]:
    return [h.number for h in find_numbers(text)]


def test_numbers_in_prose_are_found():
    assert numbers("FedAvg reaches a distance of 0.364 after 40 rounds.") == ["0.364"]
    assert numbers("an accuracy of 87.5% (up from 80 %), a rate of 1e-3 and .25 more") == [
        "87.5%", "80%", "1e-3", ".25"]
    assert numbers("The ratio is 21.9x faster.") == ["21.9"]
    assert numbers("A list:\n\n* first 0.5\n* second") == ["0.5"]


def test_integers_are_not_numbers_to_explain():
    assert numbers("We use n = 40 tasks, d = 100 and k = 5 for 2500 rounds.") == []


def test_math_is_not_prose():
    assert numbers("inline $\\alpha = 0.3$ and display\n\n$$\nx = 1.5\n$$ (eq-lab)\n") == []
    assert numbers("a proof over two lines $a = 0.1\n+ 0.2$ done") == []
    assert numbers("\\begin{aligned} x &= 0.5 \\end{aligned}") == []
    assert numbers("{math}`0.25` and\n\n```{math}\n0.75\n```\n") == []
    assert numbers("costs \\$1.50 only") == ["1.50"]   # an escaped dollar is not math
    assert numbers("set `$DATA` first; 0.5 of it, and $x$") == ["0.5"]


def test_numbers_typeset_as_math_are_prose():
    assert numbers("CKA $0.883$ before and $0.850$ after") == ["0.883", "0.850"]
    assert numbers("a gap of $12\\%$ and a fall $0.574 \\to 0.499 \\to 0.427$") == ["12%", "0.574", "0.499", "0.427"]
    assert numbers("between $0.012$ and $-0.5$, at $t = 0.5$ or $\\eta = 0.3$") == ["0.012", "0.5"]
    assert numbers("$10^{-3}$, $0.7\\,\\delta$, $1/4$ and $2$") == []


def test_roles_code_and_glue_are_not_prose():
    assert numbers("the distance {glue:text}`fed-dist:.3f` is small") == []
    assert numbers("see {cite}`collins2022maml` and {ref}`sec-2.4` or {eq}`eq:1.5`") == []
    assert numbers("call `fedavg(alpha=0.2)` or ``x = 0.5``") == []
    assert numbers("```python\nalpha = 0.3\n```\nafter") == []
    assert numbers("```{glue:figure} fig-0.5\n:name: f0.5\n```\n") == []
    assert numbers("````{prf:remark}\n```{code-block}\nx = 0.5\n```\nbody 0.7\n````\n") == ["0.7"]


def test_prose_directives_are_scanned_but_not_their_options():
    text = "```{prf:theorem} Rate 0.9\n:label: thm-0.5\n:class: dropdown\n\nThe rate is 0.8.\n```\n"
    assert numbers(text) == ["0.9", "0.8"]
    assert numbers(":::{note}\nmeasured 0.31\n:::\n") == ["0.31"]


def test_generated_inventory_blocks_are_not_prose():
    text = "Typed 0.5 here.\n<!-- inventory:modules -->\n* `x`: shared by book 4.3 and 4.4\n<!-- /inventory:modules -->\n"
    assert numbers(text) == ["0.5"]


def test_references_urls_and_markup_are_not_numbers():
    assert numbers("# 2.4 Tightness\n\nSections 2.2 and 2.4 state it; Theorem 4.1 of the paper.") == []
    assert numbers("Fig. 3.2, Eq. (5.1), Table 1.1 and Lemma A.2") == []
    assert numbers("[Flower](https://flower.ai/docs/1.41.0) and <https://x.org/v2.1>") == []
    assert numbers("(sec-1.2)=\n# Title\n<img src='a.png' width='80%'>\n<!-- 0.5 -->") == []
    assert numbers("% a MyST comment with 0.5\ntext") == []


def test_allow_list_entries_need_reasons(tmp_path):
    bad = tmp_path / "allowed.toml"
    bad.write_text('["book/x.ipynb"]\n"0.5" = ""\n')
    with pytest.raises(ValueError, match="needs a reason"):
        load_allowed(bad)
    bad.write_text('"book/x.ipynb" = "0.5"\n')
    with pytest.raises(ValueError, match="must be a table"):
        load_allowed(bad)


# ---------------------------------------------------------------------------------------------
# The book.

FILES = book_files()


@pytest.mark.parametrize("path", FILES, ids=[rel(p) for p in FILES])
def test_prose_numbers_are_computed_or_allowed(path):
    problems = unexplained_numbers(path, load_allowed())
    assert not problems, (
        "numbers in the prose that are neither glued nor allowed (glue computed values; list "
        f"settings and quoted constants in tests/{ALLOW_FILE.name} with the reason):\n  "
        + "\n  ".join(problems))


def test_allow_list_entries_are_used():
    allowed = load_allowed()
    stale = []
    for path, entries in allowed.items():
        p = ROOT / path
        if not p.exists():
            stale.append(f"{path}: no such file")
            continue
        found = {hit.number for _, text in markdown_cells(p) for hit in find_numbers(text)}
        stale += [f"{path}: {number!r} no longer appears in the prose" for number in entries
                  if number not in found]
    assert not stale, f"stale entries in tests/{ALLOW_FILE.name}:\n  " + "\n  ".join(stale)


# --- Sentences about the book's own results are bound to claim outcomes --------------------------
#
# A section that checks a paper's claim against the spread over seeds records the outcome with
# ``replearn.book.claims.verdict``, which glues a phrase chosen by the outcome ("is above D-SGD's by more
# than the spread" / "is not separated from D-SGD's ..."). In those sections every prose sentence
# that states an ordering, separation or trend and quotes one of the section's glued results must
# carry such a verdict phrase, or say that it is asserted by a ``claim()`` (which stops the notebook
# when it fails), so that a check that fails cannot be described as holding. Sentences about the
# papers (they name the paper, a figure or table, or cite) and exercises, solutions, theorems and
# tables are not scanned.

ORDERING = re.compile(
    r"\b(beats?|ahead|behind|better|worse|higher|lower|outperform\w*|exceeds?|separat\w*|faster|slower|"
    r"grows?|grew|rises?|falls?|improv\w*|larger|smaller|best|worst|above|below|more than|less than|"
    r"far from|clearly|drifts?|gains?|help\w*|hurts?)\b", re.I)
ABOUT_SOURCES = re.compile(r"\b(paper|papers|Fig\.|Figure|Table|talk|blog|authors?)\b|\{cite\}")
GLUE_REF = re.compile(r"\{glue:text\}`([\w.-]+)(?::[^`]*)?`")
BACKED = re.compile(r"\bassert(?:ed|s)?\b")


def verdict_names(path: Path) -> set[str]:
    """The glue names whose outcome ``verdict`` recorded in a stored notebook."""
    from replearn.book.claims import recorded_outcomes
    return {rec["name"] for rec in recorded_outcomes(path)}


def result_sentences(text: str) -> list[str]:
    """The sentences of plain prose in a markdown cell: fenced blocks (exercises, solutions,
    theorems, code), tables, headings and comments removed."""
    out, fence = [], None
    for line in text.split("\n"):
        m = FENCE.match(line)
        if m and fence is None:
            fence = m["fence"]
            continue
        if fence is not None:
            if m and m["fence"][0] == fence[0] and len(m["fence"]) >= len(fence) and not m["info"].strip():
                fence = None
            continue
        if line.lstrip().startswith(("|", "#", "%", "<!--")):
            out.append("")
            continue
        out.append(line)
    body = re.sub(r"\s+", " ", "\n".join(out))
    parts = re.split(r"(?<=[.;:!?])\s+(?=[A-Z*{(\[`$])|\s\*\s", body)
    return [p.strip() for p in parts if p.strip()]


def unbacked_orderings(path: Path) -> list[str]:
    verdicts = verdict_names(path)
    bad = []
    for _, text in markdown_cells(path):
        for sentence in result_sentences(text):
            refs = GLUE_REF.findall(sentence)
            results = [r for r in refs if r not in verdicts]
            if not results or not ORDERING.search(GLUE_REF.sub(" ", sentence)):
                continue
            if ABOUT_SOURCES.search(sentence) and not any(r in verdicts for r in refs):
                # about the paper only when it quotes nothing of ours but the comparison with it
                if not ORDERING.search(ABOUT_SOURCES.sub(" ", GLUE_REF.sub(" ", sentence))):
                    continue
            if any(r in verdicts for r in refs) or BACKED.search(sentence):
                continue
            where = rel(path) if path.is_relative_to(ROOT) else path.name
            bad.append(f"{where}: {sentence[:160]}")
    return bad


def calls_verdict(path: Path) -> bool:
    nb = nbformat.read(path, as_version=4)
    return any(c.cell_type == "code" and re.search(r"\bverdict\(", c.source) for c in nb.cells)


VERDICT_NOTEBOOKS = [p for p in FILES if p.suffix == ".ipynb" and calls_verdict(p)]


def test_ordering_sentences_are_found(tmp_path):
    text = ("FedAvg's gap ({glue:text}`g-5`) is above D-SGD's ({glue:text}`g-1`). By our criterion it "
            "{glue:text}`v-5`. The gap is {glue:text}`g-5` for FedAvg. Both are above chance, as the claim asserts "
            "({glue:text}`g-1`). The paper reports that FedAvg is better.\n\n"
            "```{exercise} x\nIs {glue:text}`g-1` above {glue:text}`g-5`?\n```")
    sentences = result_sentences(text)
    assert sentences[0].startswith("FedAvg's gap") and not any("exercise" in s or "Is " in s for s in sentences)
    import nbformat
    nb = nbformat.v4.new_notebook()
    out = nbformat.v4.new_output("display_data", data={"text/plain": repr({"claim": "c", "holds": False,
                                                                            "paper": None, "scale": "CPU"})},
                                 metadata={"scrapbook": {"name": "v-5-outcome", "mime_prefix": ""}})
    nb.cells = [nbformat.v4.new_markdown_cell(text), nbformat.v4.new_code_cell("", outputs=[out])]
    path = tmp_path / "n.ipynb"
    nbformat.write(nb, path)
    bad = unbacked_orderings(path)
    assert len(bad) == 1 and "is above D-SGD's" in bad[0], bad


def test_verdict_notebooks_are_scanned():
    # the six CIFAR sections and Appendix B's sources check with verdict(); if this drops, the scan covers less
    assert len(VERDICT_NOTEBOOKS) >= 6, [rel(p) for p in VERDICT_NOTEBOOKS]


@pytest.mark.parametrize("path", VERDICT_NOTEBOOKS, ids=[rel(p) for p in VERDICT_NOTEBOOKS])
def test_ordering_sentences_carry_a_claim_outcome(path):
    bad = unbacked_orderings(path)
    assert not bad, ("sentences state an ordering or trend of the section's results without a glued claim "
                     "outcome (glue the phrase of replearn.book.claims.verdict into the sentence, or assert the "
                     "statement with claim() and say so):\n  " + "\n  ".join(bad))
