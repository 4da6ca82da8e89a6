"""Book 3.3: ARUBA as a framework (Khodak, Balcan and Talwalkar 2019, blog "Adaptive
gradient-based meta-learning", Reptile and the learned rate).

:func:`framework` compares Reptile's last-iterate target with the optimum target for the
learned initialisation (``target=`` of :func:`replearn.theory.aruba.meta_learn`), and ARUBA's learned
scalar rate (``rate="aruba_scalar"``) with the best fixed rate in hindsight
(:func:`replearn.theory.aruba.fixed_rate_sweep`). The joint convexity of U_t(phi, eta) for eta > 0 is
checked by :func:`replearn.theory.aruba.convexity_gaps`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Annotated

import torch

from replearn.theory import aruba
from replearn.backend import DTYPE
from replearn.settings import Each, Ge, Gt, Profile, Settings
from replearn.book.plotting import to_numpy


@dataclass(frozen=True)
class FrameworkSettings(Settings):
    """The least-squares task ``family`` (:class:`replearn.theory.aruba.TaskFamily`, as in 3.2) of the
    Reptile comparison; its ``spread`` is replaced by each value of ``spreads`` for the learned
    scalar rate; T tasks per run, ``runs`` independent sequences; the fixed within-task rates
    ``reptile_rates`` (0 stands for the single-task rate D/(G sqrt m)); the grid ``rates`` of
    fixed rates; ARUBA's ``smoothing`` (see :func:`replearn.theory.aruba.meta_learn`) and the seed."""

    WORDS = {"family": "task family", "family.d": "dimension d", "family.m": "rounds per task m",
             "family.radius": "radius D of the ball", "family.center_norm": "norm of φ*",
             "family.spread": "spread of the tasks (replaced by each of the spreads)", "family.loss": "loss function",
             "family.noise": "label noise", "family.x_norm": "norm of the inputs x", "T": "tasks per run T",
             "spreads": "spreads of the tasks (learned rate)",
             "reptile_rates": "Reptile's fixed within-task step sizes (0: the single-task rate)",
             "rates": "fixed step sizes of the sweep", "smoothing": "ARUBA's smoothing ε"}

    family: aruba.TaskFamily = aruba.TaskFamily(m=40, spread=0.1)
    T: Annotated[int, Ge(1)] = 300
    runs: Annotated[int, Ge(1)] = 4
    spreads: Annotated[tuple[float, ...], Each(Gt(0))] = (0.03, 0.1, 0.3)
    reptile_rates: Annotated[tuple[float, ...], Each(Ge(0, why="0 = the single-task rate"))] = (0.0, 0.5)
    rates: Annotated[tuple[float, ...], Each(Gt(0))] = tuple(0.01 * 2 ** k for k in range(9))
    smoothing: Annotated[float, Gt(0)] = 1e-4
    seed: int = 2

    PAPER = Profile({"T": 1000, "runs": 10},
                    doc="More tasks and runs.")


