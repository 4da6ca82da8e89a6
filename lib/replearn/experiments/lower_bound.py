"""ARM stays stuck on adversarial ground truths (book 1.3, Theorem ``arm-lb-thm``).

Collins et al. (2022, Prop. 1; the same statement for D-GD in Collins et al. 2022, FedAvg
paper) show: for every delta in (0, 1/2], step size, horizon T, head set and full-rank B_0
there is a B_* with dist(B_0, B_*) = delta and dist(B_T, B_*) > 0.7 delta for ARM. Book 1.3
proves the sharper dist(B_t, B_*) >= delta for every t, using the construction of
:func:`replearn.lower_bound.adversarial_ground_truth` (the mean regressor ``B_* wbar_*`` lies
in col(B_0), so col(B_t) never leaves col(B_0)).

This module builds such instances (:func:`make_instance`), checks the bound on many random
instances (:func:`run_sweep`), and measures all principal angles of an ARM run
(:func:`arm_sines`) for the "generic tilt" comparison, where every direction of col(B_0) is
tilted and ARM can improve at most one of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..backend import DTYPE, SeedLike, derive_seed, make_generator, randn
from ..linalg import basis_at_distance, orthonormal_basis
from ..linear import PopulationTasks, make_heads, population_tasks
from ..lower_bound import adversarial_ground_truth
from ..meta import arm
from ..profiles import Settings, check_int

CONSTRUCTIONS = ("adversarial", "generic")


@dataclass(frozen=True)
class Instance:
    """A population problem and an initialisation: ``B0`` (d, k), ``w0`` (k), ``Bstar``
    (d, k, orthonormal) and heads ``W`` (n, k)."""

    B0: torch.Tensor
    w0: torch.Tensor
    Bstar: torch.Tensor
    W: torch.Tensor

    @property
    def tasks(self) -> PopulationTasks:
        return population_tasks(self.Bstar, self.W)

    @property
    def mean_regressor(self) -> torch.Tensor:
        """v = B_* wbar_*, the only part of the tasks that ARM's updates see."""
        return self.Bstar @ self.W.mean(0)



def make_instance(d: int, k: int, n: int, delta: float, *, construction: str = "adversarial",
                  cond: float = 1.0, mean_norm: float = 1.0, b0_scale: float = 1.0,
                  w0_scale: float = 0.0, seed: SeedLike = 0) -> Instance:
    """A random instance at distance ``delta`` from a Gaussian (not orthonormal) B_0.

    ``B0`` has i.i.d. N(0, b0_scale^2 / d) entries (full rank with probability one), the
    heads come from :func:`replearn.linear.make_heads` (``cond``, ``mean_norm``) and
    ``w0`` has N(0, w0_scale^2) entries. ``construction="adversarial"`` tilts one direction
    and puts ``B_* wbar_*`` in col(B_0) (the proof of Theorem ``arm-lb-thm``);
    ``"generic"`` tilts all min(k, d - k) directions by arcsin(delta)
    (:func:`replearn.linalg.basis_at_distance`).
    """
    check_int(k, "k", 2)
    check_int(d, "d", k + 1)
    check_int(n, "n", k + 1)
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta}")
    if construction not in CONSTRUCTIONS:
        raise ValueError(f"construction must be one of {CONSTRUCTIONS}, got {construction!r}")
    if not (b0_scale > 0 and w0_scale >= 0):
        raise ValueError(f"need b0_scale > 0 and w0_scale >= 0, got {b0_scale}, {w0_scale}")
    gen = make_generator(seed)
    W = make_heads(n, k, mean_norm=mean_norm, cond=cond, seed=gen)
    B0 = b0_scale / math.sqrt(d) * randn(d, k, generator=gen)
    w0 = w0_scale * randn(k, generator=gen)
    if construction == "adversarial":
        Bstar = adversarial_ground_truth(B0, W, delta, seed=gen)
    else:
        Bstar = basis_at_distance(B0, delta, None, seed=gen)
    return Instance(B0, w0, Bstar, W)


def stable_step(inst: Instance) -> float:
    """A curvature scale ``1 / (||B_0||_2^2 + max_i ||w_*_i||^2 / sigma_min(B_0)^2)``.

    Near a fit B w = theta the loss 1/2 ||B w - theta||^2 has curvature about
    ||B||^2 + ||w||^2, and a head fitted on B_0 has ||w|| <= ||theta|| / sigma_min(B_0);
    step sizes that are a fraction of this scale keep ARM (and FedAvg) from diverging.
    """
    s = torch.linalg.svdvals(inst.B0)
    heads = float(inst.W.norm(dim=1).max()) ** 2
    return 1.0 / (float(s[0]) ** 2 + heads / float(s[-1]) ** 2)


def arm_sines(traj_B: torch.Tensor, Bstar: torch.Tensor) -> torch.Tensor:
    """Sines of all principal angles between col(B_t) and col(B_*), descending, (T + 1, k).

    They are the singular values of (I - P_{B_t}) Q_*; the first column is dist(B_t, B_*).
    """
    Q = orthonormal_basis(traj_B)
    Qs = orthonormal_basis(Bstar)
    return torch.linalg.svdvals(Qs - Q @ (Q.mT @ Qs))


