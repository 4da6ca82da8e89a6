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


LONGER = replace(SMALL_MI, T=60, spreads=(0.03, 0.1, 0.3, 1.0))


def test_tables_numbers_and_best_rate():
    # the tables show t = 10, 50 and T
    import matplotlib.pyplot as plt
    import numpy as np

    res = s02.meta_init(LONGER)
    lines = s02.init_table(res, LONGER).splitlines()
    assert lines[0].startswith(f"d = {LONGER.family.d}") and len(lines) == 2 + 4 + 1 + 4 + 1
    numbers = s02.init_numbers(res)
    assert list(numbers)[:3] == ["single-small", "theorem-lo", "theorem-hi"] and numbers["G"] == round(res.G, 1)
    best_rate, best_late = s02.best_fixed_rate(res)
    assert best_late.shape == (4,) and bool((best_late <= res.sweep.min(1).values + 1e-12).all())
    assert set(best_rate.tolist()) <= set(res.rates.tolist())
    theory = res.V / (res.G * np.sqrt(LONGER.family.m))
    table = s02.rate_table(res, theory, best_rate, res.late["theorem"], best_late).splitlines()
    assert table[0].startswith("V_hat") and len(table) == 5
    colors = plt.cm.viridis(np.linspace(0.0, 0.85, 4))
    fig = s02.plot_rate_sweep(res, LONGER, colors, theory, best_late, res.late["theorem"])
    assert len(fig.axes) == 2
    plt.close(fig)
