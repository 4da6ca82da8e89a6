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
- :func:`train_neural_maml` and :func:`optimality_terms` (book 2.6): MAML on a small tanh network
  for few-shot sine regression, and the terms of the optimality-gap bound of Wang, Cai, Yang &
  Wang (ICML 2020, Theorem 1) at the point it reaches; :func:`run_neural_optimality` over widths
  and restarts. With a fixed feature map (:func:`random_features`) and the squared loss the MAML
  objective is a convex quadratic (:func:`linear_maml_quadratic`, :func:`quadratic_gd`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
import torch
from torch.func import grad, jacrev, vmap

from .. import linear, maml, meta
from ..backend import DTYPE, make_generator
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
    data = maml.FreshSamples(Bstar, W, m, m, noise_std=cfg.noise_std)
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


@dataclass(frozen=True)
class SineTasks:
    X_in: torch.Tensor   # (n, m_in)
    Y_in: torch.Tensor
    X_out: torch.Tensor  # (n, m_out)
    Y_out: torch.Tensor


def sine_tasks(n: int, m_in: int, m_out: int, *, seed: int = 0) -> SineTasks:
    """n few-shot sine regression tasks with fixed support and query points (see settings)."""
    if not all(isinstance(x, int) and x >= 1 for x in (n, m_in, m_out)):
        raise ValueError(f"n, m_in and m_out must be positive integers, got {n!r}, {m_in!r}, {m_out!r}")
    gen = make_generator(seed)
    amp = 0.5 + 1.5 * torch.rand(n, 1, generator=gen, dtype=DTYPE)
    phase = math.pi * torch.rand(n, 1, generator=gen, dtype=DTYPE)
    X_in = -5 + 10 * torch.rand(n, m_in, generator=gen, dtype=DTYPE)
    X_out = -5 + 10 * torch.rand(n, m_out, generator=gen, dtype=DTYPE)
    return SineTasks(X_in, amp * torch.sin(X_in + phase), X_out, amp * torch.sin(X_out + phase))


def n_params(width: int) -> int:
    return 3 * width + 1


def mlp(theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """h_theta(x) = c + sum_j v_j tanh(u_j x + b_j), theta = (u, b, v, c) flattened (3 width + 1,)."""
    p = (theta.shape[0] - 1) // 3
    u, b, v, c = theta[:p], theta[p:2 * p], theta[2 * p:3 * p], theta[-1]
    return torch.tanh(x[..., None] * u + b) @ v + c


def _risk(theta, x, y):
    return 0.5 * (mlp(theta, x) - y).pow(2).mean()


def _adapted(theta, x_in, y_in, eta):
    return theta - eta * grad(_risk)(theta, x_in, y_in)


def _meta_loss(theta, x_in, y_in, x_out, y_out, eta):
    return _risk(_adapted(theta, x_in, y_in, eta), x_out, y_out)


def maml_objective(theta: torch.Tensor, tasks: SineTasks, eta: float) -> torch.Tensor:
    """L(theta) = (1/n) sum_i R_i^out(theta - eta grad R_i^in(theta)), R(h) = 1/(2m) sum (h(x) - y)^2."""
    per = vmap(_meta_loss, in_dims=(None, 0, 0, 0, 0, None))
    return per(theta, tasks.X_in, tasks.Y_in, tasks.X_out, tasks.Y_out, eta).mean()


def maml_gradient(theta: torch.Tensor, tasks: SineTasks, eta: float) -> torch.Tensor:
    """The exact gradient of :func:`maml_objective` (through the inner step)."""
    per = vmap(grad(_meta_loss), in_dims=(None, 0, 0, 0, 0, None))
    return per(theta, tasks.X_in, tasks.Y_in, tasks.X_out, tasks.Y_out, eta).mean(0)


@dataclass(frozen=True)
class NeuralRun:
    theta: torch.Tensor      # final parameters
    objective: np.ndarray    # (steps + 1,) L(theta_t)
    grad_norm: np.ndarray    # (steps + 1,) ||grad L(theta_t)||


def train_neural_maml(width: int, tasks: SineTasks, *, eta: float, lr: float, steps: int, seed: int = 0) -> NeuralRun:
    """Full-batch GD with step ``lr`` on the MAML objective from a random start (N(0, 1) input
    weights and biases, N(0, 1/width) output weights, c = 0). Raises ValueError if it blows up."""
    if not (isinstance(width, int) and width >= 1):
        raise ValueError(f"width must be a positive integer, got {width!r}")
    for name, value in (("eta", eta), ("lr", lr)):
        if not (isinstance(value, (int, float)) and 0 < value < math.inf):
            raise ValueError(f"{name} must be a positive finite step size, got {value!r}")
    gen = make_generator(seed)
    theta = torch.cat([torch.randn(2 * width, generator=gen, dtype=DTYPE),
                       torch.randn(width, generator=gen, dtype=DTYPE) / math.sqrt(width),
                       torch.zeros(1, dtype=DTYPE)])
    objective, norms = [], []
    for _ in range(steps + 1):
        g = maml_gradient(theta, tasks, eta)
        objective.append(float(maml_objective(theta, tasks, eta)))
        norms.append(float(g.norm()))
        if not math.isfinite(objective[-1]) or objective[-1] > 1e8:
            raise ValueError(f"MAML on the width-{width} network diverged: lr = {lr} is too large")
        theta = theta - lr * g
    theta = theta + lr * g  # undo the last (unrecorded) step: theta is the iterate of the last record
    return NeuralRun(theta, np.array(objective), np.array(norms))


@dataclass(frozen=True)
class OptimalityTerms:
    """The terms of the bound at an approximate stationary point omega against a comparator theta'
    (book 2.6): ``gap`` = L(omega) - L(theta'); ``first_order`` = <g, u> (convexity of the risks in
    the prediction); ``eps`` = ||grad L(omega)||; ``g_norm`` = ||g||; ``radii`` (R's of the ridge
    path) with ``residuals`` = ||u - J v_R|| (the expressivity term); ``bound`` = min over the path
    of R eps + ||g|| residual (v = 0 and least squares included)."""

    gap: float
    first_order: float
    eps: float
    g_norm: float
    u_norm: float
    radii: np.ndarray
    residuals: np.ndarray
    bound: float
    best_radius: float
    best_residual: float


def optimality_terms(omega: torch.Tensor, comparator: torch.Tensor, tasks: SineTasks, eta: float) -> OptimalityTerms:
    """Inner products over the query points of all tasks: <a, b> = (1/n) sum_i sum_j a_ij b_ij.

    g_ij = (h_{omega_i}(x_ij) - y_ij) / m_out is the derivative of the task risk in the adapted
    prediction, u = h_{omega_i} - h_{theta'_i} (adapted predictions of both points), J_i the
    Jacobian in theta of omega's adapted predictions. Then grad L(omega) = (1/n) sum_i J_i^T g_i,
    and for every v:  L(omega) - L(theta') <= <g, u> = grad L(omega)^T v + <g, u - J v>
    <= ||v|| eps + ||g|| ||u - J v||.
    """
    n, m_out = tasks.X_out.shape
    adapted = vmap(_adapted, in_dims=(None, 0, 0, None))

    def predictions(theta):
        return vmap(mlp)(adapted(theta, tasks.X_in, tasks.Y_in, eta), tasks.X_out)  # (n, m_out)

    h_w, h_c = predictions(omega), predictions(comparator)
    g = (h_w - tasks.Y_out) / m_out
    u = h_w - h_c
    J = jacrev(predictions)(omega).reshape(n * m_out, -1)  # (n m_out, P)
    scale = 1.0 / n

    def norm(a):
        return math.sqrt(scale * float(a.pow(2).sum()))

    gradient = scale * J.T @ g.reshape(-1)
    eps = float(gradient.norm())
    gap = float(maml_objective(omega, tasks, eta) - maml_objective(comparator, tasks, eta))
    first_order = scale * float((g * u).sum())
    # ridge path v(lam) = argmin ||u - J v||^2 + lam ||v||^2 (the norm's 1/n cancels), plus v = 0
    U, S, Vh = torch.linalg.svd(J, full_matrices=False)
    coef = U.T @ u.reshape(-1)
    radii, residuals = [0.0], [norm(u)]
    for lam in torch.logspace(4, -10, 57, dtype=DTYPE):
        v = Vh.T @ (S / (S**2 + lam) * coef)
        radii.append(float(v.norm()))
        residuals.append(norm(u.reshape(-1) - J @ v))
    radii, residuals = np.array(radii), np.array(residuals)
    values = radii * eps + norm(g) * residuals
    best = int(values.argmin())
    return OptimalityTerms(gap, first_order, eps, norm(g), norm(u), radii, residuals, float(values[best]),
                           float(radii[best]), float(residuals[best]))


# --------------------------------------------------------------------------- a fixed feature map

@dataclass(frozen=True)
class FixedFeatureSettings(Settings):
    """MAML with a fixed feature map on the sine tasks of :class:`NeuralMamlSettings`: the hidden
    layer of a width-``width`` tanh network frozen at its random draw (:func:`random_features`),
    inner step ``eta``, then ``steps`` of GD with step 1 / lambda_max(H) from theta = 0."""

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


def random_features(x: torch.Tensor, width: int, seed: int = 0) -> torch.Tensor:
    """phi(x) = (tanh(u_1 x + b_1), ..., tanh(u_w x + b_w), 1), shape (..., width + 1).

    (u, b) is the draw of :func:`train_neural_maml` (width, seed): the hidden layer of that
    network frozen at initialisation, so ``mlp(cat(u, b, theta), x) = random_features(x) @ theta``
    with theta = (v, c)."""
    if not (isinstance(width, int) and not isinstance(width, bool) and width >= 1):
        raise ValueError(f"width must be a positive integer, got {width!r}")
    gen = make_generator(seed)
    ub = torch.randn(2 * width, generator=gen, dtype=DTYPE)
    hidden = torch.tanh(x.to(DTYPE)[..., None] * ub[:width] + ub[width:])
    return torch.cat([hidden, torch.ones(*x.shape, 1, dtype=DTYPE)], dim=-1)


def _check_linear_data(Phi_in, Y_in, Phi_out, Y_out, eta):
    if not (isinstance(eta, (int, float)) and not isinstance(eta, bool) and 0 < eta < math.inf):
        raise ValueError(f"eta must be a positive finite inner step size, got {eta!r}")
    if Phi_in.ndim != 3 or Phi_out.ndim != 3:
        raise ValueError(f"features must have shape (n, m, d), got {tuple(Phi_in.shape)} and {tuple(Phi_out.shape)}")
    n, m_in, d = Phi_in.shape
    if Phi_out.shape[0] != n or Phi_out.shape[2] != d:
        raise ValueError(f"Phi_out {tuple(Phi_out.shape)} does not match Phi_in {tuple(Phi_in.shape)} in n or d")
    if tuple(Y_in.shape) != (n, m_in) or tuple(Y_out.shape) != tuple(Phi_out.shape[:2]):
        raise ValueError(f"labels must have shapes {(n, m_in)} and {tuple(Phi_out.shape[:2])}, "
                         f"got {tuple(Y_in.shape)} and {tuple(Y_out.shape)}")
    if min(n, m_in, d, Phi_out.shape[1]) < 1:
        raise ValueError("need at least one task, one sample and one feature")


def _linear_risk(theta, Phi, y):
    return 0.5 * (Phi @ theta - y).pow(2).mean()


def _linear_meta_loss(theta, Phi_in, y_in, Phi_out, y_out, eta):
    return _linear_risk(theta - eta * grad(_linear_risk)(theta, Phi_in, y_in), Phi_out, y_out)


def linear_maml_objective(theta: torch.Tensor, Phi_in: torch.Tensor, Y_in: torch.Tensor, Phi_out: torch.Tensor,
                          Y_out: torch.Tensor, eta: float) -> torch.Tensor:
    """The MAML objective of h_theta = phi^T theta computed by automatic differentiation through
    the inner step (same risk as :func:`maml_objective`: R(h) = 1/(2m) sum (h(x) - y)^2)."""
    _check_linear_data(Phi_in, Y_in, Phi_out, Y_out, eta)
    per = vmap(_linear_meta_loss, in_dims=(None, 0, 0, 0, 0, None))
    return per(theta, Phi_in, Y_in, Phi_out, Y_out, eta).mean()


@dataclass(frozen=True)
class LinearMamlQuadratic:
    """L(theta) = 1/2 theta^T H theta - b^T theta + c (book 2.6): H (d, d) is PSD, b (d,)."""

    H: torch.Tensor
    b: torch.Tensor
    c: float

    def value(self, theta: torch.Tensor) -> torch.Tensor:
        """L at theta (d,) or at a batch of points (..., d)."""
        return 0.5 * ((theta @ self.H) * theta).sum(-1) - theta @ self.b + self.c

    def gradient(self, theta: torch.Tensor) -> torch.Tensor:
        return theta @ self.H - self.b

    def minimiser(self, rtol: float = 1e-12) -> torch.Tensor:
        """The minimum-norm global minimiser H^+ b (eigenvalues below rtol * lambda_max dropped)."""
        evals, evecs = torch.linalg.eigh(self.H)
        keep = evals > rtol * evals[-1]
        return evecs[:, keep] @ ((evecs[:, keep].T @ self.b) / evals[keep])

    def eigenvalues(self) -> torch.Tensor:
        return torch.linalg.eigvalsh(self.H)


def linear_maml_quadratic(Phi_in: torch.Tensor, Y_in: torch.Tensor, Phi_out: torch.Tensor, Y_out: torch.Tensor,
                          eta: float) -> LinearMamlQuadratic:
    """The MAML objective of a fixed linear feature map with squared loss, in closed form.

    Task i's inner step is theta_i = A_i theta + a_i with A_i = I - eta Sigma_in,i,
    Sigma_in,i = Phi_in,i^T Phi_in,i / m_in and a_i = eta Phi_in,i^T y_in,i / m_in; its query
    loss is ||M_i theta - r_i||^2 / (2 m_out) with M_i = Phi_out,i A_i, r_i = y_out,i - Phi_out,i a_i.
    Averaging over tasks: H = (1/n) sum M_i^T M_i / m_out, b = (1/n) sum M_i^T r_i / m_out,
    c = (1/n) sum ||r_i||^2 / (2 m_out). H is PSD whatever eta (> 0) is."""
    _check_linear_data(Phi_in, Y_in, Phi_out, Y_out, eta)
    Phi_in, Y_in, Phi_out, Y_out = (t.to(DTYPE) for t in (Phi_in, Y_in, Phi_out, Y_out))
    n, m_in, d = Phi_in.shape
    m_out = Phi_out.shape[1]
    A = torch.eye(d, dtype=DTYPE) - eta * Phi_in.mT @ Phi_in / m_in            # (n, d, d)
    a = eta * (Phi_in.mT @ Y_in[..., None])[..., 0] / m_in                     # (n, d)
    M = Phi_out @ A                                                             # (n, m_out, d)
    r = Y_out - (Phi_out @ a[..., None])[..., 0]                                # (n, m_out)
    H = (M.mT @ M).mean(0) / m_out
    H = 0.5 * (H + H.T)
    b = (M.mT @ r[..., None])[..., 0].mean(0) / m_out
    c = float(r.pow(2).sum(-1).mean() / (2 * m_out))
    return LinearMamlQuadratic(H, b, c)


def quadratic_gd(q: LinearMamlQuadratic, steps: int, *, lr: float | None = None,
                 theta0: torch.Tensor | None = None) -> torch.Tensor:
    """Iterates (steps + 1, d) of GD theta <- theta - lr (H theta - b) from theta0 (default 0),
    lr = 1 / lambda_max(H) by default; a step >= 2 / lambda_max (no descent) raises ValueError."""
    if not (isinstance(steps, int) and not isinstance(steps, bool) and steps >= 0):
        raise ValueError(f"steps must be a non-negative integer, got {steps!r}")
    top = float(q.eigenvalues()[-1])
    lr = 1.0 / top if lr is None else lr
    if not (isinstance(lr, (int, float)) and 0 < lr < 2.0 / top):
        raise ValueError(f"lr must lie in (0, 2 / lambda_max) = (0, {2.0 / top:.4g}), got {lr!r}")
    theta = torch.zeros_like(q.b) if theta0 is None else theta0.to(DTYPE).clone()
    out = torch.empty(steps + 1, theta.shape[0], dtype=DTYPE)
    out[0] = theta
    step = torch.eye(theta.shape[0], dtype=DTYPE) - lr * q.H  # theta_{t+1} = step theta_t + lr b
    shift = lr * q.b
    for t in range(steps):
        theta = step @ theta + shift
        out[t + 1] = theta
    return out


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
    """Train MAML (:func:`train_neural_maml`) for every width and restart (init seed
    cfg.seed + restart) on one set of sine tasks, then evaluate :func:`optimality_terms` at every
    final point against the best final point of all runs. The global minimiser of a neural MAML
    objective is unknown; the bound holds for any comparator, and the best point found is the
    sharpest one available (its own gap is 0)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        tasks = sine_tasks(cfg.n, cfg.m_in, cfg.m_out, seed=cfg.seed)
        runs = [[train_neural_maml(w, tasks, eta=cfg.eta, lr=cfg.lr, steps=cfg.steps, seed=cfg.seed + r)
                 for r in range(cfg.restarts)] for w in cfg.widths]
        curves = np.array([[run.objective for run in row] for row in runs])
        best = np.unravel_index(int(curves[:, :, -1].argmin()), curves.shape[:2])
        comparator = runs[best[0]][best[1]].theta
        terms = [[optimality_terms(run.theta, comparator, tasks, cfg.eta) for run in row] for row in runs]
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
