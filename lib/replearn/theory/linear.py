"""The multi-task linear representation model (Collins et al. 2022; Tripuraneni et al. 2021):
the ground truth B_*, heads of chosen mean and diversity, population and sampled tasks, losses and
gradients, head solves, least squares and fine-tuning.

Task ``i`` draws ``x ~ N(0, I_d)`` and ``y = <theta_*_i, x> + noise`` with
``theta_*_i = B_* w_*_i``, where ``B_*`` (d x k) has orthonormal columns shared by all tasks
and the head ``w_*_i`` (k) is task specific. A model is a pair (B, w) with prediction
``<B w, x>``. Heads are stored as the rows of an (n, k) matrix ``W``.

Every loss here is written through the regressor ``theta = B w``: a task supplies
``ell_i(theta)`` and its gradient ``g_i``, and the chain rule gives

    grad_B f_i(B, w) = g_i w^T,        grad_w f_i(B, w) = B^T g_i.

For the population loss ``f_i(B, w) = 1/2 ||B w - B_* w_*_i||^2`` (Collins et al. 2022,
eq. 6; the constant noise term dropped) ``g_i = B w - theta_*_i``; for ``m`` samples
``f_i(B, w) = 1/(2m) sum_j (<B w, x_ij> - y_ij)^2`` and ``g_i = X_i^T (X_i B w - y_i) / m``.
All functions are vectorised over tasks (leading dimension ``n`` or a selected subset).

The module also holds what several sections share about this model: an instance with a
starting point (:class:`Problem`), fresh samples at every draw (:class:`FreshSamples`), and
minimum-norm least squares on a Gaussian design with its closed-form expected error (book 1.1),
the error floor of head-only fine-tuning on a learned representation (book 1.4), and joint
fine-tuning of many problems at once with a stable step size (book 4.5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import torch

from replearn.backend import DTYPE, SeedLike, check_finite, make_generator, randn
from replearn.checks import (check_bool, check_count, check_int, check_nonnegative, check_number, check_positive,
                     check_same_kind, check_seed, check_tensor)
from replearn.theory.linalg import orthonormal_basis, random_orthonormal

Index = torch.Tensor | None


# --------------------------------------------------------------------------- ground truth

def ground_truth_representation(d: int, k: int, seed: SeedLike = 0, *, device=None) -> torch.Tensor:
    """A Haar-random B_* in O^{d x k} (orthonormal columns)."""
    return random_orthonormal(d, k, seed, device=device)


def make_heads(n: int, k: int, *, mean_norm: float = 0.0, cond: float = 1.0, scale: float = 1.0,
               exact: bool = True, seed: SeedLike = 0, device=None) -> torch.Tensor:
    """Ground-truth heads W (n, k) with a chosen mean and diversity.

    ``w_*_i = mean + R diag(s) z_i`` where ``mean`` has norm ``mean_norm`` in a random
    direction, R is a random rotation and the squared scales ``s_j^2`` are geometrically
    spaced from ``scale^2`` down to ``scale^2 / cond``. With ``exact=True`` the ``z_i`` are
    centred and whitened, so the centred head covariance
    ``(1/n) sum_i (w_*_i - wbar)(w_*_i - wbar)^T`` has eigenvalues exactly ``s_j^2``: its
    condition number is ``cond`` (the diversity of Collins et al. 2022, Assumption 2); with
    ``mean_norm = 0`` this is also the uncentred ``mu_*^2 I <= (1/n) W^T W <= L_*^2 I`` with
    ``L_*^2 / mu_*^2 = cond``. ``exact=False`` draws i.i.d. Gaussian ``z_i`` instead.
    """
    check_count(n, "n (tasks)", 1)
    check_count(k, "k", 1)
    check_number(cond, "cond (a condition number)", low=1.0)
    check_positive(scale, "scale")
    check_nonnegative(mean_norm, "mean_norm")
    check_bool(exact, "exact")
    if exact and n < k + 1:
        raise ValueError(f"exact diversity needs n >= k + 1 tasks (got n={n}, k={k}): with fewer, "
                         "the centred heads cannot span R^k; add tasks or pass exact=False")
    gen = make_generator(seed)
    Z = randn(n, k, generator=gen)
    if exact:
        Z = Z - Z.mean(0, keepdim=True)
        # whiten: (1/n) Z^T Z = I_k
        evals, evecs = torch.linalg.eigh(Z.T @ Z / n)
        Z = Z @ evecs @ torch.diag(evals.rsqrt()) @ evecs.T
    s2 = scale**2 * torch.logspace(0.0, -math.log10(cond), k, dtype=DTYPE)
    rotation = random_orthonormal(k, k, gen)
    direction = randn(k, generator=gen)
    mean = mean_norm * direction / direction.norm()
    W = mean + Z @ torch.diag(s2.sqrt()) @ rotation.T
    return W.to(device) if device is not None else W


def targets(Bstar: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """Ground-truth regressors theta_*_i = B_* w_*_i as rows of an (n, d) matrix.

    ``ValueError`` (naming the input) unless B_* is (d, k) and W (n, k) with n >= 1, both finite,
    of the same dtype and device."""
    check_tensor(Bstar, "Bstar", ndim=2)
    check_tensor(W, "W (heads)", ndim=2)
    if Bstar.shape[1] != W.shape[1]:
        raise ValueError(f"need B_* (d, k) and W (n, k) with the same k; got {tuple(Bstar.shape)} "
                         f"and {tuple(W.shape)}")
    if W.shape[0] == 0:
        raise ValueError("W (heads) has no rows: there must be at least one task (client)")
    check_same_kind(("Bstar", Bstar), ("W (heads)", W))
    return W @ Bstar.T


def head_second_moment(W: torch.Tensor, centred: bool = False) -> torch.Tensor:
    """(1/n) sum_i w_i w_i^T, or the covariance about the mean head when ``centred``."""
    check_tensor(W, "W (heads)", ndim=2)
    if W.shape[0] == 0:
        raise ValueError("W (heads) has no rows: there must be at least one task")
    V = W - W.mean(0, keepdim=True) if centred else W
    return V.T @ V / W.shape[0]


def head_diversity(W: torch.Tensor, centred: bool = False) -> tuple[float, float]:
    """(mu^2, L^2): the smallest and largest eigenvalues of :func:`head_second_moment`."""
    ev = torch.linalg.eigvalsh(head_second_moment(W, centred))
    return float(ev[0]), float(ev[-1])


def degenerate_heads(W: torch.Tensor, seed: SeedLike) -> torch.Tensor:
    """Heads without diversity: ``W`` with its component along a random unit vector u of R^k
    removed, so that they lie in the (k-1)-dimensional subspace u^perp and (1/n) W^T W is
    singular (mu_*^2 = 0: Assumption 2 of Collins et al. 2022 fails)."""
    check_tensor(W, "W (heads)", ndim=2)
    if W.shape[1] < 2:
        raise ValueError(f"need heads W of shape (n, k) with k >= 2 (with k = 1 no direction would be left), "
                         f"got {tuple(W.shape)}")
    u = randn(W.shape[1], generator=make_generator(seed), device=W.device)
    u = u / u.norm()
    return W - (W @ u)[:, None] * u[None, :]


# --------------------------------------------------------------------------- task oracles

@dataclass(frozen=True)
class PopulationTasks:
    """n tasks with population losses ell_i(theta) = 1/2 ||theta - theta_*_i||^2."""

    theta: torch.Tensor  # (n, d)

    def __post_init__(self):
        check_tensor(self.theta, "theta (the tasks' regressors)", ndim=2)
        if self.theta.shape[0] == 0 or self.theta.shape[1] == 0:
            raise ValueError(f"theta must hold at least one task of dimension >= 1, got shape "
                             f"{tuple(self.theta.shape)}")

    @property
    def n(self) -> int:
        return self.theta.shape[0]

    @cached_property
    def sqnorm(self) -> torch.Tensor:
        """||theta_*_i||^2 for every task, shape (n,)."""
        return self.theta.pow(2).sum(-1)

    @property
    def d(self) -> int:
        return self.theta.shape[1]

    def grad_theta(self, theta: torch.Tensor, index: Index = None) -> torch.Tensor:
        target = self.theta if index is None else self.theta[index]
        return theta - target

    def loss_theta(self, theta: torch.Tensor, index: Index = None) -> torch.Tensor:
        return 0.5 * self.grad_theta(theta, index).pow(2).sum(-1)


@dataclass(frozen=True)
class SampledTasks:
    """n tasks with n_i samples each: ell_i(theta) = 1/(2 n_i) ||X_i theta - y_i||^2.

    ``X`` is (n, m, d) and ``Y`` (n, m) with m = max_i n_i; when ``counts`` (n_i) is given,
    the rows of task i beyond n_i must be zero padding (they then add nothing to a loss).
    """

    X: torch.Tensor  # (n, m, d)
    Y: torch.Tensor  # (n, m)
    counts: torch.Tensor | None = None  # (n,) samples per task; None means m for every task

    def __post_init__(self):
        check_tensor(self.X, "X (inputs)", ndim=3)
        check_tensor(self.Y, "Y (labels)", ndim=2)
        n, m, d = self.X.shape
        if self.Y.shape != (n, m):
            raise ValueError(f"Y (labels) must have shape (n, m) = {(n, m)} to match X {tuple(self.X.shape)}, "
                             f"got {tuple(self.Y.shape)}")
        if n == 0 or m == 0 or d == 0:
            raise ValueError(f"X must hold at least one task with at least one sample of dimension >= 1, "
                             f"got shape {tuple(self.X.shape)}")
        check_same_kind(("X (inputs)", self.X), ("Y (labels)", self.Y))
        if self.counts is not None:
            c = self.counts
            if (not isinstance(c, torch.Tensor) or c.shape != (n,) or c.dtype.is_floating_point
                    or c.dtype == torch.bool):
                raise ValueError(f"counts must be a 1-D integer tensor of {n} sample counts, got {c!r}")
            if c.device != self.X.device:
                raise ValueError(f"counts is on device {c.device} but X (inputs) is on {self.X.device}")
            if bool((c < 1).any()) or bool((c > m).any()):
                raise ValueError(f"counts (samples per task) must lie in [1, m = {m}]: a task with 0 samples has "
                                 f"no loss; got values in [{int(c.min())}, {int(c.max())}]")

    @classmethod
    def _derived(cls, X: torch.Tensor, Y: torch.Tensor, counts: torch.Tensor | None = None) -> "SampledTasks":
        """Tasks built from already validated tasks (a subset or minibatch): no checks, since
        these are made at every local step."""
        tasks = object.__new__(cls)
        for name, value in (("X", X), ("Y", Y), ("counts", counts)):
            object.__setattr__(tasks, name, value)
        return tasks

    @property
    def n(self) -> int:
        return self.X.shape[0]

    @property
    def d(self) -> int:
        return self.X.shape[2]

    @property
    def m(self) -> int:
        return self.X.shape[1]

    def sizes(self, index: Index = None) -> torch.Tensor:
        """n_i of the selected tasks, as floats."""
        if self.counts is None:
            n = self.n if index is None else index.shape[0]
            return torch.full((n,), float(self.m), dtype=self.X.dtype, device=self.X.device)
        c = self.counts if index is None else self.counts[index]
        return c.to(self.X.dtype)

    def _select(self, index: Index):
        return (self.X, self.Y) if index is None else (self.X[index], self.Y[index])

    def residual(self, theta: torch.Tensor, index: Index = None) -> torch.Tensor:
        X, Y = self._select(index)
        theta = theta.expand(X.shape[0], -1).unsqueeze(-1)
        return torch.baddbmm(Y.unsqueeze(-1), X, theta, beta=-1).squeeze(-1)  # X_i theta_i - y_i

    def grad_theta(self, theta: torch.Tensor, index: Index = None) -> torch.Tensor:
        X, _ = self._select(index)
        g = torch.bmm(self.residual(theta, index).unsqueeze(1), X).squeeze(1)  # X_i^T r_i
        return g / self.sizes(index).unsqueeze(-1)

    def loss_theta(self, theta: torch.Tensor, index: Index = None) -> torch.Tensor:
        return 0.5 * self.residual(theta, index).pow(2).sum(-1) / self.sizes(index)

    def subset(self, index: Index) -> "SampledTasks":
        """The tasks in ``index`` (all when None) with their data and counts, as SampledTasks
        (not checked again: a subset of checked tasks; FedRep takes one every round)."""
        if index is None:
            return self
        counts = None if self.counts is None else self.counts[index]
        return SampledTasks._derived(self.X[index], self.Y[index], counts)

    def minibatch(self, index: Index, b: int, generator: torch.Generator) -> "SampledTasks":
        """``b`` samples of each selected task, drawn uniformly without replacement."""
        sizes = self.sizes(index)
        check_int(b, "the batch size b", 1, int(sizes.min()))
        X, Y = self._select(index)
        keys = torch.rand(X.shape[0], X.shape[1], generator=generator, dtype=X.dtype).to(X.device)
        keys = keys.masked_fill(torch.arange(X.shape[1], device=X.device) >= sizes.unsqueeze(-1), 2.0)
        rows = keys.argsort(dim=1)[:, :b]
        clients = torch.arange(X.shape[0], device=X.device).unsqueeze(-1)
        return SampledTasks._derived(X[clients, rows], Y[clients, rows])


Tasks = PopulationTasks | SampledTasks


def population_tasks(Bstar: torch.Tensor, W: torch.Tensor) -> PopulationTasks:
    """The population oracle of the tasks with heads W on representation B_*."""
    return PopulationTasks(targets(Bstar, W))


def sample_tasks(Bstar: torch.Tensor, W: torch.Tensor, m, *, noise_std: float = 0.0,
                 seed: SeedLike = 0) -> SampledTasks:
    """Fresh samples per task: x ~ N(0, I_d), y = <B_* w_*_i, x> + N(0, noise_std^2).

    ``m`` is the number of samples of every task, or a sequence of per-task counts n_i
    (then the data are zero-padded to max n_i and ``counts`` records the n_i).
    """
    theta = targets(Bstar, W)
    n, d = theta.shape
    counts = None
    if isinstance(m, (int, bool)):
        size = check_count(m, "m (samples per task)", 1)
    else:
        try:
            counts = torch.as_tensor(m)
        except (TypeError, ValueError, RuntimeError) as err:
            raise ValueError(f"m must be a positive integer or {n} positive integer counts, got {m!r}") from err
        if (counts.shape != (n,) or counts.dtype.is_floating_point or counts.dtype == torch.bool
                or bool((counts < 1).any())):
            raise ValueError(f"m must be a positive integer or {n} positive integer counts, got {m!r}")
        counts = counts.to(theta.device)
        size = int(counts.max())
    noise_std = check_nonnegative(noise_std, "noise_std")
    gen = make_generator(seed)
    X = randn(n, size, d, generator=gen, device=theta.device)
    noise = noise_std * randn(n, size, generator=gen, device=theta.device)
    Y = torch.einsum("smd,sd->sm", X, theta) + noise
    if counts is not None:
        pad = torch.arange(size, device=theta.device) >= counts.unsqueeze(-1)
        X = X.masked_fill(pad.unsqueeze(-1), 0.0)
        Y = Y.masked_fill(pad, 0.0)
    return SampledTasks._derived(X, Y, counts)


@dataclass(frozen=True)
class FreshSamples:
    """The ground truth as a sampler: every :meth:`draw` returns new data, ``m`` samples per task
    with ``x ~ N(0, I_d)``, ``y = <B_* w_*_i, x> + N(0, noise_std^2)``.

    These are the fresh batches of FedRep (Collins et al. 2021, Algorithm 2: new samples at
    every round) and the finite-sample setting of MAML and ANIL (Collins et al. 2022, Sec. 5:
    new inner and outer samples at every iteration, one sampler each)."""

    Bstar: torch.Tensor  # (d, k)
    W: torch.Tensor  # (n, k)
    m: int
    noise_std: float = 0.0

    def __post_init__(self):
        targets(self.Bstar, self.W)  # shapes, finite, same dtype and device, at least one task
        check_count(self.m, "m (fresh samples per task and draw)", 1)
        check_nonnegative(self.noise_std, "noise_std")

    @property
    def n(self) -> int:
        return self.W.shape[0]

    @property
    def d(self) -> int:
        return self.Bstar.shape[0]

    def draw(self, index: Index, generator: torch.Generator) -> SampledTasks:
        """New samples (``m`` per task) of the tasks in ``index`` (all when None), drawn from
        ``generator``: first the inputs X (s, m, d), then the noise (s, m)."""
        theta = (self.W if index is None else self.W[index]) @ self.Bstar.T  # targets(), checked at construction
        s, d = theta.shape
        X = randn(s, self.m, d, generator=generator, device=theta.device)
        noise = randn(s, self.m, generator=generator, device=theta.device)
        return SampledTasks._derived(X, torch.einsum("smd,sd->sm", X, theta) + self.noise_std * noise)


@dataclass(frozen=True)
class Problem:
    """One instance with a starting point: ground truth ``Bstar`` (d, k), heads ``W`` (n, k) and
    the start ``B0`` (d, k), ``w0`` (k,) of a training run; :attr:`tasks` are the population
    losses f_i(B, w) = 1/2 ||B w - B_* w_*_i||^2 (Collins et al. 2022, eq. 6)."""

    Bstar: torch.Tensor
    W: torch.Tensor
    B0: torch.Tensor
    w0: torch.Tensor

    def __post_init__(self):
        targets(self.Bstar, self.W)
        check_tensor(self.B0, "B0", shape=tuple(self.Bstar.shape))
        check_tensor(self.w0, "w0", shape=(self.Bstar.shape[1],))
        check_same_kind(("Bstar", self.Bstar), ("B0", self.B0), ("w0", self.w0))

    @property
    def tasks(self) -> PopulationTasks:
        return population_tasks(self.Bstar, self.W)

    @property
    def mean_regressor(self) -> torch.Tensor:
        """v = B_* wbar_*, the only part of the tasks that ARM's updates see (book 1.2)."""
        return self.Bstar @ self.W.mean(0)


