"""FedRep for the multi-task linear representation model (Collins, Hassani, Mokhtari, Shakkottai
2021): Algorithm 2 with its method-of-moments start, GD-GD and K-step heads, the baselines
(local-only, FedAvg, one model) and new-client heads.

Client ``i`` has samples ``x ~ N(0, I_d)``, ``y = <B_* w_*_i, x> + noise`` and, for a shared
representation B (d x k) and its own head w_i (k), the batch loss (eq. 7)

    f_i(w_i, B) = 1/(2m) sum_j (y_ij - w_i^T B^T x_ij)^2.

FedRep for linear regression (Algorithm 2) starts from the method-of-moments estimate
B_0 (the top-k eigenvectors of (1/n) sum_i Z_i, Z_i = (1/m) sum_j y_ij^2 x_ij x_ij^T) and
repeats: the server samples ``rn`` clients; each selected client draws a fresh batch of m
samples, solves its head ``w_i = argmin_w f_i(w, B_t)`` and takes one gradient step
``B_i = B_t - eta grad_B f_i(w_i, B_t)``; the server averages ``B_{t+1} = mean_i B_i``.
GD-GD and 10GD-GD (Sec. 5.1) replace the exact head solve by K = 1 or 10 gradient steps
on w from the client's previous head (Algorithm 1 with tau = K). Theorem 1 measures the
progress by the principal-angle distance dist(B_t, B_*) (Definition 1).

Baselines on the same data: local-only ridge regression, the single shared model that
minimises the pooled objective (4) (the fixed point of FedAvg/D-GD on a single linear model),
and a new client that fits only a k-dimensional head on a learned representation (Fig. 4).
Everything is vectorised over clients (batched solves and einsums, no per-client loop).

The module also holds what the book's linear FedRep sections (5.1-5.6) share: the paper's
synthetic instance (:func:`paper_instance`, :data:`PAPER_NOISE_STD`), FedRep trained on fixed
data (:func:`train_fedrep`) and distance curves of several head rules from one start
(:func:`dist_curves`), the bases of their settings (:class:`InstanceSettings`,
:class:`FigureSettings`), closed forms (:func:`expected_moment_matrix`,
:func:`single_model_error_formula`, :func:`theorem_factor`, :func:`counting_bound`) and
measurements of a distance curve (:func:`fit_rate`, :func:`rounds_to_reach`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import torch

from replearn.backend import SeedLike, check_finite, default_device, derive_seed, make_generator, randn
from replearn.checks import (check_count, check_fraction, check_int, check_nonnegative, check_positive, check_same_kind,
                     check_tensor)
from replearn.theory.linalg import principal_angle_distance
from replearn.theory.linear import (FreshSamples, SampledTasks, fit_linear, ground_truth_representation, predict, sample_tasks,
                     targets)
from replearn.settings import Ge, Gt, Settings
from replearn.theory.rates import log_linear_fit

_BLOW_UP = 1e8
_CHECK_EVERY = 16  # rounds between divergence checks (each check synchronises a GPU)
_RANK_RTOL = 1e-10  # B0 is rank-deficient when sigma_min(B0) <= 1e-10 sigma_max(B0)


# --------------------------------------------------------------------------- data

def paper_heads(n: int, k: int, seed: SeedLike = 0, *, device=None) -> torch.Tensor:
    """Heads of Sec. 5.1: Gaussian rows normalised to ||w_*_i|| = sqrt(k) (Assumption 3), (n, k)."""
    check_count(n, "n (clients)", 1)
    check_count(k, "k", 1)
    W = randn(n, k, generator=make_generator(seed))
    W = W * (k**0.5 / W.norm(dim=1, keepdim=True))
    return W.to(device) if device is not None else W


#: Reading N(., 10^-3) in Sec. 5.1 as a variance: the noise standard deviation sqrt(1e-3) ~ 0.032.
PAPER_NOISE_STD = 1e-3**0.5


def paper_instance(d: int, k: int, n: int, seed: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """B_* (d, k) and paper heads W (n, k) of one repetition of the Sec. 5.1 experiments
    (seeds ``derive_seed(seed, 1)`` and ``derive_seed(seed, 2)``)."""
    Bstar = ground_truth_representation(d, k, seed=derive_seed(seed, 1), device=device)
    W = paper_heads(n, k, seed=derive_seed(seed, 2), device=device)
    return Bstar, W


Data = SampledTasks | FreshSamples


def _batch(data: Data, index: torch.Tensor | None, generator: torch.Generator) -> SampledTasks:
    return data.draw(index, generator) if isinstance(data, FreshSamples) else data.subset(index)


# --------------------------------------------------------------------------- initialisation

def moment_matrix(data: SampledTasks) -> torch.Tensor:
    """(1/n) sum_i Z_i with Z_i = (1/n_i) sum_j y_ij^2 x_ij x_ij^T (Algorithm 2, initialisation).

    One einsum over all samples; the n separate d x d matrices are never formed. For
    Gaussian x its expectation is (1/n) sum_i (||theta_*_i||^2 + noise^2) I + 2 theta_*_i theta_*_i^T,
    whose top-k eigenvectors span col(B_*) when the heads span R^k.
    """
    if not isinstance(data, SampledTasks):
        raise ValueError("the method of moments needs samples: pass a SampledTasks (e.g. from sample_tasks)")
    weights = data.Y.square() / data.sizes().unsqueeze(-1)
    return torch.einsum("nm,nmd,nme->de", weights, data.X, data.X) / data.n


def method_of_moments_init(data: SampledTasks, k: int) -> torch.Tensor:
    """B_0: orthonormal (d, k) top-k eigenvectors of :func:`moment_matrix` (rank-k SVD of a PSD matrix)."""
    check_int(k, "k", 1)
    if not isinstance(data, SampledTasks):
        raise ValueError("the method of moments needs samples: pass a SampledTasks (e.g. from sample_tasks)")
    if k > data.d:
        raise ValueError(f"k = {k} > d = {data.d}: the representation cannot have more columns than dimensions")
    check_finite(data.X, "X")
    check_finite(data.Y, "Y")
    _, evecs = torch.linalg.eigh(moment_matrix(data))
    return evecs[:, -k:].flip(-1).contiguous()


def expected_moment_matrix(Bstar: torch.Tensor, W: torch.Tensor, noise_std: float = 0.0) -> torch.Tensor:
    """(1/n) sum_i E[y_i^2 x x^T] = (1/n) sum_i (||theta_*_i||^2 + noise^2) I + 2 theta_*_i theta_*_i^T
    for x ~ N(0, I_d): the expectation of :func:`moment_matrix` (book 5.2, the method-of-moments lemma)."""
    check_nonnegative(noise_std, "noise_std")
    theta = targets(Bstar, W)
    n, d = theta.shape
    scale = float(theta.square().sum(-1).mean()) + noise_std**2
    return scale * torch.eye(d, dtype=theta.dtype, device=theta.device) + 2.0 * theta.T @ theta / n


# --------------------------------------------------------------------------- FedRep

@dataclass(frozen=True)
class FedRepResult:
    """``B[t]`` (T + 1, d, k) for t = 0..T and every client's latest head ``heads`` (n, k);
    ``selected[i]`` says whether client i took part in at least one round (else its head is
    still the initial one)."""

    B: torch.Tensor
    heads: torch.Tensor
    selected: torch.Tensor

    @property
    def rounds(self) -> int:
        return self.B.shape[0] - 1

    def dist(self, Bstar: torch.Tensor) -> torch.Tensor:
        """dist(B_t, B_*) for every t (Definition 1), shape (T + 1,)."""
        return principal_angle_distance(self.B, Bstar)

    def global_error(self, Bstar: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
        """Eq. (3) at the final representation and heads: (1/2n) sum_i ||B_T w_i - B_* w_*_i||^2."""
        return global_error(predict(self.B[-1], self.heads), targets(Bstar, W))


def _check_fedrep_inputs(B0, data, eta, rounds, r, head_steps, head_lr, heads0):
    if not isinstance(data, (SampledTasks, FreshSamples)):
        raise ValueError("data must be a SampledTasks (fixed data per client) or FreshSamples (fresh batches)")
    if isinstance(data, SampledTasks):
        check_finite(data.X, "X")
        check_finite(data.Y, "Y")
    if not isinstance(B0, torch.Tensor) or B0.ndim != 2:
        raise ValueError(f"B0 must be a (d, k) matrix, got shape {tuple(getattr(B0, 'shape', ()))}")
    d, k = B0.shape
    if k > d:
        raise ValueError(f"B0 has k = {k} > d = {d} columns; the representation needs k <= d")
    if d != data.d:
        raise ValueError(f"B0 has d = {d} rows but the clients' data live in dimension {data.d}")
    check_tensor(B0, "B0")
    check_same_kind(("B0", B0), ("the clients' data", data.W if isinstance(data, FreshSamples) else data.X))
    sv = torch.linalg.svdvals(B0.detach().to("cpu", torch.float64))
    if k and not bool(sv[-1] > _RANK_RTOL * sv[0]):
        rank = int((sv > _RANK_RTOL * sv[0]).sum()) if bool(sv[0] > 0) else 0
        raise ValueError(f"B0 has rank {rank} < k = {k} (smallest singular value {float(sv[-1]):.3g}): "
                         f"the heads fitted on a rank-deficient B put no weight on its missing directions, which "
                         f"then get no gradient (B0 = 0 stays 0); start from a full-rank B0 (e.g. "
                         f"method_of_moments_init or linalg.random_orthonormal)")
    check_positive(eta, "the representation step size eta")
    check_count(rounds, "the number of rounds", 0)
    check_fraction(r, "the participation rate r")
    if head_steps is None:
        if head_lr is not None:
            raise ValueError("head_lr is only used with head_steps = K (GD on the head); "
                             "with head_steps=None the head is solved exactly")
    else:
        check_count(head_steps, "head_steps (None for the exact head, or K)", 1)
        check_positive(head_lr, "head_lr (needed with head_steps = K)")
    if heads0 is not None:
        if heads0.shape != (data.n, k):
            raise ValueError(f"heads0 must have shape ({data.n}, {k}) (one head per client), "
                             f"got {tuple(heads0.shape)}")
        check_tensor(heads0, "heads0")
        check_same_kind(("B0", B0), ("heads0", heads0))


def clients_per_round(n: int, r: float) -> int:
    """|I^t| = rn rounded to the nearest integer, at least one client."""
    check_count(n, "n (clients)", 1)
    check_fraction(r, "the participation rate r")
    return max(1, min(n, round(r * n)))


def _check_client_model(B: torch.Tensor, tasks, w: torch.Tensor | None = None) -> None:
    """B (d, k) finite for the clients' data (SampledTasks), and heads w (s, k) when given."""
    if not isinstance(tasks, SampledTasks):
        raise ValueError(f"tasks must be the clients' data as a SampledTasks, got {type(tasks).__name__}")
    check_tensor(B, "B", ndim=2)
    if B.shape[0] != tasks.d:
        raise ValueError(f"B has d = {B.shape[0]} rows but the clients' data live in dimension {tasks.d}")
    check_same_kind(("B", B), ("the clients' data", tasks.X))
    if w is not None:
        check_tensor(w, "w (heads)", shape=(tasks.n, B.shape[1]))
        check_same_kind(("B", B), ("w (heads)", w))


