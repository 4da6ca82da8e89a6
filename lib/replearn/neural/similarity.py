"""Representation similarity: HSIC, linear and RBF CKA, minibatch CKA, class cosine similarity.

The FedAvg-FT paper (Collins et al. 2022, Fig. 2) measures how much each layer of a
pre-trained CNN changes during fine-tuning by the CKA similarity (Kornblith et al. 2019) of
that layer's features before and after fine-tuning, and (Fig. 4) the average cosine
similarity between the features of images of two classes.

Centred kernel alignment of two feature matrices ``X`` (n, p1) and ``Y`` (n, p2) for the
same n examples, with Gram matrices ``K = k(X, X)`` and ``L = l(Y, Y)``, is

    CKA(K, L) = HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L)),

for HSIC the Hilbert-Schmidt independence criterion (:func:`hsic`, biased or unbiased).
Every computation is done in float64 on the inputs' device; features of more than two
dimensions, e.g. conv maps (n, C, H, W), are flattened to (n, C*H*W).

Degenerate inputs raise ``ValueError`` rather than returning NaN: CKA is undefined when a
representation has no variation across the examples (every feature constant, so
HSIC(K, K) = 0), and the unbiased estimator of HSIC(K, K) can be zero or negative for tiny
samples; both cases are reported with the name of the input at fault.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from replearn.backend import check_finite

# A kernel is degenerate when HSIC(K, K) <= _KERNEL_RTOL * ||K||_F^2 / (n - 1)^2.
_KERNEL_RTOL = 1e-10


# ----------------------------------------------------------------------------- validation

def _as_features(X, name: str) -> tuple[torch.Tensor, bool]:
    """``X`` as a float64 (n, p) tensor (trailing dimensions flattened), not yet checked for NaN
    or inf, and whether it is a copy made here (the conversion or flattening copied), which the
    caller may overwrite."""
    X = torch.as_tensor(X)
    if X.dtype.is_complex:
        raise ValueError(f"{name} is complex ({X.dtype}): similarities are defined for real features; pass "
                         f"{name}.real, {name}.abs() or torch.view_as_real({name}) explicitly")
    if X.ndim < 2:
        raise ValueError(f"{name} must have shape (n, p) or (n, ...), one row per example; got shape "
                         f"{tuple(X.shape)} (reshape a single feature to (n, 1))")
    if X.shape[0] == 0:
        raise ValueError(f"{name} has no rows (shape {tuple(X.shape)}): pass at least one example")
    F = X.reshape(X.shape[0], -1).to(torch.float64)
    if F.shape[1] == 0:
        raise ValueError(f"{name} has no features (shape {tuple(X.shape)})")
    return F, X.device.type != "meta" and F.untyped_storage().data_ptr() != X.untyped_storage().data_ptr()


def _features(X, name: str) -> torch.Tensor:
    """``X`` as a finite float64 (n, p) tensor (trailing dimensions flattened)."""
    X = _as_features(X, name)[0]
    check_finite(X, name)
    return X


def _feature_pair(X, Y, *, min_n: int, why: str) -> tuple[torch.Tensor, torch.Tensor]:
    X, Y = _features(X, "X"), _features(Y, "Y")
    _check_rows(X, Y, min_n, why)
    return X, Y.to(X.device)


def _check_rows(X: torch.Tensor, Y: torch.Tensor, min_n: int, why: str) -> None:
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X and Y must hold the same examples (rows): X has n = {X.shape[0]}, "
                         f"Y has n = {Y.shape[0]}")
    if X.shape[0] < min_n:
        raise ValueError(f"{why} needs at least n = {min_n} examples; got n = {X.shape[0]}")


def _binary_exponent(top: float) -> int:
    """``e`` with 2^(e-1) <= top < 2^e (0 for top 0, NaN or inf)."""
    return math.frexp(top)[1] if top > 0 else 0


def _unit_scale(X: torch.Tensor, exponent: int | None = None) -> tuple[torch.Tensor, int]:
    """``X * 2^-e`` with ``e`` the binary exponent of max |X| (or the given ``exponent``), and ``e``.

    Multiplying by a power of two is exact in floating point, so every scale-invariant
    quantity (CKA) is unchanged bit for bit, while inputs of size 1e+-100 no longer overflow or
    underflow when squared twice (||X^T X||_F^2 ~ |X|^4).
    """
    if exponent is None:
        exponent = _binary_exponent(float(X.abs().max()) if X.numel() else 0.0)
    return torch.ldexp(X, X.new_tensor(-exponent)), exponent


def _tracked(t: torch.Tensor) -> bool:
    """Whether autograd records operations on ``t`` (then nothing is computed in place or into a buffer)."""
    return t.requires_grad and torch.is_grad_enabled()


@dataclass
class _Columns:
    """Float64 features (n, p) of one representation and what centring them needs (:func:`_column_pair`)."""

    X: torch.Tensor
    mean: torch.Tensor  # (1, p) column means
    private: bool  # X is a copy made here and may be overwritten
    constant: torch.Tensor | None = None  # (p,) bool, the constant columns; None when there are none
    exponent: int = 0  # the centred features are scaled by 2^-exponent
    finite: bool = True  # False when centring a finite X overflowed (sums or differences beyond 1.8e308)


def _columns(X, name: str) -> _Columns:
    """Features ``X`` with their column means; NaN or inf in ``X`` raise as in :func:`_features`.

    A NaN or inf entry makes its column's mean, and the sum of the means, NaN or inf, so that sum
    stands in for a pass over X; only when it is not finite is X itself checked (a finite X whose
    sums overflow goes on, as it did before)."""
    X, private = _as_features(X, name)
    if X.device.type == "meta":
        check_finite(X, name)
    mean = X.mean(dim=0, keepdim=True)
    if not math.isfinite(float(mean.detach().sum())):
        check_finite(X, name)
    return _Columns(X, mean, private)


def _column_extremes(X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each column's max and min. On a large contiguous X over blocks of 8 rows first: torch's CPU
    reduction over the rows of a wide matrix ran at half the speed of one over 8 rows at a time
    (torch 2.13, one thread, 1000 x 8192: 50 ms for both extremes, 25 ms by blocks); exact either way."""
    n, p = X.shape
    if n < 64 or X.numel() < 1 << 20 or not X.is_contiguous():
        return X.amax(dim=0), X.amin(dim=0)
    blocks = X[:n - n % 8].view(n // 8, 8, p)
    hi, lo = blocks.amax(dim=1).amax(dim=0), blocks.amin(dim=1).amin(dim=0)
    if n % 8:
        hi, lo = torch.maximum(hi, X[n - n % 8:].amax(dim=0)), torch.minimum(lo, X[n - n % 8:].amin(dim=0))
    return hi, lo


def _find_constant(c: _Columns, name: str) -> None:
    """Set ``c.constant``, ``c.exponent`` and ``c.finite``; ``ValueError`` when every feature is
    constant across the examples.

    A column counts as constant when its centred values are at the rounding level of its raw
    values (n * eps * max |x|): the test is made after centring, so a large common offset
    (features 1e10 + z) is not mistaken for a constant, and the rounding residue of a truly
    constant column is set to zero instead of entering the kernels. The exponent is that of the
    largest centred value (:func:`_unit_scale`). Both sizes come from each column's extremes
    (:func:`_column_extremes`), without a pass over the centred features: |x| is largest at the
    column's max or min, and rounding is monotone, so the centred values fl(x - m) are largest
    and smallest there too and max_i |fl(x_ij - m_j)| = max(|fl(max_j - m_j)|, |fl(min_j - m_j)|)
    exactly.
    """
    X, m = c.X.detach(), c.mean[0].detach()  # the mask and the exponent are not differentiated
    hi, lo = _column_extremes(X)
    centred = torch.maximum((hi - m).abs(), (lo - m).abs())
    constant = centred <= X.shape[0] * torch.finfo(X.dtype).eps * torch.maximum(hi.abs(), lo.abs())
    n_constant = int(constant.sum())
    if n_constant == X.shape[1]:
        raise ValueError(f"{name} is degenerate: every feature is constant across the {X.shape[0]} examples "
                         f"(zero variance), so CKA is undefined; check the layer (e.g. dead ReLUs) or the inputs")
    if n_constant:
        c.constant = constant
        centred = centred.masked_fill(constant, 0.0)
    top = float(centred.max())
    c.exponent, c.finite = _binary_exponent(top), math.isfinite(top)


def _column_pair(X, Y, *, min_n: int, why: str) -> tuple[_Columns, _Columns]:
    """:func:`_feature_pair` for the CKA of features: both checked in the same order, then their
    constant columns and scales found (:func:`_find_constant`), Y on X's device."""
    X, Y = _columns(X, "X"), _columns(Y, "Y")
    _check_rows(X.X, Y.X, min_n, why)
    if Y.X.device != X.X.device:
        moved = Y.X.to(X.X.device)
        Y = _Columns(moved, moved.mean(dim=0, keepdim=True), True)
    _find_constant(X, "X")
    _find_constant(Y, "Y")
    return X, Y


def _centred(c: _Columns, spare: torch.Tensor | None = None) -> torch.Tensor:
    """Column-centred features, constant columns set to exactly zero, scaled by 2^-exponent (exact).

    Written over ``c.X`` when that is a copy made here, else into ``spare`` (a tensor the caller
    is done with) when it is large enough, else into a new tensor; never into a buffer while
    autograd records.
    """
    X, out = c.X, None
    if not _tracked(X):
        if c.private:
            out = X
        elif spare is not None and X.is_contiguous() and spare.is_contiguous() and spare.numel() >= X.numel():
            out = spare.view(-1)[:X.numel()].view(X.shape)
    Xc = X - c.mean if out is None else torch.sub(X, c.mean, out=out)
    if c.constant is not None:  # a non-contiguous Xc gets a contiguous copy, as it always did: the layout
        # decides the order of the sums that follow
        Xc = Xc.masked_fill_(c.constant, 0.0) if Xc.is_contiguous() else Xc.masked_fill(c.constant, 0.0)
    if c.exponent:
        Xc.ldexp_(Xc.new_tensor(-c.exponent))
    return Xc


def _gram_pair(X: _Columns, Y: _Columns, gram) -> torch.Tensor:
    """The stack [gram(Xc), gram(Yc)] (2, n, n) of the kernels of the centred features.

    ``gram(F, name, out)`` may overwrite F. Without autograd each kernel is written into its
    slot and Yc reuses Xc's memory, so that one (n, p) buffer is allocated (and first touched)
    instead of two.
    """
    Xc = _centred(X)
    if _tracked(Xc) or _tracked(Y.X):
        return torch.stack([gram(Xc, "X", None), gram(_centred(Y), "Y", None)])
    n = Xc.shape[0]
    G = Xc.new_empty(2, n, n)
    gram(Xc, "X", G[0])
    gram(_centred(Y, spare=Xc), "Y", G[1])
    return G


_SYMMETRY_RTOL = 1e-8
"""A Gram matrix K counts as symmetric when max |K - K^T| <= 1e-8 max |K| (rounding of X X^T is
far below; an asymmetric K is no kernel, and its HSIC would be reported as no variation)."""


def _kernel(K, name: str, *, symmetric: bool = False) -> torch.Tensor:
    K = torch.as_tensor(K)
    if K.dtype.is_complex:
        raise ValueError(f"{name} is complex ({K.dtype}): pass a real symmetric Gram matrix")
    K = K.to(torch.float64)
    if K.ndim != 2 or K.shape[0] != K.shape[1]:
        raise ValueError(f"{name} must be a square (n, n) Gram matrix; got shape {tuple(K.shape)}")
    check_finite(K, name)
    scaled = _unit_scale(K)[0] if symmetric else K
    if symmetric and K.numel() and float((scaled - scaled.T).abs().max()) > _SYMMETRY_RTOL * float(scaled.abs().max()):
        raise ValueError(f"{name} is not symmetric (max |{name} - {name}^T| = "
                         f"{float((K - K.T).abs().max()):.3g}): a Gram matrix K_ij = k(x_i, x_j) is; build it "
                         f"with linear_kernel/rbf_kernel or pass ({name} + {name}.T) / 2")
    return K


def _min_n(unbiased: bool) -> int:
    return 4 if unbiased else 2


def _estimator(unbiased: bool) -> str:
    return "the unbiased HSIC estimator (divides by n(n-3))" if unbiased else "the biased HSIC (divides by n-1)"


# ----------------------------------------------------------------------------- HSIC

def _hsic_matrix(Ks: torch.Tensor, Ls: torch.Tensor, unbiased: bool, *,
                 overwrite: bool = False) -> torch.Tensor:
    """HSIC(K_a, L_b) for stacks of Gram matrices ``Ks`` (A, n, n) and ``Ls`` (B, n, n) -> (A, B).

    Uses tr(A B) = sum(A * B^T), so each trace is one entry of a (A, n^2) @ (n^2, B) product.
    ``overwrite``: the stacks (``Ls`` may be ``Ks`` itself) are the caller's to overwrite, so the
    centred (biased) or zero-diagonal (unbiased) matrices are made in place rather than copied.
    """
    n = Ks.shape[-1]
    # L_b^T in a copy of its own, made before Ls may be overwritten
    Lt_flat = Ls.transpose(-1, -2).clone(memory_format=torch.contiguous_format).view(Ls.shape[0], -1)
    if not unbiased:
        row, col = Ks.mean(dim=-1, keepdim=True), Ks.mean(dim=-2, keepdim=True)
        mean = Ks.mean(dim=(-2, -1), keepdim=True)
        Kc = Ks.sub_(row).sub_(col).add_(mean) if overwrite else Ks - row - col + mean
        return Kc.reshape(Ks.shape[0], -1) @ Lt_flat.T / (n - 1) ** 2
    K0 = Ks if overwrite else Ks.clone()
    K0.diagonal(dim1=-2, dim2=-1).zero_()
    L0 = K0
    if Ls is not Ks:
        L0 = Ls if overwrite else Ls.clone()
        L0.diagonal(dim1=-2, dim2=-1).zero_()
    Lt_flat.view(Ls.shape).diagonal(dim1=-2, dim2=-1).zero_()
    trace = K0.reshape(Ks.shape[0], -1) @ Lt_flat.T
    sums = torch.outer(K0.sum(dim=(-2, -1)), L0.sum(dim=(-2, -1))) / ((n - 1) * (n - 2))
    cross = K0.sum(dim=-2) @ L0.sum(dim=-1).T  # 1^T K~ L~ 1
    return (trace + sums - 2.0 / (n - 2) * cross) / (n * (n - 3))


def _feature_form_cheaper(n: int, p1: int, p2: int) -> bool:
    """Whether products of (n, p1) and (n, p2) features (~ n (p1 p2 + p1^2 + p2^2) flops) cost no
    more than forming and multiplying their n x n Gram matrices (~ n^2 (p1 + p2))."""
    return p1 * p2 + p1 * p1 + p2 * p2 <= n * (p1 + p2)


def _linear_hsic_terms(Xs: list[torch.Tensor], Ys: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """Unbiased HSIC of the linear kernels K_a = X_a X_a^T and L_b = Y_b Y_b^T, without the Gram matrices.

    With d_a = diag(K_a) (squared row norms), s_a = X_a^T 1, so that K~_a 1 = X_a s_a - d_a and
    1^T K~_a 1 = |s_a|^2 - sum d_a, and tr(K~_a L~_b) = ||Y_b^T X_a||_F^2 - d_a . d_b, the
    estimator of :func:`hsic` (Song et al. 2012) becomes

        HSIC_1 = [ ||Y_b^T X_a||_F^2 - d_a . d_b + (1^T K~_a 1)(1^T L~_b 1) / ((n-1)(n-2))
                   - 2/(n-2) (K~_a 1) . (L~_b 1) ] / (n (n-3)),

    O(n p_a p_b) instead of O(n^2 (p_a + p_b)). Returns ``(cross (A, B), self_x (A,), self_y (B,),
    scale_x (A,), scale_y (B,))`` with the scales ||K||_F^2 / (n-1)^2 of :func:`_kernel_scale`.
    """
    n = Xs[0].shape[0]

    def parts(Fs):
        d = torch.stack([F.square().sum(dim=1) for F in Fs])                  # (A, n)
        k1 = torch.stack([F @ F.sum(dim=0) for F in Fs]) - d                  # K~ 1
        tot = torch.stack([F.sum(dim=0).square().sum() for F in Fs]) - d.sum(dim=1)
        gram_sq = torch.stack([torch.linalg.norm(F.T @ F).square() for F in Fs])  # ||K||_F^2
        return d, k1, tot, gram_sq

    def combine(trace, da, db, ka, kb, ta, tb):
        return (trace - da @ db.T + torch.outer(ta, tb) / ((n - 1) * (n - 2))
                - 2.0 / (n - 2) * (ka @ kb.T)) / (n * (n - 3))

    dx, kx, tx, gx = parts(Xs)
    dy, ky, ty, gy = parts(Ys)
    blocks = torch.cat(Ys, dim=1).T @ torch.cat(Xs, dim=1)                    # (sum p_y, sum p_x)
    trace = torch.stack([torch.stack([b.square().sum() for b in row.split([F.shape[1] for F in Xs], dim=1)])
                         for row in blocks.split([F.shape[1] for F in Ys], dim=0)]).T
    cross = combine(trace, dx, dy, kx, ky, tx, ty)
    self_x = torch.diagonal(combine(torch.diag(gx), dx, dx, kx, kx, tx, tx))
    self_y = torch.diagonal(combine(torch.diag(gy), dy, dy, ky, ky, ty, ty))
    return cross, self_x, self_y, gx / (n - 1) ** 2, gy / (n - 1) ** 2


def hsic(K, L, *, unbiased: bool = False) -> torch.Tensor:
    """Hilbert-Schmidt independence criterion of two (n, n) Gram matrices, a float64 scalar.

    Biased (Gretton et al. 2005), with the centring matrix H = I - (1/n) 1 1^T::

        HSIC_0(K, L) = tr(K H L H) / (n - 1)^2.

    Unbiased (Song et al. 2012), with K~, L~ equal to K, L with their diagonals set to zero::

        HSIC_1(K, L) = [ tr(K~ L~) + (1^T K~ 1)(1^T L~ 1) / ((n - 1)(n - 2))
                         - 2/(n - 2) 1^T K~ L~ 1 ] / (n (n - 3)).

    HSIC_1 is an unbiased estimate of the population HSIC (it is a U-statistic), so it may be
    negative; it needs n >= 4, HSIC_0 needs n >= 2.
    """
    K, L = _kernel(K, "K"), _kernel(L, "L")
    if K.shape != L.shape:
        raise ValueError(f"K and L must be Gram matrices of the same n examples; got shapes "
                         f"{tuple(K.shape)} and {tuple(L.shape)}")
    n = K.shape[0]
    if n < _min_n(unbiased):
        raise ValueError(f"{_estimator(unbiased)} needs at least n = {_min_n(unbiased)} examples; got n = {n}")
    return _hsic_matrix(K[None], L[None].to(K.device), unbiased)[0, 0]


def _kernel_scale(K: torch.Tensor) -> torch.Tensor:
    """||K||_F^2 / (n-1)^2 for a stack (..., n, n): the size HSIC(K, K) is judged degenerate against."""
    n = K.shape[-1]
    flat = K.reshape(-1, 1, n * n)  # the sums of squares as products, without a squared copy of K
    return (flat @ flat.transpose(-1, -2)).reshape(K.shape[:-2]) / (n - 1) ** 2


def _degenerate_message(name: str, unbiased: bool) -> str:
    extra = (" or, for the unbiased estimator, n is too small for a positive estimate; use more examples"
             if unbiased else "")
    return (f"HSIC({name}, {name}) is not positive: {name} has (numerically) no variation across the "
            f"examples{extra}, so CKA is undefined")


def _cka_from_grams(G: torch.Tensor, unbiased: bool, names: tuple[str, str]) -> torch.Tensor:
    """CKA of the stack ``G`` = [K, L] (2, n, n), which is overwritten unless autograd records it."""
    scale = _kernel_scale(G)
    M = _hsic_matrix(G, G, unbiased, overwrite=not _tracked(G))
    for i, name in enumerate(names):
        if not bool(M[i, i] > _KERNEL_RTOL * scale[i]):
            raise ValueError(_degenerate_message(name, unbiased))
    return M[0, 1] / torch.sqrt(M[0, 0] * M[1, 1])


def kernel_cka(K, L, *, unbiased: bool = False) -> torch.Tensor:
    """CKA(K, L) = HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L)) of two (n, n) Gram matrices.

    ``ValueError`` when HSIC(K, K) or HSIC(L, L) is not above 1e-10 ||K||_F^2/(n-1)^2 (a
    constant representation; for a linear kernel of features with a huge common offset,
    centre the features first), and when K or L is not symmetric (no Gram matrix is).
    """
    K, L = _kernel(K, "K", symmetric=True), _kernel(L, "L", symmetric=True)
    if K.shape != L.shape:
        raise ValueError(f"K and L must be Gram matrices of the same n examples; got shapes "
                         f"{tuple(K.shape)} and {tuple(L.shape)}")
    if K.shape[0] < _min_n(unbiased):
        raise ValueError(f"{_estimator(unbiased)} needs at least n = {_min_n(unbiased)} examples; "
                         f"got n = {K.shape[0]}")
    G = torch.stack([_unit_scale(K)[0], _unit_scale(L.to(K.device))[0]])
    return _cka_from_grams(G, unbiased, ("K", "L"))


# ----------------------------------------------------------------------------- kernels

def linear_kernel(X) -> torch.Tensor:
    """Gram matrix K = X X^T (float64) of the rows of ``X`` (n, p)."""
    X = _features(X, "X")
    return X @ X.T


def _squared_distances(X: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """D_ij = |x_i|^2 + |x_j|^2 - 2 x_i . x_j (clamped at 0, zero diagonal), written into ``out``
    if given; overwrites X (with its squares) unless autograd records it."""
    if _tracked(X):
        sq = X.square().sum(dim=1)
        D = (sq[:, None] + sq[None, :] - 2.0 * (X @ X.T)).clamp_min(0.0)
    else:
        products = X @ X.T
        sq = X.square_().sum(dim=1)
        D = torch.add(sq[:, None], sq[None, :], out=out).sub_(products.mul_(2.0)).clamp_min_(0.0)
    D.fill_diagonal_(0.0)
    return D


def _median(values: torch.Tensor) -> torch.Tensor:
    """Median with NumPy's convention (mean of the two middle values for an even count), by selection."""
    v = values.reshape(-1)
    m = v.numel()
    low = torch.kthvalue(v, (m - 1) // 2 + 1).values
    high = low if m % 2 else torch.kthvalue(v, m // 2 + 1).values
    return 0.5 * (low + high)


def _check_sigma_frac(sigma_frac) -> None:
    if not (isinstance(sigma_frac, (int, float)) and 0 < sigma_frac < float("inf")):
        raise ValueError(f"sigma_frac must be a positive finite number (a fraction of the median distance); "
                         f"got {sigma_frac!r}")


def rbf_kernel(X, *, sigma_frac: float = 0.8, name: str = "X") -> torch.Tensor:
    """RBF Gram matrix K_ij = exp(-||x_i - x_j||^2 / (2 sigma^2)), sigma = sigma_frac x median distance.

    The bandwidth follows the CKA authors' code (Kornblith et al. 2019): the median is
    taken over all n^2 entries of the distance matrix (its zero diagonal included), so
    sigma scales with the data and RBF CKA is invariant to isotropic scaling.
    """
    _check_sigma_frac(sigma_frac)
    X = _unit_scale(_features(X, name))[0]  # exact power-of-two scaling: sigma scales with it
    return _rbf_gram(X, sigma_frac, name)


def _rbf_gram(X: torch.Tensor, sigma_frac: float, name: str, out: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`rbf_kernel` of checked, scaled features ``X`` (overwritten unless autograd records
    it), written into ``out`` if given."""
    D = _squared_distances(X, out)
    median_sq = _median(D)
    if not bool(median_sq > 0):
        raise ValueError(f"{name}: the median pairwise distance is 0 (more than half of the pairs of examples "
                         f"coincide, e.g. constant features), so the RBF bandwidth is undefined")
    try:
        sigma_sq = sigma_frac ** 2 * median_sq
    except OverflowError:
        sigma_sq = median_sq.new_tensor(math.inf)
    # -D / (2 sigma^2) rounds as D / (-2 sigma^2): one division, in place where allowed
    K = torch.exp(-D / (2.0 * sigma_sq)) if _tracked(D) else D.div_(-2.0 * sigma_sq).exp_()
    n = K.shape[0]
    # the diagonal is exp(-0) = 1, so "every entry between two examples is 1 (is 0)" reads
    # "every entry is 1" ("only the n diagonal entries are non-zero")
    if n > 1 and (not bool(torch.isfinite(sigma_sq) & (sigma_sq > 0)) or bool((K == 1.0).all())
                  or int(torch.count_nonzero(K)) == n):
        off = ~torch.eye(n, dtype=torch.bool, device=K.device)
        raise ValueError(f"sigma_frac = {sigma_frac!r} is an absurd RBF bandwidth for {name}: every kernel entry "
                         f"between two examples rounds to {float(K[off].max()):g}, so no variation can be seen; "
                         f"use a sigma_frac near 1 (default 0.8: 0.8 x the median distance)")
    return K


# ----------------------------------------------------------------------------- CKA of features

def linear_cka(X, Y, *, unbiased: bool = False) -> torch.Tensor:
    """Linear CKA of features ``X`` (n, p1) and ``Y`` (n, p2) of the same n examples, a float64 scalar.

    Biased (Kornblith et al. 2019, Eq. 5), with column-centred X and Y, in the feature-space
    form when p1, p2 are small relative to n and otherwise in the equal Gram form::

        CKA = ||Y^T X||_F^2 / (||X^T X||_F ||Y^T Y||_F) = tr(K L) / (||K||_F ||L||_F),  K = X X^T, L = Y Y^T.

    With ``unbiased=True`` each HSIC is the unbiased estimator of :func:`hsic` on the linear
    Gram matrices (needs n >= 4), again in feature space (:func:`_linear_hsic_terms`) when that
    is cheaper. The centred features are rescaled by a power of two (exact), so inputs of any
    magnitude representable in float64 give the same value. Invariant to orthogonal transforms and isotropic scaling of
    either representation, not to general invertible linear maps. ``ValueError`` when either
    input has every feature constant (CKA undefined).
    """
    X, Y = _column_pair(X, Y, min_n=_min_n(unbiased), why=_estimator(unbiased))
    if not _feature_form_cheaper(X.X.shape[0], X.X.shape[1], Y.X.shape[1]):
        G = _gram_pair(X, Y, lambda F, name, out: torch.matmul(F, F.T, out=out))
        if unbiased:
            return _cka_from_grams(G, True, ("X", "Y"))
        K, L = G
        return (K * L).sum() / (torch.linalg.norm(K) * torch.linalg.norm(L))
    Xc, Yc = _centred(X), _centred(Y)
    if unbiased:
        cross, self_x, self_y, scale_x, scale_y = _linear_hsic_terms([Xc], [Yc])
        for name, value, scale in (("X", self_x, scale_x), ("Y", self_y, scale_y)):
            if not bool(value[0] > _KERNEL_RTOL * scale[0]):
                raise ValueError(_degenerate_message(name, True))
        return cross[0, 0] / torch.sqrt(self_x[0] * self_y[0])
    numerator = torch.linalg.norm(Yc.T @ Xc).square()
    return numerator / (torch.linalg.norm(Xc.T @ Xc) * torch.linalg.norm(Yc.T @ Yc))


def rbf_cka(X, Y, *, sigma_frac: float = 0.8, unbiased: bool = False) -> torch.Tensor:
    """CKA with RBF kernels of bandwidth ``sigma_frac`` x median distance (:func:`rbf_kernel`).

    Kornblith et al. (2019) use sigma_frac = 0.8 in most of their experiments. Invariant to
    orthogonal transforms, translations and isotropic scaling of either representation.
    """
    X, Y = _column_pair(X, Y, min_n=_min_n(unbiased), why=_estimator(unbiased))
    _check_sigma_frac(sigma_frac)
    finite = {"X": X.finite, "Y": Y.finite}

    def gram(F, name, out):
        if not finite[name]:
            check_finite(F, name)  # the centred features overflowed: NaN or inf, reported as by rbf_kernel
        return _rbf_gram(F, sigma_frac, name, out)

    G = _gram_pair(X, Y, gram)
    return _cka_from_grams(G, unbiased, ("X", "Y"))


# ----------------------------------------------------------------------------- minibatch CKA

@dataclass(frozen=True)
class CKAResult:
    """Minibatch CKA between every layer of one set (rows) and every layer of another (columns)."""

    values: torch.Tensor  # (len(x_names), len(y_names)) float64
    x_names: tuple[str, ...]
    y_names: tuple[str, ...]
    n_batches: int
    n_examples: int

    def __getitem__(self, pair: tuple[str, str]) -> float:
        """CKA of the layer pair (x_name, y_name)."""
        x_name, y_name = pair
        return float(self.values[self.x_names.index(x_name), self.y_names.index(y_name)])

    def diagonal(self) -> dict[str, float]:
        """Layer -> CKA for equal names in both sets (e.g. each layer before vs after fine-tuning)."""
        return {name: self[name, name] for name in self.x_names if name in self.y_names}


def _named(features, which: str) -> tuple[tuple[str, ...], list]:
    if isinstance(features, Mapping):
        return tuple(str(k) for k in features), list(features.values())
    if isinstance(features, torch.Tensor) or not isinstance(features, Sequence) or len(features) == 0:
        raise ValueError(f"{which} must be a non-empty mapping name -> features or a sequence of feature "
                         f"tensors (one per layer)")
    return tuple(str(i) for i in range(len(features))), list(features)


class CKAAccumulator:
    """The minibatch CKA estimator of Nguyen, Raghu & Kornblith (2021), for many layer pairs at once.

    For minibatches i = 1..k with Gram matrices K_i (a layer of the first set) and L_i (a
    layer of the second set), the unbiased HSIC_1 of :func:`hsic` is averaged over batches
    separately for the numerator and the two denominator terms, then combined::

        CKA_minibatch = mean_i HSIC_1(K_i, L_i) / sqrt(mean_i HSIC_1(K_i, K_i) mean_i HSIC_1(L_i, L_i)).

    Each average is an unbiased estimate of its population value whatever the batch size,
    which an average of per-batch CKAs is not. Batches are weighted equally, as in the
    authors' code. Call :meth:`update` once per minibatch with the features of every layer
    of both sets for the same examples (dicts from :func:`capture_activations` work), then
    :meth:`result`. ``kernel`` is ``"linear"`` or ``"rbf"`` (bandwidth from each batch's
    median distance). Every batch needs n >= 4 examples.
    """

    def __init__(self, *, kernel: str = "linear", sigma_frac: float = 0.8):
        if kernel not in ("linear", "rbf"):
            raise ValueError(f"kernel must be 'linear' or 'rbf'; got {kernel!r}")
        self.kernel = kernel
        self.sigma_frac = sigma_frac
        self.x_names: tuple[str, ...] | None = None
        self.y_names: tuple[str, ...] | None = None
        self._cross = self._self_x = self._self_y = self._scale_x = self._scale_y = None
        self._exponents: dict[tuple[str, str], int] = {}
        self.n_batches = 0
        self.n_examples = 0

    def _centred(self, feats: list, names: tuple[str, ...], side: str, n: int | None) -> tuple[list, int]:
        """Centred features of every layer of one set. Linear kernels: rescaled by a power of two
        fixed per layer at its first batch (exact, so the batch averages keep their weights);
        RBF: already the Gram matrices (their bandwidth makes them scale-free per batch)."""
        out = []
        for name, F in zip(names, feats):
            F = _features(F, f"layer {name!r}")
            if n is None:
                n = F.shape[0]
            if F.shape[0] != n:
                raise ValueError(f"every layer of a batch must hold the same examples: layer {name!r} has "
                                 f"{F.shape[0]} rows, expected {n}")
            Fc = F - F.mean(dim=0, keepdim=True)
            if self.kernel == "linear":
                Fc, self._exponents[side, name] = _unit_scale(Fc, self._exponents.get((side, name)))
                out.append(Fc)
            else:
                out.append(rbf_kernel(_unit_scale(Fc)[0], sigma_frac=self.sigma_frac, name=f"layer {name!r}"))
        return out, n

    def update(self, xs, ys) -> None:
        """Add one minibatch: ``xs``/``ys`` map layer names to (n, ...) features of the same n examples.

        Linear kernels use the feature-space form of the unbiased HSIC (:func:`_linear_hsic_terms`)
        when the layers are narrow relative to the batch, else the Gram matrices."""
        x_names, x_feats = _named(xs, "xs")
        y_names, y_feats = _named(ys, "ys")
        if self.x_names is not None and (x_names, y_names) != (self.x_names, self.y_names):
            raise ValueError(f"layers changed between batches: expected {self.x_names} and {self.y_names}, "
                             f"got {x_names} and {y_names}")
        Fx, n = self._centred(x_feats, x_names, "x", None)
        Fy, _ = self._centred(y_feats, y_names, "y", n)
        if n < 4:
            raise ValueError(f"the unbiased HSIC needs at least 4 examples per batch; got a batch of {n}")
        Fy = [F.to(Fx[0].device) for F in Fy]
        if self.kernel == "linear" and _feature_form_cheaper(n, sum(F.shape[1] for F in Fx),
                                                             sum(F.shape[1] for F in Fy)):
            cross, self_x, self_y, scale_x, scale_y = _linear_hsic_terms(Fx, Fy)
        else:
            Kx = torch.stack([F @ F.T for F in Fx] if self.kernel == "linear" else Fx)
            Ky = torch.stack([F @ F.T for F in Fy] if self.kernel == "linear" else Fy)
            cross = _hsic_matrix(Kx, Ky, True)
            self_x = torch.diagonal(_hsic_matrix(Kx, Kx, True))
            self_y = torch.diagonal(_hsic_matrix(Ky, Ky, True))
            scale_x, scale_y = _kernel_scale(Kx), _kernel_scale(Ky)
        if self.x_names is None:
            self.x_names, self.y_names = x_names, y_names
            self._cross, self._self_x, self._self_y = cross, self_x, self_y
            self._scale_x, self._scale_y = scale_x, scale_y
        else:
            self._cross = self._cross + cross
            self._self_x = self._self_x + self_x
            self._self_y = self._self_y + self_y
            self._scale_x = self._scale_x + scale_x
            self._scale_y = self._scale_y + scale_y
        self.n_batches += 1
        self.n_examples += n

    def result(self) -> CKAResult:
        """CKA of every (x layer, y layer) pair from the batch-averaged HSIC terms."""
        if self.n_batches == 0:
            raise ValueError("no batches added yet: call update() with at least one minibatch")
        for names, terms, scale in ((self.x_names, self._self_x, self._scale_x),
                                    (self.y_names, self._self_y, self._scale_y)):
            bad = [name for name, t, s in zip(names, terms, scale) if not bool(t > _KERNEL_RTOL * s)]
            if bad:
                raise ValueError(f"the batch-averaged unbiased HSIC of layer(s) {bad} with itself is not "
                                 f"positive: constant features in every batch, or too few examples")
        values = self._cross / torch.sqrt(torch.outer(self._self_x, self._self_y))
        return CKAResult(values=values, x_names=self.x_names, y_names=self.y_names,
                         n_batches=self.n_batches, n_examples=self.n_examples)


def minibatch_cka(X, Y, *, batch_size: int, kernel: str = "linear", sigma_frac: float = 0.8) -> torch.Tensor:
    """Minibatch CKA (Nguyen et al. 2021) of ``X`` and ``Y`` split into consecutive batches of ``batch_size``.

    See :class:`CKAAccumulator`. A last batch with fewer than 4 examples (too few for the
    unbiased HSIC) is merged into the batch before it. Returns a float64 scalar.
    """
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 4:
        raise ValueError(f"batch_size must be an int >= 4 (the unbiased HSIC needs 4 examples); got {batch_size!r}")
    X, Y = _feature_pair(X, Y, min_n=4, why="minibatch CKA (unbiased HSIC)")
    n = X.shape[0]
    starts = list(range(0, n, batch_size))
    if len(starts) > 1 and n - starts[-1] < 4:
        starts.pop()
    acc = CKAAccumulator(kernel=kernel, sigma_frac=sigma_frac)
    for i, start in enumerate(starts):
        stop = starts[i + 1] if i + 1 < len(starts) else n
        acc.update({"X": X[start:stop]}, {"Y": Y[start:stop]})
    return acc.result().values[0, 0]


# ----------------------------------------------------------------------------- cosine similarity

def _labels(labels, n: int, n_classes: int, device: torch.device) -> torch.Tensor:
    labels = torch.as_tensor(labels)
    if labels.ndim != 1 or labels.shape[0] != n:
        raise ValueError(f"labels must be a 1-D tensor with one label per example (n = {n}); "
                         f"got shape {tuple(labels.shape)}")
    if labels.dtype.is_floating_point or labels.dtype.is_complex or labels.dtype == torch.bool:
        raise ValueError(f"labels must be integers; got dtype {labels.dtype}")
    labels = labels.to(device=device, dtype=torch.int64)
    if n and (int(labels.min()) < 0 or int(labels.max()) >= n_classes):
        raise ValueError(f"labels must lie in [0, {n_classes}); got values in "
                         f"[{int(labels.min())}, {int(labels.max())}]")
    return labels


def class_cosine_similarity(features, labels, n_classes: int) -> torch.Tensor:
    """(n_classes, n_classes) matrix of average cosine similarity between features of two classes.

    Entry (a, b) is the mean of cos(f_i, f_j) over examples i of class a and j of class b,
    excluding the self-pairs i = j on the diagonal: the matrices of the FedAvg-FT paper's
    Fig. 4 (ideal: 1 on the diagonal, 0 off it). Vectorised through class sums s_a of the
    normalised features u_i = f_i / ||f_i||::

        M[a, b] = s_a . s_b / (n_a n_b),   M[a, a] = (||s_a||^2 - sum_{i in a} ||u_i||^2) / (n_a (n_a - 1)).

    A zero feature vector has cosine similarity 0 with everything (the convention of
    ``torch.nn.functional.cosine_similarity``). Every class needs at least 2 examples
    (``ValueError`` naming the classes otherwise). Float64.
    """
    if not isinstance(n_classes, int) or isinstance(n_classes, bool) or n_classes < 1:
        raise ValueError(f"n_classes must be a positive int; got {n_classes!r}")
    F = _features(features, "features")
    labels = _labels(labels, F.shape[0], n_classes, F.device)
    # each row scaled by a power of two first (exact), so that norms of features of size 1e+-160
    # neither overflow nor underflow; the unit vectors are those of the unscaled rows
    top = F.abs().amax(dim=1)
    exponent = torch.frexp(torch.where(top > 0, top, torch.ones_like(top))).exponent
    F = torch.ldexp(F, -exponent[:, None].to(F.dtype))
    norms = torch.linalg.norm(F, dim=1, keepdim=True)
    U = torch.where(norms > 0, F / norms.clamp_min(torch.finfo(F.dtype).tiny), torch.zeros_like(F))
    counts = torch.bincount(labels, minlength=n_classes).to(F.dtype)
    small = [c for c in range(n_classes) if counts[c] < 2]
    if small:
        raise ValueError(f"class(es) {small} have fewer than 2 examples; the within-class average needs at "
                         f"least two per class (relabel to the classes present or add examples)")
    S = torch.zeros(n_classes, F.shape[1], dtype=F.dtype, device=F.device).index_add_(0, labels, U)
    self_sq = torch.zeros(n_classes, dtype=F.dtype, device=F.device).index_add_(0, labels, U.square().sum(dim=1))
    M = (S @ S.T) / torch.outer(counts, counts)
    M.diagonal().copy_((S.square().sum(dim=1) - self_sq) / (counts * (counts - 1)))
    return M


def intra_inter_gap(matrix) -> torch.Tensor:
    """Mean diagonal minus mean off-diagonal entry of a class-similarity matrix (high = separated classes)."""
    M = torch.as_tensor(matrix).to(torch.float64)
    if M.ndim != 2 or M.shape[0] != M.shape[1] or M.shape[0] < 2:
        raise ValueError(f"matrix must be square with at least 2 classes; got shape {tuple(M.shape)}")
    check_finite(M, "matrix")
    c = M.shape[0]
    diag = torch.diagonal(M)
    return diag.mean() - (M.sum() - diag.sum()) / (c * (c - 1))


# ----------------------------------------------------------------------------- activation capture

def capture_activations(model: nn.Module, x: torch.Tensor, layer_names, *,
                        batch_size: int = 256) -> dict[str, torch.Tensor]:
    """Outputs of the named submodules of ``model`` on ``x``, each flattened to (n, p).

    Names are those of ``model.named_modules()`` (e.g. ``"body.conv1"``). Forward hooks are
    registered on the modules, ``x`` (already on the model's device) is run through in
    batches of ``batch_size`` in eval mode under ``torch.no_grad()``, and afterwards the
    hooks are removed and every submodule's train/eval mode restored, even on error. The
    activations stay on the device the model produced them on, in the model's float dtype.
    A module that runs more than once per forward pass (a reused activation module) is
    rejected, since its output would be ambiguous.
    """
    names = [layer_names] if isinstance(layer_names, str) else list(layer_names)
    modules = dict(model.named_modules())
    if not names:
        raise ValueError("layer_names is empty: name at least one module of model.named_modules()")
    unknown = [name for name in names if name not in modules]
    if unknown:
        available = [name for name in modules if name]
        raise ValueError(f"unknown layer name(s) {unknown}; available modules: {available}")
    if len(set(names)) != len(names):
        raise ValueError(f"layer_names has duplicates: {names}")
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int; got {batch_size!r}")
    if not isinstance(x, torch.Tensor) or x.ndim < 1 or x.shape[0] == 0:
        raise ValueError("x must be a non-empty tensor with the examples along dimension 0")

    chunks: dict[str, list[torch.Tensor]] = {name: [] for name in names}

    def make_hook(name: str):
        def hook(_module, _inputs, output):
            if not isinstance(output, torch.Tensor):
                raise ValueError(f"layer {name!r} returned {type(output).__name__}, not a tensor; "
                                 f"capture one of its tensor-valued submodules instead")
            chunks[name].append(output.detach().reshape(output.shape[0], -1))
        return hook

    modes = [(m, m.training) for m in model.modules()]
    handles = []
    try:
        handles = [modules[name].register_forward_hook(make_hook(name)) for name in names]
        model.eval()
        with torch.no_grad():
            for b, start in enumerate(range(0, x.shape[0], batch_size)):
                xb = x[start:start + batch_size]
                model(xb)
                for name in names:
                    if len(chunks[name]) != b + 1:
                        raise ValueError(f"layer {name!r} ran {len(chunks[name]) - b} times in one forward pass "
                                         f"(a reused module?); capture a module that runs exactly once")
                    if chunks[name][-1].shape[0] != xb.shape[0]:
                        raise ValueError(f"layer {name!r} output has {chunks[name][-1].shape[0]} rows for a "
                                         f"batch of {xb.shape[0]}; dimension 0 must index the examples")
    finally:
        for handle in handles:
            handle.remove()
        for module, mode in modes:
            module.training = mode
    return {name: torch.cat(chunks[name]) for name in names}