def random_problem(d: int, k: int, n: int, *, step: float, mean_norm: float = 0.0, cond: float = 1.0,
                   exact: bool = False, seed: int = 0, device=None) -> Problem:
    """A Haar-random B_* (d, k) drawn from ``seed``, ``n`` heads of :func:`make_heads` (``mean_norm``,
    ``cond``, ``exact``; i.i.d. Gaussian draws by default) from ``seed + 1``, and the start
    B_0 = Q_0 / sqrt(step) with Q_0 Haar-random from ``seed + 2`` (so that step B_0^T B_0 = I_k,
    the normalisation of Collins et al. 2022) and w_0 = 0: the instance of book 1.2 and 4.1."""
    check_seed(seed)
    check_positive(step, "step")
    Bstar = ground_truth_representation(d, k, seed=seed, device=device)
    W = make_heads(n, k, mean_norm=mean_norm, cond=cond, exact=exact, seed=seed + 1, device=device)
    B0 = random_orthonormal(d, k, seed=seed + 2, device=device) / step**0.5
    return Problem(Bstar, W, B0, torch.zeros(k, dtype=DTYPE, device=device))


# --------------------------------------------------------------------------- losses and gradients

def _check_model(B: torch.Tensor, w: torch.Tensor, tasks: Tasks | None = None, *, finite: bool = True) -> None:
    """Shape, dtype and device checks of a model (B, w), and finiteness unless ``finite`` is False
    (:func:`grads`, the per-step primitive of the meta-learners, skips that pass)."""
    if not isinstance(B, torch.Tensor) or not isinstance(w, torch.Tensor):
        raise ValueError(f"B and w must be tensors, got {type(B).__name__} and {type(w).__name__}")
    if B.ndim < 2 or w.ndim < 1 or B.shape[-1] != w.shape[-1]:
        raise ValueError(f"need B (..., d, k) and w (..., k) with the same k, got shapes {tuple(B.shape)} "
                         f"and {tuple(w.shape)}")
    check_same_kind(("B", B), ("w", w))
    if finite:
        check_finite(B, "B")
        check_finite(w, "w")
    if tasks is not None:
        if not isinstance(tasks, (PopulationTasks, SampledTasks)):
            raise ValueError(f"tasks must be PopulationTasks or SampledTasks, got {type(tasks).__name__}")
        if B.shape[-2] != tasks.d:
            raise ValueError(f"B has d = {B.shape[-2]} rows but the tasks live in dimension {tasks.d}")
        check_same_kind(("B", B), ("the tasks' data", tasks.theta if isinstance(tasks, PopulationTasks) else tasks.X))


