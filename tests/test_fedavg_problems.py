from dataclasses import replace

import pytest
import torch

from replearn.theory import linalg, linear
from replearn.theory.fedavg_problems import FedAvgProblemSettings, make_problem

SMALL = FedAvgProblemSettings(d=12, k=3, M=8, alpha=0.3, rounds=50)


def test_fig1_problem_is_normalised_and_drawn_from_the_seed():
    pb = make_problem(SMALL, 4, device="cpu")
    d, k, M = SMALL.d, SMALL.k, SMALL.M
    assert pb.Bstar.shape == (d, k) and pb.W.shape == (M, k) and pb.B0.shape == (d, k)
    assert torch.allclose(pb.Bstar.T @ pb.Bstar, torch.eye(k, dtype=torch.float64), atol=1e-12)
    # alpha B_0^T B_0 = I_k and w_0 = 0 (conditions (ii), (iii) of Theorem 1)
    assert torch.allclose(SMALL.alpha * pb.B0.T @ pb.B0, torch.eye(k, dtype=torch.float64), atol=1e-12)
    assert torch.equal(pb.w0, torch.zeros(k, dtype=torch.float64))
    # the seeds of B_*, the heads and B_0 are seed, seed + 1, seed + 2
    assert torch.equal(pb.Bstar, linear.ground_truth_representation(d, k, seed=4))
    assert torch.equal(pb.W, linear.make_heads(M, k, exact=False, seed=5))
    assert torch.equal(pb.B0, linalg.random_orthonormal(d, k, seed=6) / SMALL.alpha**0.5)
    again = make_problem(SMALL, 4, device="cpu")
    assert all(torch.equal(a, b) for a, b in zip((pb.Bstar, pb.W, pb.B0), (again.Bstar, again.W, again.B0)))
    assert not torch.equal(make_problem(SMALL, 5, device="cpu").Bstar, pb.Bstar)


@pytest.mark.parametrize("cond", [1.0, 4.0])
def test_rate_problem_has_exact_diversity_and_starting_distance(cond):
    pb = make_problem(SMALL, 0, cond=cond, delta0=0.7, device="cpu")
    mu2, top = linear.head_diversity(pb.W, centred=True)
    assert mu2 == pytest.approx(1.0 / cond, rel=1e-10) and top == pytest.approx(1.0, rel=1e-10)
    assert float(linalg.principal_angle_distance(pb.B0, pb.Bstar)) == pytest.approx(0.7, rel=1e-10)
    assert torch.allclose(SMALL.alpha * pb.B0.T @ pb.B0, torch.eye(SMALL.k, dtype=torch.float64), atol=1e-12)


def test_paper_profile_and_validation():
    paper = FedAvgProblemSettings.profile("paper")
    assert (paper.d, paper.k, paper.M, paper.tau, paper.rounds) == (100, 5, 40, 2, 1000)
    for change, message in ((dict(k=12), "k < d"), (dict(M=3), "M >= k"), (dict(alpha=0.0), "alpha"),
                            (dict(tau=0), "tau"), (dict(rounds=0), "rounds"), (dict(seed=-1), "seed")):
        with pytest.raises(ValueError, match=message):
            replace(SMALL, **change)