@dataclass(frozen=True)
class FrameworkResult:
    """``reptile[(target, eta)]``: distance ||phi_t - phi*|| (T,) averaged over runs, for the
    targets "optimum" and "last_iterate" and each within-task rate; ``reptile_late`` the
    matching late regrets. Per spread of ``spreads`` (axis 0): ``V``, the learned scalar rate
    ``learned_rate`` (S, T) averaged over runs, late regrets of ARUBA's scalar rate
    (``aruba_late``), of every fixed rate of the grid (``grid_late`` (S, len(rates)), NaN where
    OGD diverged), of the worst-case oracle rate V/(G sqrt m) (``oracle_late``) and its value
    ``oracle_rate``."""

    reptile: dict
    reptile_late: dict
    V: torch.Tensor
    rates: torch.Tensor
    learned_rate: torch.Tensor
    aruba_late: torch.Tensor
    grid_late: torch.Tensor
    oracle_late: torch.Tensor
    oracle_rate: torch.Tensor

    def best_grid(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Best fixed rate of the grid per spread and its late regret, each (S,)."""
        values = self.grid_late.nan_to_num(math.inf)
        best, index = values.min(-1)
        return self.rates[index], best


def framework(cfg: FrameworkSettings) -> FrameworkResult:
    """Reptile vs follow-the-leader on the optima, and the learned scalar rate vs fixed rates."""
    fam = cfg.family
    tasks = aruba.sample_tasks(fam, cfg.T, runs=cfg.runs, seed=cfg.seed)
    reptile, reptile_late = {}, {}
    for eta in cfg.reptile_rates:
        rate = fam.single_task_rate() if eta == 0 else eta
        for target in aruba.TARGETS:
            run = aruba.meta_learn(tasks, init="learned", target=target, rate=rate)
            reptile[(target, eta)] = (run.init - fam.phi_star()).norm(dim=-1).mean(0)
            reptile_late[(target, eta)] = aruba.late_mean(run.regret)
    V, learned, aruba_late, grid, oracle_late, oracle_rate = [], [], [], [], [], []
    for index, spread in enumerate(cfg.spreads):
        fam = replace(cfg.family, spread=spread)
        tasks = aruba.sample_tasks(fam, cfg.T, runs=cfg.runs, seed=cfg.seed + 1 + index)
        run = aruba.meta_learn(tasks, init="learned", rate="aruba_scalar", smoothing=cfg.smoothing)
        learned.append(run.rate[..., 0].mean(0))
        aruba_late.append(aruba.late_mean(run.regret))
        grid.append(aruba.fixed_rate_sweep(tasks, cfg.rates))
        oracle_late.append(aruba.late_mean(aruba.meta_learn(tasks, init="learned", rate=fam.oracle_rate()).regret))
        oracle_rate.append(fam.oracle_rate())
        V.append(fam.V)
    as_t = lambda xs: torch.tensor(xs, dtype=DTYPE)  # noqa: E731
    return FrameworkResult(reptile=reptile, reptile_late=reptile_late, V=as_t(V), rates=as_t(cfg.rates),
                           learned_rate=torch.stack(learned), aruba_late=as_t(aruba_late),
                           grid_late=torch.stack(grid), oracle_late=as_t(oracle_late), oracle_rate=as_t(oracle_rate))


# --------------------------------------------------------------------------- what the page shows

def coverage(rate: float, family) -> float:
    """The fraction ``c = 1 - (1 - rate / d)^m`` of the way to a task's optimum that ``m`` steps
    at ``rate`` cover in expectation (``family``: the task family, with ``d`` and ``m``)."""
    return 1 - (1 - rate / family.d) ** family.m


def reptile_model(cfg: FrameworkSettings) -> dict:
    """Per rate of ``cfg.reptile_rates`` (0: the single-task rate), the model of Reptile's
    distance to phi* over the tasks: ``||phi*|| prod_{s<t} (1 - c/s)`` with ``c`` of
    :func:`coverage`."""
    fam, pred = cfg.family, {}
    for eta in cfg.reptile_rates:
        c = coverage(fam.single_task_rate() if eta == 0 else eta, fam)
        steps = torch.arange(1, cfg.T, dtype=torch.float64)
        pred[eta] = fam.center_norm * torch.cat([torch.ones(1, dtype=torch.float64), torch.cumprod(1 - c / steps, 0)])
    return pred


def reptile_table(res: FrameworkResult, cfg: FrameworkSettings, pred: dict) -> str:
    """The Reptile runs of ``res`` as lines of text: per rate and target, the distance of the
    initialisation to phi* at t = 10, 50 and T, the model's (``pred``), ``c`` and the late regret."""
    import numpy as np

    fam, T = cfg.family, cfg.T
    lines = [f"V = {fam.V:.2f}, ||phi*|| = {fam.center_norm}, T = {T}, {cfg.runs} runs",
             "  eta    target          ||phi_t - phi*|| at t = 10, 50, T     model    c    late regret"]
    for eta in cfg.reptile_rates:
        rate = fam.single_task_rate() if eta == 0 else eta
        c = coverage(rate, fam)
        for target in ("optimum", "last_iterate"):
            dist = res.reptile[(target, eta)]
            model = f"{float(pred[eta][-1]):5.3f}" if target == "last_iterate" else "    -"
            lines.append(f"{rate:6.3f}  {target:<13}  {np.round(to_numpy(dist[[9, 49, T - 1]]), 3)!s:>30}   {model}   "
                         f"{c:4.2f}   {res.reptile_late[(target, eta)]:.3f}")
    return "\n".join(lines)


def reptile_numbers(res: FrameworkResult, cfg: FrameworkSettings, pred: dict) -> dict:
    """The numbers the prose quotes of the Reptile runs, rounded as shown, by glue name (without
    the ``aruba-fw-`` prefix): V, the two rates and their ``c``, the model's and the measured
    distance at T at the small rate, and the ratio of the late regrets there."""
    fam = cfg.family
    slow, fast = cfg.reptile_rates
    slow_rate = fam.single_task_rate()
    cov = {eta: coverage(slow_rate if eta == 0 else eta, fam) for eta in cfg.reptile_rates}
    late = res.reptile_late
    return {"V": round(fam.V, 2), "slow-rate": round(slow_rate, 3), "fast-rate": fast,
            "c-slow": round(cov[slow], 2), "c-fast": round(cov[fast], 2),
            "model": round(float(pred[slow][-1]), 2),
            "measured": round(float(res.reptile[("last_iterate", slow)][-1]), 2),
            "regret-ratio": round(late[("last_iterate", slow)] / late[("optimum", slow)], 1)}


def learned_rate_table(res: FrameworkResult, best_rate, best_late) -> str:
    """Per task family, as lines of text: the learned rate at T, the best fixed rate of the grid
    and the worst-case oracle rate, and the late regret of each."""
    final_rate = res.learned_rate[:, -1]
    lines = ["   V   learned eta_T   best fixed eta   V/(G sqrt m)   late regret: learned eta   best fixed eta   "
             "V/(G sqrt m)"]
    for j in range(len(res.V)):
        lines.append(f"{res.V[j]:5.2f}   {final_rate[j]:13.3f}   {best_rate[j]:14.3f}   {res.oracle_rate[j]:12.4f}"
                     f"   {res.aruba_late[j]:24.3f}   {best_late[j]:14.3f}   {res.oracle_late[j]:12.3f}")
    return "\n".join(lines)


def plot_framework(res: FrameworkResult, cfg: FrameworkSettings, pred: dict, best_rate):
    """Left: the distance of the learned initialisation to phi* for both targets and rates,
    with the model ``pred``; right: the learned scalar rate per family against the best fixed
    rate of the grid. Returns the figure."""
    import matplotlib.pyplot as plt
    import numpy as np

    fam = cfg.family
    t = np.arange(1, cfg.T + 1)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.6, 3.7))
    for eta, c in zip(cfg.reptile_rates, ("#1f77b4", "#ff7f0e")):
        rate = fam.single_task_rate() if eta == 0 else eta
        ax1.loglog(t, to_numpy(res.reptile[("optimum", eta)]), color=c, label=f"target θ*, η = {rate:.3f}")
        ax1.loglog(t, to_numpy(res.reptile[("last_iterate", eta)]), color=c, ls="--",
                   label=f"target last iterate (Reptile), η = {rate:.3f}")
        ax1.loglog(t, to_numpy(pred[eta]), color=c, ls=":", lw=1)
    ax1.plot([], [], "k:", lw=1, label=r"model $\|\phi^*\|\prod_{s<t}(1 - c/s)$")
    ax1.set(xlabel="tasks seen t", ylabel=r"$\|\phi_t - \phi^*\|$", title="learned initialisation")
    ax1.legend(loc="lower left")
    colors = plt.cm.viridis(np.linspace(0.1, 0.8, len(cfg.spreads)))
    for j, c in enumerate(colors):
        ax2.semilogy(t, to_numpy(res.learned_rate[j]), color=c, label=f"learned η, V = {res.V[j]:.2f}")
        ax2.axhline(float(best_rate[j]), color=c, ls=":", lw=1)
    ax2.plot([], [], "k:", lw=1, label="best fixed η (grid)")
    ax2.set(xlabel="task t", ylabel=r"rate $\eta_t$", title="learned scalar rate (aruba_scalar)")
    ax2.legend(loc="lower right")
    plt.tight_layout()
    return fig
