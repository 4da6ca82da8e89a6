import pytest
import torch

from replearn.experiments.ch01_arm import s01_model as s01
from replearn.experiments.ch01_arm.s01_model import SampleComplexitySettings as Cfg


def test_output_shapes_and_profiles(monkeypatch):
    cfg = Cfg(d=8, k=2, ms=(3, 5, 12), trials=10, batch=4, seed=1)
    res = s01.run(cfg, device="cpu")
    assert res.ms.tolist() == [3, 5, 12]
    for name in s01.METHODS:
        assert res.errors[name].shape == (3, 10)
        assert res.theory[name].shape == (3,)
        assert res.mean(name).shape == res.sem(name).shape == res.z_scores(name).shape == (3,)
        assert bool((res.errors[name] >= 0).all())
    monkeypatch.setenv("REPLEARN_PROFILE", "paper")
    paper = Cfg.current()
    assert paper == Cfg.profile("paper") and paper.d > Cfg().d and paper.trials > Cfg().trials


def test_monte_carlo_agrees_with_closed_forms():
    # |m - p| >= 4 everywhere, so the error has a finite variance and the z-scores are meaningful
    cfg = Cfg(d=12, k=2, noise_std=0.5, ms=(6, 8, 20, 40), trials=4000, batch=2000, seed=3)
    res = s01.run(cfg, device="cpu")
    for name in s01.METHODS:
        assert float(res.z_scores(name).abs().max()) < 4.0, name
        rel = (res.mean(name) - res.theory[name]).abs() / res.theory[name]
        assert float(rel.max()) < 0.1, name
    # the closed forms themselves at these points
    assert res.theory["known representation"][0].item() == pytest.approx(0.25 * 2 / 3)
    assert res.theory["from scratch"][0].item() == pytest.approx(0.5 + 0.25 * 6 / 5)
    assert res.theory["from scratch"][-1].item() == pytest.approx(0.25 * 12 / 27)


def test_noiseless_errors_are_exact():
    cfg = Cfg(d=10, k=3, noise_std=0.0, ms=(3, 4, 10, 15), trials=3000, batch=3000, seed=5)
    res = s01.run(cfg, device="cpu")
    # with the representation known, m >= k noiseless samples determine the head exactly
    assert float(res.errors["known representation"].max()) < 1e-20
    # from scratch: the minimum-norm interpolant keeps the part of theta in the row space of X
    scratch = res.mean("from scratch")
    assert scratch[:2].tolist() == pytest.approx([1 - 3 / 10, 1 - 4 / 10], abs=0.02)
    assert float(res.errors["from scratch"][2:].max()) < 1e-20


def test_same_seed_same_numbers_and_grid_independence():
    cfg = Cfg(d=9, k=2, ms=(4, 20), trials=50, batch=20, seed=7)
    a, b = s01.run(cfg, device="cpu"), s01.run(cfg, device="cpu")
    for name in s01.METHODS:
        assert torch.equal(a.errors[name], b.errors[name])
    c = s01.run(Cfg(d=9, k=2, ms=(4, 20), trials=50, batch=20, seed=8), device="cpu")
    assert not torch.equal(a.errors["from scratch"], c.errors["from scratch"])
    # each sample size has its own seed: m = 20 does not depend on the rest of the grid
    alone = s01.run(Cfg(d=9, k=2, ms=(20,), trials=50, batch=20, seed=7), device="cpu")
    assert torch.equal(alone.errors["from scratch"][0], a.errors["from scratch"][1])


@pytest.mark.parametrize("kwargs, message", [
    (dict(ms=(0, 5)), r"m in ms .* must be an integer >= 1"),
    (dict(d=4, k=6), r"k = 6 > d = 4"),
    (dict(trials=0), r"trials must be an integer >= 1"),
    (dict(noise_std=-1.0), r"noise_std must be >= 0"),
    (dict(ms=()), r"ms .* must not be empty"),
])
def test_bad_settings_raise(kwargs, message):
    base = dict(d=6, k=2, ms=(5,), trials=4, batch=4)
    with pytest.raises(ValueError, match=message):
        s01.run(Cfg(**{**base, **kwargs}), device="cpu")


def test_plot_tilts_draws_both_families_against_sin():
    import math

    import matplotlib.pyplot as plt

    phis = torch.linspace(0, math.pi, 5, dtype=torch.float64)
    fig = s01.plot_tilts(phis, torch.sin(phis), torch.sin(phis), torch.sin(phis))
    (ax,) = fig.axes
    assert [line.get_label() for line in ax.lines][:2] == ["dist, one tilt", "dist, two tilts"]
    assert len(ax.lines) == 4 and ax.get_legend() is not None
    plt.close(fig)
