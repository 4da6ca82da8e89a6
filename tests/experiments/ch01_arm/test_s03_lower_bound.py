from dataclasses import replace

import numpy as np
import pytest
import torch

from replearn.experiments.ch01_arm import s03_lower_bound as s03

SMALL = s03.LowerBoundSweepSettings(instances=40, d_max=12, k_max=4, n_max=12, T_max=60)


def test_sweep_shapes_and_ranges():
    res = s03.run_sweep(SMALL)
    fields = ("d", "k", "n", "delta", "beta", "T", "dist_T", "min_dist")
    for name in fields:
        assert getattr(res, name).shape == (40,)
    assert bool((res.k >= 2).all() and (res.k < res.d).all() and (res.n > res.k).all())
    assert bool((res.delta > 0).all() and (res.delta <= 0.5).all() and (res.beta > 0).all())
    assert bool((res.T >= 1).all() and (res.T <= 60).all())
    assert bool((res.min_dist <= res.dist_T + 1e-15).all())


def test_sweep_never_beats_delta():
    res = s03.run_sweep(SMALL)
    assert float(res.ratio_T.min()) >= 1 - 1e-8
    assert float(res.ratio_min.min()) >= 1 - 1e-8


def test_sweep_is_reproducible_and_seed_dependent():
    a, b = s03.run_sweep(SMALL), s03.run_sweep(SMALL)
    assert torch.equal(a.dist_T, b.dist_T) and torch.equal(a.d, b.d)
    c = s03.run_sweep(replace(SMALL, seed=1))
    assert not torch.equal(a.delta, c.delta)


@pytest.mark.parametrize("bad", [dict(instances=0), dict(d_min=2), dict(d_max=2), dict(k_max=1),
                                 dict(n_max=2), dict(T_max=0), dict(cond_max=0.5),
                                 dict(step_fraction=(0.5, 0.1)), dict(step_fraction=(0.1, 1.0)),
                                 dict(seed=-1)])
def test_settings_validation(bad):
    with pytest.raises(ValueError):
        s03.run_sweep(replace(SMALL, **bad))


def test_paper_profile_is_larger():
    paper = s03.LowerBoundSweepSettings.profile("paper")
    paper.validate()
    assert paper.instances > SMALL.instances and paper.d_max > s03.LowerBoundSweepSettings().d_max


# --------------------------------------------------------------------------- explorer

def test_explorer_curves_keys_and_shapes():
    curves = s03.explorer_curves(0.3, 0.3, 50, 4.0)
    assert set(curves) == {"iteration", "ARM", "FedAvg"}
    for name in curves:
        assert isinstance(curves[name], np.ndarray) and curves[name].shape == (51,)
    assert np.array_equal(curves["iteration"], np.arange(51))


@pytest.mark.parametrize("delta", [0.1, 0.45, 0.9])
def test_explorer_arm_curve_is_constant_at_delta(delta):
    curves = s03.explorer_curves(delta, 0.3, 100, 10.0, seed=3)
    assert np.abs(curves["ARM"] - delta).max() < 1e-8


def test_explorer_fedavg_curve_decreases_to_zero():
    fed = s03.explorer_curves(0.3, 0.3, 200, 4.0)["FedAvg"]
    assert fed[0] == pytest.approx(0.3, abs=1e-12)
    assert np.all(np.diff(fed[:50]) < 0)
    assert fed[-1] < 1e-3


def test_explorer_curves_are_deterministic():
    a = s03.explorer_curves(0.3, 0.2, 30, 2.0, seed=5)
    b = s03.explorer_curves(0.3, 0.2, 30, 2.0, seed=5)
    assert all(np.array_equal(a[key], b[key]) for key in a)


@pytest.mark.parametrize("delta", [0.0, 1.0, -0.2, 1.5])
def test_explorer_delta_outside_unit_interval_raises(delta):
    with pytest.raises(ValueError, match="delta"):
        s03.explorer_curves(delta, 0.3, 10, 1.0)


def test_explorer_bad_horizon_and_k_raise():
    with pytest.raises(ValueError, match="T"):
        s03.explorer_curves(0.3, 0.3, 0, 1.0)
    with pytest.raises(ValueError, match="k"):
        s03.explorer_curves(0.3, 0.3, 10, 1.0, k=1)


def test_explorer_divergent_fedavg_step_raises():
    with pytest.raises(ValueError, match="diverged"):
        s03.explorer_curves(0.3, 50.0, 100, 1.0)


def test_explorer_builds_and_rejects_unknown_settings():
    import ipywidgets

    panel = s03.explorer(delta=0.2, T=20)
    assert isinstance(panel, ipywidgets.VBox)
    shown = panel._repr_mimebundle_()["text/plain"]  # what a notebook stores (nbval compares it)
    assert "VBox" in shown and " at 0x" not in shown
    with pytest.raises(ValueError, match="unknown"):
        s03.explorer(alpha=0.1)


def test_explorer_redraws_into_its_output(monkeypatch):
    panel = s03.explorer(T=20)
    out, delta_slider = panel.children[-1], panel.children[0].children[0]
    assert len(out.outputs) == 1 and "image/png" in out.outputs[0]["data"]
    first = out.outputs[0]["data"]["image/png"]
    delta_slider.value = 0.6
    assert len(out.outputs) == 1 and out.outputs[0]["data"]["image/png"] != first

    def diverge(*args, **kwargs):
        raise ValueError("the iterates diverged by round 3")

    monkeypatch.setattr(s03, "explorer_curves", diverge)
    delta_slider.value = 0.4
    assert len(out.outputs) == 1 and "diverged by round 3" in out.outputs[0]["text"]
