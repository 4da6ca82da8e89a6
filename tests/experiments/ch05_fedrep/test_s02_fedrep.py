"""Book 5.2 driver (replearn.experiments.ch05_fedrep.s02_fedrep): the method-of-moments start and
one FedRep run."""

import pytest

from replearn.experiments.ch05_fedrep import s02_fedrep as s02


pytestmark = pytest.mark.usefixtures("one_thread")


def test_moments_improve_with_samples():
    res = s02.run_moments(s02.MomentSettings(d=10, k=2, ns=(5, 400), ms=(2, 20), repeats=2))
    assert float(res.dist[-1, -1]) < float(res.dist[0, 0])
    assert float(res.dist[-1, -1]) < 0.3


def test_trajectory_converges_noiseless():
    res = s02.run_trajectory(s02.TrajectorySettings(d=10, k=2, n=50, m=8, rounds=80))
    assert float(res.mom[-1]) < 1e-6
    assert res.mom.shape == (81,)


@pytest.mark.parametrize("make", [
    lambda: s02.run_moments(s02.MomentSettings(ns=())),
    lambda: s02.run_moments(s02.MomentSettings(ms=(0,))),
    lambda: s02.run_trajectory(s02.TrajectorySettings(m=0)),
])
def test_bad_inputs_raise(make):
    with pytest.raises(ValueError):
        make()


def test_paper_profiles_are_valid():
    for cls in (s02.MomentSettings, s02.TrajectorySettings):
        cfg = cls.profile("paper")
        assert isinstance(cfg, cls)


def test_tables_and_figure():
    import matplotlib.pyplot as plt
    import torch

    mom_cfg = s02.MomentSettings(d=10, k=2, ns=(5, 400), ms=(2, 20), repeats=2)
    mom = s02.run_moments(mom_cfg)
    lines = s02.moment_table(mom, mom_cfg).splitlines()
    assert lines[0] == "mean dist(B_0, B_*)   n =      5    400" and len(lines) == 3
    curve = torch.tensor([0.5, 1e-13, 2e-3])
    assert s02.trajectory_line(curve, (0, 1, 2)) == "t=0: 5.0e-01  t=1: <1e-12  t=2: 2.0e-03"
    run_cfg = s02.TrajectorySettings(d=10, k=2, n=50, m=8, rounds=20)
    fig = s02.plot_fedrep(mom, mom_cfg, s02.run_trajectory(run_cfg), run_cfg)
    assert len(fig.axes) == 2
    plt.close(fig)
