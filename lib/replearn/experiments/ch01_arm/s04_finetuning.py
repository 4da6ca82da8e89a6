"""Book 1.4: fine-tuning on ARM's representation keeps an error floor that the true (or FedAvg's)
representation does not have (Collins et al. 2022, Sec. 3; book 1.4, Propositions
``arm-ft-prop-floor`` and ``arm-ft-prop-joint``).

Train a representation on ``n`` tasks of the multi-task linear model, then hand a new task
``theta_* = B_* w_*`` with ``w_* ~ N(0, I_k)`` and ``m`` samples to **head-only
fine-tuning**: least squares of ``y`` on the ``k`` features ``B^T x`` with ``B`` frozen. With
``P_B`` the projector onto col(B), book 1.4, Proposition ``arm-ft-prop-floor``, gives

    E ||B w_hat - theta_*||^2 = F + E_ls(m, k, sigma^2 + F, k - F),
    F = ||(I - P_B) B_*||_F^2,

where ``E_ls(m, p, noise_var, signal_sqnorm)`` is the minimum-norm least-squares error of
book 1.1 (:func:`replearn.theory.linear.expected_ls_error`; the whole right-hand side is
:func:`replearn.theory.linear.expected_head_error`, F is :func:`replearn.theory.linear.head_error_floor`).
The *floor* F does not shrink with m; it is zero only when col(B) = col(B_*).

:func:`run` trains ARM (Collins et al. 2022, Sec. 3) and FedAvg with ``tau`` local steps
from the same random B_0 on the population losses and compares head-only fine-tuning on
B_ARM, on B_FedAvg and on B_* with minimum-norm least squares from scratch in R^d. The
ground truth is either Haar-random or, by default, the construction of
:func:`replearn.theory.lower_bound.adversarial_ground_truth` (book 1.3), on which ARM stays at
distance ``delta`` from B_*. It also fine-tunes ARM's whole model (B, w) by gradient descent
on the few-shot samples; Proposition ``arm-ft-prop-joint`` bounds that error below by
``(1 - m/(d - k)) F`` for m <= d - k, whatever the number of steps. The Monte-Carlo errors are
:func:`replearn.theory.few_shot.head_errors` and :func:`replearn.theory.few_shot.joint_errors` (all trials of
one sample size solved in batched calls).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import torch

from replearn.backend import DTYPE, default_device, derive_seed, make_generator
from replearn.checks import check_int
from replearn.theory.linear_federated import fedavg
from replearn.theory.few_shot import SCRATCH, head_errors, joint_errors
from replearn.theory.linalg import principal_angle_distance, random_orthonormal
from replearn.theory.linear import (expected_head_error, expected_ls_error, ground_truth_representation, head_error_floor,
                       make_heads, population_tasks)
from replearn.theory.lower_bound import adversarial_ground_truth
from replearn.theory.meta import arm
from replearn.settings import Each, Ge, Gt, Lt, Profile, Settings

LEARNED = ("ARM", "FedAvg", "true representation")
METHODS = LEARNED + (SCRATCH,)
JOINT = "ARM + joint GD"


@dataclass(frozen=True)
class FinetuneSettings(Settings):
    """Problem (``d``, ``k``, ``n`` training tasks whose heads have mean norm ``mean_norm``
    and condition number ``cond``; ``delta``: distance of the adversarial B_* from B_0, or
    None for a Haar-random B_*), training (ARM step ``beta`` and ``arm_iterations``; FedAvg
    step ``alpha``, ``tau`` local steps, ``rounds``), the new task (``noise_std``, the sample
    sizes ``ms``, ``trials`` new tasks and data sets per m solved ``batch`` at a time), joint
    fine-tuning (``joint_steps`` GD steps with relative step size ``joint_lr``) and the seed."""

    WORDS = {"n": "training tasks n", "mean_norm": "norm of the heads' mean",
             "cond": "condition number of the heads' covariance", "delta": "distance of B* from B₀ (δ)",
             "beta": "ARM's step size β", "arm_iterations": "ARM's iterations",
             "alpha": "FedAvg's step size α", "tau": "FedAvg's local steps τ", "rounds": "FedAvg's rounds",
             "noise_std": "new task's label noise σ", "ms": "new task's sample sizes m",
             "trials": "new tasks (and data sets) per m", "joint_steps": "joint fine-tuning: gradient steps",
             "joint_lr": "joint fine-tuning: relative step size"}

    d: int = 50
    k: Annotated[int, Ge(1)] = 5
    n: Annotated[int, Ge(1)] = 20
    mean_norm: Annotated[float, Gt(0, why="ARM only sees the mean head")] = 1.0
    cond: Annotated[float, Ge(1, why="a condition number")] = 4.0
    delta: Annotated[float | None, Gt(0, why="or None for a random B_*"), Lt(1)] = 0.5
    beta: Annotated[float, Gt(0, why="a step size")] = 0.3
    arm_iterations: Annotated[int, Ge(1)] = 2000
    alpha: Annotated[float, Gt(0, why="a step size")] = 0.3
    tau: Annotated[int, Ge(1)] = 2
    rounds: Annotated[int, Ge(1)] = 3000
    noise_std: Annotated[float, Ge(0)] = 0.1
    ms: Annotated[tuple[int, ...], Each(Ge(1), entry="every m in ms (samples of the new task)")] = (
        3, 10, 20, 40, 80, 160, 320)
    trials: Annotated[int, Ge(1)] = 1000
    batch: Annotated[int, Ge(1)] = 500
    joint_steps: Annotated[int, Ge(1)] = 300
    joint_lr: Annotated[float, Gt(0, why="a step size")] = 0.5
    seed: int = 0

    PAPER = Profile({"d": 100, "k": 10, "n": 50, "rounds": 6000, "ms": (5, 20, 40, 80, 160, 320, 640),
                     "trials": 4000, "batch": 500},
                    doc="A larger instance (the papers show the fine-tuning gap on images, not in this model).")

    def validate(self) -> None:
        """The relation between the fields (each field's own range is beside it): k < d."""
        super().validate()
        check_int(self.d, "d (needs k < d: a representation that can miss directions)", self.k + 1)


@dataclass(frozen=True)
class FinetuneResult:
    """Per-trial new-task errors ``errors[method]`` (M, trials) at the sample sizes ``ms``,
    their closed-form means ``theory[method]`` (M,; inf where infinite), the floors
    ``floor[method]`` = ||(I - P_B) B_*||_F^2 and distances ``dist[method]`` = dist(B, B_*)
    of the learned representations, and joint GD fine-tuning of ARM's model: errors
    ``joint`` (J, trials) at the sizes ``joint_ms`` with the lower bound ``joint_bound`` (J,)."""

    ms: torch.Tensor
    errors: dict
    theory: dict
    floor: dict
    dist: dict
    joint_ms: torch.Tensor
    joint: torch.Tensor
    joint_bound: torch.Tensor

    def mean(self, method: str) -> torch.Tensor:
        """Monte-Carlo average error at every m (``JOINT`` for joint fine-tuning)."""
        return self._errors(method).mean(-1)

    def sem(self, method: str) -> torch.Tensor:
        """Standard error of :meth:`mean` (sample std / sqrt(trials))."""
        e = self._errors(method)
        return e.std(-1) / math.sqrt(e.shape[-1])

    def z_scores(self, method: str) -> torch.Tensor:
        """(average - theory) / standard error at every m (nan where the theory is infinite)."""
        gap = self.mean(method) - self.theory[method]
        return torch.where(torch.isfinite(gap), gap / self.sem(method), torch.full_like(gap, math.nan))

    def _errors(self, method: str) -> torch.Tensor:
        return self.joint if method == JOINT else self.errors[method]


def train(cfg: FinetuneSettings, device=None) -> tuple[torch.Tensor, dict]:
    """B_* and the final ARM and FedAvg models ``{"ARM": (B, w), "FedAvg": (B, w)}``, trained
    on the population losses of ``cfg.n`` tasks from the same random B_0 (orthonormal) and
    w_0 = 0. With ``cfg.delta`` set, B_* is the adversarial ground truth at distance delta
    from col(B_0)."""
    device = default_device() if device is None else torch.device(device)
    gen = make_generator(cfg.seed)
    W = make_heads(cfg.n, cfg.k, mean_norm=cfg.mean_norm, cond=cfg.cond, seed=gen)
    B0 = random_orthonormal(cfg.d, cfg.k, gen)
    if cfg.delta is None:
        Bstar = ground_truth_representation(cfg.d, cfg.k, gen)
    else:
        Bstar = adversarial_ground_truth(B0, W, cfg.delta, seed=gen)
    Bstar, W, B0 = Bstar.to(device), W.to(device), B0.to(device)
    w0 = torch.zeros(cfg.k, dtype=DTYPE, device=device)
    tasks = population_tasks(Bstar, W)
    models = {"ARM": arm(B0, w0, tasks, beta=cfg.beta, iterations=cfg.arm_iterations).final,
              "FedAvg": fedavg(B0, w0, tasks, alpha=cfg.alpha, tau=cfg.tau, rounds=cfg.rounds).final}
    return Bstar, models


def run(cfg: FinetuneSettings, device=None) -> FinetuneResult:
    """Train ARM and FedAvg (:func:`train`), then Monte-Carlo new-task errors of head-only
    fine-tuning on B_ARM, B_FedAvg and B_* and of least squares from scratch at every m in
    ``cfg.ms``, with the closed forms of Prop. ``arm-ft-prop-floor``; plus joint GD
    fine-tuning of ARM's model at the few-shot sizes m <= d - k with the bound of Prop.
    ``arm-ft-prop-joint``. Every m has its own seeds derived from ``(cfg.seed, m)``."""
    Bstar, models = train(cfg, device)
    Bs = {"ARM": models["ARM"][0], "FedAvg": models["FedAvg"][0], "true representation": Bstar}
    floors = {name: float(head_error_floor(B, Bstar)) for name, B in Bs.items()}
    dists = {name: float(principal_angle_distance(B, Bstar)) for name, B in Bs.items()}
    per_m = [head_errors(Bs, Bstar, m, noise_std=cfg.noise_std, trials=cfg.trials, batch=cfg.batch,
                         seed=derive_seed(cfg.seed, m, 0)) for m in cfg.ms]
    errors = {name: torch.stack([e[name] for e in per_m]).cpu() for name in METHODS}
    var = cfg.noise_std**2
    theory = {name: torch.tensor([expected_head_error(m, cfg.k, var, floors[name]) for m in cfg.ms], dtype=DTYPE)
              for name in LEARNED}
    theory[SCRATCH] = torch.tensor([expected_ls_error(m, cfg.d, var, cfg.k) for m in cfg.ms], dtype=DTYPE)
    joint_ms = [m for m in cfg.ms if m <= cfg.d - cfg.k]
    B_arm, w_arm = models["ARM"]
    joint = [joint_errors(B_arm, w_arm, Bstar, m, noise_std=cfg.noise_std, trials=cfg.trials,
                          steps=cfg.joint_steps, lr=cfg.joint_lr, seed=derive_seed(cfg.seed, m, 1)).cpu()
             for m in joint_ms]
    bound = torch.tensor([(1 - m / (cfg.d - cfg.k)) * floors["ARM"] for m in joint_ms], dtype=DTYPE)
    return FinetuneResult(torch.tensor(cfg.ms), errors, theory, floors, dists, torch.tensor(joint_ms),
                          torch.stack(joint) if joint else torch.empty(0, cfg.trials, dtype=DTYPE), bound)