@dataclass(frozen=True)
class LowerBoundSweepSettings(Settings):
    """Random adversarial instances: how many, the ranges of d (k is drawn in [2, min(k_max,
    d - 1)] and n in [k + 1, n_max]), the largest head condition number and mean norm, the
    largest horizon T, the range of the step as a fraction of :func:`stable_step`, and the seed.
    delta is uniform on (0, 1/2] as in the theorem."""

    instances: int = 200
    d_min: int = 3
    d_max: int = 30
    k_max: int = 6
    n_max: int = 30
    cond_max: float = 100.0
    mean_norm_max: float = 2.0
    T_max: int = 150
    step_fraction: tuple[float, float] = (0.05, 0.5)
    seed: int = 0

    @classmethod
    def paper(cls):
        """More and larger instances with longer runs."""
        return cls(instances=2000, d_max=100, k_max=20, n_max=100, T_max=1000)

    def validate(self) -> None:
        """Raise ValueError on inconsistent settings."""
        super().validate()
        check_int(self.instances, "instances", 1)
        check_int(self.d_min, "d_min", 3)
        check_int(self.d_max, "d_max", self.d_min)
        check_int(self.k_max, "k_max", 2)
        check_int(self.n_max, "n_max", min(self.k_max, self.d_max - 1) + 1)
        check_int(self.T_max, "T_max", 1)
        check_int(self.seed, "seed", 0)
        if not (self.cond_max >= 1 and self.mean_norm_max >= 0):
            raise ValueError(f"need cond_max >= 1 and mean_norm_max >= 0, got {self.cond_max}, "
                             f"{self.mean_norm_max}")
        if len(self.step_fraction) != 2:
            raise ValueError(f"step_fraction must be a pair (low, high), got {self.step_fraction!r}")
        lo, hi = self.step_fraction
        if not 0 < lo <= hi < 1:
            raise ValueError(f"step_fraction must satisfy 0 < low <= high < 1, got {self.step_fraction}")


@dataclass(frozen=True)
class LowerBoundSweepResult:
    """One entry per instance: the drawn ``d, k, n, delta, beta, T`` and ARM's final
    distance ``dist_T`` and smallest distance ``min_dist`` over t = 0..T."""

    d: torch.Tensor
    k: torch.Tensor
    n: torch.Tensor
    delta: torch.Tensor
    beta: torch.Tensor
    T: torch.Tensor
    dist_T: torch.Tensor
    min_dist: torch.Tensor

    @property
    def ratio_T(self) -> torch.Tensor:
        """dist(B_T, B_*) / delta (the theorem says > 0.7; book 1.3 proves >= 1)."""
        return self.dist_T / self.delta

    @property
    def ratio_min(self) -> torch.Tensor:
        """min_t dist(B_t, B_*) / delta."""
        return self.min_dist / self.delta


def _draw_and_run(cfg: LowerBoundSweepSettings, i: int) -> tuple:
    """Draw instance ``i`` of the sweep, run ARM on it, return its row of the result."""
    gen = make_generator(derive_seed(cfg.seed, i))
    u = torch.rand(5, generator=gen, dtype=DTYPE).tolist()
    d = int(torch.randint(cfg.d_min, cfg.d_max + 1, (1,), generator=gen))
    k = int(torch.randint(2, min(cfg.k_max, d - 1) + 1, (1,), generator=gen))
    n = int(torch.randint(k + 1, cfg.n_max + 1, (1,), generator=gen))
    T = int(torch.randint(1, cfg.T_max + 1, (1,), generator=gen))
    delta = 0.5 * (1.0 - u[0])                        # uniform on (0, 1/2]
    cond = cfg.cond_max ** u[1]                       # log-uniform on [1, cond_max]
    inst = make_instance(d, k, n, delta, cond=cond, mean_norm=cfg.mean_norm_max * u[2],
                         b0_scale=2.0 ** (2 * u[3] - 1), w0_scale=0.1, seed=gen)
    lo, hi = cfg.step_fraction
    beta = (lo + (hi - lo) * u[4]) * stable_step(inst)
    dist = arm(inst.B0, inst.w0, inst.tasks, beta=beta, iterations=T).dist(inst.Bstar)
    return d, k, n, delta, beta, T, float(dist[-1]), float(dist.min())


def run_sweep(cfg: LowerBoundSweepSettings) -> LowerBoundSweepResult:
    """Run ARM on ``cfg.instances`` random adversarial instances (Theorem ``arm-lb-thm``).

    Instance i draws, from its own seed derived from ``(cfg.seed, i)``: d in [d_min, d_max],
    k in [2, min(k_max, d - 1)], n in [k + 1, n_max], delta uniform on (0, 1/2], a head
    condition number log-uniform on [1, cond_max], a mean-head norm uniform on
    [0, mean_norm_max], a Gaussian B_0 of random scale, a small random w_0, T in [1, T_max]
    and beta a random fraction (``step_fraction``) of :func:`stable_step`.
    """
    rows = [_draw_and_run(cfg, i) for i in range(cfg.instances)]
    cols = list(zip(*rows))
    ints = [torch.tensor(c) for c in (cols[0], cols[1], cols[2])]
    floats = [torch.tensor(c, dtype=DTYPE) for c in (cols[3], cols[4])]
    return LowerBoundSweepResult(*ints, *floats, torch.tensor(cols[5]),
                                 torch.tensor(cols[6], dtype=DTYPE), torch.tensor(cols[7], dtype=DTYPE))