def head_solve(B: torch.Tensor, tasks: SampledTasks) -> torch.Tensor:
    """Exact heads w_i = argmin_w f_i(w, B) (min-norm least squares of y_i on X_i B), (s, k)."""
    _check_client_model(B, tasks)
    return _head_solve(B, tasks)


def _head_solve(B: torch.Tensor, tasks: SampledTasks) -> torch.Tensor:
    """:func:`head_solve` without the checks (every FedRep round): ``fit_linear`` with ridge 0."""
    return (torch.linalg.pinv(tasks.X @ B) @ tasks.Y.unsqueeze(-1)).squeeze(-1)


def head_gd(B: torch.Tensor, tasks: SampledTasks, w: torch.Tensor, *, lr: float, steps: int) -> torch.Tensor:
    """``steps`` GD steps w <- w - lr (X_i B)^T (X_i B w - y_i) / n_i from the heads ``w`` (s, k)."""
    check_positive(lr, "lr")
    check_count(steps, "steps", 0)
    _check_client_model(B, tasks, w)
    return _head_gd(B, tasks, w, lr, steps)


def _head_gd(B: torch.Tensor, tasks: SampledTasks, w: torch.Tensor, lr: float, steps: int) -> torch.Tensor:
    """:func:`head_gd` without the checks (every FedRep round)."""
    A = tasks.X @ B
    scale = lr / tasks.sizes()
    for _ in range(steps):
        residual = (A @ w.unsqueeze(-1)).squeeze(-1) - tasks.Y
        w = w - scale.unsqueeze(-1) * (A.mT @ residual.unsqueeze(-1)).squeeze(-1)
    return w


