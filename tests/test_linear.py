import math

import pytest
import torch

from replearn.theory import linalg, linear
from replearn.backend import make_generator, randn


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
    uneven = linear.sample_tasks(problem["Bstar"], problem["W"], [3, 5, 2, 4, 5, 1, 2, 3], seed=9)
    index = torch.tensor([1, 6])
    part = uneven.subset(index)
    assert torch.equal(part.X, uneven.X[index]) and torch.equal(part.Y, uneven.Y[index])
    assert part.counts.tolist() == [5, 2] and uneven.subset(None) is uneven


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


# --------------------------------------------------------------------------- heads without diversity, instances, fresh samples

def test_degenerate_heads_lose_exactly_one_direction():
    W = linear.make_heads(10, 4, exact=False, seed=3)
    Wd = linear.degenerate_heads(W, seed=1)
    assert int(torch.linalg.matrix_rank(W)) == 4 and int(torch.linalg.matrix_rank(Wd)) == 3
    # the removed direction is the null vector of Wd; projecting again changes nothing
    u = torch.linalg.svd(Wd).Vh[-1]
    assert torch.allclose(Wd - (Wd @ u)[:, None] * u[None, :], Wd, atol=1e-12)
    assert linear.head_diversity(Wd)[0] == pytest.approx(0.0, abs=1e-12)
    assert torch.equal(Wd, linear.degenerate_heads(W, seed=1))
    with pytest.raises(ValueError, match="k >= 2"):
        linear.degenerate_heads(W[:, :1], seed=1)


def test_problem_holds_the_population_tasks_and_checks_its_parts(problem):
    pb = linear.Problem(problem["Bstar"], problem["W"], problem["B0"], problem["w0"])
    assert torch.equal(pb.tasks.theta, problem["W"] @ problem["Bstar"].T)
    with pytest.raises(ValueError, match=r"B0 must have shape \(12, 3\)"):
        linear.Problem(problem["Bstar"], problem["W"], problem["B0"][:, :2], problem["w0"])
    with pytest.raises(ValueError, match=r"w0 must have shape \(3\)"):
        linear.Problem(problem["Bstar"], problem["W"], problem["B0"], problem["w0"][:2])
    with pytest.raises(ValueError, match="w0 contains NaN"):
        linear.Problem(problem["Bstar"], problem["W"], problem["B0"], problem["w0"] * float("nan"))
    with pytest.raises(ValueError, match="dtype"):
        linear.Problem(problem["Bstar"], problem["W"], problem["B0"].float(), problem["w0"])


def test_samples_to_reach_is_the_first_m_below_the_target():
    # O(k) versus Omega(d): the smallest m reaching the target, checked against the formula
    m_k, m_d = linear.samples_to_reach(0.05, 5, 0.09), linear.samples_to_reach(0.05, 50, 0.09)
    assert (m_k, m_d) == (15, 141)
    assert linear.expected_ls_error(m_d, 50, 0.09) <= 0.05 < linear.expected_ls_error(m_d - 1, 50, 0.09)
    assert 0.09 * 50 / (m_d - 51) <= 0.05 < 0.09 * 50 / (m_d - 52)  # the closed form above the threshold
    with pytest.raises(ValueError, match=r"eps must be positive"):
        linear.samples_to_reach(0.0, 5, 0.1)


def test_problem_mean_regressor_and_random_problem():
    pb = linear.random_problem(12, 3, 8, step=0.25, mean_norm=1.0, cond=2.0, seed=5)
    assert torch.allclose(pb.mean_regressor, pb.Bstar @ pb.W.mean(0), rtol=0, atol=0)
    assert torch.equal(pb.Bstar, linear.ground_truth_representation(12, 3, seed=5))
    assert torch.equal(pb.W, linear.make_heads(8, 3, mean_norm=1.0, cond=2.0, exact=False, seed=6))
    assert torch.equal(pb.B0, linalg.random_orthonormal(12, 3, seed=7) / 0.25**0.5)
    assert torch.allclose(0.25 * pb.B0.T @ pb.B0, torch.eye(3, dtype=torch.float64), atol=1e-12)
    assert torch.equal(pb.w0, torch.zeros(3, dtype=torch.float64))
    exact = linear.random_problem(12, 3, 8, step=0.25, cond=2.0, exact=True, seed=5)
    mu2, L2 = linear.head_diversity(exact.W, centred=True)
    assert L2 / mu2 == pytest.approx(2.0, rel=1e-10)
    with pytest.raises(ValueError, match="step"):
        linear.random_problem(12, 3, 8, step=0.0)
    with pytest.raises(ValueError, match="seed"):
        linear.random_problem(12, 3, 8, step=0.1, seed=-1)


