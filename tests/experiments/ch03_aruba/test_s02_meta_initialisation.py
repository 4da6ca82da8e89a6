from dataclasses import replace

import pytest

from replearn.theory import aruba
from replearn.experiments.ch03_aruba import s02_meta_initialisation as s02

SMALL_MI = s02.MetaInitSettings(T=40, runs=2, spreads=(0.03, 1.0), rates=(0.01, 0.5))


def test_meta_init_claims_on_a_small_run():
    res = s02.meta_init(SMALL_MI)
    assert res.rbar["theorem"].shape == (2, SMALL_MI.T)
    assert res.mean_gap < 1e-12
    assert bool((res.rbar["theorem"][:, -1] < res.rbar["single"][:, -1]).all())
    assert float(res.rbar["theorem"][0, -1]) < float(res.rbar["theorem"][0, 4])
    assert bool((res.meta_regret <= res.meta_bound).all())
    assert bool((res.rbar["theorem"][:, -1] <= res.bound).all())
    assert res.sweep.shape == (2, 2)


@pytest.mark.parametrize("bad", [
    lambda: s02.meta_init(replace(SMALL_MI, spreads=(0.1, -0.2))),
    lambda: s02.meta_init(replace(SMALL_MI, T=0)),
    lambda: s02.MetaInitSettings(family=aruba.TaskFamily(m=40, center_norm=20.0)),
    lambda: s02.MetaInitSettings(family=None),
])
def test_bad_inputs_raise(bad):
    with pytest.raises(ValueError):
        bad()
