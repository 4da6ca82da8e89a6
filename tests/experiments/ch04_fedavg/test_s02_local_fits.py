from dataclasses import replace

import pytest
import torch

from replearn.theory import linear_federated, linalg
from replearn.experiments.ch04_fedavg import s02_local_fits as s02

SMALL = s02.LocalFitsSettings(d=6, rounds=120, taus=(1, 2, 20))


@pytest.mark.parametrize("d, rotation_seed", [(3, None), (7, None), (7, 4)])
def test_local_fits_are_exact_but_their_average_is_useless(d, rotation_seed):
    inst = s02.local_fit_instance(d, rotation_seed=rotation_seed)
    assert inst.Bstar.shape == (d, 2) and inst.W.shape == (2, 2)
    assert inst.B_local.shape == (2, d, 2) and inst.w_local.shape == (2, 2)
    assert float(inst.local_losses().abs().max()) < 1e-12
    # each local representation contains its client's regressor and is orthonormal
    for i in range(2):
        assert float(linalg.principal_angle_distance(inst.B_local[i], inst.tasks.theta[i][:, None])) < 1e-12
        assert torch.allclose(inst.B_local[i].T @ inst.B_local[i], torch.eye(2, dtype=torch.float64))
    avg = linear_federated.average_local_fits(inst.B_local, inst.w_local, inst.Bstar, W=inst.W)
    assert avg.B.shape == (d, 2) and avg.w.shape == (2,) and avg.losses.shape == (2,)
    assert abs(avg.dist - 1.0) < 1e-12
    assert int(torch.linalg.matrix_rank(avg.B)) == 2
    assert avg.grad_norm < 1e-12 and torch.allclose(avg.losses, torch.full((2,), 0.25, dtype=torch.float64))


def test_unequal_weights_still_distance_one_and_agreeing_fits_average_well():
    inst = s02.local_fit_instance(5)
    avg = linear_federated.average_local_fits(inst.B_local, inst.w_local, inst.Bstar, weights=torch.tensor([1.0, 3.0]))
    assert abs(avg.dist - 1.0) < 1e-12 and torch.isnan(avg.losses).all()
    good = linear_federated.average_local_fits(torch.stack([inst.Bstar, inst.Bstar]), inst.W, inst.Bstar, W=inst.W)
    assert good.dist < 1e-12


def test_run_contrasts_dgd_fedavg_and_the_trap():
    res = s02.run(SMALL)
    for tau in SMALL.taus:
        assert res.dist[tau].shape == (SMALL.rounds + 1,)
        assert res.local_loss[tau].shape == (SMALL.rounds + 1,)
        assert float((res.dist_avg[tau] - 1.0).abs().max()) < 1e-12
    assert float(res.dist[1][-1]) > 0.8
    assert float(res.dist[20][-1]) < 1e-3
    assert float(res.dist[2][-1]) < float(res.dist[1][-1])
    again = s02.run(SMALL)
    assert torch.equal(res.dist[2], again.dist[2])


@pytest.mark.parametrize("d", [2, 0, 3.0, True])
def test_instance_rejects_bad_dimension(d):
    with pytest.raises(ValueError, match="d >= 3"):
        s02.local_fit_instance(d)


def test_average_rejects_bad_inputs():
    inst = s02.local_fit_instance(4)
    with pytest.raises(ValueError, match="B_local"):
        linear_federated.average_local_fits(inst.B_local[0], inst.w_local, inst.Bstar)
    with pytest.raises(ValueError, match="Bstar"):
        linear_federated.average_local_fits(inst.B_local, inst.w_local, inst.Bstar[:3])
    with pytest.raises(ValueError, match="weights"):
        linear_federated.average_local_fits(inst.B_local, inst.w_local, inst.Bstar, weights=torch.tensor([1.0, -1.0]))
    with pytest.raises(ValueError, match="weights"):
        linear_federated.average_local_fits(inst.B_local, inst.w_local, inst.Bstar, weights=torch.tensor([1.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match="NaN"):
        linear_federated.average_local_fits(inst.B_local * float("nan"), inst.w_local, inst.Bstar)
    with pytest.raises(ValueError, match="W must"):
        linear_federated.average_local_fits(inst.B_local, inst.w_local, inst.Bstar, W=torch.eye(3, dtype=torch.float64))


@pytest.mark.parametrize("change", [dict(taus=()), dict(taus=(0, 2)), dict(taus=(1.5,)), dict(perturbation=-0.1),
                                    dict(d=2)])
def test_run_rejects_bad_settings(change):
    with pytest.raises(ValueError):
        s02.run(replace(SMALL, **change))


def test_run_table_and_figure():
    import matplotlib.pyplot as plt

    res = s02.run(SMALL)
    lines = s02.run_table(res, SMALL.taus, SMALL.rounds).splitlines()
    assert lines[0].startswith("dist(B_0, B*) of the random start") and len(lines) == 2 + len(SMALL.taus)
    assert [int(line.split()[0]) for line in lines[2:]] == list(SMALL.taus)
    fig = s02.plot_local_fits(res, SMALL)
    assert len(fig.axes) == 2 and fig.axes[1].get_title() == "FedAvg on the two clients"
    plt.close(fig)
