import pytest
import torch

from replearn import linear


def test_heads_have_the_requested_diversity_and_mean():
    W = linear.make_heads(30, 4, mean_norm=2.0, cond=10.0, scale=1.5, seed=3)
    mu2, L2 = linear.head_diversity(W, centred=True)
    assert L2 == pytest.approx(1.5**2, rel=1e-10)
    assert L2 / mu2 == pytest.approx(10.0, rel=1e-10)
    assert float(W.mean(0).norm()) == pytest.approx(2.0, rel=1e-10)
    W0 = linear.make_heads(30, 4, cond=4.0, seed=3)
    mu2, L2 = linear.head_diversity(W0)  # zero mean: uncentred = centred
    assert L2 / mu2 == pytest.approx(4.0, rel=1e-10)
    assert torch.equal(W0, linear.make_heads(30, 4, cond=4.0, seed=3))
    assert not torch.equal(W0, linear.make_heads(30, 4, cond=4.0, seed=4))


def _autograd(B, w, tasks):
    B = B.clone().requires_grad_(True)
    w = w.clone().requires_grad_(True)
    losses = linear.losses(B.expand(tasks.n, *B.shape), w.expand(tasks.n, *w.shape), tasks)
    gB = torch.stack([torch.autograd.grad(losses[i], B, retain_graph=True)[0] for i in range(tasks.n)])
    gw = torch.stack([torch.autograd.grad(losses[i], w, retain_graph=True)[0] for i in range(tasks.n)])
    return gB, gw


def test_population_gradients_match_autograd(problem):
    B, w, tasks = problem["B0"], problem["w0"] + 0.3, problem["tasks"]
    gB, gw = linear.grads(B, w, tasks)
    aB, aw = _autograd(B, w, tasks)
    assert torch.allclose(gB, aB, atol=1e-12) and torch.allclose(gw, aw, atol=1e-12)
    # the population loss is 1/2 ||Bw - B_* w_*||^2
    direct = 0.5 * ((B @ w) - problem["W"] @ problem["Bstar"].T).pow(2).sum(-1)
    assert torch.allclose(linear.losses(B, w, tasks), direct, atol=1e-12)


def test_sampled_gradients_match_autograd_and_converge_to_population(problem):
    B, w = problem["B0"], problem["w0"] + 0.3
    sampled = linear.sample_tasks(problem["Bstar"], problem["W"], 15, noise_std=0.1, seed=4)
    gB, gw = linear.grads(B, w, sampled)
    aB, aw = _autograd(B, w, sampled)
    assert torch.allclose(gB, aB, atol=1e-10) and torch.allclose(gw, aw, atol=1e-10)
    many = linear.sample_tasks(problem["Bstar"], problem["W"], 40000, noise_std=0.0, seed=5)
    pB, _ = linear.grads(B, w, problem["tasks"])
    eB, _ = linear.grads(B, w, many)
    assert float((eB - pB).norm() / pB.norm()) < 0.05


def test_sampling_is_seeded(problem):
    a = linear.sample_tasks(problem["Bstar"], problem["W"], 5, noise_std=0.1, seed=9)
    b = linear.sample_tasks(problem["Bstar"], problem["W"], 5, noise_std=0.1, seed=9)
    c = linear.sample_tasks(problem["Bstar"], problem["W"], 5, noise_std=0.1, seed=10)
    assert torch.equal(a.X, b.X) and torch.equal(a.Y, b.Y) and not torch.equal(a.X, c.X)


def test_head_solves_are_exact_least_squares(problem):
    Bstar, W = problem["Bstar"], problem["W"]
    # population: on B_* itself the best heads are the true heads
    assert torch.allclose(linear.least_squares_heads(Bstar, problem["tasks"]), W, atol=1e-12)
    sampled = linear.sample_tasks(Bstar, W, 9, noise_std=0.3, seed=1)
    heads = linear.least_squares_heads(problem["B0"], sampled)
    for i in range(problem["n"]):
        A = sampled.X[i] @ problem["B0"]
        ref = torch.linalg.lstsq(A, sampled.Y[i].unsqueeze(-1), driver="gelsd").solution.squeeze(-1)
        assert torch.allclose(heads[i], ref, atol=1e-9)
    # ridge: the normal equations hold
    A, y, lam = sampled.X[0], sampled.Y[0], 0.5
    v = linear.fit_linear(A, y, ridge=lam)
    assert torch.allclose(A.T @ (A @ v - y) / A.shape[0] + lam * v, torch.zeros_like(v), atol=1e-10)


def test_finetuning_new_task(problem):
    Bstar, k = problem["Bstar"], problem["k"]
    w_new = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    data = linear.sample_tasks(Bstar, w_new[None], k + 2, noise_std=0.0, seed=3)
    X, y = data.X[0], data.Y[0]
    w_hat = linear.finetune_head(Bstar, X, y)
    assert float(linear.excess_risk(Bstar, w_hat, Bstar @ w_new)) < 1e-20
    B, w = linear.finetune_gd(Bstar, torch.zeros(k, dtype=torch.float64), X, y, lr=0.05, steps=3000,
                              update_representation=False)
    assert torch.allclose(B, Bstar) and torch.allclose(w, w_new, atol=1e-6)
    B2, _ = linear.finetune_gd(Bstar, torch.zeros(k, dtype=torch.float64), X, y, lr=0.05, steps=5)
    assert not torch.allclose(B2, Bstar)
    with pytest.raises(ValueError, match="diverged"):
        linear.finetune_gd(Bstar, torch.zeros(k, dtype=torch.float64), X, y, lr=100.0, steps=2000)


def test_bad_inputs_raise_clear_errors(problem):
    with pytest.raises(ValueError, match="k = 4 > d = 3"):
        linear.ground_truth_representation(3, 4)
    with pytest.raises(ValueError, match="n >= k \\+ 1"):
        linear.make_heads(3, 3)
    with pytest.raises(ValueError, match="cond"):
        linear.make_heads(10, 3, cond=0.5)
    with pytest.raises(ValueError, match="same k"):
        linear.targets(problem["Bstar"], torch.zeros(4, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match="positive integer"):
        linear.sample_tasks(problem["Bstar"], problem["W"], 0)
    with pytest.raises(ValueError, match="do not match"):
        linear.fit_linear(torch.zeros(5, 3, dtype=torch.float64), torch.zeros(4, dtype=torch.float64))
