import math

import pytest
import torch

from replearn.theory import linear_fedrep, linalg, linear
from replearn.backend import derive_seed, make_generator


def instance(d=10, k=2, n=100, seed=0):
    return linear.ground_truth_representation(d, k, seed=seed), linear_fedrep.paper_heads(n, k, seed=seed + 1)


# --------------------------------------------------------------------------- method of moments

def test_moment_matrix_matches_per_client_sum():
    Bstar, W = instance(d=6, n=4)
    data = linear.sample_tasks(Bstar, W, 7, noise_std=0.1, seed=2)
    Z = sum(sum(data.Y[i, j] ** 2 * torch.outer(data.X[i, j], data.X[i, j]) for j in range(7)) / 7
            for i in range(4)) / 4
    assert torch.allclose(linear_fedrep.moment_matrix(data), Z, atol=1e-12)


def test_method_of_moments_recovers_the_subspace_with_many_samples_only():
    Bstar, W = instance(d=20, k=2, n=200)
    many = linear.sample_tasks(Bstar, W, 200, noise_std=0.03, seed=3)
    B0 = linear_fedrep.method_of_moments_init(many, 2)
    assert B0.shape == (20, 2)
    assert torch.allclose(B0.T @ B0, torch.eye(2, dtype=torch.float64), atol=1e-12)
    assert float(linalg.principal_angle_distance(B0, Bstar)) < 0.2
    few = linear.sample_tasks(Bstar, W[:5], 2, noise_std=0.03, seed=3)
    assert float(linalg.principal_angle_distance(linear_fedrep.method_of_moments_init(few, 2), Bstar)) > 0.6


# --------------------------------------------------------------------------- building blocks

def test_exact_head_equals_lstsq_and_many_gd_steps():
    Bstar, W = instance(n=8)
    data = linear.sample_tasks(Bstar, W, 12, noise_std=0.2, seed=4)
    B = linalg.random_orthonormal(10, 2, seed=5)
    w = linear_fedrep.head_solve(B, data)
    ref = torch.linalg.lstsq(data.X @ B, data.Y.unsqueeze(-1)).solution.squeeze(-1)
    assert torch.allclose(w, ref, atol=1e-10)
    w_gd = linear_fedrep.head_gd(B, data, torch.zeros(8, 2, dtype=torch.float64), lr=0.3, steps=400)
    assert torch.allclose(w_gd, w, atol=1e-8)


def test_representation_gradient_matches_autograd():
    Bstar, W = instance(n=5)
    data = linear.sample_tasks(Bstar, W, 6, noise_std=0.1, seed=6)
    B = linalg.random_orthonormal(10, 2, seed=7)
    w = linear_fedrep.head_solve(B, data)
    G = linear_fedrep.representation_gradients(B, w, data)
    for i in range(5):
        Bi = B.clone().requires_grad_(True)
        loss = 0.5 * ((data.X[i] @ Bi @ w[i] - data.Y[i]) ** 2).mean()
        (g,) = torch.autograd.grad(loss, Bi)
        assert torch.allclose(G[i], g, atol=1e-12)


def reference_fedrep(B, data, eta, rounds, s, seed):
    """Algorithm 2 on fixed data written client by client, with autograd for grad_B (the oracle)."""
    gen = make_generator(seed)
    for _ in range(rounds):
        chosen = torch.randperm(data.n, generator=gen)[:s].sort().values if s < data.n else range(data.n)
        local = []
        for i in chosen:
            A = data.X[i] @ B
            w = torch.linalg.lstsq(A, data.Y[i].unsqueeze(-1)).solution.squeeze(-1)
            Bi = B.clone().requires_grad_(True)
            (g,) = torch.autograd.grad(0.5 * ((data.X[i] @ Bi @ w - data.Y[i]) ** 2).mean(), Bi)
            local.append(B - eta * g)
        B = sum(local) / len(local)
    return B


@pytest.mark.parametrize("r", [1.0, 0.3])
def test_fedrep_matches_per_client_reference(r):
    Bstar, W = instance(n=10)
    data = linear.sample_tasks(Bstar, W, 8, noise_std=0.1, seed=8)
    B0 = linear_fedrep.method_of_moments_init(data, 2)
    res = linear_fedrep.fedrep(B0, data, eta=0.3, rounds=4, r=r, seed=9)
    ref = reference_fedrep(B0, data, 0.3, 4, linear_fedrep.clients_per_round(10, r), seed=9)
    assert torch.allclose(res.B[-1], ref, atol=1e-10)
    assert res.B.shape == (5, 10, 2) and res.rounds == 4


