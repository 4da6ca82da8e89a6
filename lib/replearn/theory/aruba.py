"""ARUBA: meta-learning through average regret-upper-bound analysis (Khodak, Balcan and
Talwalkar, NeurIPS 2019): online convex tasks, online gradient descent, regret and its upper
bounds, meta-learned initialisations, per-coordinate ARUBA rates and AdaGrad.

Setting (online, one task after another). On round i = 1..m of task t the learner plays
theta_{t,i} in the ball Theta = {||theta|| <= D} and suffers the convex loss
l_{t,i}(theta) = L(<x_{t,i}, theta>, y_{t,i}). Within-task regret (blog, first display):

    R_t = sum_i l_{t,i}(theta_{t,i}) - min_{theta in Theta} sum_i l_{t,i}(theta).

Online gradient descent (OGD) from phi with rate eta (a scalar, or per coordinate):
theta_{t,1} = phi, theta_{t,i+1} = Proj(theta_{t,i} - eta * grad_{t,i}). Its regret against
any theta* in Theta obeys the regret upper bound (blog, "preconditioned OGD" display)

    U_t(phi, eta) = sum_j (phi_j - theta*_j)^2 / (2 eta_j) + sum_j eta_j sum_i grad_{t,i,j}^2.

Constant convention: the sharp OGD bound has eta/2 in front of the gradient term; like the
blog (and the learning rate formula below, which minimises B/eta + eta G) we keep the looser
constant 1, so U_t >= sharp bound >= R_t. With a gradient bound ||grad|| <= G the scalar form
is ``||phi - theta*||^2 / (2 eta) + eta G^2 m``; with |grad_j| <= G_j the per-coordinate form
is ``sum_j (phi_j - theta*_j)^2 / (2 eta_j) + sum_j eta_j G_j^2 m``.

Meta-learners over the task sequence (:func:`meta_learn`):

- initialisation: fixed, or learned by follow-the-leader on U_t, i.e. OGD on U_t with
  alpha_t = 1/t: ``phi_{t+1} = phi_t + (target_t - phi_t) / t`` = running mean of the targets,
  where the target is theta*_t (the hindsight optimum) or the last iterate theta_hat_t
  (Reptile);
- rate: a fixed scalar (e.g. D/(G sqrt m) for single-task OGD, V/(G sqrt m) when the task
  similarity V is known), ARUBA's per-coordinate rate
  ``eta_{t,j} = sqrt((B_{t,j} + eps_t) / (G_{t,j} + zeta_t))`` with
  B_{t,j} = 1/2 sum_{s<t} (phi_{s,j} - target_{s,j})^2 and G_{t,j} = sum_{s<t} sum_i grad_{s,i,j}^2,
  its scalar analogue, or within-task AdaGrad ``eta0 / sqrt(delta + sum_{i' <= i} grad_{i',j}^2)``.

The blog leaves the o(t) smoothing open; we use eps_t / zeta_t = eta0^2 (so the first task runs
with eta0, by default the single-task rate D/(G sqrt m)) and zeta_t = s G^2 (m / d) t^p per
coordinate (s G^2 m t^p for the scalar rate) with s = ``smoothing`` = 0.1 and p = ``power`` = 0.4,
so both vanish relative to B_t and G_t, which grow linearly in t.

Measurements and bounds used by book 3.1-3.4: :func:`late_mean` (late-half mean regret) and
the fixed-rate grid :func:`fixed_rate_sweep`; :func:`rademacher_regret` and
:func:`expected_abs_walk` (the Omega(D G sqrt m) lower bound); :func:`ftl_meta_regret` and
:func:`average_regret_bound` (the learned-initialisation theorem); :func:`convexity_gaps` (joint
convexity of U_t in (phi, eta)).

Shapes: a batch of independent runs (seeds) is the leading axis; tasks of one run are the
next. Rates carry the coordinate axis last: size 1 for a scalar rate, size d per coordinate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from replearn.backend import DTYPE, SeedLike, make_generator
from replearn.checks import (check_bool, check_choice, check_count, check_int, check_nonnegative, check_number,
                     check_positive, check_same_kind, check_tensor)

LOSSES = ("squared", "absolute", "logistic")
INITS = ("fixed", "learned")
TARGETS = ("optimum", "last_iterate")
LEARNED_RATES = ("aruba", "aruba_scalar", "adagrad")
_BLOW_UP = 1e8
_BISECTION_STEPS = 100
_NEWTON_STEPS = 100


# --------------------------------------------------------------------------------------------
# task family


@dataclass(frozen=True)
class TaskFamily:
    """A distribution of online convex tasks (one task = m rounds of one loss type).

    The task parameter theta_t = phi* + spread * z_t with z_t ~ N(0, I_d) (then projected onto
    the ball of radius D = ``radius``), so E||theta_t - phi*||^2 = V^2 = sum_j spread_j^2.
    ``spread`` is one number (isotropic) or d per-coordinate standard deviations
    (anisotropic; see :meth:`anisotropic`). phi* = center_norm * (1, ..., 1) / sqrt(d).
    Round i of a task: x uniform on the sphere of radius ``x_norm``; for ``squared`` (loss
    1/2 (x.theta - y)^2) and ``absolute`` (|x.theta - y|) the label is y = x.theta_t + e with
    e uniform on [-noise, noise]; for ``logistic`` (log(1 + exp(-y x.theta))) y = +-1 with
    P(y = 1) = sigmoid(x.theta_t).
    """

    d: int = 10
    m: int = 50
    radius: float = 10.0
    center_norm: float = 3.0
    spread: float | tuple[float, ...] = 0.3
    loss: str = "squared"
    noise: float = 0.1
    x_norm: float = 1.0

    def __post_init__(self):
        check_count(self.d, "d", 1)
        check_count(self.m, "m (rounds per task)", 1)
        check_choice(self.loss, "loss", LOSSES)
        for name in ("radius", "x_norm"):
            check_positive(getattr(self, name), name)
        check_nonnegative(self.noise, "noise")
        check_number(self.center_norm, "center_norm (phi* must lie inside the ball: 0 <= center_norm < radius)",
                     low=0.0, high=self.radius, high_open=True)
        try:
            spread = self.spreads
        except (TypeError, RuntimeError) as err:
            raise ValueError(f"spread must be one number or d = {self.d} numbers, got {self.spread!r}") from err
        if not bool(torch.isfinite(spread).all()) or bool((spread < 0).any()):
            raise ValueError(f"spread must be finite and >= 0, got {self.spread!r}")

    @classmethod
    def anisotropic(cls, d: int, varying: int, *, high: float = 1.0, low: float = 0.01, **kwargs):
        """A family whose optima vary with std ``high`` on the first ``varying`` coordinates and
        ``low`` on the others (few coordinates task-specific, the rest shared)."""
        check_count(d, "d", 1)
        check_int(varying, "varying", 0, d)
        return cls(d=d, spread=(high,) * varying + (low,) * (d - varying), **kwargs)

    @property
    def spreads(self) -> torch.Tensor:
        """Per-coordinate standard deviations of theta_t around phi*, shape (d,)."""
        s = torch.as_tensor(self.spread, dtype=DTYPE)
        if s.ndim == 0:
            return s.expand(self.d).clone()
        if s.shape != (self.d,):
            raise ValueError(f"spread must be one number or d = {self.d} numbers, got {len(s)}")
        return s

    @property
    def V(self) -> float:
        """Task similarity sqrt(E||theta_t - phi*||^2) = ||spread|| (before projection)."""
        return float(self.spreads.norm())

    @property
    def G(self) -> float:
        """A bound on ||grad l_{t,i}(theta)|| over the ball, for every task of the family:
        x_norm (2 x_norm D + noise) for squared, x_norm for absolute and logistic losses."""
        if self.loss == "squared":
            return self.x_norm * (2 * self.x_norm * self.radius + self.noise)
        return self.x_norm

    def phi_star(self, device=None) -> torch.Tensor:
        """The mean of the task optima, center_norm * 1 / sqrt(d), shape (d,)."""
        return torch.full((self.d,), self.center_norm / math.sqrt(self.d), dtype=DTYPE, device=device)

    def single_task_rate(self) -> float:
        """eta = D / (G sqrt m), the single-task OGD rate (U <= 3/2 D G sqrt m)."""
        return self.radius / (self.G * math.sqrt(self.m))

    def oracle_rate(self) -> float:
        """eta = V / (G sqrt m), the rate for a known task similarity V."""
        return self.V / (self.G * math.sqrt(self.m))


@dataclass(frozen=True)
class OnlineTasks:
    """Sampled tasks: ``runs`` independent sequences of T tasks of m rounds in dimension d.

    ``theta`` are the generating parameters; ``theta_star`` the comparators used for regret
    and U_t: for the squared loss the exact best fixed point in hindsight over the ball
    (:func:`least_squares_in_ball`), for absolute and logistic losses the generating parameter
    theta_t (a fixed point of Theta, so their regret is <= the regret against the hindsight
    optimum and R_t <= U_t still holds).
    """

    X: torch.Tensor           # (runs, T, m, d)
    y: torch.Tensor           # (runs, T, m)
    theta: torch.Tensor       # (runs, T, d)
    theta_star: torch.Tensor  # (runs, T, d)
    family: TaskFamily = field(repr=False)

    @property
    def runs(self) -> int:
        return self.X.shape[0]

    @property
    def T(self) -> int:
        return self.X.shape[1]


def sample_tasks(family: TaskFamily, T: int, *, runs: int = 1, seed: SeedLike = 0,
                 device=None) -> OnlineTasks:
    """Draw ``runs`` x T tasks of ``family`` (same seed -> identical tasks, on any device)."""
    if not isinstance(family, TaskFamily):
        raise ValueError(f"family must be a TaskFamily, got {type(family).__name__}")
    check_count(T, "T (tasks)", 1)
    check_count(runs, "runs", 1)
    gen = make_generator(seed)
    d, m, D = family.d, family.m, family.radius
    theta = family.phi_star() + family.spreads * torch.randn(runs, T, d, generator=gen, dtype=DTYPE)
    theta = _project_ball(theta, D)
    X = torch.randn(runs, T, m, d, generator=gen, dtype=DTYPE)
    X = family.x_norm * X / X.norm(dim=-1, keepdim=True)
    u = (X * theta.unsqueeze(-2)).sum(-1)
    if family.loss == "logistic":
        y = torch.where(torch.rand(runs, T, m, generator=gen, dtype=DTYPE) < torch.sigmoid(u), 1.0, -1.0)
    else:
        y = u + family.noise * (2 * torch.rand(runs, T, m, generator=gen, dtype=DTYPE) - 1)
    X, y, theta = X.to(device), y.to(device), theta.to(device)
    theta_star = least_squares_in_ball(X, y, D) if family.loss == "squared" else theta
    return OnlineTasks(X, y, theta, theta_star, family)


# --------------------------------------------------------------------------------------------
# losses, projections, comparators


def _check_loss(loss: str) -> None:
    check_choice(loss, "loss", LOSSES)


def _check_rounds(X, y) -> torch.Tensor:
    """X (..., m, d) and y (..., m), finite and on one device; returns y in X's dtype (labels of
    another float dtype are converted: the obvious intent)."""
    check_tensor(X, "X", min_ndim=2)
    check_tensor(y, "y")
    if y.shape != X.shape[:-1]:
        raise ValueError(f"need X (..., m, d) and y (..., m); got {tuple(X.shape)} and {tuple(y.shape)}")
    y = y.to(X.dtype)
    check_same_kind(("X", X), ("y", y))
    limit = torch.finfo(X.dtype).max ** 0.25
    for name, t in (("X", X), ("y", y)):
        top = float(t.abs().max()) if t.numel() else 0.0
        if top > limit:
            raise ValueError(f"{name} has entries up to {top:.3g}, beyond {limit:.3g} (the fourth root of the "
                             f"largest {X.dtype}): predictions x.theta and squared gradients would overflow; "
                             f"rescale {name} (the regret scales with it)")
    return y


def _value_and_slope(u: torch.Tensor, y: torch.Tensor, loss: str) -> tuple[torch.Tensor, torch.Tensor]:
    """L(u, y) and dL/du for prediction u = <x, theta>."""
    if loss == "squared":
        r = u - y
        return 0.5 * r * r, r
    if loss == "absolute":
        r = u - y
        return r.abs(), torch.sign(r)
    z = y * u
    return torch.nn.functional.softplus(-z), -y * torch.sigmoid(-z)


def round_losses(X: torch.Tensor, y: torch.Tensor, theta: torch.Tensor, loss: str) -> torch.Tensor:
    """l_{t,i}(theta) for every round, X (..., m, d), y (..., m), theta (..., d) -> (..., m)."""
    _check_loss(loss)
    y = _check_rounds(X, y)
    check_tensor(theta, "theta")
    if theta.shape[-1:] != X.shape[-1:]:
        raise ValueError(f"theta must end in d = {X.shape[-1]} coordinates, got shape {tuple(theta.shape)}")
    check_same_kind(("X", X), ("theta", theta))
    return _round_losses(X, y, theta, loss)


def project_ball(v: torch.Tensor, radius: float | None, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Projection onto {||theta|| <= radius} (identity when ``radius`` is None).

    Without ``weights`` (or with one weight per row) this is the Euclidean projection. With
    per-coordinate weights eta (..., d) it is the projection in the norm ||.||_{1/eta} that
    preconditioned OGD needs: theta_j = v_j / (1 + mu eta_j), with mu >= 0 the root of
    psi(mu) = 1/radius - 1/||theta(mu)|| (convex, decreasing and nearly linear; Moré and
    Sorensen's secular equation), found by Newton's method from mu = 0 (monotone, no overshoot).
    Norms are computed without overflow, so entries up to the largest float project correctly.
    """
    check_tensor(v, "v")
    if radius is not None:
        check_positive(radius, "radius")
    if weights is not None:
        check_tensor(weights, "weights")
        if weights.shape[-1] not in (1, v.shape[-1]) or not bool((weights > 0).all()):
            raise ValueError(f"weights must be positive with a last axis of 1 or d = {v.shape[-1]}, got shape "
                             f"{tuple(weights.shape)}")
        check_same_kind(("v", v), ("weights", weights))
    return _project_ball(v, radius, weights, safe=True)


