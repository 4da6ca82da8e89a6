"""Meta-learning algorithms for the linear representation model.

Average-risk minimisation (ARM) runs gradient descent with step size beta on the average of
the task losses, ``(1/n) sum_i f_i(B, w)``. Its gradients are all evaluated at the same
(B_t, w_t), so nothing adapts to the individual tasks.
"""

from __future__ import annotations

import torch

from .federated import dgd
from .linear import Tasks
from .trajectory import Trajectory


def arm(B0: torch.Tensor, w0: torch.Tensor, tasks: Tasks, *, beta: float, iterations: int) -> Trajectory:
    """ARM: ``iterations`` GD steps with step size beta on (1/n) sum_i f_i (same as D-GD)."""
    return dgd(B0, w0, tasks, alpha=beta, rounds=iterations)


def arm_decomposition(w: torch.Tensor, W: torch.Tensor, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Prior and signal weights of ARM's population step (Collins et al. 2022, Sec. 3):

        B_{t+1} = B_t (I_k - beta w_t w_t^T) + B_* (beta / n) sum_i w_*_i w_t^T.

    Returns ``(prior, signal)``, both k x k: the prior weight ``I_k - beta w_t w_t^T``
    differs from the identity only along w_t, and the signal weight
    ``beta wbar_* w_t^T`` has rank one.
    """
    if w.ndim != 1 or W.ndim != 2 or W.shape[1] != w.shape[0]:
        raise ValueError(f"need w (k,) and heads W (n, k); got {tuple(w.shape)} and {tuple(W.shape)}")
    k = w.shape[0]
    prior = torch.eye(k, dtype=w.dtype, device=w.device) - beta * torch.outer(w, w)
    signal = beta * torch.outer(W.mean(0), w)
    return prior, signal