def test_clients_per_round_rounds_and_keeps_one():
    assert linear_fedrep.clients_per_round(10, 0.1) == 1
    assert linear_fedrep.clients_per_round(1000, 0.1) == 100
    assert linear_fedrep.clients_per_round(5, 0.01) == 1
    assert linear_fedrep.clients_per_round(10, 0.7) == 7


# --------------------------------------------------------------------------- behaviour

def test_fedrep_recovers_b_star_where_the_single_model_cannot():
    Bstar, W = instance(d=10, k=2, n=100)
    init = linear.sample_tasks(Bstar, W, 5, seed=10)
    B0 = linear_fedrep.method_of_moments_init(init, 2)
    res = linear_fedrep.fedrep(B0, linear.FreshSamples(Bstar, W, 5), eta=0.5, rounds=200, r=0.1, seed=11)
    dist = res.dist(Bstar)
    assert float(dist[0]) > 0.1 and float(dist[-1]) < 1e-3
    assert bool(res.selected.all())
    # fresh samples for the final heads: the personalised models are exact
    test = linear.sample_tasks(Bstar, W, 5, seed=12)
    heads = linear_fedrep.head_solve(res.B[-1], test)
    theta_star = linear.targets(Bstar, W)
    assert float(linear_fedrep.global_error(linear.predict(res.B[-1], heads), theta_star)) < 1e-6
    # the single shared model: rank one, far from col(B_*), global error near (1/2n) sum ||theta_i - mean||^2
    pooled = linear.sample_tasks(Bstar, W, 50, seed=13)
    theta = linear_fedrep.single_model_least_squares(pooled)
    assert float(linalg.principal_angle_distance(theta.unsqueeze(-1), Bstar)) > 0.99
    floor = linear_fedrep.global_error(theta_star.mean(0), theta_star)
    assert float(linear_fedrep.global_error(theta, theta_star)) > 0.9 * float(floor) > 0.3


def test_gd_gd_is_slower_than_exact_head_solves():
    Bstar, W = instance(d=10, k=2, n=100)
    B0 = linear_fedrep.method_of_moments_init(linear.sample_tasks(Bstar, W, 5, seed=14), 2)
    data = linear.FreshSamples(Bstar, W, 5)
    final = {}
    for K in (None, 10, 1):
        res = linear_fedrep.fedrep(B0, data, eta=0.2, rounds=100, r=0.1, head_steps=K,
                            head_lr=None if K is None else 0.1, seed=15)
        final[K] = float(res.dist(Bstar)[-1])
    assert final[None] < 1e-3
    assert final[1] > 10 * final[10] > 10 * final[None]


def test_fixed_data_fedrep_beats_local_only_and_orthonormalised_variant():
    """Fig. 1 regime: d = 20, n = 100 clients with m = 10 < d samples each (fixed data)."""
    Bstar, W = instance(d=20, k=2, n=100)
    data = linear.sample_tasks(Bstar, W, 10, noise_std=1e-3, seed=16)
    theta_star = linear.targets(Bstar, W)
    B0 = linear_fedrep.method_of_moments_init(data, 2)
    for orth in (False, True):
        res = linear_fedrep.fedrep(B0, data, eta=0.5, rounds=100, r=1.0, orthonormalize=orth, seed=17)
        assert float(res.dist(Bstar)[-1]) < 1e-3
        assert float(res.global_error(Bstar, W)) < 1e-5
        if orth:
            eye = torch.eye(2, dtype=torch.float64)
            assert torch.allclose(res.B.mT @ res.B, eye.expand(101, 2, 2), atol=1e-10)
    local = linear_fedrep.local_only(data)
    ref = torch.linalg.pinv(data.X) @ data.Y.unsqueeze(-1)
    assert torch.allclose(local, ref.squeeze(-1), atol=1e-10)
    assert float(linear_fedrep.global_error(local, theta_star)) > 0.2


