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
        cfg = cls.paper()
        assert isinstance(cfg, cls)