def _norm(v: torch.Tensor) -> torch.Tensor:
    """||v|| over the last axis (kept), without overflow or underflow of the squares: where the
    plain norm is not finite (or zero for a nonzero v) it is recomputed from v / max |v_j|."""
    norm = v.norm(dim=-1, keepdim=True)
    bad = ~torch.isfinite(norm) | ((norm == 0) & (v != 0).any(dim=-1, keepdim=True))
    if bool(bad.any()):
        top = v.abs().amax(dim=-1, keepdim=True)
        top = torch.where(top > 0, top, torch.ones_like(top))
        norm = torch.where(bad, (v / top).norm(dim=-1, keepdim=True) * top, norm)
    return norm


def _project_ball(v: torch.Tensor, radius: float | None, weights: torch.Tensor | None = None, *,
                  safe: bool = False) -> torch.Tensor:
    """:func:`project_ball` without the argument checks. ``safe`` guards the norms against
    overflow (public calls); OGD's rounds, whose iterates stay in the ball, skip that cost."""
    if radius is None:
        return v
    norm = _norm(v) if safe else v.norm(dim=-1, keepdim=True)
    outside = norm > radius
    if weights is None or weights.shape[-1] == 1:
        return torch.where(outside, v * (radius / norm.clamp_min(radius)), v)
    if not bool(outside.any()):
        return v
    w = weights.expand_as(v)
    # Entries beyond ~1e100 (or below 1e-100) would overflow (underflow) the squares of the
    # slope; for those the same Newton step is written with the unit vector a = theta / ||theta||:
    # step = psi / slope = -(||theta|| / radius - 1) / sum_j a_j^2 w_j / (1 + mu w_j).
    top = float(v.abs().max()) if safe else 1.0
    extreme = top > 1e100 or 0 < top < 1e-100
    mu = torch.zeros_like(norm)
    for _ in range(_NEWTON_STEPS):
        scaled = v / (1 + mu * w)
        length = _norm(scaled) if extreme else scaled.norm(dim=-1, keepdim=True)
        if extreme:
            a = scaled / length
            step = -(length / radius - 1) / (a.pow(2) * w / (1 + mu * w)).sum(-1, keepdim=True)
        else:
            psi = 1 / radius - 1 / length
            step = psi / (-(scaled.pow(2) * w / (1 + mu * w)).sum(-1, keepdim=True) / length ** 3)
        step = torch.where(outside, step, torch.zeros_like(mu))
        mu = mu - step
        if not bool((step.abs() > 1e-13 * mu).any()):
            break
    return torch.where(outside, v / (1 + mu * w), v)


