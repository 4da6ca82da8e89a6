from dataclasses import replace

import numpy as np
import pytest
import torch

from replearn.experiments.ch04_fedavg import s04_convergence as s04

SMALL = s04.ConvergenceSettings(d=12, k=3, M=8, alpha=0.3, rounds=300, fractions=(1.0, 0.5), seeds=2,
                                taus=(1, 2, 4), conds=(1.0, 4.0), diversity_tau=3, sweep_rounds=300, sweep_seeds=1)


def test_figure1_fedavg_learns_and_dgd_does_not():
    res = s04.figure1(SMALL)
    assert res.dist["FedAvg"].shape == (SMALL.seeds, SMALL.rounds + 1)
    assert float(res.dist["FedAvg"][:, -1].max()) < 1e-3
    assert float(res.dist["D-GD"][:, -1].min()) > 0.5
    lo, hi = res.band("FedAvg")
    assert bool((lo <= res.mean("FedAvg")).all() and (res.mean("FedAvg") <= hi).all())


def test_linear_rate_recovers_a_geometric_curve():
    t = torch.arange(200, dtype=torch.float64)
    assert s04.linear_rate(0.7 * 0.95**t) == pytest.approx(-np.log(0.95), rel=1e-10)
    assert s04.linear_rate(torch.full((50,), 0.9, dtype=torch.float64)) == pytest.approx(0.0, abs=1e-14)
    # a curve that hits the floor: only the rounds before it count
    curve = torch.clamp(0.5**t, min=1e-15)
    assert s04.linear_rate(curve) == pytest.approx(np.log(2.0), rel=1e-8)
    assert s04.roughness(0.7 * 0.95**t) < 1e-12


@pytest.mark.parametrize("bad", [torch.ones(2), torch.zeros(10), torch.ones(3, 3)])
def test_linear_rate_rejects_bad_curves(bad):
    with pytest.raises(ValueError):
        s04.linear_rate(bad.double())


def test_rate_sweep_trends():
    res = s04.rate_sweep(SMALL)
    assert res.rate_tau[0] == pytest.approx(0.0, abs=1e-10)      # tau = 1: D-GD does not move
    assert bool((torch.diff(res.rate_tau) > 0).all())               # more local steps, faster
    assert bool((torch.diff(res.rate_cond) < 0).all())              # less diversity, slower
    assert torch.allclose(res.predicted_tau, SMALL.alpha**2 * torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64))


def test_partial_participation_converges_and_is_noisier():
    res = s04.participation(SMALL)
    assert list(res.dist) == ["m = 8", "m = 4"]
    full, half = res.dist["m = 8"], res.dist["m = 4"]
    assert float(half[:, -1].max()) < 1e-3
    assert s04.roughness(full[0]) < 1e-3 < s04.roughness(half[0])


def test_settings_validation():
    with pytest.raises(ValueError, match="k < d"):
        s04.figure1(replace(SMALL, k=12))
    with pytest.raises(ValueError, match="M >= k"):
        s04.figure1(replace(SMALL, M=3))
    with pytest.raises(ValueError, match="fractions"):
        s04.participation(replace(SMALL, fractions=(0.0,)))
    with pytest.raises(ValueError, match="delta0"):
        s04.rate_sweep(replace(SMALL, delta0=1.0))
    with pytest.raises(ValueError, match="local step"):
        s04.rate_sweep(replace(SMALL, taus=(0, 2)))
    assert s04.ConvergenceSettings.profile("paper").d == 100 and s04.ConvergenceSettings.profile("paper").seeds == 10


# --------------------------------------------------------------------------- explorer

def test_explorer_curves_shapes_and_types():
    curves = s04.explorer_curves(2, 0.2, 1.0, 1.0, d=12, k=3, M=8, rounds=40)
    assert set(curves) == {"round", "FedAvg", "D-GD"}
    for key in curves:
        assert isinstance(curves[key], np.ndarray) and curves[key].shape == (41,)
    assert np.array_equal(curves["round"], np.arange(41))


@pytest.mark.parametrize("participation", [1.0, 0.5])
def test_explorer_tau_one_equals_dgd(participation):
    curves = s04.explorer_curves(1, 0.2, 3.0, participation, d=12, k=3, M=8, rounds=60, seed=2)
    assert np.array_equal(curves["FedAvg"], curves["D-GD"])


def test_explorer_fedavg_learns_and_is_deterministic():
    a = s04.explorer_curves(3, 0.3, 1.0, 1.0, d=12, k=3, M=8, rounds=200, seed=1)
    b = s04.explorer_curves(3, 0.3, 1.0, 1.0, d=12, k=3, M=8, rounds=200, seed=1)
    assert all(np.array_equal(a[key], b[key]) for key in a)
    assert a["FedAvg"][-1] < 1e-3 < 0.5 < a["D-GD"][-1]


@pytest.mark.parametrize("args", [(0, 0.2, 1.0, 1.0), (2.5, 0.2, 1.0, 1.0), (True, 0.2, 1.0, 1.0),
                                  (2, 0.0, 1.0, 1.0), (2, float("nan"), 1.0, 1.0), (2, 0.2, 0.5, 1.0),
                                  (2, 0.2, 1.0, 0.0), (2, 0.2, 1.0, 1.5)])
def test_explorer_bad_inputs_raise(args):
    with pytest.raises(ValueError):
        s04.explorer_curves(*args, d=12, k=3, M=8, rounds=10)


@pytest.mark.parametrize("kwargs", [dict(rounds=0), dict(d=3, k=3), dict(M=3), dict(seed=-1)])
def test_explorer_bad_sizes_raise(kwargs):
    with pytest.raises(ValueError):
        s04.explorer_curves(2, 0.2, 1.0, 1.0, **{"d": 12, "k": 3, "M": 8, "rounds": 10, **kwargs})


def test_explorer_divergence_raises():
    with pytest.raises(ValueError, match="diverged"):
        s04.explorer_curves(2, 5.0, 1.0, 1.0, d=12, k=3, M=8, rounds=40)


def test_explorer_widget_builds_and_rejects_unknown_settings():
    pytest.importorskip("ipywidgets")
    panel = s04.explorer(tau=3)
    assert len(panel.children) == 3
    assert len(panel.children[2].outputs) == 1
    with pytest.raises(ValueError, match="unknown"):
        s04.explorer(beta=0.1)


def test_rate_table_numbers_and_figure():
    import matplotlib.pyplot as plt

    sweep = s04.rate_sweep(SMALL)
    lines = s04.rate_table(sweep, SMALL.alpha).splitlines()
    assert lines[0].split() == ["tau", "cond", "mu^2", "measured", "rate", "alpha^2", "tau", "mu^2", "ratio"]
    assert len(lines) == 1 + len(sweep.taus) + len(sweep.conds)
    numbers = s04.rate_numbers(sweep, SMALL.alpha)
    assert list(numbers)[:6] == ["ratio-tau-min", "ratio-tau-max", "ratio-tau-last", "ratio-cond-min",
                                 "ratio-cond-max", "a2tau-last"]
    assert numbers["tau-last"] == sweep.taus[-1] and numbers["a2tau-last"] == round(SMALL.alpha**2 * sweep.taus[-1], 2)
    fig = s04.plot_rates(sweep, SMALL.sweep_rounds, slope_scale=1.0)
    assert len(fig.axes) == 2
    plt.close(fig)
