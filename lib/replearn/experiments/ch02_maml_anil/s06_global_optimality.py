"""Book 2.6: is a stationary point of MAML a global optimum? (Wang, Cai, Yang & Wang, ICML 2020,
Theorem 1: the optimality gap is bounded by a stationarity and an expressivity term.)

- :class:`FixedFeatureSettings`: MAML with a fixed tanh feature map on the section's sine tasks
  (:func:`sine_tasks`), a convex quadratic (:func:`replearn.theory.sinusoid.linear_maml_quadratic`);
- :func:`run_neural_optimality`: MAML on a small tanh network for few-shot sine regression, and
  the terms of the optimality-gap bound at the points it reaches, over widths and restarts.

The network, its MAML objective, the bound's terms and the fixed-feature quadratic are in
:mod:`replearn.theory.sinusoid`; this driver only turns the settings into those arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import numpy as np
import torch

from replearn.theory import sinusoid
from replearn.settings import Each, Ge, Gt, Profile, Settings


# --------------------------------------------------------------------------- a neural feature map

@dataclass(frozen=True)
class NeuralMamlSettings(Settings):
    """Few-shot sine regression: n tasks y = a sin(x + phi) on x ~ U[-5, 5], amplitude
    a ~ U[0.5, 2], phase phi ~ U[0, pi]; ``m_in`` support and ``m_out`` query points per task
    (fixed). Model h_theta(x) = c + sum_j v_j tanh(u_j x + b_j) with ``width`` hidden units; MAML
    with one inner GD step ``eta`` on all parameters; outer full-batch GD with step ``lr`` for
    ``steps`` steps, from ``restarts`` random initialisations per width."""

    WORDS = {"n": "tasks n", "m_in": "support points per task", "m_out": "query points per task",
             "widths": "hidden widths", "eta": "inner step size η", "lr": "outer step size",
             "steps": "outer steps", "restarts": "random initialisations per width"}

    n: Annotated[int, Ge(1)] = 10
    m_in: Annotated[int, Ge(1)] = 10
    m_out: Annotated[int, Ge(1)] = 10
    widths: Annotated[tuple[int, ...], Each(Ge(1))] = (2, 5, 10, 40)
    eta: Annotated[float, Gt(0)] = 0.05
    lr: Annotated[float, Gt(0)] = 0.2
    steps: Annotated[int, Ge(1)] = 800
    restarts: Annotated[int, Ge(1)] = 3
    seed: int = 0

    PAPER = Profile({"n": 25, "widths": (2, 5, 10, 20, 40, 80), "steps": 4000, "restarts": 5},
                    doc="Wang et al. (2020) state the theory without this experiment; a larger version.")


def sine_tasks(n: int, m_in: int, m_out: int, *, seed: int = 0) -> sinusoid.SinusoidTasks:
    """The sine tasks of this section (see :class:`NeuralMamlSettings`): n tasks
    y = a sin(x + phi), a ~ U[0.5, 2], phi ~ U[0, pi], x ~ U[-5, 5], with ``m_in`` support and
    ``m_out`` query points (:func:`replearn.theory.sinusoid.sinusoid_tasks` with phase b = -phi, whose
    ends (0, -pi) are given in draw order)."""
    return sinusoid.sinusoid_tasks(n, m_in, m_out, amplitude=(0.5, 2.0), phase=(0.0, -math.pi), seed=seed)


# --------------------------------------------------------------------------- a fixed feature map

@dataclass(frozen=True)
class FixedFeatureSettings(Settings):
    """MAML with a fixed feature map on the sine tasks of :class:`NeuralMamlSettings`: the hidden
    layer of a width-``width`` tanh network frozen at its random draw
    (:func:`replearn.theory.sinusoid.random_features`), inner step ``eta``, then ``steps`` of GD with
    step 1 / lambda_max(H) from theta = 0."""

    WORDS = {"n": "tasks n", "m_in": "support points per task", "m_out": "query points per task",
             "width": "hidden width", "eta": "inner step size η", "steps": "gradient steps"}

    n: Annotated[int, Ge(1)] = 10
    m_in: Annotated[int, Ge(1)] = 10
    m_out: Annotated[int, Ge(1)] = 10
    width: Annotated[int, Ge(1)] = 5
    eta: Annotated[float, Gt(0)] = 0.05
    steps: Annotated[int, Ge(0)] = 60000
    seed: int = 0

    PAPER = Profile({"n": 25, "steps": 150000},
                    doc="More tasks (as NeuralMamlSettings.PAPER) and a longer run.")


# --------------------------------------------------------------------------- optimality over widths

@dataclass(frozen=True)
class NeuralOptimalityResult:
    """Arrays of shape (len(widths), restarts), one entry per trained network omega, all against
    the same comparator theta' (the run with the lowest final objective, see
    :func:`run_neural_optimality`): ``objective`` L(omega), ``gap`` L(omega) - L(theta'),
    ``first_order`` <g, u>, ``eps`` ||grad L(omega)||, ``g_norm``, ``u_norm``, ``bound`` (the
    smallest R eps + ||g|| residual on the ridge path) split as ``stationarity`` = R eps and
    ``expressivity`` = ||g|| residual at the best R (``radius``, ``residual``), and
    ``min_residual`` the smallest residual on the path (the expressivity floor as R grows).
    ``curves`` (len(widths), restarts, steps + 1) is L along training; ``comparator`` is
    (width, restart) of theta'."""

    widths: tuple
    objective: np.ndarray
    gap: np.ndarray
    first_order: np.ndarray
    eps: np.ndarray
    g_norm: np.ndarray
    u_norm: np.ndarray
    bound: np.ndarray
    stationarity: np.ndarray
    expressivity: np.ndarray
    radius: np.ndarray
    residual: np.ndarray
    min_residual: np.ndarray
    curves: np.ndarray
    comparator: tuple


def run_neural_optimality(cfg: NeuralMamlSettings) -> NeuralOptimalityResult:
    """Train MAML (:func:`replearn.theory.sinusoid.train_neural_maml`) for every width and restart (init
    seed cfg.seed + restart) on one set of :func:`sine_tasks`, then evaluate
    :func:`replearn.theory.sinusoid.optimality_terms` at every final point against the best final point
    of all runs. The global minimiser of a neural MAML objective is unknown; the bound holds for
    any comparator, and the best point found is the sharpest one available (its own gap is 0)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        tasks = sine_tasks(cfg.n, cfg.m_in, cfg.m_out, seed=cfg.seed)
        runs = [[sinusoid.train_neural_maml(w, tasks, eta=cfg.eta, lr=cfg.lr, steps=cfg.steps, seed=cfg.seed + r)
                 for r in range(cfg.restarts)] for w in cfg.widths]
        curves = np.array([[run.objective for run in row] for row in runs])
        best = np.unravel_index(int(curves[:, :, -1].argmin()), curves.shape[:2])
        comparator = runs[best[0]][best[1]].theta
        terms = [[sinusoid.optimality_terms(run.theta, comparator, tasks, cfg.eta) for run in row]
                 for row in runs]
    finally:
        torch.set_num_threads(threads)

    def field(f):
        return np.array([[f(t) for t in row] for row in terms])

    return NeuralOptimalityResult(
        widths=tuple(cfg.widths), objective=curves[:, :, -1], gap=field(lambda t: t.gap),
        first_order=field(lambda t: t.first_order), eps=field(lambda t: t.eps), g_norm=field(lambda t: t.g_norm),
        u_norm=field(lambda t: t.u_norm), bound=field(lambda t: t.bound),
        stationarity=field(lambda t: t.best_radius * t.eps), expressivity=field(lambda t: t.g_norm * t.best_residual),
        radius=field(lambda t: t.best_radius), residual=field(lambda t: t.best_residual),
        min_residual=field(lambda t: float(t.residuals.min())), curves=curves,
        comparator=(cfg.widths[best[0]], int(best[1])))


# --------------------------------------------------------------------------- what the page shows

def mean_over_runs(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Per width (row), the mean of ``values`` over the runs (columns) that ``mask`` keeps."""
    return np.array([values[a][mask[a]].mean() for a in range(len(mask))])


def run_table(res: NeuralOptimalityResult, is_comp: np.ndarray) -> str:
    """Every run (width, restart) of ``res`` as one line of text: its objective, the gap to the
    comparator (marked by ``is_comp``), the first-order term and the bound with its two terms,
    the stationarity, the radius and the residual floor; the comparator first."""
    lines = [f"comparator: width {res.comparator[0]}, restart {res.comparator[1]}, "
             f"L = {res.objective[is_comp][0]:.4f}",
             "width restart   L(omega)    gap  <g,u>  bound | R*eps  ||g||*res | eps     R   floor"]
    for a, w in enumerate(res.widths):
        for r in range(res.gap.shape[1]):
            mark = "  (comparator)" if is_comp[a, r] else ""
            lines.append(f"{w:>5} {r:>7}   {res.objective[a, r]:.4f}   {res.gap[a, r]:.4f} "
                         f"{res.first_order[a, r]:.4f} {res.bound[a, r]:.4f} | {res.stationarity[a, r]:.4f}  "
                         f"{res.expressivity[a, r]:.4f}   | {res.eps[a, r]:.4f} {res.radius[a, r]:.2f} "
                         f"{res.min_residual[a, r]:.4f}{mark}")
    return "\n".join(lines)


def plot_terms(res: NeuralOptimalityResult, mask: np.ndarray, rows_of_j: int):
    """Left: the terms of the bound and the gap against the width (lines: means over the runs
    that ``mask`` keeps; dots: runs); right: the smallest residual on the path and ``||u||``,
    with the width at which the Jacobian has ``rows_of_j`` columns. Returns the figure."""
    import matplotlib.pyplot as plt

    W = np.array(res.widths)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10.0, 3.8))
    for key, values, style in (("expressivity  $\\|g\\|\\,\\|u - Jv_R\\|$", res.expressivity, "o-"),
                               ("stationarity  $R\\varepsilon$", res.stationarity, "s-"),
                               ("gap  $L(\\omega) - L(\\theta')$", res.gap, "^--")):
        line, = ax1.semilogy(W, mean_over_runs(values, mask), style, label=key)
        for a, w in enumerate(W):
            ax1.semilogy([w] * int(mask[a].sum()), values[a][mask[a]], ".", color=line.get_color(), alpha=0.5)
    ax1.set(xlabel="width w", ylabel="value at the final iterate", title="terms of the bound (dots: runs)")
    ax1.legend()
    ax2.semilogy(W, mean_over_runs(res.min_residual, mask), "o-", color="k",
                 label=r"smallest residual $\min_v \|u - Jv\|$ on the path")
    ax2.semilogy(W, mean_over_runs(res.u_norm, mask), "o:", color="0.5", label=r"$\|u\|$ (v = 0)")
    ax2.axvline((rows_of_j - 1) / 3, color="C3", lw=1, ls="--", label="3w + 1 = rows of J")
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_xticks(W, [str(w) for w in W])
        ax.minorticks_off()
    ax2.set(xlabel="width w", title="expressivity of the feature map at $\\omega$")
    ax2.legend()
    plt.tight_layout()
    return fig


