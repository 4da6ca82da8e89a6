"""Author-year citation labels that tell papers apart: ``[Collins et al., 2022a]``.

A pybtex formatting style, ``authoryear``, for sphinxcontrib-bibtex: the bibliography is sorted by
author, year and title (pybtex's ``plain`` order) and every entry is labelled ``Last, year`` (one
author), ``Last and Last, year`` (two) or ``Last et al., year`` (three or more). Labels that would
coincide get the suffixes a, b, ... in bibliography order, as natbib does. The referencing style
``authoryear_label`` is sphinxcontrib-bibtex's ``label`` style with citations of several papers
separated by semicolons. The book sets ``bibtex_default_style: authoryear`` and
``bibtex_reference_style: authoryear_label``, so a ``{cite}`` in the text prints exactly the label
of the bibliography entry it links to: ``[Collins et al., 2022a; Collins et al., 2022b]``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from string import ascii_lowercase

from pybtex.plugin import register_plugin
from pybtex.richtext import Text
from pybtex.style.formatting.plain import Style as PlainStyle
from pybtex.style.labels import BaseLabelStyle
from sphinxcontrib.bibtex.plugin import register_plugin as register_referencing_style
from sphinxcontrib.bibtex.style.referencing import BracketStyle
from sphinxcontrib.bibtex.style.referencing.label import LabelReferenceStyle


def _last_name(person) -> str:
    """The von and last parts of a name as plain text (LaTeX accents decoded, braces dropped)."""
    return Text.from_latex(" ".join(person.prelast_names + person.last_names)).render_as("text")


def author_year(entry) -> str:
    """``Last, 2009`` / ``Last and Last, 2020`` / ``Last et al., 2022`` (authors, else editors)."""
    persons = entry.persons.get("author") or entry.persons.get("editor") or []
    names = [_last_name(p) for p in persons]
    if not names:
        who = entry.fields.get("organization") or entry.key
    elif len(names) == 1:
        who = names[0]
    elif len(names) == 2:
        who = f"{names[0]} and {names[1]}"
    else:
        who = f"{names[0]} et al."
    return f"{who}, {entry.fields.get('year', 'n.d.')}"


class AuthorYearLabelStyle(BaseLabelStyle):
    """Author-year labels; equal labels get a, b, ... in the order the entries are given."""

    def format_labels(self, sorted_entries):
        labels = [author_year(e) for e in sorted_entries]
        total, seen = Counter(labels), Counter()
        for label in labels:
            if total[label] == 1:
                yield label
            else:
                if total[label] > len(ascii_lowercase):
                    raise ValueError(f"more than {len(ascii_lowercase)} references labelled {label!r}")
                seen[label] += 1
                yield label + ascii_lowercase[seen[label] - 1]


class AuthorYearStyle(PlainStyle):
    """pybtex's ``plain`` style (sorted by author, year, title) with :class:`AuthorYearLabelStyle`."""

    default_label_style = AuthorYearLabelStyle


def _semicolon_brackets() -> BracketStyle:
    return BracketStyle(sep="; ")


@dataclass
class AuthorYearLabelReferenceStyle(LabelReferenceStyle):
    """sphinxcontrib-bibtex's ``label`` referencing style, several labels separated by "; "."""

    bracket_parenthetical: BracketStyle = field(default_factory=_semicolon_brackets)
    bracket_textual: BracketStyle = field(default_factory=_semicolon_brackets)
    bracket_label: BracketStyle = field(default_factory=_semicolon_brackets)


def setup(app):
    register_plugin("pybtex.style.formatting", "authoryear", AuthorYearStyle)
    register_referencing_style("sphinxcontrib.bibtex.style.referencing", "authoryear_label",
                               AuthorYearLabelReferenceStyle)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
