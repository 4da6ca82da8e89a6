import pytest
import torch

from replearn import linear
from replearn.experiments import sample_complexity as sc
from replearn.experiments.sample_complexity import SampleComplexitySettings as Cfg


def test_output_shapes_and_profiles(monkeypatch):
    cfg = Cfg(d=8, k=2, ms=(3, 5, 12), trials=10, batch=4, seed=1)
    res = sc.run(cfg, device="cpu")
    assert res.ms.tolist() == [3, 5, 12]
    for name in sc.METHODS:
        assert res.errors[name].shape == (3, 10)
        assert res.theory[name].shape == (3,)
        assert res.mean(name).shape == res.sem(name).shape == res.z_scores(name).shape == (3,)
        assert bool((res.errors[name] >= 0).all())
    monkeypatch.setenv("REPLEARN_PROFILE", "paper")
    paper = Cfg.current()
    assert paper == Cfg.paper() and paper.d > Cfg().d and paper.trials > Cfg().trials


def test_monte_carlo_agrees_with_closed_forms():
    # |m - p| >= 4 everywhere, so the error has a finite variance and the z-scores are meaningful
    cfg = Cfg(d=12, k=2, noise_std=0.5, ms=(6, 8, 20, 40), trials=4000, batch=2000, seed=3)
    res = sc.run(cfg, device="cpu")
    for name in sc.METHODS:
        assert float(res.z_scores(name).abs().max()) < 4.0, name
        rel = (res.mean(name) - res.theory[name]).abs() / res.theory[name]
        assert float(rel.max()) < 0.1, name
    # the closed forms themselves at these points
    assert res.theory["known representation"][0].item() == pytest.approx(0.25 * 2 / 3)
    assert res.theory["from scratch"][0].item() == pytest.approx(0.5 + 0.25 * 6 / 5)
    assert res.theory["from scratch"][-1].item() == pytest.approx(0.25 * 12 / 27)


def test_noiseless_errors_are_exact():
    cfg = Cfg(d=10, k=3, noise_std=0.0, ms=(3, 4, 10, 15), trials=3000, batch=3000, seed=5)
    res = sc.run(cfg, device="cpu")
    # with the representation known, m >= k noiseless samples determine the head exactly
    assert float(res.errors["known representation"].max()) < 1e-20
    # from scratch: the minimum-norm interpolant keeps the part of theta in the row space of X
    scratch = res.mean("from scratch")
    assert scratch[:2].tolist() == pytest.approx([1 - 3 / 10, 1 - 4 / 10], abs=0.02)
    assert float(res.errors["from scratch"][2:].max()) < 1e-20


def test_same_seed_same_numbers_and_grid_independence():
    cfg = Cfg(d=9, k=2, ms=(4, 20), trials=50, batch=20, seed=7)
    a, b = sc.run(cfg, device="cpu"), sc.run(cfg, device="cpu")
    for name in sc.METHODS:
        assert torch.equal(a.errors[name], b.errors[name])
    c = sc.run(Cfg(d=9, k=2, ms=(4, 20), trials=50, batch=20, seed=8), device="cpu")
    assert not torch.equal(a.errors["from scratch"], c.errors["from scratch"])
    # each sample size has its own seed: m = 20 does not depend on the rest of the grid
    alone = sc.run(Cfg(d=9, k=2, ms=(20,), trials=50, batch=20, seed=7), device="cpu")
    assert torch.equal(alone.errors["from scratch"][0], a.errors["from scratch"][1])


def test_new_task_errors_match_a_direct_solve():
    Bstar = linear.ground_truth_representation(7, 2, seed=0)
    w = torch.tensor([0.6, -0.8], dtype=torch.float64)
    errs = sc.new_task_errors(Bstar, w, 12, noise_std=0.3, trials=3, seed=11, batch=2)
    gen = torch.Generator().manual_seed(11)
    X1 = torch.randn(2, 12, 7, generator=gen, dtype=torch.float64)
    y1 = X1 @ (Bstar @ w) + 0.3 * torch.randn(2, 12, generator=gen, dtype=torch.float64)
    theta_hat = torch.linalg.solve(X1[0].T @ X1[0], X1[0].T @ y1[0])
    assert errs["from scratch"][0].item() == pytest.approx(float((theta_hat - Bstar @ w).pow(2).sum()))
    F = X1[0] @ Bstar
    w_hat = torch.linalg.solve(F.T @ F, F.T @ y1[0])
    assert errs["known representation"][0].item() == pytest.approx(float((w_hat - w).pow(2).sum()))


def test_samples_to_reach_is_the_first_m_below_the_target():
    # O(k) versus Omega(d): the smallest m reaching the target, checked against the formula
    m_k, m_d = sc.samples_to_reach(0.05, 5, 0.09), sc.samples_to_reach(0.05, 50, 0.09)
    assert (m_k, m_d) == (15, 141)
    assert linear.expected_ls_error(m_d, 50, 0.09) <= 0.05 < linear.expected_ls_error(m_d - 1, 50, 0.09)
    assert 0.09 * 50 / (m_d - 51) <= 0.05 < 0.09 * 50 / (m_d - 52)  # the closed form above the threshold


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
        sc.run(Cfg(**{**base, **kwargs}), device="cpu")


def test_bad_direct_inputs_raise():
    Bstar = linear.ground_truth_representation(6, 2, seed=0)
    w = torch.ones(2, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"m \(samples of the new task\) must be an integer >= 1"):
        sc.new_task_errors(Bstar, w, 0, noise_std=0.1, trials=3)
    with pytest.raises(ValueError, match=r"w_\* must have shape \(2,\)"):
        sc.new_task_errors(Bstar, torch.ones(3, dtype=torch.float64), 5, noise_std=0.1, trials=3)
    with pytest.raises(ValueError, match=r"k = 6 > d = 2"):
        sc.new_task_errors(Bstar.T, torch.ones(6, dtype=torch.float64), 5, noise_std=0.1, trials=3)
    with pytest.raises(ValueError, match=r"eps must be positive"):
        sc.samples_to_reach(0.0, 5, 0.1)
