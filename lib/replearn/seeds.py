"""Experiments repeated over seeds: run once per seed, report mean ± standard deviation, and
decide when a difference exceeds the spread.

The book's neural sections print every result as ``mean ± sd`` over the seeds of their settings
(:func:`pm`, with as many decimals as the spread supports) and assert a paper's ordering only
when :func:`separated` holds: the means differ by more than the sum of the two standard
deviations.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from .checks import check_seed

__all__ = ["check_seeds", "decimals", "mean_sd", "over_seeds", "pm", "separated"]


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


def separated(a, b) -> bool:
    """True when the mean of ``a`` exceeds the mean of ``b`` by more than the sum of their
    standard deviations over seeds (the criterion for asserting an ordering in the book)."""
    (ma, sa), (mb, sb) = mean_sd(a), mean_sd(b)
    return ma - mb > sa + sb