def least_squares_in_ball(X: torch.Tensor, y: torch.Tensor, radius: float | None) -> torch.Tensor:
    """argmin_{||theta|| <= radius} 1/2 ||X theta - y||^2, exactly, batched over leading axes.

    With H = X^T X = Q diag(lambda) Q^T and b = X^T y: if the minimum-norm unconstrained solution
    H^+ b lies in the ball it is returned (the minimiser is unique when rank X = d; otherwise
    this picks the minimum-norm one). Otherwise the KKT conditions give theta = (H + mu I)^{-1} b
    with ||theta|| = radius; since b lies in range(H), ||theta(mu)|| decreases from ||H^+ b|| to
    0 and mu in (0, ||b|| / radius] is found by bisection to machine precision.
    """
    y = _check_rounds(X, y)
    lam, Q = torch.linalg.eigh(X.mT @ X)
    c = (Q.mT @ (X.mT @ y.unsqueeze(-1))).squeeze(-1)
    tol = lam.amax(dim=-1, keepdim=True).clamp_min(1e-300) * X.shape[-1] * torch.finfo(X.dtype).eps
    coef = torch.where(lam > tol, c / lam.clamp_min(1e-300), torch.zeros_like(c))
    if radius is not None:
        inside = coef.norm(dim=-1, keepdim=True) <= radius
        if not bool(inside.all()):
            lam_pos = lam.clamp_min(0)
            lo = torch.zeros_like(inside, dtype=X.dtype)
            hi = c.norm(dim=-1, keepdim=True) / radius
            for _ in range(_BISECTION_STEPS):
                mid = 0.5 * (lo + hi)
                too_long = (c / (lam_pos + mid)).norm(dim=-1, keepdim=True) > radius
                lo, hi = torch.where(too_long, mid, lo), torch.where(too_long, hi, mid)
            coef = torch.where(inside, coef, c / (lam_pos + hi))
    return (Q @ coef.unsqueeze(-1)).squeeze(-1)


