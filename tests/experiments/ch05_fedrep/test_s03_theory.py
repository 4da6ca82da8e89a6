"""Book 5.3 driver (replearn.experiments.ch05_fedrep.s03_theory): FedRep's measured rate against
Theorem 1, and the samples per client that federation needs."""

import math

import pytest
import torch

from replearn.theory import linear_fedrep
from replearn.experiments.ch05_fedrep import s03_theory as s03


pytestmark = pytest.mark.usefixtures("one_thread")


def test_rates_match_infinite_sample_factor_and_beat_theorem():
    cfg = s03.RateSettings(d=10, k=2, n=40, m=40, etas=(0.2,), conds=(2.0,), rounds=200)
    res = s03.run_rates(cfg)
    key = (2.0, 0.2)
    assert res.sigma2[2.0][0] == pytest.approx(0.5) and res.sigma2[2.0][1] == pytest.approx(1.0)
    assert res.r2[key] > 0.99
    assert res.rate[key] < res.theorem[key]
    assert abs(math.log(res.rate[key]) / math.log(res.first_order[key]) - 1) < 0.25


def test_federation_small_grid():
    cfg = s03.LinearFederationSettings(d=12, k=2, ns=(5, 200), ms=(3, 10), rounds=150)
    res = s03.run_federation(cfg)
    assert bool(res.recovered[0, 1])          # m = 3 with 200 clients recovers col(B_*)
    assert not bool(res.recovered[0, 0])      # m = 3 with 5 clients does not
    need = res.smallest_m()
    assert float(need[1]) <= float(need[0])
    assert res.counting[0] == pytest.approx(linear_fedrep.counting_bound(12, 2, 5))
    assert torch.allclose(res.local, res.local_formula, atol=0.15)


@pytest.mark.parametrize("make", [
    lambda: s03.run_rates(s03.RateSettings(dist0=1.0)),
    lambda: s03.run_rates(s03.RateSettings(etas=(0.0,))),
    lambda: s03.run_federation(s03.LinearFederationSettings(tol=0.0)),
    lambda: s03.run_federation(s03.LinearFederationSettings(ns=(2.5,))),
])
def test_bad_inputs_raise(make):
    with pytest.raises(ValueError):
        make()


def test_paper_profiles_are_valid():
    for cls in (s03.RateSettings, s03.LinearFederationSettings):
        cfg = cls.profile("paper")
        assert isinstance(cfg, cls)


def test_tables_and_figure():
    import matplotlib.pyplot as plt

    rates = s03.run_rates(s03.RateSettings(d=10, k=2, n=40, m=40, etas=(0.2,), conds=(2.0,), rounds=200))
    lines = s03.rate_table(rates).splitlines()
    assert lines[0].startswith("E_0 = ") and len(lines) == 3 and lines[2].rstrip().endswith("x")
    cfg = s03.LinearFederationSettings(d=12, k=2, ns=(5, 200), ms=(3, 10), rounds=150)
    fed = s03.run_federation(cfg)
    table = s03.federation_table(fed, cfg).splitlines()
    assert table[0].startswith("  n   | smallest m") and len(table) == 3
    assert table[2].split("|")[1].strip() == "3"   # 200 clients recover col(B_*) at m = 3
    fig = s03.plot_federation(fed, cfg)
    assert len(fig.axes) == 2   # the map and its colour bar
    plt.close(fig)
