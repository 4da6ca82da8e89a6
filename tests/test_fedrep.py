import pytest
import torch

from replearn import fedrep, linalg, linear
from replearn.backend import make_generator


def instance(d=10, k=2, n=100, seed=0):
    return linear.ground_truth_representation(d, k, seed=seed), fedrep.paper_heads(n, k, seed=seed + 1)


# --------------------------------------------------------------------------- method of moments

def test_moment_matrix_matches_per_client_sum():
    Bstar, W = instance(d=6, n=4)
    data = linear.sample_tasks(Bstar, W, 7, noise_std=0.1, seed=2)
    Z = sum(sum(data.Y[i, j] ** 2 * torch.outer(data.X[i, j], data.X[i, j]) for j in range(7)) / 7
            for i in range(4)) / 4
    assert torch.allclose(fedrep.moment_matrix(data), Z, atol=1e-12)


def test_method_of_moments_recovers_the_subspace_with_many_samples_only():
    Bstar, W = instance(d=20, k=2, n=200)
    many = linear.sample_tasks(Bstar, W, 200, noise_std=0.03, seed=3)
    B0 = fedrep.method_of_moments_init(many, 2)
    assert B0.shape == (20, 2)
    assert torch.allclose(B0.T @ B0, torch.eye(2, dtype=torch.float64), atol=1e-12)
    assert float(linalg.principal_angle_distance(B0, Bstar)) < 0.2
    few = linear.sample_tasks(Bstar, W[:5], 2, noise_std=0.03, seed=3)
    assert float(linalg.principal_angle_distance(fedrep.method_of_moments_init(few, 2), Bstar)) > 0.6


# --------------------------------------------------------------------------- building blocks

def test_exact_head_equals_lstsq_and_many_gd_steps():
    Bstar, W = instance(n=8)
    data = linear.sample_tasks(Bstar, W, 12, noise_std=0.2, seed=4)
    B = linalg.random_orthonormal(10, 2, seed=5)
    w = fedrep.head_solve(B, data)
    ref = torch.linalg.lstsq(data.X @ B, data.Y.unsqueeze(-1)).solution.squeeze(-1)
    assert torch.allclose(w, ref, atol=1e-10)
    w_gd = fedrep.head_gd(B, data, torch.zeros(8, 2, dtype=torch.float64), lr=0.3, steps=400)
    assert torch.allclose(w_gd, w, atol=1e-8)


def test_representation_gradient_matches_autograd():
    Bstar, W = instance(n=5)
    data = linear.sample_tasks(Bstar, W, 6, noise_std=0.1, seed=6)
    B = linalg.random_orthonormal(10, 2, seed=7)
    w = fedrep.head_solve(B, data)
    G = fedrep.representation_gradients(B, w, data)
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
    B0 = fedrep.method_of_moments_init(data, 2)
    res = fedrep.fedrep(B0, data, eta=0.3, rounds=4, r=r, seed=9)
    ref = reference_fedrep(B0, data, 0.3, 4, fedrep.clients_per_round(10, r), seed=9)
    assert torch.allclose(res.B[-1], ref, atol=1e-10)
    assert res.B.shape == (5, 10, 2) and res.rounds == 4


def test_clients_per_round_rounds_and_keeps_one():
    assert fedrep.clients_per_round(10, 0.1) == 1
    assert fedrep.clients_per_round(1000, 0.1) == 100
    assert fedrep.clients_per_round(5, 0.01) == 1
    assert fedrep.clients_per_round(10, 0.7) == 7


# --------------------------------------------------------------------------- behaviour

def test_fedrep_recovers_b_star_where_the_single_model_cannot():
    Bstar, W = instance(d=10, k=2, n=100)
    init = linear.sample_tasks(Bstar, W, 5, seed=10)
    B0 = fedrep.method_of_moments_init(init, 2)
    res = fedrep.fedrep(B0, linear.FreshSamples(Bstar, W, 5), eta=0.5, rounds=200, r=0.1, seed=11)
    dist = res.dist(Bstar)
    assert float(dist[0]) > 0.1 and float(dist[-1]) < 1e-3
    assert bool(res.selected.all())
    # fresh samples for the final heads: the personalised models are exact
    test = linear.sample_tasks(Bstar, W, 5, seed=12)
    heads = fedrep.head_solve(res.B[-1], test)
    theta_star = linear.targets(Bstar, W)
    assert float(fedrep.global_error(linear.predict(res.B[-1], heads), theta_star)) < 1e-6
    # the single shared model: rank one, far from col(B_*), global error near (1/2n) sum ||theta_i - mean||^2
    pooled = linear.sample_tasks(Bstar, W, 50, seed=13)
    theta = fedrep.single_model_least_squares(pooled)
    assert float(linalg.principal_angle_distance(theta.unsqueeze(-1), Bstar)) > 0.99
    floor = fedrep.global_error(theta_star.mean(0), theta_star)
    assert float(fedrep.global_error(theta, theta_star)) > 0.9 * float(floor) > 0.3


def test_gd_gd_is_slower_than_exact_head_solves():
    Bstar, W = instance(d=10, k=2, n=100)
    B0 = fedrep.method_of_moments_init(linear.sample_tasks(Bstar, W, 5, seed=14), 2)
    data = linear.FreshSamples(Bstar, W, 5)
    final = {}
    for K in (None, 10, 1):
        res = fedrep.fedrep(B0, data, eta=0.2, rounds=100, r=0.1, head_steps=K,
                            head_lr=None if K is None else 0.1, seed=15)
        final[K] = float(res.dist(Bstar)[-1])
    assert final[None] < 1e-3
    assert final[1] > 10 * final[10] > 10 * final[None]


