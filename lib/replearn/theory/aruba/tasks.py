"""The distribution of online convex tasks (:class:`TaskFamily`: optima spread around phi*,
inputs on a sphere, one loss type) and tasks drawn from it (:func:`sample_tasks`, giving
:class:`OnlineTasks` with each task's comparator)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from replearn.backend import DTYPE, SeedLike, make_generator
from replearn.checks import (check_choice, check_count, check_int, check_nonnegative, check_number,
                             check_positive)
from replearn.theory.aruba.online import LOSSES, least_squares_in_ball, project_ball_unchecked

__all__ = ["OnlineTasks", "TaskFamily", "sample_tasks"]


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
    (:func:`~replearn.theory.aruba.least_squares_in_ball`), for absolute and logistic losses
    the generating parameter theta_t (a fixed point of Theta, so their regret is <= the regret
    against the hindsight optimum and R_t <= U_t still holds).
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
    theta = project_ball_unchecked(theta, D)
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
