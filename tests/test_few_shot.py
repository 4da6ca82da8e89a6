import math

import pytest
import torch

from replearn.theory import few_shot, linalg, linear


def test_new_task_errors_match_a_direct_solve():
    Bstar = linear.ground_truth_representation(7, 2, seed=0)
    w = torch.tensor([0.6, -0.8], dtype=torch.float64)
    errs = few_shot.new_task_errors(Bstar, w, 12, noise_std=0.3, trials=3, seed=11, batch=2)
    gen = torch.Generator().manual_seed(11)
    X1 = torch.randn(2, 12, 7, generator=gen, dtype=torch.float64)
    y1 = X1 @ (Bstar @ w) + 0.3 * torch.randn(2, 12, generator=gen, dtype=torch.float64)
    theta_hat = torch.linalg.solve(X1[0].T @ X1[0], X1[0].T @ y1[0])
    assert errs["from scratch"][0].item() == pytest.approx(float((theta_hat - Bstar @ w).pow(2).sum()))
    F = X1[0] @ Bstar
    w_hat = torch.linalg.solve(F.T @ F, F.T @ y1[0])
    assert errs["known representation"][0].item() == pytest.approx(float((w_hat - w).pow(2).sum()))


def test_bad_direct_inputs_raise():
    Bstar = linear.ground_truth_representation(6, 2, seed=0)
    w = torch.ones(2, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"m \(samples of the new task\) must be an integer >= 1"):
        few_shot.new_task_errors(Bstar, w, 0, noise_std=0.1, trials=3)
    with pytest.raises(ValueError, match=r"w_\* must have shape \(2,\)"):
        few_shot.new_task_errors(Bstar, torch.ones(3, dtype=torch.float64), 5, noise_std=0.1, trials=3)
    with pytest.raises(ValueError, match=r"k = 6 > d = 2"):
        few_shot.new_task_errors(Bstar.T, torch.ones(6, dtype=torch.float64), 5, noise_std=0.1, trials=3)


def test_true_representation_is_exact_without_noise():
    Bstar = linear.ground_truth_representation(10, 3, seed=0)
    for m in (3, 4, 9):
        errors = few_shot.head_errors({"true": Bstar}, Bstar, m, noise_std=0.0, trials=50, batch=20, seed=2)
        assert float(errors["true"].max()) < 1e-20


def test_floor_formula_matches_monte_carlo_for_a_fixed_representation():
    Bstar = linear.ground_truth_representation(12, 3, seed=0)
    B = linalg.basis_at_distance(Bstar, 0.6, seed=1) @ torch.randn(3, 3, dtype=torch.float64,
                                                                   generator=torch.Generator().manual_seed(3))
    F = float(linear.head_error_floor(B, Bstar))
    assert 0.6**2 - 1e-10 <= F <= 3 * 0.6**2 + 1e-10
    for m in (30, 200):
        e = few_shot.head_errors({"B": B}, Bstar, m, noise_std=0.2, trials=4000, batch=2000, seed=4)["B"]
        theory = linear.expected_head_error(m, 3, 0.04, F)
        assert abs(float(e.mean()) - theory) < 4 * float(e.std()) / math.sqrt(e.numel())


def test_joint_gd_from_the_true_model_with_many_samples_is_accurate_and_respects_the_bound():
    Bstar = linear.ground_truth_representation(10, 2, seed=0)
    # started at the truth's column space, joint GD fits most new heads from enough samples
    e = few_shot.joint_errors(Bstar, torch.zeros(2, dtype=torch.float64), Bstar, 60, noise_std=0.0, trials=20,
                              steps=300, lr=0.5, seed=1)
    assert e.shape == (20,) and float(e.median()) < 1e-6
    # from a representation at distance 0.8, the few-shot mean stays above (1 - m/(d - k)) F
    B = linalg.basis_at_distance(Bstar, 0.8, seed=2)
    F = float(linear.head_error_floor(B, Bstar))
    e = few_shot.joint_errors(B, torch.zeros(2, dtype=torch.float64), Bstar, 3, noise_std=0.0, trials=400,
                              steps=50, lr=0.5, seed=3)
    assert float(e.mean()) > (1 - 3 / 8) * F - 4 * float(e.std()) / math.sqrt(e.numel())