def representation_gradients(B: torch.Tensor, w: torch.Tensor, tasks: SampledTasks) -> torch.Tensor:
    """grad_B f_i(w_i, B) = X_i^T (X_i B w_i - y_i) w_i^T / n_i for every client, (s, d, k)."""
    _check_client_model(B, tasks, w)
    return _representation_gradients(B, w, tasks)


def _representation_gradients(B: torch.Tensor, w: torch.Tensor, tasks: SampledTasks) -> torch.Tensor:
    return tasks.grad_theta((B @ w.unsqueeze(-1)).squeeze(-1)).unsqueeze(-1) * w.unsqueeze(-2)


def orthonormalize_qr(B: torch.Tensor) -> torch.Tensor:
    """Q factor of B = Q R with diag(R) > 0, via Cholesky QR (R^T R = B^T B; much faster than
    ``torch.linalg.qr`` on the CPU for a thin d x k matrix, equal to it to rounding)."""
    L, info = torch.linalg.cholesky_ex(B.mT @ B)
    if int(info) != 0:
        raise ValueError("B lost rank during FedRep (its columns became dependent), so it cannot be "
                         "orthonormalised; use a smaller eta or a better initialisation")
    return torch.linalg.solve_triangular(L, B.mT, upper=False).mT


def _check_blow_up(Bs: list, heads: torch.Tensor, limit: float, eta: float, head_lr) -> None:
    size = torch.maximum(Bs[-1].abs().max(), heads.abs().max()).nan_to_num(float("inf"))
    if float(size) <= limit:
        return
    hint = f"eta = {eta}" + ("" if head_lr is None else f" or head_lr = {head_lr}")
    raise ValueError(f"FedRep diverged within the last {_CHECK_EVERY} rounds (up to round {len(Bs) - 1}, "
                     f"max entry {float(size):.3g}): the step size {hint} is too large; Theorem 1 "
                     "asks for eta <= 1 / (4 sigma_max^2(W_*/sqrt(rn))), about 1/4 for isotropic heads of norm sqrt(k)")