def listed(values, fmt: str) -> str:
    """``"a, b, c and d"`` with each value formatted by ``fmt``."""
    items = [format(v, fmt) for v in values]
    return ", ".join(items[:-1]) + " and " + items[-1]


def quoted_numbers(res: NeuralOptimalityResult, mask: np.ndarray, rows_of_j: int) -> dict:
    """The numbers the page's prose quotes, rounded as it shows them, by glue name (without
    the ``maml-glob-`` prefix): ratios between the gap, the first-order term and the bound, the
    terms per width, the residual floor, the parameter counts beside ``rows_of_j``, the
    stationarity of wide and narrow networks, and how the widest networks' runs compare (runs
    other than the comparator, which ``mask`` drops)."""
    W = np.array(res.widths)
    expr, stat, gap = (mean_over_runs(v, mask) for v in (res.expressivity, res.stationarity, res.gap))
    share = mean_over_runs(res.stationarity / np.where(mask, res.bound, 1.0), mask)
    floor = mean_over_runs(res.min_residual, mask)
    bound = mean_over_runs(res.bound, mask)
    first_over_gap = res.first_order[mask] / res.gap[mask]
    bound_over_first = res.bound[mask] / res.first_order[mask]
    bound_over_gap = res.bound / np.where(mask, res.gap, 1.0)
    widths_2d = np.broadcast_to(W[:, None], res.gap.shape)
    eps_wide, eps_narrow = wide_and_narrow_eps(res, mask)
    w40_others = res.gap[-1][mask[-1]]
    closer_10 = int((res.gap[W == 10][mask[W == 10]] < w40_others.min()).sum())
    return {"first-over-gap-lo": round(float(first_over_gap.min()), 1),
            "first-over-gap-hi": round(float(first_over_gap.max()), 1),
            "bound-over-first-lo": round(float(bound_over_first.min()), 1),
            "bound-over-first-hi": round(float(bound_over_first.max()), 1),
            "bound-over-gap-lo": round(float(bound_over_gap[mask].min())),
            "bound-over-gap-hi": round(float(bound_over_gap[mask].max())),
            "bound-over-gap-lo-width": int(widths_2d[mask][bound_over_gap[mask].argmin()]),
            "bound-over-gap-hi-width": int(widths_2d[mask][bound_over_gap[mask].argmax()]),
            "expr-list": listed(expr, ".2f"),
            "stat-list": listed(stat, ".3f"),
            "gap-list": listed(gap, ".3f"),
            "widths": listed(W, "d"),
            "floor-first": float(f"{floor[0]:.2g}"),
            "floor-last": float(f"{floor[-1]:.1g}"),
            "params-first": 3 * int(W[0]) + 1,
            "params-last": 3 * int(W[-1]) + 1,
            "queries": rows_of_j,
            "eps-wide-lo": round(float(eps_wide.min()), 3),
            "eps-wide-hi": round(float(eps_wide.max()), 3),
            "eps-narrow-lo": round(float(eps_narrow.min()), 3),
            "eps-narrow-hi": round(float(eps_narrow.max()), 3),
            "share-first": round(float(share[0]), 2),
            "share-last": round(float(share[-1]), 2),
            "bound-first": round(float(bound[0]), 2),
            "bound-last": round(float(bound[-1]), 2),
            "w40-others": round(float(w40_others.mean()), 3),
            "closer-10": closer_10}


