import numpy as np
import pytest
import torch

from replearn.experiments.ch03_aruba import s04_adaptive_rates as s04

SMALL = s04.ArubaRatesSettings(T=120, runs=2, adagrad_grid=(0.1, 0.3))


@pytest.fixture(scope="module")
def result():
    return s04.run(SMALL)


def test_aruba_beats_scalar_rates_and_adagrad(result):
    late = result.late()
    assert set(late) == set(s04.METHODS)
    assert late["ARUBA"] < late["learned scalar rate"] < late["oracle scalar rate"] < late["single-task OGD"]
    assert late["ARUBA"] < late["AdaGrad (tuned)"]
    assert result.adagrad_eta0 in (0.1, 0.3)


def test_rates_larger_on_varying_coordinates(result):
    rates = result.rates.mean(0)
    assert rates.shape == (SMALL.d,)
    assert float(rates[: SMALL.varying].min()) > 2 * float(rates[SMALL.varying:].max())
    first = result.rate_history[:, 0]
    assert torch.allclose(first, torch.full_like(first, SMALL.family().single_task_rate()))


def test_rate_profile_monotone_in_spread():
    prof = s04.rate_profile(s04.ArubaRatesSettings(T=100, runs=2))
    learned, optimal = prof.rates.mean(0), prof.optimal.mean(0)
    assert float(learned[-1]) > 3 * float(learned[0]) and float(optimal[-1]) > 3 * float(optimal[0])
    assert bool((learned[-4:].diff() > 0).all())


def test_smoothing_sweep_default_constant_included():
    sweep = s04.smoothing_sweep(s04.ArubaRatesSettings(T=60, runs=1), values=(0.1, 0.01))
    assert set(sweep) == {0.1, 0.01} and all(len(v) == 2 for v in sweep.values())


@pytest.mark.parametrize("bad", [dict(varying=11), dict(T=0), dict(adagrad_grid=()), dict(runs=1.5)])
def test_bad_settings_raise(bad):
    with pytest.raises(ValueError):
        s04.run(s04.ArubaRatesSettings(**bad))


def test_explorer_curves_shapes_and_determinism():
    a = s04.explorer_curves(1.0, 10.0, 10, 30, "ARUBA", seed=2)
    b = s04.explorer_curves(1.0, 10.0, 10, 30, "ARUBA", seed=2)
    assert set(a) == {"task", "ARUBA", "single-task OGD"}
    assert all(isinstance(a[k], np.ndarray) and a[k].shape == (30,) for k in a)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert a["ARUBA"][-1] < a["single-task OGD"][-1]


def test_explorer_aruba_beats_adagrad_when_anisotropic():
    aruba = s04.explorer_curves(1.4, 100.0, 20, 150, "ARUBA")["ARUBA"]
    ada = s04.explorer_curves(1.4, 100.0, 20, 150, "AdaGrad")["AdaGrad"]
    assert aruba[-1] < ada[-1]


@pytest.mark.parametrize("args", [(0.0, 10.0, 10, 10, "ARUBA"), (1.0, 0.5, 10, 10, "ARUBA"),
                                  (1.0, 10.0, 0, 10, "ARUBA"), (1.0, 10.0, 10, 0, "ARUBA"),
                                  (1.0, 10.0, 10, 10, "Adam")])
def test_explorer_bad_input_raises(args):
    with pytest.raises(ValueError):
        s04.explorer_curves(*args)


def test_explorer_builds_and_rejects_unknown_settings():
    import ipywidgets

    panel = s04.explorer(T=20, m=5)
    assert isinstance(panel, ipywidgets.VBox)
    shown = panel._repr_mimebundle_()["text/plain"]
    assert "VBox" in shown and " at 0x" not in shown
    with pytest.raises(ValueError, match="unknown"):
        s04.explorer(alpha=0.1)