def test_single_model_is_pooled_least_squares():
    Bstar, W = instance(n=6)
    data = linear.sample_tasks(Bstar, W, 9, noise_std=0.1, seed=18)
    theta = linear_fedrep.single_model_least_squares(data)
    ref = torch.linalg.lstsq(data.X.reshape(-1, 10), data.Y.reshape(-1, 1)).solution.squeeze(-1)
    assert torch.allclose(theta, ref, atol=1e-10)


def test_new_client_head_is_exact_on_b_star():
    Bstar, _ = instance(d=20, k=2)
    W_new = linear_fedrep.paper_heads(4, 2, seed=19)
    new = linear.sample_tasks(Bstar, W_new, 3, seed=20)   # m_new = 3 < d, but >= k
    theta_star = linear.targets(Bstar, W_new)
    heads = linear_fedrep.new_client_head(Bstar, new.X, new.Y)
    assert torch.allclose(heads, W_new, atol=1e-10)
    assert float(linear_fedrep.new_client_error(Bstar, heads, theta_star).max()) < 1e-20
    wrong = linalg.basis_at_distance(Bstar, 1.0, seed=21)
    bad = linear_fedrep.new_client_head(wrong, new.X, new.Y)
    assert float(linear_fedrep.new_client_error(wrong, bad, theta_star).min()) > 0.5


# --------------------------------------------------------------------------- reproducibility and inputs

def test_same_seed_same_run_other_seed_differs():
    Bstar, W = instance(n=20)
    B0 = linear_fedrep.method_of_moments_init(linear.sample_tasks(Bstar, W, 5, seed=22), 2)
    data = linear.FreshSamples(Bstar, W, 5, noise_std=0.1)
    kwargs = dict(eta=0.3, rounds=20, r=0.5, head_steps=3, head_lr=0.1)
    a = linear_fedrep.fedrep(B0, data, seed=23, **kwargs)
    b = linear_fedrep.fedrep(B0, data, seed=23, **kwargs)
    c = linear_fedrep.fedrep(B0, data, seed=24, **kwargs)
    assert torch.equal(a.B, b.B) and torch.equal(a.heads, b.heads)
    assert not torch.allclose(a.B[-1], c.B[-1])


def test_divergence_raises():
    Bstar, W = instance(n=20)
    data = linear.sample_tasks(Bstar, W, 5, seed=25)
    B0 = linear_fedrep.method_of_moments_init(data, 2)
    with pytest.raises(ValueError, match="diverged"):
        linear_fedrep.fedrep(B0, data, eta=50.0, rounds=32, head_steps=1, head_lr=0.1)
    # exact heads absorb the scale of B: a huge eta stalls far from B_* instead of blowing up
    stalled = linear_fedrep.fedrep(B0, data, eta=50.0, rounds=64)
    assert float(stalled.dist(Bstar)[-1]) > 0.5
    with pytest.raises(ValueError, match="head_lr"):
        linear_fedrep.fedrep(B0, data, eta=0.1, rounds=64, head_steps=10, head_lr=5.0)


@pytest.mark.parametrize("kwargs, match", [
    (dict(eta=0.0), "eta"),
    (dict(eta=-1.0), "eta"),
    (dict(r=0.0), "participation"),
    (dict(r=1.5), "participation"),
    (dict(head_steps=0, head_lr=0.1), "head_steps"),
    (dict(head_steps=2), "head_lr"),
    (dict(head_lr=0.1), "head_lr"),
    (dict(rounds=-1), "rounds"),
    (dict(heads0=torch.zeros(3, 2, dtype=torch.float64)), "heads0"),
])
def test_bad_fedrep_inputs(kwargs, match):
    Bstar, W = instance(n=20)
    data = linear.sample_tasks(Bstar, W, 5, seed=26)
    B0 = linear_fedrep.method_of_moments_init(data, 2)
    args = dict(eta=0.1, rounds=3) | kwargs
    with pytest.raises(ValueError, match=match):
        linear_fedrep.fedrep(B0, data, **args)


