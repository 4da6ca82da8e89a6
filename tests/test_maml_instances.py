from dataclasses import replace

import pytest
import torch

from replearn.theory import linalg, linear, maml_instances
from replearn.theory.maml_instances import PopulationSettings

SMALL = PopulationSettings(d=8, k=2, n=6, iterations=120)


def test_problem_has_the_structured_start_and_exact_diversity():
    pb = maml_instances.make_problem(SMALL)
    delta = torch.eye(SMALL.k, dtype=torch.float64) - SMALL.alpha * pb.B0.T @ pb.B0
    assert float(delta.abs().max()) < 1e-12 and float(pb.w0.abs().max()) == 0.0
    assert abs(float(linalg.principal_angle_distance(pb.B0, pb.Bstar)) - SMALL.delta0) < 1e-10
    evals = torch.linalg.eigvalsh(linear.head_second_moment(pb.W))
    assert torch.allclose(evals[0], torch.tensor(SMALL.mu2, dtype=torch.float64), atol=1e-12)


def test_degenerate_problem_heads_lose_one_direction():
    pb, degenerate = maml_instances.make_problem(SMALL), maml_instances.make_problem(SMALL, degenerate=True)
    assert torch.equal(degenerate.W, linear.degenerate_heads(pb.W, SMALL.seed + 3))
    assert torch.equal(degenerate.B0, pb.B0) and torch.equal(degenerate.Bstar, pb.Bstar)


def test_problem_with_another_cond_or_alpha():
    pb = maml_instances.make_problem(SMALL, cond=4.0, alpha=0.1)
    assert torch.equal(pb.Bstar, maml_instances.make_problem(SMALL).Bstar)
    evals = torch.linalg.eigvalsh(linear.head_second_moment(pb.W))
    assert torch.allclose(evals[-1] / evals[0], torch.tensor(4.0, dtype=torch.float64), rtol=1e-10)
    assert torch.allclose(0.1 * pb.B0.T @ pb.B0, torch.eye(SMALL.k, dtype=torch.float64), atol=1e-12)


def test_paper_instance():
    paper = PopulationSettings.profile("paper")
    assert (paper.d, paper.k, paper.n, paper.iterations) == (100, 5, 100, 500)
    assert paper.mu2 == paper.scale**2 / paper.cond


@pytest.mark.parametrize("change, match", [
    (dict(k=8), "1 <= k < d"), (dict(n=2), "n >= k"), (dict(delta0=1.0), "delta0"),
    (dict(alpha=0.0), "alpha"), (dict(iterations=0), "iterations"),
])
def test_bad_settings_raise(change, match):
    with pytest.raises(ValueError, match=match):
        maml_instances.make_problem(replace(SMALL, **change))


class _Instance:
    """Plain settings-like object for :func:`check_instance_settings`."""

    def __init__(self, **kw):
        base = dict(d=12, k=2, cond=2.0, mean_norm=1.0, alpha=0.25, beta=0.5, delta0=0.5)
        self.__dict__.update(base | kw)


@pytest.mark.parametrize("change, match", [
    (dict(k=12), "1 <= k < d"), (dict(k=0), r"\bk\b"), (dict(cond=0.5), "cond"),
    (dict(mean_norm=-1.0), "mean_norm"), (dict(alpha=0.0), "alpha"), (dict(beta=-1.0), "beta"),
    (dict(delta0=0.0), "delta0"), (dict(delta0=1.0), "delta0"),
])
def test_check_instance_settings(change, match):
    maml_instances.check_instance_settings(_Instance())
    with pytest.raises(ValueError, match=match):
        maml_instances.check_instance_settings(_Instance(**change))


def test_check_instance_settings_without_mean_norm():
    inst = _Instance()
    del inst.mean_norm
    maml_instances.check_instance_settings(inst)
