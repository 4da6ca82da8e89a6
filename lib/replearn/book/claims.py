"""Claims a notebook states and checks: print the values a claim rests on, then assert it.

A section that says "FedAvg's distance falls below 0.1 while D-GD's stays above 0.5" calls ::

    claim("FedAvg recovers B*, D-GD does not", fedavg_dist < 0.1 < 0.5 < dgd_dist,
          fedavg=fedavg_dist, dgd=dgd_dist)

which prints ``FedAvg recovers B*, D-GD does not: holds (fedavg = 0.0123, dgd = 0.871)`` and
raises :class:`ClaimFailed` (an ``AssertionError``) naming the values when the condition is
false, or when a value it reports is NaN (a claim cannot hold on a number that is not one).
Floats are printed with ``digits`` significant digits (3 unless told), the precision that a
re-run on another CPU reproduces for the book's well-conditioned statistics; pass a string to
control the format yourself.

**Prose bound to outcomes.** A sentence that states an ordering, separation or trend of the
book's own results must not be typed next to a check that may have failed. :func:`verdict`
checks such a statement without asserting it, prints its outcome in the book's one vocabulary,
"holds", "not separated (n = 3)" or "opposite" (:data:`replearn.book.seeds.OUTCOMES`), and glues a
*phrase* chosen by the outcome (``holds="is above D-SGD's beyond the spread over seeds"``,
``fails="is not separated from D-SGD's"``) for ``{glue:text}`name``` in the sentence, so the prose
can only say what the run shows. A comparison is reported in the unit of its table: accuracies
shown in % are compared in percentage points (``seeds.points``, or ``scale=100, unit="points"``),
so a verdict row reads "+56 [+35, +78] points" beside the table it summarises, and every bound
is printed with enough decimals to show its sign. :func:`verdict` also glues a record of the
outcome (``name-outcome``: the claim, the paper claim it tests, the scale, the outcome) that
Appendix B collects from the stored notebooks (:func:`recorded_outcomes`), so no summary of
outcomes is typed.

**Numbers formatted once.** A number shown both in a table and in the prose is formatted once,
as a string (:func:`fmt`, :func:`mean_pm`), and that string is both put in the table and glued
(:func:`glue_text`, :func:`glue_pm`): the prose then shows exactly the table's string
(``{glue:text}`name``` without a format), instead of re-rounding a rounded float. Formatting
never prints a negative zero ("-0.00" is "0.00").

Numbers quoted in the prose that appear nowhere else may also be glued with
:func:`glue_number`, which rounds them to the digits the text shows before handing them to
myst-nb: the glued value is stored in the notebook (as the text of a hidden output) and strict
nbval compares it on CI's machine, so a full-precision float would fail there on the last bits.
"""

from __future__ import annotations

import ast
import json
import math
import numbers
import re
from dataclasses import dataclass
from pathlib import Path

from replearn.book.seeds import compare, Comparison, Joint, LEVEL, pm_parts
from replearn.table import Table

MAX_DIGITS = 17   # a float64 has at most 17 significant decimal digits

__all__ = ["ClaimFailed", "MeanPm", "check_digits", "claim", "compared", "fmt", "format_value", "glue_diff", "glue_number",
           "glue_pm", "glue_text", "mean_pm", "recorded_outcomes", "round_significant", "verdict", "verdict_table"]


class ClaimFailed(AssertionError):
    """A claim stated in the book did not hold on this run."""


def check_digits(digits) -> int:
    """``digits`` must be an int from 1 to 17 (not a bool); returns it."""
    if isinstance(digits, bool) or not isinstance(digits, numbers.Integral) or not 1 <= digits <= MAX_DIGITS:
        raise ValueError(f"digits must be an integer from 1 to {MAX_DIGITS} (significant digits), got {digits!r}")
    return int(digits)


def _scalar(value):
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        value = value.item()
    return value


