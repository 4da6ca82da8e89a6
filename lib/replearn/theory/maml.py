"""MAML, FO-MAML, ANIL and FO-ANIL for the linear representation model (Collins et al. 2022):
exact meta-gradients (torch.func), adapted heads, the FO-ANIL decomposition, the inductive
hypotheses and the initialisations.

Each iteration t picks n tasks (all of them, or a batch) and, for every task i, takes one
inner gradient step with step size alpha on the task's inner loss f_i^in (the talk's
"Algorithm" slide; Collins, Mokhtari, Oh & Shakkottai, ICML 2022, Sec. 2):

    w_{t,i} = w_t - alpha grad_w f_i^in(B_t, w_t)                     (head: every algorithm)
    B_{t,i} = B_t - alpha grad_B f_i^in(B_t, w_t)   (MAML, FO-MAML)   or   B_{t,i} = B_t (ANIL, FO-ANIL).

The outer step moves (B_t, w_t) by beta times the average over the tasks of

- MAML / ANIL: the exact gradient of f_i^out(B_{t,i}, w_{t,i}) with respect to (B_t, w_t),
  i.e. the Jacobian of the inner step (second derivatives of f_i^in) times the outer
  gradient, computed with ``torch.func`` (``vmap`` over tasks of ``grad``);
- FO-MAML / FO-ANIL: the outer gradient at the adapted parameters,
  ``(grad_B f_i^out, grad_w f_i^out)(B_{t,i}, w_{t,i})``, the Jacobian replaced by I.

With population losses f_i(B, w) = 1/2 ||B w - B_* w_*_i||^2 the inner and outer losses
coincide. With finite samples, f_i^in and f_i^out use the inner and outer samples of task
i: a fixed split (:func:`split_tasks`) or fresh samples every iteration
(:class:`replearn.theory.linear.FreshSamples` for the inner and for the outer samples, the setting of
the paper's finite-sample theorems).

The module also holds the closed forms used in the proofs (adapted heads, with an autograd
oracle; the FO-ANIL prior/signal decomposition), the relative size of the Hessian term that
the first-order versions drop, a training run that keeps the iterates up to a blow-up
(:func:`train_or_diverge`), the tracker of the inductive hypotheses A1-A6, the two
initialisations of the experiments, and, for the global-optimality section (Wang et al.
2020), the convex one-step MAML objective in the head of a fixed linear feature map.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import torch
from torch.func import grad, vmap

from replearn.backend import DTYPE, SeedLike, make_generator, randn
from replearn.checks import check_bool, check_int, check_positive, check_same_kind, check_tensor
from replearn.theory.linalg import basis_at_distance, condition_number, orthonormal_basis, principal_angle_distance
from replearn.theory.linear import FreshSamples, PopulationTasks, SampledTasks, Tasks, grads, population_tasks
from replearn.theory.meta import arm
from replearn.theory.trajectory import Trajectory

ALGORITHMS = ("MAML", "FO-MAML", "ANIL", "FO-ANIL")
_ADAPTS_REPRESENTATION = {"MAML": True, "FO-MAML": True, "ANIL": False, "FO-ANIL": False}
_BLOW_UP = 1e8
_CHECK_EVERY = 16  # iterations between divergence checks (each check synchronises a GPU)


# --------------------------------------------------------------------------- data

def split_tasks(tasks: SampledTasks, m_in: int) -> tuple[SampledTasks, SampledTasks]:
    """A fixed inner/outer split: the first ``m_in`` samples of every task are its inner data,
    the remaining ``m - m_in`` its outer data."""
    if not isinstance(tasks, SampledTasks) or tasks.counts is not None:
        raise ValueError("split_tasks needs SampledTasks with the same number m of samples per task")
    check_int(m_in, "m_in (inner samples per task, at most m - 1)", 1, tasks.m - 1)
    return (SampledTasks(tasks.X[:, :m_in], tasks.Y[:, :m_in]),
            SampledTasks(tasks.X[:, m_in:], tasks.Y[:, m_in:]))


def _task_data(tasks: Tasks, index: torch.Tensor | None) -> tuple:
    """The per-task tensors that :func:`_task_loss` consumes, leading dimension = tasks."""
    if isinstance(tasks, PopulationTasks):
        return (tasks.theta if index is None else tasks.theta[index],)
    X, Y = (tasks.X, tasks.Y) if index is None else (tasks.X[index], tasks.Y[index])
    return X, Y, tasks.sizes(index)


def _task_loss(theta: torch.Tensor, data: tuple) -> torch.Tensor:
    """f_i at theta = B w for one task: population 1/2||theta - theta_*||^2, samples 1/(2m)||X theta - y||^2."""
    if len(data) == 1:
        return 0.5 * (theta - data[0]).pow(2).sum()
    X, y, size = data
    return 0.5 * (X @ theta - y).pow(2).sum() / size


# --------------------------------------------------------------------------- closed forms

def adapted_heads(B: torch.Tensor, w: torch.Tensor, Bstar: torch.Tensor, W: torch.Tensor,
                  alpha: float) -> torch.Tensor:
    """Heads after one inner step on the population loss (Collins et al. 2022, Sec. 4):

        w_{t,i} = (I_k - alpha B_t^T B_t) w_t + alpha B_t^T B_* w_*_i,

    a part shared by all tasks plus a task-specific part. Broadcasts over leading dimensions
    of B (..., d, k) and w (..., k) (e.g. a whole trajectory); returns (..., n, k).
    """
    _check_step(alpha, "alpha")
    for name, t, ndim in (("B", B, 2), ("w", w, 1), ("Bstar", Bstar, 2), ("W (heads)", W, 2)):
        check_tensor(t, name, min_ndim=ndim)
    if (Bstar.ndim != 2 or W.ndim != 2 or B.shape[-2:] != Bstar.shape or w.shape[-1] != B.shape[-1]
            or W.shape[1] != B.shape[-1]):
        raise ValueError(f"need B (..., d, k), w (..., k), B_* (d, k) and W (n, k); got {tuple(B.shape)}, "
                         f"{tuple(w.shape)}, {tuple(Bstar.shape)} and {tuple(W.shape)}")
    check_same_kind(("B", B), ("w", w), ("Bstar", Bstar), ("W (heads)", W))
    k = B.shape[-1]
    delta = torch.eye(k, dtype=B.dtype, device=B.device) - alpha * B.mT @ B
    shared = (delta @ w.unsqueeze(-1)).mT                      # (..., 1, k)
    unique = alpha * W @ (Bstar.mT @ B)                        # (..., n, k)
    return shared + unique


def adapted_heads_autograd(B: torch.Tensor, w: torch.Tensor, tasks: Tasks, alpha: float) -> torch.Tensor:
    """w - alpha grad_w f_i(B, w) for every task, by ``torch.autograd`` one task at a time
    (an oracle for the closed form :func:`adapted_heads`). Returns (n, k)."""
    if not alpha > 0:
        raise ValueError(f"the inner step size alpha must be positive, got {alpha}")
    heads = []
    for i in range(tasks.n):
        w_ = w.detach().clone().requires_grad_(True)
        loss = tasks.loss_theta(B.detach() @ w_, torch.tensor([i], device=B.device)).sum()
        (g,) = torch.autograd.grad(loss, (w_,))
        heads.append(w.detach() - alpha * g)
    return torch.stack(heads)

def fo_anil_decomposition(B: torch.Tensor, w: torch.Tensor, Bstar: torch.Tensor, W: torch.Tensor, *,
                          alpha: float, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Prior and signal weights of FO-ANIL's population step (Collins et al. 2022, Sec. 4):

        B_{t+1} = B_t (I_k - (beta/n) sum_i w_{t,i} w_{t,i}^T) + B_* (beta/n) sum_i w_*_i w_{t,i}^T,

    with the adapted heads w_{t,i} of :func:`adapted_heads`. Returns ``(prior, signal)``, both
    k x k; unlike ARM's, both can have full rank when the adapted heads are diverse.
    """
    _check_model(B, w, population_tasks(Bstar, W))
    if W.ndim != 2 or W.shape[1] != B.shape[1] or Bstar.shape != B.shape:
        raise ValueError(f"need B_* {tuple(B.shape)} and heads W (n, {B.shape[1]}); got "
                         f"{tuple(Bstar.shape)} and {tuple(W.shape)}")
    heads = adapted_heads(B, w, Bstar, W, alpha)
    n, k = heads.shape
    prior = torch.eye(k, dtype=B.dtype, device=B.device) - beta * heads.T @ heads / n
    signal = beta * W.T @ heads / n
    return prior, signal


