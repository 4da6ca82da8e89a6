"""Experiments repeated over seeds: run once per seed, report mean ± standard deviation, and
decide when a difference exceeds the spread.

The book's neural sections print every result as ``mean ± sd`` over the seeds of their settings
(:func:`pm`, with as many decimals as the spread supports) and judge a paper's ordering by one
rule, :func:`compare` (and :func:`separated`, the same): the **95% t-interval of the paired
mean difference**. With ``d_k = a_k - b_k`` for the ``n`` paired values (seeds, or the clients
of one run), the interval is ``mean(d) ± t_{0.975, n-1} sd(d) / sqrt(n)``, and ``a`` is above
``b`` "beyond the spread" when the whole interval lies above 0. It is the textbook paired
t-test at the 5% level, two-sided, so a reader can check it from the mean, the standard
deviation and the count of the differences; with 2 or 3 seeds it is demanding (``t`` is 12.7
and 4.3), which is the honest price of few repetitions. Over the clients of one run it says
whether the clients agree, not whether another seed would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from replearn.checks import check_seed

__all__ = ["OUTCOMES", "Comparison", "Joint", "check_seeds", "compare", "decimals", "every", "mean_sd", "over_seeds",
           "pm", "pm_parts", "points", "separated", "some"]

LEVEL = 0.95  # the confidence level of every interval the book prints


def check_seeds(seeds) -> tuple[int, ...]:
    """``seeds`` must be a non-empty tuple of distinct non-negative ints; returns it."""
    if not isinstance(seeds, tuple) or not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be a non-empty tuple of distinct ints, got {seeds!r}")
    for k in seeds:
        check_seed(k, "seeds")
    return seeds


def over_seeds(run, s, **kwargs) -> list:
    """``run(replace(s, seed=k), **kwargs)`` for every ``k`` in ``s.seeds``: one result per seed
    (each seed draws its own partition, initial network, batches and new clients)."""
    check_seeds(s.seeds)
    return [run(replace(s, seed=k), **kwargs) for k in s.seeds]


def mean_sd(values) -> tuple[float, float]:
    """Mean and sample standard deviation (``ddof = 1``; 0 for a single value) of ``values``
    (one number per seed), as Python floats."""
    x = torch.as_tensor([float(v) for v in values], dtype=torch.float64)
    if x.numel() == 0 or not bool(torch.isfinite(x).all()):
        raise ValueError(f"mean_sd needs finite values, got {list(values)!r}")
    return float(x.mean()), (float(x.std()) if x.numel() > 1 else 0.0)


def decimals(sd: float, *, most: int = 3) -> int:
    """Decimals that show the standard deviation ``sd`` with one significant digit (at most
    ``most``; 0 for ``sd >= 1``): the precision the spread over seeds supports."""
    if not sd > 0:
        return most
    return max(0, min(most, -math.floor(math.log10(sd))))


def _unsigned_zero(text: str) -> str:
    """``"-0.00"`` -> ``"0.00"``: a value that rounds to zero has no sign."""
    return text[1:] if text.startswith("-") and not any(c in "123456789" for c in text) else text


def pm_parts(values, *, scale: float = 1.0, digits: int | None = None) -> tuple[str, str, str]:
    """``(mean, sd, text)`` over seeds of ``scale * values``, rounded by :func:`decimals` unless
    ``digits`` (decimals) is given, never as a negative zero. ``text`` is ``"mean ± sd"``; an sd
    that the decimals round to zero is never printed as ``"± 0.000"``: a nonzero one reads
    ``"0.970 (sd < 0.001)"`` (sd ``"< 0.001"``), an exact zero ``"0.970 (no spread)"`` (sd
    ``"0"``), a single value ``"0.970 (one value)"``."""
    xs = [scale * float(v) for v in values]
    m, sd = mean_sd(xs)
    d = decimals(sd) if digits is None else digits
    mean = _unsigned_zero(f"{m:.{d}f}")
    if len(xs) == 1:
        return mean, "0", f"{mean} (one value)"
    if sd == 0:
        return mean, "0", f"{mean} (no spread)"
    if float(f"{sd:.{d}f}") == 0:
        bound = f"< {10.0 ** -d:.{d}f}" if d > 0 else "< 1"
        return mean, bound, f"{mean} (sd {bound})"
    sd_text = f"{sd:.{d}f}"
    return mean, sd_text, f"{mean} ± {sd_text}"


def pm(values, *, scale: float = 1.0, digits: int | None = None) -> str:
    """``"mean ± sd"`` over seeds of ``scale * values``, rounded by :func:`decimals` unless
    ``digits`` is given (the text of :func:`pm_parts`)."""
    return pm_parts(values, scale=scale, digits=digits)[2]


#: the whole vocabulary of a checked comparison: ``a`` above ``b`` beyond the spread, the reverse
#: beyond the spread, or neither (a null result: "not separated (n = 3)", never "does not hold")
OUTCOMES = ("holds", "not separated", "opposite")

#: how far :meth:`Comparison.decimals` widens the decimals so that a nonzero number shows its sign
MOST_DECIMALS = 12
#: how many decimals beyond its bounds' a comparison's mean may take to show its sign
MEAN_EXTRA = 2


def _signed(x: float, d: int) -> str:
    """``x`` with ``d`` decimals and an explicit sign; a number that rounds to zero even then (an exact
    zero, or rounding noise below :data:`MOST_DECIMALS`) is ``"0"``, with no sign."""
    return "0" if float(f"{x:.{d}f}") == 0 else f"{x:+.{d}f}"


@dataclass(frozen=True)
class Comparison:
    """The paired comparison of ``a`` with ``b``: ``n`` pairs, the mean difference ``mean`` and
    its 95% t-interval [``lo``, ``hi``] (infinite for one pair), in the unit ``unit`` of the table
    it belongs to (``"points"`` for accuracies in %, ``""`` for a plain number). True (``bool``)
    when ``a`` is above ``b`` beyond the spread: ``lo > 0``; :attr:`outcome` is one of
    :data:`OUTCOMES`. :attr:`text` and :attr:`full` show the difference and the interval with the
    decimals its half-width supports (one significant digit), widened until every nonzero number
    among them shows a nonzero digit, so that the sign a verdict depends on is always visible."""

    n: int
    mean: float
    lo: float
    hi: float
    unit: str = ""

    def __bool__(self) -> bool:
        return self.lo > 0

    @property
    def outcome(self) -> str:
        """``"holds"`` (``lo > 0``), ``"opposite"`` (``hi < 0``) or ``"not separated"``."""
        return "holds" if self.lo > 0 else "opposite" if self.hi < 0 else "not separated"

    @property
    def word(self) -> str:
        """:attr:`outcome` as a verdict prints it: a null result names its count,
        ``"not separated (n = 3)"``."""
        return f"not separated (n = {self.n})" if self.outcome == "not separated" else self.outcome

    def decimals(self, *extra: float) -> int:
        """The decimals of :attr:`text`'s bounds: one significant digit of the half-width (at most
        3), then more until both bounds and any of ``extra`` that is nonzero shows a nonzero digit
        (at most :data:`MOST_DECIMALS`)."""
        d = decimals((self.hi - self.lo) / 2) if self.n > 1 else 3
        for x in (self.lo, self.hi, *extra):
            while math.isfinite(x) and x != 0 and float(f"{x:.{d}f}") == 0 and d < MOST_DECIMALS:
                d += 1
        return d

    def mean_decimals(self) -> int:
        """The decimals of :attr:`text`: the bounds' (:meth:`decimals`), widened by at most
        :data:`MEAN_EXTRA` so that a small nonzero mean shows its sign; a mean still zero at that
        precision (rounding noise next to an interval many times wider) prints as ``"0"``."""
        bounds = d = self.decimals()
        most = d + MEAN_EXTRA if self.n > 1 else MOST_DECIMALS
        while math.isfinite(self.mean) and self.mean != 0 and float(f"{self.mean:.{d}f}") == 0 and d < most:
            d += 1
        return d if float(f"{self.mean:.{d}f}") != 0 else bounds

    def signed(self, x: float) -> str:
        """``x`` (a number in this comparison's unit) as :attr:`text` prints it, with the unit."""
        return _signed(x, self.decimals(x)) + (f" {self.unit}" if self.unit else "")

    @property
    def text(self) -> str:
        """The mean difference and its interval, for prose and table cells: ``"+5 [+2, +8]"``, with
        the unit when there is one: ``"+56 [+35, +78] points"``."""
        unit = f" {self.unit}" if self.unit else ""
        if self.n < 2:
            return f"{_signed(self.mean, self.mean_decimals())}{unit} (one pair: no interval)"
        d = self.mean_decimals()   # the bounds' decimals, or the mean's where it needs (a few) more
        return f"{_signed(self.mean, d)} [{_signed(self.lo, d)}, {_signed(self.hi, d)}]{unit}"

    @property
    def full(self) -> str:
        """:attr:`text` with what the brackets are: ``"+56 [+35, +78] points (95% interval, n = 3)"``."""
        if self.n < 2:
            return self.text
        return f"{self.text} ({LEVEL:.0%} interval, n = {self.n})"

    def __str__(self) -> str:
        return self.full


@dataclass(frozen=True)
class Joint:
    """Several comparisons judged together: ``mode="every"`` (each must hold: holds when all do,
    "opposite" when any is opposite, else "not separated") or ``mode="some"`` (at least one must
    hold: holds when any does, "opposite" when all are opposite, else "not separated"). Built by
    :func:`every` and :func:`some`; a verdict shows each part's interval."""

    parts: tuple
    mode: str

    def __post_init__(self):
        if self.mode not in ("every", "some"):
            raise ValueError(f"Joint: mode must be 'every' or 'some', got {self.mode!r}")
        if not self.parts or not all(isinstance(p, Comparison) for p in self.parts):
            raise ValueError("Joint: parts must be a non-empty sequence of seeds.Comparison "
                             "(what seeds.compare and seeds.separated return)")

    @property
    def n(self) -> int:
        """The smallest count of pairs among the parts."""
        return min(p.n for p in self.parts)

    @property
    def outcome(self) -> str:
        words = [p.outcome for p in self.parts]
        strict, loose = (all, any) if self.mode == "every" else (any, all)
        if strict(w == "holds" for w in words):
            return "holds"
        if loose(w == "opposite" for w in words):
            return "opposite"
        return "not separated"

    @property
    def word(self) -> str:
        return f"not separated (n = {self.n})" if self.outcome == "not separated" else self.outcome

    def __bool__(self) -> bool:
        return self.outcome == "holds"

    @property
    def full(self) -> str:
        return "; ".join(p.full for p in self.parts)


def every(comparisons) -> Joint:
    """The comparisons judged together, each of which must hold (see :class:`Joint`)."""
    return Joint(tuple(comparisons), "every")


def some(comparisons) -> Joint:
    """The comparisons judged together, at least one of which must hold (see :class:`Joint`)."""
    return Joint(tuple(comparisons), "some")


def compare(a, b, *, scale: float = 1.0, unit: str = "") -> Comparison:
    """The paired comparison of the values ``a`` with ``b`` (the same seeds or clients, in order),
    times ``scale``: the mean of ``d = scale * (a - b)`` and its 95% t-interval (see the module
    docstring), reported in ``unit``. Accuracies stored as fractions and shown in % are compared
    with ``scale=100, unit="points"`` (or :func:`points`), so the difference is in the table's
    unit. One pair gives an infinite interval (never separated)."""
    from scipy.stats import t as student_t

    if not isinstance(unit, str):
        raise ValueError(f"compare: unit must be a string (e.g. 'points'), got {unit!r}")
    a, b = [float(v) for v in a], [float(v) for v in b]
    if len(a) != len(b) or not a:
        raise ValueError(f"compare needs the same number (>= 1) of paired values on both sides, got "
                         f"{len(a)} and {len(b)}")
    m, sd = mean_sd([scale * (x - y) for x, y in zip(a, b)])
    n = len(a)
    if n < 2:
        return Comparison(1, m, -math.inf, math.inf, unit)
    half = float(student_t.ppf(0.5 + LEVEL / 2, n - 1)) * sd / math.sqrt(n)
    return Comparison(n, m, m - half, m + half, unit)


def points(a, b) -> Comparison:
    """:func:`compare` of accuracies ``a`` and ``b`` given as fractions, in percentage points
    (``scale=100, unit="points"``): the unit of a table that shows accuracies in %."""
    return compare(a, b, scale=100, unit="points")


def separated(a, b, *, scale: float = 1.0, unit: str = "") -> Comparison:
    """:func:`compare` of ``a`` with ``b``: true when ``a`` is above ``b`` beyond the spread (the
    95% t-interval of the paired mean difference lies above 0), the book's one criterion for an
    ordering. Returns the :class:`Comparison`, so that :func:`replearn.book.claims.verdict` prints the
    interval it judged by (in ``unit`` after ``scale``: pass ``scale=100, unit="points"`` for
    accuracies shown in %)."""
    return compare(a, b, scale=scale, unit=unit)
