"""Average-risk minimisation (ARM) on the linear representation model: the iterates, their
prior/signal decomposition and the subspace floor ARM cannot leave (Collins et al. 2022).

Average-risk minimisation (ARM) runs gradient descent with step size beta on the average of
the task losses, ``(1/n) sum_i f_i(B, w)``. Its gradients are all evaluated at the same
(B_t, w_t), so nothing adapts to the individual tasks. On population tasks that objective is
one regression onto the mean regressor plus a constant (:func:`average_risk`,
:func:`average_risk_minimum`; book 1.2).
"""

from __future__ import annotations

import torch

from replearn.checks import check_count, check_positive, check_same_kind, check_tensor
from replearn.theory.linear_federated import dgd
from replearn.theory.linalg import orthonormal_basis
from replearn.theory.linear import Tasks, predict
from replearn.theory.trajectory import Trajectory


def average_risk(B: torch.Tensor, w: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """ARM's objective on population tasks, (1/n) sum_i 1/2 ||B w - theta_*_i||^2, for a stack of
    models B (T, d, k), w (T, k) and targets ``theta`` (n, d) (:func:`replearn.theory.linear.targets`);
    shape (T,)."""
    return 0.5 * (predict(B, w).unsqueeze(-2) - theta).pow(2).sum(-1).mean(-1)


def average_risk_minimum(W: torch.Tensor) -> float:
    """min over (B, w) of (1/n) sum_i f_i(B, w) = (1/(2n)) sum_i ||w_*_i - wbar_*||^2 (book 1.2).

    With B_* orthonormal, (1/n) sum_i 1/2 ||Bw - B_* w_*_i||^2 = 1/2 ||Bw - B_* wbar_*||^2 plus
    this constant, and the first term vanishes at any (B, w) with B w = B_* wbar_*.
    """
    check_tensor(W, "W (heads)", ndim=2)
    if W.shape[0] == 0:
        raise ValueError("W (heads) has no rows: there must be at least one task")
    return 0.5 * float((W - W.mean(0)).pow(2).sum(-1).mean())


def arm(B0: torch.Tensor, w0: torch.Tensor, tasks: Tasks, *, beta: float, iterations: int) -> Trajectory:
    """ARM: ``iterations`` GD steps with step size beta on (1/n) sum_i f_i (same as D-GD)."""
    check_positive(beta, "beta (ARM's step size)")
    check_count(iterations, "iterations", 0)
    return dgd(B0, w0, tasks, alpha=beta, rounds=iterations)


def arm_decomposition(w: torch.Tensor, W: torch.Tensor, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Prior and signal weights of ARM's population step (Collins et al. 2022, Sec. 3):

        B_{t+1} = B_t (I_k - beta w_t w_t^T) + B_* (beta / n) sum_i w_*_i w_t^T.

    Returns ``(prior, signal)``, both k x k: the prior weight ``I_k - beta w_t w_t^T``
    differs from the identity only along w_t, and the signal weight
    ``beta wbar_* w_t^T`` has rank one.
    """
    check_tensor(w, "w")
    check_tensor(W, "W (heads)")
    if w.ndim != 1 or W.ndim != 2 or W.shape[1] != w.shape[0] or W.shape[0] == 0:
        raise ValueError(f"need w (k,) and heads W (n, k) with n >= 1; got {tuple(w.shape)} and "
                         f"{tuple(W.shape)}")
    check_same_kind(("w", w), ("W (heads)", W))
    check_positive(beta, "beta")
    k = w.shape[0]
    prior = torch.eye(k, dtype=w.dtype, device=w.device) - beta * torch.outer(w, w)
    signal = beta * torch.outer(W.mean(0), w)
    return prior, signal


def arm_subspace_floor(B0: torch.Tensor, Bstar: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """A lower bound on dist(B_t, B_*) valid for every ARM iterate (population losses).

    ARM's step ``B_{t+1} = B_t - beta (B_t w_t - v) w_t^T`` with ``v = B_* wbar_*`` only adds
    multiples of vectors in col(B_t) + span(v), so col(B_t) stays inside
    ``S = col(B_0) + span(v)`` for all t, every beta and every w_0. Since P_{B_t} <= P_S,

        dist(B_t, B_*) = ||(I - P_{B_t}) B_*||_2 >= ||(I - P_S) B_*||_2,

    which is what this returns (B_* with orthonormal columns). It can be computed before
    training and is close to dist(B_0, B_*) when d >> k: one new direction cannot fix k.
    """
    check_tensor(B0, "B0")
    check_tensor(Bstar, "Bstar")
    check_tensor(W, "W (heads)")
    check_same_kind(("B0", B0), ("Bstar", Bstar), ("W (heads)", W))
    if B0.ndim != 2 or Bstar.ndim != 2 or B0.shape != Bstar.shape:
        raise ValueError(f"B0 and B_* must both be (d, k); got {tuple(B0.shape)} and {tuple(Bstar.shape)}")
    if W.ndim != 2 or W.shape[1] != Bstar.shape[1] or W.shape[0] == 0:
        raise ValueError(f"heads W must have shape (n, {Bstar.shape[1]}) with n >= 1, got {tuple(W.shape)}")
    v = Bstar @ W.mean(0)
    S = orthonormal_basis(torch.cat([B0, v.unsqueeze(-1)], dim=1))
    return torch.linalg.matrix_norm(Bstar - S @ (S.mT @ Bstar), ord=2)
