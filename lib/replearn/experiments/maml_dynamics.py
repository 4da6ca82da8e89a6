"""MAML, FO-MAML, ANIL and FO-ANIL learn B_*; ARM does not (book 2.1-2.3).

The setting is the population case of Collins, Mokhtari, Oh & Shakkottai (ICML 2022), Sec. 3-4:
n tasks with losses f_i(B, w) = 1/2 ||B w - B_* w_*_i||^2, heads with mean zero whose second
moment (1/n) sum_i w_*_i w_*_i^T has eigenvalues in [mu_*^2, L_*^2] = [scale^2 / cond, scale^2]
exactly (``make_heads(exact=True)``), and the structured initialisation of the paper's main
theorem: B_0 an orthonormal basis at distance ``delta0`` from col(B_*) scaled by 1/sqrt(alpha)
(so Delta_0 = I - alpha B_0^T B_0 = 0) and w_0 = 0 (:func:`replearn.maml.structured_init`).

* :func:`run` trains ARM and the four meta-learners from the same start (book 2.2);
* :func:`hessian_term` measures how far the exact meta-gradient is from its first-order
  approximation, i.e. the size of the Hessian term (book 2.1);
* :func:`rate_sweep` measures the linear rate of dist(B_t, B_*) against the theorem's
  beta alpha mu_*^2 (book 2.2);
* :func:`decomposition_check` and :func:`hypotheses_runs` check the FO-ANIL prior/signal
  identity and track the inductive hypotheses A1-A6 (book 2.3), with diverse and with
  degenerate heads.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from .. import linear, maml, meta, rates
from ..backend import default_device
from ..checks import check_int, check_nonnegative, check_number, check_positive, check_positives, check_sequence
from ..profiles import Settings

METHODS = ("ARM",) + maml.ALGORITHMS


@dataclass(frozen=True)
class MamlDynamicsSettings(Settings):
    """Dimension d, representation size k, n tasks whose head second moment has condition
    number ``cond`` (mu_*^2 = scale^2 / cond, L_*^2 = scale^2) and mean of norm ``mean_norm``;
    structured start at distance ``delta0``; inner step ``alpha``, outer step ``beta``,
    ``iterations`` outer steps, and the seed.

    The rate sweep (:func:`rate_sweep`) runs ``sweep_iterations`` steps for every value in
    ``conds`` (at alpha, beta), ``alphas`` (at beta, cond) and ``betas`` (at alpha, cond);
    :func:`hessian_term` uses the inner step sizes ``hessian_alphas``.
    """

    d: int = 20
    k: int = 3
    n: int = 20
    cond: float = 2.0
    scale: float = 1.0
    mean_norm: float = 0.0
    delta0: float = 0.5
    alpha: float = 0.25
    beta: float = 0.5
    iterations: int = 300
    seed: int = 0
    conds: tuple = (1.0, 2.0, 4.0, 8.0, 16.0)
    alphas: tuple = (0.05, 0.1, 0.2, 0.4, 0.8)
    betas: tuple = (0.1, 0.2, 0.4, 0.8, 1.6)
    sweep_iterations: int = 600
    hessian_alphas: tuple = (0.025, 0.05, 0.1, 0.2, 0.4)

    @classmethod
    def paper(cls):
        """A larger instance (d = 100, k = 5, n = 100 tasks), the size of the population
        simulations of Collins et al. (2022); heads with exact diversity replace their
        Gaussian draws so that mu_*^2 is known."""
        return cls(d=100, k=5, n=100, iterations=500, sweep_iterations=1000)

    def validate(self) -> None:
        super().validate()
        check_int(self.k, "k", 1)
        check_int(self.d, "d (needs 1 <= k < d)", self.k + 1)
        check_int(self.n, "n (tasks; diverse heads need n >= k + 1)", self.k + 1)
        check_number(self.cond, "cond (a condition number)", low=1.0)
        check_positive(self.scale, "scale")
        check_nonnegative(self.mean_norm, "mean_norm")
        check_number(self.delta0, "delta0 (a distance)", low=0.0, high=1.0, high_open=True)
        check_positive(self.alpha, "the step size alpha")
        check_positive(self.beta, "the step size beta")
        check_int(self.iterations, "iterations", 1)
        check_int(self.sweep_iterations, "sweep_iterations", 1)
        check_sequence(self.conds, "conds (condition numbers)", lambda v, n: check_number(v, n, low=1.0))
        for name in ("alphas", "betas", "hessian_alphas"):
            check_positives(getattr(self, name), name)

    @property
    def mu2(self) -> float:
        """mu_*^2, the smallest eigenvalue of (1/n) sum_i w_*_i w_*_i^T (mean_norm = 0)."""
        return self.scale**2 / self.cond


def make_problem(cfg: MamlDynamicsSettings, *, cond: float | None = None, alpha: float | None = None,
                 degenerate: bool = False, device=None) -> linear.Problem:
    """The instance of ``cfg`` (optionally with another head condition number ``cond`` or inner
    step ``alpha``, which rescales B_0). ``degenerate=True`` projects the heads onto a random
    (k-1)-dimensional subspace of R^k, so that they no longer span it (no task diversity)."""
    cond = cfg.cond if cond is None else cond
    alpha = cfg.alpha if alpha is None else alpha
    device = default_device() if device is None else torch.device(device)
    Bstar = linear.ground_truth_representation(cfg.d, cfg.k, seed=cfg.seed, device=device)
    W = linear.make_heads(cfg.n, cfg.k, mean_norm=cfg.mean_norm, cond=cond, scale=cfg.scale,
                          seed=cfg.seed + 1, device=device)
    if degenerate:
        W = linear.degenerate_heads(W, cfg.seed + 3)
    B0, w0 = maml.structured_init(Bstar, alpha, cfg.delta0, seed=cfg.seed + 2)
    return linear.Problem(Bstar, W, B0, w0)


# --------------------------------------------------------------------------- book 2.1

def adapted_heads_autograd(B: torch.Tensor, w: torch.Tensor, tasks: linear.Tasks, alpha: float) -> torch.Tensor:
    """w - alpha grad_w f_i(B, w) for every task, by ``torch.autograd`` one task at a time
    (an oracle for the closed form :func:`replearn.maml.adapted_heads`). Returns (n, k)."""
    if not alpha > 0:
        raise ValueError(f"the inner step size alpha must be positive, got {alpha}")
    heads = []
    for i in range(tasks.n):
        w_ = w.detach().clone().requires_grad_(True)
        loss = tasks.loss_theta(B.detach() @ w_, torch.tensor([i], device=B.device)).sum()
        (g,) = torch.autograd.grad(loss, (w_,))
        heads.append(w.detach() - alpha * g)
    return torch.stack(heads)


def _flat(G: tuple) -> torch.Tensor:
    return torch.cat([G[0].flatten(), G[1].flatten()])


def hessian_term(cfg: MamlDynamicsSettings, *, at: int = 10, device=None) -> dict:
    """Relative size of the Hessian term of the exact meta-gradient,

        ||G_exact - G_first-order|| / ||G_exact||   (G = (G_B, G_w) flattened),

    for MAML vs FO-MAML and ANIL vs FO-ANIL. ``"trajectory"`` maps each pair to a (T + 1,)
    tensor along the MAML run of ``cfg`` (T = ``cfg.iterations``); ``"alphas"`` maps each pair
    to a tensor over ``cfg.hessian_alphas``, each measured at iterate ``at`` of a MAML run
    with that inner step (B_0 rescaled by 1/sqrt(alpha)). Iterate 0 is skipped on the
    trajectory curve (w_0 = 0 makes the exact and first-order representation gradients vanish
    and coincide), where the entry is NaN.
    """
    if not isinstance(at, int) or at < 1:
        raise ValueError(f"at must be a positive integer (an iterate of the run), got {at!r}")
    pairs = {"MAML": "FO-MAML", "ANIL": "FO-ANIL"}

    def gap(B, w, tasks, alpha):
        out = {}
        for exact, first in pairs.items():
            G = _flat(maml.meta_gradient(B, w, tasks, algorithm=exact, alpha=alpha))
            F = _flat(maml.meta_gradient(B, w, tasks, algorithm=first, alpha=alpha))
            out[exact] = float((G - F).norm() / G.norm())
        return out

    pb = make_problem(cfg, device=device)
    traj = maml.meta_train(pb.B0, pb.w0, pb.tasks, algorithm="MAML", alpha=cfg.alpha, beta=cfg.beta,
                           iterations=cfg.iterations)
    along = {name: [float("nan")] for name in pairs}
    for t in range(1, cfg.iterations + 1):
        for name, value in gap(traj.B[t], traj.w[t], pb.tasks, cfg.alpha).items():
            along[name].append(value)
    over_alpha = {name: [] for name in pairs}
    for alpha in cfg.hessian_alphas:
        pa = make_problem(cfg, alpha=alpha, device=device)
        ta = maml.meta_train(pa.B0, pa.w0, pa.tasks, algorithm="MAML", alpha=alpha, beta=cfg.beta, iterations=at)
        for name, value in gap(ta.B[at], ta.w[at], pa.tasks, alpha).items():
            over_alpha[name].append(value)
    as_tensor = lambda d: {k: torch.tensor(v, dtype=torch.float64) for k, v in d.items()}  # noqa: E731
    return {"trajectory": as_tensor(along), "alphas": as_tensor(over_alpha),
            "dist": traj.dist(pb.Bstar).cpu()}


# --------------------------------------------------------------------------- book 2.2

@dataclass(frozen=True)
class MamlDynamicsResult:
    """The instance ``problem``, the trajectories and distances ``dist[method]`` (T + 1,) of ARM
    and the four meta-learners, and ARM's subspace ``floor`` (:func:`replearn.meta.arm_subspace_floor`)."""

    problem: linear.Problem
    trajectories: dict
    dist: dict
    floor: float


