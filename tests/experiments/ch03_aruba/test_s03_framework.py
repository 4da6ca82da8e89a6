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