def predict(B: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """theta = B w, broadcasting over leading dimensions of B (..., d, k) and w (..., k)."""
    _check_model(B, w)
    return _predict(B, w)


def _predict(B: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (B @ w.unsqueeze(-1)).squeeze(-1)


def losses(B: torch.Tensor, w: torch.Tensor, tasks: Tasks, index: Index = None) -> torch.Tensor:
    """Per-task losses f_i(B, w) for the selected tasks (shared or per-task parameters)."""
    _check_model(B, w, tasks)
    return tasks.loss_theta(_predict(B, w), index)


def grads(B: torch.Tensor, w: torch.Tensor, tasks: Tasks, index: Index = None):
    """Per-task gradients (grad_B f_i, grad_w f_i), shapes (s, d, k) and (s, k). Shapes, dtypes
    and devices are checked but not finiteness: this runs at every step of the meta-learners,
    whose entry points check their inputs once."""
    _check_model(B, w, tasks, finite=False)
    g = tasks.grad_theta(_predict(B, w), index)
    w_b = w.expand(g.shape[0], -1) if w.ndim == 1 else w
    B_b = B.expand(g.shape[0], -1, -1) if B.ndim == 2 else B
    return g.unsqueeze(-1) * w_b.unsqueeze(-2), (B_b.mT @ g.unsqueeze(-1)).squeeze(-1)


def average_grads(B: torch.Tensor, w: torch.Tensor, tasks: Tasks):
    """Gradient of the average risk (1/n) sum_i f_i(B, w) at a shared (B, w)."""
    _check_model(B, w, tasks)
    gB, gw = grads(B, w, tasks)
    return gB.mean(0), gw.mean(0)


def excess_risk(B: torch.Tensor, w: torch.Tensor, theta_star: torch.Tensor) -> torch.Tensor:
    """||B w - theta_*||^2: the test MSE above the noise floor when x ~ N(0, I_d)."""
    _check_model(B, w)
    if not isinstance(theta_star, torch.Tensor) or theta_star.shape[-1:] != B.shape[-2:-1]:
        raise ValueError(f"theta_star must be a tensor (..., d) with d = {B.shape[-2]}, got "
                         f"{getattr(theta_star, 'shape', theta_star)!r}")
    check_same_kind(("B", B), ("theta_star", theta_star))
    check_finite(theta_star, "theta_star")
    return (_predict(B, w) - theta_star).pow(2).sum(-1)


# --------------------------------------------------------------------------- head solves and fine-tuning

def fit_linear(A: torch.Tensor, y: torch.Tensor, ridge: float = 0.0) -> torch.Tensor:
    """argmin_v 1/(2m) ||A v - y||^2 + ridge/2 ||v||^2, batched over leading dims.

    With ``ridge = 0`` this is the minimum-norm least-squares solution (pseudo-inverse), so
    it is defined for any number of samples m, including m below the dimension.
    """
    check_tensor(A, "the design A", min_ndim=2)
    check_tensor(y, "the targets y", min_ndim=1)
    if A.shape[:-1] != y.shape:
        raise ValueError(f"design {tuple(A.shape)} and targets {tuple(y.shape)} do not match")
    check_same_kind(("the design A", A), ("the targets y", y))
    ridge = check_nonnegative(ridge, "ridge")
    if ridge == 0:
        return (torch.linalg.pinv(A) @ y.unsqueeze(-1)).squeeze(-1)
    m, p = A.shape[-2:]
    gram = A.mT @ A / m + ridge * torch.eye(p, dtype=A.dtype, device=A.device)
    return torch.linalg.solve(gram, (A.mT @ y.unsqueeze(-1)).squeeze(-1) / m)


def least_squares_heads(B: torch.Tensor, tasks: Tasks, ridge: float = 0.0) -> torch.Tensor:
    """Best head of every task on a fixed representation B, rows of an (n, k) matrix.

    Population: w_i = B^+ theta_*_i. Samples: least squares of y_i on X_i B.
    """
    check_tensor(B, "B", ndim=2)
    _check_model(B, B[0], tasks)
    if isinstance(tasks, PopulationTasks):
        return (torch.linalg.pinv(B) @ tasks.theta.T).T
    return fit_linear(tasks.X @ B, tasks.Y, ridge)


def finetune_head(B: torch.Tensor, X: torch.Tensor, y: torch.Tensor, ridge: float = 0.0) -> torch.Tensor:
    """Exact head solve for a new task with samples (X, y) on the frozen representation B."""
    check_tensor(B, "B", min_ndim=2)
    check_tensor(X, "X", min_ndim=2)
    if X.shape[-1] != B.shape[-2]:
        raise ValueError(f"X has {X.shape[-1]} features but B has d = {B.shape[-2]} rows")
    check_same_kind(("B", B), ("X", X))
    return fit_linear(X @ B, y, ridge)


def finetune_gd(B: torch.Tensor, w: torch.Tensor, X: torch.Tensor, y: torch.Tensor, *, lr: float,
                steps: int, update_representation: bool = True):
    """``steps`` full-batch GD steps on 1/(2m) ||X B w - y||^2 from (B, w).

    Updates (B, w) jointly (as in FedAvg fine-tuning, Collins et al. 2022, Sec. 5) or only w
    when ``update_representation`` is False. Returns the fine-tuned (B, w).
    """
    steps = check_count(steps, "steps", 0)
    lr = check_positive(lr, "lr")
    check_bool(update_representation, "update_representation")
    check_tensor(B, "B", ndim=2)
    check_tensor(w, "w", shape=(B.shape[1],))
    check_tensor(X, "X", shape=(None, B.shape[0]))
    check_tensor(y, "y", shape=(X.shape[0],))
    check_same_kind(("B", B), ("w", w), ("X", X), ("y", y))
    task = SampledTasks(X.unsqueeze(0), y.unsqueeze(0))
    for step in range(steps):
        gB, gw = grads(B, w, task)
        if update_representation:
            B = B - lr * gB[0]
        w = w - lr * gw[0]
        if not bool(torch.isfinite(B).all() and torch.isfinite(w).all()):
            raise ValueError(f"fine-tuning diverged at step {step}: lr={lr} is too large for these "
                             "samples; try a smaller lr (below 1 / ||X B||^2 * m)")
    return B, w



def stable_finetune_step(B: torch.Tensor, w: torch.Tensor, X: torch.Tensor, fraction: float) -> torch.Tensor:
    """Fine-tuning step sizes ``fraction / lambda`` for :func:`finetune_joint`, batched over
    problems, where

        lambda = lambda_max(X (||w||^2 I_d + B B^T) X^T) / n

    is the largest eigenvalue of the Gauss-Newton matrix J^T J / n of 1/(2n) ||X B w - y||^2 at
    (B, w): the residual moves by J(dB, dw) = X (dB w + B dw), and J J^T = X (||w||^2 I + B B^T) X^T.
    GD on a quadratic with this curvature is stable for steps below 2 / lambda; ``fraction`` < 1
    leaves room for the growth of (B, w) during fine-tuning.
    B (s, d, k), w (s, k), X (s, n, d); returns (s,).
    """
    check_positive(fraction, "fraction")
    for name, t, ndim in (("B", B, 3), ("w", w, 2), ("X", X, 3)):
        check_tensor(t, name, ndim=ndim)
    if w.shape != (B.shape[0], B.shape[2]) or X.shape[0] != B.shape[0] or X.shape[2] != B.shape[1]:
        raise ValueError(f"need B (s, d, k), w (s, k) and X (s, n, d), got {tuple(B.shape)}, {tuple(w.shape)} "
                         f"and {tuple(X.shape)}")
    n = X.shape[-2]
    XB = X @ B
    gram = w.pow(2).sum(-1).reshape(-1, 1, 1) * (X @ X.mT) + XB @ XB.mT
    return fraction * n / torch.linalg.eigvalsh(gram)[..., -1]


def finetune_joint(B: torch.Tensor, w: torch.Tensor, X: torch.Tensor, y: torch.Tensor, *,
                   lr: torch.Tensor, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``steps`` full-batch GD steps on 1/(2n) ||X B w - y||^2 jointly in (B, w), for a batch of
    independent problems: B (s, d, k), w (s, k), X (s, n, d), y (s, n), step sizes lr (s,)
    (e.g. :func:`stable_finetune_step`).

    Problem j follows exactly :func:`finetune_gd` with ``lr = lr[j]`` and
    ``update_representation=True``. Raises ``ValueError`` if any problem diverges.
    """
    n = X.shape[-2]
    eta = lr.reshape(-1, 1, 1)
    w = w.unsqueeze(-1)
    for _ in range(steps):
        g = X.mT @ (X @ (B @ w) - y.unsqueeze(-1)) / n      # (s, d, 1): gradient in theta = B w
        B, w = B - eta * (g @ w.mT), w - eta * (B.mT @ g)
    if not bool(torch.isfinite(B).all() and torch.isfinite(w).all()):
        raise ValueError("fine-tuning diverged: the step sizes are too large; lower ft_lr")
    return B, w.squeeze(-1)

# --------------------------------------------------------------------------- least squares on a Gaussian design

def least_squares(A: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Minimum-norm least-squares solution of ``A v = y``, batched over leading dimensions.

    For a full-rank design ``A`` (..., m, p) this is ``pinv(A) y``, i.e. :func:`fit_linear` with
    ``ridge = 0``, computed from a QR factorisation instead of an SVD (several times faster):
    ``A = QR`` when m >= p (ordinary least squares) and ``A^T = QR`` with ``v = Q R^{-T} y`` when
    m < p (the interpolant of smallest norm). Rank-deficient designs are not supported (they
    have probability zero for Gaussian data); use :func:`fit_linear` for those.
    """
    check_tensor(A, "the design A", min_ndim=2)
    check_tensor(y, "the targets y", min_ndim=1)
    if A.shape[:-1] != y.shape:
        raise ValueError(f"design {tuple(A.shape)} and targets {tuple(y.shape)} do not match")
    check_same_kind(("the design A", A), ("the targets y", y))
    m, p = A.shape[-2:]
    if m >= p:
        Q, R = torch.linalg.qr(A)
        v = torch.linalg.solve_triangular(R, Q.mT @ y.unsqueeze(-1), upper=True)
    else:
        Q, R = torch.linalg.qr(A.mT)
        v = Q @ torch.linalg.solve_triangular(R.mT, y.unsqueeze(-1), upper=False)
    return v.squeeze(-1)


def expected_ls_error(m: int, p: int, noise_var: float, signal_sqnorm: float = 1.0) -> float:
    """E ||theta_hat - theta||^2 of minimum-norm least squares in R^p (book 1.1, Proposition
    ``arm-model-prop-ls``).

    ``m`` samples with rows ``x ~ N(0, I_p)``, ``y = <theta, x> + N(0, noise_var)``,
    ``||theta||^2 = signal_sqnorm``. Returns ``noise_var p / (m - p - 1)`` for
    ``m >= p + 2``, ``(1 - m/p) signal_sqnorm + noise_var m / (p - m - 1)`` for
    ``m <= p - 2``; for ``|m - p| <= 1`` the expectation is infinite when ``noise_var > 0``
    (``inf`` is returned) and ``(1 - m/p)_+ signal_sqnorm`` when ``noise_var = 0``.
    """
    check_int(m, "m (number of samples)", 1)
    check_int(p, "p (dimension)", 1)
    noise_var = check_nonnegative(noise_var, "noise_var")
    signal_sqnorm = check_nonnegative(signal_sqnorm, "signal_sqnorm")
    bias = max(0.0, 1.0 - m / p) * signal_sqnorm
    if noise_var == 0:
        return bias
    if m >= p + 2:
        return noise_var * p / (m - p - 1)
    if m <= p - 2:
        return bias + noise_var * m / (p - m - 1)
    return math.inf


def samples_to_reach(eps: float, p: int, noise_var: float, signal_sqnorm: float = 1.0) -> int:
    """Smallest m whose expected error :func:`expected_ls_error` is at most ``eps``.

    Above the threshold the error ``noise_var p / (m - p - 1)`` is at most ``eps`` from
    ``m = p + 1 + noise_var p / eps`` on, so the search is over a finite range.
    """
    if not eps > 0:
        raise ValueError(f"eps must be positive, got {eps}")
    check_int(p, "p (dimension)", 1)
    upper = p if noise_var == 0 else max(p + 2, math.ceil(p + 1 + noise_var * p / eps))
    return next(m for m in range(1, upper + 1)
                if expected_ls_error(m, p, noise_var, signal_sqnorm) <= eps)


def head_error_floor(B: torch.Tensor, Bstar: torch.Tensor) -> torch.Tensor:
    """F = ||(I - P_B) B_*||_F^2, P_B the projector onto col(B): the mean over w_* ~ N(0, I_k) of
    the part of theta_* = B_* w_* outside col(B), i.e. the error floor of head-only fine-tuning
    on B (book 1.4, Proposition ``arm-ft-prop-floor``). Equals the sum of the squared sines of
    the principal angles, so dist^2 <= F <= k dist^2. A 0-d tensor."""
    check_tensor(B, "B", ndim=2)
    check_tensor(Bstar, "Bstar", shape=(B.shape[0], None))
    check_same_kind(("B", B), ("Bstar", Bstar))
    Q = orthonormal_basis(B)
    return (Bstar - Q @ (Q.mT @ Bstar)).pow(2).sum()


def expected_head_error(m: int, k: int, noise_var: float, floor_value: float) -> float:
    """Mean error ||B w_hat - theta_*||^2 of head-only fine-tuning (least squares of y on the k
    features B^T x) over w_* ~ N(0, I_k) and the m samples (book 1.4, Proposition
    ``arm-ft-prop-floor``): ``F + E_ls(m, k, noise_var + F, k - F)`` with F = ``floor_value``
    (:func:`head_error_floor`) and E_ls = :func:`expected_ls_error`."""
    floor_value = check_nonnegative(floor_value, "floor_value (F = ||(I - P_B) B_*||_F^2)")
    return floor_value + expected_ls_error(m, k, noise_var + floor_value, max(k - floor_value, 0.0))
