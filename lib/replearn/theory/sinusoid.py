"""Sinusoid regression tasks and small MLP meta-learners (book 2.6 and 3.5).

**Tasks** (:func:`sinusoid_tasks`). Task i is ``y = a_i sin(x - b_i)`` with amplitude and phase
drawn uniformly, ``support`` points for adaptation and ``query`` points to evaluate the adapted
model, all inputs ``x ~ U[x_range]``; the layout is (n, points). The defaults are the family of
Finn, Abbeel & Levine (ICML 2017): ``a ~ U[0.1, 5]``, ``b ~ U[0, pi]``, ``x ~ U[-5, 5]``.
Each range is given by its two ends in draw order, ``value = end_0 + (end_1 - end_0) u`` with
``u ~ U[0, 1)``, so ``phase=(0, -pi)`` is the family ``y = a sin(x + phi)``, ``phi ~ U[0, pi]``
of book 2.6, drawn with exactly the same numbers as ``phi = pi u``.

**A tanh MLP and exact MAML** (book 2.6; Wang, Cai, Yang & Wang, ICML 2020). The model
:func:`tanh_mlp` is ``h_theta(x) = c + sum_j v_j tanh(u_j x + b_j)`` with theta = (u, b, v, c)
flattened; MAML takes one inner gradient step ``eta`` on the support risk
``R(h) = 1/(2m) sum (h(x) - y)^2`` of every task and averages the query risks of the adapted
models (:func:`maml_objective`, its exact gradient :func:`maml_gradient`, full-batch GD
:func:`train_neural_maml`). :func:`optimality_terms` measures the terms of the optimality-gap
bound of Wang et al. (2020, Theorem 1) at a trained point. With the hidden layer frozen
(:func:`random_features`) the MAML objective is a convex quadratic in the output layer
(:func:`linear_maml_quadratic`, minimised by :func:`quadratic_gd`; the same closed form as
:func:`replearn.theory.maml.head_quadratic` with the identity representation).

**A ReLU MLP with Reptile and ARUBA** (book 3.5; Khodak, Balcan & Talwalkar 2019, blog
"Adaptive gradient-based meta-learning", last section). The model :func:`relu_mlp` is
1 -> hidden -> hidden -> 1 with ReLU and parameters in the six groups :data:`GROUPS`, each with
a leading task axis so that a batch of tasks adapts at once (:func:`adapt`: ``steps``
full-batch gradient steps on the support mean squared error with one learning rate per group).
:func:`reptile` meta-learns the initialisation, phi <- phi + beta_k (mean theta_hat - phi) with
beta_k decaying linearly from ``meta_step`` to 0, and optionally ARUBA's per-group rates
eta_g = sqrt((B_g + eps_t) / (G_g + zeta_t)) with B_g = 1/2 sum over past tasks of
||phi_g - theta_hat_g||^2 and G_g the sum of their squared gradients (all steps, all coordinates
of the group), t = number of tasks seen. Smoothing (the blog leaves it open; the form of
:mod:`replearn.theory.aruba`): zeta_t = ``smoothing`` G_1g t^``power`` with G_1g the mean
squared-gradient sum of group g on the first meta-batch (the network has no a priori gradient
bound), and eps_t = eta0^2 zeta_t, so the first meta-batch runs with eta0 in every group.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch.func import grad, jacrev, vmap

from replearn.backend import DTYPE, SeedLike, make_generator
from replearn.checks import check_bool, check_int, check_number, check_positive, check_positives

GROUPS = ("W1", "b1", "W2", "b2", "W3", "b3")
LAYERS = {"layer 1": ("W1", "b1"), "layer 2": ("W2", "b2"), "head": ("W3", "b3")}


# --------------------------------------------------------------------------- tasks

@dataclass(frozen=True)
class SinusoidTasks:
    """A batch of n sinusoid tasks: support points ``x_support``, ``y_support`` (n, support),
    query points ``x_query``, ``y_query`` (n, query), and each task's ``amplitude`` a and
    ``phase`` b (n,), with y = a sin(x - b)."""

    x_support: torch.Tensor
    y_support: torch.Tensor
    x_query: torch.Tensor
    y_query: torch.Tensor
    amplitude: torch.Tensor
    phase: torch.Tensor


def _check_range(value, name: str) -> tuple[float, float]:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"{name} must be a pair (end_0, end_1) of numbers, got {value!r}")
    return check_number(value[0], f"{name}[0]"), check_number(value[1], f"{name}[1]")


def sinusoid_tasks(n: int, support: int, query: int, *, amplitude: tuple = (0.1, 5.0),
                   phase: tuple = (0.0, math.pi), x_range: tuple = (-5.0, 5.0),
                   seed: SeedLike = 0) -> SinusoidTasks:
    """n tasks y = a sin(x - b) with ``support`` and ``query`` points each (module docstring).

    Draws, from ``seed`` and in this order, the amplitudes (n,), the phases (n,), the support
    inputs (n, support) and the query inputs (n, query); every range is uniform between its two
    ends, ``end_0 + (end_1 - end_0) u``. The defaults are Finn et al. (2017)."""
    check_int(n, "n (tasks)", 1)
    check_int(support, "support (points per task)", 1)
    check_int(query, "query (points per task)", 1)
    (a0, a1), (b0, b1), (x0, x1) = (_check_range(r, name) for r, name in
                                    ((amplitude, "amplitude"), (phase, "phase"), (x_range, "x_range")))
    gen = make_generator(seed)
    a = a0 + (a1 - a0) * torch.rand(n, 1, generator=gen, dtype=DTYPE)
    b = b0 + (b1 - b0) * torch.rand(n, 1, generator=gen, dtype=DTYPE)
    xs = x0 + (x1 - x0) * torch.rand(n, support, generator=gen, dtype=DTYPE)
    xq = x0 + (x1 - x0) * torch.rand(n, query, generator=gen, dtype=DTYPE)
    return SinusoidTasks(xs, a * torch.sin(xs - b), xq, a * torch.sin(xq - b), a.flatten(), b.flatten())


# --------------------------------------------------------------------------- a tanh MLP and exact MAML

def tanh_mlp_size(width: int) -> int:
    """The number of parameters 3 width + 1 of :func:`tanh_mlp`."""
    return 3 * check_int(width, "width (hidden units)", 1) + 1


def tanh_mlp(theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """h_theta(x) = c + sum_j v_j tanh(u_j x + b_j), theta = (u, b, v, c) flattened (3 width + 1,);
    ``x`` of any shape, the output has the same shape."""
    p = (theta.shape[0] - 1) // 3
    u, b, v, c = theta[:p], theta[p:2 * p], theta[2 * p:3 * p], theta[-1]
    return torch.tanh(x[..., None] * u + b) @ v + c


def _risk(theta, x, y):
    return 0.5 * (tanh_mlp(theta, x) - y).pow(2).mean()


def _adapted(theta, x_in, y_in, eta):
    return theta - eta * grad(_risk)(theta, x_in, y_in)


def _meta_loss(theta, x_in, y_in, x_out, y_out, eta):
    return _risk(_adapted(theta, x_in, y_in, eta), x_out, y_out)


def maml_objective(theta: torch.Tensor, tasks: SinusoidTasks, eta: float) -> torch.Tensor:
    """L(theta) = (1/n) sum_i R_i^query(theta - eta grad R_i^support(theta)), R(h) = 1/(2m) sum (h(x) - y)^2
    (the one-step MAML objective of Wang et al. 2020 for :func:`tanh_mlp`)."""
    per = vmap(_meta_loss, in_dims=(None, 0, 0, 0, 0, None))
    return per(theta, tasks.x_support, tasks.y_support, tasks.x_query, tasks.y_query, eta).mean()


def maml_gradient(theta: torch.Tensor, tasks: SinusoidTasks, eta: float) -> torch.Tensor:
    """The exact gradient of :func:`maml_objective` (through the inner step)."""
    per = vmap(grad(_meta_loss), in_dims=(None, 0, 0, 0, 0, None))
    return per(theta, tasks.x_support, tasks.y_support, tasks.x_query, tasks.y_query, eta).mean(0)


@dataclass(frozen=True)
class NeuralRun:
    """A :func:`train_neural_maml` run: the final parameters ``theta`` and, at every step
    0..steps, the objective L(theta_t) and the gradient norm ||grad L(theta_t)||."""

    theta: torch.Tensor
    objective: np.ndarray
    grad_norm: np.ndarray


def train_neural_maml(width: int, tasks: SinusoidTasks, *, eta: float, lr: float, steps: int,
                      seed: SeedLike = 0) -> NeuralRun:
    """Full-batch GD with step ``lr`` on :func:`maml_objective` of the width-``width``
    :func:`tanh_mlp` from a random start (N(0, 1) input weights and biases, N(0, 1/width)
    output weights, c = 0). Raises ValueError if it blows up."""
    check_int(width, "width (hidden units)", 1)
    check_positive(eta, "eta (inner step)")
    check_positive(lr, "lr (outer step)")
    check_int(steps, "steps", 0)
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


def optimality_terms(omega: torch.Tensor, comparator: torch.Tensor, tasks: SinusoidTasks,
                     eta: float) -> OptimalityTerms:
    """The optimality-gap bound of Wang et al. (2020, Theorem 1) for :func:`maml_objective`.

    Inner products are over the query points of all tasks: <a, b> = (1/n) sum_i sum_j a_ij b_ij.
    g_ij = (h_{omega_i}(x_ij) - y_ij) / query is the derivative of the task risk in the adapted
    prediction, u = h_{omega_i} - h_{theta'_i} (adapted predictions of both points), J_i the
    Jacobian in theta of omega's adapted predictions. Then grad L(omega) = (1/n) sum_i J_i^T g_i,
    and for every v:  L(omega) - L(theta') <= <g, u> = grad L(omega)^T v + <g, u - J v>
    <= ||v|| eps + ||g|| ||u - J v||.
    """
    n, m_out = tasks.x_query.shape
    adapted = vmap(_adapted, in_dims=(None, 0, 0, None))

    def predictions(theta):
        return vmap(tanh_mlp)(adapted(theta, tasks.x_support, tasks.y_support, eta), tasks.x_query)  # (n, m_out)

    h_w, h_c = predictions(omega), predictions(comparator)
    g = (h_w - tasks.y_query) / m_out
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

def random_features(x: torch.Tensor, width: int, seed: SeedLike = 0) -> torch.Tensor:
    """phi(x) = (tanh(u_1 x + b_1), ..., tanh(u_w x + b_w), 1), shape (..., width + 1).

    (u, b) is the draw of :func:`train_neural_maml` (width, seed): the hidden layer of that
    network frozen at initialisation, so ``tanh_mlp(cat(u, b, theta), x) = random_features(x) @ theta``
    with theta = (v, c)."""
    check_int(width, "width (hidden units)", 1)
    gen = make_generator(seed)
    ub = torch.randn(2 * width, generator=gen, dtype=DTYPE)
    hidden = torch.tanh(x.to(DTYPE)[..., None] * ub[:width] + ub[width:])
    return torch.cat([hidden, torch.ones(*x.shape, 1, dtype=DTYPE)], dim=-1)


def _check_linear_data(Phi_in, Y_in, Phi_out, Y_out, eta):
    check_positive(eta, "eta (the inner step size)")
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
    check_int(steps, "steps", 0)
    top = float(q.eigenvalues()[-1])
    lr = 1.0 / top if lr is None else lr
    check_number(lr, f"lr (in (0, 2 / lambda_max) = (0, {2.0 / top:.4g}))", low=0.0, high=2.0 / top,
                 low_open=True, high_open=True)
    theta = torch.zeros_like(q.b) if theta0 is None else theta0.to(DTYPE).clone()
    out = torch.empty(steps + 1, theta.shape[0], dtype=DTYPE)
    out[0] = theta
    step = torch.eye(theta.shape[0], dtype=DTYPE) - lr * q.H  # theta_{t+1} = step theta_t + lr b
    shift = lr * q.b
    for t in range(steps):
        theta = step @ theta + shift
        out[t + 1] = theta
    return out


# --------------------------------------------------------------------------- a ReLU MLP with Reptile and ARUBA

def relu_mlp_init(hidden: int = 40, *, seed: SeedLike = 0) -> dict:
    """PyTorch's default (uniform fan-in) initialisation of :func:`relu_mlp` with ``hidden``
    units per layer: a dict of the :data:`GROUPS` tensors, without a task axis."""
    check_int(hidden, "hidden (units per layer)", 1)
    gen = make_generator(seed)
    shapes = {"W1": (1, hidden), "b1": (hidden,), "W2": (hidden, hidden), "b2": (hidden,),
              "W3": (hidden, 1), "b3": (1,)}
    fan_in = {"W1": 1, "b1": 1, "W2": hidden, "b2": hidden, "W3": hidden, "b3": hidden}
    return {name: (2 * torch.rand(*shape, generator=gen, dtype=DTYPE) - 1) / math.sqrt(fan_in[name])
            for name, shape in shapes.items()}


def relu_mlp(params: dict, x: torch.Tensor) -> torch.Tensor:
    """The MLP 1 -> hidden -> hidden -> 1 with ReLU on a batch of tasks: ``params`` with a leading
    task axis, inputs x (n, points); returns the predictions (n, points)."""
    h = torch.relu(torch.baddbmm(params["b1"].unsqueeze(1), x.unsqueeze(-1), params["W1"]))
    h = torch.relu(torch.baddbmm(params["b2"].unsqueeze(1), h, params["W2"]))
    return torch.baddbmm(params["b3"].unsqueeze(1), h, params["W3"]).squeeze(-1)


def task_losses(params: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean squared error of :func:`relu_mlp` on every task, shape (n,)."""
    return (relu_mlp(params, x) - y).pow(2).mean(1)


def _rates(eta) -> dict:
    """A learning rate per group (from a number or a dict), each a positive finite tensor."""
    if not isinstance(eta, dict):
        eta = {g: float(eta) for g in GROUPS}
    out = {}
    for g in GROUPS:
        e = torch.as_tensor(eta[g], dtype=DTYPE)
        if not bool(torch.isfinite(e).all()) or not bool((e > 0).all()):
            raise ValueError(f"learning rates must be positive and finite, got {eta[g]!r} for {g}")
        out[g] = e
    return out


def adapt(phi: dict, tasks: SinusoidTasks, eta, steps: int, *, record: bool = False):
    """``steps`` gradient steps on each task's support MSE from the init ``phi`` (unbatched
    tensors) with rate ``eta`` (a number or one per group). Returns the adapted parameters
    (batched), the squared-gradient sums per group (n,) and, with ``record``, the query losses
    after 0..steps steps (steps + 1, n). Raises ValueError when the iterates blow up."""
    check_int(steps, "steps", 0)
    check_bool(record, "record")
    n = tasks.x_support.shape[0]
    rates = _rates(eta)
    theta = {g: p.unsqueeze(0).expand(n, *p.shape).clone() for g, p in phi.items()}
    grad_sq = {g: torch.zeros(n, dtype=DTYPE) for g in GROUPS}
    curve = []
    for s in range(steps + 1):
        if record:
            with torch.no_grad():
                curve.append(task_losses(theta, tasks.x_query, tasks.y_query))
        if s == steps:
            break
        leaves = {g: t.requires_grad_(True) for g, t in theta.items()}
        loss = task_losses(leaves, tasks.x_support, tasks.y_support).sum()
        grads = torch.autograd.grad(loss, list(leaves.values()))
        with torch.no_grad():
            theta = {}
            for (g, p), gradient in zip(leaves.items(), grads):
                grad_sq[g] = grad_sq[g] + gradient.pow(2).flatten(1).sum(1)
                theta[g] = p - rates[g] * gradient
    final = {g: t.detach() for g, t in theta.items()}
    if not all(bool(torch.isfinite(t).all()) and float(t.abs().max()) < 1e6 for t in final.values()):
        raise ValueError("within-task gradient descent diverged: the learning rate is too large")
    return final, grad_sq, (torch.stack(curve) if record else None)


@dataclass(frozen=True)
class MetaTraining:
    """A meta-trained init ``phi`` (dict of tensors), the final rates ``eta`` per group, and the
    rate history ``rates`` (meta_iterations, 6) in the order of :data:`GROUPS`."""

    phi: dict
    eta: dict
    rates: torch.Tensor


def reptile(*, hidden: int, shots: int, inner_steps: int, meta_iterations: int, meta_batch: int,
            meta_step: float, eta0: float, smoothing: float, power: float, learn_rate: bool = True,
            seed: SeedLike = 0) -> MetaTraining:
    """Reptile on :func:`relu_mlp` over ``meta_iterations`` batches of ``meta_batch`` tasks of
    :func:`sinusoid_tasks` (Finn et al. 2017) with ``shots`` support points, ``inner_steps``
    steps of :func:`adapt` per task; with ``learn_rate`` the inner rates are ARUBA's per-group
    rates (module docstring), otherwise the fixed rate ``eta0``. The init and all tasks are drawn
    from ``seed``."""
    for name, value in (("hidden", hidden), ("shots", shots), ("inner_steps", inner_steps),
                        ("meta_iterations", meta_iterations), ("meta_batch", meta_batch)):
        check_int(value, name, 1)
    for name, value in (("meta_step", meta_step), ("eta0", eta0), ("smoothing", smoothing)):
        check_positive(value, name)
    check_number(power, "power (o(t) smoothing)", low=0.0, high=1.0, high_open=True)
    check_bool(learn_rate, "learn_rate")
    gen = make_generator(seed)
    phi = relu_mlp_init(hidden, seed=gen)
    B = {g: torch.zeros((), dtype=DTYPE) for g in GROUPS}
    G = {g: torch.zeros((), dtype=DTYPE) for g in GROUPS}
    scale = None
    eta = {g: eta0 for g in GROUPS}
    history = []
    for k in range(meta_iterations):
        tasks = sinusoid_tasks(meta_batch, shots, 1, seed=gen)
        t = k * meta_batch + 1  # tasks seen, counting the current one
        if learn_rate and scale is not None:
            eta = {}
            for g in GROUPS:
                zeta = smoothing * scale[g] * t ** power
                eta[g] = float(((B[g] + eta0 ** 2 * zeta) / (G[g] + zeta)).sqrt())
        history.append([eta[g] for g in GROUPS])
        last, grad_sq, _ = adapt(phi, tasks, eta, inner_steps)
        if learn_rate:
            if scale is None:
                scale = {g: float(grad_sq[g].mean()) for g in GROUPS}
            for g in GROUPS:
                B[g] = B[g] + 0.5 * (last[g] - phi[g]).pow(2).flatten(1).sum(1).sum()
                G[g] = G[g] + grad_sq[g].sum()
        beta = meta_step * (1 - k / meta_iterations)
        phi = {g: phi[g] + beta * (last[g].mean(0) - phi[g]) for g in GROUPS}
    return MetaTraining(phi, dict(eta), torch.tensor(history, dtype=DTYPE))


def layer_rates(eta: dict) -> dict:
    """The rates averaged over the weight and bias of each layer ({"layer 1", "layer 2", "head"})."""
    return {layer: sum(eta[g] for g in groups) / len(groups) for layer, groups in LAYERS.items()}


def tune_rate(phi: dict, tasks: SinusoidTasks, grid, steps: int) -> tuple[float, dict]:
    """The rate of ``grid`` with the lowest mean query loss after ``steps`` steps of :func:`adapt`
    (rates that diverge count as infinitely bad); also returns the loss of every rate."""
    scores = {}
    for rate in check_positives(grid, "grid (learning rates)"):
        try:
            _, _, curve = adapt(phi, tasks, float(rate), steps, record=True)
            scores[float(rate)] = float(curve[-1].mean())
        except ValueError:
            scores[float(rate)] = math.inf
    best = min(scores, key=scores.get)
    if not math.isfinite(scores[best]):
        raise ValueError("every rate of the grid diverged")
    return best, scores
