"""HSIC and CKA: the biased and unbiased HSIC of Gram matrices (:func:`hsic`), CKA of two Gram
matrices (:func:`kernel_cka`) and of two feature matrices (:func:`linear_cka`, :func:`rbf_cka`),
and the minibatch CKA of Nguyen, Raghu & Kornblith (2021) over many layer pairs at once
(:class:`CKAAccumulator`, :func:`minibatch_cka`). Linear kernels are handled in feature space
when that is cheaper than forming the n x n Gram matrices."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from replearn.backend import check_finite
from replearn.neural.similarity.features import (centred, checked_features, checked_kernel, column_pair,
                                                 estimator_name, feature_pair, gram_pair, min_examples, tracked,
                                                 unit_scale)
from replearn.neural.similarity.kernels import check_sigma_frac, rbf_gram, rbf_kernel

__all__ = ["CKAAccumulator", "CKAResult", "hsic", "kernel_cka", "linear_cka", "minibatch_cka", "rbf_cka"]

# A kernel is degenerate when HSIC(K, K) <= _KERNEL_RTOL * ||K||_F^2 / (n - 1)^2.
_KERNEL_RTOL = 1e-10


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
    K, L = checked_kernel(K, "K"), checked_kernel(L, "L")
    if K.shape != L.shape:
        raise ValueError(f"K and L must be Gram matrices of the same n examples; got shapes "
                         f"{tuple(K.shape)} and {tuple(L.shape)}")
    n = K.shape[0]
    if n < min_examples(unbiased):
        raise ValueError(f"{estimator_name(unbiased)} needs at least n = {min_examples(unbiased)} examples; "
                         f"got n = {n}")
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
    M = _hsic_matrix(G, G, unbiased, overwrite=not tracked(G))
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
    K, L = checked_kernel(K, "K", symmetric=True), checked_kernel(L, "L", symmetric=True)
    if K.shape != L.shape:
        raise ValueError(f"K and L must be Gram matrices of the same n examples; got shapes "
                         f"{tuple(K.shape)} and {tuple(L.shape)}")
    if K.shape[0] < min_examples(unbiased):
        raise ValueError(f"{estimator_name(unbiased)} needs at least n = {min_examples(unbiased)} examples; "
                         f"got n = {K.shape[0]}")
    G = torch.stack([unit_scale(K)[0], unit_scale(L.to(K.device))[0]])
    return _cka_from_grams(G, unbiased, ("K", "L"))


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
    X, Y = column_pair(X, Y, min_n=min_examples(unbiased), why=estimator_name(unbiased))
    if not _feature_form_cheaper(X.X.shape[0], X.X.shape[1], Y.X.shape[1]):
        G = gram_pair(X, Y, lambda F, name, out: torch.matmul(F, F.T, out=out))
        if unbiased:
            return _cka_from_grams(G, True, ("X", "Y"))
        K, L = G
        return (K * L).sum() / (torch.linalg.norm(K) * torch.linalg.norm(L))
    Xc, Yc = centred(X), centred(Y)
    if unbiased:
        cross, self_x, self_y, scale_x, scale_y = _linear_hsic_terms([Xc], [Yc])
        for name, value, scale in (("X", self_x, scale_x), ("Y", self_y, scale_y)):
            if not bool(value[0] > _KERNEL_RTOL * scale[0]):
                raise ValueError(_degenerate_message(name, True))
        return cross[0, 0] / torch.sqrt(self_x[0] * self_y[0])
    numerator = torch.linalg.norm(Yc.T @ Xc).square()
    return numerator / (torch.linalg.norm(Xc.T @ Xc) * torch.linalg.norm(Yc.T @ Yc))


def rbf_cka(X, Y, *, sigma_frac: float = 0.8, unbiased: bool = False) -> torch.Tensor:
    """CKA with RBF kernels of bandwidth ``sigma_frac`` x median distance
    (:func:`~replearn.neural.similarity.rbf_kernel`).

    Kornblith et al. (2019) use sigma_frac = 0.8 in most of their experiments. Invariant to
    orthogonal transforms, translations and isotropic scaling of either representation.
    """
    X, Y = column_pair(X, Y, min_n=min_examples(unbiased), why=estimator_name(unbiased))
    check_sigma_frac(sigma_frac)
    finite = {"X": X.finite, "Y": Y.finite}

    def gram(F, name, out):
        if not finite[name]:
            check_finite(F, name)  # the centred features overflowed: NaN or inf, reported as by rbf_kernel
        return rbf_gram(F, sigma_frac, name, out)

    G = gram_pair(X, Y, gram)
    return _cka_from_grams(G, unbiased, ("X", "Y"))


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
    of both sets for the same examples (dicts from
    :func:`~replearn.neural.similarity.capture_activations` work), then :meth:`result`.
    ``kernel`` is ``"linear"`` or ``"rbf"`` (bandwidth from each batch's median distance).
    Every batch needs n >= 4 examples.
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
            F = checked_features(F, f"layer {name!r}")
            if n is None:
                n = F.shape[0]
            if F.shape[0] != n:
                raise ValueError(f"every layer of a batch must hold the same examples: layer {name!r} has "
                                 f"{F.shape[0]} rows, expected {n}")
            Fc = F - F.mean(dim=0, keepdim=True)
            if self.kernel == "linear":
                Fc, self._exponents[side, name] = unit_scale(Fc, self._exponents.get((side, name)))
                out.append(Fc)
            else:
                out.append(rbf_kernel(unit_scale(Fc)[0], sigma_frac=self.sigma_frac, name=f"layer {name!r}"))
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
    X, Y = feature_pair(X, Y, min_n=4, why="minibatch CKA (unbiased HSIC)")
    n = X.shape[0]
    starts = list(range(0, n, batch_size))
    if len(starts) > 1 and n - starts[-1] < 4:
        starts.pop()
    acc = CKAAccumulator(kernel=kernel, sigma_frac=sigma_frac)
    for i, start in enumerate(starts):
        stop = starts[i + 1] if i + 1 < len(starts) else n
        acc.update({"X": X[start:stop]}, {"Y": Y[start:stop]})
    return acc.result().values[0, 0]