# --------------------------------------------------------------------------------------------
# within-task online gradient descent


@dataclass(frozen=True)
class OGDRun:
    """One OGD pass per task: ``losses`` l_{t,i}(theta_{t,i}) (..., m), ``grad_sq`` the summed
    squared gradients sum_i grad_{t,i,j}^2 (..., d), ``last`` theta_{t,m+1} (..., d) and, when
    asked for, ``iterates`` theta_{t,1..m+1} (..., m + 1, d)."""

    losses: torch.Tensor
    grad_sq: torch.Tensor
    last: torch.Tensor
    iterates: torch.Tensor | None = None


def _as_rate(eta, d: int, like: torch.Tensor, name: str = "eta") -> torch.Tensor:
    """A rate as a tensor whose last axis is 1 (scalar rate) or d (per coordinate)."""
    e = torch.as_tensor(eta, dtype=like.dtype, device=like.device)
    if e.ndim == 0:
        e = e.reshape(1)
    if e.shape[-1] not in (1, d):
        raise ValueError(f"{name} must be a number or a tensor whose last axis is 1 (scalar rate) or "
                         f"d = {d} (per coordinate), got shape {tuple(e.shape)}")
    if not bool(torch.isfinite(e).all()) or not bool((e > 0).all()):
        raise ValueError(f"{name} must be positive and finite")
    return e