def test_fresh_samples_draw_new_data_of_the_model(problem):
    Bstar, W = problem["Bstar"], problem["W"]
    sampler = linear.FreshSamples(Bstar, W, 6, noise_std=0.0)
    assert (sampler.n, sampler.d) == (8, 12)
    gen = torch.Generator().manual_seed(0)
    first, second = sampler.draw(None, gen), sampler.draw(None, gen)
    assert first.X.shape == (8, 6, 12) and first.Y.shape == (8, 6)
    assert not torch.equal(first.X, second.X)  # fresh at every draw
    assert torch.allclose(first.Y, torch.einsum("nmd,nd->nm", first.X, W @ Bstar.T), atol=1e-12)
    # the numbers: inputs then noise, from the generator, as torch.randn draws them
    index = torch.tensor([2, 5])
    noisy = linear.FreshSamples(Bstar, W, 4, noise_std=0.5).draw(index, torch.Generator().manual_seed(7))
    ref = torch.Generator().manual_seed(7)
    X = torch.randn(2, 4, 12, generator=ref, dtype=torch.float64)
    noise = torch.randn(2, 4, generator=ref, dtype=torch.float64)
    assert torch.equal(noisy.X, X)
    theta = W[index] @ Bstar.T
    assert torch.allclose(noisy.Y, (X @ theta.unsqueeze(-1)).squeeze(-1) + 0.5 * noise, atol=1e-12)
    with pytest.raises(ValueError, match=r"\bm\b"):
        linear.FreshSamples(Bstar, W, 0)
    with pytest.raises(ValueError, match="noise_std"):
        linear.FreshSamples(Bstar, W, 3, noise_std=-0.1)
    with pytest.raises(ValueError, match="same k"):
        linear.FreshSamples(Bstar, W[:, :2], 3)


# --------------------------------------------------------------------------- least squares on a Gaussian design (book 1.1, 1.4)

@pytest.mark.parametrize("m, p", [(30, 6), (6, 6), (5, 9), (1, 4)])
def test_least_squares_is_the_minimum_norm_solution_of_fit_linear(m, p):
    gen = torch.Generator().manual_seed(m * 100 + p)
    A = torch.randn(4, m, p, generator=gen, dtype=torch.float64)
    y = torch.randn(4, m, generator=gen, dtype=torch.float64)
    v = linear.least_squares(A, y)
    assert v.shape == (4, p)
    assert torch.allclose(v, linear.fit_linear(A, y), atol=1e-10)
    if m < p:  # interpolates, and lies in the row space of A (minimum norm)
        assert torch.allclose((A @ v.unsqueeze(-1)).squeeze(-1), y, atol=1e-10)
        P = torch.linalg.pinv(A) @ A
        assert torch.allclose((P @ v.unsqueeze(-1)).squeeze(-1), v, atol=1e-10)
    with pytest.raises(ValueError, match="do not match"):
        linear.least_squares(A, y[..., :-1])
    with pytest.raises(ValueError, match="NaN"):
        linear.least_squares(A * float("nan"), y)


def test_expected_ls_error_special_cases():
    assert linear.expected_ls_error(10, 10, 0.1) == math.inf
    assert linear.expected_ls_error(9, 10, 0.1) == math.inf and linear.expected_ls_error(11, 10, 0.1) == math.inf
    assert linear.expected_ls_error(9, 10, 0.0, 2.0) == pytest.approx(0.2)
    assert linear.expected_ls_error(30, 10, 0.0) == 0.0
    assert linear.expected_ls_error(30, 10, 0.2) == pytest.approx(0.2 * 10 / 19)
    assert linear.expected_ls_error(4, 10, 0.2, 3.0) == pytest.approx(0.6 * 3 + 0.2 * 4 / 5)
    with pytest.raises(ValueError, match=r"m \(number of samples\) must be an integer >= 1"):
        linear.expected_ls_error(0, 5, 0.1)
    with pytest.raises(ValueError, match="noise_var must be >= 0"):
        linear.expected_ls_error(5, 5, -0.1)


def test_expected_ls_error_matches_monte_carlo_above_and_below_the_threshold():
    gen = torch.Generator().manual_seed(0)
    p, var = 6, 0.25
    theta = torch.randn(p, generator=gen, dtype=torch.float64)
    theta = 1.5 * theta / theta.norm()
    for m in (3, 14):
        X = torch.randn(20000, m, p, generator=gen, dtype=torch.float64)
        y = X @ theta + var**0.5 * torch.randn(20000, m, generator=gen, dtype=torch.float64)
        err = (linear.least_squares(X, y) - theta).pow(2).sum(-1)
        theory = linear.expected_ls_error(m, p, var, 1.5**2)
        assert abs(float(err.mean()) - theory) < 4 * float(err.std()) / math.sqrt(err.numel()), m


