import math

import numpy as np
import pytest
import torch

from replearn.theory import rates


def test_geometric_curve_gives_its_rate_and_constant_exactly():
    t = torch.arange(60, dtype=torch.float64)
    C, rho = 0.7, 0.93
    fit = rates.log_linear_fit(t, C * rho**t)
    assert fit.slope == pytest.approx(math.log(rho), rel=1e-12)
    assert fit.intercept == pytest.approx(math.log(C), rel=1e-12)
    assert fit.r2 == pytest.approx(1.0, abs=1e-12) and fit.points == 60
    assert rates.linear_rate(C * rho**t) == pytest.approx(-math.log(rho), rel=1e-12)


def test_fit_agrees_with_numpy_least_squares_on_noisy_data():
    rng = np.random.default_rng(0)
    x = np.sort(rng.uniform(0, 10, 40))
    values = 2.0 * np.exp(-0.3 * x + 0.2 * rng.standard_normal(40))
    slope, intercept = np.polyfit(x, np.log(values), 1)
    residual = np.log(values) - (slope * x + intercept)
    r2 = 1 - (residual**2).sum() / ((np.log(values) - np.log(values).mean()) ** 2).sum()
    fit = rates.log_linear_fit(x, values)
    assert fit.slope == pytest.approx(slope, rel=1e-10)
    assert fit.intercept == pytest.approx(intercept, rel=1e-10)
    assert fit.r2 == pytest.approx(r2, rel=1e-10) and 0.5 < fit.r2 < 1.0


def test_window_keeps_only_the_linear_phase():
    t = np.arange(300.0)
    # transient at rate 0.2 above 0.1, linear phase at rate 0.15 from 0.09, rounding floor at 1e-13
    dist = np.maximum(np.where(t < 10, np.exp(-0.2 * t), 0.09 * np.exp(-0.15 * (t - 10))), 1e-13)
    inside = (dist > 1e-12) & (dist < 0.1)
    fit = rates.log_linear_fit(t, dist, low=1e-12, high=0.1)
    assert fit.points == int(inside.sum())
    assert fit.slope == pytest.approx(np.polyfit(t[inside], np.log(dist[inside]), 1)[0], rel=1e-10)
    assert rates.linear_rate(dist, low=1e-12, high=0.1) == pytest.approx(0.15, rel=1e-10)
    assert rates.linear_rate(dist) < 0.12  # the whole curve, floor included, is slower on average
    # only an upper end: the floor stays in the fit
    assert rates.log_linear_fit(t, dist, high=0.1).points == int((dist < 0.1).sum())


def test_low_zero_drops_exact_zeros_and_flat_curves_have_rate_zero():
    dist = np.array([0.5, 0.25, 0.125, 0.0, 0.0])
    assert rates.linear_rate(dist, low=0.0) == pytest.approx(math.log(2.0), rel=1e-12)
    flat = rates.log_linear_fit(np.arange(5.0), np.full(5, 0.3))
    assert flat.slope == 0.0 and flat.r2 == 1.0


def test_loglog_slope_is_the_power_law_exponent():
    x = torch.tensor([1.0, 2.0, 4.0, 8.0, 16.0], dtype=torch.float64)
    assert rates.loglog_slope(x, 3 * x**0.5) == pytest.approx(0.5, rel=1e-12)
    assert rates.loglog_slope([10, 100, 1000], [1.0, 0.01, 0.0001]) == pytest.approx(-2.0, rel=1e-12)
    assert rates.loglog_slope(x.float(), (3 * x**2).float()) == pytest.approx(2.0, rel=1e-6)


@pytest.mark.parametrize("call, match", [
    (lambda: rates.log_linear_fit([0, 1, 2], [1.0, 0.5]), "same length"),
    (lambda: rates.log_linear_fit([0, 1, 2], [1.0, float("nan"), 0.2]), "NaN"),
    (lambda: rates.log_linear_fit(np.zeros((2, 2)), np.ones((2, 2))), "1-D"),
    (lambda: rates.log_linear_fit([0, 1, 2], [1.0, -1.0, 2.0]), "positive"),
    (lambda: rates.log_linear_fit([0, 1, 2], [1.0, 0.5, 0.2], min_points=1), "min_points"),
    (lambda: rates.log_linear_fit([0, 1, 2], [1.0, 0.5, 0.2], min_points=4), "only 3 points"),
    (lambda: rates.log_linear_fit([0, 1, 2], [1.0, 0.5, 0.2], low=0.1, high=0.01), "low < high"),
    (lambda: rates.log_linear_fit([0, 1, 2], [1.0, 0.5, 0.2], low=-1.0), "low"),
    (lambda: rates.log_linear_fit([1, 1, 1], [1.0, 0.5, 0.2]), "one x value"),
    (lambda: rates.linear_rate([1.0, 0.5, 0.2, 0.1], high=0.15), "only 1 points"),
    (lambda: rates.loglog_slope([0.0, 1.0, 2.0], [1.0, 2.0, 3.0]), "x must be positive"),
    (lambda: rates.loglog_slope([1.0, 2.0, 3.0], [1.0, -1.0, 2.0]), "positive"),
    (lambda: rates.loglog_slope([1.0, 2.0], "ab"), "numbers"),
])
def test_bad_input_raises_with_a_hint(call, match):
    with pytest.raises(ValueError, match=match):
        call()
