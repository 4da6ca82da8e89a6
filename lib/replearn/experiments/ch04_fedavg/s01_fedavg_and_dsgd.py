"""Book 4.1: FedAvg (Collins et al. 2022, Algorithm 1; McMahan et al. 2017) and D-GD on the
clients of the linear representation model, and FedAvg's objective inconsistency (Wang et al. 2020).

The instance is the one of book 1.2 (:func:`replearn.theory.linear.random_problem` with the same sizes
and seed): n = M clients with population losses, a Haar-random B_0 with alpha B_0^T B_0 = I_k and
w_0 = 0. The notebook runs :func:`replearn.theory.linear_federated.fedavg` and :func:`replearn.theory.linear_federated.dgd`
on it for ``rounds`` rounds and compares their global-gradient norms, distances to B_* and
fine-tuned errors on new clients.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from replearn.theory import linear
from replearn.checks import check_int
from replearn.settings import Ge, Gt, Profile, Settings


@dataclass(frozen=True)
class FedAvgDsgdSettings(Settings):
    """Dimension d, representation size k, n clients (M in the text) with Gaussian heads
    (``make_heads`` with ``exact=False``, i.i.d. N(0, I_k) by default as in Collins et al. 2022,
    Sec. 5.1), the step ``alpha`` of every local step, FedAvg's ``tau`` local steps, FedAvg's
    ``rounds`` (D-GD runs tau x rounds rounds, the same number of local steps), and the seed. The
    CPU default is the instance of book 1.2 with 2.5 times its iterations."""

    WORDS = {"n": "clients M", "mean_norm": "norm of the heads' mean",
             "cond": "condition number of the heads' second moment",
             "alpha": "step size α of every local step", "tau": "FedAvg's local steps τ",
             "rounds": "FedAvg's rounds (D-GD runs τ times as many)"}

    d: int = 50
    k: Annotated[int, Ge(1)] = 5
    n: Annotated[int, Ge(1, why="clients")] = 20
    mean_norm: Annotated[float, Ge(0)] = 0.0
    cond: Annotated[float, Ge(1, why="a condition number")] = 1.0
    alpha: Annotated[float, Gt(0)] = 0.2
    tau: Annotated[int, Ge(1)] = 2
    rounds: Annotated[int, Ge(1)] = 1000
    seed: int = 0

    PAPER = Profile({"d": 100, "k": 5, "n": 40, "rounds": 2500},
                    doc="The size of Collins et al. (2022), Fig. 1: d = 100, k = 5, 40 clients.")

    def validate(self) -> None:
        """The relation between the fields (each field's own range is beside it): k < d."""
        super().validate()
        check_int(self.d, "d (needs 1 <= k < d)", self.k + 1)


def make_problem(cfg: FedAvgDsgdSettings, device=None) -> linear.Problem:
    """The clients' ground truth B_* (d, k), heads W (n, k) and the start (B_0, w_0 = 0) with
    alpha B_0^T B_0 = I_k, drawn from ``cfg.seed``, ``cfg.seed + 1``, ``cfg.seed + 2`` (on the
    CPU unless ``device`` is given)."""
    return linear.random_problem(cfg.d, cfg.k, cfg.n, step=cfg.alpha, mean_norm=cfg.mean_norm, cond=cfg.cond,
                                 seed=cfg.seed, device=device)


def finetune_errors(runs: dict, new, theta_new: torch.Tensor, *, lr: float = 0.1, steps: int = 200) -> dict:
    """Per run of ``runs`` (name -> trajectory), the excess risk of each new client (its data
    ``new.X[j], new.Y[j]``, its true regressor ``theta_new[j]``) after ``steps`` steps of joint
    gradient descent (:func:`replearn.theory.linear.finetune_gd`) from the run's final model."""
    errors = {}
    for name, tr in runs.items():
        tuned = [linear.finetune_gd(*tr.final, new.X[j], new.Y[j], lr=lr, steps=steps) for j in range(len(theta_new))]
        errors[name] = torch.stack([linear.excess_risk(B, w, theta_new[j]) for j, (B, w) in enumerate(tuned)])
    return errors
