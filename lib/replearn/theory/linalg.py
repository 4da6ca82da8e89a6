"""Subspace geometry: orthonormal bases, the principal-angle distance, condition numbers.

The principal-angle distance between representations is (Collins et al. 2022, Def. 2)

    dist(B1, B2) = || B1_perp^T B2_hat ||_2,

where the columns of ``B1_perp`` are an orthonormal basis of col(B1)^perp and those of
``B2_hat`` an orthonormal basis of col(B2). It is the sine of the largest principal angle
between the two column spaces. Every function broadcasts over leading batch dimensions.
"""

from __future__ import annotations

import torch

from replearn.backend import DTYPE, SeedLike, make_generator, randn
from replearn.checks import check_int, check_number, check_same_kind, check_tensor


def _check_matrix(B: torch.Tensor, name: str) -> None:
    check_tensor(B, name, finite=False)
    if B.ndim < 2:
        raise ValueError(f"{name} must be a matrix (..., d, k); got shape {tuple(B.shape)}")
    d, k = B.shape[-2:]
    if k > d:
        raise ValueError(f"{name} has k = {k} columns > d = {d} rows; a representation needs k <= d")
    if not bool(torch.isfinite(B).all()):
        raise ValueError(f"{name} contains NaN or infinite values")


def orthonormal_basis(B: torch.Tensor, rtol: float = 1e-10) -> torch.Tensor:
    """Orthonormal basis of col(B), shape (..., d, k), from the thin SVD.

    Columns belonging to singular values below ``rtol * sigma_max`` (a rank-deficient
    ``B``) are returned as zero columns, so ``Q @ Q.mT`` is always the orthogonal projector
    onto col(B).
    """
    _check_matrix(B, "B")
    U, S, _ = torch.linalg.svd(B, full_matrices=False)
    keep = S > rtol * S[..., :1].clamp_min(torch.finfo(S.dtype).tiny)
    return U * keep.unsqueeze(-2).to(U.dtype)


def orthogonal_complement(B: torch.Tensor, rtol: float = 1e-10) -> torch.Tensor:
    """Orthonormal basis of col(B)^perp, shape (d, d - rank B); ``B`` must be a single matrix."""
    _check_matrix(B, "B")
    if B.ndim != 2:
        raise ValueError("orthogonal_complement takes a single (d, k) matrix")
    U, S, _ = torch.linalg.svd(B, full_matrices=True)
    rank = int((S > rtol * S[:1].clamp_min(torch.finfo(S.dtype).tiny)).sum())
    return U[:, rank:]


def _checked_bases(B1: torch.Tensor, B2: torch.Tensor, *, full_rank_B1: bool, rtol: float = 1e-10):
    """Orthonormal bases of col(B1) and col(B2) after checking both inputs: finite matrices in the
    same R^d, of one dtype and device. B2 (and B1 when ``full_rank_B1``) must have full column
    rank: a rank-deficient B2, e.g. a zero matrix, has fewer than k directions, and a distance
    that only measures the ones it has would silently be too small. A rank-deficient B1 is
    allowed where it only makes the distance larger (its missing directions count as missed)."""
    _check_matrix(B1, "B1")
    _check_matrix(B2, "B2")
    if B1.shape[-2] != B2.shape[-2]:
        raise ValueError(f"B1 and B2 live in different spaces: d = {B1.shape[-2]} vs {B2.shape[-2]}")
    check_same_kind(("B1", B1), ("B2", B2))
    Q1 = _full_rank_basis(B1, "B1", rtol) if full_rank_B1 else orthonormal_basis(B1, rtol)
    return Q1, _full_rank_basis(B2, "B2", rtol)


def _full_rank_basis(B: torch.Tensor, name: str, rtol: float) -> torch.Tensor:
    """The left singular vectors of B (= :func:`orthonormal_basis` for full rank), or ValueError."""
    U, S, _ = torch.linalg.svd(B, full_matrices=False)
    if not bool((S[..., -1] > rtol * S[..., 0]).all()):
        raise ValueError(f"{name} is rank-deficient (a singular value below {rtol:g} x the largest, e.g. a zero "
                         f"matrix or repeated columns): it needs full column rank k")
    return U


def principal_angle_distance(B1: torch.Tensor, B2: torch.Tensor) -> torch.Tensor:
    """dist(B1, B2) = ||(I - P_{B1}) Q_{B2}||_2, the sine of the largest principal angle.

    Invariant to B -> B Q for invertible Q (it depends on column spaces only); 0 for equal
    spans, 1 when some direction of col(B2) is orthogonal to col(B1). Broadcasts over
    leading dimensions, e.g. a whole trajectory (T, d, k) against one B* (d, k). B2 must have
    full column rank (``ValueError`` otherwise); a rank-deficient B1 gives the distance of its
    column space, whose missing directions count as missed.
    """
    Q1, Q2 = _checked_bases(B1, B2, full_rank_B1=False)
    residual = Q2 - Q1 @ (Q1.mT @ Q2)
    return torch.linalg.matrix_norm(residual, ord=2).clamp(0.0, 1.0)


def principal_sines(B1: torch.Tensor, B2: torch.Tensor) -> torch.Tensor:
    """Sines of all k principal angles between col(B1) and col(B2), descending, shape (..., k).

    They are the singular values of (I - P_{B1}) Q_{B2}; the first is
    :func:`principal_angle_distance`. Broadcasts like it, e.g. a trajectory (T + 1, d, k)
    against one B* (d, k); the same input conditions (B2 of full column rank).
    """
    Q1, Q2 = _checked_bases(B1, B2, full_rank_B1=False)
    return torch.linalg.svdvals(Q2 - Q1 @ (Q1.mT @ Q2))


