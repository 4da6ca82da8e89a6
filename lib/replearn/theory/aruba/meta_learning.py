"""The meta-learners over the task sequence (:func:`meta_learn`, :class:`MetaRun`): OGD on every
task from a fixed or a follow-the-leader initialisation, with a fixed rate, ARUBA's
per-coordinate or scalar rate (:func:`aruba_rate`) or within-task AdaGrad; the
no-meta-learning baseline (:func:`single_task_ogd`); and the task-averaged regret and task
similarity they are judged by."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from replearn.checks import check_choice, check_number, check_positive, check_tensor
from replearn.theory.aruba.online import (as_rate, ogd_unchecked, regret_from_losses, regret_upper_bound,
                                          round_losses_unchecked)
from replearn.theory.aruba.tasks import OnlineTasks

__all__ = ["INITS", "LEARNED_RATES", "TARGETS", "MetaRun", "aruba_rate", "meta_learn", "single_task_ogd",
           "task_averaged_regret", "task_similarity"]

INITS = ("fixed", "learned")
TARGETS = ("optimum", "last_iterate")
LEARNED_RATES = ("aruba", "aruba_scalar", "adagrad")


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
    eta0 and delta). Smoothing (see :mod:`replearn.theory.aruba`): zeta_t = smoothing G^2 (m/d) t^power
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
        run = ogd_unchecked(X, y, inits, as_rate(rate, d, X), fam.loss, D, None)
        rates = torch.full((runs, T, 1), float(rate), dtype=X.dtype, device=X.device)
        final = means[:, -1] if init == "learned" else phi
        return MetaRun(regret_from_losses(X, y, run.losses, round_losses_unchecked(X, y, star, fam.loss)),
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
        run = ogd_unchecked(X[:, t], y[:, t], phi, as_rate(eta, d, X), fam.loss, D,
                   adagrad_delta if rate == "adagrad" else None)
        regrets.append(regret_from_losses(X[:, t], y[:, t], run.losses,
                                          round_losses_unchecked(X[:, t], y[:, t], star[:, t], fam.loss)))
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
