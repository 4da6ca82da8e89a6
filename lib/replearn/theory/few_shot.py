"""A new task learned from few samples: Monte-Carlo errors of its estimators (book 1.1, 1.4).

A new task of the multi-task linear representation model has ``x ~ N(0, I_d)`` and
``y = <theta_*, x> + z`` with ``theta_* = B_* w_*``, ``z ~ N(0, sigma^2)``. Given ``m`` samples:

- :func:`new_task_errors`: least squares on the known representation B_* (a ``k``-dimensional
  regression) versus minimum-norm least squares from scratch in R^d, for one fixed head w_*
  (book 1.1);
- :func:`head_errors`: head-only fine-tuning (least squares of y on B^T x, B frozen) on given
  representations, and least squares from scratch, for heads w_* ~ N(0, I_k) (book 1.4);
- :func:`joint_errors`: gradient descent on the few-shot loss jointly in (B, w) (book 1.4).

Each returns the squared parameter errors ||theta_hat - theta_*||^2 of independent trials,
drawn from one seed and solved in batched calls (:func:`replearn.theory.linear.least_squares`). Their
closed-form means are :func:`replearn.theory.linear.expected_ls_error` and
:func:`replearn.theory.linear.expected_head_error`.
"""

from __future__ import annotations

import math

import torch

from replearn.backend import make_generator, randn
from replearn.checks import check_int
from replearn.theory.linear_federated import local_updates
from replearn.theory.linalg import orthonormal_basis
from replearn.theory.linear import SampledTasks, least_squares

SCRATCH = "from scratch"
KNOWN = "known representation"


def new_task_errors(Bstar: torch.Tensor, w_star: torch.Tensor, m: int, *, noise_std: float,
                    trials: int, seed=0, batch: int | None = None) -> dict:
    """Squared parameter errors of both estimators over ``trials`` independent data sets.

    Each trial draws ``X`` (m, d) with N(0, 1) entries and ``y = X B_* w_* + noise``;
    ``known representation`` fits ``w_hat = least_squares(X B_*, y)`` and reports
    ``||B_* w_hat - theta_*||^2``, ``from scratch`` fits ``theta_hat = least_squares(X, y)``
    (minimum-norm when m < d) and reports ``||theta_hat - theta_*||^2``. Trials are solved
    ``batch`` at a time in one batched call. Returns ``{method: (trials,) tensor}``.
    """
    if Bstar.ndim != 2:
        raise ValueError(f"B_* must be a (d, k) matrix, got shape {tuple(Bstar.shape)}")
    d, k = Bstar.shape
    if k > d:
        raise ValueError(f"k = {k} > d = {d}: the representation cannot have more columns than dimensions")
    if w_star.shape != (k,):
        raise ValueError(f"w_* must have shape ({k},), got {tuple(w_star.shape)}")
    check_int(m, "m (samples of the new task)", 1)
    check_int(trials, "trials", 1)
    batch = trials if batch is None else batch
    check_int(batch, "batch", 1)
    if not noise_std >= 0:
        raise ValueError(f"noise_std must be >= 0, got {noise_std}")
    gen = make_generator(seed)
    theta = Bstar @ w_star
    known, scratch = [], []
    for start in range(0, trials, batch):
        b = min(batch, trials - start)
        X = randn(b, m, d, generator=gen, device=Bstar.device)
        y = X @ theta + noise_std * randn(b, m, generator=gen, device=Bstar.device)
        w_hat = least_squares(X @ Bstar, y)
        known.append((w_hat @ Bstar.T - theta).pow(2).sum(-1))
        scratch.append((least_squares(X, y) - theta).pow(2).sum(-1))
    return {KNOWN: torch.cat(known), SCRATCH: torch.cat(scratch)}


def head_errors(Bs: dict, Bstar: torch.Tensor, m: int, *, noise_std: float, trials: int,
                batch: int, seed) -> dict:
    """New-task errors ||theta_hat - theta_*||^2 of head-only fine-tuning on every
    representation in ``Bs`` ({name: (d, k)}) and of min-norm least squares from scratch.

    Each trial draws ``w_* ~ N(0, I_k)``, ``X`` (m, d) standard Gaussian and
    ``y = X B_* w_* + noise``. Head-only fine-tuning on B is least squares on ``X Q`` with Q
    an orthonormal basis of col(B) (the fitted regressor B w_hat depends on col(B) only).
    Returns ``{name: (trials,) tensor}`` with the key ``"from scratch"`` added.
    """
    gen = make_generator(seed)
    d, k = Bstar.shape
    bases = {name: orthonormal_basis(B) for name, B in Bs.items()}
    out = {name: [] for name in (*Bs, SCRATCH)}
    for start in range(0, trials, batch):
        b = min(batch, trials - start)
        theta = randn(b, k, generator=gen, device=Bstar.device) @ Bstar.T
        X = randn(b, m, d, generator=gen, device=Bstar.device)
        y = (X @ theta.unsqueeze(-1)).squeeze(-1) + noise_std * randn(b, m, generator=gen, device=Bstar.device)
        for name, Q in bases.items():
            fitted = least_squares(X @ Q, y) @ Q.T
            out[name].append((fitted - theta).pow(2).sum(-1))
        out[SCRATCH].append((least_squares(X, y) - theta).pow(2).sum(-1))
    return {name: torch.cat(e) for name, e in out.items()}


def joint_errors(B: torch.Tensor, w: torch.Tensor, Bstar: torch.Tensor, m: int, *, noise_std: float,
                 trials: int, steps: int, lr: float, seed) -> torch.Tensor:
    """New-task errors ||B_s w_s - theta_*||^2 after ``steps`` full-batch GD steps on
    1/(2m) ||X B w - y||^2 jointly in (B, w), started from (B, w), for ``trials`` new tasks
    (w_* ~ N(0, I_k)).

    The step size is ``lr * m / ((sqrt(d) + sqrt(m))^2 (||B||_2^2 + ||w||^2))``, a fraction
    ``lr`` of the usual stability limit with ||X||_2^2 ~ (sqrt(d) + sqrt(m))^2. All trials are
    one batch of clients of :func:`replearn.theory.linear_federated.local_updates`. Book 1.4, Proposition
    ``arm-ft-prop-joint``, bounds the mean below by ``(1 - m/(d - k)) F`` for m <= d - k
    (F: :func:`replearn.theory.linear.head_error_floor` of B), whatever the number of steps.
    """
    gen = make_generator(seed)
    d, k = Bstar.shape
    theta = randn(trials, k, generator=gen, device=Bstar.device) @ Bstar.T
    X = randn(trials, m, d, generator=gen, device=Bstar.device)
    y = (X @ theta.unsqueeze(-1)).squeeze(-1) + noise_std * randn(trials, m, generator=gen, device=Bstar.device)
    scale = float(torch.linalg.matrix_norm(B, ord=2)) ** 2 + float(w.pow(2).sum())
    step = lr * m / ((math.sqrt(d) + math.sqrt(m)) ** 2 * scale)
    B_ft, w_ft = local_updates(B, w, SampledTasks(X, y), None, alpha=step, tau=steps)
    fitted = (B_ft @ w_ft.unsqueeze(-1)).squeeze(-1)
    return (fitted - theta).pow(2).sum(-1)
