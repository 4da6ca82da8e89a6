"""FedAvg and distributed GD for the linear representation model, vectorised over clients.

One communication round of FedAvg (McMahan et al. 2017; Collins et al. 2022, Alg. 1):

1. the server samples ``m`` of the ``M`` clients (all of them by default);
2. each selected client starts from the global (B_t, w_t) and takes ``tau`` gradient steps
   with step size ``alpha`` on its own loss f_i:
   ``B_{t,i,s+1} = B_{t,i,s} - alpha grad_B f_i``, ``w_{t,i,s+1} = w_{t,i,s} - alpha grad_w f_i``;
3. the server averages: ``B_{t+1} = sum_i p_i B_{t,i,tau}`` and likewise for w, with
   ``p_i`` proportional to the client weights (e.g. sample counts n_i) of the selected clients.

With ``tau = 1`` and all clients this is exactly gradient descent on the average risk
(1/M) sum_i f_i, i.e. distributed GD (D-GD) and, for meta-learning tasks, ARM.
All selected clients are updated at once as a batch (no Python loop over clients).

How :func:`fedavg` computes a round. Every client loss of the linear representation model is
a quadratic in theta = B w, f_i = 1/2 theta^T H_i theta - b_i^T theta + const, so that with
``g = grad_theta f_i = H_i theta - b_i`` the gradients are ``grad_B f_i = g w^T`` and
``grad_w f_i = B^T g`` (Collins et al. 2022, Sec. 3): H_i = I and b_i = theta_*_i for
population losses; for finite samples H_i = X_i^T X_i / n_i and b_i = X_i^T y_i / n_i, the
client's sufficient statistics, computed once per run (:class:`_QuadraticClients`). A round
then needs no per-client copy of B for its first two local steps: step 1 starts every client
from the global theta_0 = B_t w_t, B_{t,i,1} = B_t - alpha g_{i,0} w_t^T is kept as this
rank-one update, and the last local step goes straight into the server's average
(:func:`_fedavg_round`), so that each step is a few products batched over the clients.
Local SGD (``batch_size``) takes the explicit local steps of :func:`local_updates` instead.

Measurements: the gradient norm of the global objective at a point
(:func:`global_gradient_norm`) or along a whole trajectory (:func:`global_gradient_norms`),
the prior and signal weights of one round (:func:`global_update_weights`), and the server's
average of given local models with its distance, losses and gradient norm
(:func:`average_local_fits`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from replearn.backend import SeedLike, check_finite, make_generator
from replearn.checks import (check_client_index, check_int, check_positive, check_same_kind, check_tensor,
                     check_weights)
from replearn.theory.linalg import principal_angle_distance
from replearn.theory.linear import PopulationTasks, SampledTasks, Tasks, grads, losses, population_tasks, predict
from replearn.theory.trajectory import Trajectory

_BLOW_UP = 1e8
_CHECK_EVERY = 16  # rounds between divergence checks (each check synchronises a GPU)


def _tasks_data(tasks) -> torch.Tensor:
    if not isinstance(tasks, (PopulationTasks, SampledTasks)):
        raise ValueError(f"tasks must be PopulationTasks or SampledTasks (see replearn.theory.linear), got "
                         f"{type(tasks).__name__}")
    return tasks.theta if isinstance(tasks, PopulationTasks) else tasks.X


def _check_model(B, w, tasks: Tasks, B_name: str = "B0", w_name: str = "w0") -> None:
    """(B, w) a finite (d, k) / (k,) model for the tasks, on their dtype and device."""
    data = _tasks_data(tasks)
    check_tensor(B, B_name, ndim=2)
    d, k = B.shape
    if k > d:
        raise ValueError(f"{B_name} has k = {k} > d = {d} columns; the representation needs k <= d")
    if d != tasks.d:
        raise ValueError(f"{B_name} has d = {d} rows but the tasks live in dimension {tasks.d}")
    check_tensor(w, w_name, shape=(k,))
    check_same_kind((B_name, B), (w_name, w), ("the tasks' data", data))


def _check_run_inputs(B0, w0, tasks: Tasks, step: float, tau: int, rounds: int, step_name: str):
    _check_model(B0, w0, tasks)
    check_positive(step, f"the step size {step_name}")
    check_int(tau, "tau (local steps per round)", 1)
    check_int(rounds, "the number of rounds", 0)


def local_updates(B: torch.Tensor, w: torch.Tensor, tasks: Tasks, index: torch.Tensor | None, *,
                  alpha: float, tau: int, batch_size: int | None = None,
                  generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``tau`` local GD steps of every client in ``index`` (all when None) from the global (B, w).

    Step s of client i (simultaneous in B and w, g = grad_theta f_i at theta = B w):
    ``B <- B - alpha g w^T``, ``w <- w - alpha B^T g``. With ``batch_size`` b (sampled tasks
    only) each step uses b fresh samples of the client's data drawn from ``generator``
    (local SGD). Returns the local iterates (s, d, k) and (s, k).
    """
    _check_model(B, w, tasks, "B", "w")
    index = check_client_index(index, tasks.n)
    check_positive(alpha, "the step size alpha")
    check_int(tau, "tau (local steps)", 1)
    if batch_size is not None:
        if not isinstance(tasks, SampledTasks):
            raise ValueError("batch_size needs finite-sample tasks (SampledTasks); population losses have no samples")
        if not isinstance(generator, torch.Generator):
            raise ValueError("batch_size needs a torch.Generator to draw the minibatches (generator=...)")
    return _local_updates(B, w, tasks, index, alpha=alpha, tau=tau, batch_size=batch_size, generator=generator)


