from dataclasses import replace

import pytest
import torch

from replearn.experiments.ch01_arm import s04_finetuning as s04
from replearn.experiments.ch01_arm.s04_finetuning import FinetuneSettings as Cfg

SMALL = Cfg(d=12, k=3, n=8, arm_iterations=300, rounds=300, ms=(2, 8, 30), trials=40, batch=16,
            joint_steps=20, seed=1)


def test_shapes_floors_and_reproducibility():
    res = s04.run(SMALL, device="cpu")
    assert res.ms.tolist() == [2, 8, 30]
    for name in s04.METHODS:
        assert res.errors[name].shape == (3, 40) and res.theory[name].shape == (3,)
        assert bool((res.errors[name] >= 0).all())
    assert res.joint_ms.tolist() == [2, 8] and res.joint.shape == (2, 40) and res.joint_bound.shape == (2,)
    assert res.floor["true representation"] < 1e-20 and res.dist["true representation"] < 1e-6
    # the adversarial instance keeps ARM at distance delta, with a single tilted direction
    assert res.dist["ARM"] == pytest.approx(SMALL.delta, abs=1e-6)
    assert res.floor["ARM"] == pytest.approx(SMALL.delta**2, abs=1e-6)
    again = s04.run(SMALL, device="cpu")
    for name in s04.METHODS:
        assert torch.equal(res.errors[name], again.errors[name])
    assert torch.equal(res.joint, again.joint)
    other = s04.run(replace(SMALL, seed=2), device="cpu")
    assert not torch.equal(res.errors["ARM"], other.errors["ARM"])


def test_joint_finetuning_respects_the_subspace_bound():
    res = s04.run(replace(SMALL, trials=400, batch=400), device="cpu")
    gap = res.mean(s04.JOINT) - res.joint_bound
    assert bool((gap > -4 * res.sem(s04.JOINT)).all())


def test_paper_profile(monkeypatch):
    monkeypatch.setenv("REPLEARN_PROFILE", "paper")
    assert Cfg.current() == Cfg.profile("paper") and Cfg.profile("paper").d > Cfg().d


@pytest.mark.parametrize("change", [dict(k=12), dict(k=13), dict(ms=()), dict(ms=(0, 5)), dict(ms=(2.5,)),
                                    dict(trials=0), dict(delta=1.0), dict(beta=0.0), dict(noise_std=-1.0),
                                    dict(mean_norm=0.0), dict(tau=0), dict(seed=-1)])
def test_bad_settings_raise(change):
    with pytest.raises(ValueError):
        s04.run(replace(SMALL, **change), device="cpu")
