"""Book 4.1 driver (replearn.experiments.ch04_fedavg.s01_fedavg_and_dsgd): settings and the instance."""

import pytest
import torch

from replearn.theory import linear_federated, linalg, linear
from replearn.experiments.ch04_fedavg import s01_fedavg_and_dsgd as s01
from replearn.experiments.ch04_fedavg.s01_fedavg_and_dsgd import FedAvgDsgdSettings as Cfg


def test_instance_is_the_normalised_random_start():
    cfg = Cfg(d=12, k=3, n=6, alpha=0.25, seed=4)
    pb = s01.make_problem(cfg)
    assert torch.equal(pb.Bstar, linear.ground_truth_representation(12, 3, seed=4))
    assert torch.equal(pb.W, linear.make_heads(6, 3, exact=False, seed=5))
    assert torch.equal(pb.B0, linalg.random_orthonormal(12, 3, seed=6) / 0.25**0.5)
    assert torch.allclose(cfg.alpha * pb.B0.T @ pb.B0, torch.eye(3, dtype=torch.float64), atol=1e-12)
    assert float(pb.w0.abs().max()) == 0.0 and pb.tasks.n == 6


def test_fedavg_learns_the_representation_and_dgd_does_not():
    cfg = Cfg(d=12, k=3, n=20, rounds=1000)
    pb = s01.make_problem(cfg)
    fed = linear_federated.fedavg(pb.B0, pb.w0, pb.tasks, alpha=cfg.alpha, tau=cfg.tau, rounds=cfg.rounds)
    gd = linear_federated.dgd(pb.B0, pb.w0, pb.tasks, alpha=cfg.alpha, rounds=cfg.tau * cfg.rounds)
    assert float(fed.dist(pb.Bstar)[-1]) < 0.01 < 0.9 < float(gd.dist(pb.Bstar)[-1])


def test_profiles(monkeypatch):
    monkeypatch.setenv("REPLEARN_PROFILE", "paper")
    paper = Cfg.current()
    assert paper == Cfg.profile("paper") and (paper.d, paper.k, paper.n) == (100, 5, 40)
    assert paper.rounds > Cfg().rounds


@pytest.mark.parametrize("change, message", [
    (dict(k=50), r"\bd\b"), (dict(alpha=0.0), "alpha"), (dict(n=0), r"\bn\b"), (dict(tau=0), "tau"),
    (dict(rounds=0), "rounds"), (dict(cond=0.5), "cond"), (dict(mean_norm=-1.0), "mean_norm")])
def test_bad_settings_raise_at_construction(change, message):
    with pytest.raises(ValueError, match=message):
        Cfg(**change)


def test_finetune_errors_are_the_excess_risks_after_joint_gd():
    Bstar = linear.ground_truth_representation(6, 2, seed=1)
    W = linear.make_heads(3, 2, exact=False, seed=2)
    new = linear.sample_tasks(Bstar, W, 10, noise_std=0.0, seed=3)
    theta = linear.targets(Bstar, W)
    good = linear_federated.fedavg(Bstar * 2.0, torch.zeros(2, dtype=torch.float64), linear.population_tasks(Bstar, W),
                                   alpha=0.1, tau=2, rounds=2)
    errors = s01.finetune_errors({"start at B*": good}, new, theta, lr=0.1, steps=50)
    assert list(errors) == ["start at B*"] and errors["start at B*"].shape == (3,)
    tuned = linear.finetune_gd(*good.final, new.X[0], new.Y[0], lr=0.1, steps=50)
    assert float(errors["start at B*"][0]) == float(linear.excess_risk(*tuned, theta[0]))
