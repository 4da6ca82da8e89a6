import numpy as np
import pytest
import scipy.linalg
import torch

from replearn.theory import linalg


def rand(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def test_same_span_is_zero_and_orthogonal_span_is_one():
    B = rand(10, 3)
    Q = rand(3, 3, seed=1)  # invertible almost surely
    assert float(linalg.principal_angle_distance(B, B @ Q)) < 1e-12
    E = torch.eye(10, dtype=torch.float64)
    assert float(linalg.principal_angle_distance(E[:, :3], E[:, 3:6])) == pytest.approx(1.0, abs=1e-14)
    # one shared direction, one orthogonal direction: still distance 1
    assert float(linalg.principal_angle_distance(E[:, [0, 1]], E[:, [0, 2]])) == pytest.approx(1.0, abs=1e-14)


@pytest.mark.parametrize("seed", range(5))
def test_invariance_under_invertible_right_multiplication(seed):
    B1, B2 = rand(15, 4, seed=seed), rand(15, 4, seed=seed + 100)
    Q1, Q2 = rand(4, 4, seed=seed + 200), rand(4, 4, seed=seed + 300)
    base = linalg.principal_angle_distance(B1, B2)
    moved = linalg.principal_angle_distance(B1 @ Q1, 7.0 * B2 @ Q2)
    assert float(base) == pytest.approx(float(moved), abs=1e-10)
    assert 0.0 < float(base) < 1.0


@pytest.mark.parametrize("seed", range(5))
def test_agrees_with_scipy_subspace_angles(seed):
    B1, B2 = rand(9, 3, seed=seed), rand(9, 3, seed=seed + 50)
    angles = scipy.linalg.subspace_angles(B1.numpy(), B2.numpy())
    expected = np.sin(angles.max())
    assert float(linalg.principal_angle_distance(B1, B2)) == pytest.approx(expected, abs=1e-10)
    ours = linalg.principal_angles(B1, B2).numpy()
    assert np.allclose(np.sort(ours), np.sort(angles), atol=1e-8)


def test_principal_sines_are_the_sines_of_the_principal_angles_and_broadcast():
    B1, B2 = rand(9, 3, seed=1), rand(9, 3, seed=51)
    sines = linalg.principal_sines(B1, B2)
    assert torch.allclose(sines, torch.sin(linalg.principal_angles(B1, B2)).flip(-1), atol=1e-12)
    assert float(sines[0]) == pytest.approx(float(linalg.principal_angle_distance(B1, B2)), abs=1e-14)
    stack = torch.stack([B1, B2, 2.0 * B2])
    assert linalg.principal_sines(stack, B2).shape == (3, 3)
    assert float(linalg.principal_sines(stack, B2)[1:].abs().max()) < 1e-12
    with pytest.raises(ValueError, match="rank-deficient"):
        linalg.principal_sines(B1, torch.zeros(9, 3, dtype=torch.float64))


def test_symmetric_for_equal_dimensions_and_broadcasts():
    B1, B2 = rand(8, 2), rand(8, 2, seed=3)
    assert float(linalg.principal_angle_distance(B1, B2)) == pytest.approx(
        float(linalg.principal_angle_distance(B2, B1)), abs=1e-12)
    stack = torch.stack([B1, B2, B1 @ rand(2, 2, seed=9)])
    d = linalg.principal_angle_distance(stack, B1)
    assert d.shape == (3,)
    assert float(d[0]) < 1e-12 and float(d[2]) < 1e-10 and float(d[1]) > 0.1


def test_rank_deficient_first_argument_counts_missing_directions():
    E = torch.eye(6, dtype=torch.float64)
    B1 = torch.stack([E[:, 0], torch.zeros(6, dtype=torch.float64)], dim=1)  # rank 1
    assert float(linalg.principal_angle_distance(B1, E[:, :2])) == pytest.approx(1.0)


def test_basis_at_distance_and_orthonormal_helpers():
    B0 = rand(20, 4, seed=4)
    for delta in (0.0, 0.1, 0.5, 0.99):
        B = linalg.basis_at_distance(B0, delta, seed=5)
        assert torch.allclose(B.T @ B, torch.eye(4, dtype=torch.float64), atol=1e-12)
        assert float(linalg.principal_angle_distance(B0, B)) == pytest.approx(delta, abs=1e-10)
    Q = linalg.random_orthonormal(7, 3, seed=1)
    assert torch.allclose(Q.T @ Q, torch.eye(3, dtype=torch.float64), atol=1e-12)
    assert torch.equal(Q, linalg.random_orthonormal(7, 3, seed=1))
    perp = linalg.orthogonal_complement(Q)
    assert perp.shape == (7, 4) and float((perp.T @ Q).abs().max()) < 1e-12
    assert float(linalg.condition_number(torch.diag(torch.tensor([4.0, 2.0, 1.0], dtype=torch.float64)))) == 4.0


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="k = 5 columns > d = 3"):
        linalg.principal_angle_distance(rand(3, 5), rand(3, 2))
    with pytest.raises(ValueError, match="different spaces"):
        linalg.principal_angle_distance(rand(6, 2), rand(7, 2))
    with pytest.raises(ValueError, match="NaN"):
        linalg.principal_angle_distance(torch.full((4, 2), float("nan"), dtype=torch.float64), rand(4, 2))
    with pytest.raises(ValueError, match="k = 4 > d = 3"):
        linalg.random_orthonormal(3, 4)
    with pytest.raises(ValueError, match="need d > k"):
        linalg.basis_at_distance(rand(3, 3), 0.2)
    with pytest.raises(ValueError, match="delta"):
        linalg.basis_at_distance(rand(6, 2), 1.5)