# --------------------------------------------------------------------------- meta-gradients

def _check_model(B: torch.Tensor, w: torch.Tensor, tasks, names: tuple[str, str] = ("B", "w")) -> None:
    """B (d, k) and w (k,) finite, for the tasks' dimension, dtype and device (``names``: how the
    caller calls them)."""
    d = tasks.d
    check_tensor(B, names[0], ndim=2)
    check_tensor(w, names[1])
    data = tasks.W if isinstance(tasks, FreshSamples) else (
        tasks.theta if isinstance(tasks, PopulationTasks) else tasks.X)
    check_same_kind((names[0], B), (names[1], w), ("the tasks' data", data))
    if B.shape[1] > B.shape[0]:
        raise ValueError(f"B has k = {B.shape[1]} > d = {B.shape[0]} columns; the representation needs k <= d")
    if B.shape[0] != d:
        raise ValueError(f"B has d = {B.shape[0]} rows but the tasks live in dimension {d}")
    if w.shape != (B.shape[1],):
        raise ValueError(f"w must have shape ({B.shape[1]},) to match B {tuple(B.shape)}, got {tuple(w.shape)}")


def _check_algorithm(algorithm: str) -> str:
    if not isinstance(algorithm, str) or algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}; choose one of {ALGORITHMS} (ARM is replearn.theory.meta.arm)")
    return algorithm


