"""Ground truths that ARM / distributed GD cannot find (Collins et al. 2022, Prop. 1).

Population ARM on the tasks (B_*, W) only ever sees the mean regressor
``v = B_* wbar_*``: its representation step is ``B_{t+1} = B_t - beta (B_t w_t - v) w_t^T``.
By induction col(B_t) stays inside col(B_0) + span(v). If B_* is chosen so that v lies in
col(B_0) while col(B_*) leaves col(B_0) at angle arcsin(delta), then col(B_t) never leaves
col(B_0) and dist(B_T, B_*) >= dist(B_0, B_*) = delta for every T, step size and head set.

:func:`make_instance` draws such an instance around a Gaussian B_0 (or, for comparison, one whose
every direction is tilted), and :func:`stable_step` gives the step-size scale at which ARM and
FedAvg run on it (book 1.3 and 4.6, the ARM explorer).

On population losses, D-GD on the weighted global objective ``sum_i p_i f_i`` is ARM with the
weighted mean head ``sum_i p_i w_*_i`` (Collins et al. 2022, FedAvg paper, Prop. 1, for any
client weights): :func:`weighted_adversarial_instance` applies the construction to the heads
rescaled by ``M p_i``, whose plain mean is the weighted one (book 4.6).
"""

from __future__ import annotations

import math

import torch

from replearn.backend import DTYPE, SeedLike, make_generator, randn
from replearn.checks import check_int, check_number, check_same_kind, check_tensor
from replearn.theory.linalg import basis_at_distance
from replearn.theory.linear import Problem, make_heads

CONSTRUCTIONS = ("adversarial", "generic")


def adversarial_ground_truth(B0: torch.Tensor, W: torch.Tensor, delta: float,
                             seed: SeedLike = 0) -> torch.Tensor:
    """A B_* in O^{d x k} with dist(B0, B_*) = delta whose mean regressor lies in col(B0).

    Needs d > k >= 2. The tilted direction is put last and the basis is rotated so that
    ``B_* wbar_*`` points along an untilted direction. ARM from B0 on (B_*, W) then keeps
    dist(B_t, B_*) >= delta at every iteration (module docstring).
    """
    check_number(delta, "delta", low=0.0, high=1.0, low_open=True, high_open=True)
    check_tensor(B0, "B0", ndim=2)
    check_tensor(W, "W (heads)")
    check_same_kind(("B0", B0), ("W (heads)", W))
    k = B0.shape[-1]
    if k < 2:
        raise ValueError("the construction needs k >= 2: with k = 1 ARM does recover col(B_*)")
    if W.ndim != 2 or W.shape[1] != k:
        raise ValueError(f"heads W must have shape (n, {k}), got {tuple(W.shape)}")
    basis = basis_at_distance(B0, delta, 1, seed).flip(1)  # tilted column last
    mean = W.mean(0).to(B0)
    R = torch.eye(k, dtype=B0.dtype, device=B0.device)
    norm = mean.norm()
    if norm > 0:
        # Householder reflection H with H (mean / |mean|) = e_1, so B_* wbar = |wbar| basis[:, 0].
        u = mean / norm - R[0]
        if u.norm() > 1e-12:
            u = u / u.norm()
            R = R - 2.0 * torch.outer(u, u)
    return basis @ R


def make_instance(d: int, k: int, n: int, delta: float, *, construction: str = "adversarial",
                  cond: float = 1.0, mean_norm: float = 1.0, b0_scale: float = 1.0,
                  w0_scale: float = 0.0, seed: SeedLike = 0) -> Problem:
    """A random instance at distance ``delta`` from a Gaussian (not orthonormal) B_0.

    ``B0`` has i.i.d. N(0, b0_scale^2 / d) entries (full rank with probability one), the
    heads come from :func:`replearn.theory.linear.make_heads` (``cond``, ``mean_norm``) and
    ``w0`` has N(0, w0_scale^2) entries. ``construction="adversarial"`` tilts one direction
    and puts ``B_* wbar_*`` in col(B_0) (:func:`adversarial_ground_truth`, the proof of book 1.3,
    Theorem ``arm-lb-thm``); ``"generic"`` tilts all min(k, d - k) directions by arcsin(delta)
    (:func:`replearn.theory.linalg.basis_at_distance`). Draws, from ``seed``: the heads, B_0, w_0, B_*.
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
    return Problem(Bstar, W, B0, w0)


def stable_step(problem: Problem) -> float:
    """A curvature scale ``1 / (||B_0||_2^2 + max_i ||w_*_i||^2 / sigma_min(B_0)^2)``.

    Near a fit B w = theta the loss 1/2 ||B w - theta||^2 has curvature about
    ||B||^2 + ||w||^2, and a head fitted on B_0 has ||w|| <= ||theta|| / sigma_min(B_0);
    step sizes that are a fraction of this scale keep ARM (and FedAvg) from diverging.
    """
    s = torch.linalg.svdvals(problem.B0)
    heads = float(problem.W.norm(dim=1).max()) ** 2
    return 1.0 / (float(s[0]) ** 2 + heads / float(s[-1]) ** 2)


def weighted_adversarial_instance(d: int, k: int, M: int, delta: float, weights: torch.Tensor, *,
                                  cond: float, mean_norm: float, seed: int = 0) -> Problem:
    """An instance whose B_* defeats D-GD on the objective weighted by ``weights`` (M,).

    Draws B_0, w_0 (entries N(0, 0.1^2)) and M heads as :func:`make_instance` from ``seed``, then
    builds B_* with :func:`adversarial_ground_truth` (from ``seed + 1``) from the heads scaled by
    ``M p_i`` (p = weights / sum): their mean is the weighted mean head, so the weighted mean
    regressor lies in col(B_0).
    """
    inst = make_instance(d, k, M, delta, cond=cond, mean_norm=mean_norm, w0_scale=0.1, seed=seed)
    p = torch.as_tensor(weights, dtype=DTYPE)
    if p.shape != (M,) or not bool((p > 0).all()):
        raise ValueError(f"weights must be {M} positive numbers, got shape {tuple(p.shape)}")
    scaled = M * (p / p.sum())[:, None] * inst.W
    Bstar = adversarial_ground_truth(inst.B0, scaled, delta, seed=seed + 1)
    return Problem(Bstar, inst.W, inst.B0, inst.w0)