def ogd(X: torch.Tensor, y: torch.Tensor, phi: torch.Tensor, eta, *, loss: str = "squared",
        radius: float | None = None, adagrad_delta: float | None = None,
        keep_iterates: bool = False) -> OGDRun:
    """Online (projected) gradient descent on every task of the batch at once.

    theta_1 = phi; round i: suffer l_i(theta_i), g_i = grad l_i(theta_i),
    theta_{i+1} = Proj(theta_i - eta * g_i). ``eta`` is a number or a tensor whose last axis is
    1 (scalar rate) or d (per-coordinate rate), broadcast against the leading axes of X. With
    ``adagrad_delta`` delta the step of round i is eta / sqrt(delta + sum_{i' <= i} g_{i'}^2)
    per coordinate (AdaGrad restarted on each task, base rate eta). Per-coordinate steps use
    the projection in the 1/eta-weighted norm (:func:`project_ball`), which keeps U_t valid.
    Raises ValueError on malformed inputs and when an unconstrained run blows up.
    """
    _check_loss(loss)
    y = _check_rounds(X, y)
    m, d = X.shape[-2:]
    batch = X.shape[:-2]
    check_tensor(phi, "phi")
    if phi.shape[-1] != d:
        raise ValueError(f"phi must end in d = {d} coordinates, got shape {tuple(phi.shape)}")
    check_same_kind(("X", X), ("phi", phi))
    if radius is not None:
        check_positive(radius, "radius (or None)")
        if bool((_norm(phi).squeeze(-1) > radius * (1 + 1e-9)).any()):
            raise ValueError(f"the initialisation phi lies outside the ball of radius {radius}; project it first")
    if adagrad_delta is not None:
        check_positive(adagrad_delta, "adagrad_delta")
    check_bool(keep_iterates, "keep_iterates")
    return _ogd(X, y, phi, _as_rate(eta, d, X), loss, radius, adagrad_delta, keep_iterates)


def _ogd(X, y, phi, eta: torch.Tensor, loss: str, radius, adagrad_delta, keep_iterates: bool = False) -> OGDRun:
    """:func:`ogd` on checked inputs (``eta`` already a rate tensor): the meta-learners call it once per task."""
    m, d = X.shape[-2:]
    batch = X.shape[:-2]
    theta = phi.expand(*batch, d).clone()
    acc = torch.zeros(*batch, d, dtype=X.dtype, device=X.device)
    losses = X.new_empty(*batch, m)
    iterates = [theta] if keep_iterates else None
    for i in range(m):
        x = X[..., i, :]
        value, slope = _value_and_slope((x * theta).sum(-1), y[..., i], loss)
        g = slope.unsqueeze(-1) * x
        losses[..., i] = value
        acc = acc + g * g
        step = eta / (adagrad_delta + acc).sqrt() if adagrad_delta is not None else eta
        theta = _project_ball(theta - step * g, radius, step)
        if keep_iterates:
            iterates.append(theta)
    limit = _BLOW_UP * (1.0 + float(phi.abs().max()))
    if not float(theta.abs().max().nan_to_num(math.inf)) <= limit:
        raise ValueError(f"OGD diverged (max |theta| = {float(theta.abs().max()):.3g}): the step size is "
                         "too large for this loss; use a smaller eta or a bounded domain (radius)")
    return OGDRun(losses, acc, theta, torch.stack(iterates, dim=-2) if keep_iterates else None)


def regret(X: torch.Tensor, y: torch.Tensor, losses: torch.Tensor, comparator: torch.Tensor,
           loss: str = "squared") -> torch.Tensor:
    """R_t = sum_i l_{t,i}(theta_{t,i}) - sum_i l_{t,i}(comparator), shape (...)."""
    check_tensor(losses, "losses")
    if losses.shape != X.shape[:-1]:
        raise ValueError(f"losses must have one entry per round, shape {tuple(X.shape[:-1])}, got "
                         f"{tuple(losses.shape)}")
    return _regret(X, y, losses, round_losses(X, y, comparator, loss))


def _regret(X, y, losses: torch.Tensor, comparator_losses: torch.Tensor) -> torch.Tensor:
    return losses.sum(-1) - comparator_losses.sum(-1)


def _round_losses(X, y, theta, loss: str) -> torch.Tensor:
    """:func:`round_losses` on checked inputs."""
    return _value_and_slope((X * theta.unsqueeze(-2)).sum(-1), y, loss)[0]


def regret_upper_bound(phi: torch.Tensor, theta_star: torch.Tensor, eta, *, grad_sq: torch.Tensor | None = None,
                       G=None, m: int | None = None) -> torch.Tensor:
    """U_t(phi, eta) = sum_j (phi_j - theta*_j)^2 / (2 eta_j) + gradient term, shape (...).

    Data-dependent (``grad_sq`` (..., d) = sum_i grad_{t,i,j}^2): gradient term
    sum_j eta_j grad_sq_j (blog, preconditioned OGD). Worst case (``G`` and ``m``): G's last axis
    is 1 for a norm bound ||grad|| <= G or d for |grad_j| <= G_j; the term is eta G^2 m (scalar
    rate), sum_j eta_j G_j^2 m (per coordinate), max_j eta_j G^2 m or eta m sum_j G_j^2 (mixed).
    eta: a number or tensor with last axis 1 (scalar) or d (per coordinate).
    """
    check_tensor(phi, "phi", min_ndim=1)
    check_tensor(theta_star, "theta_star", min_ndim=1)
    check_same_kind(("phi", phi), ("theta_star", theta_star))
    d = phi.shape[-1]
    if theta_star.shape[-1] != d:
        raise ValueError(f"phi and theta_star must have the same last axis, got {tuple(phi.shape)} "
                         f"and {tuple(theta_star.shape)}")
    eta = _as_rate(eta, d, phi)
    distance = ((phi - theta_star) ** 2 / (2 * eta)).sum(-1)
    if (grad_sq is None) == (G is None):
        raise ValueError("pass exactly one of grad_sq (data-dependent bound) or G with m (worst case)")
    if grad_sq is not None:
        check_tensor(grad_sq, "grad_sq")
        if grad_sq.shape[-1] != d:
            raise ValueError(f"grad_sq must end in d = {d} coordinates, got {tuple(grad_sq.shape)}")
        return distance + (eta * grad_sq).sum(-1)
    check_int(m, "m (the worst-case bound's number of rounds)", 1)
    G = _as_rate(G, d, phi, "G")
    if G.shape[-1] == eta.shape[-1]:
        return distance + m * (eta * G * G).sum(-1)
    if G.shape[-1] == 1:
        return distance + m * eta.amax(-1) * (G * G).squeeze(-1)
    return distance + m * eta.squeeze(-1) * (G * G).sum(-1)