def test_principal_angles_are_accurate_for_tiny_angles():
    e = torch.eye(4, dtype=torch.float64)
    eps = 1e-9
    B1 = e[:, :2]
    B2 = torch.stack([e[:, 0], torch.cos(torch.tensor(eps, dtype=torch.float64)) * e[:, 1]
                      + torch.sin(torch.tensor(eps, dtype=torch.float64)) * e[:, 2]], dim=1)
    angles = linalg.principal_angles(B1, B2)
    assert abs(float(angles[1]) - eps) < 1e-15 and abs(float(angles[0])) < 1e-15


@pytest.mark.parametrize("k1, k2", [(2, 3), (3, 2), (1, 4)])
def test_principal_angles_of_unequal_ranks(k1, k2):
    """Spans of unequal rank: min(k1, k2) angles, scipy's, in either order and for stacks (before:
    torch's raw shape error when k1 < k2)."""
    B1, B2 = rand(7, k1, seed=k1), rand(7, k2, seed=10 + k2)
    expected = np.sort(scipy.linalg.subspace_angles(B1.numpy(), B2.numpy()))
    for a, b in ((B1, B2), (B2, B1)):
        angles = linalg.principal_angles(a, b)
        assert angles.shape == (min(k1, k2),)
        assert np.allclose(angles.numpy(), expected, atol=1e-10)
    stacked = linalg.principal_angles(torch.stack([B1, 3.0 * B1]), B2)
    assert stacked.shape == (2, min(k1, k2)) and torch.allclose(stacked[0], stacked[1], atol=1e-12)
    # a span inside the other: all angles 0
    inner = linalg.principal_angles(B1[:, :1], B1)
    assert inner.shape == (1,) and float(inner.abs().max()) < 1e-7


def test_basis_at_distance_depends_on_the_column_space_only():
    """The same col(B0) given by two different bases (here B0 and B0 R, R invertible) yields the
    same result: no SVD/LAPACK-dependent choice of a basis of col(B0) or of its complement enters."""
    B0 = linalg.random_orthonormal(12, 3, seed=4)
    R = torch.tensor([[2.0, 0.5, 0.0], [0.0, -1.0, 0.3], [0.1, 0.0, 0.7]], dtype=torch.float64)
    A = linalg.basis_at_distance(B0, 0.4, seed=5)
    B = linalg.basis_at_distance(B0 @ R, 0.4, seed=5)
    assert torch.allclose(A, B, atol=1e-12)
    assert abs(float(linalg.principal_angle_distance(B0, A)) - 0.4) < 1e-12
    assert torch.allclose(A.T @ A, torch.eye(3, dtype=torch.float64), atol=1e-12)
