from dataclasses import replace

import pytest
import torch

from replearn import linear
from replearn.experiments import arm_dynamics as ad

SMALL = ad.ArmDynamicsSettings(d=12, k=3, n=10, iterations=150)


def test_average_risk_identity():
    Bstar = linear.ground_truth_representation(8, 3, seed=0)
    W = linear.make_heads(6, 3, mean_norm=0.7, exact=False, seed=1)
    theta = linear.targets(Bstar, W)
    gen = torch.Generator().manual_seed(2)
    B = torch.randn(5, 8, 3, generator=gen, dtype=torch.float64)
    w = torch.randn(5, 3, generator=gen, dtype=torch.float64)
    v = Bstar @ W.mean(0)
    rhs = 0.5 * (linear.predict(B, w) - v).pow(2).sum(-1) + ad.average_risk_minimum(W)
    assert torch.allclose(ad.average_risk(B, w, theta), rhs, rtol=1e-12)
    # and the direct per-task average
    direct = torch.stack([linear.losses(B[j], w[j], linear.population_tasks(Bstar, W)).mean() for j in range(5)])
    assert torch.allclose(ad.average_risk(B, w, theta), direct, rtol=1e-12)


def test_run_shows_the_stall_and_is_reproducible():
    res = ad.run(SMALL)
    assert res.dist["ARM"].shape == (SMALL.iterations + 1,)
    assert float(res.escape.max()) < 1e-12
    assert bool((res.dist["ARM"] >= res.floor - 1e-12).all())
    assert float(res.dist["FedAvg"][-1]) < float(res.dist["ARM"][-1])
    again = ad.run(SMALL)
    assert torch.equal(res.dist["FedAvg"], again.dist["FedAvg"])


def test_run_rejects_k_not_below_d():
    with pytest.raises(ValueError, match="1 <= k < d"):
        ad.run(replace(SMALL, k=12))