def fedrep(B0: torch.Tensor, data: Data, *, eta: float, rounds: int, r: float = 1.0,
           head_steps: int | None = None, head_lr: float | None = None,
           heads0: torch.Tensor | None = None, orthonormalize: bool = False,
           seed: SeedLike = 0) -> FedRepResult:
    """FedRep for linear regression (Algorithm 2), or GD-GD / KGD-GD with ``head_steps = K``.

    Round t: the server picks ``clients_per_round(n, r)`` clients uniformly without
    replacement; each draws its batch (``data`` a :class:`replearn.theory.linear.FreshSamples`: m fresh samples;
    a :class:`SampledTasks`: its fixed data), updates its head (``head_steps=None``: the
    exact minimiser of eq. 7; ``K``: K GD steps of size ``head_lr`` from its previous head,
    Algorithm 1), takes one step ``B_i = B_t - eta grad_B f_i(w_i, B_t)``, and the server
    averages ``B_{t+1} = mean_i B_i``. ``orthonormalize=True`` additionally replaces
    B_{t+1} by the Q factor of its QR decomposition (the orthonormal B-hat in which Theorem 1
    is stated; Algorithm 2 as printed has no QR step). Heads start at ``heads0`` (zeros
    by default; only GD heads use them). Raises ``ValueError`` on malformed inputs and when
    the iterates blow up (non-finite or 1e8 times their initial size). With exact heads and
    no QR a too-large eta does not blow up: B grows, the heads shrink like 1/||B|| and the
    effective step eta/||B||^2 falls, so the run stalls at a large distance instead; check
    ``dist`` rather than relying on an error.
    """
    _check_fedrep_inputs(B0, data, eta, rounds, r, head_steps, head_lr, heads0)
    n, k = data.n, B0.shape[1]
    s = clients_per_round(n, r)
    gen = make_generator(seed)
    heads = B0.new_zeros(n, k) if heads0 is None else heads0.clone()
    selected = torch.zeros(n, dtype=torch.bool, device=B0.device)
    limit = _BLOW_UP * (1.0 + float(B0.abs().max()) + float(heads.abs().max()))
    B, Bs = B0, [B0]
    for t in range(rounds):
        index = None if s == n else torch.randperm(n, generator=gen)[:s].sort().values.to(B0.device)
        batch = _batch(data, index, gen)
        if head_steps is None:
            w = _head_solve(B, batch)
        else:
            w = _head_gd(B, batch, heads if index is None else heads[index], head_lr, head_steps)
        B = B - eta * _representation_gradients(B, w, batch).mean(0)
        if orthonormalize:
            B = orthonormalize_qr(B)
        if index is None:
            heads, selected = w, torch.ones_like(selected)
        else:
            heads, selected = heads.index_copy(0, index, w), selected.index_fill(0, index, True)
        Bs.append(B)
        if (t + 1) % _CHECK_EVERY == 0 or t + 1 == rounds:
            _check_blow_up(Bs, heads, limit, eta, head_lr)
    return FedRepResult(torch.stack(Bs), heads, selected)


