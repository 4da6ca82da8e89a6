"""Ground truths that ARM / distributed GD cannot find (Collins et al. 2022, Prop. 1).

Population ARM on the tasks (B_*, W) only ever sees the mean regressor
``v = B_* wbar_*``: its representation step is ``B_{t+1} = B_t - beta (B_t w_t - v) w_t^T``.
By induction col(B_t) stays inside col(B_0) + span(v). If B_* is chosen so that v lies in
col(B_0) while col(B_*) leaves col(B_0) at angle arcsin(delta), then col(B_t) never leaves
col(B_0) and dist(B_T, B_*) >= dist(B_0, B_*) = delta for every T, step size and head set.
"""

from __future__ import annotations

import torch

from .backend import SeedLike
from .checks import check_number, check_same_kind, check_tensor
from .linalg import basis_at_distance


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
