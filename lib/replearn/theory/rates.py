"""Rates and slopes of measured curves: one least-squares line through log-values.

Every rate the book measures is the slope of a straight line in a log scale:

- a curve that contracts linearly, ``dist_t = C rho^t``, satisfies ``log dist_t = log C + t log rho``;
  its empirical linear rate is ``-log rho``, minus the least-squares slope of ``log dist_t``
  against ``t`` over the linear phase (:func:`linear_rate`). This is the quantity that the main
  theorem of Collins, Mokhtari, Oh & Shakkottai (ICML 2022) bounds below by
  ``Omega(beta alpha mu_*^2)`` for MAML/ANIL, Theorem 1 of Collins et al. (2022) by
  ``alpha^2 tau mu^2 E_0`` for FedAvg, and Theorem 1 of Collins, Hassani, Mokhtari &
  Shakkottai (ICML 2021) by ``-1/2 log(1 - eta E_0 sigma_min^2 / 2)`` for FedRep;
- a power law ``y = C x^p`` satisfies ``log y = log C + p log x``; its exponent is the slope of
  ``log y`` against ``log x`` (:func:`loglog_slope`), e.g. ``p = 1/2`` for the
  ``O(sqrt(m))`` regret of online gradient descent (Khodak, Balcan & Talwalkar 2019).

:func:`log_linear_fit` is the one fitter behind both: ordinary least squares of
``log(values)`` on ``x``,

    slope = sum_j (x_j - xbar)(l_j - lbar) / sum_j (x_j - xbar)^2,    l_j = log values_j,

over the points whose value lies strictly inside an optional window ``(low, high)`` (the
linear phase: above the rounding floor, below the transient), with the intercept
``lbar - slope xbar`` and the coefficient of determination R^2 of the fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from replearn.backend import DTYPE
from replearn.checks import check_int, check_number

__all__ = ["LogLinearFit", "log_linear_fit", "linear_rate", "loglog_slope"]


@dataclass(frozen=True)
class LogLinearFit:
    """The line ``log(value) = intercept + slope x`` fitted to ``points`` points, and its R^2
    (1 for points exactly on a line, including a constant curve)."""

    slope: float
    intercept: float
    r2: float
    points: int


def _as_curve(values, name: str) -> torch.Tensor:
    """A 1-D float64 CPU tensor of finite entries."""
    try:
        t = torch.as_tensor(values, dtype=DTYPE).detach().cpu()
    except (TypeError, ValueError, RuntimeError) as err:
        raise ValueError(f"{name} must be a 1-D array of numbers, got {values!r}") from err
    if t.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array (one value per point), got shape {tuple(t.shape)}")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} contains NaN or infinite values: a diverged run has no rate; "
                         "check the run or cut the curve before the bad entries")
    return t


def log_linear_fit(x, values, *, low: float | None = None, high: float | None = None,
                   min_points: int = 2) -> LogLinearFit:
    """Least-squares line through ``log(values)`` against ``x`` over the points with
    ``low < value < high`` (module docstring).

    ``x`` and ``values`` are 1-D arrays of the same length. Without ``low`` every value must be
    positive (its logarithm is taken); with ``low >= 0`` the points at or below it are left
    out, as are those at or above ``high`` when it is given. Raises ``ValueError`` if the
    inputs are not finite or do not match, or if fewer than ``min_points`` points (at least 2)
    with distinct x qualify (run longer or widen the window).
    """
    x = _as_curve(x, "x")
    values = _as_curve(values, "values")
    if x.shape != values.shape:
        raise ValueError(f"x and values must have the same length, got {x.shape[0]} and {values.shape[0]}")
    min_points = check_int(min_points, "min_points (points a fit needs, at least 2)", 2)
    if low is not None:
        low = check_number(low, "low (the window's lower end, >= 0)", low=0.0)
    if high is not None:
        high = check_number(high, "high (the window's upper end)", low=0.0, low_open=True)
    if low is not None and high is not None and not low < high:
        raise ValueError(f"the window needs low < high, got low={low}, high={high}")
    if low is None and not bool((values > 0).all()):
        raise ValueError("values must be positive to take their logarithm; pass low=0 (or a positive "
                         "floor) to leave out the points at or below it")
    mask = values > (0.0 if low is None else low)
    if high is not None:
        mask = mask & (values < high)
    count = int(mask.sum())
    if count < min_points:
        window = f"{0.0 if low is None else low} < value" + ("" if high is None else f" < {high}")
        raise ValueError(f"only {count} points have {window} (need {min_points}): run more iterations "
                         "or widen the window")
    xs, logs = x[mask], values[mask].log()
    xc, lc = xs - xs.mean(), logs - logs.mean()
    sxx = (xc * xc).sum()
    if float(sxx) == 0.0:
        raise ValueError(f"the {count} points of the fit share one x value: a slope needs at least two")
    slope = (xc * lc).sum() / sxx
    total = float(lc.square().sum())
    r2 = 1.0 - float((lc - slope * xc).square().sum() / lc.square().sum()) if total > 0 else 1.0
    return LogLinearFit(slope=float(slope), intercept=float(logs.mean() - slope * xs.mean()), r2=r2, points=count)


def linear_rate(dist, *, low: float | None = None, high: float | None = None, min_points: int = 2) -> float:
    """The empirical linear rate of a curve ``dist_t``, t = 0, 1, ...: minus the least-squares
    slope of ``log dist_t`` against ``t`` over the iterates with ``low < dist_t < high``
    (:func:`log_linear_fit`). A curve ``C rho^t`` has rate ``-log rho``; a flat one has rate 0."""
    dist = _as_curve(dist, "dist")
    return -log_linear_fit(torch.arange(dist.shape[0], dtype=DTYPE), dist, low=low, high=high,
                           min_points=min_points).slope


def loglog_slope(x, y) -> float:
    """The exponent p of a power law ``y = C x^p``: the least-squares slope of ``log y`` against
    ``log x`` over all points (both positive, at least two distinct x)."""
    x = _as_curve(x, "x")
    if not bool((x > 0).all()):
        raise ValueError("x must be positive to take its logarithm")
    return log_linear_fit(x.log(), y).slope
