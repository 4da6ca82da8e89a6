import pytest
import torch

from replearn import linalg, linear, lower_bound, meta


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
