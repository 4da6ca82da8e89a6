"""Tests of the book 5.1-5.3 drivers (replearn.experiments.fedrep_basics)."""

import math

import pytest
import torch

from replearn import fedrep, linalg, linear
from replearn.experiments import fedrep_basics as fb


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_single_model_formula_and_decomposition():
    cfg = fb.PersonalisationSettings(d=8, k=2, n=30, m=40, spreads=(0.5, 1.0), local_ms=(2, 4, 12), rounds=60)
    res = fb.run_personalisation(cfg)
    assert torch.allclose(res.formula, cfg.k * res.spreads**2 / 2, rtol=1e-10)
    # (1/2n) sum ||theta - theta_i||^2 = 1/2 ||theta - mean||^2 + formula, for the fitted theta
    assert torch.allclose(res.single - res.formula, 0.5 * res.to_mean**2, rtol=1e-8, atol=1e-12)
    assert bool((res.single >= res.formula).all())
    assert float(res.local[-1]) < 1e-12 and float(res.local[0]) > 0.4   # m >= d exact, m << d not


def test_single_model_formula_is_heterogeneity():
    W = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 2.0], [0.0, -2.0]], dtype=torch.float64)
    Bstar = linear.ground_truth_representation(5, 2, seed=0)
    value = float(fb.single_model_error_formula(linear.targets(Bstar, W)))
    assert value == pytest.approx(0.5 * (1 + 1 + 4 + 4) / 4)


def test_expected_moment_matrix_matches_samples_and_eigenspace():
    Bstar = linear.ground_truth_representation(6, 2, seed=1)
    W = fedrep.paper_heads(50, 2, seed=2)
    M = fb.expected_moment_matrix(Bstar, W, noise_std=0.3)
    top = torch.linalg.eigh(M).eigenvectors[:, -2:]
    assert float(linalg.principal_angle_distance(top, Bstar)) < 1e-10
    assert float(torch.linalg.eigvalsh(M)[0]) == pytest.approx(2.0 + 0.09)   # k + sigma^2
    data = linear.sample_tasks(Bstar, W, 4000, noise_std=0.3, seed=3)
    rel = torch.linalg.matrix_norm(fedrep.moment_matrix(data) - M, 2) / torch.linalg.matrix_norm(M, 2)
    assert float(rel) < 0.05


def test_moments_improve_with_samples():
    res = fb.run_moments(fb.MomentSettings(d=10, k=2, ns=(5, 400), ms=(2, 20), repeats=2))
    assert float(res.dist[-1, -1]) < float(res.dist[0, 0])
    assert float(res.dist[-1, -1]) < 0.3


def test_trajectory_converges_noiseless():
    res = fb.run_trajectory(fb.TrajectorySettings(d=10, k=2, n=50, m=8, rounds=80))
    assert float(res.mom[-1]) < 1e-6
    assert res.mom.shape == (81,)


def test_fit_rate_recovers_geometric_sequence():
    dist = 0.5 * 0.9 ** torch.arange(200, dtype=torch.float64)
    rate, r2 = fb.fit_rate(dist)
    assert rate == pytest.approx(0.9, abs=1e-10) and r2 == pytest.approx(1.0)
    with pytest.raises(ValueError, match="only 0 points"):
        fb.fit_rate(torch.ones(10))  # every round outside the window (1e-12, 0.1)


def test_theorem_factor():
    assert fb.theorem_factor(0.1, 0.75, 1.0) == pytest.approx(math.sqrt(1 - 0.0375))
    with pytest.raises(ValueError):
        fb.theorem_factor(10.0, 1.0, 1.0)


def test_rates_match_infinite_sample_factor_and_beat_theorem():
    cfg = fb.RateSettings(d=10, k=2, n=40, m=40, etas=(0.2,), conds=(2.0,), rounds=200)
    res = fb.run_rates(cfg)
    key = (2.0, 0.2)
    assert res.sigma2[2.0][0] == pytest.approx(0.5) and res.sigma2[2.0][1] == pytest.approx(1.0)
    assert res.r2[key] > 0.99
    assert res.rate[key] < res.theorem[key]
    assert abs(math.log(res.rate[key]) / math.log(res.first_order[key]) - 1) < 0.25


def test_population_step_contracts_as_proposition():
    # one FedRep round with a huge batch approaches the infinite-sample bound of book 5.3
    d, k, n = 8, 2, 20
    Bstar = linear.ground_truth_representation(d, k, seed=0)
    W = linear.make_heads(n, k, cond=2.0, exact=True, seed=1)
    B0 = linalg.basis_at_distance(Bstar, 0.6, seed=2)
    data = linear.sample_tasks(Bstar, W, 20000, seed=3)
    eta = 0.5
    B1 = fedrep.fedrep(B0, data, eta=eta, rounds=1, orthonormalize=True).B[-1]
    bound = (1 - eta * 0.5 * (1 - 0.36)) * 0.6
    assert float(linalg.principal_angle_distance(B1, Bstar)) < bound + 0.02


def test_federation_small_grid():
    cfg = fb.FederationSettings(d=12, k=2, ns=(5, 200), ms=(3, 10), rounds=150)
    res = fb.run_federation(cfg)
    assert bool(res.recovered[0, 1])          # m = 3 with 200 clients recovers col(B_*)
    assert not bool(res.recovered[0, 0])      # m = 3 with 5 clients does not
    need = res.smallest_m()
    assert float(need[1]) <= float(need[0])
    assert res.counting[0] == pytest.approx(fb.counting_bound(12, 2, 5))
    assert torch.allclose(res.local, res.local_formula, atol=0.15)


@pytest.mark.parametrize("make", [
    lambda: fb.run_personalisation(fb.PersonalisationSettings(k=20, d=20)),
    lambda: fb.run_personalisation(fb.PersonalisationSettings(spreads=(0.0,))),
    lambda: fb.run_personalisation(fb.PersonalisationSettings(eta=-1.0)),
    lambda: fb.run_moments(fb.MomentSettings(ns=())),
    lambda: fb.run_moments(fb.MomentSettings(ms=(0,))),
    lambda: fb.run_trajectory(fb.TrajectorySettings(m=0)),
    lambda: fb.run_rates(fb.RateSettings(dist0=1.0)),
    lambda: fb.run_rates(fb.RateSettings(etas=(0.0,))),
    lambda: fb.run_federation(fb.FederationSettings(tol=0.0)),
    lambda: fb.run_federation(fb.FederationSettings(ns=(2.5,))),
    lambda: fb.expected_moment_matrix(torch.eye(3, 2, dtype=torch.float64), torch.ones(4, 2, dtype=torch.float64), -1.0),
])
def test_bad_inputs_raise(make):
    with pytest.raises(ValueError):
        make()


def test_paper_profiles_are_valid():
    for cls in (fb.PersonalisationSettings, fb.MomentSettings, fb.TrajectorySettings,
                fb.RateSettings, fb.FederationSettings):
        cfg = cls.paper()
        assert isinstance(cfg, cls)
