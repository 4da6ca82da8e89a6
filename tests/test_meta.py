import pytest
import torch

from replearn.theory import linear_federated, linear, meta


def test_arm_is_gd_on_the_average_risk(problem):
    traj = meta.arm(problem["B0"], problem["w0"], problem["tasks"], beta=0.1, iterations=3)
    ref = linear_federated.dgd(problem["B0"], problem["w0"], problem["tasks"], alpha=0.1, rounds=3)
    assert torch.equal(traj.B, ref.B) and torch.equal(traj.w, ref.w)


def test_average_risk_identity():
    Bstar = linear.ground_truth_representation(8, 3, seed=0)
    W = linear.make_heads(6, 3, mean_norm=0.7, exact=False, seed=1)
    theta = linear.targets(Bstar, W)
    gen = torch.Generator().manual_seed(2)
    B = torch.randn(5, 8, 3, generator=gen, dtype=torch.float64)
    w = torch.randn(5, 3, generator=gen, dtype=torch.float64)
    v = Bstar @ W.mean(0)
    rhs = 0.5 * (linear.predict(B, w) - v).pow(2).sum(-1) + meta.average_risk_minimum(W)
    assert torch.allclose(meta.average_risk(B, w, theta), rhs, rtol=1e-12)
    # and the direct per-task average
    direct = torch.stack([linear.losses(B[j], w[j], linear.population_tasks(Bstar, W)).mean() for j in range(5)])
    assert torch.allclose(meta.average_risk(B, w, theta), direct, rtol=1e-12)


def test_decomposition_matches_the_code_step_along_a_trajectory(problem):
    beta, Bstar, W = 0.1, problem["Bstar"], problem["W"]
    traj = meta.arm(problem["B0"], problem["w0"], problem["tasks"], beta=beta, iterations=20)
    for t in range(20):
        prior, signal = meta.arm_decomposition(traj.w[t], W, beta)
        assert torch.allclose(traj.B[t] @ prior + Bstar @ signal, traj.B[t + 1], atol=1e-11)
    # the structure the text relies on: identity off w_t, rank-one signal
    prior, signal = meta.arm_decomposition(traj.w[5], W, beta)
    assert int(torch.linalg.matrix_rank(signal)) == 1
    assert int(torch.linalg.matrix_rank(prior - torch.eye(problem["k"], dtype=torch.float64), rtol=1e-8)) == 1
    # a wrong formula (using the heads' second moment instead of their mean) must not match
    wrong = beta * (W.T @ W / W.shape[0]) @ torch.outer(traj.w[5], traj.w[5])
    assert not torch.allclose(traj.B[5] @ prior + Bstar @ wrong, traj.B[6], atol=1e-6)


def test_decomposition_rejects_bad_shapes(problem):
    with pytest.raises(ValueError, match="heads W"):
        meta.arm_decomposition(problem["w0"], problem["W"][:, :2], 0.1)


def test_subspace_floor_bounds_every_arm_iterate(problem):
    Bstar, W = problem["Bstar"], problem["W"]
    floor = float(meta.arm_subspace_floor(problem["B0"], Bstar, W))
    traj = meta.arm(problem["B0"], problem["w0"], problem["tasks"], beta=0.1, iterations=200)
    dist = traj.dist(Bstar)
    assert 0.0 < floor <= float(dist[0]) + 1e-12
    assert bool((dist >= floor - 1e-12).all())
    # the floor is not vacuous here: FedAvg with two local steps goes below it
    fed = linear_federated.fedavg(problem["B0"], problem["w0"], problem["tasks"], alpha=0.1, tau=2, rounds=200)
    assert float(fed.dist(Bstar)[-1]) < floor


def test_subspace_floor_is_zero_for_k_equal_one():
    Bstar = linear.ground_truth_representation(6, 1, seed=0)
    W = linear.make_heads(4, 1, mean_norm=1.0, exact=False, seed=1)
    B0 = linear.ground_truth_representation(6, 1, seed=2)
    assert float(meta.arm_subspace_floor(B0, Bstar, W)) < 1e-12


def test_subspace_floor_rejects_bad_shapes(problem):
    with pytest.raises(ValueError, match="must both be"):
        meta.arm_subspace_floor(problem["B0"][:, :2], problem["Bstar"], problem["W"])