def run(cfg: MamlDynamicsSettings, *, degenerate: bool = False, device=None) -> MamlDynamicsResult:
    """ARM (step beta) and MAML, FO-MAML, ANIL, FO-ANIL (inner step alpha, outer step beta) for
    ``cfg.iterations`` steps from the structured start of ``cfg`` (Collins et al. 2022, Fig. 1
    setting with population losses)."""
    pb = make_problem(cfg, degenerate=degenerate, device=device)
    trajectories = {"ARM": meta.arm(pb.B0, pb.w0, pb.tasks, beta=cfg.beta, iterations=cfg.iterations)}
    for algorithm in maml.ALGORITHMS:
        trajectories[algorithm] = maml.meta_train(pb.B0, pb.w0, pb.tasks, algorithm=algorithm, alpha=cfg.alpha,
                                                  beta=cfg.beta, iterations=cfg.iterations)
    return MamlDynamicsResult(
        problem=pb, trajectories=trajectories,
        dist={name: tr.dist(pb.Bstar).cpu() for name, tr in trajectories.items()},
        floor=float(meta.arm_subspace_floor(pb.B0, pb.Bstar, pb.W)))


def linear_rate(dist: torch.Tensor) -> float:
    """The section's empirical linear rate of dist(B_t, B_*): :func:`replearn.rates.linear_rate`
    over the linear phase ``1e-8 < dist < 1e-1`` (above machine precision, past the transient),
    with at least 10 iterates in it. A per-step contraction factor rho gives the rate -log rho."""
    return rates.linear_rate(dist, low=1e-8, high=1e-1, min_points=10)