def _local_updates(B, w, tasks: Tasks, index, *, alpha: float, tau: int, batch_size, generator):
    """:func:`local_updates` without the argument checks (called every round)."""
    s = tasks.n if index is None else index.shape[0]
    B_loc = B.expand(s, *B.shape)
    w_loc = w.expand(s, *w.shape).unsqueeze(-1)  # (s, k, 1)
    for _ in range(tau):
        theta = torch.bmm(B_loc, w_loc).squeeze(-1)
        if batch_size is None:
            g = tasks.grad_theta(theta, index)
        else:
            g = tasks.minibatch(index, batch_size, generator).grad_theta(theta)
        g = g.unsqueeze(-1)  # (s, d, 1)
        w_next = torch.baddbmm(w_loc, B_loc.mT, g, alpha=-alpha)
        B_loc = torch.baddbmm(B_loc, g, w_loc.mT, alpha=-alpha)
        w_loc = w_next
    return B_loc, w_loc.squeeze(-1)


@functools.lru_cache(maxsize=16)
def _start_coordinates(n: int, k: int, dtype: torch.dtype, device: torch.device):
    """Constants of :func:`local_coordinates`: A = [I_k; 0] (k + 1, k), -e_{k+1} (n, k + 1, 1), [-1]."""
    A0 = torch.eye(k + 1, k, dtype=dtype, device=device)
    minus_e = torch.zeros(k + 1, 1, dtype=dtype, device=device)
    minus_e[k] = -1.0
    return A0, minus_e.expand(n, k + 1, 1), minus_e[k]


