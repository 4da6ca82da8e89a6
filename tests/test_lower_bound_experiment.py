from dataclasses import replace

import pytest
import torch

from replearn import linalg
from replearn.experiments import lower_bound as lb
from replearn.meta import arm

SMALL = lb.LowerBoundSweepSettings(instances=40, d_max=12, k_max=4, n_max=12, T_max=60)


def test_sweep_shapes_and_ranges():
    res = lb.run_sweep(SMALL)
    fields = ("d", "k", "n", "delta", "beta", "T", "dist_T", "min_dist")
    for name in fields:
        assert getattr(res, name).shape == (40,)
    assert bool((res.k >= 2).all() and (res.k < res.d).all() and (res.n > res.k).all())
    assert bool((res.delta > 0).all() and (res.delta <= 0.5).all() and (res.beta > 0).all())
    assert bool((res.T >= 1).all() and (res.T <= 60).all())
    assert bool((res.min_dist <= res.dist_T + 1e-15).all())


def test_sweep_never_beats_delta():
    res = lb.run_sweep(SMALL)
    assert float(res.ratio_T.min()) >= 1 - 1e-8
    assert float(res.ratio_min.min()) >= 1 - 1e-8


def test_sweep_is_reproducible_and_seed_dependent():
    a, b = lb.run_sweep(SMALL), lb.run_sweep(SMALL)
    assert torch.equal(a.dist_T, b.dist_T) and torch.equal(a.d, b.d)
    c = lb.run_sweep(replace(SMALL, seed=1))
    assert not torch.equal(a.delta, c.delta)


@pytest.mark.parametrize("bad", [dict(instances=0), dict(d_min=2), dict(d_max=2), dict(k_max=1),
                                 dict(n_max=2), dict(T_max=0), dict(cond_max=0.5),
                                 dict(step_fraction=(0.5, 0.1)), dict(step_fraction=(0.1, 1.0)),
                                 dict(seed=-1)])
def test_settings_validation(bad):
    with pytest.raises(ValueError):
        lb.run_sweep(replace(SMALL, **bad))


def test_paper_profile_is_larger():
    paper = lb.LowerBoundSweepSettings.paper()
    paper.validate()
    assert paper.instances > SMALL.instances and paper.d_max > lb.LowerBoundSweepSettings().d_max


def test_adversarial_instance_geometry():
    inst = lb.make_instance(15, 3, 10, 0.4, cond=5.0, mean_norm=1.0, seed=2)
    assert float(linalg.principal_angle_distance(inst.B0, inst.Bstar)) == pytest.approx(0.4, abs=1e-12)
    Q0 = linalg.orthonormal_basis(inst.B0)
    v = inst.mean_regressor
    assert float((v - Q0 @ (Q0.T @ v)).norm()) < 1e-12 * float(v.norm())


def test_generic_tilt_improves_at_most_one_angle():
    inst = lb.make_instance(20, 3, 20, 0.3, construction="generic", cond=4.0, seed=1)
    traj = arm(inst.B0, inst.w0, inst.tasks, beta=0.3, iterations=300)
    sines = lb.arm_sines(traj.B, inst.Bstar)
    assert torch.allclose(sines[0], torch.full((3,), 0.3, dtype=torch.float64), atol=1e-12)
    assert float(sines[:, :2].min()) >= 0.3 - 1e-10   # the k - 1 largest stay at least delta
    assert float(sines[-1, 2]) < 1e-3                 # one direction (along v) is fixed


@pytest.mark.parametrize("kwargs", [dict(k=1), dict(d=3, k=3), dict(n=3, k=3), dict(delta=0.0),
                                    dict(construction="random"), dict(b0_scale=0.0)])
def test_make_instance_validation(kwargs):
    args = dict(d=10, k=3, n=8, delta=0.3)
    args.update(kwargs)
    with pytest.raises(ValueError):
        lb.make_instance(args.pop("d"), args.pop("k"), args.pop("n"), args.pop("delta"), **args)
