import math
from dataclasses import replace

import pytest

from replearn.experiments.ch03_aruba import s03_framework as s03

SMALL_FW = s03.FrameworkSettings(T=40, runs=2, spreads=(0.03, 0.3), rates=(0.1, 0.5))


def test_framework_small_run():
    res = s03.framework(SMALL_FW)
    assert res.learned_rate.shape == (2, SMALL_FW.T)
    opt, last = res.reptile[("optimum", 0.0)], res.reptile[("last_iterate", 0.0)]
    assert float(last[-1]) > float(opt[-1]) and float(last[-1]) < float(last[0])
    rate, late = res.best_grid()
    assert rate.shape == (2,) and bool((late <= res.grid_late.nan_to_num(math.inf).min(-1).values).all())


@pytest.mark.parametrize("bad", [
    lambda: s03.framework(replace(SMALL_FW, reptile_rates=(-1.0,))),
    lambda: s03.framework(replace(SMALL_FW, rates=())),
    lambda: s03.FrameworkSettings(family=object()),
])
def test_bad_inputs_raise(bad):
    with pytest.raises(ValueError):
        bad()


LONGER = replace(SMALL_FW, T=60)


def test_reptile_model_tables_and_numbers():
    # the tables show t = 10, 50 and T
    import matplotlib.pyplot as plt

    fam = LONGER.family
    assert s03.coverage(fam.d, fam) == 1.0 and 0 < s03.coverage(0.1, fam) < 1
    pred = s03.reptile_model(LONGER)
    assert set(pred) == set(LONGER.reptile_rates)
    assert all(p.shape == (LONGER.T,) and float(p[0]) == fam.center_norm for p in pred.values())
    res = s03.framework(LONGER)
    lines = s03.reptile_table(res, LONGER, pred).splitlines()
    assert len(lines) == 2 + 2 * len(LONGER.reptile_rates)
    numbers = s03.reptile_numbers(res, LONGER, pred)
    assert list(numbers) == ["V", "slow-rate", "fast-rate", "c-slow", "c-fast", "model", "measured", "regret-ratio"]
    best_rate, best_late = res.best_grid()
    assert len(s03.learned_rate_table(res, best_rate, best_late).splitlines()) == 1 + len(LONGER.spreads)
    fig = s03.plot_framework(res, LONGER, pred, best_rate)
    assert len(fig.axes) == 2
    plt.close(fig)