# --------------------------------------------------------------------------- baselines and errors

def _check_tasks(data) -> None:
    if not isinstance(data, SampledTasks):
        raise ValueError("pass the clients' data as a SampledTasks (X (n, m, d), Y (n, m))")
    check_finite(data.X, "X")
    check_finite(data.Y, "Y")


def local_only(data: SampledTasks, ridge: float = 0.0) -> torch.Tensor:
    """Each client's own d-dimensional ridge regression, argmin 1/(2 n_i)||X_i theta - y_i||^2 + ridge/2 ||theta||^2.

    Batched over clients; ``ridge = 0`` gives the min-norm least-squares fit (interpolation
    when n_i < d). Returns the regressors as rows of an (n, d) matrix.
    """
    _check_tasks(data)
    if data.counts is not None and ridge > 0:
        raise ValueError("ridge > 0 with unequal sample counts is not supported: fit_linear scales by the "
                         "padded m; pass equal counts or ridge = 0")
    return fit_linear(data.X, data.Y, ridge)


def single_model_least_squares(data: SampledTasks) -> torch.Tensor:
    """The single shared regressor minimising the empirical objective (4),

        theta = argmin (1/2n) sum_i 1/(n_i) ||X_i theta - y_i||^2,

    i.e. the limit of FedAvg / distributed GD on one global linear model (min-norm
    solution of the normal equations). It is one vector: col(theta) has rank 1, so it
    cannot recover col(B_*) for k > 1 (Sec. 2.1). Returns theta, shape (d,).
    """
    _check_tasks(data)
    inv = 1.0 / data.sizes()
    gram = torch.einsum("n,nmd,nme->de", inv, data.X, data.X) / data.n
    rhs = torch.einsum("n,nmd,nm->d", inv, data.X, data.Y) / data.n
    return (torch.linalg.pinv(gram, hermitian=True) @ rhs.unsqueeze(-1)).squeeze(-1)