def rate_sweep(cfg: MamlDynamicsSettings, algorithms=("ANIL", "FO-ANIL"), device=None) -> dict:
    """Measured linear rates (:func:`linear_rate`) against the theorem's scale beta alpha mu_*^2.

    Three one-parameter sweeps around ``cfg``: the head condition number over ``cfg.conds``
    (mu_*^2 = scale^2 / cond), the inner step over ``cfg.alphas`` and the outer step over
    ``cfg.betas``, each run for ``cfg.sweep_iterations`` steps. Returns
    ``{sweep: {"values": (p,), "x": beta alpha mu^2 (p,), algorithm: rates (p,)}}`` for
    ``sweep`` in ``"cond"``, ``"alpha"``, ``"beta"``.
    """
    for algorithm in algorithms:
        if algorithm not in maml.ALGORITHMS:
            raise ValueError(f"unknown algorithm {algorithm!r}; choose from {maml.ALGORITHMS}")
    grids = {"cond": cfg.conds, "alpha": cfg.alphas, "beta": cfg.betas}
    out = {}
    for sweep, values in grids.items():
        rows = {"values": torch.tensor(values, dtype=torch.float64), "x": []}
        rows.update({a: [] for a in algorithms})
        for value in values:
            c = replace(cfg, **{sweep: float(value)})
            pb = make_problem(c, device=device)
            rows["x"].append(c.beta * c.alpha * c.mu2)
            for algorithm in algorithms:
                traj = maml.meta_train(pb.B0, pb.w0, pb.tasks, algorithm=algorithm, alpha=c.alpha, beta=c.beta,
                                       iterations=c.sweep_iterations)
                rows[algorithm].append(linear_rate(traj.dist(pb.Bstar)))
        out[sweep] = {key: torch.as_tensor(val, dtype=torch.float64) for key, val in rows.items()}
    return out


