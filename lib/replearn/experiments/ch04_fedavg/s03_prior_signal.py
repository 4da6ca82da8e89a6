"""Book 4.3: FedAvg's global update splits into a prior and a signal weight, and the proof
sketch of its convergence (Collins et al. 2022, Sec. 4 and Theorem 1).

All three functions work on the Fig. 1 problem of ``cfg.seed``
(:func:`replearn.theory.fedavg_problems.make_problem`): :func:`decomposition_errors` checks the
decomposition B_{t+1} = B_t P_t + B_* S_t of :func:`replearn.theory.linear_federated.global_update_weights`
along a FedAvg run, :func:`signal_spectra` gives the rank of the signal weight S_t for several
tau and two head families, and :func:`contraction` follows the quantities of the proof sketch
of Theorem 1 along one run.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from replearn.theory import linear_federated, linalg, linear
from replearn.backend import DTYPE, make_generator, randn
from replearn.theory.fedavg_problems import FedAvgProblemSettings, make_problem


@dataclass(frozen=True)
class PriorSignalSettings(FedAvgProblemSettings):
    """The Fig. 1 problem of ``seed`` (``d``, ``k``, ``M`` clients, step ``alpha``) and FedAvg
    with ``tau`` local steps for ``rounds`` rounds on it (:class:`replearn.theory.fedavg_problems.
    FedAvgProblemSettings`; paper profile: d = 100, k = 5, M = 40, 1000 rounds)."""

    WORDS = {"M": "clients M", "alpha": "step size α", "tau": "FedAvg's local steps τ"}


def decomposition_errors(cfg: PriorSignalSettings, rounds: int = 100, device=None) -> dict:
    """Largest entry of |B_t P_t + B_* S_t - B_{t+1}| over ``rounds`` rounds of FedAvg(tau) on
    the Fig. 1 problem of ``cfg.seed``, with (P_t, S_t) from
    :func:`replearn.theory.linear_federated.global_update_weights` (the proposition of book 4.3).

    ``"fedavg"`` compares with the round :func:`replearn.theory.linear_federated.fedavg` took (its population
    path uses the same (k+1)-dimensional coordinates); ``"local updates"`` with the average of
    :func:`replearn.theory.linear_federated.local_updates`, plain d-dimensional gradient steps, an
    independent computation. Also returns ``"rounds"``.
    """
    pb = make_problem(cfg, cfg.seed, device=device)
    traj = linear_federated.fedavg(pb.B0, pb.w0, pb.tasks, alpha=cfg.alpha, tau=cfg.tau, rounds=rounds)
    err_fed, err_loc = 0.0, 0.0
    for t in range(rounds):
        B, w = traj.B[t], traj.w[t]
        prior, signal = linear_federated.global_update_weights(B, w, pb.Bstar, pb.W, alpha=cfg.alpha, tau=cfg.tau)
        step = B @ prior + pb.Bstar @ signal
        B_loc, _ = linear_federated.local_updates(B, w, pb.tasks, None, alpha=cfg.alpha, tau=cfg.tau)
        err_fed = max(err_fed, float((step - traj.B[t + 1]).abs().max()))
        err_loc = max(err_loc, float((step - B_loc.mean(0)).abs().max()))
    return {"rounds": rounds, "fedavg": err_fed, "local updates": err_loc}


def signal_spectra(cfg: PriorSignalSettings, taus=(1, 2, 5), head_norm: float = 0.1,
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
            _, signal = linear_federated.global_update_weights(pb.B0, w, pb.Bstar, W, alpha=cfg.alpha, tau=tau)
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


def contraction(cfg: PriorSignalSettings, device=None) -> ContractionResult:
    """The quantities of the proof sketch of Theorem 1 (book 4.3) along one FedAvg run."""
    pb = make_problem(cfg, cfg.seed, device=device)
    traj = linear_federated.fedavg(pb.B0, pb.w0, pb.tasks, alpha=cfg.alpha, tau=cfg.tau, rounds=cfg.rounds)
    Bperp = linalg.orthogonal_complement(pb.Bstar)
    perp = torch.linalg.matrix_norm(Bperp.mT @ traj.B, ord=2)
    eye = torch.eye(cfg.k, dtype=DTYPE, device=pb.B0.device)
    delta = torch.linalg.matrix_norm(eye - cfg.alpha * traj.B.mT @ traj.B, ord=2)
    prior_norm = torch.stack([
        torch.linalg.matrix_norm(linear_federated.global_update_weights(
            traj.B[t], traj.w[t], pb.Bstar, pb.W, alpha=cfg.alpha, tau=cfg.tau)[0], ord=2)
        for t in range(cfg.rounds)])
    dist = traj.dist(pb.Bstar)
    mu2 = linear.head_diversity(pb.W)[0]
    heuristic = cfg.alpha**2 * (cfg.tau - 1) * mu2 * (1 - dist[:-1] ** 2)
    return ContractionResult(dist=dist.cpu(), prior_norm=prior_norm.cpu(), perp_ratio=(perp[1:] / perp[:-1]).cpu(),
                             delta=delta[:-1].cpu(), heuristic=heuristic.cpu(), mu2=mu2)
