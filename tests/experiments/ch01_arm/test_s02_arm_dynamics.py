from dataclasses import replace

import pytest
import torch

from replearn.experiments.ch01_arm import s02_arm_dynamics as s02

SMALL = s02.ArmDynamicsSettings(d=12, k=3, n=10, iterations=150)


def test_run_shows_the_stall_and_is_reproducible():
    res = s02.run(SMALL)
    assert res.dist["ARM"].shape == (SMALL.iterations + 1,)
    assert float(res.escape.max()) < 1e-12
    assert bool((res.dist["ARM"] >= res.floor - 1e-12).all())
    assert float(res.dist["FedAvg"][-1]) < float(res.dist["ARM"][-1])
    again = s02.run(SMALL)
    assert torch.equal(res.dist["FedAvg"], again.dist["FedAvg"])


def test_run_rejects_k_not_below_d():
    with pytest.raises(ValueError, match="1 <= k < d"):
        s02.run(replace(SMALL, k=12))
