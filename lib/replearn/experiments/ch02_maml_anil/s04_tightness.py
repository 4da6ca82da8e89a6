"""Book 2.4: how tight MAML's conditions are: the four meta-learners and ARM from a structured
and a random start when the ground-truth heads have a mean far from zero (the "tightness"
experiment of Collins, Mokhtari, Oh & Shakkottai, ICML 2022, shown in the talk).

- :func:`run_tightness`: every meta-learner and ARM from both starts on one instance; runs that
  blow up are kept up to the last iterate before the library's divergence error
  (:func:`replearn.theory.maml.train_or_diverge`). :func:`tightness_outcomes` repeats the experiment
  over seeds (:func:`replearn.theory.maml.outcome`).
- The section's explorer: :func:`explorer_curves` (one meta-learner next to ARM),
  :func:`draw_explorer` and the ipywidgets front end :func:`explorer`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np
import torch

from replearn.theory import linear, maml
from replearn.checks import check_choice, check_int, check_nonnegative, check_number, check_positive, check_seed
from replearn.theory.meta import arm
from replearn.book.plotting import plot_curves, to_numpy
from replearn.settings import Ge, Gt, Lt, Profile, Settings
from replearn.book.widgets import Menu, Slider
from replearn.book.widgets import explorer as build_explorer

INITS = ("structured", "random")


@dataclass(frozen=True)
class TightnessSettings(Settings):
    """Population losses, d, k, n tasks whose heads have a mean of norm ``mean_norm`` and a
    centred covariance of condition number ``cond`` (``make_heads(exact=True)``); inner step
    ``alpha``, outer step ``beta``, ``iterations``; structured start at distance ``delta0``;
    ``seeds`` instances for :func:`tightness_outcomes`."""

    WORDS = {"n": "training tasks n", "cond": "condition number of the heads' centred covariance",
             "scale": "scale L of the heads' second moment", "mean_norm": "norm of the heads' mean",
             "delta0": "distance of the start from B* (δ₀)", "alpha": "inner step size α",
             "beta": "outer step size β", "iterations": "outer iterations", "seeds": "random instances"}

    d: int = 20
    k: Annotated[int, Ge(1)] = 3
    n: Annotated[int, Ge(1, why="tasks")] = 20
    cond: Annotated[float, Ge(1, why="a condition number")] = 2.0
    mean_norm: Annotated[float, Ge(0)] = 2.0
    alpha: Annotated[float, Gt(0, why="the inner step size")] = 0.25
    beta: Annotated[float, Gt(0, why="the outer step size")] = 0.25
    delta0: Annotated[float, Gt(0, why="a distance"), Lt(1)] = 0.5
    iterations: Annotated[int, Ge(1)] = 600
    seeds: Annotated[int, Ge(1)] = 5
    seed: int = 0

    PAPER = Profile({"d": 50, "k": 5, "n": 50, "iterations": 2000, "seeds": 10},
                    doc="A larger instance (the talk does not state the settings of its tightness figure).")

    def validate(self) -> None:
        """The relation between the fields (each field's own range is beside it): k < d."""
        super().validate()
        check_int(self.d, "d (needs 1 <= k < d)", self.k + 1)


@dataclass(frozen=True)
class TightnessProblem:
    """Ground truth ``Bstar`` (d, k), heads ``W`` (n, k), their population ``tasks`` and both
    ``starts``: init -> (B_0, w_0)."""

    Bstar: torch.Tensor
    W: torch.Tensor
    tasks: linear.PopulationTasks
    starts: dict  # init -> (B0, w0)


def make_tightness_problem(d: int, k: int, n: int, *, cond: float, mean_norm: float, alpha: float,
                           delta0: float = 0.5, seed: int = 0) -> TightnessProblem:
    """Haar-random B_* (d, k), heads with mean norm ``mean_norm`` and centred condition number
    ``cond``, and both starts: :func:`replearn.theory.maml.structured_init` (distance ``delta0``,
    alpha B_0^T B_0 = I, w_0 = 0) and :func:`replearn.theory.maml.random_init` (dist ~ 1)."""
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (d, k, n)) or not 1 <= k < d:
        raise ValueError(f"need integers 1 <= k < d, got d={d!r}, k={k!r}")
    if not 0 < delta0 < 1:
        raise ValueError(f"delta0 must lie in (0, 1), got {delta0}")
    Bstar = linear.ground_truth_representation(d, k, seed=seed)
    W = linear.make_heads(n, k, mean_norm=mean_norm, cond=cond, seed=seed + 1)
    tasks = linear.population_tasks(Bstar, W)
    starts = {"structured": maml.structured_init(Bstar, alpha, delta0, seed=seed + 2),
              "random": maml.random_init(d, k, alpha, seed=seed + 2)}
    return TightnessProblem(Bstar, W, tasks, starts)


@dataclass(frozen=True)
class TightnessResult:
    """``runs[init][algorithm]``: a :class:`replearn.theory.maml.TrainingRun` for each start and each of
    MAML, FO-MAML, ANIL, FO-ANIL and ARM; ``problem``: the instance."""

    runs: dict
    problem: TightnessProblem


def run_tightness(cfg: TightnessSettings, seed: int | None = None) -> TightnessResult:
    """All four meta-learners and ARM from both starts on one instance (seed ``cfg.seed``)."""
    pb = make_tightness_problem(cfg.d, cfg.k, cfg.n, cond=cfg.cond, mean_norm=cfg.mean_norm, alpha=cfg.alpha,
                                delta0=cfg.delta0, seed=cfg.seed if seed is None else seed)
    runs = {init: {alg: maml.train_or_diverge(*pb.starts[init], pb.tasks, pb.Bstar, algorithm=alg,
                                              alpha=cfg.alpha, beta=cfg.beta, iterations=cfg.iterations)
                   for alg in (*maml.ALGORITHMS, "ARM")} for init in INITS}
    return TightnessResult(runs, pb)