def test_bad_shapes_and_k():
    Bstar, W = instance(n=20)
    data = linear.sample_tasks(Bstar, W, 5, seed=27)
    with pytest.raises(ValueError, match="k = 11 > d"):
        linear_fedrep.method_of_moments_init(data, 11)
    with pytest.raises(ValueError, match="dimension"):
        linear_fedrep.fedrep(linalg.random_orthonormal(12, 2), data, eta=0.1, rounds=1)
    with pytest.raises(ValueError, match="k = 3 > d"):
        linear_fedrep.fedrep(torch.zeros(2, 3, dtype=torch.float64), data, eta=0.1, rounds=1)
    with pytest.raises(ValueError, match="same k"):
        linear.FreshSamples(Bstar, W[:, :1], 5)
    with pytest.raises(ValueError, match="m"):
        linear.FreshSamples(Bstar, W, 0)
    with pytest.raises(ValueError, match="X"):
        linear_fedrep.new_client_head(Bstar, data.X[:, :, :5], data.Y)
    with pytest.raises(ValueError, match="theta"):
        linear_fedrep.global_error(torch.zeros(3, 10, dtype=torch.float64), linear.targets(Bstar, W))
    with pytest.raises(ValueError, match="NaN"):
        linear_fedrep.fedrep(torch.full((10, 2), float("nan"), dtype=torch.float64), data, eta=0.1, rounds=1)


# --------------------------------------------------------------------------- closed forms and measurements (book 5.1-5.3)

def test_single_model_formula_is_heterogeneity():
    W = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 2.0], [0.0, -2.0]], dtype=torch.float64)
    Bstar = linear.ground_truth_representation(5, 2, seed=0)
    value = float(linear_fedrep.single_model_error_formula(linear.targets(Bstar, W)))
    assert value == pytest.approx(0.5 * (1 + 1 + 4 + 4) / 4)


def test_expected_moment_matrix_matches_samples_and_eigenspace():
    Bstar = linear.ground_truth_representation(6, 2, seed=1)
    W = linear_fedrep.paper_heads(50, 2, seed=2)
    M = linear_fedrep.expected_moment_matrix(Bstar, W, noise_std=0.3)
    top = torch.linalg.eigh(M).eigenvectors[:, -2:]
    assert float(linalg.principal_angle_distance(top, Bstar)) < 1e-10
    assert float(torch.linalg.eigvalsh(M)[0]) == pytest.approx(2.0 + 0.09)   # k + sigma^2
    data = linear.sample_tasks(Bstar, W, 4000, noise_std=0.3, seed=3)
    rel = torch.linalg.matrix_norm(linear_fedrep.moment_matrix(data) - M, 2) / torch.linalg.matrix_norm(M, 2)
    assert float(rel) < 0.05


def test_expected_moment_matrix_rejects_negative_noise():
    with pytest.raises(ValueError):
        linear_fedrep.expected_moment_matrix(torch.eye(3, 2, dtype=torch.float64), torch.ones(4, 2, dtype=torch.float64), -1.0)


def test_fit_rate_recovers_geometric_sequence():
    dist = 0.5 * 0.9 ** torch.arange(200, dtype=torch.float64)
    rate, r2 = linear_fedrep.fit_rate(dist)
    assert rate == pytest.approx(0.9, abs=1e-10) and r2 == pytest.approx(1.0)
    with pytest.raises(ValueError, match="only 0 points"):
        linear_fedrep.fit_rate(torch.ones(10))  # every round outside the window (1e-12, 0.1)


def test_theorem_factor():
    assert linear_fedrep.theorem_factor(0.1, 0.75, 1.0) == pytest.approx(math.sqrt(1 - 0.0375))
    with pytest.raises(ValueError):
        linear_fedrep.theorem_factor(10.0, 1.0, 1.0)


def test_population_step_contracts_as_proposition():
    # one FedRep round with a huge batch approaches the infinite-sample bound of book 5.3
    d, k, n = 8, 2, 20
    Bstar = linear.ground_truth_representation(d, k, seed=0)
    W = linear.make_heads(n, k, cond=2.0, exact=True, seed=1)
    B0 = linalg.basis_at_distance(Bstar, 0.6, seed=2)
    data = linear.sample_tasks(Bstar, W, 20000, seed=3)
    eta = 0.5
    B1 = linear_fedrep.fedrep(B0, data, eta=eta, rounds=1, orthonormalize=True).B[-1]
    bound = (1 - eta * 0.5 * (1 - 0.36)) * 0.6
    assert float(linalg.principal_angle_distance(B1, Bstar)) < bound + 0.02