def principal_angles(B1: torch.Tensor, B2: torch.Tensor) -> torch.Tensor:
    """Principal angles (radians, ascending) between col(B1) and col(B2), min(k1, k2) of them.

    Angles below pi/4 come from the sines (singular values of (I - P_{B1}) Q_{B2}) and the
    others from the cosines (singular values of Q_{B1}^T Q_{B2}), so that small angles are
    as accurate as large ones (Golub & Van Loan 2013, Sec. 6.4.3); arccos alone loses about
    half the digits of an angle near zero. Both must have full column rank; for unequal ranks
    k1 != k2 there are min(k1, k2) angles, those of the smaller span against the larger one
    (Bjorck & Golub 1973), as ``scipy.linalg.subspace_angles`` gives them. Symmetric in B1, B2.
    """
    Q1, Q2 = _checked_bases(B1, B2, full_rank_B1=True)
    if Q1.shape[-1] < Q2.shape[-1]:  # the sines below need the smaller span second
        Q1, Q2 = Q2, Q1
    cosines = torch.linalg.svdvals(Q1.mT @ Q2).clamp(-1.0, 1.0)              # descending
    sines = torch.linalg.svdvals(Q2 - Q1 @ (Q1.mT @ Q2)).clamp(0.0, 1.0).flip(-1)  # ascending
    return torch.where(cosines.square() >= 0.5, torch.arcsin(sines), torch.arccos(cosines))


def random_orthonormal(d: int, k: int, seed: SeedLike = 0, *, device=None,
                       dtype: torch.dtype = DTYPE) -> torch.Tensor:
    """A Haar-random (d, k) matrix with orthonormal columns (QR of a Gaussian, signs fixed)."""
    check_int(d, "d", 1)
    check_int(k, "k", 1)
    if k > d:
        raise ValueError(f"k = {k} > d = {d}: cannot have more orthonormal columns than dimensions")
    gen = make_generator(seed)
    G = randn(d, k, generator=gen, dtype=dtype)
    Q = _orthonormalise(G)
    return Q.to(device) if device is not None else Q


def condition_number(M: torch.Tensor) -> torch.Tensor:
    """sigma_max / sigma_min of ``M`` (inf for a singular matrix)."""
    check_tensor(M, "M", min_ndim=2)
    s = torch.linalg.svdvals(M)
    return s[..., 0] / s[..., -1]

def _check_tilt(B0: torch.Tensor, delta: float) -> tuple[int, int]:
    _check_matrix(B0, "B0")
    if B0.ndim != 2:
        raise ValueError(f"B0 must be a single (d, k) matrix, got shape {tuple(B0.shape)}")
    d, k = B0.shape
    if not d > k:
        raise ValueError(f"need d > k to tilt col(B0) out of itself; got d={d}, k={k}")
    if torch.linalg.matrix_rank(B0) < k:
        raise ValueError("B0 must have full column rank k")
    check_number(delta, "delta (a sine)", low=0.0, high=1.0)
    return d, k


def basis_at_distance(B0: torch.Tensor, delta: float, n_tilted: int | None = None,
                      seed: SeedLike = 0) -> torch.Tensor:
    """Orthonormal (d, k) basis at principal-angle distance ``delta`` from col(B0).

    Its first ``n_tilted`` columns (default: as many as fit, min(k, d - k)) leave col(B0)
    at angle arcsin(delta); the others lie in col(B0).

    Column j is ``sqrt(1 - delta^2) q_j + delta e_j`` (j < n_tilted) or ``q_j``, where q is a
    Haar-random orthonormal basis of col(B0) and e a Haar-random orthonormal set in
    col(B0)^perp. Both are drawn without choosing a basis of either subspace first: q and e
    orthonormalise (QR, signs fixed) the projections ``P G`` and ``(I - P) G'`` of Gaussian
    matrices, with P the orthogonal projector onto col(B0). The projector is unique, so the
    result depends only on col(B0) and the seed, not on which basis an SVD or a LAPACK build
    happens to return (a basis of a subspace, e.g. the singular vectors of an orthonormal
    B0, is not unique). dist(B0, result) = delta.
    """
    d, k = _check_tilt(B0, delta)
    n_tilted = min(k, d - k) if n_tilted is None else n_tilted
    check_int(n_tilted, "n_tilted (in [1, min(k, d - k)])", 1, min(k, d - k))
    gen = make_generator(seed)
    U = orthonormal_basis(B0)
    G = randn(d, k, generator=gen, dtype=B0.dtype).to(B0.device)
    G_perp = randn(d, n_tilted, generator=gen, dtype=B0.dtype).to(B0.device)
    Q = _orthonormalise(U @ (U.mT @ G))
    E = _orthonormalise(G_perp - U @ (U.mT @ G_perp))
    c = (1.0 - delta**2) ** 0.5
    tilted = c * Q[:, :n_tilted] + delta * E
    return torch.cat([tilted, Q[:, n_tilted:]], dim=1)


def _orthonormalise(A: torch.Tensor) -> torch.Tensor:
    """The Q factor of A = QR with diag(R) > 0: the unique orthonormal basis that Gram-Schmidt
    would give for a full-column-rank A (Householder QR, then the signs fixed)."""
    Q, R = torch.linalg.qr(A)
    return Q * torch.sign(torch.diagonal(R, dim1=-2, dim2=-1)).unsqueeze(-2)