def _check_step(value, name: str) -> None:
    check_positive(value, f"the step size {name}")


def _check_pair(tasks: Tasks, outer_tasks: Tasks | None) -> Tasks:
    if not isinstance(tasks, (PopulationTasks, SampledTasks)):
        raise ValueError(f"tasks must be PopulationTasks or SampledTasks, got {type(tasks).__name__}")
    if outer_tasks is None:
        return tasks
    if not isinstance(outer_tasks, (PopulationTasks, SampledTasks)):
        raise ValueError(f"outer_tasks must be PopulationTasks or SampledTasks, got {type(outer_tasks).__name__}")
    if outer_tasks.n != tasks.n or outer_tasks.d != tasks.d:
        raise ValueError(f"inner and outer tasks must be the same tasks: got n={tasks.n}, d={tasks.d} "
                         f"vs n={outer_tasks.n}, d={outer_tasks.d}")
    return outer_tasks


def _check_samplers(tasks: FreshSamples, outer_tasks) -> FreshSamples:
    """The outer sampler: ``tasks`` itself by default, else a FreshSamples of the same ground truth."""
    if outer_tasks is None:
        return tasks
    if not isinstance(outer_tasks, FreshSamples):
        raise ValueError("with FreshSamples as tasks, outer_tasks must be a FreshSamples too (the outer "
                         f"samples are drawn anew at every iteration), got {type(outer_tasks).__name__}")
    if (outer_tasks.Bstar.shape != tasks.Bstar.shape or outer_tasks.W.shape != tasks.W.shape
            or not torch.equal(outer_tasks.Bstar, tasks.Bstar) or not torch.equal(outer_tasks.W, tasks.W)):
        raise ValueError("inner and outer samplers must share the ground truth (the same Bstar and W); "
                         "only m and noise_std may differ")
    return outer_tasks


