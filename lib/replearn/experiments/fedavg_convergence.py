"""FedAvg learns B_*: prior/signal weights, Fig. 1, and the rate of Theorem 1 (book 4.3-4.4).

The setting is Collins et al. (2022), Sec. 3 and 5.1: M clients with population losses
f_i(B, w) = 1/2 ||B w - B_* w_*_i||^2, a Haar-random B_* in O^{d x k}, an initial
representation scaled so that alpha B_0^T B_0 = I_k (condition (ii) of Theorem 1 with zero
error) and w_0 = 0 (condition (iii)). Two kinds of problems are used:

* **Fig. 1 problems** (:func:`figure1`, :func:`participation`): Gaussian heads
  (``make_heads(exact=False)``, i.i.d. N(0, I_k) as in the paper's Sec. 5.1) and a random
  B_0, so dist(B_0, B_*) is close to 1;
* **rate problems** (:func:`rate_sweep`): heads whose centred covariance has condition
  number exactly ``cond`` and eigenvalues in [1/cond, 1] (``make_heads(exact=True)``, so the
  diversity constant of Assumption 2 is mu^2 = 1/cond), started at distance ``delta0``
  from B_* (condition (i) with E_0 = 1 - delta0^2 fixed across the sweep).

:func:`linear_rate` measures the empirical linear rate, the slope of -log dist(B_t, B_*)
per round in the linear phase, which Theorem 1 predicts to scale like alpha^2 tau mu^2 E_0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import federated, linalg, linear, rates
from ..backend import DTYPE, default_device, derive_seed, make_generator, randn
from ..checks import check_fraction, check_int, check_ints, check_number, check_positive, check_sequence
from ..profiles import Settings


@dataclass(frozen=True)
class FedAvgConvergenceSettings(Settings):
    """Dimension d, representation size k, M clients; FedAvg step ``alpha`` with ``tau`` local
    steps for ``rounds`` rounds, averaged over ``seeds`` problem instances (instance j drawn from
    the seed :func:`replearn.backend.derive_seed` ``(seed, j)``).

    The rate sweep (:func:`rate_sweep`) uses ``taus`` at the head condition number 1 and
    ``conds`` at ``diversity_tau`` local steps, ``sweep_rounds`` rounds from distance
    ``delta0`` and ``sweep_seeds`` instances; :func:`participation` samples
    ``round(f * M)`` clients per round for every fraction f in ``fractions``.
    """

    d: int = 50
    k: int = 5
    M: int = 20
    alpha: float = 0.2
    tau: int = 2
    rounds: int = 600
    seeds: int = 3
    seed: int = 0
    taus: tuple = (1, 2, 3, 5, 10)
    conds: tuple = (1.0, 2.0, 4.0, 8.0, 16.0)
    diversity_tau: int = 5
    delta0: float = 0.9
    sweep_rounds: int = 600
    sweep_seeds: int = 2
    fractions: tuple = (1.0, 0.5, 0.25)

    @classmethod
    def paper(cls):
        """Collins et al. (2022), Fig. 1: d = 100, k = 5, M = 40, all clients, tau = 2, 10 runs."""
        return cls(d=100, k=5, M=40, tau=2, rounds=1000, seeds=10, sweep_seeds=5)

    def validate(self) -> None:
        super().validate()
        check_int(self.k, "k", 1)
        check_int(self.d, "d (needs 1 <= k < d)", self.k + 1)
        check_int(self.M, "M (clients; diverse heads need M >= k + 1)", self.k + 1)
        check_positive(self.alpha, "alpha")
        for name in ("tau", "rounds", "seeds", "diversity_tau", "sweep_rounds", "sweep_seeds"):
            check_int(getattr(self, name), name, 1)
        check_ints(self.taus, "taus (local steps per round)")
        check_sequence(self.conds, "conds (condition numbers)", lambda v, n: check_number(v, n, low=1.0))
        check_number(self.delta0, "delta0 (a distance)", low=0.0, high=1.0, high_open=True)
        check_sequence(self.fractions, "fractions (of participating clients)", check_fraction)


def make_problem(cfg: FedAvgConvergenceSettings, seed: int, *, cond: float | None = None,
                 delta0: float | None = None, device=None) -> linear.Problem:
    """A Fig. 1 problem (``cond=None``: Gaussian heads; ``delta0=None``: random B_0) or a rate
    problem (exact heads of condition number ``cond``; B_0 at distance ``delta0`` from B_*).
    In both cases alpha B_0^T B_0 = I_k and w_0 = 0."""
    device = default_device() if device is None else torch.device(device)
    Bstar = linear.ground_truth_representation(cfg.d, cfg.k, seed=seed, device=device)
    if cond is None:
        W = linear.make_heads(cfg.M, cfg.k, exact=False, seed=seed + 1, device=device)
    else:
        W = linear.make_heads(cfg.M, cfg.k, cond=cond, exact=True, seed=seed + 1, device=device)
    if delta0 is None:
        Q0 = linalg.random_orthonormal(cfg.d, cfg.k, seed=seed + 2, device=device)
    else:
        Q0 = linalg.basis_at_distance(Bstar, delta0, seed=seed + 2)
    return linear.Problem(Bstar, W, Q0 / cfg.alpha**0.5, torch.zeros(cfg.k, dtype=DTYPE, device=device))


# --------------------------------------------------------------------------- book 4.3

def decomposition_errors(cfg: FedAvgConvergenceSettings, rounds: int = 100, device=None) -> dict:
    """Largest entry of |B_t P_t + B_* S_t - B_{t+1}| over ``rounds`` rounds of FedAvg(tau) on
    the Fig. 1 problem of ``cfg.seed``, with (P_t, S_t) from
    :func:`replearn.federated.global_update_weights` (the proposition of book 4.3).

    ``"fedavg"`` compares with the round :func:`replearn.federated.fedavg` took (its population
    path uses the same (k+1)-dimensional coordinates); ``"local updates"`` with the average of
    :func:`replearn.federated.local_updates`, plain d-dimensional gradient steps, an
    independent computation. Also returns ``"rounds"``.
    """
    pb = make_problem(cfg, cfg.seed, device=device)
    traj = federated.fedavg(pb.B0, pb.w0, pb.tasks, alpha=cfg.alpha, tau=cfg.tau, rounds=rounds)
    err_fed, err_loc = 0.0, 0.0
    for t in range(rounds):
        B, w = traj.B[t], traj.w[t]
        prior, signal = federated.global_update_weights(B, w, pb.Bstar, pb.W, alpha=cfg.alpha, tau=cfg.tau)
        step = B @ prior + pb.Bstar @ signal
        B_loc, _ = federated.local_updates(B, w, pb.tasks, None, alpha=cfg.alpha, tau=cfg.tau)
        err_fed = max(err_fed, float((step - traj.B[t + 1]).abs().max()))
        err_loc = max(err_loc, float((step - B_loc.mean(0)).abs().max()))
    return {"rounds": rounds, "fedavg": err_fed, "local updates": err_loc}


def signal_spectra(cfg: FedAvgConvergenceSettings, taus=(1, 2, 5), head_norm: float = 0.1,
                   device=None) -> dict:
    """Singular values (descending, shape (k,)) of the signal weight at one common point
    (B_0, w) of the Fig. 1 problem of ``cfg.seed``, with w a random head of norm
    ``head_norm``, for every tau in ``taus`` and two head families: ``"diverse"`` (the
    Gaussian heads) and ``"degenerate"`` (the same heads in a (k-1)-dimensional subspace).
    Returns ``{family: {tau: svals}}``."""
    if not head_norm > 0:
        raise ValueError(f"head_norm must be positive, got {head_norm}")
    pb = make_problem(cfg, cfg.seed, device=device)
    w = randn(cfg.k, generator=make_generator(cfg.seed + 3), device=pb.B0.device)
    w = head_norm * w / w.norm()
    families = {"diverse": pb.W, "degenerate": linear.degenerate_heads(pb.W, cfg.seed + 4)}
    out = {}
    for name, W in families.items():
        out[name] = {}
        for tau in taus:
            _, signal = federated.global_update_weights(pb.B0, w, pb.Bstar, W, alpha=cfg.alpha, tau=tau)
            out[name][tau] = torch.linalg.svdvals(signal).cpu()
    return out


@dataclass(frozen=True)
class ContractionResult:
    """Per round t of FedAvg(tau) on the Fig. 1 problem: ``dist`` (T + 1,) and, for t < T,
    ``prior_norm`` = ||P_t||_2, ``perp_ratio`` = ||B_*perp^T B_{t+1}|| / ||B_*perp^T B_t||,
    ``delta`` = ||I - alpha B_t^T B_t||_2 and ``heuristic`` = alpha^2 (tau - 1) mu_t^2
    (1 - dist_t^2) with mu_t^2 the smallest eigenvalue of (1/M) sum_i w_*_i w_*_i^T."""

    dist: torch.Tensor
    prior_norm: torch.Tensor
    perp_ratio: torch.Tensor
    delta: torch.Tensor
    heuristic: torch.Tensor
    mu2: float


def contraction(cfg: FedAvgConvergenceSettings, device=None) -> ContractionResult:
    """The quantities of the proof sketch of Theorem 1 (book 4.3) along one FedAvg run."""
    pb = make_problem(cfg, cfg.seed, device=device)
    traj = federated.fedavg(pb.B0, pb.w0, pb.tasks, alpha=cfg.alpha, tau=cfg.tau, rounds=cfg.rounds)
    Bperp = linalg.orthogonal_complement(pb.Bstar)
    perp = torch.linalg.matrix_norm(Bperp.mT @ traj.B, ord=2)
    eye = torch.eye(cfg.k, dtype=DTYPE, device=pb.B0.device)
    delta = torch.linalg.matrix_norm(eye - cfg.alpha * traj.B.mT @ traj.B, ord=2)
    prior_norm = torch.stack([
        torch.linalg.matrix_norm(federated.global_update_weights(
            traj.B[t], traj.w[t], pb.Bstar, pb.W, alpha=cfg.alpha, tau=cfg.tau)[0], ord=2)
        for t in range(cfg.rounds)])
    dist = traj.dist(pb.Bstar)
    mu2 = linear.head_diversity(pb.W)[0]
    heuristic = cfg.alpha**2 * (cfg.tau - 1) * mu2 * (1 - dist[:-1] ** 2)
    return ContractionResult(dist=dist.cpu(), prior_norm=prior_norm.cpu(), perp_ratio=(perp[1:] / perp[:-1]).cpu(),
                             delta=delta[:-1].cpu(), heuristic=heuristic.cpu(), mu2=mu2)


# --------------------------------------------------------------------------- book 4.4: Fig. 1

@dataclass(frozen=True)
class CurvesResult:
    """dist(B_t, B_*) per method: ``dist[name]`` of shape (runs, T + 1), rounds 0..T."""

    dist: dict

    def mean(self, name: str) -> torch.Tensor:
        return self.dist[name].mean(0)

    def band(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        return self.dist[name].min(0).values, self.dist[name].max(0).values


def figure1(cfg: FedAvgConvergenceSettings, device=None) -> CurvesResult:
    """Collins et al. (2022), Fig. 1: dist(B_t, B_*) of FedAvg (tau local steps) and D-GD
    (tau = 1), all clients, same step size and start, over ``cfg.seeds`` instances."""
    curves = {"FedAvg": [], "D-GD": []}
    for j in range(cfg.seeds):
        s = derive_seed(cfg.seed, j)
        pb = make_problem(cfg, s, device=device)
        fed = federated.fedavg(pb.B0, pb.w0, pb.tasks, alpha=cfg.alpha, tau=cfg.tau, rounds=cfg.rounds)
        gd = federated.dgd(pb.B0, pb.w0, pb.tasks, alpha=cfg.alpha, rounds=cfg.rounds)
        curves["FedAvg"].append(fed.dist(pb.Bstar).cpu())
        curves["D-GD"].append(gd.dist(pb.Bstar).cpu())
    return CurvesResult({name: torch.stack(c) for name, c in curves.items()})


def participation(cfg: FedAvgConvergenceSettings, device=None) -> CurvesResult:
    """FedAvg(tau) on the Fig. 1 problems with m = round(f M) clients sampled per round, for
    every fraction f in ``cfg.fractions``; keys ``"m = ..."``."""
    curves = {}
    for f in cfg.fractions:
        m = max(1, round(f * cfg.M))
        runs = []
        for j in range(cfg.seeds):
            s = derive_seed(cfg.seed, j)
            pb = make_problem(cfg, s, device=device)
            tr = federated.fedavg(pb.B0, pb.w0, pb.tasks, alpha=cfg.alpha, tau=cfg.tau, rounds=cfg.rounds,
                                  clients_per_round=m, seed=s + 5)
            runs.append(tr.dist(pb.Bstar).cpu())
        curves[f"m = {m}"] = torch.stack(runs)
    return CurvesResult(curves)


def roughness(dist: torch.Tensor, floor: float = 1e-12) -> float:
    """Standard deviation of the per-round log-contraction log(dist_{t+1} / dist_t) over the
    second half of the linear phase (see :func:`linear_rate`): 0 for an exactly geometric
    decay, larger when the rounds are noisy."""
    lo, hi = _linear_window(dist, floor)
    steps = torch.diff(torch.log(dist[lo:hi + 1]))
    return float(steps.std()) if steps.numel() >= 2 else 0.0


# --------------------------------------------------------------------------- book 4.4: the rate

def _linear_window(dist: torch.Tensor, floor: float) -> tuple[int, int]:
    if dist.ndim != 1 or dist.numel() < 3:
        raise ValueError(f"need a 1-d curve of at least 3 rounds, got shape {tuple(dist.shape)}")
    if not floor > 0:
        raise ValueError(f"floor must be positive, got {floor}")
    if not bool((dist > 0).all()) or not bool(torch.isfinite(dist).all()):
        raise ValueError("the distance curve must be finite and positive")
    below = torch.nonzero(dist <= floor)
    end = int(below[0, 0]) - 1 if below.numel() else dist.numel() - 1
    end = max(end, 2)
    return end // 2, end


def linear_rate(dist: torch.Tensor, floor: float = 1e-12) -> float:
    """Empirical linear rate: minus the least-squares slope of log dist_t against t over the
    second half of the rounds before dist first reaches ``floor`` (all rounds if it never
    does). A curve dist_t = C rho^t has rate -log rho; a flat curve has rate 0."""
    lo, hi = _linear_window(dist, floor)
    return -rates.log_linear_fit(torch.arange(lo, hi + 1, dtype=DTYPE), dist[lo:hi + 1]).slope


@dataclass(frozen=True)
class RateSweepResult:
    """Measured rates (mean over seeds) and the predicted scaling alpha^2 tau mu^2.

    ``taus``, ``rate_tau``, ``predicted_tau``: the tau sweep at cond = 1 (mu^2 = 1);
    ``conds``, ``rate_cond``, ``predicted_cond``: the cond sweep at ``diversity_tau``;
    ``curves_tau`` / ``curves_cond``: dist curves of the first seed (for plots)."""

    taus: tuple
    rate_tau: torch.Tensor
    predicted_tau: torch.Tensor
    curves_tau: torch.Tensor
    conds: tuple
    rate_cond: torch.Tensor
    predicted_cond: torch.Tensor
    curves_cond: torch.Tensor
    tau_at_cond: int


def _rate_runs(cfg, cond, tau, device):
    measured, first, mu2s = [], None, []
    for j in range(cfg.sweep_seeds):
        pb = make_problem(cfg, derive_seed(cfg.seed, j), cond=cond, delta0=cfg.delta0, device=device)
        dist = federated.fedavg(pb.B0, pb.w0, pb.tasks, alpha=cfg.alpha, tau=tau,
                                rounds=cfg.sweep_rounds).dist(pb.Bstar).cpu()
        measured.append(linear_rate(dist))
        mu2s.append(linear.head_diversity(pb.W, centred=True)[0])
        first = dist if first is None else first
    return sum(measured) / len(measured), sum(mu2s) / len(mu2s), first


def rate_sweep(cfg: FedAvgConvergenceSettings, device=None) -> RateSweepResult:
    """Empirical linear rate of FedAvg over ``cfg.taus`` (heads with cond = 1) and over
    ``cfg.conds`` (at ``cfg.diversity_tau`` local steps), with the predicted scaling
    alpha^2 tau mu^2 of Theorem 1 (mu^2: smallest eigenvalue of the centred head covariance,
    Assumption 2; E_0 = 1 - delta0^2 is the same for every run and left out)."""
    if any(not (isinstance(t, int) and t >= 1) for t in cfg.taus + (cfg.diversity_tau,)):
        raise ValueError(f"local step counts must be integers >= 1, got {cfg.taus}, {cfg.diversity_tau}")
    a2 = cfg.alpha**2
    rt, pt, ct = [], [], []
    for tau in cfg.taus:
        r, mu2, c = _rate_runs(cfg, 1.0, tau, device)
        rt.append(r)
        pt.append(a2 * tau * mu2)
        ct.append(c)
    rc, pc, cc = [], [], []
    for cond in cfg.conds:
        r, mu2, c = _rate_runs(cfg, float(cond), cfg.diversity_tau, device)
        rc.append(r)
        pc.append(a2 * cfg.diversity_tau * mu2)
        cc.append(c)
    t64 = lambda x: torch.tensor(x, dtype=DTYPE)  # noqa: E731
    return RateSweepResult(taus=tuple(cfg.taus), rate_tau=t64(rt), predicted_tau=t64(pt), curves_tau=torch.stack(ct),
                           conds=tuple(cfg.conds), rate_cond=t64(rc), predicted_cond=t64(pc),
                           curves_cond=torch.stack(cc), tau_at_cond=cfg.diversity_tau)
