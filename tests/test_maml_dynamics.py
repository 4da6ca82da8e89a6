import math
from dataclasses import replace

import pytest
import torch

from replearn import linalg, linear, maml
from replearn.experiments import maml_dynamics as md

SMALL = md.MamlDynamicsSettings(d=8, k=2, n=6, iterations=120, conds=(1.0, 4.0), alphas=(0.1, 0.4),
                                betas=(0.2, 0.8), sweep_iterations=300, hessian_alphas=(0.05, 0.2))


def test_problem_has_the_structured_start_and_exact_diversity():
    pb = md.make_problem(SMALL)
    delta = torch.eye(SMALL.k, dtype=torch.float64) - SMALL.alpha * pb.B0.T @ pb.B0
    assert float(delta.abs().max()) < 1e-12 and float(pb.w0.abs().max()) == 0.0
    assert abs(float(linalg.principal_angle_distance(pb.B0, pb.Bstar)) - SMALL.delta0) < 1e-10
    evals = torch.linalg.eigvalsh(linear.head_second_moment(pb.W))
    assert torch.allclose(evals[0], torch.tensor(SMALL.mu2, dtype=torch.float64), atol=1e-12)


def test_degenerate_problem_heads_lose_one_direction():
    pb, degenerate = md.make_problem(SMALL), md.make_problem(SMALL, degenerate=True)
    assert torch.equal(degenerate.W, linear.degenerate_heads(pb.W, SMALL.seed + 3))
    assert torch.equal(degenerate.B0, pb.B0) and torch.equal(degenerate.Bstar, pb.Bstar)


def test_adapted_heads_autograd_matches_closed_form():
    pb = md.make_problem(SMALL)
    w = 0.2 * torch.ones(SMALL.k, dtype=torch.float64)
    closed = maml.adapted_heads(pb.B0, w, pb.Bstar, pb.W, SMALL.alpha)
    assert torch.allclose(md.adapted_heads_autograd(pb.B0, w, pb.tasks, SMALL.alpha), closed, atol=1e-12)


def test_run_meta_learners_converge_and_arm_stalls():
    res = md.run(SMALL)
    for a in maml.ALGORITHMS:
        assert float(res.dist[a][-1]) < 1e-3
    assert float(res.dist["ARM"].min()) >= res.floor - 1e-12
    assert float(res.dist["ARM"][-1]) > 0.4
    again = md.run(SMALL)
    assert torch.equal(res.dist["FO-ANIL"], again.dist["FO-ANIL"])


def test_linear_rate_fits_the_window_of_the_linear_phase():
    t = torch.arange(400, dtype=torch.float64)
    # rate 0.1 above dist = 0.1 (transient), rate -log 0.9 inside (1e-8, 0.1), flat below 1e-8 (rounding floor)
    dist = torch.where(t < 20, 0.9 * torch.exp(-0.1 * t), 0.9 * math.exp(-3.0) * 0.9 ** (t - 20)).clamp(min=1e-9)
    assert abs(md.linear_rate(dist) + math.log(0.9)) < 1e-10
    with pytest.raises(ValueError, match="points"):
        md.linear_rate(dist[:25])  # the transient and 5 iterates of the linear phase: fewer than 10


def test_rate_sweep_matches_beta_alpha_mu2():
    sweep = md.rate_sweep(SMALL, algorithms=("FO-ANIL",))
    for rows in sweep.values():
        predicted = -torch.log1p(-rows["x"])
        assert torch.allclose(rows["FO-ANIL"], predicted, rtol=0.05)
    with pytest.raises(ValueError, match="unknown algorithm"):
        md.rate_sweep(SMALL, algorithms=("ARM",))


def test_decomposition_check_and_hessian_term():
    dec = md.decomposition_check(SMALL)
    assert dec["error"] < 1e-10 and float(dec["signal_min_sv"].min()) > 0
    assert float(dec["arm_signal_sv"].max()) < 1e-12  # centred heads, ARM's signal weight vanishes
    hess = md.hessian_term(replace(SMALL, iterations=20), at=5)
    assert hess["alphas"]["MAML"].shape == (2,) and bool(torch.isnan(hess["trajectory"]["MAML"][0]))
    assert float(hess["alphas"]["MAML"][0]) < float(hess["alphas"]["MAML"][1])
    with pytest.raises(ValueError, match="positive integer"):
        md.hessian_term(SMALL, at=0)


def test_hypotheses_diverse_vs_degenerate():
    div = md.hypotheses_runs(SMALL)["FO-ANIL"]
    deg = md.hypotheses_runs(SMALL, degenerate=True)["FO-ANIL"]
    assert float(div["psi_cond"].max()) < 2 * SMALL.cond and bool((div["perp_ratio"][1:] < 1).all())
    assert bool((deg["psi_cond"] > 1e8).all()) and float(deg["dist"][-1]) > 0.5 * SMALL.delta0


def test_contraction_envelope():
    env = md.contraction_envelope(SMALL, c=0.5)
    assert env.shape == (SMALL.iterations + 1,) and float(env[0]) == SMALL.delta0
    with pytest.raises(ValueError):
        md.contraction_envelope(replace(SMALL, beta=100.0), c=1.0)


@pytest.mark.parametrize("change, match", [
    (dict(k=8), "1 <= k < d"), (dict(n=2), "n >= k"), (dict(delta0=1.0), "delta0"),
    (dict(alpha=0.0), "alpha"), (dict(iterations=0), "iterations"),
])
def test_bad_settings_raise(change, match):
    with pytest.raises(ValueError, match=match):
        md.make_problem(replace(SMALL, **change))
