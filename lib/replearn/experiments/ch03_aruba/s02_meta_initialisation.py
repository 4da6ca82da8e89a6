"""Book 3.2: meta-learning the initialisation (Khodak, Balcan and Talwalkar 2019, blog
"Adaptive gradient-based meta-learning", the bound in the task similarity V).

:func:`meta_init` runs, for several task similarities V, OGD whose initialisation is learned by
follow-the-leader on U_t (the running mean of the optima theta*_t;
:func:`replearn.theory.aruba.meta_learn`) against single-task OGD; a sweep over fixed rates eta
(:func:`replearn.theory.aruba.fixed_rate_sweep`); the bound
R-bar_T <= 4 D^2 (1 + ln T)/(eta T) + V^2/(2 eta) + eta G^2 m / 2
(:func:`replearn.theory.aruba.average_regret_bound`) and the meta-level regret of follow-the-leader
(:func:`replearn.theory.aruba.ftl_meta_regret`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated

import torch

from replearn.theory import aruba
from replearn.backend import DTYPE
from replearn.settings import Each, Ge, Gt, Profile, Settings
from replearn.book.plotting import legend_outside, log_ticks, to_numpy


@dataclass(frozen=True)
class MetaInitSettings(Settings):
    """The least-squares task ``family`` (:class:`replearn.theory.aruba.TaskFamily`: dimension d, m
    rounds per task, ball radius, ||phi*||, label noise; its ``spread`` is replaced by each value
    of ``spreads``, so V = spread sqrt(d)), T tasks per run, ``runs`` independent sequences, the
    grid ``rates`` of fixed rates for the sweep, and the seed."""

    WORDS = {"family": "task family", "family.d": "dimension d", "family.m": "rounds per task m",
             "family.radius": "radius D of the ball", "family.center_norm": "norm of φ*",
             "family.spread": "spread of the tasks (replaced by each of the spreads)", "family.loss": "loss function",
             "family.noise": "label noise", "family.x_norm": "norm of the inputs x", "T": "tasks per run T",
             "spreads": "spreads of the tasks", "rates": "fixed step sizes of the sweep"}

    family: aruba.TaskFamily = aruba.TaskFamily(m=40)
    T: Annotated[int, Ge(1)] = 200
    runs: Annotated[int, Ge(1)] = 4
    spreads: Annotated[tuple[float, ...], Each(Gt(0))] = (0.03, 0.1, 0.3, 0.6, 1.0)
    rates: Annotated[tuple[float, ...], Each(Gt(0))] = tuple(0.0005 * 2 ** k for k in range(13))
    seed: int = 1

    PAPER = Profile({"T": 1000, "runs": 10},
                    doc="More tasks and runs.")


@dataclass(frozen=True)
class MetaInitResult:
    """Per spread (axis 0): the family's ``V``, the empirical ``V_hat`` of the optima (runs
    averaged), R-bar_t curves (S, T) averaged over runs for ``single`` (fixed phi = 0, eta =
    D/(G sqrt m)), ``theorem`` (learned phi, eta = V/(G sqrt m)) and ``learned_single_rate``
    (learned phi, eta = D/(G sqrt m)); late-half mean regrets ``late[name]`` (S,); the
    ``sweep`` (S, len(rates)) of late regrets with learned phi and fixed eta (NaN where OGD
    diverged); the theorem's bound on R-bar_T per spread; the distance of phi_t to phi* (S, T);
    the largest gap between phi_{T+1} and the mean of the optima; and the meta-level regret of
    FTL on the distance terms with its bound (S,)."""

    V: torch.Tensor
    V_hat: torch.Tensor
    rbar: dict
    late: dict
    rates: torch.Tensor
    sweep: torch.Tensor
    bound: torch.Tensor
    init_distance: torch.Tensor
    mean_gap: float
    meta_regret: torch.Tensor
    meta_bound: torch.Tensor
    G: float
    D: float


def meta_init(cfg: MetaInitSettings) -> MetaInitResult:
    """Run single-task OGD and the learned initialisation for every spread of ``cfg``."""
    names = ("single", "theorem", "learned_single_rate")
    rbar = {k: [] for k in names}
    late = {k: [] for k in names}
    V, V_hat, sweep, bound, dist, meta_r, meta_b = [], [], [], [], [], [], []
    gap = 0.0
    for index, spread in enumerate(cfg.spreads):
        fam = replace(cfg.family, spread=spread)
        tasks = aruba.sample_tasks(fam, cfg.T, runs=cfg.runs, seed=cfg.seed + index)
        runs = {"single": aruba.single_task_ogd(tasks),
                "theorem": aruba.meta_learn(tasks, init="learned", rate=fam.oracle_rate()),
                "learned_single_rate": aruba.meta_learn(tasks, init="learned", rate=fam.single_task_rate())}
        for k, r in runs.items():
            rbar[k].append(r.task_averaged().mean(0))
            late[k].append(aruba.late_mean(r.regret))
        sweep.append(aruba.fixed_rate_sweep(tasks, cfg.rates))
        v_hat = aruba.task_similarity(tasks.theta_star)
        V.append(fam.V)
        V_hat.append(float(v_hat.mean()))
        bound.append(sum(aruba.average_regret_bound(fam.radius, fam.G, fam.m, cfg.T, float(v), fam.oracle_rate())
                         for v in v_hat) / cfg.runs)
        theorem = runs["theorem"]
        dist.append((theorem.init - fam.phi_star()).norm(dim=-1).mean(0))
        gap = max(gap, float((theorem.final_init - tasks.theta_star.mean(1)).abs().max()))
        r, b = aruba.ftl_meta_regret(theorem.init, tasks.theta_star)
        meta_r.append(float(r.mean()))
        meta_b.append(float(b.mean()))
    as_t = lambda xs: torch.tensor(xs, dtype=DTYPE)  # noqa: E731
    return MetaInitResult(V=as_t(V), V_hat=as_t(V_hat), rbar={k: torch.stack(v) for k, v in rbar.items()},
                          late={k: as_t(v) for k, v in late.items()}, rates=as_t(cfg.rates),
                          sweep=torch.stack(sweep), bound=as_t(bound), init_distance=torch.stack(dist),
                          mean_gap=gap, meta_regret=as_t(meta_r), meta_bound=as_t(meta_b), G=cfg.family.G,
                          D=cfg.family.radius)


# --------------------------------------------------------------------------- what the page shows

def init_table(res: MetaInitResult, cfg: MetaInitSettings) -> str:
    """The run as lines of text: per task similarity V, the task-averaged regret at T of
    single-task OGD and of the learned initialisation (both step sizes) with the gain; the
    distance of the initialisation to phi* along the tasks; the meta-level regret over its bound."""
    import numpy as np

    rbar_T = {name: curves[:, -1] for name, curves in res.rbar.items()}
    gain = rbar_T["single"] / rbar_T["theorem"]
    lines = [f"d = {cfg.family.d}, m = {cfg.family.m}, T = {cfg.T}, D = {res.D}, G = {res.G:.1f}; R-bar_T "
             f"averaged over {cfg.runs} runs",
             "    V   V_hat   single   learned phi, eta=V/(G sqrt m)   learned phi, eta=D/(G sqrt m)   gain"]
    for j in range(len(cfg.spreads)):
        lines.append(f"{res.V[j]:5.2f}  {res.V_hat[j]:5.2f}   {rbar_T['single'][j]:6.2f}   "
                     f"{rbar_T['theorem'][j]:29.3f}   {rbar_T['learned_single_rate'][j]:29.3f}   {gain[j]:5.1f}")
    lines.append("||phi_t - phi*|| at t = 10, 50, T:")
    for j in range(len(cfg.spreads)):
        lines.append(f"   V = {res.V[j]:.2f}: {np.round(to_numpy(res.init_distance[j, [9, 49, cfg.T - 1]]), 3)}")
    lines.append(f"meta-level regret / FTL bound (step 3): {np.round(to_numpy(res.meta_regret / res.meta_bound), 2)}")
    return "\n".join(lines)


def init_numbers(res: MetaInitResult) -> dict:
    """The numbers the prose quotes of the run, rounded as shown, by glue name (without the
    ``aruba-init-`` prefix): the regret of single-task OGD and of the learned initialisation on
    the two most similar families (V <= 0.35), their V, the largest V and its gain, the range of
    the gains for V < 1 and G."""
    rbar_T = {name: curves[:, -1] for name, curves in res.rbar.items()}
    gain = rbar_T["single"] / rbar_T["theorem"]
    small = res.V <= 0.35   # the two most similar families (V = 0.09, 0.32)
    return {"single-small": round(float(rbar_T["single"][small].mean()), 0),
            "theorem-lo": round(float(rbar_T["theorem"][small].min()), 2),
            "theorem-hi": round(float(rbar_T["theorem"][small].max()), 2),
            "V-small": round(float(res.V[small].max()), 2),
            "V-last": round(float(res.V[-1]), 1),
            "gain-last": round(float(gain[-1]), 1),
            "gain-lo": round(float(gain[res.V < 1].min())),
            "gain-hi": round(float(gain[res.V < 1].max())),
            "G": round(res.G, 1)}


def best_fixed_rate(res: MetaInitResult) -> tuple[torch.Tensor, torch.Tensor]:
    """Per family, the fixed rate of the sweep with the lowest late regret, and that regret."""
    import math

    best_index = torch.nan_to_num(res.sweep, nan=math.inf).argmin(-1)
    return res.rates[best_index], res.sweep.gather(1, best_index[:, None]).squeeze(1)


def rate_table(res: MetaInitResult, theory_rate, best_rate, predicted, best_late) -> str:
    """Per family, as lines of text: the theorem's rate and the best fixed rate, the late
    regret at the theorem's rate beside its prediction ``predicted``, at the best rate and of
    single-task OGD, and the theorem's bound on the task-averaged regret."""
    lines = ["V_hat   eta=V/(G sqrt m)   best fixed eta   late regret: theorem eta  (m/2d)V_hat^2  best eta  "
             "single   bound on R-bar_T"]
    for j in range(len(res.V)):
        lines.append(f"{res.V_hat[j]:5.2f}   {theory_rate[j]:16.4f}   {best_rate[j]:14.3f}   "
                     f"{res.late['theorem'][j]:24.3f}  {predicted[j]:13.3f}  {best_late[j]:8.3f}  "
                     f"{res.late['single'][j]:6.2f}   {res.bound[j]:16.0f}")
    return "\n".join(lines)


