from dataclasses import replace

import pytest
import torch

from replearn.theory import lower_bound
from replearn.experiments.ch04_fedavg import s06_dgd_lower_bound as s06

SMALL = s06.DgdLowerBoundSettings(instances=4, d_range=(8, 12), k_range=(2, 3), clients=8, rounds=150)


def test_sweep_dgd_stays_fedavg_learns():
    res = s06.run_sweep(SMALL)
    assert res.d.shape == (4,)
    assert float((res.dgd_min / res.delta).min()) >= 1 - 1e-8
    assert float((res.fedavg_T / res.delta).max()) < 0.5
    again = s06.run_sweep(SMALL)
    assert torch.equal(res.fedavg_T, again.fedavg_T)


def test_participation_curves_keys_and_full_participation():
    sizes = torch.ones(8, dtype=torch.float64)
    inst = lower_bound.weighted_adversarial_instance(10, 2, 8, 0.2, sizes, cond=2.0, mean_norm=1.0, seed=1)
    curves = s06.participation_curves(inst, alpha=0.3, rounds=20, tau=2, clients_per_round=(8, 4))
    assert set(curves) == {("D-GD", 8), ("FedAvg", 8), ("D-GD", 4), ("FedAvg", 4)}
    assert float((curves["D-GD", 8] - 0.2).abs().max()) < 1e-10


@pytest.mark.parametrize("bad", [dict(k_range=(2, 12)), dict(clients=3), dict(alpha=0.0), dict(rounds=0),
                                 dict(sizes=(0, 5))])
def test_settings_validation(bad):
    with pytest.raises(ValueError):
        s06.run_sweep(replace(SMALL, **bad))