# --------------------------------------------------------------------------------------------
# meta-learners


@dataclass(frozen=True)
class MetaRun:
    """A meta-learner over the task sequence: per task t (axis 1), ``regret`` R_t (runs, T),
    ``bound`` U_t(phi_t, eta_t) with the data-dependent gradient term (None for AdaGrad, whose
    rate changes within a task), ``init`` phi_t (runs, T, d), ``rate`` eta_t (runs, T, 1 or d;
    AdaGrad: its base rate eta0) and ``final_init`` phi_{T+1} (runs, d)."""

    regret: torch.Tensor
    bound: torch.Tensor | None
    init: torch.Tensor
    rate: torch.Tensor
    final_init: torch.Tensor

    def task_averaged(self) -> torch.Tensor:
        """R-bar over the first t tasks, for every t (runs, T)."""
        return task_averaged_regret(self.regret)


def task_averaged_regret(regret: torch.Tensor) -> torch.Tensor:
    """R-bar_t = (1/t) sum_{s <= t} R_s along the last axis (the blog's task-averaged regret)."""
    check_tensor(regret, "regret")
    if regret.ndim < 1 or regret.shape[-1] < 1:
        raise ValueError("regret must have a non-empty last (task) axis")
    t = torch.arange(1, regret.shape[-1] + 1, dtype=regret.dtype, device=regret.device)
    return regret.cumsum(-1) / t


def task_similarity(theta: torch.Tensor) -> torch.Tensor:
    """Empirical V = sqrt(min_phi (1/T) sum_t ||theta_t - phi||^2) over the task axis (-2)."""
    check_tensor(theta, "theta", min_ndim=2)
    if theta.shape[-2] == 0:
        raise ValueError("theta has no tasks (its task axis -2 is empty)")
    return (theta - theta.mean(-2, keepdim=True)).pow(2).sum(-1).mean(-1).sqrt()


def aruba_rate(B: torch.Tensor, G: torch.Tensor, eps, zeta) -> torch.Tensor:
    """ARUBA's learning rate eta = sqrt((B + eps) / (G + zeta)) (blog, last section)."""
    check_tensor(B, "B")
    check_tensor(G, "G")
    if bool((B < 0).any()) or bool((G < 0).any()):
        raise ValueError("B and G are sums of squares and must be >= 0")
    check_positive(eps, "eps") if not isinstance(eps, torch.Tensor) else check_tensor(eps, "eps")
    check_positive(zeta, "zeta") if not isinstance(zeta, torch.Tensor) else check_tensor(zeta, "zeta")
    return ((B + eps) / (G + zeta)).sqrt()


