from dataclasses import replace

import pytest
import torch

from replearn import federated, linalg
from replearn.experiments import dgd_lower_bound as g

SMALL = g.DgdLowerBoundSettings(instances=4, d_range=(8, 12), k_range=(2, 3), clients=8, rounds=150)


def test_weighted_instance_defeats_weighted_dgd_only():
    sizes = torch.tensor([5.0, 50.0, 10.0, 80.0, 20.0, 30.0, 7.0, 60.0], dtype=torch.float64)
    inst = g.weighted_adversarial_instance(12, 3, 8, 0.3, sizes, cond=3.0, mean_norm=1.0, seed=0)
    assert abs(float(linalg.principal_angle_distance(inst.B0, inst.Bstar)) - 0.3) < 1e-12
    weighted = federated.dgd(inst.B0, inst.w0, inst.tasks, alpha=0.3, rounds=200, weights=sizes)
    assert float((weighted.dist(inst.Bstar) - 0.3).abs().max()) < 1e-10
    # the construction is specific to the weights: unweighted D-GD sees another mean regressor
    plain = federated.dgd(inst.B0, inst.w0, inst.tasks, alpha=0.3, rounds=200)
    assert float((plain.dist(inst.Bstar) - 0.3).abs().max()) > 1e-4


def test_sweep_dgd_stays_fedavg_learns():
    res = g.run_sweep(SMALL)
    assert res.d.shape == (4,)
    assert float((res.dgd_min / res.delta).min()) >= 1 - 1e-8
    assert float((res.fedavg_T / res.delta).max()) < 0.5
    again = g.run_sweep(SMALL)
    assert torch.equal(res.fedavg_T, again.fedavg_T)


def test_participation_curves_keys_and_full_participation():
    sizes = torch.ones(8, dtype=torch.float64)
    inst = g.weighted_adversarial_instance(10, 2, 8, 0.2, sizes, cond=2.0, mean_norm=1.0, seed=1)
    curves = g.participation_curves(inst, alpha=0.3, rounds=20, tau=2, clients_per_round=(8, 4))
    assert set(curves) == {("D-GD", 8), ("FedAvg", 8), ("D-GD", 4), ("FedAvg", 4)}
    assert float((curves["D-GD", 8] - 0.2).abs().max()) < 1e-10


@pytest.mark.parametrize("bad", [dict(k_range=(2, 12)), dict(clients=3), dict(alpha=0.0), dict(rounds=0),
                                 dict(sizes=(0, 5))])
def test_settings_validation(bad):
    with pytest.raises(ValueError):
        g.run_sweep(replace(SMALL, **bad))


def test_weights_must_match_clients():
    with pytest.raises(ValueError, match="positive"):
        g.weighted_adversarial_instance(10, 2, 8, 0.2, torch.ones(7), cond=2.0, mean_norm=1.0)
