import numpy as np
import pytest

from replearn.widgets import arm_explorer, arm_explorer_curves


def test_curves_keys_and_shapes():
    curves = arm_explorer_curves(0.3, 0.3, 50, 4.0)
    assert set(curves) == {"iteration", "ARM", "FedAvg"}
    for name in curves:
        assert isinstance(curves[name], np.ndarray) and curves[name].shape == (51,)
    assert np.array_equal(curves["iteration"], np.arange(51))


@pytest.mark.parametrize("delta", [0.1, 0.45, 0.9])
def test_arm_curve_is_constant_at_delta(delta):
    curves = arm_explorer_curves(delta, 0.3, 100, 10.0, seed=3)
    assert np.abs(curves["ARM"] - delta).max() < 1e-8


def test_fedavg_curve_decreases_to_zero():
    fed = arm_explorer_curves(0.3, 0.3, 200, 4.0)["FedAvg"]
    assert fed[0] == pytest.approx(0.3, abs=1e-12)
    assert np.all(np.diff(fed[:50]) < 0)
    assert fed[-1] < 1e-3


def test_curves_are_deterministic():
    a = arm_explorer_curves(0.3, 0.2, 30, 2.0, seed=5)
    b = arm_explorer_curves(0.3, 0.2, 30, 2.0, seed=5)
    assert all(np.array_equal(a[key], b[key]) for key in a)


@pytest.mark.parametrize("delta", [0.0, 1.0, -0.2, 1.5])
def test_delta_outside_unit_interval_raises(delta):
    with pytest.raises(ValueError, match="delta"):
        arm_explorer_curves(delta, 0.3, 10, 1.0)


def test_bad_horizon_and_k_raise():
    with pytest.raises(ValueError, match="T"):
        arm_explorer_curves(0.3, 0.3, 0, 1.0)
    with pytest.raises(ValueError, match="k"):
        arm_explorer_curves(0.3, 0.3, 10, 1.0, k=1)


def test_divergent_fedavg_step_raises():
    with pytest.raises(ValueError, match="diverged"):
        arm_explorer_curves(0.3, 50.0, 100, 1.0)


def test_explorer_builds_and_rejects_unknown_settings():
    import ipywidgets

    panel = arm_explorer(delta=0.2, T=20)
    assert isinstance(panel, ipywidgets.VBox)
    shown = panel._repr_mimebundle_()["text/plain"]  # what a notebook stores (nbval compares it)
    assert "VBox" in shown and " at 0x" not in shown
    with pytest.raises(ValueError, match="unknown"):
        arm_explorer(alpha=0.1)


def test_explorer_redraws_into_its_output(monkeypatch):
    from replearn import widgets

    panel = arm_explorer(T=20)
    out, delta_slider = panel.children[-1], panel.children[0].children[0]
    assert len(out.outputs) == 1 and "image/png" in out.outputs[0]["data"]
    first = out.outputs[0]["data"]["image/png"]
    delta_slider.value = 0.6
    assert len(out.outputs) == 1 and out.outputs[0]["data"]["image/png"] != first

    def diverge(*args, **kwargs):
        raise ValueError("the iterates diverged by round 3")

    monkeypatch.setattr(widgets, "arm_explorer_curves", diverge)
    delta_slider.value = 0.4
    assert len(out.outputs) == 1 and "diverged by round 3" in out.outputs[0]["text"]
