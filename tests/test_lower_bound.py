import pytest
import torch

from replearn.theory import linear_federated, linalg, linear, lower_bound, meta


@pytest.mark.parametrize("seed", range(6))
def test_construction_is_orthonormal_at_distance_delta_with_mean_regressor_in_col_B0(seed):
    d, k, n = 10 + seed, 2 + seed % 3, 12
    B0 = torch.randn(d, k, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    W = linear.make_heads(n, k, mean_norm=1.0 + seed, cond=2.0, seed=seed)
    delta = 0.05 + 0.08 * seed
    Bstar = lower_bound.adversarial_ground_truth(B0, W, delta, seed=seed)
    assert torch.allclose(Bstar.T @ Bstar, torch.eye(k, dtype=torch.float64), atol=1e-12)
    assert float(linalg.principal_angle_distance(B0, Bstar)) == pytest.approx(delta, abs=1e-10)
    v = Bstar @ W.mean(0)
    Q = linalg.orthonormal_basis(B0)
    assert float((v - Q @ (Q.T @ v)).norm()) < 1e-10 * float(v.norm())


@pytest.mark.parametrize("seed", range(4))
def test_arm_never_gets_closer_than_delta_but_does_improve_a_generic_rank_one_tilt(seed):
    d, k, n, beta, delta = 15, 3, 10, 0.2, 0.4
    B0 = linalg.random_orthonormal(d, k, seed) / beta**0.5
    w0 = torch.zeros(k, dtype=torch.float64)
    W = linear.make_heads(n, k, mean_norm=1.0, cond=2.0, seed=seed)
    Bstar = lower_bound.adversarial_ground_truth(B0, W, delta, seed=seed)
    traj = meta.arm(B0, w0, linear.population_tasks(Bstar, W), beta=beta, iterations=300)
    assert float(traj.dist(Bstar).min()) >= delta - 1e-9
    # contrast: the same rank-one tilt without aligning the mean head lets ARM get closer
    generic = linalg.basis_at_distance(B0, delta, n_tilted=1, seed=seed)
    traj = meta.arm(B0, w0, linear.population_tasks(generic, W), beta=beta, iterations=300)
    assert float(traj.dist(generic)[-1]) < 0.98 * delta


def test_bad_inputs():
    W = linear.make_heads(5, 2, seed=0)
    B0 = torch.randn(6, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match="k >= 2"):
        lower_bound.adversarial_ground_truth(B0[:, :1], W[:, :1], 0.3)
    with pytest.raises(ValueError, match="delta"):
        lower_bound.adversarial_ground_truth(B0, W, 0.0)
    with pytest.raises(ValueError, match="need d > k"):
        lower_bound.adversarial_ground_truth(B0[:2], W, 0.3)
    with pytest.raises(ValueError, match="heads W"):
        lower_bound.adversarial_ground_truth(B0, W[:, :1], 0.3)
    with pytest.raises(ValueError, match="full column rank"):
        lower_bound.adversarial_ground_truth(torch.ones(6, 2, dtype=torch.float64), W, 0.3)


def test_adversarial_instance_geometry():
    inst = lower_bound.make_instance(15, 3, 10, 0.4, cond=5.0, mean_norm=1.0, seed=2)
    assert isinstance(inst, linear.Problem)
    assert float(linalg.principal_angle_distance(inst.B0, inst.Bstar)) == pytest.approx(0.4, abs=1e-12)
    Q0 = linalg.orthonormal_basis(inst.B0)
    v = inst.mean_regressor
    assert float((v - Q0 @ (Q0.T @ v)).norm()) < 1e-12 * float(v.norm())


def test_generic_tilt_improves_at_most_one_angle():
    inst = lower_bound.make_instance(20, 3, 20, 0.3, construction="generic", cond=4.0, seed=1)
    traj = meta.arm(inst.B0, inst.w0, inst.tasks, beta=0.3, iterations=300)
    sines = linalg.principal_sines(traj.B, inst.Bstar)
    assert torch.allclose(sines[0], torch.full((3,), 0.3, dtype=torch.float64), atol=1e-12)
    assert float(sines[:, :2].min()) >= 0.3 - 1e-10   # the k - 1 largest stay at least delta
    assert float(sines[-1, 2]) < 1e-3                 # one direction (along v) is fixed


@pytest.mark.parametrize("kwargs", [dict(k=1), dict(d=3, k=3), dict(n=3, k=3), dict(delta=0.0),
                                    dict(construction="random"), dict(b0_scale=0.0)])
def test_make_instance_validation(kwargs):
    args = dict(d=10, k=3, n=8, delta=0.3)
    args.update(kwargs)
    with pytest.raises(ValueError):
        lower_bound.make_instance(args.pop("d"), args.pop("k"), args.pop("n"), args.pop("delta"), **args)


def test_stable_step_is_the_inverse_curvature_scale_and_keeps_arm_stable():
    inst = lower_bound.make_instance(12, 3, 10, 0.3, cond=3.0, b0_scale=0.5, seed=4)
    s = torch.linalg.svdvals(inst.B0)
    heads = float(inst.W.norm(dim=1).max()) ** 2
    assert lower_bound.stable_step(inst) == pytest.approx(1.0 / (float(s[0]) ** 2 + heads / float(s[-1]) ** 2),
                                                          rel=1e-14)
    traj = meta.arm(inst.B0, inst.w0, inst.tasks, beta=0.5 * lower_bound.stable_step(inst), iterations=200)
    assert bool(torch.isfinite(traj.B).all())


def test_weighted_instance_defeats_weighted_dgd_only():
    sizes = torch.tensor([5.0, 50.0, 10.0, 80.0, 20.0, 30.0, 7.0, 60.0], dtype=torch.float64)
    inst = lower_bound.weighted_adversarial_instance(12, 3, 8, 0.3, sizes, cond=3.0, mean_norm=1.0, seed=0)
    assert abs(float(linalg.principal_angle_distance(inst.B0, inst.Bstar)) - 0.3) < 1e-12
    weighted = linear_federated.dgd(inst.B0, inst.w0, inst.tasks, alpha=0.3, rounds=200, weights=sizes)
    assert float((weighted.dist(inst.Bstar) - 0.3).abs().max()) < 1e-10
    # the construction is specific to the weights: unweighted D-GD sees another mean regressor
    plain = linear_federated.dgd(inst.B0, inst.w0, inst.tasks, alpha=0.3, rounds=200)
    assert float((plain.dist(inst.Bstar) - 0.3).abs().max()) > 1e-4
    # the weighted mean regressor lies in col(B_0); B_0, w_0 and the heads are make_instance's
    p = sizes / sizes.sum()
    v = inst.Bstar @ (p @ inst.W)
    Q = linalg.orthonormal_basis(inst.B0)
    assert float((v - Q @ (Q.T @ v)).norm()) < 1e-10 * float(v.norm())
    base = lower_bound.make_instance(12, 3, 8, 0.3, cond=3.0, mean_norm=1.0, w0_scale=0.1, seed=0)
    assert torch.equal(inst.B0, base.B0) and torch.equal(inst.w0, base.w0) and torch.equal(inst.W, base.W)


def test_weights_must_match_clients():
    with pytest.raises(ValueError, match="positive"):
        lower_bound.weighted_adversarial_instance(10, 2, 8, 0.2, torch.ones(7), cond=2.0, mean_norm=1.0)
    with pytest.raises(ValueError, match="positive"):
        lower_bound.weighted_adversarial_instance(10, 2, 8, 0.2, -torch.ones(8), cond=2.0, mean_norm=1.0)
