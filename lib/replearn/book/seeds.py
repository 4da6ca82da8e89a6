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

__all__ = ["Comparison", "check_seeds", "compare", "decimals", "mean_sd", "over_seeds", "pm", "separated"]

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


def pm(values, *, scale: float = 1.0, digits: int | None = None) -> str:
    """``"mean ± sd"`` over seeds of ``scale * values``, rounded by :func:`decimals` unless
    ``digits`` is given."""
    m, sd = mean_sd([scale * float(v) for v in values])
    d = decimals(sd) if digits is None else digits
    return f"{m:.{d}f} ± {sd:.{d}f}"


@dataclass(frozen=True)
class Comparison:
    """The paired comparison of ``a`` with ``b``: ``n`` pairs, the mean difference ``mean`` and
    its 95% t-interval [``lo``, ``hi``] (infinite for one pair). True (``bool``) when ``a`` is
    above ``b`` beyond the spread: ``lo > 0``. :attr:`text` and :attr:`full` show the difference
    and the interval with the decimals its half-width supports (one significant digit)."""

    n: int
    mean: float
    lo: float
    hi: float

    def __bool__(self) -> bool:
        return self.lo > 0

    def _signed(self, x: float) -> str:
        text = f"{x:+.{decimals((self.hi - self.lo) / 2)}f}"
        return text.lstrip("+-") if float(text) == 0 else text   # no signed zero

    @property
    def text(self) -> str:
        """The mean difference and its interval, for prose and table cells: ``"+5 [+2, +8]"``."""
        if self.n < 2:
            return f"{self.mean:+.3g} (one pair: no interval)"
        return f"{self._signed(self.mean)} [{self._signed(self.lo)}, {self._signed(self.hi)}]"

    @property
    def full(self) -> str:
        """:attr:`text` with what the brackets are: ``"+5, 95% interval [+2, +8], n = 3"``."""
        if self.n < 2:
            return self.text
        return f"{self._signed(self.mean)}, {LEVEL:.0%} interval [{self._signed(self.lo)}, {self._signed(self.hi)}], n = {self.n}"

    def __str__(self) -> str:
        return self.full


def compare(a, b, *, scale: float = 1.0) -> Comparison:
    """The paired comparison of the values ``a`` with ``b`` (the same seeds or clients, in order),
    times ``scale``: the mean of ``d = scale * (a - b)`` and its 95% t-interval (see the module
    docstring). One pair gives an infinite interval (never separated)."""
    from scipy.stats import t as student_t

    a, b = [float(v) for v in a], [float(v) for v in b]
    if len(a) != len(b) or not a:
        raise ValueError(f"compare needs the same number (>= 1) of paired values on both sides, got "
                         f"{len(a)} and {len(b)}")
    m, sd = mean_sd([scale * (x - y) for x, y in zip(a, b)])
    n = len(a)
    if n < 2:
        return Comparison(1, m, -math.inf, math.inf)
    half = float(student_t.ppf(0.5 + LEVEL / 2, n - 1)) * sd / math.sqrt(n)
    return Comparison(n, m, m - half, m + half)


def separated(a, b) -> Comparison:
    """:func:`compare` of ``a`` with ``b``: true when ``a`` is above ``b`` beyond the spread (the
    95% t-interval of the paired mean difference lies above 0), the book's one criterion for an
    ordering. Returns the :class:`Comparison`, so that :func:`replearn.book.claims.verdict` prints the
    interval it judged by."""
    return compare(a, b)
