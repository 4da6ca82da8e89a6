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

import numpy as np
import torch

from replearn.theory import sinusoid
from replearn.checks import check_int, check_ints, check_positive
from replearn.book.profiles import Settings


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