def wide_and_narrow_eps(res: NeuralOptimalityResult, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The stationarity ``eps`` of the runs ``mask`` keeps at widths of at least 10, and at the
    smallest width."""
    W = np.array(res.widths)
    return res.eps[W >= 10][mask[W >= 10]], res.eps[0][mask[0]]


def width_table(res: NeuralOptimalityResult, mask: np.ndarray, rows_of_j: int) -> str:
    """Per width, as lines of text: the parameter count beside ``rows_of_j``, and the means over
    the runs that ``mask`` keeps of the gap, the bound's two terms, the stationarity's share of
    the bound, the residual floor and the bound."""
    W = np.array(res.widths)

    def over_runs(values):
        return mean_over_runs(values, mask)

    rows = (("mean gap", over_runs(res.gap), "7.4f"), ("mean expressivity term", over_runs(res.expressivity), "7.4f"),
            ("mean stationarity term", over_runs(res.stationarity), "7.4f"),
            ("stationarity share", over_runs(res.stationarity / np.where(mask, res.bound, 1.0)), "7.2f"),
            ("mean residual floor", over_runs(res.min_residual), "7.4f"),
            ("mean bound", over_runs(res.bound), "7.4f"))
    return "\n".join(["width                    : " + " ".join(f"{w:>7}" for w in W),
                      "parameters 3w + 1        : " + " ".join(f"{3 * w + 1:>7}" for w in W)
                      + f"   (rows of J: {rows_of_j})"]
                     + [f"{label:<25}: " + " ".join(format(v, spec) for v in values) for label, values, spec in rows])
