"""Which paper claims the book reproduces, read from the stored notebooks (Appendix B).

The CIFAR sections check each paper claim with :func:`replearn.book.claims.verdict`, which records the
claim, the scale of the run, whether it held, whether it is a claim of a direction or of an
absence of a difference, and whether the paper's own difference lies inside our interval; the
other sections assert their claims with :func:`replearn.book.claims.claim`, which prints "holds" or
stops the notebook. :func:`paper_claims` collects both from the stored outputs (it runs no
notebook) into Appendix B's two tables, so that no summary of outcomes is typed.

A claim is *reproduced in direction* when our interval lies on the paper's side of zero, *in
size too* when the paper's difference also lies inside our interval, and only *not
contradicted* when it holds because no difference separates ("more epochs do not hurt").
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from replearn.book.claims import recorded_outcomes
from replearn.book.plotting import Table

__all__ = ["REVERSED", "paper_claims", "summary_word"]

_HOLDS = re.compile(r"^(?P<label>.+): holds(?: \(.*\))?$", re.M)

#: Section 3.5 asserts the opposite of the blog's claim: the blog's claim is reproduced iff the
#: section's label does NOT hold. section -> (the source's claim, the label the section asserts)
REVERSED = {"3.5": ("the blog: smaller learned rates for the lower layers of a network",
                    "layer 1 > layer 2 > head for the main run and both other seeds")}


def _section_of(path: Path) -> str:
    return f"{int(path.parent.name[:2])}.{int(path.name[:2])}"


def _order(section: str) -> tuple[int, ...]:
    return tuple(map(int, section.split(".")))


def _asserted(path: Path) -> list[str]:
    """The labels of the claims a stored notebook printed as holding (:func:`claims.claim`)."""
    nb = json.loads(path.read_text())
    text = "".join("".join(o.get("text", "")) for c in nb["cells"] if c["cell_type"] == "code"
                   for o in c.get("outputs", []) if o.get("output_type") == "stream")
    return _HOLDS.findall(text)


def summary_word(checks: list[dict] | None) -> str:
    """The outcome of one paper claim at one scale from its checks (dicts with ``holds``,
    ``kind`` and ``size``): "—" (not checked), "not reproduced", "partly (k of n checks)", or,
    when all hold, "direction reproduced" (", size too" / ", size not" where the paper's
    difference was compared with our interval) and/or "not contradicted" (absence claims)."""
    if not checks:
        return "—"
    held = [c["holds"] for c in checks]
    if not any(held):
        return "not reproduced"
    if not all(held):
        return f"partly ({sum(held)} of {len(held)} checks)"
    parts = []
    direction = [c for c in checks if c.get("kind", "direction") == "direction"]
    if direction:
        sizes = [c["size"] for c in direction if c.get("size") is not None]
        parts.append("direction reproduced" + ("" if not sizes else ", size too" if all(sizes) else
                                               ", size not" if not any(sizes) else
                                               f", size in {sum(sizes)} of {len(sizes)}"))
    if len(direction) < len(checks):
        parts.append("not contradicted")
    return "; ".join(parts)


def paper_claims(book: str | Path, sections) -> tuple[Table, Table, str, str]:
    """Appendix B's tables of the book under ``book`` whose sections are ``sections`` (the
    section numbers "N.M" every notebook must have): one row per paper claim and section with
    its outcome at the CPU default and near-paper (:func:`summary_word`), then every recorded
    check; and two strings for the prose: the sections whose claims all hold at the CPU default
    (asserted or checked), and those with a paper check that does not."""
    book = Path(book)
    notebooks = {_section_of(p): p for p in sorted(book.glob("0[1-9]_*/[0-9][0-9]_*.ipynb"))}
    missing = sorted(set(sections) - set(notebooks), key=_order)
    if missing:
        raise FileNotFoundError(f"no notebook found for sections {missing} under {book}")
    checks, asserted = [], {}
    for section, path in notebooks.items():
        checks += [{"section": section, **rec} for rec in recorded_outcomes(path) if rec["paper"]]
        asserted[section] = _asserted(path)
    for section, (paper, label) in REVERSED.items():
        checks.append({"section": section, "paper": paper, "scale": "CPU", "kind": "direction", "size": None,
                       "claim": f"the blog's ordering (the section asserts the reverse: {label!r})",
                       "holds": label not in asserted.get(section, [])})
    checks.sort(key=lambda c: _order(c["section"]))   # stable: each section's checks keep their order
    summary: dict = {}
    for c in checks:
        summary.setdefault((c["section"], c["paper"]), {}).setdefault(c["scale"], []).append(c)
    claims_table = Table(["section", "paper claim", "CPU default", "near-paper (long profile)"],
                         [[s, p, summary_word(v.get("CPU")), summary_word(v.get("long"))]
                          for (s, p), v in summary.items()], align="llll",
                         caption="paper claims against our runs, by the book's criterion (the 95% interval of "
                                 "the paired difference; 5.7's one-seed near-paper run: over its 100 clients)")
    checks_table = Table(["section", "scale", "check", "outcome"],
                         [[c["section"], c["scale"], c["claim"],
                           ("holds" if c["holds"] else "does not hold") +
                           (" (not contradicted)" if c["holds"] and c.get("kind") == "absence" else "")]
                          for c in checks], align="llll", caption="every recorded check")
    plain = [s for s in notebooks if s not in {c["section"] for c in checks} and asserted[s]]
    not_cpu = sorted({c["section"] for c in checks if c["scale"] == "CPU" and not c["holds"]}, key=_order)
    held_cpu = sorted({c["section"] for c in checks if c["scale"] == "CPU"} - set(not_cpu), key=_order)
    return claims_table, checks_table, ", ".join(plain + held_cpu), ", ".join(not_cpu) or "none"
