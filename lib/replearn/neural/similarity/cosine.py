"""Class cosine similarity of features (the FedAvg-FT paper's Fig. 4): the average cosine
similarity between the features of the images of two classes, for every pair of classes
(:func:`class_cosine_similarity`), and the gap between its diagonal and off-diagonal means
(:func:`intra_inter_gap`)."""

from __future__ import annotations

import torch

from replearn.backend import check_finite
from replearn.neural.similarity.features import checked_features

__all__ = ["class_cosine_similarity", "intra_inter_gap"]


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
    F = checked_features(features, "features")
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
