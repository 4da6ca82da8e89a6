"""Drivers for book 2.4-2.6: tightness of MAML's conditions, finite samples, global optimality.

- :func:`run_tightness` (book 2.4): the four meta-learners and ARM from a structured and a
  random start when the ground-truth heads have a mean far from zero (the "tightness"
  experiment of Collins, Mokhtari, Oh & Shakkottai, ICML 2022, shown in the talk). Runs that
  blow up are kept up to the last iterate before the library's divergence error, and the
  error message is recorded (:func:`train_or_diverge`). :func:`tightness_outcomes` repeats
  the experiment over seeds.
- :func:`run_finite_samples` (book 2.5): ANIL / FO-ANIL with ``m`` fresh samples per task and
  iteration, the distance they reach as m and the number of tasks n vary (the paper's
  finite-sample theorem: m = Omega((d/n + 1) k^3) suffices, far below d).
- :func:`run_neural_optimality` (book 2.6): MAML on a small tanh network for few-shot sine
  regression (:func:`sine_tasks`), and the terms of the optimality-gap bound of Wang, Cai, Yang &
  Wang (ICML 2020, Theorem 1) at the points it reaches, over widths and restarts. The network,
  its MAML objective, the bound's terms and the fixed-feature quadratic are in
  :mod:`replearn.sinusoid`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import torch

from .. import linear, maml, meta, sinusoid
from ..backend import DTYPE
from ..checks import (check_choice, check_int, check_ints, check_nonnegative, check_number, check_positive,
                      check_sequence)
from ..profiles import Settings

ALGORITHMS = maml.ALGORITHMS
INITS = ("structured", "random")
COLORS = {"MAML": "#1f77b4", "FO-MAML": "#d62728", "ANIL": "#2ca02c", "FO-ANIL": "#ff7f0e", "ARM": "#7f7f7f"}
STYLES = {"MAML": "-", "FO-MAML": "-", "ANIL": "-", "FO-ANIL": "--", "ARM": ":"}


# --------------------------------------------------------------------------- runs that may diverge

@dataclass(frozen=True)
class Run:
    """One training run: ``dist`` (T' + 1,) = dist(B_t, B_*), ``w_norm`` = ||w_t|| and
    ``delta_norm`` = ||I - alpha B_t^T B_t|| along the iterates that stayed finite, and
    ``diverged_at`` (the library's first bad iteration, None if the run finished) with the
    library's ``message``."""

    dist: np.ndarray
    w_norm: np.ndarray
    delta_norm: np.ndarray
    diverged_at: int | None
    message: str
    B: torch.Tensor  # last kept iterate
    w: torch.Tensor

    @property
    def diverged(self) -> bool:
        return self.diverged_at is not None


def _train(B0, w0, tasks, algorithm, alpha, beta, iterations):
    if algorithm == "ARM":
        return meta.arm(B0, w0, tasks, beta=beta, iterations=iterations)
    return maml.meta_train(B0, w0, tasks, algorithm=algorithm, alpha=alpha, beta=beta, iterations=iterations)


def train_or_diverge(B0: torch.Tensor, w0: torch.Tensor, tasks: linear.PopulationTasks, Bstar: torch.Tensor, *,
                     algorithm: str, alpha: float, beta: float, iterations: int) -> Run:
    """Train ``algorithm`` (one of :data:`ALGORITHMS` or ``"ARM"``) on population tasks. If the
    library raises its divergence ``ValueError`` ("diverged by iteration t"), the run is
    repeated for t - 1 iterations (deterministic: full batch) so that the curve ends at the last
    iterate before the blow-up; other ValueErrors propagate."""
    message, diverged_at = "", None
    try:
        traj = _train(B0, w0, tasks, algorithm, alpha, beta, iterations)
    except ValueError as err:
        found = re.search(r"diverged by (?:iteration|round) (\d+)", str(err))
        if found is None:
            raise
        message, diverged_at = str(err), int(found.group(1))
        traj = _train(B0, w0, tasks, algorithm, alpha, beta, max(diverged_at - 1, 0))
    k = B0.shape[1]
    delta = torch.eye(k, dtype=DTYPE) - alpha * traj.B.mT @ traj.B
    return Run(dist=traj.dist(Bstar).cpu().numpy(), w_norm=traj.w.norm(dim=-1).cpu().numpy(),
               delta_norm=torch.linalg.matrix_norm(delta, ord=2).cpu().numpy(), diverged_at=diverged_at,
               message=message, B=traj.B[-1], w=traj.w[-1])


@dataclass(frozen=True)
class TightnessSettings(Settings):
    """Population losses, d, k, n tasks whose heads have a mean of norm ``mean_norm`` and a
    centred covariance of condition number ``cond`` (``make_heads(exact=True)``); inner step
    ``alpha``, outer step ``beta``, ``iterations``; structured start at distance ``delta0``;
    ``seeds`` instances for :func:`tightness_outcomes`."""

    d: int = 20
    k: int = 3
    n: int = 20
    cond: float = 2.0
    mean_norm: float = 2.0
    alpha: float = 0.25
    beta: float = 0.25
    delta0: float = 0.5
    iterations: int = 600
    seeds: int = 5
    seed: int = 0

    @classmethod
    def paper(cls):
        """A larger instance (the talk does not state the settings of its tightness figure)."""
        return cls(d=50, k=5, n=50, iterations=2000, seeds=10)

    def validate(self) -> None:
        super().validate()
        _check_linear_setting(self)
        check_int(self.n, "n (tasks)", 1)
        check_int(self.iterations, "iterations", 1)
        check_int(self.seeds, "seeds", 1)


def _check_linear_setting(cfg) -> None:
    """Checks shared by the linear-model settings of chapter 2."""
    check_int(cfg.k, "k", 1)
    check_int(cfg.d, "d (needs 1 <= k < d)", cfg.k + 1)
    check_number(cfg.cond, "cond (a condition number)", low=1.0)
    if hasattr(cfg, "mean_norm"):
        check_nonnegative(cfg.mean_norm, "mean_norm")
    check_positive(cfg.alpha, "the step size alpha")
    check_positive(cfg.beta, "the step size beta")
    check_number(cfg.delta0, "delta0", low=0.0, high=1.0, low_open=True, high_open=True)


@dataclass(frozen=True)
class TightnessProblem:
    Bstar: torch.Tensor
    W: torch.Tensor
    tasks: linear.PopulationTasks
    starts: dict  # init -> (B0, w0)


def make_tightness_problem(d: int, k: int, n: int, *, cond: float, mean_norm: float, alpha: float,
                           delta0: float = 0.5, seed: int = 0) -> TightnessProblem:
    """Haar-random B_* (d, k), heads with mean norm ``mean_norm`` and centred condition number
    ``cond``, and both starts: :func:`replearn.maml.structured_init` (distance ``delta0``,
    alpha B_0^T B_0 = I, w_0 = 0) and :func:`replearn.maml.random_init` (dist ~ 1)."""
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
    """``runs[init][algorithm]``: a :class:`Run` for each start and each of MAML, FO-MAML,
    ANIL, FO-ANIL and ARM; ``problem``: the instance."""

    runs: dict
    problem: TightnessProblem


def run_tightness(cfg: TightnessSettings, seed: int | None = None) -> TightnessResult:
    """All four meta-learners and ARM from both starts on one instance (seed ``cfg.seed``)."""
    pb = make_tightness_problem(cfg.d, cfg.k, cfg.n, cond=cfg.cond, mean_norm=cfg.mean_norm, alpha=cfg.alpha,
                                delta0=cfg.delta0, seed=cfg.seed if seed is None else seed)
    runs = {init: {alg: train_or_diverge(*pb.starts[init], pb.tasks, pb.Bstar, algorithm=alg, alpha=cfg.alpha,
                                         beta=cfg.beta, iterations=cfg.iterations)
                   for alg in (*ALGORITHMS, "ARM")} for init in INITS}
    return TightnessResult(runs, pb)


def outcome(run: Run, tol: float = 1e-3) -> str:
    """"diverged", "converged" (final dist < tol) or "stalled"."""
    if run.diverged:
        return "diverged"
    return "converged" if run.dist[-1] < tol else "stalled"


def tightness_outcomes(cfg: TightnessSettings) -> dict:
    """``{init: {algorithm: [outcome per seed]}}`` over seeds cfg.seed, ..., cfg.seed + seeds - 1
    (a different B_*, heads and start each time; ARM left out)."""
    table = {init: {alg: [] for alg in ALGORITHMS} for init in INITS}
    for s in range(cfg.seed, cfg.seed + cfg.seeds):
        pb = make_tightness_problem(cfg.d, cfg.k, cfg.n, cond=cfg.cond, mean_norm=cfg.mean_norm, alpha=cfg.alpha,
                                    delta0=cfg.delta0, seed=10 * s)
        for init in INITS:
            for alg in ALGORITHMS:
                run = train_or_diverge(*pb.starts[init], pb.tasks, pb.Bstar, algorithm=alg, alpha=cfg.alpha, beta=cfg.beta,
                                       iterations=cfg.iterations)
                table[init][alg].append(outcome(run))
    return table


# --------------------------------------------------------------------------- finite samples

@dataclass(frozen=True)
class FiniteSampleSettings(Settings):
    """ANIL / FO-ANIL with ``m`` fresh inner and ``m`` fresh outer samples per task and
    iteration (noise ``noise_std``), n tasks with centred heads of condition number ``cond``,
    structured start at ``delta0``. Grid ``ms`` at ``n_fixed`` tasks and grid ``ns`` at
    ``m_fixed`` samples; the reported error is dist(B_t, B_*) averaged over the last ``tail``
    iterations and over ``seeds`` instances."""

    d: int = 50
    k: int = 3
    cond: float = 2.0
    noise_std: float = 0.1
    alpha: float = 0.25
    beta: float = 0.5
    delta0: float = 0.5
    iterations: int = 80
    tail: int = 20
    ms: tuple[int, ...] = (8, 16, 32, 64)
    n_fixed: int = 40
    ns: tuple[int, ...] = (5, 10, 20, 40, 80)
    m_fixed: int = 16
    algorithms: tuple[str, ...] = ("ANIL", "FO-ANIL")
    seeds: int = 2
    seed: int = 0

    @classmethod
    def paper(cls):
        """The paper's dimension d = 100 with k = 5 (Collins et al. 2022, Sec. 5), longer runs."""
        return cls(d=100, k=5, iterations=500, tail=50, ms=(16, 32, 64, 128, 256), ns=(10, 20, 40, 80, 160, 320),
                   m_fixed=32, n_fixed=50, seeds=5)

    def validate(self) -> None:
        super().validate()
        _check_linear_setting(self)
        check_nonnegative(self.noise_std, "noise_std")
        check_int(self.iterations, "iterations", 1)
        check_int(self.tail, "tail", 1, self.iterations)
        check_ints(self.ms, "ms (sample sizes)")
        check_ints(self.ns, "ns (task counts)")
        check_int(self.n_fixed, "n_fixed", 1)
        check_int(self.m_fixed, "m_fixed", 1)
        check_sequence(self.algorithms, "algorithms", lambda v, n: check_choice(v, n, ("ANIL", "FO-ANIL")))
        check_int(self.seeds, "seeds", 1)


@dataclass(frozen=True)
class FiniteSampleResult:
    """``by_m[alg]`` (len(ms), seeds) and ``by_n[alg]`` (len(ns), seeds): the tail-averaged
    distances; ``curves[alg]`` {m: (T + 1,) dist of the first seed at n_fixed}."""

    ms: tuple
    ns: tuple
    by_m: dict
    by_n: dict
    curves: dict


def finite_sample_distance(cfg: FiniteSampleSettings, algorithm: str, n: int, m: int, seed: int) -> np.ndarray:
    """dist(B_t, B_*) (T + 1,) of one fresh-sample run with n tasks and m samples (inner and outer)."""
    if algorithm not in ("ANIL", "FO-ANIL", "MAML", "FO-MAML"):
        raise ValueError(f"unknown algorithm {algorithm!r}")
    Bstar = linear.ground_truth_representation(cfg.d, cfg.k, seed=seed)
    W = linear.make_heads(n, cfg.k, cond=cfg.cond, exact=n > cfg.k, seed=seed + 1)
    B0, w0 = maml.structured_init(Bstar, cfg.alpha, cfg.delta0, seed=seed + 2)
    data = linear.FreshSamples(Bstar, W, m, noise_std=cfg.noise_std)  # inner and outer samples: m each
    traj = maml.meta_train(B0, w0, data, algorithm=algorithm, alpha=cfg.alpha, beta=cfg.beta,
                           iterations=cfg.iterations, seed=seed + 3)
    return traj.dist(Bstar).cpu().numpy()


def run_finite_samples(cfg: FiniteSampleSettings) -> FiniteSampleResult:
    """The grids of :class:`FiniteSampleSettings` (runs with one torch thread: many tiny ops)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        seeds = [cfg.seed + 10 * s for s in range(cfg.seeds)]
        by_m, by_n, curves = {}, {}, {}
        for alg in cfg.algorithms:
            runs_m = [[finite_sample_distance(cfg, alg, cfg.n_fixed, m, s) for s in seeds] for m in cfg.ms]
            runs_n = [[finite_sample_distance(cfg, alg, n, cfg.m_fixed, s) for s in seeds] for n in cfg.ns]
            by_m[alg] = np.array([[r[-cfg.tail:].mean() for r in row] for row in runs_m])
            by_n[alg] = np.array([[r[-cfg.tail:].mean() for r in row] for row in runs_n])
            curves[alg] = {m: row[0] for m, row in zip(cfg.ms, runs_m)}
    finally:
        torch.set_num_threads(threads)
    return FiniteSampleResult(cfg.ms, cfg.ns, by_m, by_n, curves)


# --------------------------------------------------------------------------- a neural feature map

@dataclass(frozen=True)
class NeuralMamlSettings(Settings):
    """Few-shot sine regression: n tasks y = a sin(x + phi) on x ~ U[-5, 5], amplitude
    a ~ U[0.5, 2], phase phi ~ U[0, pi]; ``m_in`` support and ``m_out`` query points per task
    (fixed). Model h_theta(x) = c + sum_j v_j tanh(u_j x + b_j) with ``width`` hidden units; MAML
    with one inner GD step ``eta`` on all parameters; outer full-batch GD with step ``lr`` for
    ``steps`` steps, from ``restarts`` random initialisations per width."""

    n: int = 10
    m_in: int = 10
    m_out: int = 10
    widths: tuple[int, ...] = (2, 5, 10, 40)
    eta: float = 0.05
    lr: float = 0.2
    steps: int = 800
    restarts: int = 3
    seed: int = 0

    @classmethod
    def paper(cls):
        """Wang et al. (2020) state the theory without this experiment; a larger version."""
        return cls(n=25, widths=(2, 5, 10, 20, 40, 80), steps=4000, restarts=5)

    def validate(self) -> None:
        super().validate()
        for name in ("n", "m_in", "m_out", "steps", "restarts"):
            check_int(getattr(self, name), name, 1)
        check_ints(self.widths, "widths")
        check_positive(self.eta, "eta")
        check_positive(self.lr, "lr")


def sine_tasks(n: int, m_in: int, m_out: int, *, seed: int = 0) -> sinusoid.SinusoidTasks:
    """The sine tasks of this section (see :class:`NeuralMamlSettings`): n tasks
    y = a sin(x + phi), a ~ U[0.5, 2], phi ~ U[0, pi], x ~ U[-5, 5], with ``m_in`` support and
    ``m_out`` query points (:func:`replearn.sinusoid.sinusoid_tasks` with phase b = -phi, whose
    ends (0, -pi) are given in draw order)."""
    return sinusoid.sinusoid_tasks(n, m_in, m_out, amplitude=(0.5, 2.0), phase=(0.0, -math.pi), seed=seed)


# --------------------------------------------------------------------------- a fixed feature map

@dataclass(frozen=True)
class FixedFeatureSettings(Settings):
    """MAML with a fixed feature map on the sine tasks of :class:`NeuralMamlSettings`: the hidden
    layer of a width-``width`` tanh network frozen at its random draw
    (:func:`replearn.sinusoid.random_features`), inner step ``eta``, then ``steps`` of GD with
    step 1 / lambda_max(H) from theta = 0."""

    n: int = 10
    m_in: int = 10
    m_out: int = 10
    width: int = 5
    eta: float = 0.05
    steps: int = 60000
    seed: int = 0

    @classmethod
    def paper(cls):
        """More tasks (as :meth:`NeuralMamlSettings.paper`) and a longer run."""
        return cls(n=25, steps=150000)

    def validate(self) -> None:
        super().validate()
        for name in ("n", "m_in", "m_out", "width"):
            check_int(getattr(self, name), name, 1)
        check_int(self.steps, "steps", 0)
        check_positive(self.eta, "eta")


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
    """Train MAML (:func:`replearn.sinusoid.train_neural_maml`) for every width and restart (init
    seed cfg.seed + restart) on one set of :func:`sine_tasks`, then evaluate
    :func:`replearn.sinusoid.optimality_terms` at every final point against the best final point
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
