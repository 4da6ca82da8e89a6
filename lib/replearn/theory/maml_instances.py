"""The linear instances of the MAML / ANIL chapter: the population instance with a structured
start shared by book 2.1-2.3 (settings and construction) and the settings checks shared by 2.4-2.5.

The population instance is the setting of Collins, Mokhtari, Oh & Shakkottai (ICML 2022),
Sec. 3-4: n tasks with losses f_i(B, w) = 1/2 ||B w - B_* w_*_i||^2, heads with mean zero whose
second moment (1/n) sum_i w_*_i w_*_i^T has eigenvalues in [mu_*^2, L_*^2] = [scale^2 / cond,
scale^2] exactly (``linear.make_heads(exact=True)``), and the structured initialisation of the
paper's main theorem: B_0 an orthonormal basis at distance ``delta0`` from col(B_*) scaled by
1/sqrt(alpha) (so Delta_0 = I - alpha B_0^T B_0 = 0) and w_0 = 0
(:func:`replearn.theory.maml.structured_init`).

- :class:`PopulationSettings`: the instance, the step sizes and the run length; the settings
  of book 2.1-2.3 extend it with what their sections sweep;
- :func:`make_problem`: the :class:`replearn.theory.linear.Problem` of such settings, optionally with
  another head condition number or inner step, or with degenerate heads (no task diversity);
- :func:`check_instance_settings`: the checks of d, k, cond, mean_norm, alpha, beta and delta0
  shared by the settings of book 2.4 and 2.5.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from replearn.theory import linear, maml
from replearn.backend import default_device
from replearn.checks import check_int, check_nonnegative, check_number, check_positive
from replearn.settings import Ge, Gt, Lt, Profile, Settings

__all__ = ["PopulationSettings", "check_instance_settings", "make_problem"]


@dataclass(frozen=True)
class PopulationSettings(Settings):
    """Dimension d, representation size k, n tasks whose head second moment has condition
    number ``cond`` (mu_*^2 = scale^2 / cond, L_*^2 = scale^2) and mean of norm ``mean_norm``;
    structured start at distance ``delta0``; inner step ``alpha``, outer step ``beta``,
    ``iterations`` outer steps, and the seed."""

    d: int = 20
    k: Annotated[int, Ge(1)] = 3
    n: int = 20
    cond: Annotated[float, Ge(1, why="a condition number")] = 2.0
    scale: Annotated[float, Gt(0)] = 1.0
    mean_norm: Annotated[float, Ge(0)] = 0.0
    delta0: Annotated[float, Ge(0, why="a distance"), Lt(1)] = 0.5
    alpha: Annotated[float, Gt(0, why="the inner step size")] = 0.25
    beta: Annotated[float, Gt(0, why="the outer step size")] = 0.5
    iterations: Annotated[int, Ge(1)] = 300
    seed: int = 0

    PAPER = Profile({"d": 100, "k": 5, "n": 100, "iterations": 500},
                    doc="A larger instance (d = 100, k = 5, n = 100 tasks), the size of the population "
                        "simulations of Collins et al. (2022); heads with exact diversity replace their "
                        "Gaussian draws so that mu_*^2 is known.")

    def validate(self) -> None:
        """The relations between the fields (each field's own range is beside it): k < d and
        n >= k + 1 tasks."""
        super().validate()
        check_int(self.d, "d (needs 1 <= k < d)", self.k + 1)
        check_int(self.n, "n (tasks; diverse heads need n >= k + 1)", self.k + 1)

    @property
    def mu2(self) -> float:
        """mu_*^2, the smallest eigenvalue of (1/n) sum_i w_*_i w_*_i^T (mean_norm = 0)."""
        return self.scale**2 / self.cond


def make_problem(cfg: PopulationSettings, *, cond: float | None = None, alpha: float | None = None,
                 degenerate: bool = False, device=None) -> linear.Problem:
    """The instance of ``cfg`` (optionally with another head condition number ``cond`` or inner
    step ``alpha``, which rescales B_0). ``degenerate=True`` projects the heads onto a random
    (k-1)-dimensional subspace of R^k (:func:`replearn.theory.linear.degenerate_heads`), so that they
    no longer span it (no task diversity). Seeds: B_* ``cfg.seed``, heads ``cfg.seed + 1``,
    start ``cfg.seed + 2``, degenerate projection ``cfg.seed + 3``."""
    cond = cfg.cond if cond is None else cond
    alpha = cfg.alpha if alpha is None else alpha
    device = default_device() if device is None else torch.device(device)
    Bstar = linear.ground_truth_representation(cfg.d, cfg.k, seed=cfg.seed, device=device)
    W = linear.make_heads(cfg.n, cfg.k, mean_norm=cfg.mean_norm, cond=cond, scale=cfg.scale,
                          seed=cfg.seed + 1, device=device)
    if degenerate:
        W = linear.degenerate_heads(W, cfg.seed + 3)
    B0, w0 = maml.structured_init(Bstar, alpha, cfg.delta0, seed=cfg.seed + 2)
    return linear.Problem(Bstar, W, B0, w0)


def check_instance_settings(cfg) -> None:
    """The checks shared by the linear-model settings of book 2.4 and 2.5: integers
    1 <= k < d, a condition number ``cond`` >= 1, ``mean_norm`` >= 0 (where the settings have
    one), positive step sizes ``alpha`` and ``beta``, and a start distance ``delta0`` in (0, 1).
    Raises ValueError naming the first bad field."""
    check_int(cfg.k, "k", 1)
    check_int(cfg.d, "d (needs 1 <= k < d)", cfg.k + 1)
    check_number(cfg.cond, "cond (a condition number)", low=1.0)
    if hasattr(cfg, "mean_norm"):
        check_nonnegative(cfg.mean_norm, "mean_norm")
    check_positive(cfg.alpha, "the step size alpha")
    check_positive(cfg.beta, "the step size beta")
    check_number(cfg.delta0, "delta0", low=0.0, high=1.0, low_open=True, high_open=True)