def _inner_step(B, w, data_in, alpha: float, adapt_representation: bool):
    gB, gw = grad(lambda B_, w_: _task_loss(B_ @ w_, data_in), argnums=(0, 1))(B, w)
    return (B - alpha * gB if adapt_representation else B), w - alpha * gw


def _meta_loss(B, w, data_in, data_out, alpha: float, adapt_representation: bool):
    B_i, w_i = _inner_step(B, w, data_in, alpha, adapt_representation)
    return _task_loss(B_i @ w_i, data_out)


def meta_gradient(B: torch.Tensor, w: torch.Tensor, tasks: Tasks, *, algorithm: str, alpha: float,
                  outer_tasks: Tasks | None = None,
                  index: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The direction of one outer step, averaged over the tasks in ``index`` (all when None).

    MAML / ANIL: the exact gradient of (1/n) sum_i f_i^out(B_{t,i}, w_{t,i}) in (B_t, w_t)
    (``vmap`` over tasks of ``torch.func.grad`` through the inner step). FO-MAML / FO-ANIL:
    (1/n) sum_i of the outer gradients at the adapted parameters. ``outer_tasks`` defaults
    to ``tasks`` (population losses). Returns (G_B (d, k), G_w (k,)).
    """
    algorithm = _check_algorithm(algorithm)
    _check_step(alpha, "alpha")
    outer = _check_pair(tasks, outer_tasks)
    _check_model(B, w, tasks)
    return _meta_gradient(B, w, tasks, outer, algorithm, alpha, index)


def _meta_gradient(B, w, tasks: Tasks, outer: Tasks, algorithm: str, alpha: float, index):
    """:func:`meta_gradient` without the input checks (the training loop checks once)."""
    adapt = _ADAPTS_REPRESENTATION[algorithm]
    if algorithm.startswith("FO-"):
        gB, gw = grads(B, w, tasks, index)
        B_i = B - alpha * gB if adapt else B
        w_i = w - alpha * gw
        oB, ow = grads(B_i, w_i, outer, index)
        return oB.mean(0), ow.mean(0)
    per_task = vmap(grad(_meta_loss, argnums=(0, 1)), in_dims=(None, None, 0, 0, None, None))
    GB, Gw = per_task(B, w, _task_data(tasks, index), _task_data(outer, index), alpha, adapt)
    return GB.mean(0), Gw.mean(0)


def meta_objective(B: torch.Tensor, w: torch.Tensor, tasks: Tasks, *, algorithm: str, alpha: float,
                   outer_tasks: Tasks | None = None) -> torch.Tensor:
    """(1/n) sum_i f_i^out(B_{t,i}, w_{t,i}): the MAML objective (MAML, FO-MAML) or the ANIL
    objective (ANIL, FO-ANIL), whose exact gradient MAML / ANIL follow."""
    algorithm = _check_algorithm(algorithm)
    _check_step(alpha, "alpha")
    outer = _check_pair(tasks, outer_tasks)
    _check_model(B, w, tasks)
    per_task = vmap(_meta_loss, in_dims=(None, None, 0, 0, None, None))
    return per_task(B, w, _task_data(tasks, None), _task_data(outer, None), alpha,
                    _ADAPTS_REPRESENTATION[algorithm]).mean()


FIRST_ORDER = {"MAML": "FO-MAML", "ANIL": "FO-ANIL"}


def relative_hessian_term(B: torch.Tensor, w: torch.Tensor, tasks: Tasks, *, algorithm: str,
                          alpha: float) -> float:
    """Relative size of the Hessian term of the exact meta-gradient of ``algorithm`` (MAML or
    ANIL) at (B, w),

        ||G_exact - G_first-order|| / ||G_exact||   (G = (G_B, G_w) flattened),

    with G_first-order the direction of its first-order version (:data:`FIRST_ORDER`), both
    from :func:`meta_gradient`. At w = 0 both representation gradients vanish; the ratio is
    then that of the head gradients."""
    if algorithm not in FIRST_ORDER:
        raise ValueError(f"algorithm must be one of {tuple(FIRST_ORDER)} (an exact meta-gradient), got {algorithm!r}")
    G = torch.cat([g.flatten() for g in meta_gradient(B, w, tasks, algorithm=algorithm, alpha=alpha)])
    F = torch.cat([g.flatten() for g in meta_gradient(B, w, tasks, algorithm=FIRST_ORDER[algorithm], alpha=alpha)])
    return float((G - F).norm() / G.norm())

# --------------------------------------------------------------------------- training

def _check_blow_up(Bs: list, ws: list, limit: float, beta: float) -> None:
    """Raise if the latest iterate is non-finite or larger than ``limit`` (naming the first bad iteration)."""
    if float(torch.maximum(Bs[-1].abs().max(), ws[-1].abs().max()).nan_to_num(float("inf"))) <= limit:
        return
    size = torch.maximum(torch.stack(Bs).abs().amax(dim=(1, 2)), torch.stack(ws).abs().amax(dim=1))
    t = int((~(size <= limit)).nonzero()[0, 0])
    raise ValueError(f"the meta-learner diverged by iteration {t} (max entry {float(size[t]):.3g}): the outer "
                     f"step size beta = {beta} (or alpha) is too large; with B_0 scaled so that "
                     "alpha B_0^T B_0 = I, beta below about 1 / ||w_*||^2 works")


def meta_train(B0: torch.Tensor, w0: torch.Tensor, tasks: Tasks | FreshSamples, *, algorithm: str,
               alpha: float, beta: float, iterations: int, outer_tasks: Tasks | FreshSamples | None = None,
               tasks_per_iteration: int | None = None, freeze_representation: bool = False,
               seed: SeedLike = 0) -> Trajectory:
    """Run ``iterations`` outer steps of MAML, FO-MAML, ANIL or FO-ANIL from (B_0, w_0).

    ``B_{t+1} = B_t - beta G_B``, ``w_{t+1} = w_t - beta G_w`` with (G_B, G_w) from
    :func:`meta_gradient` (Collins et al. 2022, Sec. 2) over all n tasks, or over
    ``tasks_per_iteration`` tasks sampled without replacement each iteration from ``seed``.
    ``tasks`` is a population or sampled oracle (inner data; ``outer_tasks`` the outer data,
    same as ``tasks`` by default) or a :class:`replearn.theory.linear.FreshSamples` sampler: then every
    iteration draws new inner samples from ``tasks`` and, after them, new outer samples from
    ``outer_tasks`` (a sampler of the same ground truth, possibly with another m; ``tasks``
    itself by default).
    ``freeze_representation`` (ANIL / FO-ANIL only) keeps B_t = B_0 and updates the head
    only: gradient descent on the one-step MAML objective in the head of the fixed feature
    map x -> B_0^T x (see :func:`head_quadratic`). Raises ``ValueError`` on bad inputs and
    when the iterates blow up (step size too large).
    """
    algorithm = _check_algorithm(algorithm)
    _check_step(alpha, "alpha")
    _check_step(beta, "beta")
    check_int(iterations, "iterations", 0)
    check_bool(freeze_representation, "freeze_representation")
    fresh = isinstance(tasks, FreshSamples)
    outer = _check_samplers(tasks, outer_tasks) if fresh else _check_pair(tasks, outer_tasks)
    _check_model(B0, w0, tasks, ("B0", "w0"))
    n = tasks.n
    if tasks_per_iteration is not None:
        check_int(tasks_per_iteration, "tasks_per_iteration", 1, n)
    if freeze_representation and _ADAPTS_REPRESENTATION[algorithm]:
        raise ValueError("freeze_representation is for ANIL / FO-ANIL (head-only inner step); with MAML the "
                         "inner step also moves B and the head objective is no longer a quadratic")
    gen = make_generator(seed)
    limit = _BLOW_UP * (1.0 + float(B0.abs().max()) + float(w0.abs().max()))
    Bs, ws = [B0], [w0]
    B, w = B0, w0
    for t in range(iterations):
        index = None
        if tasks_per_iteration is not None and tasks_per_iteration < n:
            index = torch.randperm(n, generator=gen)[:tasks_per_iteration].sort().values.to(B0.device)
        if fresh:
            inner = tasks.draw(index, gen)
            GB, Gw = _meta_gradient(B, w, inner, outer.draw(index, gen), algorithm, alpha, None)
        else:
            GB, Gw = _meta_gradient(B, w, tasks, outer, algorithm, alpha, index)
        if not freeze_representation:
            B = B - beta * GB
        w = w - beta * Gw
        Bs.append(B)
        ws.append(w)
        if (t + 1) % _CHECK_EVERY == 0 or t + 1 == iterations:
            _check_blow_up(Bs, ws, limit, beta)
    return Trajectory(torch.stack(Bs), torch.stack(ws))


@dataclass(frozen=True)
class TrainingRun:
    """One training run (:func:`train_or_diverge`): ``dist`` (T' + 1,) = dist(B_t, B_*),
    ``w_norm`` = ||w_t|| and ``delta_norm`` = ||I - alpha B_t^T B_t|| along the iterates that
    stayed finite, and ``diverged_at`` (the first bad iteration reported by :func:`meta_train`,
    None if the run finished) with its ``message``; ``B``, ``w``: the last kept iterate."""

    dist: np.ndarray
    w_norm: np.ndarray
    delta_norm: np.ndarray
    diverged_at: int | None
    message: str
    B: torch.Tensor
    w: torch.Tensor

    @property
    def diverged(self) -> bool:
        return self.diverged_at is not None


def _train(B0, w0, tasks, algorithm, alpha, beta, iterations):
    if algorithm == "ARM":
        return arm(B0, w0, tasks, beta=beta, iterations=iterations)
    return meta_train(B0, w0, tasks, algorithm=algorithm, alpha=alpha, beta=beta, iterations=iterations)


def train_or_diverge(B0: torch.Tensor, w0: torch.Tensor, tasks: PopulationTasks, Bstar: torch.Tensor, *,
                     algorithm: str, alpha: float, beta: float, iterations: int) -> TrainingRun:
    """Train ``algorithm`` (one of :data:`ALGORITHMS` or ``"ARM"``, :func:`replearn.theory.meta.arm`
    with step beta) on population tasks. If training raises its divergence ``ValueError``
    ("diverged by iteration t"), the run is repeated for t - 1 iterations (deterministic: full
    batch) so that the curve ends at the last iterate before the blow-up; other ValueErrors
    propagate."""
    message, diverged_at = "", None
    try:
        traj = _train(B0, w0, tasks, algorithm, alpha, beta, iterations)
    except ValueError as err:
        found = re.search(r"diverged by (?:iteration|round) (\d+)", str(err))
        if found is None:
            raise
        message, diverged_at = str(err), int(found.group(1))
        traj = _train(B0, w0, tasks, algorithm, alpha, beta, max(diverged_at - 1, 0))
    k = B0.shape[1]
    delta = torch.eye(k, dtype=DTYPE) - alpha * traj.B.mT @ traj.B
    return TrainingRun(dist=traj.dist(Bstar).cpu().numpy(), w_norm=traj.w.norm(dim=-1).cpu().numpy(),
                       delta_norm=torch.linalg.matrix_norm(delta, ord=2).cpu().numpy(), diverged_at=diverged_at,
                       message=message, B=traj.B[-1], w=traj.w[-1])


def outcome(run: TrainingRun, tol: float = 1e-3) -> str:
    """"diverged", "converged" (final dist < tol) or "stalled"."""
    if run.diverged:
        return "diverged"
    return "converged" if run.dist[-1] < tol else "stalled"

# --------------------------------------------------------------------------- inductive hypotheses

def hypotheses(traj: Trajectory, Bstar: torch.Tensor, W: torch.Tensor, alpha: float) -> dict:
    """The quantities of the inductive hypotheses A1-A6 (Collins et al. 2022, Sec. 4) at every
    iterate of a population run, each a (T + 1,) tensor:

    - ``w_norm``: ||w_t||_2 (A1: stays O(sqrt(alpha)));
    - ``delta_norm``: ||Delta_t||_2 with Delta_t = I_k - alpha B_t^T B_t (A2, A3);
    - ``psi_cond``: kappa(Psi_t), Psi_t = (1/n) sum_i w_{t,i} w_{t,i}^T over the adapted heads of
      :func:`adapted_heads` (A4: the adapted heads are diverse);
    - ``perp_norm``: ||B_{*,perp}^T B_t||_2, the energy of B_t outside col(B_*), and
      ``perp_ratio``: its per-step ratio (A5: at most rho < 1; entry 0 is NaN);
    - ``dist``: dist(B_t, B_*) (A6: decays like rho^t).
    """
    check_tensor(Bstar, "Bstar")
    check_tensor(W, "W (heads)")
    if W.ndim != 2 or Bstar.ndim != 2 or traj.B.shape[-2:] != Bstar.shape or W.shape[1] != Bstar.shape[1]:
        raise ValueError(f"trajectory B {tuple(traj.B.shape)}, B_* {tuple(Bstar.shape)} and heads W "
                         f"{tuple(W.shape)} do not fit together (need B_t and B_* (d, k), W (n, k))")
    _check_step(alpha, "alpha")
    B, w = traj.B, traj.w
    k = B.shape[-1]
    delta = torch.eye(k, dtype=B.dtype, device=B.device) - alpha * B.mT @ B
    heads = adapted_heads(B, w, Bstar, W, alpha)
    psi = heads.mT @ heads / W.shape[0]
    Q = orthonormal_basis(Bstar)
    perp = torch.linalg.matrix_norm(B - Q @ (Q.mT @ B), ord=2)
    ratio = torch.cat([perp.new_full((1,), float("nan")), perp[1:] / perp[:-1]])
    return {
        "w_norm": w.norm(dim=-1),
        "delta_norm": torch.linalg.matrix_norm(delta, ord=2),
        "psi_cond": condition_number(psi),
        "perp_norm": perp,
        "perp_ratio": ratio,
        "dist": principal_angle_distance(B, Bstar),
    }


# --------------------------------------------------------------------------- initialisations

def random_init(d: int, k: int, alpha: float, *, seed: SeedLike = 0, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Random initialisation: B_0 with i.i.d. N(0, 1/(alpha d)) entries (so alpha B_0^T B_0 ~ I_k
    for d >> k, but col(B_0) is a random subspace, dist ~ 1 from B_*) and w_0 = 0."""
    check_int(k, "k", 1)
    check_int(d, "d (needs 1 <= k <= d)", k)
    _check_step(alpha, "alpha")
    B0 = randn(d, k, generator=make_generator(seed), device=device) / (alpha * d) ** 0.5
    return B0, torch.zeros(k, dtype=DTYPE, device=device)


def structured_init(Bstar: torch.Tensor, alpha: float, delta: float, *,
                    seed: SeedLike = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Structured initialisation: B_0 an orthonormal basis at distance ``delta`` from col(B_*)
    scaled by 1/sqrt(alpha), so that Delta_0 = I - alpha B_0^T B_0 = 0, and w_0 = 0."""
    _check_step(alpha, "alpha")
    check_tensor(Bstar, "Bstar", ndim=2)
    B0 = basis_at_distance(Bstar, delta, seed=seed) / alpha**0.5
    return B0, torch.zeros(Bstar.shape[1], dtype=Bstar.dtype, device=Bstar.device)


# --------------------------------------------------------------------------- global optimality

def _head_quadratics(B: torch.Tensor, tasks: Tasks):
    """Per-task f_i(B, w) = 1/2 w^T G_i w - g_i^T w + c_i in the head w (B fixed)."""
    if isinstance(tasks, PopulationTasks):
        G = (B.mT @ B).expand(tasks.n, -1, -1)
        return G, tasks.theta @ B, 0.5 * tasks.sqnorm
    size = tasks.sizes()
    F = tasks.X @ B                                            # features x -> B^T x, (n, m, k)
    G = F.mT @ F / size[:, None, None]
    g = torch.einsum("smk,sm->sk", F, tasks.Y) / size[:, None]
    return G, g, 0.5 * tasks.Y.pow(2).sum(-1) / size


def head_quadratic(B: torch.Tensor, tasks: Tasks, *, alpha: float,
                   outer_tasks: Tasks | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The one-step MAML objective in the head of the fixed linear feature map x -> B^T x,

        L(w) = (1/n) sum_i f_i^out(B, w - alpha grad_w f_i^in(B, w)) = 1/2 w^T H w - r^T w + c,

    a convex quadratic for every alpha (meta-SL with squared loss and a fixed feature map,
    Wang et al. 2020; the slides' ``eta`` with loss (h - y)^2 is ``alpha / 2`` here and their
    objective is twice ours). With A_i = I - alpha G_i^in and b_i = alpha g_i^in:
    H = mean_i A_i^T G_i^out A_i, r = mean_i A_i^T (g_i^out - G_i^out b_i). Returns (H, r, c).
    """
    _check_step(alpha, "alpha")
    outer = _check_pair(tasks, outer_tasks)
    _check_model(B, torch.zeros(B.shape[-1], dtype=B.dtype, device=B.device), tasks)
    G_in, g_in, _ = _head_quadratics(B, tasks)
    G_out, g_out, c_out = _head_quadratics(B, outer)
    k = B.shape[1]
    A = torch.eye(k, dtype=B.dtype, device=B.device) - alpha * G_in
    b = alpha * g_in
    Gb = (G_out @ b.unsqueeze(-1)).squeeze(-1)
    H = (A.mT @ G_out @ A).mean(0)
    r = (A.mT @ (g_out - Gb).unsqueeze(-1)).squeeze(-1).mean(0)
    c = (0.5 * (b * Gb).sum(-1) - (g_out * b).sum(-1) + c_out).mean(0)
    return H, r, c


def head_objective(w: torch.Tensor, B: torch.Tensor, tasks: Tasks, *, alpha: float,
                   outer_tasks: Tasks | None = None) -> torch.Tensor:
    """L(w) of :func:`head_quadratic`, evaluated directly: adapt the head of every task, then
    average the outer losses (the ANIL objective at a frozen B)."""
    return meta_objective(B, w, tasks, algorithm="ANIL", alpha=alpha, outer_tasks=outer_tasks)


def head_minimiser(B: torch.Tensor, tasks: Tasks, *, alpha: float,
                   outer_tasks: Tasks | None = None) -> torch.Tensor:
    """A global minimiser of the convex head objective: the minimum-norm solution of H w = r
    (unique when H is positive definite, e.g. B of full rank and ||alpha B^T B|| < 1)."""
    H, r, _ = head_quadratic(B, tasks, alpha=alpha, outer_tasks=outer_tasks)
    return torch.linalg.pinv(H, hermitian=True) @ r
