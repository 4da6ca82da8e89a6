"""Tests of replearn.neural.similarity against independent NumPy / loop computations and CKA's invariances."""

import itertools
import math
from collections import OrderedDict

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from replearn.neural import similarity as sim
from replearn.backend import check_finite


def _randn(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def _orthogonal(p, seed):
    Q, R = torch.linalg.qr(_randn(p, p, seed=seed))
    return Q * torch.sign(torch.diagonal(R))


def _correlated(n, p1, p2, seed, noise=1.0):
    X = _randn(n, p1, seed=seed)
    Y = X @ _randn(p1, p2, seed=seed + 1) + noise * _randn(n, p2, seed=seed + 2)
    return X, Y


# ----------------------------------------------------------------------------- independent references

def _np_biased_hsic(K, L):
    n = K.shape[0]
    H = np.eye(n) - np.ones((n, n)) / n
    return np.trace(K @ H @ L @ H) / (n - 1) ** 2


def _u_statistic_hsic(K, L):
    """Unbiased HSIC as the U-statistic E[k_ij l_ij] + E[k_ij] E[l_qr] - 2 E[k_ij l_iq] over distinct indices."""
    n = K.shape[0]
    t1 = np.mean([K[i, j] * L[i, j] for i, j in itertools.permutations(range(n), 2)])
    t2 = np.mean([K[i, j] * L[q, r] for i, j, q, r in itertools.permutations(range(n), 4)])
    t3 = np.mean([K[i, j] * L[i, q] for i, j, q in itertools.permutations(range(n), 3)])
    return t1 + t2 - 2 * t3


def _np_rbf(X, frac):
    D = np.array([[np.sum((a - b) ** 2) for b in X] for a in X])
    sigma = frac * np.sqrt(np.median(D))
    return np.exp(-D / (2 * sigma ** 2))


def _np_cka(K, L):
    return _np_biased_hsic(K, L) / np.sqrt(_np_biased_hsic(K, K) * _np_biased_hsic(L, L))


# ----------------------------------------------------------------------------- HSIC

@pytest.mark.parametrize("seed", [0, 1])
def test_biased_hsic_matches_centring_matrix_formula(seed):
    X, Y = _correlated(9, 3, 4, seed)
    K, L = (X @ X.T).numpy(), sim.rbf_kernel(Y).numpy()
    assert float(sim.hsic(K, L)) == pytest.approx(_np_biased_hsic(K, L), rel=1e-12)
    A = _randn(9, 9, seed=seed + 5).numpy()  # not symmetric: the trace formula still holds
    assert float(sim.hsic(A, L)) == pytest.approx(_np_biased_hsic(A, L), rel=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_unbiased_hsic_matches_u_statistic(seed):
    X, Y = _correlated(6, 2, 3, seed)
    K, L = (X @ X.T).numpy(), sim.rbf_kernel(Y, sigma_frac=0.5).numpy()
    assert float(sim.hsic(K, L, unbiased=True)) == pytest.approx(_u_statistic_hsic(K, L), rel=1e-10, abs=1e-12)


def test_hsic_rejects_bad_inputs():
    K = torch.eye(3, dtype=torch.float64)
    with pytest.raises(ValueError, match="at least n = 4"):
        sim.hsic(K, K, unbiased=True)
    with pytest.raises(ValueError, match="same n"):
        sim.hsic(torch.eye(5), torch.eye(6))
    with pytest.raises(ValueError, match="square"):
        sim.hsic(torch.ones(4, 3), torch.ones(4, 3))
    bad = torch.eye(5)
    bad[1, 2] = float("nan")
    with pytest.raises(ValueError, match="NaN or infinite"):
        sim.hsic(bad, torch.eye(5))


# ----------------------------------------------------------------------------- CKA values

@pytest.mark.parametrize("shape", [(40, 3, 5), (12, 30, 20)])  # feature-space form (p < n) and Gram form (p > n)
def test_linear_cka_matches_kernel_form(shape):
    n, p1, p2 = shape
    X, Y = _correlated(n, p1, p2, seed=3)
    Y = Y + 5.0  # an offset: centring must be done
    expected = _np_cka((X @ X.T).numpy(), (Y @ Y.T).numpy())
    assert float(sim.linear_cka(X, Y)) == pytest.approx(expected, rel=1e-12)
    assert float(sim.kernel_cka(X @ X.T, Y @ Y.T)) == pytest.approx(expected, rel=1e-12)


def test_unbiased_linear_cka_matches_hsic_ratio():
    X, Y = _correlated(30, 4, 6, seed=4)
    K, L = sim.linear_kernel(X), sim.linear_kernel(Y)
    expected = sim.hsic(K, L, unbiased=True) / torch.sqrt(sim.hsic(K, K, unbiased=True) * sim.hsic(L, L, unbiased=True))
    assert float(sim.linear_cka(X, Y, unbiased=True)) == pytest.approx(float(expected), rel=1e-10)


def test_rbf_cka_matches_numpy():
    X, Y = _correlated(16, 3, 4, seed=5)  # n^2 even: the median averages two values
    expected = _np_cka(_np_rbf(X.numpy(), 0.5), _np_rbf(Y.numpy(), 0.5))
    assert float(sim.rbf_cka(X, Y, sigma_frac=0.5)) == pytest.approx(expected, rel=1e-10)


def test_conv_maps_are_flattened():
    X, Y = _randn(20, 2, 3, 3, seed=6), _randn(20, 4, 2, 2, seed=7)
    assert float(sim.linear_cka(X, Y)) == pytest.approx(float(sim.linear_cka(X.reshape(20, -1), Y.reshape(20, -1))))


@pytest.mark.parametrize("unbiased", [False, True])
@pytest.mark.parametrize("kind", ["linear", "rbf"])
def test_cka_of_a_representation_with_itself_is_one(kind, unbiased):
    X = _randn(25, 7, seed=8)
    cka = sim.linear_cka if kind == "linear" else sim.rbf_cka
    assert float(cka(X, X, unbiased=unbiased)) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("unbiased", [False, True])
@pytest.mark.parametrize("kind", ["linear", "rbf"])
def test_cka_invariant_to_orthogonal_maps_scaling_and_translation(kind, unbiased):
    X, Y = _correlated(50, 6, 6, seed=9)
    cka = sim.linear_cka if kind == "linear" else sim.rbf_cka
    base = float(cka(X, Y, unbiased=unbiased))
    assert 0.05 < base < 0.95
    Q = _orthogonal(6, seed=10)
    assert float(cka(X @ Q, Y, unbiased=unbiased)) == pytest.approx(base, rel=1e-9)
    assert float(cka(X, 37.5 * Y, unbiased=unbiased)) == pytest.approx(base, rel=1e-9)
    assert float(cka(0.01 * X @ Q + 3.0, Y @ _orthogonal(6, seed=11), unbiased=unbiased)) == pytest.approx(base, rel=1e-9)


def test_linear_cka_not_invariant_to_general_invertible_maps():
    X = _randn(500, 10, seed=12)
    A = torch.diag(torch.tensor([10.0] + [1.0] * 9, dtype=torch.float64)) @ _orthogonal(10, seed=13)
    assert torch.linalg.matrix_rank(A) == 10
    # Population value for isotropic X: ||A||_F^2 / (||I||_F ||A^T A||_F) = 109 / (sqrt(10) sqrt(10009)) = 0.34
    assert float(sim.linear_cka(X, X @ A)) < 0.5
    assert float(sim.linear_cka(X, X @ A, unbiased=True)) < 0.5


# ----------------------------------------------------------------------------- minibatch CKA

@pytest.mark.parametrize("kernel", ["linear", "rbf"])
def test_minibatch_cka_agrees_with_full_unbiased_on_large_batches(kernel):
    X, Y = _correlated(2000, 10, 10, seed=14, noise=2.0)
    full = sim.linear_cka(X, Y, unbiased=True) if kernel == "linear" else sim.rbf_cka(X, Y, unbiased=True)
    mini = sim.minibatch_cka(X, Y, batch_size=500, kernel=kernel)
    assert 0.2 < float(full) < 0.8
    assert float(mini) == pytest.approx(float(full), abs=0.01)


def test_single_batch_minibatch_cka_is_the_unbiased_cka():
    X, Y = _correlated(40, 3, 5, seed=15)
    assert float(sim.minibatch_cka(X, Y, batch_size=40)) == pytest.approx(
        float(sim.linear_cka(X, Y, unbiased=True)), rel=1e-12)


def test_minibatch_cka_combines_averaged_hsic_then_takes_the_ratio():
    X, Y = _correlated(64, 5, 5, seed=16, noise=3.0)
    batches = [(X[i:i + 8], Y[i:i + 8]) for i in range(0, 64, 8)]

    def terms(A, B):
        K, L = A @ A.T, B @ B.T
        return [float(sim.hsic(K, L, unbiased=True)), float(sim.hsic(K, K, unbiased=True)),
                float(sim.hsic(L, L, unbiased=True))]

    kl, kk, ll = np.mean([terms(A, B) for A, B in batches], axis=0)
    expected = kl / np.sqrt(kk * ll)
    assert float(sim.minibatch_cka(X, Y, batch_size=8)) == pytest.approx(expected, rel=1e-10)
    mean_of_ratios = np.mean([float(sim.linear_cka(A, B, unbiased=True)) for A, B in batches])
    assert abs(mean_of_ratios - expected) > 1e-3  # the naive average is a different (biased) estimator


def test_minibatch_cka_merges_a_tiny_last_batch():
    X, Y = _correlated(53, 3, 3, seed=17)
    acc = sim.CKAAccumulator()
    acc.update([X[:25]], [Y[:25]])
    acc.update([X[25:]], [Y[25:]])  # 28 examples: the 3 left over are merged into the second batch
    assert acc.n_examples == 53
    assert float(sim.minibatch_cka(X, Y, batch_size=25)) == pytest.approx(float(acc.result().values[0, 0]), rel=1e-12)


def test_accumulator_handles_many_layer_pairs_at_once():
    n = 60
    layers_a = {"conv": _randn(n, 2, 3, 3, seed=18), "fc": _randn(n, 8, seed=19)}
    layers_b = {"conv": layers_a["conv"] + 0.5 * _randn(n, 2, 3, 3, seed=20),
                "fc": _randn(n, 4, seed=21), "out": layers_a["fc"][:, :3]}
    acc = sim.CKAAccumulator()
    for start in range(0, n, 20):
        acc.update({k: v[start:start + 20] for k, v in layers_a.items()},
                   {k: v[start:start + 20] for k, v in layers_b.items()})
    res = acc.result()
    assert res.values.shape == (2, 3) and res.n_batches == 3 and res.n_examples == n
    assert res.x_names == ("conv", "fc") and res.y_names == ("conv", "fc", "out")
    for a, b in itertools.product(res.x_names, res.y_names):
        assert res[a, b] == pytest.approx(float(sim.minibatch_cka(layers_a[a], layers_b[b], batch_size=20)), rel=1e-10)
    assert set(res.diagonal()) == {"conv", "fc"}
    assert res["conv", "conv"] > 0.5
    with pytest.raises(ValueError, match="layers changed"):
        acc.update({"conv": layers_a["conv"][:20]}, {k: v[:20] for k, v in layers_b.items()})


def test_accumulator_rejects_bad_use():
    with pytest.raises(ValueError, match="no batches"):
        sim.CKAAccumulator().result()
    with pytest.raises(ValueError, match="kernel"):
        sim.CKAAccumulator(kernel="cosine")
    acc = sim.CKAAccumulator()
    with pytest.raises(ValueError, match="at least 4 examples"):
        acc.update([_randn(3, 2, seed=0)], [_randn(3, 2, seed=1)])
    with pytest.raises(ValueError, match="same examples"):
        acc.update({"a": _randn(8, 2, seed=0)}, {"b": _randn(7, 2, seed=1)})
    acc.update({"dead": torch.zeros(8, 4), "ok": _randn(8, 2, seed=2)}, {"y": _randn(8, 3, seed=3)})
    with pytest.raises(ValueError, match="'dead'"):
        acc.result()
    with pytest.raises(ValueError, match="batch_size"):
        sim.minibatch_cka(_randn(10, 2, seed=0), _randn(10, 2, seed=1), batch_size=2)


# ----------------------------------------------------------------------------- degenerate and bad inputs

@pytest.mark.parametrize("unbiased", [False, True])
@pytest.mark.parametrize("cka", [sim.linear_cka, sim.rbf_cka])
def test_constant_features_raise_naming_the_input(cka, unbiased):
    X = _randn(10, 3, seed=22)
    const = torch.full((10, 4), 2.5, dtype=torch.float32)
    with pytest.raises(ValueError, match="Y is degenerate"):
        cka(X, const, unbiased=unbiased)
    with pytest.raises(ValueError, match="X is degenerate"):
        cka(const, X, unbiased=unbiased)


def test_degenerate_kernels_and_bandwidths_raise():
    with pytest.raises(ValueError, match=r"HSIC\(K, K\)"):
        sim.kernel_cka(torch.full((6, 6), 3.0), torch.eye(6))
    X = torch.zeros(10, 2, dtype=torch.float64)
    X[0, 0] = 1.0  # most pairs coincide: median distance 0
    with pytest.raises(ValueError, match="median pairwise distance is 0"):
        sim.rbf_kernel(X)
    with pytest.raises(ValueError, match="sigma_frac"):
        sim.rbf_cka(_randn(10, 2, seed=0), _randn(10, 2, seed=1), sigma_frac=0.0)


def test_bad_feature_inputs_raise():
    X = _randn(10, 3, seed=23)
    with pytest.raises(ValueError, match="same examples"):
        sim.linear_cka(X, X[:9])
    with pytest.raises(ValueError, match="at least n = 4"):
        sim.linear_cka(X[:3], X[:3], unbiased=True)
    with pytest.raises(ValueError, match=r"\(n, 1\)"):
        sim.linear_cka(X[:, 0], X[:, 0])
    for value in (float("nan"), float("inf")):
        Y = X.clone()
        Y[2, 1] = value
        with pytest.raises(ValueError, match="Y contains NaN or infinite"):
            sim.linear_cka(X, Y)
        with pytest.raises(ValueError, match="X contains NaN or infinite"):
            sim.rbf_cka(Y, X)


# ----------------------------------------------------------------------------- class cosine similarity

def _loop_cosine_matrix(F, y, c):
    M = np.zeros((c, c))
    for a in range(c):
        for b in range(c):
            vals = []
            for i in np.flatnonzero(y == a):
                for j in np.flatnonzero(y == b):
                    if i == j:
                        continue
                    ni, nj = np.linalg.norm(F[i]), np.linalg.norm(F[j])
                    vals.append(0.0 if ni == 0 or nj == 0 else F[i] @ F[j] / (ni * nj))
            M[a, b] = np.mean(vals)
    return M


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n_classes=st.integers(2, 4), zero_rows=st.integers(0, 2))
def test_class_cosine_similarity_matches_double_loop(seed, n_classes, zero_rows):
    rng = np.random.default_rng(seed)
    labels = np.concatenate([np.arange(n_classes).repeat(2), rng.integers(0, n_classes, 6)])
    F = rng.standard_normal((labels.size, 5)) + rng.standard_normal(5)
    F[:zero_rows] = 0.0  # zero feature vectors: cosine 0 with everything
    M = sim.class_cosine_similarity(torch.from_numpy(F), torch.from_numpy(labels), n_classes)
    np.testing.assert_allclose(M.numpy(), _loop_cosine_matrix(F, labels, n_classes), rtol=1e-10, atol=1e-12)
    gap = float(sim.intra_inter_gap(M))
    off = M.numpy()[~np.eye(n_classes, dtype=bool)]
    assert gap == pytest.approx(np.mean(np.diag(M.numpy())) - np.mean(off), abs=1e-12)


def test_class_cosine_similarity_of_separated_classes():
    directions = torch.eye(3, dtype=torch.float64)
    labels = torch.arange(3).repeat_interleave(4)
    F = 5.0 * directions[labels]  # each class along its own axis
    M = sim.class_cosine_similarity(F, labels, 3)
    torch.testing.assert_close(M, torch.eye(3, dtype=torch.float64))
    assert float(sim.intra_inter_gap(M)) == pytest.approx(1.0)


def test_class_cosine_similarity_rejects_bad_labels():
    F = _randn(6, 2, seed=24)
    with pytest.raises(ValueError, match=r"class\(es\) \[2\]"):
        sim.class_cosine_similarity(F, torch.tensor([0, 0, 1, 1, 1, 2]), 3)
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        sim.class_cosine_similarity(F, torch.tensor([0, 0, 1, 1, 2, 2]), 2)
    with pytest.raises(ValueError, match="integers"):
        sim.class_cosine_similarity(F, torch.zeros(6), 1)
    with pytest.raises(ValueError, match="one label per example"):
        sim.class_cosine_similarity(F, torch.zeros(5, dtype=torch.int64), 1)
    with pytest.raises(ValueError, match="square"):
        sim.intra_inter_gap(torch.ones(2, 3))


# ----------------------------------------------------------------------------- activation capture

def _tiny_net():
    return nn.Sequential(OrderedDict(
        conv=nn.Conv2d(3, 4, 3, padding=1), relu=nn.ReLU(), drop=nn.Dropout(0.5),
        pool=nn.MaxPool2d(2), flat=nn.Flatten(),
        head=nn.Sequential(OrderedDict(fc1=nn.Linear(4 * 4 * 4, 6), fc2=nn.Linear(6, 2)))))


def test_capture_activations_matches_manual_forward():
    model = _tiny_net()
    model.train()
    model.head.eval()  # a submodule in its own mode: restored as it was
    x = _randn(10, 3, 8, 8, seed=28).float()
    acts = sim.capture_activations(model, x, ["conv", "pool", "head.fc1", "head"], batch_size=3)
    with torch.no_grad():
        conv = model.conv(x)
        pool = model.pool(model.relu(conv))  # eval mode: dropout is the identity
        fc1 = model.head.fc1(pool.flatten(1))
        out = model.head.fc2(fc1)
    torch.testing.assert_close(acts["conv"], conv.flatten(1))
    torch.testing.assert_close(acts["pool"], pool.flatten(1))
    torch.testing.assert_close(acts["head.fc1"], fc1)
    torch.testing.assert_close(acts["head"], out)
    assert acts["conv"].shape == (10, 4 * 8 * 8) and not acts["conv"].requires_grad
    assert model.training and model.drop.training and not model.head.training and not model.head.fc1.training
    assert all(not m._forward_hooks for m in model.modules())


def test_capture_activations_errors_leave_no_hooks():
    model = _tiny_net()
    x = _randn(4, 3, 8, 8, seed=25).float()
    with pytest.raises(ValueError, match=r"unknown layer name\(s\) \['conv9'\].*head\.fc1"):
        sim.capture_activations(model, x, ["conv", "conv9"])
    with pytest.raises(RuntimeError):
        sim.capture_activations(model, _randn(4, 5, 8, 8, seed=26).float(), ["conv", "head.fc1"])  # wrong channel count
    assert all(not m._forward_hooks for m in model.modules())
    relu = nn.ReLU()
    reused = nn.Sequential(OrderedDict(a=nn.Linear(3, 3), act=relu, b=nn.Linear(3, 3), act2=relu))
    with pytest.raises(ValueError, match="times in one forward pass"):
        sim.capture_activations(reused, _randn(5, 3, seed=27).float(), ["act"])
    assert all(not m._forward_hooks for m in reused.modules())
    with pytest.raises(ValueError, match="batch_size"):
        sim.capture_activations(model, x, ["conv"], batch_size=0)
    with pytest.raises(ValueError, match="duplicates"):
        sim.capture_activations(model, x, ["conv", "conv"])


# ----------------------------------------------------------------------------- feature-space form, offsets and scales

def _np_unbiased_hsic(K, L):
    """Song et al. (2012), Eq. 5, on explicit Gram matrices with zeroed diagonals (NumPy)."""
    n = K.shape[0]
    K0, L0 = K - np.diag(np.diag(K)), L - np.diag(np.diag(L))
    one = np.ones(n)
    return (np.trace(K0 @ L0) + (one @ K0 @ one) * (one @ L0 @ one) / ((n - 1) * (n - 2))
            - 2.0 / (n - 2) * one @ K0 @ L0 @ one) / (n * (n - 3))


def _np_unbiased_linear_cka(X, Y):
    X, Y = X - X.mean(0), Y - Y.mean(0)
    K, L = X @ X.T, Y @ Y.T
    return _np_unbiased_hsic(K, L) / np.sqrt(_np_unbiased_hsic(K, K) * _np_unbiased_hsic(L, L))


@pytest.mark.parametrize("shape", [(64, 3, 5), (200, 10, 2), (9, 2, 2), (12, 30, 20)])
@pytest.mark.parametrize("seed", [0, 1])
def test_unbiased_linear_cka_matches_gram_formula_in_either_form(shape, seed):
    n, p1, p2 = shape
    X, Y = _correlated(n, p1, p2, seed=30 + seed)
    expected = _np_unbiased_linear_cka(X.numpy(), Y.numpy())
    assert float(sim.linear_cka(X, Y, unbiased=True)) == pytest.approx(expected, rel=1e-10, abs=1e-12)
    assert sim.cka._feature_form_cheaper(n, p1, p2) == (shape != (12, 30, 20))


def test_accumulator_feature_form_matches_gram_form_for_many_layers():
    xs = {"a": _randn(40, 3, seed=40), "b": _randn(40, 2, 2, seed=41)}
    ys = {"c": xs["a"] @ _randn(3, 5, seed=42) + _randn(40, 5, seed=43), "d": _randn(40, 1, seed=44)}
    acc = sim.CKAAccumulator()
    acc.update(xs, ys)
    assert sim.cka._feature_form_cheaper(40, 7, 6)
    expected = np.array([[_np_unbiased_linear_cka(x.reshape(40, -1).numpy(), y.numpy()) for y in ys.values()]
                         for x in xs.values()])
    np.testing.assert_allclose(acc.result().values.numpy(), expected, rtol=1e-10, atol=1e-12)


OFFSET_SCALE = [(1e10, 1.0), (0.0, 1e100), (0.0, 1e-100), (0.0, 1e150), (-3e8, 1e3)]


@pytest.mark.parametrize("offset, scale", OFFSET_SCALE)
@pytest.mark.parametrize("cka", [
    sim.linear_cka,
    lambda X, Y: sim.linear_cka(X, Y, unbiased=True),
    sim.rbf_cka,
    lambda X, Y: sim.minibatch_cka(X, Y, batch_size=32),
], ids=["linear", "linear-unbiased", "rbf", "minibatch"])
def test_cka_survives_huge_offsets_and_extreme_scales(cka, offset, scale):
    X, Y = _correlated(96, 4, 3, seed=50)
    base = float(cka(X, Y))
    assert 0.1 < base < 0.99
    value = float(cka(X * scale + offset, Y))
    # an offset of 1e10 leaves each entry only ~1e10 * eps = 2e-6 of absolute precision
    tol = 1e-6 if offset else 1e-12
    assert value == pytest.approx(base, rel=tol)
    assert float(cka(Y, X * scale + offset)) == pytest.approx(base, rel=tol)


def test_kernel_cka_of_huge_and_tiny_gram_matrices():
    X, Y = _correlated(30, 4, 3, seed=51)
    K, L = X @ X.T, Y @ Y.T
    base = float(sim.kernel_cka(K, L))
    for s in (1e150, 1e-150):
        assert float(sim.kernel_cka(K * s, L)) == pytest.approx(base, rel=1e-12)


def test_rescaling_is_exact_and_the_feature_path_is_fast_enough():
    X, Y = _correlated(512, 10, 10, seed=52)
    assert float(sim.linear_cka(X * 2.0**-300, Y)) == float(sim.linear_cka(X, Y))  # bit for bit
    Xc, Yc = X - X.mean(0), Y - Y.mean(0)
    gram = sim.cka._cka_from_grams(torch.stack([Xc @ Xc.T, Yc @ Yc.T]), True, ("X", "Y"))
    assert float(sim.linear_cka(X, Y, unbiased=True)) == pytest.approx(float(gram), rel=1e-12)


def test_a_constant_column_beside_varying_ones_is_ignored():
    X, Y = _correlated(50, 3, 3, seed=53)
    padded = torch.cat([X, torch.full((50, 1), 1e12, dtype=torch.float64)], dim=1)
    assert float(sim.linear_cka(padded, Y)) == pytest.approx(float(sim.linear_cka(X, Y)), rel=1e-13)
    with pytest.raises(ValueError, match="X is degenerate"):
        sim.linear_cka(torch.full((50, 2), 1e10, dtype=torch.float64), Y)


# ----------------------------------------------------------------------------- fast preparation, bit for bit

def _reference_centred(X):
    """The CKA functions' feature preparation written out plainly (float64): centre the columns,
    zero the columns whose centred values are within n eps max |x| (constant), scale by 2^-e with
    2^(e-1) <= max |centred| < 2^e."""
    X = torch.as_tensor(X)
    X = X.reshape(X.shape[0], -1).to(torch.float64)
    Xc = X - X.mean(dim=0, keepdim=True)
    constant = Xc.abs().amax(dim=0) <= X.shape[0] * torch.finfo(torch.float64).eps * X.abs().amax(dim=0)
    if constant.any():
        Xc = Xc.masked_fill(constant, 0.0)
    top = float(Xc.detach().abs().max())
    return torch.ldexp(Xc, Xc.new_tensor(-(math.frexp(top)[1] if top > 0 else 0)))


def _reference_rbf(F, sigma_frac):
    sq = F.square().sum(dim=1)
    D = (sq[:, None] + sq[None, :] - 2.0 * (F @ F.T)).clamp_min(0.0)
    D.fill_diagonal_(0.0)
    s = torch.sort(D.reshape(-1)).values
    median = 0.5 * (s[(s.numel() - 1) // 2] + s[s.numel() // 2])
    return torch.exp(-D / (2.0 * (sigma_frac ** 2 * median)))


def _reference_gram_cka(K, L, unbiased):
    """CKA by :func:`sim.hsic`'s equations on the stack [K, L], the traces as sum(A * B^T) in one
    (2, n^2) @ (n^2, 2) product."""
    G, n = torch.stack([K, L]), K.shape[0]
    if unbiased:
        G = G.clone()
        G.diagonal(dim1=-2, dim2=-1).zero_()
        M = (G.reshape(2, -1) @ G.transpose(-1, -2).reshape(2, -1).T
             + torch.outer(G.sum(dim=(-2, -1)), G.sum(dim=(-2, -1))) / ((n - 1) * (n - 2))
             - 2.0 / (n - 2) * (G.sum(dim=-2) @ G.sum(dim=-1).T)) / (n * (n - 3))
    else:
        Gc = (G - G.mean(dim=-1, keepdim=True) - G.mean(dim=-2, keepdim=True)
              + G.mean(dim=(-2, -1), keepdim=True))
        M = Gc.reshape(2, -1) @ G.transpose(-1, -2).reshape(2, -1).T / (n - 1) ** 2
    return M[0, 1] / torch.sqrt(M[0, 0] * M[1, 1])


def _reference_linear_cka(X, Y, unbiased):
    Xc, Yc = _reference_centred(X), _reference_centred(Y)
    if sim.cka._feature_form_cheaper(Xc.shape[0], Xc.shape[1], Yc.shape[1]):
        if unbiased:
            cross, self_x, self_y, _, _ = sim.cka._linear_hsic_terms([Xc], [Yc])
            return cross[0, 0] / torch.sqrt(self_x[0] * self_y[0])
        numerator = torch.linalg.norm(Yc.T @ Xc).square()
        return numerator / (torch.linalg.norm(Xc.T @ Xc) * torch.linalg.norm(Yc.T @ Yc))
    K, L = Xc @ Xc.T, Yc @ Yc.T
    if unbiased:
        return _reference_gram_cka(K, L, True)
    return (K * L).sum() / (torch.linalg.norm(K) * torch.linalg.norm(L))


def _bits(t):
    return t.to(torch.float64).contiguous().view(torch.int64)


def _pair(kind, n, p1, p2, seed):
    X, Y = _correlated(n, p1, p2, seed, noise=2.0)
    if kind == "offset":  # 1e10 + z: only ~1e-6 of each entry varies
        X = X + 1e10
    elif kind == "constant":  # constant columns (one huge) beside varying ones, and ReLU-like floors
        X[:, ::3] = 7.25
        Y = Y.clamp_min(-1.0)
        Y[:, 1] = -1e12
    elif kind == "scales":
        X, Y = X * 1e-150, Y * 1e150
    elif kind == "float32 transposed":  # converted (a private copy), with transposed strides
        X, Y = X.float().T.contiguous().T, Y.float()
    return X, Y


KINDS = ["plain", "offset", "constant", "scales", "float32 transposed"]


@pytest.mark.parametrize("shape, kind", [*itertools.product([(40, 3, 5), (12, 30, 20), (64, 100, 90)], KINDS),
                                         ((131, 8100, 40), "offset"), ((131, 8100, 40), "constant")])
def test_fast_preparation_is_bit_identical_to_the_plain_algorithm(shape, kind):
    """Centring, constant columns and scale from per-column extremes, in place and in reused buffers:
    the same bits as the straightforward passes (131 x 8100: the column extremes in blocks of 8
    rows and a remainder)."""
    n, p1, p2 = shape
    X, Y = _pair(kind, n, p1, p2, seed=60)
    X0, Y0 = X.clone(), Y.clone()
    cx, cy = sim.features.column_pair(X, Y, min_n=2, why="")
    assert cx.constant is None if kind != "constant" else int(cx.constant.sum()) == math.ceil(p1 / 3)
    for c, F in ((cx, X), (cy, Y)):
        assert torch.equal(_bits(sim.features.centred(c)), _bits(_reference_centred(F)))
    for unbiased in (False, True):
        assert float(sim.linear_cka(X, Y, unbiased=unbiased)) == float(_reference_linear_cka(X, Y, unbiased))
        Xc, Yc = _reference_centred(X), _reference_centred(Y)
        expected = _reference_gram_cka(_reference_rbf(Xc, 0.8), _reference_rbf(Yc, 0.8), unbiased)
        assert float(sim.rbf_cka(X, Y, unbiased=unbiased)) == float(expected)
    assert torch.equal(_bits(X), _bits(X0)) and torch.equal(_bits(Y), _bits(Y0))  # inputs untouched


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("p", [4, 40])  # feature-space and Gram form
def test_non_finite_features_raise_check_finites_message(value, p):
    X, Y = _correlated(20, p, p, seed=61)
    bad = X.clone()
    bad[7, p - 1] = value
    with pytest.raises(ValueError) as expected:
        check_finite(bad, "X")
    for cka in (sim.linear_cka, sim.rbf_cka):
        for unbiased in (False, True):
            with pytest.raises(ValueError) as got:
                cka(bad, Y, unbiased=unbiased)
            assert str(got.value) == str(expected.value)
            with pytest.raises(ValueError) as got:
                cka(Y, bad, unbiased=unbiased)
            assert str(got.value) == str(expected.value).replace("X", "Y", 1)
    both = X.clone()
    both[0, 0], both[1, 0] = float("inf"), -float("inf")  # a NaN mean
    with pytest.raises(ValueError, match="^X contains NaN or infinite values"):
        sim.linear_cka(both, Y[:5])  # reported before the row mismatch, as before


@pytest.mark.parametrize("kind", ["linear", "rbf"])
@pytest.mark.parametrize("unbiased", [False, True])
def test_cka_gradients_survive_the_in_place_paths(kind, unbiased):
    """With autograd recording nothing is overwritten or reused; gradients match the plain algorithm's."""
    X, Y = _correlated(24, 40, 30, seed=62)
    grads = []
    for lib in (True, False):
        A = X.clone().requires_grad_()
        if lib:
            value = (sim.linear_cka if kind == "linear" else sim.rbf_cka)(A, Y, unbiased=unbiased)
        elif kind == "linear":
            value = _reference_linear_cka(A, Y, unbiased)
        else:
            value = _reference_gram_cka(_reference_rbf(_reference_centred(A), 0.8),
                                        _reference_rbf(_reference_centred(Y), 0.8), unbiased)
        value.backward()
        grads.append(A.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-10, atol=1e-14)
    with torch.no_grad():
        A = X.clone().requires_grad_()
        assert float(sim.linear_cka(A, Y, unbiased=unbiased)) == float(_reference_linear_cka(X, Y, unbiased))
        assert torch.equal(A, X)


def test_hsic_leaves_its_inputs_alone():
    K, A = _randn(7, 7, seed=63), _randn(7, 7, seed=64)
    L = A.T.contiguous().T  # transposed strides: L^T is contiguous, a view of L's memory
    for unbiased in (False, True):
        assert float(sim.hsic(K, L, unbiased=unbiased)) == float(sim.hsic(K, A, unbiased=unbiased))
    assert torch.equal(K, _randn(7, 7, seed=63)) and torch.equal(L, A)