def test_head_error_floor_and_expected_head_error():
    Bstar = linear.ground_truth_representation(12, 3, seed=0)
    B = linalg.basis_at_distance(Bstar, 0.6, seed=1) @ torch.randn(3, 3, dtype=torch.float64,
                                                                   generator=torch.Generator().manual_seed(3))
    F = float(linear.head_error_floor(B, Bstar))
    # independent form: k minus the squared cosines of the principal angles
    cos = torch.linalg.svdvals(torch.linalg.qr(B).Q.T @ Bstar)
    assert F == pytest.approx(3 - float(cos.pow(2).sum()), abs=1e-12)
    assert 0.6**2 - 1e-10 <= F <= 3 * 0.6**2 + 1e-10
    assert float(linear.head_error_floor(Bstar @ torch.diag(torch.tensor([2.0, -1.0, 0.5], dtype=torch.float64)),
                                         Bstar)) < 1e-24
    assert linear.expected_head_error(200, 3, 0.04, F) == pytest.approx(F + (0.04 + F) * 3 / 196)
    assert linear.expected_head_error(20, 3, 0.04, 0.0) == linear.expected_ls_error(20, 3, 0.04, 3.0)
    with pytest.raises(ValueError, match="floor_value"):
        linear.expected_head_error(20, 3, 0.04, -1.0)
    with pytest.raises(ValueError, match="Bstar must have shape"):
        linear.head_error_floor(B, Bstar[:5])


def test_batched_joint_finetuning_equals_the_reference():
    gen = make_generator(3)
    s, n, d, k = 3, 7, 6, 2
    B = randn(s, d, k, generator=gen)
    w = randn(s, k, generator=gen)
    X = randn(s, n, d, generator=gen)
    y = randn(s, n, generator=gen)
    lr = linear.stable_finetune_step(B, w, X, 0.3)
    B_ft, w_ft = linear.finetune_joint(B, w, X, y, lr=lr, steps=25)
    for j in range(s):
        B_ref, w_ref = linear.finetune_gd(B[j], w[j], X[j], y[j], lr=float(lr[j]), steps=25,
                                          update_representation=True)
        assert torch.allclose(B_ft[j], B_ref, rtol=1e-10, atol=1e-12)
        assert torch.allclose(w_ft[j], w_ref, rtol=1e-10, atol=1e-12)


def test_stable_finetune_step_is_the_inverse_gauss_newton_curvature():
    gen = make_generator(4)
    n, d, k = 5, 4, 2
    B, w, X = randn(d, k, generator=gen), randn(k, generator=gen), randn(n, d, generator=gen)
    # Jacobian of the residual X B w - y in (vec B, w), built column by column
    cols = []
    for i in range(d):
        for j in range(k):
            E = torch.zeros(d, k, dtype=B.dtype)
            E[i, j] = 1.0
            cols.append(X @ E @ w)
    J = torch.stack(cols + [X @ B[:, j] for j in range(k)], dim=1)
    lam = float(torch.linalg.eigvalsh(J.T @ J / n)[-1])
    assert float(linear.stable_finetune_step(B[None], w[None], X[None], 0.5)[0]) == pytest.approx(0.5 / lam, rel=1e-10)


def test_divergent_joint_finetuning_raises():
    gen = make_generator(7)
    B, w = randn(2, 6, 2, generator=gen), randn(2, 2, generator=gen)
    X, y = randn(2, 4, 6, generator=gen), randn(2, 4, generator=gen)
    with pytest.raises(ValueError, match="diverged"):
        linear.finetune_joint(B, w, X, y, lr=100 * linear.stable_finetune_step(B, w, X, 1.0), steps=200)


def test_absurd_counts_are_refused_before_anything_is_allocated():
    """Issue 27: counts of 10**12 (tasks, samples, steps) are refused by name against
    checks.MAX_COUNT instead of allocating until the machine gives out."""
    import pytest as _pytest
    from replearn.theory import aruba, linear_fedrep, linalg, linear
    from replearn import checks
    Bstar = linalg.random_orthonormal(6, 2, seed=0)
    W = linear.make_heads(3, 2)
    for call, name in [(lambda: linear.make_heads(10**12, 2), "n \\(tasks\\)"),
                       (lambda: linear.sample_tasks(Bstar, W, 10**12, seed=0), "m \\(samples per task\\)"),
                       (lambda: aruba.sample_tasks(aruba.TaskFamily(d=3, m=5), 10**12), "T \\(tasks\\)"),
                       (lambda: aruba.rademacher_regret(5, 1.0, 10**12), "runs"),
                       (lambda: linear_fedrep.paper_heads(10**12, 2), "n \\(clients\\)"),
                       (lambda: linear.random_problem(6, 2, 3, step=0.1, seed=2**64), "seed must be at most")]:
        with _pytest.raises(ValueError, match=name) as info:
            call()
        assert "MAX_COUNT" in str(info.value) or "2**64" in str(info.value)
    assert checks.check_count(checks.MAX_COUNT, "n") == checks.MAX_COUNT