def global_error(theta: torch.Tensor, theta_star: torch.Tensor) -> torch.Tensor:
    """(1/2n) sum_i ||theta_i - theta_*_i||^2: eq. (3) for personalised models theta_i = B w_i,
    eq. (4)'s global error for one shared theta (d,) broadcast to every client. With
    x ~ N(0, I_d) twice this is the clients' average test MSE above the noise floor."""
    check_tensor(theta, "theta")
    check_tensor(theta_star, "theta_star")
    check_same_kind(("theta", theta), ("theta_star", theta_star))
    if theta_star.ndim != 2 or theta.shape[-1] != theta_star.shape[-1] or theta.ndim not in (1, 2) \
            or (theta.ndim == 2 and theta.shape != theta_star.shape):
        raise ValueError(f"theta must be (n, d) or (d,) matching theta_star (n, d); got {tuple(theta.shape)} "
                         f"and {tuple(theta_star.shape)}")
    return 0.5 * (theta - theta_star).square().sum(-1).mean()


def new_client_head(B: torch.Tensor, X: torch.Tensor, y: torch.Tensor, ridge: float = 0.0) -> torch.Tensor:
    """Heads of new clients on a frozen representation (Sec. 5.1, Fig. 4): least squares of y on X B.

    ``X`` (c, m_new, d) and ``y`` (c, m_new) for c new clients; returns heads (c, k).
    """
    if B.ndim != 2 or B.shape[1] > B.shape[0]:
        raise ValueError(f"B must be a (d, k) representation with k <= d, got shape {tuple(B.shape)}")
    if X.ndim != 3 or y.shape != X.shape[:2] or X.shape[2] != B.shape[0]:
        raise ValueError(f"need X (c, m, d) with d = {B.shape[0]} and y (c, m); got {tuple(X.shape)} "
                         f"and {tuple(y.shape)}")
    check_tensor(B, "B")
    check_tensor(X, "X")
    check_tensor(y, "y")
    check_same_kind(("B", B), ("X", X), ("y", y))
    return fit_linear(X @ B, y, ridge)


def new_client_error(B: torch.Tensor, heads: torch.Tensor, theta_star: torch.Tensor) -> torch.Tensor:
    """||B w_c - theta_*_c||^2 per new client: its test MSE minus the noise variance (x ~ N(0, I_d))."""
    check_tensor(B, "B", ndim=2)
    check_tensor(heads, "heads", shape=(None, B.shape[1]))
    check_tensor(theta_star, "theta_star")
    check_same_kind(("B", B), ("heads", heads), ("theta_star", theta_star))
    if theta_star.shape != (heads.shape[0], B.shape[0]):
        raise ValueError(f"theta_star must be ({heads.shape[0]}, {B.shape[0]}), got {tuple(theta_star.shape)}")
    return (predict(B, heads) - theta_star).square().sum(-1)


def single_model_error_formula(theta_star: torch.Tensor) -> torch.Tensor:
    """(1/2n) sum_i ||theta_*_i - theta_bar_*||^2: the smallest global error of one shared model,
    attained at the mean regressor theta_bar_* (book 5.1)."""
    return global_error(theta_star.mean(0), theta_star)


# --------------------------------------------------------------------------- the experiments of Sec. 5.1

def train_fedrep(Bstar: torch.Tensor, W: torch.Tensor, m: int, *, noise_std: float, eta: float,
                 rounds: int, r: float = 1.0, seed: int = 0):
    """FedRep on fixed data (m samples per client, the setting of Figs. 1 and 4).

    Draws the clients' data, starts from the method-of-moments estimate on the same data,
    runs Algorithm 2 (one gradient step on B per round, exact heads) and refits every
    client's head on the final B. Returns ``(data, result, heads)``.
    """
    data = sample_tasks(Bstar, W, m, noise_std=noise_std, seed=derive_seed(seed, 3))
    B0 = method_of_moments_init(data, Bstar.shape[1])
    res = fedrep(B0, data, eta=eta, rounds=rounds, r=r, seed=derive_seed(seed, 4))
    heads = head_solve(res.B[-1], data)
    return data, res, heads


