"""Book 1.2: ARM's population dynamics stall at a subspace floor; local updates do not
(Collins et al. 2022, Sec. 3 and Fig. 1).

One instance of the multi-task linear representation model, population losses, the same
initialisation for every method (:func:`replearn.theory.linear.random_problem`): a Haar-random
orthonormal B_0 scaled by 1/sqrt(beta) (so that beta B_0^T B_0 = I, the normalisation of
Collins et al. 2022) and w_0 = 0. :func:`run` trains ARM (gradient descent on the average risk
:func:`replearn.theory.meta.average_risk`, step beta) and, as a preview of chapter 4, FedAvg with
``tau`` local steps of the same size, and records along both trajectories the distance
dist(B_t, B_*) and the average-risk gap; it also returns ARM's subspace floor
:func:`replearn.theory.meta.arm_subspace_floor` and, for every ARM iterate, how far col(B_t) sticks
out of col(B_0) + span(v).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from replearn.theory import linear_federated, linalg, linear, meta
from replearn.backend import default_device
from replearn.checks import check_int
from replearn.settings import Ge, Gt, Profile, Settings


@dataclass(frozen=True)
class ArmDynamicsSettings(Settings):
    """Dimension d, representation size k, n tasks with Gaussian heads (``make_heads`` with
    ``exact=False``: i.i.d. N(mean, diag) draws, i.i.d. N(0, I_k) by default as in Collins et
    al. 2022, Sec. 5.1); ARM/FedAvg step ``beta``, ``iterations`` (rounds), FedAvg's ``tau``
    local steps, and the seed."""

    WORDS = {"n": "tasks n", "mean_norm": "norm of the heads' mean",
             "cond": "condition number of the heads' covariance", "beta": "step size β",
             "iterations": "rounds", "tau": "FedAvg's local steps τ"}

    d: int = 50
    k: Annotated[int, Ge(1)] = 5
    n: Annotated[int, Ge(1, why="tasks")] = 20
    mean_norm: Annotated[float, Ge(0)] = 0.0
    cond: Annotated[float, Ge(1, why="a condition number")] = 1.0
    beta: Annotated[float, Gt(0)] = 0.2
    iterations: Annotated[int, Ge(1)] = 400
    tau: Annotated[int, Ge(1)] = 2
    seed: int = 0

    PAPER = Profile({"d": 100, "k": 5, "n": 40, "iterations": 1000},
                    doc="The size of Collins et al. (2022), Fig. 1: d = 100, k = 5, 40 tasks/clients.")

    def validate(self) -> None:
        """The relation between the fields (each field's own range is beside it): k < d."""
        super().validate()
        check_int(self.d, "d (needs 1 <= k < d)", self.k + 1)


@dataclass(frozen=True)
class ArmDynamicsResult:
    """Ground truth ``Bstar``, heads ``W``, the ARM and FedAvg trajectories, their distances
    ``dist[method]`` (T + 1,), average-risk gaps ``gap[method]`` (T + 1,) above the minimum
    ``risk_min``, ARM's subspace ``floor`` and ``escape`` (T + 1,): the largest entry of
    (I - P_S) B_t with S = col(B_0) + span(v), which the theory says is zero."""

    Bstar: torch.Tensor
    W: torch.Tensor
    trajectories: dict
    dist: dict
    gap: dict
    risk_min: float
    floor: float
    escape: torch.Tensor


def run(cfg: ArmDynamicsSettings, device=None) -> ArmDynamicsResult:
    """Train ARM and FedAvg(tau) from the same (B_0, w_0 = 0) and record the quantities above."""
    device = default_device() if device is None else torch.device(device)
    pb = linear.random_problem(cfg.d, cfg.k, cfg.n, step=cfg.beta, mean_norm=cfg.mean_norm, cond=cfg.cond,
                               seed=cfg.seed, device=device)
    Bstar, W, B0, w0, tasks = pb.Bstar, pb.W, pb.B0, pb.w0, pb.tasks
    trajectories = {
        "ARM": meta.arm(B0, w0, tasks, beta=cfg.beta, iterations=cfg.iterations),
        "FedAvg": linear_federated.fedavg(B0, w0, tasks, alpha=cfg.beta, tau=cfg.tau, rounds=cfg.iterations),
    }
    risk_min = meta.average_risk_minimum(W)
    gap = {name: meta.average_risk(tr.B, tr.w, tasks.theta) - risk_min for name, tr in trajectories.items()}
    S = linalg.orthonormal_basis(torch.cat([B0, pb.mean_regressor.unsqueeze(-1)], dim=1))
    B_arm = trajectories["ARM"].B
    escape = (B_arm - S @ (S.mT @ B_arm)).abs().amax(dim=(1, 2)) / B_arm.abs().amax(dim=(1, 2))
    return ArmDynamicsResult(
        Bstar=Bstar, W=W, trajectories=trajectories,
        dist={name: tr.dist(Bstar).cpu() for name, tr in trajectories.items()},
        gap={name: g.cpu() for name, g in gap.items()}, risk_min=risk_min,
        floor=float(meta.arm_subspace_floor(B0, Bstar, W)), escape=escape.cpu())
