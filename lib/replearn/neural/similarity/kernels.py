"""Gram matrices of features: the linear kernel X X^T and the RBF kernel with the CKA authors'
bandwidth, a fraction of the median pairwise distance (Kornblith et al. 2019)."""

from __future__ import annotations

import math

import torch

from replearn.neural.similarity.features import checked_features, tracked, unit_scale

__all__ = ["check_sigma_frac", "linear_kernel", "rbf_gram", "rbf_kernel"]


def linear_kernel(X) -> torch.Tensor:
    """Gram matrix K = X X^T (float64) of the rows of ``X`` (n, p)."""
    X = checked_features(X, "X")
    return X @ X.T


def _squared_distances(X: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """D_ij = |x_i|^2 + |x_j|^2 - 2 x_i . x_j (clamped at 0, zero diagonal), written into ``out``
    if given; overwrites X (with its squares) unless autograd records it."""
    if tracked(X):
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


def check_sigma_frac(sigma_frac) -> None:
    if not (isinstance(sigma_frac, (int, float)) and 0 < sigma_frac < float("inf")):
        raise ValueError(f"sigma_frac must be a positive finite number (a fraction of the median distance); "
                         f"got {sigma_frac!r}")


def rbf_kernel(X, *, sigma_frac: float = 0.8, name: str = "X") -> torch.Tensor:
    """RBF Gram matrix K_ij = exp(-||x_i - x_j||^2 / (2 sigma^2)), sigma = sigma_frac x median distance.

    The bandwidth follows the CKA authors' code (Kornblith et al. 2019): the median is
    taken over all n^2 entries of the distance matrix (its zero diagonal included), so
    sigma scales with the data and RBF CKA is invariant to isotropic scaling.
    """
    check_sigma_frac(sigma_frac)
    X = unit_scale(checked_features(X, name))[0]  # exact power-of-two scaling: sigma scales with it
    return rbf_gram(X, sigma_frac, name)


def rbf_gram(X: torch.Tensor, sigma_frac: float, name: str, out: torch.Tensor | None = None) -> torch.Tensor:
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
    K = torch.exp(-D / (2.0 * sigma_sq)) if tracked(D) else D.div_(-2.0 * sigma_sq).exp_()
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