def plot_rate_sweep(res: MetaInitResult, cfg: MetaInitSettings, colors, theory_rate, best_late, predicted):
    """Left: the late regret of every fixed rate of the sweep per family (``colors``), the
    theorem's rate starred; below: the late regret against the task similarity for single-task
    OGD, the theorem's rate and the best fixed rate, with the prediction and the theorem's level;
    each legend to the right of its panel, off the data. Returns the figure."""
    import math

    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7.0, 6.6))
    rates = to_numpy(res.rates)
    for j, c in enumerate(colors):
        ax1.loglog(rates, to_numpy(res.sweep[j]), "o-", ms=3, color=c, label=f"V = {res.V[j]:.2f}")
        ax1.loglog([float(theory_rate[j])], [float(res.late["theorem"][j])], "*", ms=11, color=c, mec="k", mew=0.5)
    ax1.plot([], [], "k*", ms=9, label=r"$\eta = V/(G\sqrt{m})$")
    ax1.set(xlabel=r"fixed rate $\eta$", ylabel="late-half mean regret", title="learned φ: rate sweep")
    legend_outside(ax1)
    vh = to_numpy(res.V_hat)
    ax2.loglog(vh, to_numpy(res.late["single"]), "s--", color="0.4", label="single-task OGD")
    ax2.loglog(vh, to_numpy(res.late["theorem"]), "o-", color=colors[1], label=r"learned φ, $\eta = V/(G\sqrt{m})$")
    ax2.loglog(vh, to_numpy(best_late), "^-", color=colors[3], label="learned φ, best fixed η")
    ax2.loglog(vh, to_numpy(predicted), "k:", lw=1, label=r"$\frac{m}{2d}\hat V^2$")
    ax2.loglog(vh, vh * res.G * math.sqrt(cfg.family.m), "k--", lw=1, label=r"theorem level $\hat V G\sqrt{m}$")
    ax2.set(xlabel=r"task similarity $\hat V$", title="measured scaling in V")
    log_ticks(ax2, "x", [float(v) for v in vh])
    ax2.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:.2g}"))
    legend_outside(ax2)
    plt.tight_layout()
    return fig