def meta_learn(tasks: OnlineTasks, *, init: str = "learned", target: str = "optimum",
               rate: float | str = "aruba", phi0: torch.Tensor | None = None, eta0: float | None = None,
               smoothing: float = 0.1, power: float = 0.4, adagrad_delta: float = 1e-8,
               radius: float | None | str = "family") -> MetaRun:
    """Run OGD on every task in sequence, meta-learning the initialisation and/or the rate.

    ``init``: "fixed" (phi_t = phi0, default 0) or "learned" (phi_{t+1} = phi_t + (target_t -
    phi_t) / t: follow-the-leader on U_t, the running mean of the targets). ``target``:
    "optimum" (theta*_t, the hindsight comparator) or "last_iterate" (theta_hat_t = theta_{t,m+1},
    Reptile); it also feeds ARUBA's B_t. ``rate``: a number (fixed scalar eta), "aruba"
    (per-coordinate eta_{t,j} = sqrt((B_{t,j} + eps_t)/(G_{t,j} + zeta_t))), "aruba_scalar" (the
    same with B_t, G_t summed over coordinates) or "adagrad" (within-task AdaGrad with base rate
    eta0 and delta). Smoothing (see the module docstring): zeta_t = smoothing G^2 (m/d) t^power
    per coordinate (G^2 m t^power scalar), eps_t = eta0^2 zeta_t; eta0 defaults to D/(G sqrt m)
    for ARUBA and must be given for AdaGrad. ``radius``: the domain (the family's D by default,
    None for unconstrained). Vectorised over runs; with a fixed rate and targets known in
    advance (fixed init, or learned from theta*) all tasks run at once.
    """
    if not isinstance(tasks, OnlineTasks):
        raise ValueError(f"tasks must be OnlineTasks (from aruba.sample_tasks), got {type(tasks).__name__}")
    fam = tasks.family
    check_choice(init, "init", INITS)
    check_choice(target, "target", TARGETS)
    if isinstance(rate, str):
        check_choice(rate, "rate (a positive number or a learned rate)", LEARNED_RATES)
    else:
        check_positive(rate, "a fixed rate")
    check_positive(smoothing, "smoothing")
    check_number(power, "power (o(t) smoothing)", low=0.0, high=1.0, high_open=True)
    if eta0 is not None:
        check_positive(eta0, "eta0")
    check_positive(adagrad_delta, "adagrad_delta")
    if radius is not None and radius != "family":
        check_positive(radius, "radius (a number, None or 'family')")
    D = fam.radius if radius == "family" else radius
    X, y, star = tasks.X, tasks.y, tasks.theta_star
    runs, T, m, d = X.shape
    if phi0 is not None:
        check_tensor(phi0, "phi0")
        if tuple(phi0.shape) not in ((d,), (runs, d)):
            raise ValueError(f"phi0 must have shape ({d},) or ({runs}, {d}), got {tuple(phi0.shape)}")
    phi = torch.zeros(runs, d, dtype=X.dtype, device=X.device) if phi0 is None else phi0.to(X).expand(runs, d)
    if isinstance(rate, str) and rate != "adagrad" and eta0 is None:
        eta0 = fam.single_task_rate()
    if rate == "adagrad" and eta0 is None:
        raise ValueError("rate='adagrad' needs its base rate eta0 (AdaGrad's theory suggests D_inf / sqrt(2), "
                         "which is far too large here; tune eta0 on a grid)")

    if not isinstance(rate, str) and (init == "fixed" or target == "optimum"):
        inits = phi.unsqueeze(1).expand(runs, T, d)
        if init == "learned":
            means = star.cumsum(1) / torch.arange(1, T + 1, dtype=X.dtype, device=X.device)[:, None]
            inits = torch.cat([phi.unsqueeze(1), means[:, :-1]], dim=1)
        run = _ogd(X, y, inits, _as_rate(rate, d, X), fam.loss, D, None)
        rates = torch.full((runs, T, 1), float(rate), dtype=X.dtype, device=X.device)
        final = means[:, -1] if init == "learned" else phi
        return MetaRun(_regret(X, y, run.losses, _round_losses(X, y, star, fam.loss)),
                       regret_upper_bound(inits, star, rates, grad_sq=run.grad_sq), inits, rates, final)

    width = d if rate == "aruba" else 1
    scale = smoothing * fam.G ** 2 * m / width
    B = torch.zeros(runs, width, dtype=X.dtype, device=X.device)
    Gacc = torch.zeros_like(B)
    regrets, bounds, inits, rates = [], [], [], []
    for t in range(T):
        if rate == "adagrad":
            eta = torch.full((runs, 1), eta0, dtype=X.dtype, device=X.device)
        elif isinstance(rate, str):
            zeta = scale * (t + 1) ** power
            eta = aruba_rate(B, Gacc, eta0 ** 2 * zeta, zeta)
        else:
            eta = torch.full((runs, 1), float(rate), dtype=X.dtype, device=X.device)
        run = _ogd(X[:, t], y[:, t], phi, _as_rate(eta, d, X), fam.loss, D,
                   adagrad_delta if rate == "adagrad" else None)
        regrets.append(_regret(X[:, t], y[:, t], run.losses, _round_losses(X[:, t], y[:, t], star[:, t], fam.loss)))
        if rate != "adagrad":
            bounds.append(regret_upper_bound(phi, star[:, t], eta, grad_sq=run.grad_sq))
        inits.append(phi)
        rates.append(eta)
        goal = star[:, t] if target == "optimum" else run.last
        if rate == "aruba":
            B = B + 0.5 * (phi - goal) ** 2
            Gacc = Gacc + run.grad_sq
        elif rate == "aruba_scalar":
            B = B + 0.5 * (phi - goal).pow(2).sum(-1, keepdim=True)
            Gacc = Gacc + run.grad_sq.sum(-1, keepdim=True)
        if init == "learned":
            phi = phi + (goal - phi) / (t + 1)
    return MetaRun(torch.stack(regrets, 1), torch.stack(bounds, 1) if bounds else None,
                   torch.stack(inits, 1), torch.stack(rates, 1), phi)


def single_task_ogd(tasks: OnlineTasks, *, phi0: torch.Tensor | None = None, eta: float | None = None) -> MetaRun:
    """The no-meta-learning baseline: OGD from a fixed phi0 (default 0) with
    eta = D / (G sqrt m) on every task (all tasks at once)."""
    return meta_learn(tasks, init="fixed", rate=tasks.family.single_task_rate() if eta is None else eta, phi0=phi0)


# --------------------------------------------------------------------------------------------
# measurements and bounds of book 3.1-3.3


