import math
from dataclasses import replace

import pytest
import torch

from replearn.experiments import aruba_basics as ab

SMALL_ST = ab.SingleTaskSettings(ms=(10, 40, 160), tasks=5, runs=2, sign_runs=50)
SMALL_MI = ab.MetaInitSettings(T=40, runs=2, spreads=(0.03, 1.0), rates=(0.01, 0.5))
SMALL_FW = ab.FrameworkSettings(T=40, runs=2, spreads=(0.03, 0.3), rates=(0.1, 0.5))


@pytest.mark.parametrize("loss", ["absolute", "squared"])
def test_single_task_bounds_hold_and_are_ordered(loss):
    res = ab.single_task(SMALL_ST, loss=loss)
    assert res.regret.shape == (3, 10)
    assert bool((res.regret <= res.sharp + 1e-9).all())
    assert bool((res.sharp <= res.U + 1e-9).all()) and bool((res.U <= 2 * res.sharp + 1e-9).all())
    assert bool((res.sharp <= res.worst + 1e-9).all())
    assert torch.allclose(res.eta, res.D / (res.G * res.ms.sqrt()))
    again = ab.single_task(SMALL_ST, loss=loss)
    assert torch.equal(res.regret, again.regret)


def test_rademacher_regret_formula_and_bounds():
    m, D = 30, 2.0
    r = ab.rademacher_regret(m, D, 200, seed=3)
    assert r.shape == (200,)
    assert bool((r <= D * math.sqrt(m) + 1e-9).all())           # OGD's upper bound with G = 1
    assert abs(float(r.mean()) - D * ab.expected_abs_walk(m)) < 4 * float(r.std()) / math.sqrt(200)


def test_expected_abs_walk_small_cases():
    assert ab.expected_abs_walk(1) == 1.0
    assert ab.expected_abs_walk(2) == 1.0
    assert ab.expected_abs_walk(3) == 1.5
    assert ab.expected_abs_walk(100) >= math.sqrt(100 / 3)


def test_meta_init_claims_on_a_small_run():
    res = ab.meta_init(SMALL_MI)
    assert res.rbar["theorem"].shape == (2, SMALL_MI.T)
    assert res.mean_gap < 1e-12
    assert bool((res.rbar["theorem"][:, -1] < res.rbar["single"][:, -1]).all())
    assert float(res.rbar["theorem"][0, -1]) < float(res.rbar["theorem"][0, 4])
    assert bool((res.meta_regret <= res.meta_bound).all())
    assert bool((res.rbar["theorem"][:, -1] <= res.bound).all())
    assert res.sweep.shape == (2, 2)


def test_ftl_meta_regret_matches_definition():
    gen = torch.Generator().manual_seed(0)
    star = torch.randn(1, 6, 3, generator=gen, dtype=torch.float64)
    means = star.cumsum(1) / torch.arange(1, 7, dtype=torch.float64)[:, None]
    init = torch.cat([torch.zeros(1, 1, 3, dtype=torch.float64), means[:, :-1]], 1)
    regret, bound = ab.ftl_meta_regret(init, star)
    direct = sum(float((init[0, t] - star[0, t]).pow(2).sum()) for t in range(6)) \
        - sum(float((star[0].mean(0) - star[0, t]).pow(2).sum()) for t in range(6))
    assert abs(float(regret) - direct) < 1e-12 and float(regret) <= float(bound)
    with pytest.raises(ValueError, match="runs, T, d"):
        ab.ftl_meta_regret(init[0], star[0])


def test_theorem_bound_value():
    assert math.isclose(ab.theorem_bound(1.0, 1.0, 4, 1, 1.0, 0.5), 8 + 1 + 1)


def test_convexity_gaps_nonnegative():
    for per_coordinate in (True, False):
        assert bool((ab.convexity_gaps(300, 4, per_coordinate=per_coordinate, seed=1) >= -1e-12).all())


def test_framework_small_run():
    res = ab.framework(SMALL_FW)
    assert res.learned_rate.shape == (2, SMALL_FW.T)
    opt, last = res.reptile[("optimum", 0.0)], res.reptile[("last_iterate", 0.0)]
    assert float(last[-1]) > float(opt[-1]) and float(last[-1]) < float(last[0])
    rate, late = res.best_grid()
    assert rate.shape == (2,) and bool((late <= res.grid_late.nan_to_num(math.inf).min(-1).values).all())


@pytest.mark.parametrize("bad", [
    lambda: ab.single_task(replace(SMALL_ST, ms=())),
    lambda: ab.single_task(replace(SMALL_ST, ms=(0, 10))),
    lambda: ab.single_task(replace(SMALL_ST, tasks=0)),
    lambda: ab.single_task(SMALL_ST, loss="hinge"),
    lambda: ab.rademacher_regret(0, 1.0, 5),
    lambda: ab.rademacher_regret(5, -1.0, 5),
    lambda: ab.expected_abs_walk(0),
    lambda: ab.meta_init(replace(SMALL_MI, spreads=(0.1, -0.2))),
    lambda: ab.meta_init(replace(SMALL_MI, T=0)),
    lambda: ab.framework(replace(SMALL_FW, reptile_rates=(-1.0,))),
    lambda: ab.framework(replace(SMALL_FW, rates=())),
    lambda: ab.convexity_gaps(0),
])
def test_bad_inputs_raise(bad):
    with pytest.raises(ValueError):
        bad()