def dist_curves(n: int, m: int, r: float, variants: dict, *, d: int, k: int, rounds: int, eta: float,
                head_lr: float, noise_std: float, seed: int, device=None) -> dict:
    """dist(B_t, B_*) (rounds + 1,) on one instance (:func:`paper_instance`) with fresh samples for
    each head rule in ``variants`` ({name: None for the exact head, K for K GD steps of size
    ``head_lr``}). All variants share B_*, the heads, the method-of-moments start and the
    sampling seed."""
    device = default_device() if device is None else torch.device(device)
    Bstar, W = paper_instance(d, k, n, seed, device)
    B0 = method_of_moments_init(sample_tasks(Bstar, W, m, noise_std=noise_std, seed=derive_seed(seed, 3)), k)
    data = FreshSamples(Bstar, W, m, noise_std)
    out = {}
    for name, K in variants.items():
        res = fedrep(B0, data, eta=eta, rounds=rounds, r=r, head_steps=K,
                     head_lr=None if K is None else head_lr, seed=derive_seed(seed, 4))
        out[name] = res.dist(Bstar).cpu()
    return out


@dataclass(frozen=True)
class InstanceSettings(Settings):
    """Base of the settings of the linear FedRep experiments (book 5.1-5.6): dimension d and
    representation size k of B_* (1 <= k < d), and the experiment's seed."""

    d: int = 20
    k: Annotated[int, Ge(1)] = 2
    seed: int = 0

    def validate(self) -> None:
        super().validate()
        check_int(self.d, "d (needs k < d)", self.k + 1)


@dataclass(frozen=True)
class FigureSettings(InstanceSettings):
    """Base of the settings of the paper's Figs. 1, 3 and 4 (book 5.4-5.6): in addition the label
    noise ``noise_std`` (:data:`PAPER_NOISE_STD`), FedRep's representation step ``eta`` and
    ``rounds``, and the number of independent repetitions ``seeds`` (new B_*, heads and data each)."""

    noise_std: Annotated[float, Ge(0)] = PAPER_NOISE_STD
    eta: Annotated[float, Gt(0)] = 0.5
    rounds: Annotated[int, Ge(1)] = 200
    seeds: Annotated[int, Ge(1, why="independent repetitions")] = 3


# --------------------------------------------------------------------------- theory and measurements

def theorem_factor(eta: float, E0: float, sigma_min2: float) -> float:
    """Per-round factor of Theorem 1: dist_T <= factor^T dist_0 with factor = (1 - eta E_0 sigma_min^2/2)^(1/2)."""
    x = eta * E0 * sigma_min2 / 2
    if not 0 <= x <= 1:
        raise ValueError(f"eta E_0 sigma_min^2 / 2 = {x} must lie in [0, 1]")
    return math.sqrt(1 - x)


def fit_rate(dist: torch.Tensor, window: tuple = (1e-12, 0.1)) -> tuple[float, float]:
    """Per-round factor exp(slope) of the least-squares line through log dist_t over the rounds
    with window[0] < dist_t < window[1] (:func:`replearn.theory.rates.log_linear_fit`, at least 3
    rounds), the quantity Theorem 1 bounds (:func:`theorem_factor`), and the fit's R^2."""
    fit = log_linear_fit(torch.arange(len(dist)), dist, low=window[0], high=window[1], min_points=3)
    return math.exp(fit.slope), fit.r2


def counting_bound(d: int, k: int, n: int) -> float:
    """k + k(d - k)/n: the per-client sample size m at which the nm equations equal the
    dk - k^2 + nk unknowns of (col(B), W)."""
    return k + k * (d - k) / n


def rounds_to_reach(curve: torch.Tensor, level: float) -> int | None:
    """First round t with curve[t] <= level (None if never)."""
    hit = (curve <= level).nonzero()
    return int(hit[0]) if len(hit) else None
