"""Number exercises, theorems, figures ... per section, after the section numbers in the titles.

The book's section titles carry their number by hand (``# 5.4 Local-only vs FedAvg vs FedRep``,
``# B. Reproducing the papers' settings``) and its toctrees are not ``numbered`` (that would
print every number twice). Without a numbered toctree Sphinx numbers every numbered element
(sphinx-exercise's exercises, sphinx-proof's theorems and definitions, figures) straight
through the whole book: "Exercise 97" in Section 5.4. After Sphinx has assigned those numbers
(event ``env-get-updated``), this extension renumbers them per document: in a document whose
title starts with a section number ``5.4``, the k-th exercise becomes Exercise 5.4.k (each kind
counted separately), in the text, in its title and in every ``{ref}`` / ``{numref}`` to it.
Documents without a number in their title keep Sphinx's numbers.
"""

from __future__ import annotations

import re

#: "5.4 Title", "5. Title", "B. Title" (a letter needs its dot: "A tour" is no number).
SECTION_NUMBER = re.compile(r"^(?:(\d+(?:\.\d+)*)\.?|([A-Z])\.)\s")


def section_number(title: str) -> tuple | None:
    """``(5, 4)`` for ``"5.4 Local-only ..."``, ``("B",)`` for ``"B. Reproducing ..."``, else None."""
    match = SECTION_NUMBER.match(title.strip())
    if match is None:
        return None
    if match.group(2):
        return (match.group(2),)
    return tuple(int(p) for p in match.group(1).split("."))


def renumber(numbers: dict, prefix: tuple) -> dict:
    """``{figtype: {id: number}}`` of one document renumbered ``prefix + (k,)``, k = 1, 2, ...
    in the document's (Sphinx's) order, separately for each figtype."""
    return {figtype: {ident: prefix + (k,) for k, ident in enumerate(sorted(ids, key=ids.get), 1)}
            for figtype, ids in numbers.items()}


def per_section_numbers(app, env) -> list[str]:
    changed = []
    for docname, numbers in env.toc_fignumbers.items():
        title = env.titles.get(docname)
        prefix = section_number(title.astext()) if title is not None else None
        if prefix is None:
            continue
        new = renumber(numbers, prefix)
        if new != numbers:
            env.toc_fignumbers[docname] = new
            changed.append(docname)
    return changed


def setup(app):
    app.connect("env-get-updated", per_section_numbers, priority=900)  # after Sphinx's numbering
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