def _no_negative_zero(text: str) -> str:
    """``"-0.00"`` -> ``"0.00"``, ``"-0"`` -> ``"0"``: a value that rounds to zero has no sign."""
    if text.startswith("-") and not re.search(r"[1-9]", text.split("e")[0].split("E")[0]):
        return text[1:]
    return text


def format_value(value, digits: int = 3) -> str:
    """``value`` as printed by :func:`claim`: strings as they are, bools and integers exactly,
    other real numbers (Python, numpy or 0-d torch) with ``digits`` significant digits."""
    check_digits(digits)
    if isinstance(value, str):
        return value
    value = _scalar(value)
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        x = float(value)
        if not math.isfinite(x):
            return str(x)
        return _no_negative_zero(f"{x:.{digits}g}")
    raise ValueError(f"claim values must be numbers, bools or strings, got {type(value).__name__}: {value!r}")


def _finite_real(value, what: str) -> float:
    value = _scalar(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{what}: expected a real number, got {type(value).__name__}: {value!r}")
    x = float(value)
    if not math.isfinite(x):
        raise ValueError(f"{what}: {x} is not a finite number; the prose cannot quote it "
                         "(find where the computation produced it)")
    return x


def round_significant(value, digits: int = 3):
    """``value`` (a real number, or a 0-d array/tensor) rounded to ``digits`` significant digits;
    integers and bools are returned unchanged."""
    check_digits(digits)
    value = _scalar(value)
    if isinstance(value, (bool, numbers.Integral)):
        return value
    if not isinstance(value, numbers.Real):
        raise ValueError(f"expected a real number, got {type(value).__name__}: {value!r}")
    x = float(value)
    if x == 0 or not math.isfinite(x):
        return 0.0 if x == 0 else x
    r = round(x, digits - 1 - math.floor(math.log10(abs(x))))
    return 0.0 if r == 0 else r


def fmt(value, spec: str = ".3g") -> str:
    """``value`` formatted once with the format ``spec`` (``".2f"``, ``".0f"``, ``".3g"``, ...),
    never as a negative zero; NaN and infinities are refused."""
    x = _finite_real(value, f"fmt({value!r}, {spec!r})")
    return _no_negative_zero(format(x, spec))


@dataclass(frozen=True)
class MeanPm:
    """A mean ± sd over seeds, formatted once: ``mean``, ``sd`` and ``text`` (``"mean ± sd"``, or
    ``"0.970 (sd < 0.001)"`` / ``"0.970 (no spread)"`` where the sd rounds to zero) are the
    strings that both a table and the prose show."""
    mean: str
    sd: str
    text: str

    def __str__(self) -> str:
        return self.text


def mean_pm(values, *, scale: float = 1.0, digits: int | None = None) -> MeanPm:
    """Mean ± sample standard deviation over seeds of ``scale * values``, with as many decimals
    as the spread supports (``seeds.decimals``: one significant digit of the sd, at most 3) unless
    ``digits`` (decimals) is given; the same strings as ``seeds.pm`` (:func:`replearn.book.seeds.pm_parts`)."""
    xs = [_finite_real(scale * float(_finite_real(v, "mean_pm value")), "mean_pm value") for v in values]
    if digits is not None and (isinstance(digits, bool) or not isinstance(digits, int)
                               or not 0 <= digits <= MAX_DIGITS):
        raise ValueError(f"mean_pm: digits (decimals) must be an int from 0 to {MAX_DIGITS}, got {digits!r}")
    return MeanPm(*pm_parts(xs, digits=digits))


def compared(a, b, *, scale: float = 1.0, unit: str = "") -> str:
    """One cell of a "paper | ours" table: how the paired values ``a`` compare with ``b`` (the same
    seeds or clients, in order) by the book's one criterion (:func:`replearn.book.seeds.compare`: the
    95% t-interval of the paired mean difference, of ``scale * (a - b)`` in ``unit``), with that
    difference and interval, e.g. ``"higher beyond the spread (+5 [+2, +8] points, 95% interval,
    n = 3)"``, ``"lower beyond the spread (...)"`` or ``"not separated (...)"``."""
    c = compare(a, b, scale=scale, unit=unit)
    word = {"holds": "higher beyond the spread", "opposite": "lower beyond the spread",
            "not separated": "not separated"}[c.outcome]
    return f"{word} ({c.text}, {LEVEL:.0%} interval, n = {c.n})" if c.n > 1 else f"{word} ({c.text})"


def _glue(name: str, value) -> None:
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ValueError(f"glue names are letters, digits, '_', '.' and '-' (no ':', which separates the "
                         f"format in {{glue:text}}), got {name!r}")
    from myst_nb import glue

    glue(name, value, display=False)


def glue_text(name: str, text: str) -> str:
    """Glue the already formatted string ``text`` under ``name`` (for ``{glue:text}`name``` with
    no format, which shows it as it is). Returns ``text``."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"glue_text({name!r}): expected a non-empty string, got {text!r}")
    if re.search(r"\b(nan|inf)\b", text, re.I):
        raise ValueError(f"glue_text({name!r}): {text!r} holds a non-finite number")
    _glue(name, text)
    return text


def glue_pm(name: str, values, *, scale: float = 1.0, digits: int | None = None) -> MeanPm:
    """Glue :func:`mean_pm` of ``values`` under ``name`` (``"mean ± sd"``), ``name-mean`` and
    ``name-sd``; returns it, so a table can show the very same strings."""
    s = mean_pm(values, scale=scale, digits=digits)
    glue_text(name, s.text)
    glue_text(f"{name}-mean", s.mean)
    glue_text(f"{name}-sd", s.sd)
    return s


def glue_diff(name: str, a, b, *, scale: float = 1.0, unit: str = ""):
    """Glue under ``name`` the paired difference of ``a`` and ``b`` (the same seeds or clients,
    in order) with its 95% t-interval, ``"+5 [+2, +8]"`` (:func:`replearn.book.seeds.compare`, the
    book's one criterion; ``scale=100, unit="points"`` for accuracies shown in %: ``"+5 [+2, +8]
    points"``); returns the :class:`~replearn.book.seeds.Comparison`, so a table shows the same
    string (``.text``) and a verdict can judge by it."""
    c = compare(a, b, scale=scale, unit=unit)
    glue_text(name, c.text)
    return c


def glue_number(name: str, value, digits: int = 3):
    """Glue ``value`` under ``name`` for ``{glue:text}`name:FORMAT``` in the prose, rounded to
    ``digits`` significant digits (format it with no more digits than that). Returns the rounded
    value. NaN and infinities are refused. Needs myst-nb (installed with the book's requirements)."""
    check_digits(digits)
    _finite_real(value, f"glue_number({name!r})")
    rounded = round_significant(value, digits)
    _glue(name, rounded)
    return rounded


def _shown(label: str, values: dict, digits: int) -> str:
    """The values a claim rests on as the reader sees them: ``(largest gap = 0.12, n = 3)``, a
    keyword's underscores read as spaces (``largest_gap`` -> "largest gap")."""
    check_digits(digits)
    shown = ", ".join(f"{name.replace('_', ' ')} = {format_value(v, digits)}" for name, v in values.items())
    return f" ({shown})" if shown else ""


def _condition(label: str, condition) -> bool:
    if not isinstance(label, str) or not label:
        raise ValueError("a claim needs a non-empty label saying what is claimed")

    if isinstance(condition, (Comparison, Joint)):
        condition = bool(condition)
    condition = _scalar(condition)
    if not isinstance(condition, bool):
        raise ValueError(f"claim {label!r}: the condition must be a bool, got {type(condition).__name__}; "
                         "reduce arrays with .all() or .any() first")
    return condition


def _non_finite(values: dict) -> list[str]:
    bad = []
    for name, v in values.items():
        v = _scalar(v)
        if isinstance(v, str) or isinstance(v, bool) or not isinstance(v, numbers.Real):
            if isinstance(v, str) and re.search(r"\bnan\b", v, re.I):
                bad.append(name)
            continue
        if math.isnan(float(v)):
            bad.append(name)
    return bad


def claim(label: str, condition, *, digits: int = 3, **values) -> None:
    """Print ``label: holds (name = value, ...)`` (a keyword's underscores shown as spaces) and raise :class:`ClaimFailed` if
    ``condition`` is false or a reported value is NaN. ``condition`` must be a bool (or a 0-d
    boolean array/tensor)."""
    condition = _condition(label, condition)
    suffix = _shown(label, values, digits)
    nan = _non_finite(values)
    if nan:
        raise ClaimFailed(f"{label}: does NOT hold: {', '.join(nan)} is NaN{suffix}")
    if not condition:
        raise ClaimFailed(f"{label}: does NOT hold{suffix}")
    print(f"{label}: holds{suffix}")


#: the outcomes :func:`verdict` recorded since the last :func:`verdict_table`
_PENDING: list[list[str]] = []


def verdict(name: str, label: str, condition, *, holds: str, fails: str, opposite: str | None = None,
            paper: str | None = None, scale: str = "CPU", require: bool = False, absence: bool = False,
            paper_difference: float | None = None, digits: int = 3, **values) -> bool:
    """Check ``condition`` and say so in the prose: add the row ``label | paper | outcome: values;
    the interval`` to the cell's verdict table (shown by :func:`verdict_table`), glue under
    ``name`` the phrase ``holds``, ``fails`` or ``opposite`` for the outcome (for
    ``{glue:text}`name``` in the sentence that states it) and under ``name-outcome`` a record that
    Appendix B collects (:func:`recorded_outcomes`).

    The outcome is one of the book's three words (:data:`replearn.book.seeds.OUTCOMES`): "holds",
    "not separated (n = k)" (a null result: never "does not hold") or "opposite". ``condition`` is

    * a :class:`replearn.book.seeds.Comparison` (what ``seeds.separated``, ``seeds.compare`` and
      ``seeds.points`` return): holds when its interval lies above 0, "opposite" below 0, else
      not separated; the row shows the very interval, in the comparison's unit (compare accuracies
      shown in % with ``seeds.points`` so that the row reads "+56 [+35, +78] points" beside a
      table in %);
    * a :class:`replearn.book.seeds.Joint` (``seeds.every`` / ``seeds.some`` of comparisons), judged
      as that class says, with each part's interval;
    * a bool, for a statement about the numbers shown (a threshold, a count): False reads "not
      separated" (with ``absence=True``: "opposite", since a claim of *no* difference fails only
      when a difference separates). Express orderings as comparisons, not as bools.

    ``fails`` is glued for "not separated", ``opposite`` (default: ``fails``) for "opposite".
    ``paper`` names the paper's claim the check tests (None for the book's own statements),
    ``scale`` the run (``"CPU"``: the stored CI-sized run; ``"long"``: a committed results file).
    With ``require=True`` an outcome other than "holds" raises :class:`ClaimFailed`, as
    :func:`claim`. A NaN among ``values`` raises :class:`ClaimFailed`: no outcome can be read from
    it. ``absence=True`` marks a claim that holds when *no* difference separates (e.g. "more
    epochs do not hurt"): Appendix B then says it holds as a claim of no difference.
    ``paper_difference``: the paper's own difference for the compared pair, **in the comparison's
    unit** (points for ``seeds.points``), with a Comparison condition: the record then says whether
    it lies inside our interval (the size reproduced, not only the direction). Returns whether the
    outcome is "holds"."""
    structured = condition if isinstance(condition, (Comparison, Joint)) else None
    held = _condition(label, condition)
    for what, phrase in (("holds", holds), ("fails", fails), ("opposite", opposite if opposite is not None else fails)):
        if not isinstance(phrase, str) or not phrase.strip():
            raise ValueError(f"verdict {name!r}: the {what} phrase must be a non-empty string")
    if holds.strip() in (fails.strip(), (opposite or fails).strip()):
        raise ValueError(f"verdict {name!r}: the holds and fails (or opposite) phrases must differ")
    if scale not in ("CPU", "long", "paper"):
        raise ValueError(f"verdict {name!r}: scale must be 'CPU', 'long' or 'paper', got {scale!r}")
    suffix = _shown(label, values, digits)
    nan = _non_finite(values)
    if nan:
        raise ClaimFailed(f"{label}: cannot be decided: {', '.join(nan)} is NaN{suffix}")
    if structured is not None:
        outcome, word, n = structured.outcome, structured.word, structured.n
    else:
        outcome = "holds" if held else "opposite" if absence else "not separated"
        word, n = outcome, None
    shown = [suffix.strip()[1:-1]] if suffix else []
    if structured is not None:
        shown.append(f"paired difference {structured.full}" if isinstance(structured, Comparison)
                     else f"paired differences {structured.full}")
    size = None
    if paper_difference is not None:
        if not isinstance(structured, Comparison):
            raise ValueError(f"verdict {name!r}: paper_difference needs a seeds.Comparison as the condition")
        size = bool(structured.lo <= _finite_real(paper_difference, "paper_difference") <= structured.hi)
        shown.append(f"the paper's {structured.signed(paper_difference)} is {'inside' if size else 'outside'} "
                     "the interval")
    _PENDING.append([label, paper or "(the book's own statement)", word + (": " + "; ".join(shown) if shown else "")])
    _glue(name, holds if outcome == "holds" else fails if outcome == "not separated" else (opposite or fails))
    _glue(f"{name}-outcome", {"claim": label, "holds": outcome == "holds", "outcome": outcome, "n": n,
                              "paper": paper, "scale": scale, "kind": "absence" if absence else "direction",
                              "size": size})
    if require and outcome != "holds":
        raise ClaimFailed(f"{label}: {word}{suffix}")
    return outcome == "holds"


def verdict_table(caption: str | None = None):
    """The verdicts recorded since the last call, as one table (claim | the paper | our run), for
    ``display``; the list is then emptied. Each cell's verdicts end with ``display(verdict_table())``."""
    rows = list(_PENDING)
    _PENDING.clear()
    if not rows:
        raise ValueError("verdict_table: no verdict recorded since the last table")
    return Table(["claim", "the paper", "our run"], rows, caption=caption, align="lll")


def recorded_outcomes(notebook) -> list[dict]:
    """The outcomes that :func:`verdict` recorded in a stored notebook (a path to an ``.ipynb``):
    one dict per verdict, ``{"name", "claim", "holds", "outcome", "n", "paper", "scale", "kind",
    "size"}``, in notebook order (``outcome``: one of ``seeds.OUTCOMES``; ``n``: the pairs it was
    decided on, None for a bool condition; ``kind``: ``"direction"`` or ``"absence"``; ``size``:
    whether the paper's difference lies in our interval, None when not checked). Records stored
    before ``outcome`` was recorded read as "holds" or "not separated".
    Reads the stored outputs only; runs nothing."""
    nb = json.loads(Path(notebook).read_text())
    found = []
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []):
            meta = out.get("metadata", {}).get("scrapbook") or {}
            key = meta.get("name", "")
            if not key.endswith("-outcome"):
                continue
            text = out.get("data", {}).get(meta.get("mime_prefix", "") + "text/plain", "")
            record = ast.literal_eval("".join(text) if isinstance(text, list) else text)
            record = {"name": key.removesuffix("-outcome"), "kind": "direction", "size": None, "n": None, **record}
            record.setdefault("outcome", "holds" if record["holds"] else "not separated")
            found.append(record)
    return found
