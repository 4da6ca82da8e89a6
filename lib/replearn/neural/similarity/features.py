"""Feature and Gram matrices as the similarity measures take them: checked (real, finite, one row
per example, trailing dimensions flattened, float64), column-centred with constant columns set
to exactly zero, and rescaled by a power of two (exact) so that inputs of any magnitude neither
overflow nor underflow; the centring reuses buffers where autograd does not record."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from replearn.backend import check_finite

__all__ = ["centred", "checked_features", "checked_kernel", "column_pair", "estimator_name", "feature_pair",
           "gram_pair", "min_examples", "tracked", "unit_scale"]


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


def checked_features(X, name: str) -> torch.Tensor:
    """``X`` as a finite float64 (n, p) tensor (trailing dimensions flattened)."""
    X = _as_features(X, name)[0]
    check_finite(X, name)
    return X


def feature_pair(X, Y, *, min_n: int, why: str) -> tuple[torch.Tensor, torch.Tensor]:
    X, Y = checked_features(X, "X"), checked_features(Y, "Y")
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


def unit_scale(X: torch.Tensor, exponent: int | None = None) -> tuple[torch.Tensor, int]:
    """``X * 2^-e`` with ``e`` the binary exponent of max |X| (or the given ``exponent``), and ``e``.

    Multiplying by a power of two is exact in floating point, so every scale-invariant
    quantity (CKA) is unchanged bit for bit, while inputs of size 1e+-100 no longer overflow or
    underflow when squared twice (||X^T X||_F^2 ~ |X|^4).
    """
    if exponent is None:
        exponent = _binary_exponent(float(X.abs().max()) if X.numel() else 0.0)
    return torch.ldexp(X, X.new_tensor(-exponent)), exponent


def tracked(t: torch.Tensor) -> bool:
    """Whether autograd records operations on ``t`` (then nothing is computed in place or into a buffer)."""
    return t.requires_grad and torch.is_grad_enabled()


@dataclass
class _Columns:
    """Float64 features (n, p) of one representation and what centring them needs (:func:`column_pair`)."""

    X: torch.Tensor
    mean: torch.Tensor  # (1, p) column means
    private: bool  # X is a copy made here and may be overwritten
    constant: torch.Tensor | None = None  # (p,) bool, the constant columns; None when there are none
    exponent: int = 0  # the centred features are scaled by 2^-exponent
    finite: bool = True  # False when centring a finite X overflowed (sums or differences beyond 1.8e308)


def _columns(X, name: str) -> _Columns:
    """Features ``X`` with their column means; NaN or inf in ``X`` raise as in :func:`checked_features`.

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
    largest centred value (:func:`unit_scale`). Both sizes come from each column's extremes
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


def column_pair(X, Y, *, min_n: int, why: str) -> tuple[_Columns, _Columns]:
    """:func:`feature_pair` for the CKA of features: both checked in the same order, then their
    constant columns and scales found (:func:`_find_constant`), Y on X's device."""
    X, Y = _columns(X, "X"), _columns(Y, "Y")
    _check_rows(X.X, Y.X, min_n, why)
    if Y.X.device != X.X.device:
        moved = Y.X.to(X.X.device)
        Y = _Columns(moved, moved.mean(dim=0, keepdim=True), True)
    _find_constant(X, "X")
    _find_constant(Y, "Y")
    return X, Y


def centred(c: _Columns, spare: torch.Tensor | None = None) -> torch.Tensor:
    """Column-centred features, constant columns set to exactly zero, scaled by 2^-exponent (exact).

    Written over ``c.X`` when that is a copy made here, else into ``spare`` (a tensor the caller
    is done with) when it is large enough, else into a new tensor; never into a buffer while
    autograd records.
    """
    X, out = c.X, None
    if not tracked(X):
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


def gram_pair(X: _Columns, Y: _Columns, gram) -> torch.Tensor:
    """The stack [gram(Xc), gram(Yc)] (2, n, n) of the kernels of the centred features.

    ``gram(F, name, out)`` may overwrite F. Without autograd each kernel is written into its
    slot and Yc reuses Xc's memory, so that one (n, p) buffer is allocated (and first touched)
    instead of two.
    """
    Xc = centred(X)
    if tracked(Xc) or tracked(Y.X):
        return torch.stack([gram(Xc, "X", None), gram(centred(Y), "Y", None)])
    n = Xc.shape[0]
    G = Xc.new_empty(2, n, n)
    gram(Xc, "X", G[0])
    gram(centred(Y, spare=Xc), "Y", G[1])
    return G


_SYMMETRY_RTOL = 1e-8
"""A Gram matrix K counts as symmetric when max |K - K^T| <= 1e-8 max |K| (rounding of X X^T is
far below; an asymmetric K is no kernel, and its HSIC would be reported as no variation)."""


def checked_kernel(K, name: str, *, symmetric: bool = False) -> torch.Tensor:
    K = torch.as_tensor(K)
    if K.dtype.is_complex:
        raise ValueError(f"{name} is complex ({K.dtype}): pass a real symmetric Gram matrix")
    K = K.to(torch.float64)
    if K.ndim != 2 or K.shape[0] != K.shape[1]:
        raise ValueError(f"{name} must be a square (n, n) Gram matrix; got shape {tuple(K.shape)}")
    check_finite(K, name)
    scaled = unit_scale(K)[0] if symmetric else K
    if symmetric and K.numel() and float((scaled - scaled.T).abs().max()) > _SYMMETRY_RTOL * float(scaled.abs().max()):
        raise ValueError(f"{name} is not symmetric (max |{name} - {name}^T| = "
                         f"{float((K - K.T).abs().max()):.3g}): a Gram matrix K_ij = k(x_i, x_j) is; build it "
                         f"with linear_kernel/rbf_kernel or pass ({name} + {name}.T) / 2")
    return K


def min_examples(unbiased: bool) -> int:
    return 4 if unbiased else 2


def estimator_name(unbiased: bool) -> str:
    return "the unbiased HSIC estimator (divides by n(n-3))" if unbiased else "the biased HSIC (divides by n-1)"