def late_mean(regret: torch.Tensor) -> float:
    """Mean within-task regret over the second half of the tasks and over runs (the level a
    meta-learner settles at), from a (runs, T) tensor."""
    return float(regret[:, regret.shape[1] // 2:].mean())


def fixed_rate_sweep(tasks: OnlineTasks, rates, *, init: str = "learned") -> torch.Tensor:
    """:func:`late_mean` of :func:`meta_learn` with each fixed rate of ``rates`` (and ``init``),
    NaN where OGD diverged (a rate beyond the stability limit), shape (len(rates),)."""
    row = []
    for eta in rates:
        try:
            row.append(late_mean(meta_learn(tasks, init=init, rate=eta).regret))
        except ValueError:  # OGD diverged: this rate is beyond the stability limit
            row.append(math.nan)
    return torch.tensor(row, dtype=DTYPE)


def rademacher_regret(m: int, radius: float, runs: int, *, seed: SeedLike = 0) -> torch.Tensor:
    """Regret of OGD (eta = D/sqrt m, G = 1) on ``runs`` random sign sequences, shape (runs,).

    Round i has the linear loss eps_i * theta on Theta = [-D, D] with eps_i = +-1 fair coin
    flips, written as the absolute loss |theta - y_i| with y_i = -eps_i M and M > D (on Theta it
    equals eps_i theta + M, and the constant M cancels in the regret). The best point in
    hindsight is -D sign(sum_i eps_i), so the regret is sum_i eps_i theta_i + D |sum_i eps_i|.
    Its mean is D E|eps_1 + ... + eps_m| (:func:`expected_abs_walk`), the Omega(D G sqrt m)
    lower bound of book 3.1.
    """
    check_count(m, "m", 1)
    check_count(runs, "runs", 1)
    check_positive(radius, "radius")
    gen = make_generator(seed)
    eps = torch.where(torch.rand(runs, m, generator=gen, dtype=DTYPE) < 0.5, -1.0, 1.0).to(DTYPE)
    X = torch.ones(runs, m, 1, dtype=DTYPE)
    y = -eps * (2 * radius + 1)
    run = ogd(X, y, torch.zeros(runs, 1, dtype=DTYPE), radius / math.sqrt(m), loss="absolute", radius=radius)
    best = -radius * torch.sign(eps.sum(-1, keepdim=True))
    return regret(X, y, run.losses, best, "absolute")


def expected_abs_walk(m: int) -> float:
    """E|eps_1 + ... + eps_m| for fair signs, exactly (binomial sum)."""
    check_int(m, "m", 1)
    return sum(math.comb(m, k) * abs(2 * k - m) for k in range(m + 1)) / 2 ** m


def ftl_meta_regret(init: torch.Tensor, theta_star: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Meta-level regret of the initialisations on the distance terms and its bound (book 3.2).

    With f_t(phi) = ||phi - theta*_t||^2 (the first term of U_t times 2 eta), returns
    sum_t f_t(phi_t) - min_phi sum_t f_t(phi) and the follow-the-leader bound
    sum_t 2 ||phi_t - theta*_t||^2 / t, both of shape (runs,), from init (runs, T, d) and
    theta_star (runs, T, d).
    """
    if init.shape != theta_star.shape or init.ndim != 3:
        raise ValueError(f"init and theta_star must both be (runs, T, d), got {tuple(init.shape)} "
                         f"and {tuple(theta_star.shape)}")
    f = (init - theta_star).pow(2).sum(-1)
    best = (theta_star - theta_star.mean(1, keepdim=True)).pow(2).sum(-1).sum(-1)
    t = torch.arange(1, init.shape[1] + 1, dtype=init.dtype, device=init.device)
    return f.sum(-1) - best, (2 * f / t).sum(-1)


def average_regret_bound(D: float, G: float, m: int, T: int, V: float, eta: float) -> float:
    """The theorem of book 3.2 for OGD from the follow-the-leader initialisation with a fixed
    rate eta: R-bar_T <= 4 D^2 (1 + ln T)/(eta T) + V^2/(2 eta) + eta G^2 m / 2."""
    for value, name in ((D, "D"), (G, "G"), (eta, "eta")):
        check_positive(value, name)
    check_int(m, "m", 1)
    check_int(T, "T", 1)
    check_nonnegative(V, "V")
    return 4 * D ** 2 * (1 + math.log(T)) / (eta * T) + V ** 2 / (2 * eta) + eta * G ** 2 * m / 2


def convexity_gaps(pairs: int = 2000, d: int = 5, *, per_coordinate: bool = True,
                   seed: SeedLike = 0) -> torch.Tensor:
    """Midpoint gaps (U(a) + U(b))/2 - U((a + b)/2) of U_t(phi, eta) along random segments
    between points a = (phi, eta), b = (phi', eta') with eta, eta' > 0, for a fixed task
    (theta*, sum of squared gradients), relative to 1 + |U(a)| + |U(b)|; non-negative up to
    rounding iff U_t is midpoint convex on the sampled segments (book 3.3). Shape (pairs,)."""
    check_count(pairs, "pairs", 1)
    check_count(d, "d", 1)
    gen = make_generator(seed)
    width = d if per_coordinate else 1
    theta_star = torch.randn(pairs, d, generator=gen, dtype=DTYPE)
    grad_sq = torch.rand(pairs, d, generator=gen, dtype=DTYPE) * 5
    phi_a, phi_b = (torch.randn(pairs, d, generator=gen, dtype=DTYPE) * 3 for _ in range(2))
    eta_a, eta_b = (torch.exp(4 * torch.randn(pairs, width, generator=gen, dtype=DTYPE)) for _ in range(2))

    def U(phi, eta):
        return regret_upper_bound(phi, theta_star, eta, grad_sq=grad_sq)

    scale = 1 + U(phi_a, eta_a).abs() + U(phi_b, eta_b).abs()
    return ((U(phi_a, eta_a) + U(phi_b, eta_b)) / 2 - U((phi_a + phi_b) / 2, (eta_a + eta_b) / 2)) / scale
