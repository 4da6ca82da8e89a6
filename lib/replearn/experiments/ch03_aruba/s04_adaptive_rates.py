"""Book 3.4: ARUBA's per-coordinate learning rate on an anisotropic task family (Khodak, Balcan
and Talwalkar 2019, blog "Adaptive gradient-based meta-learning", section "Using ARUBA to adapt
to the inter-task geometry").

Preconditioned OGD has the regret upper bound
U_t(phi, eta) = sum_j (phi_j - theta*_j)^2 / (2 eta_j) + sum_j eta_j sum_i grad_{t,i,j}^2, and
the meta-learned rate eta_{t,j} = sqrt((B_{t,j} + eps_t) / (G_{t,j} + zeta_t)) adapts to the
coordinates along which the task optima vary. :func:`run` compares, on a family whose optima
vary along ``varying`` of the d coordinates only (``TaskFamily.anisotropic``), all with the
learned initialisation (running mean of the theta*_t):

- ``ARUBA``: the per-coordinate rate (``meta_learn(rate="aruba")``);
- ``learned scalar rate``: its scalar analogue (``rate="aruba_scalar"``);
- ``oracle scalar rate``: the fixed rate V / (G sqrt m) that needs the task similarity V;
- ``AdaGrad``: within-task AdaGrad, its base rate tuned in hindsight over ``adagrad_grid``
  (the best grid value on the same tasks, which favours AdaGrad);
- ``single-task OGD``: no meta-learning (init 0, rate D / (G sqrt m)), for scale.

:func:`rate_profile` runs ARUBA on a family with graded spreads and returns the learned rates
next to the spreads and to the per-coordinate minimiser of the summed bounds in hindsight.
The smoothing constant of :func:`replearn.theory.aruba.meta_learn` is a field here (``smoothing``);
see the module docstring of :mod:`replearn.theory.aruba` for its form. The section's interactive
explorer: :func:`explorer_curves` (the curves), :func:`draw_explorer` and :func:`explorer`
(the ipywidgets panel).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import numpy as np
import torch

from replearn.theory import aruba
from replearn.checks import check_int, check_number, check_seed
from replearn.book.plotting import plot_curves, to_numpy
from replearn.settings import Each, Ge, Gt, Lt, Profile, Settings
from replearn.book.widgets import Menu, Slider
from replearn.book.widgets import explorer as build_explorer

METHODS = ("single-task OGD", "oracle scalar rate", "AdaGrad (tuned)", "learned scalar rate", "ARUBA")


@dataclass(frozen=True)
class ArubaRatesSettings(Settings):
    """Dimension ``d`` with ``varying`` task-specific coordinates (spread ``high``, the others
    ``low``), ``m`` rounds per task, ``T`` tasks, ``runs`` independent sequences, ARUBA's
    smoothing constant and power, the AdaGrad base-rate grid, and the seed."""

    WORDS = {"varying": "task-specific coordinates", "high": "spread of the task-specific coordinates",
             "low": "spread of the other coordinates", "m": "rounds per task m", "T": "tasks T",
             "smoothing": "ARUBA's smoothing ε", "power": "ARUBA's power p",
             "adagrad_grid": "AdaGrad's base step sizes"}

    d: Annotated[int, Ge(1)] = 10
    varying: int = 2
    high: Annotated[float, Gt(0)] = 1.0
    low: Annotated[float, Gt(0)] = 0.01
    m: Annotated[int, Ge(1)] = 20
    T: Annotated[int, Ge(1)] = 200
    runs: Annotated[int, Ge(1)] = 3
    smoothing: Annotated[float, Gt(0)] = 0.01
    power: Annotated[float, Ge(0, why="o(t) smoothing"), Lt(1)] = 0.4
    adagrad_grid: Annotated[tuple, Each(Gt(0))] = (0.03, 0.1, 0.3, 1.0)
    seed: int = 0

    PAPER = Profile({"d": 50, "varying": 10, "m": 100, "T": 1000, "runs": 5},
                    doc="A larger instance (d = 50 with 10 varying coordinates, m = 100, T = 1000, 5 runs).")

    def validate(self) -> None:
        """The relation between the fields (each field's own range is beside it): varying <= d."""
        super().validate()
        check_int(self.varying, "varying (task-specific coordinates)", 0, self.d)

    def family(self) -> aruba.TaskFamily:
        return aruba.TaskFamily.anisotropic(self.d, self.varying, high=self.high, low=self.low, m=self.m)


@dataclass(frozen=True)
class ArubaRatesResult:
    """Per method: ``regret`` R_t (runs, T) and ``averaged`` task-averaged regret (runs, T);
    ARUBA's ``rates`` at the last task (runs, d) and their history (runs, T, d); the learned
    scalar rate history (runs, T); the AdaGrad late-half regret per base rate
    ``adagrad_scores`` and the chosen ``adagrad_eta0``; the ``oracle_rate``; ``spreads`` (d,)."""

    regret: dict
    averaged: dict
    rates: torch.Tensor
    rate_history: torch.Tensor
    scalar_history: torch.Tensor
    adagrad_scores: dict
    adagrad_eta0: float
    oracle_rate: float
    spreads: torch.Tensor

    def late(self) -> dict:
        """Mean regret over the second half of the tasks (all runs), per method."""
        return {name: aruba.late_mean(r) for name, r in self.regret.items()}


def run(cfg: ArubaRatesSettings) -> ArubaRatesResult:
    """The comparison of the module docstring on ``cfg.runs`` sequences of ``cfg.T`` tasks."""
    fam = cfg.family()
    tasks = aruba.sample_tasks(fam, cfg.T, runs=cfg.runs, seed=cfg.seed)
    smooth = {"smoothing": cfg.smoothing, "power": cfg.power}
    adagrad = {}
    for eta0 in cfg.adagrad_grid:
        try:
            adagrad[float(eta0)] = aruba.meta_learn(tasks, rate="adagrad", eta0=float(eta0))
        except ValueError:  # a base rate so large that OGD diverges counts as infinitely bad
            continue
    if not adagrad:
        raise ValueError("AdaGrad diverged for every base rate of the grid")
    scores = {e: aruba.late_mean(r.regret) for e, r in adagrad.items()}
    best = min(scores, key=scores.get)
    runs = {
        "single-task OGD": aruba.single_task_ogd(tasks),
        "oracle scalar rate": aruba.meta_learn(tasks, rate=fam.oracle_rate()),
        "AdaGrad (tuned)": adagrad[best],
        "learned scalar rate": aruba.meta_learn(tasks, rate="aruba_scalar", **smooth),
        "ARUBA": aruba.meta_learn(tasks, rate="aruba", **smooth),
    }
    return ArubaRatesResult(
        regret={k: r.regret for k, r in runs.items()},
        averaged={k: r.task_averaged() for k, r in runs.items()},
        rates=runs["ARUBA"].rate[:, -1], rate_history=runs["ARUBA"].rate,
        scalar_history=runs["learned scalar rate"].rate[..., 0],
        adagrad_scores=scores, adagrad_eta0=best, oracle_rate=fam.oracle_rate(), spreads=fam.spreads)


def smoothing_sweep(cfg: ArubaRatesSettings, values=(0.1, 0.03, 0.01, 0.003)) -> dict:
    """Late-half mean regret of ARUBA and of the learned scalar rate for several smoothing
    constants (library default 0.1), on the tasks of :func:`run`: {s: (aruba, scalar)}."""
    tasks = aruba.sample_tasks(cfg.family(), cfg.T, runs=cfg.runs, seed=cfg.seed)
    out = {}
    for s in values:
        pair = [aruba.late_mean(aruba.meta_learn(tasks, rate=r, smoothing=s, power=cfg.power).regret)
                for r in ("aruba", "aruba_scalar")]
        out[float(s)] = tuple(pair)
    return out


@dataclass(frozen=True)
class RateProfile:
    """ARUBA on graded spreads: ``spreads`` (d,), learned ``rates`` at the last task (runs, d),
    the hindsight minimiser ``optimal`` sqrt(B_j / G_j) of the summed bounds along ARUBA's own
    trajectory (runs, d), and the single-task rate ``eta0``."""

    spreads: torch.Tensor
    rates: torch.Tensor
    optimal: torch.Tensor
    eta0: float


def rate_profile(cfg: ArubaRatesSettings, low: float = 0.01, high: float = 1.0) -> RateProfile:
    """ARUBA on a family whose d spreads are geometric from ``low`` to ``high``.

    ``optimal`` is the fixed per-coordinate rate minimising sum_t U_t(phi_t, eta) for the
    initialisations phi_t and the gradients of the run: by the proposition of book 3.4 it is
    sqrt(B_j / G_j) with B_j = 1/2 sum_t (phi_{t,j} - theta*_{t,j})^2 and G_j = sum_t sum_i g_{t,i,j}^2
    (the gradients recomputed by replaying OGD with ARUBA's rates, all tasks at once).
    """
    if not 0 < low <= high < math.inf:
        raise ValueError(f"need 0 < low <= high, got low={low}, high={high}")
    fam = aruba.TaskFamily(d=cfg.d, m=cfg.m, spread=tuple(np.geomspace(low, high, cfg.d).tolist()))
    tasks = aruba.sample_tasks(fam, cfg.T, runs=cfg.runs, seed=cfg.seed + 1)
    res = aruba.meta_learn(tasks, rate="aruba", smoothing=cfg.smoothing, power=cfg.power)
    replay = aruba.ogd(tasks.X, tasks.y, res.init, res.rate, loss=fam.loss, radius=fam.radius)
    B = 0.5 * (res.init - tasks.theta_star).pow(2).sum(1)
    G = replay.grad_sq.sum(1)
    return RateProfile(fam.spreads, res.rate[:, -1], (B / G).sqrt(), fam.single_task_rate())


# --------------------------------------------------------------------------- the explorer

#: The meta-learners the explorer offers.
EXPLORER_METHODS = ("ARUBA", "learned scalar rate", "oracle scalar rate", "AdaGrad")


def explorer_curves(V: float, anisotropy: float, m: int, T: int, method: str, *, d: int = 10,
                    seed: int = 0) -> dict:
    """Task-averaged regret R-bar_t of one meta-learner and of single-task OGD, t = 1..T.

    The family (:class:`replearn.theory.aruba.TaskFamily`, squared loss) has its task optima spread
    ``anisotropy`` times more along its first max(1, d // 5) coordinates than along the
    others, with total similarity ||spread|| = ``V``. ``method``: "ARUBA" (per-coordinate rate),
    "learned scalar rate", "oracle scalar rate" (V / (G sqrt m)) or "AdaGrad" (base rate 0.3),
    all with the learned initialisation; ARUBA's smoothing constant is 0.01 as in book 3.4.
    Returns numpy arrays ``{"task": (T,), method: (T,), "single-task OGD": (T,)}``.
    Raises ValueError on bad input.
    """
    if not isinstance(method, str) or method not in EXPLORER_METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {EXPLORER_METHODS}")
    check_number(V, "V (task similarity)", low=0.0, high=5.0, low_open=True)
    check_number(anisotropy, "anisotropy (a ratio of spreads)", low=1.0)
    check_int(m, "m (rounds)", 1)
    check_int(T, "T (tasks)", 1)
    check_int(d, "d", 2)
    check_seed(seed)
    varying = max(1, d // 5)
    shape = np.array([float(anisotropy)] * varying + [1.0] * (d - varying))
    spread = tuple((float(V) * shape / np.linalg.norm(shape)).tolist())
    fam = aruba.TaskFamily(d=d, m=m, spread=spread)
    tasks = aruba.sample_tasks(fam, T, seed=seed)
    if method == "ARUBA":
        res = aruba.meta_learn(tasks, rate="aruba", smoothing=0.01)
    elif method == "learned scalar rate":
        res = aruba.meta_learn(tasks, rate="aruba_scalar", smoothing=0.01)
    elif method == "oracle scalar rate":
        res = aruba.meta_learn(tasks, rate=fam.oracle_rate())
    else:
        res = aruba.meta_learn(tasks, rate="adagrad", eta0=0.3)
    return {"task": np.arange(1, T + 1), method: to_numpy(res.task_averaged()[0]),
            "single-task OGD": to_numpy(aruba.single_task_ogd(tasks).task_averaged()[0])}


def draw_explorer(ax, curves: dict, title: str = "") -> None:
    """Plot the curves of :func:`explorer_curves` on a log axis."""
    shown = {name: values for name, values in curves.items() if name != "task"}
    plot_curves(ax, curves["task"], shown, logy=True, xlabel="task t", ylabel=r"$\bar R_t$", title=title)


def explorer(**defaults):
    """An ipywidgets panel: sliders for V, the anisotropy, m and T, a menu for the method, and
    a plot of :func:`explorer_curves` (keyword ``defaults`` set the initial values)."""
    controls = {"V": Slider(1.4, 0.1, 5.0, 0.1, "V"), "anisotropy": Slider(100.0, 0, 2, 0.25, "anisotropy", "log"),
                "m": Slider(20, 5, 100, 5, "m", "int"), "T": Slider(200, 20, 500, 20, "T", "int"),
                "method": Menu("ARUBA", EXPLORER_METHODS, "method")}

    def draw(ax, v):
        title = f"{v['method']}, V = {v['V']:.1f}, anisotropy = {v['anisotropy']:.0f}, m = {v['m']}, T = {v['T']}"
        draw_explorer(ax, explorer_curves(**v), title)

    return build_explorer(controls, draw, defaults=defaults, continuous_update=False)
