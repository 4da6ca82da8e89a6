from dataclasses import replace

import pytest
import torch

from replearn.theory import aruba
from replearn.experiments.ch03_aruba import s01_online_learning as s01

SMALL_ST = s01.SingleTaskSettings(ms=(10, 40, 160), tasks=5, runs=2, sign_runs=50)


@pytest.mark.parametrize("loss", ["absolute", "squared"])
def test_single_task_bounds_hold_and_are_ordered(loss):
    res = s01.single_task(SMALL_ST, loss=loss)
    assert res.regret.shape == (3, 10)
    assert bool((res.regret <= res.sharp + 1e-9).all())
    assert bool((res.sharp <= res.U + 1e-9).all()) and bool((res.U <= 2 * res.sharp + 1e-9).all())
    assert bool((res.sharp <= res.worst + 1e-9).all())
    assert torch.allclose(res.eta, res.D / (res.G * res.ms.sqrt()))
    again = s01.single_task(SMALL_ST, loss=loss)
    assert torch.equal(res.regret, again.regret)


def test_single_task_loss_defaults_to_the_family_loss():
    assert SMALL_ST.family.loss == "absolute"
    assert torch.equal(s01.single_task(SMALL_ST).regret, s01.single_task(SMALL_ST, loss="absolute").regret)


def test_sign_regrets_are_the_library_lower_bound_runs():
    signs = s01.sign_regrets(SMALL_ST)
    assert list(signs) == list(SMALL_ST.ms)
    for m, r in signs.items():
        assert r.shape == (SMALL_ST.sign_runs,)
        assert torch.equal(r, aruba.rademacher_regret(m, SMALL_ST.family.radius, SMALL_ST.sign_runs,
                                                       seed=SMALL_ST.seed + m))


@pytest.mark.parametrize("bad", [
    lambda: s01.single_task(replace(SMALL_ST, ms=())),
    lambda: s01.single_task(replace(SMALL_ST, ms=(0, 10))),
    lambda: s01.single_task(replace(SMALL_ST, tasks=0)),
    lambda: s01.single_task(SMALL_ST, loss="hinge"),
    lambda: s01.SingleTaskSettings(family=aruba.TaskFamily(radius=-1.0)),
    lambda: s01.SingleTaskSettings(family="absolute"),
])
def test_bad_inputs_raise(bad):
    with pytest.raises(ValueError):
        bad()


def test_regret_table_has_a_row_per_task_length():
    res = s01.single_task(SMALL_ST, loss="absolute")
    lines = s01.regret_table(res, SMALL_ST.ms).splitlines()
    assert lines[0].startswith("absolute loss: D = ") and "means over" in lines[0]
    assert len(lines) == 2 + len(SMALL_ST.ms)
    assert lines[2].split()[0] == "10"
