"""Which paper claims the book reproduces, read from the stored notebooks (Appendix B).

The CIFAR sections check each paper claim with :func:`replearn.book.claims.verdict`, which records the
claim, the scale of the run, whether it held, whether it is a claim of a direction or of an
absence of a difference, and whether the paper's own difference lies inside our interval; the
other sections assert their claims with :func:`replearn.book.claims.claim`, which prints "holds" or
stops the notebook. :func:`paper_claims` collects both from the stored outputs (it runs no
notebook) into Appendix B's two tables, so that no summary of outcomes is typed.

Every outcome is one of the book's three words (:data:`replearn.book.seeds.OUTCOMES`): a claim
*holds* when our interval lies on the paper's side of zero (*size too* when the paper's difference
also lies inside our interval), is *not separated* when the interval contains zero, and is
*opposite* when it lies on the other side. A claim of no difference ("more epochs do not hurt")
holds when no difference separates ("no difference, as claimed": a longer run could still separate).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from replearn.book.claims import recorded_outcomes
from replearn.table import Table

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


def _word(check: dict) -> str:
    """One check's outcome in the book's vocabulary: "holds", "not separated (n = k)" or "opposite"."""
    outcome = check.get("outcome") or ("holds" if check["holds"] else "not separated")
    if outcome == "not separated" and check.get("n"):
        return f"not separated (n = {check['n']})"
    return outcome


def summary_word(checks: list[dict] | None) -> str:
    """The outcome of one paper claim at one scale from its checks (dicts with ``holds`` and,
    where recorded, ``outcome``, ``n``, ``kind`` and ``size``), in the vocabulary of the checks
    themselves: "—" (not checked); "holds" when all hold (", size too" / ", size not" where the
    paper's difference was compared with our interval; "(no difference, as claimed)" for claims of
    no difference); "opposite" when none holds and one is opposite; "not separated (n = k)" when
    none holds; "holds in k of m checks" otherwise."""
    if not checks:
        return "—"
    words = [_word(c) for c in checks]
    if not any(w == "holds" for w in words):
        if "opposite" in words:
            return "opposite"
        counts = {c.get("n") for c in checks}
        return f"not separated (n = {counts.pop()})" if len(counts) == 1 and None not in counts else "not separated"
    if not all(w == "holds" for w in words):
        return f"holds in {words.count('holds')} of {len(words)} checks"
    direction = [c for c in checks if c.get("kind", "direction") == "direction"]
    if not direction:
        return "holds (no difference, as claimed)"
    sizes = [c["size"] for c in direction if c.get("size") is not None]
    size = ("" if not sizes else ", size too" if all(sizes) else ", size not" if not any(sizes)
            else f", size in {sum(sizes)} of {len(sizes)}")
    return "holds" + size + ("; no difference where none is claimed" if len(direction) < len(checks) else "")


def paper_claims(book: str | Path, sections) -> tuple[Table, Table, str, str]:
    """Appendix B's tables of the book under ``book`` whose sections are ``sections`` (the
    section numbers "N.M" every notebook must have): one row per paper claim and section with
    its outcome at the CPU default and near-paper (:func:`summary_word`), then every recorded
    check (those of the reproduction pages ``appendix/reproduction/N_M.ipynb`` count for section
    N.M); and two strings for the prose: the sections whose claims all hold at the CPU default
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
    for path in sorted(book.glob("appendix/reproduction/[0-9]*_[0-9]*.ipynb")):   # B.N.M: section N.M's audit
        section = path.stem.replace("_", ".")
        checks += [{"section": section, **rec} for rec in recorded_outcomes(path) if rec["paper"]]
    for section, (paper, label) in REVERSED.items():
        reverse = label in asserted.get(section, [])
        checks.append({"section": section, "paper": paper, "scale": "CPU", "kind": "direction", "size": None,
                       "claim": f"the blog's ordering (the section asserts the reverse: \"{label}\")",
                       "holds": not reverse, "outcome": "opposite" if reverse else "not separated", "n": None})
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
                           _word(c) + (" (no difference, as claimed)"
                                       if c["holds"] and c.get("kind") == "absence" else "")]
                          for c in checks], align="llll", caption="every recorded check")
    plain = [s for s in notebooks if s not in {c["section"] for c in checks} and asserted[s]]
    not_cpu = sorted({c["section"] for c in checks if c["scale"] == "CPU" and not c["holds"]}, key=_order)
    held_cpu = sorted({c["section"] for c in checks if c["scale"] == "CPU"} - set(not_cpu), key=_order)
    return claims_table, checks_table, ", ".join(plain + held_cpu), ", ".join(not_cpu) or "none"