# --------------------------------------------------------------------------- book 2.3

def decomposition_check(cfg: MamlDynamicsSettings, device=None) -> dict:
    """Along the FO-ANIL run of ``cfg``: the largest entry of |B_t P_t + B_* S_t - B_{t+1}| with
    (P_t, S_t) from :func:`replearn.maml.fo_anil_decomposition` (``"error"``); the smallest
    singular value of S_t at every step (``"signal_min_sv"``, (T,)); and the singular values of
    ARM's signal weight (:func:`replearn.meta.arm_decomposition`) at the same points
    (``"arm_signal_sv"``, (T, k)), which has rank at most one."""
    pb = make_problem(cfg, device=device)
    traj = maml.meta_train(pb.B0, pb.w0, pb.tasks, algorithm="FO-ANIL", alpha=cfg.alpha, beta=cfg.beta,
                           iterations=cfg.iterations)
    err, sv_min, arm_sv = 0.0, [], []
    for t in range(cfg.iterations):
        B, w = traj.B[t], traj.w[t]
        prior, signal = maml.fo_anil_decomposition(B, w, pb.Bstar, pb.W, alpha=cfg.alpha, beta=cfg.beta)
        err = max(err, float((B @ prior + pb.Bstar @ signal - traj.B[t + 1]).abs().max()))
        sv_min.append(torch.linalg.svdvals(signal)[-1])
        arm_sv.append(torch.linalg.svdvals(meta.arm_decomposition(w, pb.W, cfg.beta)[1]))
    return {"error": err, "signal_min_sv": torch.stack(sv_min).cpu(), "arm_signal_sv": torch.stack(arm_sv).cpu(),
            "trajectory": traj, "problem": pb}


def hypotheses_runs(cfg: MamlDynamicsSettings, *, degenerate: bool = False, device=None) -> dict:
    """:func:`replearn.maml.hypotheses` (the quantities of A1-A6) along the run of every
    meta-learner on the instance of ``cfg`` (``degenerate=True``: heads without diversity).
    Returns ``{algorithm: {quantity: (T + 1,) tensor}}``."""
    res = run(cfg, degenerate=degenerate, device=device)
    pb = res.problem
    return {a: {key: val.cpu() for key, val in maml.hypotheses(res.trajectories[a], pb.Bstar, pb.W, cfg.alpha).items()}
            for a in maml.ALGORITHMS}


def contraction_envelope(cfg: MamlDynamicsSettings, c: float = 0.5) -> torch.Tensor:
    """delta0 (1 - c beta alpha mu_*^2)^t for t = 0..T: the form of the main theorem's bound
    with an explicit constant c in the Omega(.) (an illustration, not the paper's constant)."""
    rho = 1.0 - c * cfg.beta * cfg.alpha * cfg.mu2
    if not 0.0 < rho < 1.0:
        raise ValueError(f"1 - c beta alpha mu^2 = {rho} is not in (0, 1): choose a smaller c or step sizes")
    return cfg.delta0 * torch.tensor([rho**t for t in range(cfg.iterations + 1)], dtype=torch.float64)