def local_coordinates(B: torch.Tensor, w: torch.Tensor, tasks: PopulationTasks, index: torch.Tensor | None,
                      *, alpha: float, tau: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Population local updates written in the coordinates of span(col(B), theta_*_i).

    On the population loss every local iterate of client i has the form
    ``B_{t,i,s} = B_t P_{i,s} + theta_*_i u_{i,s}^T``, starting from P = I_k, u = 0, with

        P_{i,s+1} = P_{i,s} (I_k - alpha w_{i,s} w_{i,s}^T),
        u_{i,s+1}^T = u_{i,s}^T (I_k - alpha w_{i,s} w_{i,s}^T) + alpha w_{i,s}^T,

    so after tau steps P_i = prod_s (I_k - alpha w_{t,i,s} w_{t,i,s}^T) is the client's prior
    weight and, with theta_*_i = B_* w_*_i, ``w_*_i u_i^T`` its signal weight (Collins et al.
    2022, Sec. 4, global update of B_{t+1}). The head gradient needs only the Gram matrix of
    [B_t, theta_*_i], so a step costs O(k^2) per client instead of O(dk); the first two steps,
    where A is still shared by the clients, are written as plain matrix products.

    Returns ``A`` (s, k + 1, k) stacking P_i over u_i^T, and the local heads (s, k).
    """
    if not isinstance(tasks, PopulationTasks):
        raise ValueError(f"local_coordinates needs PopulationTasks, got {type(tasks).__name__}")
    _check_model(B, w, tasks, "B", "w")
    index = check_client_index(index, tasks.n)
    check_positive(alpha, "the step size alpha")
    check_int(tau, "tau (local steps)", 1)
    return _local_coordinates(B, w, tasks, index, alpha=alpha, tau=tau)


def _local_coordinates(B, w, tasks: PopulationTasks, index, *, alpha: float, tau: int):
    """:func:`local_coordinates` without the argument checks (called every round)."""
    theta = tasks.theta if index is None else tasks.theta[index]
    n, k = theta.shape[0], B.shape[1]
    A0, minus_e, minus_one = _start_coordinates(n, k, B.dtype, B.device)
    cross = theta @ B                                                       # theta_*_i^T B_t
    # Step 1 starts from P = I, u = 0 and the global w for every client: r = [w; -1] are the
    # coordinates of B_t w - theta_*_i, and the new A = A0 - alpha r w^T is shared.
    w_loc = torch.sub(w, B.mT @ (B @ w), alpha=alpha).add(cross, alpha=alpha)  # w - alpha B^T (B w - theta_*_i)
    A = torch.addr(A0, torch.cat((w, minus_one)), w, alpha=-alpha)
    if tau == 1:
        return A.expand(n, k + 1, k), w_loc
    # Step 2: A is still shared, so the clients' products are plain matrix products. With
    # r_i = [a_i; b_i] the coordinates of the residual v_i = B_t a_i + theta_*_i b_i,
    # B_t^T v_i = B_t^T B_t a_i + b_i B_t^T theta_*_i and theta_*_i^T v_i = a_i . B_t^T theta_*_i + b_i |theta_*_i|^2.
    sqnorm = tasks.sqnorm if index is None else tasks.sqnorm[index]
    r = w_loc @ A.mT
    r[:, k] -= 1.0                                                          # coordinates of B_{i,1} w_{i,1} - theta_*_i
    a, b = r[:, :k], r[:, k:]
    gram_r = torch.cat((torch.addmm(b * cross, a, B.mT @ B),
                        torch.addcmul((a * cross).sum(1, keepdim=True), b, sqnorm.unsqueeze(-1))), dim=1)
    grad_w = gram_r @ A                                                     # B_{i,1}^T v_i
    A = torch.addcmul(A, r.unsqueeze(-1), w_loc.unsqueeze(1), value=-alpha)
    w_loc = w_loc.sub(grad_w, alpha=alpha).unsqueeze(-1)
    if tau > 2:  # steps 3..tau: per-client A, batched over clients with the Gram matrix of [B_t, theta_*_i]
        gram = torch.cat((torch.cat((B.mT.matmul(B).expand(n, k, k), cross.unsqueeze(-1)), dim=-1),
                          torch.cat((cross, sqnorm.unsqueeze(-1)), dim=-1).unsqueeze(1)), dim=1)
        for _ in range(tau - 2):
            r = torch.baddbmm(minus_e, A, w_loc)             # coordinates of B_{i,s} w_{i,s} - theta_*_i
            grad_w = torch.bmm(A.mT, torch.bmm(gram, r))     # B_{i,s}^T (B_{i,s} w_{i,s} - theta_*_i)
            A = torch.baddbmm(A, r, w_loc.mT, alpha=-alpha)
            w_loc = w_loc.add(grad_w, alpha=-alpha)
    return A, w_loc.squeeze(-1)


def _select_clients(n: int, clients_per_round: int | None, gen: torch.Generator | None, device):
    """Indices of this round's clients, or None for full participation."""
    if clients_per_round is None or clients_per_round == n:
        return None
    chosen = torch.randperm(n, generator=gen)[:clients_per_round]
    return chosen.sort().values.to(device)


def _check_blow_up(Bs: list, ws: list, limit: float, alpha: float) -> None:
    """Raise if the latest iterate is non-finite or larger than ``limit`` (naming the first bad round)."""
    if float(torch.maximum(Bs[-1].abs().max(), ws[-1].abs().max()).nan_to_num(float("inf"))) <= limit:
        return
    size = torch.maximum(torch.stack(Bs).abs().amax(dim=(1, 2)), torch.stack(ws).abs().amax(dim=1))
    t = int((~(size <= limit)).nonzero()[0, 0])
    raise ValueError(f"the iterates diverged by round {t} (max entry {float(size[t]):.3g}): "
                     f"the step size alpha = {alpha} is too large for this problem; local GD "
                     "on 1/2||Bw - theta||^2 needs roughly alpha < 1 / (||B||^2 + ||w||^2)")


class _QuadraticClients:
    """The gradients ``g_i(theta) = H_i theta - b_i`` of the clients' losses, batched over clients.

    The loss of client i is quadratic in theta = B w (module docstring): H_i = I and
    b_i = theta_*_i on population losses. On finite samples H_i = X_i^T X_i / n_i and
    b_i = X_i^T y_i / n_i; a gradient is then taken in whichever form costs fewer operations:

    * from the client's sufficient statistics (H_i, b_i), computed once per run: one (d x d)
      product per client, d^2 multiply-adds, when d <= 2 m (m the padded sample count; the
      statistics then take at most twice the memory of X);
    * from the samples, ``X_i^T (X_i theta - y_i) / n_i``: two (m x d) products per client,
      2 m d multiply-adds, when d > 2 m, where the statistics would cost more.

    Each form is one or two batched products over the clients; ``select`` restricts them to a
    round's clients.
    """

    def __init__(self, tasks: Tasks):
        self.H = self.Xt = self.Xn = None
        if isinstance(tasks, PopulationTasks):
            self.minus_b = -tasks.theta                                         # H_i = I, b_i = theta_*_i
            return
        n = tasks.sizes()[:, None, None]
        if tasks.d <= 2 * tasks.m:
            self.H = torch.bmm(tasks.X.mT, tasks.X).div_(n)                     # X_i^T X_i / n_i, (M, d, d)
            self.minus_b = torch.bmm(tasks.Y.unsqueeze(1), tasks.X).div_(-n).squeeze(1)
        else:
            self.Xt = tasks.X.mT.contiguous()                                   # X_i^T, (M, d, m)
            self.Xn = tasks.X / n                                               # X_i / n_i, (M, m, d)
            self.minus_b = -tasks.Y                                             # here -y_i, (M, m)

    def select(self, index: torch.Tensor | None) -> "_QuadraticClients":
        """The clients in ``index`` (all when None), in that order."""
        if index is None:
            return self
        part = object.__new__(_QuadraticClients)
        for name in ("H", "Xt", "Xn", "minus_b"):
            value = getattr(self, name)
            setattr(part, name, None if value is None else value[index])
        return part

    def at_shared(self, theta: torch.Tensor) -> torch.Tensor:
        """``g_i(theta)`` (s, d) of every client at one shared theta (d,)."""
        if self.Xt is not None:  # residuals X_i theta - y_i (s, 1, m), then X_i^T r_i / n_i
            return torch.bmm(torch.add(theta @ self.Xt, self.minus_b).unsqueeze(1), self.Xn).squeeze(1)
        if self.H is None:
            return theta + self.minus_b
        s, d = self.minus_b.shape
        return torch.addmv(self.minus_b.view(-1), self.H.view(s * d, d), theta).view(s, d)

    def at(self, theta: torch.Tensor) -> torch.Tensor:
        """``g_i(theta_i)`` (s, d) at one theta_i per client, ``theta`` (s, d) (overwritten)."""
        if self.H is None and self.Xt is None:
            return theta.add_(self.minus_b)
        theta = theta.unsqueeze(1)
        if self.Xt is not None:
            r = torch.baddbmm(self.minus_b.unsqueeze(1), theta, self.Xt)       # (X_i theta_i - y_i)^T
            return torch.bmm(r, self.Xn).squeeze(1)
        # theta_i^T H_i = (H_i theta_i)^T as H_i is symmetric; the row form is the faster product
        return torch.baddbmm(self.minus_b.unsqueeze(1), theta, self.H).squeeze(1)

    def at_rank_one(self, W: torch.Tensor, Bt: torch.Tensor, z: torch.Tensor, G: torch.Tensor,
                    alpha: float) -> torch.Tensor:
        """:meth:`at` the points ``theta_i = B w_i - alpha z_i g_i`` (those of local step 2),
        from ``W`` (s, k), ``Bt`` = B^T (k, d), ``z`` (s,) and ``G`` (s, d)."""
        if self.H is None and self.Xt is None:  # population: theta_i - theta_*_i in one fused product
            return torch.addmm(self.minus_b, W, Bt).addcmul_(z.unsqueeze(1), G, value=-alpha)
        return self.at(torch.addcmul(W @ Bt, z.unsqueeze(1), G, value=-alpha))


def _fedavg_round(Bt: torch.Tensor, w: torch.Tensor, grads: _QuadraticClients, p: torch.Tensor, equal: bool,
                  alpha: float, tau: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One FedAvg round from the global (B_t, w_t), given as ``Bt`` = B_t^T (k, d) and ``w`` (k).

    Client i takes ``tau`` steps of (Collins et al. 2022, Alg. 1; module docstring)

        g_{i,s} = H_i B_{t,i,s} w_{t,i,s} - b_i,
        B_{t,i,s+1} = B_{t,i,s} - alpha g_{i,s} w_{t,i,s}^T,
        w_{t,i,s+1} = w_{t,i,s} - alpha B_{t,i,s}^T g_{i,s},

    from (B_{t,i,0}, w_{t,i,0}) = (B_t, w_t), and the server returns (B_{t+1}^T, w_{t+1}) =
    sum_i p_i (B_{t,i,tau}^T, w_{t,i,tau}) with p_i the normalised weights ``p`` (s,) of the clients
    of ``grads`` (``equal``: all p_i = 1/s). All clients move together as (s, ...) batches:

    * step 1 starts from the shared theta_0 = B_t w_t, so g_{i,0} = g_i(theta_0) and
      w_{t,i,1} = w_t - alpha B_t^T g_{i,0} for all clients at once;
    * step 2 keeps B_{t,i,1} = B_t - alpha g_{i,0} w_t^T as this rank-one update:
      theta_{i,1} = B_t w_{t,i,1} - alpha (w_t . w_{t,i,1}) g_{i,0} and
      B_{t,i,1}^T g = B_t^T g - alpha (g_{i,0} . g) w_t;
    * from step 3 on the local B_{t,i,s} are formed, (s, k, d);
    * the last step is not applied client by client but averaged directly:
      B_{t+1} = sum_i p_i B_{t,i,tau-1} - alpha sum_i p_i g_{i,tau-1} w_{t,i,tau-1}^T.
    """
    G = grads.at_shared(w @ Bt)                         # g_{i,0} = g_i(theta_0), (s, d)
    W = torch.addmm(w, G, Bt.mT, alpha=-alpha)          # w_{t,i,1} = w_t - alpha B_t^T g_{i,0}, (s, k)
    if tau == 1:  # D-GD: B_{t+1} = B_t - alpha (sum_i p_i g_{i,0}) w_t^T
        return torch.addr(Bt, w, p @ G, alpha=-alpha), p @ W
    z = W @ w                                           # w_t . w_{t,i,1}
    G1 = grads.at_rank_one(W, Bt, z, G, alpha)          # g_{i,1} at theta_{i,1} = B_{t,i,1} w_{t,i,1}
    # w_{t,i,2} = w_{t,i,1} - alpha B_{t,i,1}^T g_{i,1}
    #          = w_{t,i,1} - alpha B_t^T g_{i,1} + alpha^2 (g_{i,0} . g_{i,1}) w_t
    if tau == 2:  # only the averages are needed: sum_i p_i w_{t,i,2} and sum_i p_i B_{t,i,2}^T
        # scale * c = alpha^2 sum_i p_i g_{i,0} . g_{i,1}
        if equal:
            c, scale = torch.dot(G.view(-1), G1.view(-1)), alpha * alpha / G.shape[0]
        else:
            c, scale = torch.linalg.vecdot(G, G1) @ p, alpha * alpha
        w_next = torch.addmv(torch.addcmul(p @ W, w, c, value=scale), Bt, p @ G1, alpha=-alpha)
        Bt = torch.addr(Bt, w, p @ G, alpha=-alpha)     # sum_i p_i B_{t,i,1}^T
        return _minus_average_outer(Bt, W, G1, p, equal, alpha), w_next
    W1 = torch.addmm(W, G1, Bt.mT, alpha=-alpha).addr_(torch.linalg.vecdot(G, G1), w, alpha=alpha * alpha)
    # steps 3..tau on the formed B_{t,i,2}^T = B_t^T - alpha (w_t g_{i,0}^T + w_{t,i,1} g_{i,1}^T), (s, k, d)
    B_loc = torch.baddbmm(Bt, torch.stack((w.expand_as(W), W), dim=2), torch.stack((G, G1), dim=1),
                          alpha=-alpha)
    W = W1
    for step in range(2, tau):
        g = grads.at(torch.bmm(W.unsqueeze(1), B_loc).squeeze(1))       # g_{i,s} at B_{t,i,s} w_{t,i,s}
        # w_{t,i,s+1} = w_{t,i,s} - alpha B_{t,i,s}^T g_{i,s}, as rows g^T B_{t,i,s} (the faster product)
        W_next = torch.baddbmm(W.unsqueeze(1), g.unsqueeze(1), B_loc.mT, alpha=-alpha).squeeze(1)
        if step == tau - 1:
            Bt = torch.einsum("s,skd->kd", p, B_loc)
            return _minus_average_outer(Bt, W, g, p, equal, alpha), p @ W_next
        B_loc.addcmul_(W.unsqueeze(2), g.unsqueeze(1), value=-alpha)   # B_{t,i,s+1}^T
        W = W_next
    raise AssertionError("unreachable: tau >= 3 returns in the loop")


def _minus_average_outer(Bt, W, G, p, equal: bool, alpha: float) -> torch.Tensor:
    """``Bt - alpha sum_i p_i w_i g_i^T``: the server's average of the last local step's B-update."""
    if equal:  # p_i = 1/s: fold it into the coefficient
        return torch.addmm(Bt, W.mT, G, alpha=-alpha / W.shape[0])
    return torch.addmm(Bt, (p.unsqueeze(1) * W).mT, G, alpha=-alpha)


def _minibatch_round(B, w, tasks: SampledTasks, index, p, alpha: float, tau: int, batch_size: int, gen):
    """One round of local SGD (fresh minibatches at every local step), then the (weighted) average."""
    B_loc, w_loc = _local_updates(B, w, tasks, index, alpha=alpha, tau=tau, batch_size=batch_size,
                                  generator=gen)
    if p is None:
        return B_loc.mean(0), w_loc.mean(0)
    p = p / p.sum()
    return torch.einsum("s,sdk->dk", p, B_loc), p @ w_loc


def fedavg(B0: torch.Tensor, w0: torch.Tensor, tasks: Tasks, *, alpha: float, tau: int, rounds: int,
           clients_per_round: int | None = None, weights: torch.Tensor | None = None,
           batch_size: int | None = None, seed: SeedLike = 0) -> Trajectory:
    """Run ``rounds`` rounds of FedAvg with ``tau`` local steps; returns every global iterate.

    ``clients_per_round`` (m <= M) enables partial participation, sampled without
    replacement each round from ``seed``; ``weights`` (M,) are positive client weights
    (e.g. local sample counts n_i) used to average the selected clients; ``batch_size`` b
    makes every local step use b fresh samples (local SGD; with tau = 1 this is D-SGD).
    Raises ``ValueError`` on malformed inputs and when the iterates blow up (step size
    too large).
    """
    _check_run_inputs(B0, w0, tasks, alpha, tau, rounds, "alpha")
    n = tasks.n
    if clients_per_round is not None:
        check_int(clients_per_round, "clients_per_round", 1, n)
    if weights is None:
        weights = torch.ones(n, dtype=B0.dtype, device=B0.device)
    else:
        weights = check_weights(weights, n, B0)
    if batch_size is not None:
        if not isinstance(tasks, SampledTasks):
            raise ValueError("batch_size needs finite-sample tasks (SampledTasks); population losses have no samples")
        check_int(batch_size, "batch_size (the batch size b, at most the smallest n_i)", 1, int(tasks.sizes().min()))
    gen = make_generator(seed)
    uniform = bool((weights == weights[0]).all())
    limit = _BLOW_UP * (1.0 + float(B0.abs().max()) + float(w0.abs().max()))

    def select():
        return _select_clients(n, clients_per_round, gen, B0.device)

    # The rounds are not differentiated through; inference mode drops autograd's per-op
    # bookkeeping (a sizeable share of a round's cost for these small tensors). The iterates
    # are stacked outside it, so callers get ordinary tensors.
    with torch.inference_mode():
        if batch_size is None:
            # the exact local steps of _fedavg_round, on B_t^T (k, d): its products' fastest layout
            clients = _QuadraticClients(tasks)                  # H_i and b_i, once per run
            s = n if clients_per_round is None else clients_per_round
            equal = torch.full((s,), 1.0 / s, dtype=B0.dtype, device=B0.device)

            def step(Bt, w, index):
                p = equal if uniform else _normalised(weights if index is None else weights[index])
                return _fedavg_round(Bt, w, clients.select(index), p, uniform, alpha, tau)

            Bs, ws = _iterate(B0.detach().mT.contiguous(), w0.detach(), step, rounds, select, limit, alpha)
            del clients
        else:
            def step(B, w, index):
                p = None if uniform else (weights if index is None else weights[index])
                return _minibatch_round(B, w, tasks, index, p, alpha, tau, batch_size, gen)

            Bs, ws = _iterate(B0.detach(), w0.detach(), step, rounds, select, limit, alpha)
    B = torch.stack(Bs)
    return Trajectory(B.mT.contiguous() if batch_size is None else B, torch.stack(ws))


def _normalised(p: torch.Tensor) -> torch.Tensor:
    """Weights rescaled to sum to one."""
    return p / p.sum()


def _iterate(B, w, step, rounds: int, select, limit: float, alpha: float) -> tuple[list, list]:
    """Every iterate of ``rounds`` rounds ``B, w = step(B, w, select())`` (``select()``: this
    round's clients, None for all), checking for divergence every ``_CHECK_EVERY`` rounds."""
    Bs, ws = [B], [w]
    for t in range(rounds):
        B, w = step(B, w, select())
        Bs.append(B)
        ws.append(w)
        if (t + 1) % _CHECK_EVERY == 0 or t + 1 == rounds:
            _check_blow_up(Bs, ws, limit, alpha)
    return Bs, ws


def dgd(B0: torch.Tensor, w0: torch.Tensor, tasks: Tasks, *, alpha: float, rounds: int,
        clients_per_round: int | None = None, weights: torch.Tensor | None = None,
        batch_size: int | None = None, seed: SeedLike = 0) -> Trajectory:
    """Distributed GD: FedAvg with a single local step (tau = 1), i.e. GD on the average loss.

    With ``batch_size`` (or partial participation) this is distributed SGD (D-SGD).
    """
    return fedavg(B0, w0, tasks, alpha=alpha, tau=1, rounds=rounds, clients_per_round=clients_per_round,
                  weights=weights, batch_size=batch_size, seed=seed)


def global_gradient_norm(B: torch.Tensor, w: torch.Tensor, tasks: Tasks,
                         weights: torch.Tensor | None = None) -> torch.Tensor:
    """Frobenius norm of the gradient of the global objective sum_i p_i f_i(B, w) w.r.t. (B, w).

    The global objective is Collins et al. 2022, eq. (5) (weights p_i = n_i / N) or eq. (6)
    (equal weights, the default). Zero exactly at stationary points, e.g. D-GD's limit.
    """
    _check_model(B, w, tasks, "B", "w")
    gB, gw = grads(B, w, tasks)
    if weights is None:
        p = torch.full((tasks.n,), 1.0 / tasks.n, dtype=B.dtype, device=B.device)
    else:
        p = check_weights(weights, tasks.n, B)
        p = p / p.sum()
    GB = torch.einsum("s,sdk->dk", p, gB)
    Gw = p @ gw
    return torch.sqrt(GB.pow(2).sum() + Gw.pow(2).sum())



def global_gradient_norms(traj: Trajectory, v: torch.Tensor) -> torch.Tensor:
    """:func:`global_gradient_norm` (equal weights, population losses) at every iterate of
    ``traj`` at once, shape (T + 1,), from the mean regressor ``v = B_* wbar_*`` (d,) alone.

    By book 1.2, Prop. ``arm-dyn-prop-avg``, the equal-weight objective (1/M) sum_i
    1/2 ||B w - B_* w_*_i||^2 (Collins et al. 2022, eq. (6)) is 1/2 ||B w - v||^2 plus a
    constant, so grad_B = (B w - v) w^T and grad_w = B^T (B w - v): O(dk) per iterate.
    """
    r = predict(traj.B, traj.w) - v
    grad_w = (traj.B.mT @ r.unsqueeze(-1)).squeeze(-1)
    return torch.sqrt(r.pow(2).sum(-1) * traj.w.pow(2).sum(-1) + grad_w.pow(2).sum(-1))


@dataclass(frozen=True)
class AveragedModel:
    """The server's weighted average ``B`` (d, k), ``w`` (k) of the local models, its
    principal-angle distance ``dist`` to B_*, its per-client losses ``losses`` (M,) and the
    norm ``grad_norm`` of the global objective's gradient there (equal weights)."""

    B: torch.Tensor
    w: torch.Tensor
    dist: float
    losses: torch.Tensor
    grad_norm: float


def average_local_fits(B_local: torch.Tensor, w_local: torch.Tensor, Bstar: torch.Tensor,
                       weights: torch.Tensor | None = None, W: torch.Tensor | None = None) -> AveragedModel:
    """Average local models as FedAvg's server does (Collins et al. 2022, eq. (3)).

    ``B_local`` (M, d, k) and ``w_local`` (M, k) are the clients' models, ``weights`` (M,)
    optional positive weights (e.g. n_i; equal by default). The distance is measured to
    ``Bstar`` (d, k); with the heads ``W`` (M, k) the result also carries each client's
    population loss and the global gradient norm (else those are NaN).
    """
    if B_local.ndim != 3 or w_local.ndim != 2 or w_local.shape != (B_local.shape[0], B_local.shape[2]):
        raise ValueError(f"need B_local (M, d, k) and w_local (M, k); got {tuple(B_local.shape)} and "
                         f"{tuple(w_local.shape)}")
    M, d, k = B_local.shape
    if Bstar.shape != (d, k):
        raise ValueError(f"Bstar must have shape ({d}, {k}) like the local representations, got {tuple(Bstar.shape)}")
    check_finite(B_local, "B_local")
    check_finite(w_local, "w_local")
    if weights is None:
        p = torch.full((M,), 1.0 / M, dtype=B_local.dtype, device=B_local.device)
    else:
        p = torch.as_tensor(weights, dtype=B_local.dtype, device=B_local.device)
        if p.shape != (M,) or not bool(torch.isfinite(p).all()) or not bool((p > 0).all()):
            raise ValueError(f"weights must be {M} positive finite numbers (one per client)")
        p = p / p.sum()
    B = torch.einsum("s,sdk->dk", p, B_local)
    w = p @ w_local
    dist = float(principal_angle_distance(B, Bstar))
    if W is None:
        nan = float("nan")
        return AveragedModel(B=B, w=w, dist=dist, losses=torch.full((M,), nan, dtype=B.dtype), grad_norm=nan)
    if W.shape != (M, k):
        raise ValueError(f"W must hold one head per client, shape ({M}, {k}), got {tuple(W.shape)}")
    tasks = population_tasks(Bstar, W)
    return AveragedModel(B=B, w=w, dist=dist, losses=losses(B, w, tasks),
                         grad_norm=float(global_gradient_norm(B, w, tasks, weights=p)))

def global_update_weights(B: torch.Tensor, w: torch.Tensor, Bstar: torch.Tensor, W: torch.Tensor, *,
                          alpha: float, tau: int, index: torch.Tensor | None = None,
                          weights: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Prior and signal weights of one population FedAvg round (Collins et al. 2022, Sec. 4):

        B_{t+1} = B_t [sum_i p_i prod_s (I_k - alpha w_{t,i,s} w_{t,i,s}^T)]
                  + B_* [alpha sum_i p_i w_*_i sum_s w_{t,i,s}^T prod_{r>s} (I_k - alpha w_{t,i,r} w_{t,i,r}^T)],

    the sums over the clients in ``index`` (all by default) with p_i proportional to
    ``weights`` (equal by default). Returns ``(prior, signal)``, both k x k.
    """
    tasks = population_tasks(Bstar, W)
    A, _ = local_coordinates(B, w, tasks, index, alpha=alpha, tau=tau)
    heads = W if index is None else W[index]
    if weights is None:
        p = torch.full((heads.shape[0],), 1.0 / heads.shape[0], dtype=B.dtype, device=B.device)
    else:
        p = check_weights(weights, W.shape[0], B)
        p = p if index is None else p[index]
        p = p / p.sum()
    k = B.shape[1]
    prior = torch.einsum("s,sjk->jk", p, A[:, :k])
    signal = torch.einsum("s,sj,sk->jk", p, heads, A[:, k])
    return prior, signal