def tightness_outcomes(cfg: TightnessSettings) -> dict:
    """``{init: {algorithm: [outcome per seed]}}`` (:func:`replearn.theory.maml.outcome`) over seeds
    cfg.seed, ..., cfg.seed + seeds - 1 (a different B_*, heads and start each time; ARM left out)."""
    table = {init: {alg: [] for alg in maml.ALGORITHMS} for init in INITS}
    for s in range(cfg.seed, cfg.seed + cfg.seeds):
        pb = make_tightness_problem(cfg.d, cfg.k, cfg.n, cond=cfg.cond, mean_norm=cfg.mean_norm,
                                    alpha=cfg.alpha, delta0=cfg.delta0, seed=10 * s)
        for init in INITS:
            for alg in maml.ALGORITHMS:
                run = maml.train_or_diverge(*pb.starts[init], pb.tasks, pb.Bstar, algorithm=alg,
                                            alpha=cfg.alpha, beta=cfg.beta, iterations=cfg.iterations)
                table[init][alg].append(maml.outcome(run))
    return table


# --------------------------------------------------------------------------- explorer

def explorer_curves(algorithm: str, alpha: float, beta: float, cond: float, mean_norm: float, init: str, *,
                    d: int = 20, k: int = 3, n: int = 20, T: int = 300, seed: int = 0) -> dict:
    """dist(B_t, B_*) of one meta-learner and of ARM on population tasks, t = 0..T.

    The instance is :func:`make_tightness_problem`: Haar-random B_* (d, k), n heads with mean
    norm ``mean_norm`` and centred condition number ``cond``, and the ``init`` start
    ("structured": distance 0.5 with alpha B_0^T B_0 = I; "random": N(0, 1/(alpha d)) entries),
    w_0 = 0. ``algorithm`` (MAML, FO-MAML, ANIL, FO-ANIL) uses inner step ``alpha`` and outer
    step ``beta``; ARM uses step ``beta``. Returns numpy arrays
    ``{"iteration": (T + 1,), algorithm: (T + 1,), "ARM": (T + 1,)}``. Raises ValueError on bad
    input and the library's ValueError when the iterates diverge.
    """
    if not isinstance(algorithm, str) or algorithm not in maml.ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {maml.ALGORITHMS}")
    check_choice(init, "init", INITS)
    check_positive(alpha, "alpha")
    check_positive(beta, "beta")
    check_number(cond, "cond (a condition number)", low=1.0)
    check_nonnegative(mean_norm, "mean_norm")
    check_int(T, "T (iterations)", 1)
    check_int(k, "k", 1)
    check_int(d, "d (needs 1 <= k < d)", k + 1)
    check_int(n, "n (tasks, at least k + 1)", k + 1)
    check_seed(seed)
    pb = make_tightness_problem(d, k, n, cond=float(cond), mean_norm=float(mean_norm), alpha=float(alpha),
                                seed=seed)
    B0, w0 = pb.starts[init]
    traj = maml.meta_train(B0, w0, pb.tasks, algorithm=algorithm, alpha=float(alpha), beta=float(beta),
                           iterations=T)
    base = arm(B0, w0, pb.tasks, beta=float(beta), iterations=T)
    return {"iteration": np.arange(T + 1), algorithm: to_numpy(traj.dist(pb.Bstar)),
            "ARM": to_numpy(base.dist(pb.Bstar))}


def draw_explorer(ax, curves: dict, title: str = "") -> None:
    """Plot the curves of :func:`explorer_curves` on a log axis."""
    floor = 1e-12  # the meta-learners can reach machine precision; keep the log axis finite
    shown = {name: np.maximum(values, floor) for name, values in curves.items() if name != "iteration"}
    plot_curves(ax, curves["iteration"], shown, logy=True, xlabel="iteration t", ylabel=r"dist$(B_t, B_*)$",
                title=title)
    ax.set_ylim(max(floor, 0.5 * float(min(v.min() for v in shown.values()))), 1.5)


def explorer(**defaults):
    """An ipywidgets panel: a menu for the algorithm, sliders for alpha, beta, the head
    condition number and the norm of the head mean, a menu for the start, and a plot of
    :func:`explorer_curves` (keyword ``defaults`` set the initial values)."""
    controls = {"algorithm": Menu("ANIL", tuple(maml.ALGORITHMS), "algorithm"),
                "init": Menu("random", INITS, "start"),
                "alpha": Slider(0.25, 0.05, 0.5, 0.05, "α"), "beta": Slider(0.25, 0.05, 1.0, 0.05, "β"),
                "cond": Slider(2.0, 0, 1.5, 0.1, "cond", "log"),
                "mean_norm": Slider(2.0, 0.0, 3.0, 0.25, "‖mean‖")}

    def draw(ax, v):
        title = (f"{v['algorithm']}, {v['init']} start, α = {v['alpha']:.2f}, β = {v['beta']:.2f}, "
                 f"cond = {v['cond']:.1f}, ‖mean‖ = {v['mean_norm']:.2f}")
        draw_explorer(ax, explorer_curves(**v), title)

    return build_explorer(controls, draw, defaults=defaults, continuous_update=False)
