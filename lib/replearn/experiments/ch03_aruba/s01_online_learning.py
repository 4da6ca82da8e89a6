"""Book 3.1: single-task online learning, OGD's regret grows like D G sqrt m (Khodak, Balcan and
Talwalkar 2019, blog "Adaptive gradient-based meta-learning", first bound).

:func:`single_task` runs online gradient descent (OGD, :func:`replearn.theory.aruba.ogd`) from phi = 0
with the single-task rate eta = D/(G sqrt m) on tasks with m rounds, for a grid of m. It records
the regret R_t, the sharp OGD bound ||phi - u||^2/(2 eta) + (eta/2) sum_i ||g_i||^2 (the blog's
first bound, with the constant 1/2 of the textbook proof), the library's U_t (gradient term
doubled, as in the blog; :func:`replearn.theory.aruba.regret_upper_bound`) and the worst-case level
D G sqrt m. :func:`sign_regrets` runs OGD on the random sign sequences of the Omega(D G sqrt m)
lower bound (:func:`replearn.theory.aruba.rademacher_regret`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated

import torch

from replearn.theory import aruba
from replearn.backend import DTYPE
from replearn.settings import Each, Ge, Profile, Settings


@dataclass(frozen=True)
class SingleTaskSettings(Settings):
    """The task ``family`` (:class:`replearn.theory.aruba.TaskFamily`: dimension, ball radius D,
    per-coordinate spread and label noise; its ``m`` is replaced by each value of ``ms`` and its
    loss by the ``loss`` given to :func:`single_task`), the grid ``ms`` of task lengths,
    ``tasks`` x ``runs`` independent tasks per m, the number ``sign_runs`` of random sign
    sequences for the lower bound, and the seed."""

    WORDS = {"family": "task family", "family.d": "dimension d",
             "family.m": "rounds per task m (replaced by each of the task lengths)",
             "family.radius": "radius D of the ball", "family.center_norm": "norm of φ*",
             "family.spread": "spread of the tasks", "family.loss": "loss (replaced by each section's loss)",
             "family.noise": "label noise", "family.x_norm": "norm of the inputs x", "ms": "task lengths m",
             "tasks": "tasks per run", "sign_runs": "random sign sequences (lower bound)"}

    family: aruba.TaskFamily = aruba.TaskFamily(spread=0.3, loss="absolute")
    ms: Annotated[tuple[int, ...], Each(Ge(1))] = (10, 20, 40, 80, 160, 320, 640)
    tasks: Annotated[int, Ge(1)] = 25
    runs: Annotated[int, Ge(1)] = 4
    sign_runs: Annotated[int, Ge(1)] = 400
    seed: int = 0

    PAPER = Profile({"ms": (10, 20, 40, 80, 160, 320, 640, 1280, 2560), "tasks": 50, "sign_runs": 2000},
                    doc="Longer tasks and more repetitions (the blog states these rates without an experiment).")


@dataclass(frozen=True)
class SingleTaskResult:
    """Per m (axis 0) and per task (axis 1, ``tasks * runs`` of them): the regret ``regret``
    against the comparator, the sharp OGD bound ``sharp``, the library's ``U`` (gradient term
    doubled) and the worst-case level ``worst`` = ||phi - u||^2/(2 eta) + (eta/2) G^2 m;
    ``G`` and ``D`` of the family, the rates ``eta`` (M,) and ``ms`` (M,)."""

    ms: torch.Tensor
    eta: torch.Tensor
    regret: torch.Tensor
    sharp: torch.Tensor
    U: torch.Tensor
    worst: torch.Tensor
    G: float
    D: float


def single_task(cfg: SingleTaskSettings, loss: str | None = None) -> SingleTaskResult:
    """OGD from phi = 0 with eta = D/(G sqrt m) on fresh tasks of every length m in ``cfg.ms``,
    with the loss ``loss`` (the family's, absolute by default, when None).

    The comparator u is the library's theta*_t: the exact hindsight minimiser over the ball for
    the squared loss, the generating parameter for the absolute and logistic losses (a fixed
    point of the ball; the OGD bound holds for every such u).
    """
    loss = cfg.family.loss if loss is None else loss
    rows = {key: [] for key in ("regret", "sharp", "U", "worst")}
    etas = []
    fam = None
    for index, m in enumerate(cfg.ms):
        fam = replace(cfg.family, m=m, loss=loss)
        tasks = aruba.sample_tasks(fam, cfg.tasks, runs=cfg.runs, seed=cfg.seed + index)
        eta = fam.single_task_rate()
        phi = torch.zeros_like(tasks.theta_star)
        run = aruba.ogd(tasks.X, tasks.y, phi, eta, loss=loss, radius=fam.radius)
        distance = tasks.theta_star.pow(2).sum(-1) / (2 * eta)
        rows["regret"].append(aruba.regret(tasks.X, tasks.y, run.losses, tasks.theta_star, loss).flatten())
        rows["sharp"].append((distance + 0.5 * eta * run.grad_sq.sum(-1)).flatten())
        rows["U"].append(aruba.regret_upper_bound(phi, tasks.theta_star, eta, grad_sq=run.grad_sq).flatten())
        rows["worst"].append((distance + 0.5 * eta * fam.G ** 2 * m).flatten())
        etas.append(eta)
    return SingleTaskResult(ms=torch.tensor(cfg.ms, dtype=DTYPE), eta=torch.tensor(etas, dtype=DTYPE),
                            G=fam.G, D=fam.radius, **{k: torch.stack(v) for k, v in rows.items()})


def sign_regrets(cfg: SingleTaskSettings) -> dict[int, torch.Tensor]:
    """Per m of ``cfg.ms``: the regrets (sign_runs,) of OGD on ``cfg.sign_runs`` random sign
    sequences of length m in the ball of the family's radius
    (:func:`replearn.theory.aruba.rademacher_regret`, seed ``cfg.seed + m``)."""
    return {m: aruba.rademacher_regret(m, cfg.family.radius, cfg.sign_runs, seed=cfg.seed + m) for m in cfg.ms}


def regret_table(res: SingleTaskResult, ms) -> str:
    """The absolute-loss run ``res`` as lines of text, one per task length ``m`` of ``ms``: the
    step size, the mean regret, the sharp bound, the library's bound ``U_t`` and ``D G sqrt(m)``."""
    level = res.D * res.G * torch.sqrt(res.ms)
    lines = [f"absolute loss: D = {res.D}, G = {res.G}; means over {res.regret.shape[1]} tasks per m",
             "    m    eta   regret   sharp bound   library U_t   D G sqrt(m)"]
    for j, m in enumerate(ms):
        lines.append(f"{m:5d}  {res.eta[j]:.3f}  {res.regret[j].mean():7.2f}  {res.sharp[j].mean():12.2f}"
                     f"  {res.U[j].mean():12.2f}  {level[j]:11.2f}")
    return "\n".join(lines)