def test_counting_bound_equates_equations_and_unknowns():
    d, k, n = 12, 2, 5
    m = linear_fedrep.counting_bound(d, k, n)
    assert m == pytest.approx(2 + 2 * 10 / 5)
    assert n * m == pytest.approx(d * k - k * k + n * k)


def test_rounds_to_reach():
    curve = torch.tensor([1.0, 0.5, 0.1, 0.01])
    assert linear_fedrep.rounds_to_reach(curve, 0.1) == 2 and linear_fedrep.rounds_to_reach(curve, 1e-3) is None


# --------------------------------------------------------------------------- the experiments of Sec. 5.1 (book 5.4-5.6)

def test_paper_instance_is_seeded_and_has_paper_heads():
    Bstar, W = linear_fedrep.paper_instance(10, 3, 7, seed=4)
    assert Bstar.shape == (10, 3) and W.shape == (7, 3)
    assert torch.allclose(Bstar.T @ Bstar, torch.eye(3, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(W.norm(dim=1), torch.full((7,), 3**0.5, dtype=torch.float64))
    assert torch.equal(Bstar, linear.ground_truth_representation(10, 3, seed=derive_seed(4, 1)))
    assert torch.equal(W, linear_fedrep.paper_heads(7, 3, seed=derive_seed(4, 2)))
    other, _ = linear_fedrep.paper_instance(10, 3, 7, seed=5)
    assert not torch.equal(Bstar, other)
    assert linear_fedrep.PAPER_NOISE_STD == pytest.approx(math.sqrt(1e-3))


def test_train_fedrep_starts_from_the_moments_and_refits_the_heads():
    Bstar, W = linear_fedrep.paper_instance(10, 2, 40, seed=0)
    data, res, heads = linear_fedrep.train_fedrep(Bstar, W, 8, noise_std=0.0, eta=0.5, rounds=60, seed=3)
    assert data.X.shape == (40, 8, 10) and res.rounds == 60
    assert torch.equal(res.B[0], linear_fedrep.method_of_moments_init(data, 2))
    assert torch.equal(heads, linear_fedrep.head_solve(res.B[-1], data))
    dist = res.dist(Bstar)
    assert float(dist[-1]) < 1e-3 * float(dist[0])


def test_dist_curves_share_the_start_and_reproduce_fedrep():
    kw = dict(d=8, k=2, rounds=20, eta=0.2, head_lr=0.1, noise_std=0.0, seed=1)
    curves = linear_fedrep.dist_curves(30, 5, 0.5, {"exact": None, "GD": 1}, **kw)
    assert set(curves) == {"exact", "GD"} and curves["exact"].shape == (21,)
    assert float(curves["exact"][0]) == float(curves["GD"][0])
    again = linear_fedrep.dist_curves(30, 5, 0.5, {"exact": None}, **kw)
    assert torch.equal(again["exact"], curves["exact"])
    Bstar, W = linear_fedrep.paper_instance(8, 2, 30, 1)
    B0 = linear_fedrep.method_of_moments_init(linear.sample_tasks(Bstar, W, 5, seed=derive_seed(1, 3)), 2)
    ref = linear_fedrep.fedrep(B0, linear.FreshSamples(Bstar, W, 5, 0.0), eta=0.2, rounds=20, r=0.5, seed=derive_seed(1, 4))
    assert torch.equal(ref.dist(Bstar), curves["exact"])


@pytest.mark.parametrize("cls, bad", [
    (linear_fedrep.InstanceSettings, dict(d=2, k=2)), (linear_fedrep.InstanceSettings, dict(k=0)),
    (linear_fedrep.InstanceSettings, dict(seed=-1)), (linear_fedrep.FigureSettings, dict(noise_std=-1.0)),
    (linear_fedrep.FigureSettings, dict(eta=0.0)), (linear_fedrep.FigureSettings, dict(rounds=0)),
    (linear_fedrep.FigureSettings, dict(seeds=0)), (linear_fedrep.FigureSettings, dict(d=3, k=3)),
])
def test_settings_bases_fail_at_construction(cls, bad):
    with pytest.raises(ValueError):
        cls(**bad)
    assert cls().d == 20 and cls().k == 2
