import math
from dataclasses import replace

import pytest
import torch

from replearn import linalg, linear
from replearn.experiments import finetuning as ft
from replearn.experiments.finetuning import FinetuneSettings as Cfg

SMALL = Cfg(d=12, k=3, n=8, arm_iterations=300, rounds=300, ms=(2, 8, 30), trials=40, batch=16,
            joint_steps=20, seed=1)


def test_true_representation_is_exact_without_noise():
    Bstar = linear.ground_truth_representation(10, 3, seed=0)
    for m in (3, 4, 9):
        errors = ft.head_errors({"true": Bstar}, Bstar, m, noise_std=0.0, trials=50, batch=20, seed=2)
        assert float(errors["true"].max()) < 1e-20


def test_floor_formula_matches_monte_carlo_for_a_fixed_representation():
    Bstar = linear.ground_truth_representation(12, 3, seed=0)
    B = linalg.basis_at_distance(Bstar, 0.6, seed=1) @ torch.randn(3, 3, dtype=torch.float64,
                                                                   generator=torch.Generator().manual_seed(3))
    F = float(linear.head_error_floor(B, Bstar))
    assert 0.6**2 - 1e-10 <= F <= 3 * 0.6**2 + 1e-10
    for m in (30, 200):
        e = ft.head_errors({"B": B}, Bstar, m, noise_std=0.2, trials=4000, batch=2000, seed=4)["B"]
        theory = linear.expected_head_error(m, 3, 0.04, F)
        assert abs(float(e.mean()) - theory) < 4 * float(e.std()) / math.sqrt(e.numel())


def test_shapes_floors_and_reproducibility():
    res = ft.run(SMALL, device="cpu")
    assert res.ms.tolist() == [2, 8, 30]
    for name in ft.METHODS:
        assert res.errors[name].shape == (3, 40) and res.theory[name].shape == (3,)
        assert bool((res.errors[name] >= 0).all())
    assert res.joint_ms.tolist() == [2, 8] and res.joint.shape == (2, 40) and res.joint_bound.shape == (2,)
    assert res.floor["true representation"] < 1e-20 and res.dist["true representation"] < 1e-6
    # the adversarial instance keeps ARM at distance delta, with a single tilted direction
    assert res.dist["ARM"] == pytest.approx(SMALL.delta, abs=1e-6)
    assert res.floor["ARM"] == pytest.approx(SMALL.delta**2, abs=1e-6)
    again = ft.run(SMALL, device="cpu")
    for name in ft.METHODS:
        assert torch.equal(res.errors[name], again.errors[name])
    assert torch.equal(res.joint, again.joint)
    other = ft.run(replace(SMALL, seed=2), device="cpu")
    assert not torch.equal(res.errors["ARM"], other.errors["ARM"])


def test_joint_finetuning_respects_the_subspace_bound():
    res = ft.run(replace(SMALL, trials=400, batch=400), device="cpu")
    gap = res.mean(ft.JOINT) - res.joint_bound
    assert bool((gap > -4 * res.sem(ft.JOINT)).all())


def test_paper_profile(monkeypatch):
    monkeypatch.setenv("REPLEARN_PROFILE", "paper")
    assert Cfg.current() == Cfg.paper() and Cfg.paper().d > Cfg().d


@pytest.mark.parametrize("change", [dict(k=12), dict(k=13), dict(ms=()), dict(ms=(0, 5)), dict(ms=(2.5,)),
                                    dict(trials=0), dict(delta=1.0), dict(beta=0.0), dict(noise_std=-1.0),
                                    dict(mean_norm=0.0), dict(tau=0), dict(seed=-1)])
def test_bad_settings_raise(change):
    with pytest.raises(ValueError):
        ft.run(replace(SMALL, **change), device="cpu")