def test_fixed_data_fedrep_beats_local_only_and_orthonormalised_variant():
    """Fig. 1 regime: d = 20, n = 100 clients with m = 10 < d samples each (fixed data)."""
    Bstar, W = instance(d=20, k=2, n=100)
    data = linear.sample_tasks(Bstar, W, 10, noise_std=1e-3, seed=16)
    theta_star = linear.targets(Bstar, W)
    B0 = fedrep.method_of_moments_init(data, 2)
    for orth in (False, True):
        res = fedrep.fedrep(B0, data, eta=0.5, rounds=100, r=1.0, orthonormalize=orth, seed=17)
        assert float(res.dist(Bstar)[-1]) < 1e-3
        assert float(res.global_error(Bstar, W)) < 1e-5
        if orth:
            eye = torch.eye(2, dtype=torch.float64)
            assert torch.allclose(res.B.mT @ res.B, eye.expand(101, 2, 2), atol=1e-10)
    local = fedrep.local_only(data)
    ref = torch.linalg.pinv(data.X) @ data.Y.unsqueeze(-1)
    assert torch.allclose(local, ref.squeeze(-1), atol=1e-10)
    assert float(fedrep.global_error(local, theta_star)) > 0.2


def test_single_model_is_pooled_least_squares():
    Bstar, W = instance(n=6)
    data = linear.sample_tasks(Bstar, W, 9, noise_std=0.1, seed=18)
    theta = fedrep.single_model_least_squares(data)
    ref = torch.linalg.lstsq(data.X.reshape(-1, 10), data.Y.reshape(-1, 1)).solution.squeeze(-1)
    assert torch.allclose(theta, ref, atol=1e-10)


def test_new_client_head_is_exact_on_b_star():
    Bstar, _ = instance(d=20, k=2)
    W_new = fedrep.paper_heads(4, 2, seed=19)
    new = linear.sample_tasks(Bstar, W_new, 3, seed=20)   # m_new = 3 < d, but >= k
    theta_star = linear.targets(Bstar, W_new)
    heads = fedrep.new_client_head(Bstar, new.X, new.Y)
    assert torch.allclose(heads, W_new, atol=1e-10)
    assert float(fedrep.new_client_error(Bstar, heads, theta_star).max()) < 1e-20
    wrong = linalg.basis_at_distance(Bstar, 1.0, seed=21)
    bad = fedrep.new_client_head(wrong, new.X, new.Y)
    assert float(fedrep.new_client_error(wrong, bad, theta_star).min()) > 0.5


# --------------------------------------------------------------------------- reproducibility and inputs

def test_same_seed_same_run_other_seed_differs():
    Bstar, W = instance(n=20)
    B0 = fedrep.method_of_moments_init(linear.sample_tasks(Bstar, W, 5, seed=22), 2)
    data = linear.FreshSamples(Bstar, W, 5, noise_std=0.1)
    kwargs = dict(eta=0.3, rounds=20, r=0.5, head_steps=3, head_lr=0.1)
    a = fedrep.fedrep(B0, data, seed=23, **kwargs)
    b = fedrep.fedrep(B0, data, seed=23, **kwargs)
    c = fedrep.fedrep(B0, data, seed=24, **kwargs)
    assert torch.equal(a.B, b.B) and torch.equal(a.heads, b.heads)
    assert not torch.allclose(a.B[-1], c.B[-1])


def test_divergence_raises():
    Bstar, W = instance(n=20)
    data = linear.sample_tasks(Bstar, W, 5, seed=25)
    B0 = fedrep.method_of_moments_init(data, 2)
    with pytest.raises(ValueError, match="diverged"):
        fedrep.fedrep(B0, data, eta=50.0, rounds=32, head_steps=1, head_lr=0.1)
    # exact heads absorb the scale of B: a huge eta stalls far from B_* instead of blowing up
    stalled = fedrep.fedrep(B0, data, eta=50.0, rounds=64)
    assert float(stalled.dist(Bstar)[-1]) > 0.5
    with pytest.raises(ValueError, match="head_lr"):
        fedrep.fedrep(B0, data, eta=0.1, rounds=64, head_steps=10, head_lr=5.0)


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
    B0 = fedrep.method_of_moments_init(data, 2)
    args = dict(eta=0.1, rounds=3) | kwargs
    with pytest.raises(ValueError, match=match):
        fedrep.fedrep(B0, data, **args)


def test_bad_shapes_and_k():
    Bstar, W = instance(n=20)
    data = linear.sample_tasks(Bstar, W, 5, seed=27)
    with pytest.raises(ValueError, match="k = 11 > d"):
        fedrep.method_of_moments_init(data, 11)
    with pytest.raises(ValueError, match="dimension"):
        fedrep.fedrep(linalg.random_orthonormal(12, 2), data, eta=0.1, rounds=1)
    with pytest.raises(ValueError, match="k = 3 > d"):
        fedrep.fedrep(torch.zeros(2, 3, dtype=torch.float64), data, eta=0.1, rounds=1)
    with pytest.raises(ValueError, match="same k"):
        linear.FreshSamples(Bstar, W[:, :1], 5)
    with pytest.raises(ValueError, match="m"):
        linear.FreshSamples(Bstar, W, 0)
    with pytest.raises(ValueError, match="X"):
        fedrep.new_client_head(Bstar, data.X[:, :, :5], data.Y)
    with pytest.raises(ValueError, match="theta"):
        fedrep.global_error(torch.zeros(3, 10, dtype=torch.float64), linear.targets(Bstar, W))
    with pytest.raises(ValueError, match="NaN"):
        fedrep.fedrep(torch.full((10, 2), float("nan"), dtype=torch.float64), data, eta=0.1, rounds=1)
