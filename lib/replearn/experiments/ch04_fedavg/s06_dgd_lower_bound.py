"""Book 4.6: the D-GD lower bound in federated form (Collins et al. 2022, FedAvg paper, Prop. 1).

On population losses, D-GD on the weighted global objective ``sum_i p_i f_i`` is ARM with the
weighted mean head ``sum_i p_i w_*_i``, so the construction of book 1.3 applied to the heads
rescaled by ``M p_i`` (:func:`replearn.theory.lower_bound.weighted_adversarial_instance`) gives a B_*
at distance delta from col(B_0) that D-GD never approaches, for any client weights.
:func:`run_sweep` checks this on random weighted federated instances and runs FedAvg with
``tau`` local steps on the same instances; :func:`participation_curves` follows both methods
when only part of the clients take part in each round, a case the proposition does not cover.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from replearn.theory import linear_federated
from replearn.backend import DTYPE, derive_seed, make_generator
from replearn.theory.linear import Problem
from replearn.theory.lower_bound import weighted_adversarial_instance
from replearn.settings import Each, Ge, Gt, Pair, Profile, Settings


@dataclass(frozen=True)
class DgdLowerBoundSettings(Settings):
    """Random weighted instances: how many, the ranges of d and k, M clients with sample
    counts uniform in ``sizes``, heads with a mean of norm up to ``mean_norm_max`` and a
    condition number log-uniform on [1, ``cond_max``], ``rounds`` of D-GD and of FedAvg with
    ``tau`` local steps, both with step size ``alpha``, and the seed."""

    WORDS = {"instances": "random instances", "d_range": "range of the dimension d (lowest, highest)",
             "k_range": "range of the representation size k (lowest, highest)", "clients": "clients M",
             "sizes": "range of the samples per client (lowest, highest)", "tau": "FedAvg's local steps τ",
             "mean_norm_max": "largest norm of the heads' mean",
             "cond_max": "largest condition number of the heads", "alpha": "step size α"}

    instances: Annotated[int, Ge(1)] = 40
    d_range: Annotated[tuple[int, int], Pair()] = (10, 30)
    k_range: Annotated[tuple[int, int], Pair(), Each(Ge(2))] = (2, 5)
    clients: int = 20
    sizes: Annotated[tuple[int, int], Pair(), Each(Ge(1))] = (10, 200)
    rounds: Annotated[int, Ge(1)] = 400
    tau: Annotated[int, Ge(1)] = 2
    mean_norm_max: Annotated[float, Ge(0)] = 1.0
    cond_max: Annotated[float, Ge(1)] = 10.0
    alpha: Annotated[float, Gt(0)] = 0.3
    seed: int = 0

    PAPER = Profile({"instances": 100, "d_range": (100, 100), "k_range": (5, 5), "clients": 40, "rounds": 2000},
                    doc="The paper's dimensions (d = 100, k = 5, M = 40) on more instances and rounds.")

    def validate(self) -> None:
        """The relations between the fields (each field's own range is beside it): k_max < d_min
        and more clients than k_max."""
        super().validate()
        k_hi, d_lo = self.k_range[1], self.d_range[0]
        if not k_hi < d_lo:
            raise ValueError(f"need 2 <= k_min <= k_max < d_min <= d_max, got k_range={self.k_range}, "
                             f"d_range={self.d_range}")
        if not self.clients > k_hi:
            raise ValueError(f"need more clients than k_max = {k_hi} (diverse heads), got {self.clients}")


@dataclass(frozen=True)
class DgdLowerBoundResult:
    """Per instance: ``d, k, delta``, D-GD's final and smallest distance, FedAvg's final one."""

    d: torch.Tensor
    k: torch.Tensor
    delta: torch.Tensor
    dgd_T: torch.Tensor
    dgd_min: torch.Tensor
    fedavg_T: torch.Tensor


def _instance(cfg: DgdLowerBoundSettings, i: int) -> tuple[Problem, torch.Tensor, float]:
    """Instance ``i`` of the sweep with its client sizes and delta."""
    gen = make_generator(derive_seed(cfg.seed, i))
    d = int(torch.randint(cfg.d_range[0], cfg.d_range[1] + 1, (1,), generator=gen))
    k = int(torch.randint(cfg.k_range[0], cfg.k_range[1] + 1, (1,), generator=gen))
    sizes = torch.randint(cfg.sizes[0], cfg.sizes[1] + 1, (cfg.clients,), generator=gen).to(DTYPE)
    u = torch.rand(3, generator=gen, dtype=DTYPE).tolist()
    delta = 0.5 * (1.0 - u[0])
    inst = weighted_adversarial_instance(d, k, cfg.clients, delta, sizes, cond=cfg.cond_max ** u[1],
                                         mean_norm=cfg.mean_norm_max * u[2],
                                         seed=int(torch.randint(2**31, (1,), generator=gen)))
    return inst, sizes, delta


def run_sweep(cfg: DgdLowerBoundSettings) -> DgdLowerBoundResult:
    """D-GD and FedAvg(tau), both weighted by the client sizes, on ``cfg.instances`` instances."""
    rows = []
    for i in range(cfg.instances):
        inst, sizes, delta = _instance(cfg, i)
        alpha = cfg.alpha
        tasks = inst.tasks
        d_dgd = linear_federated.dgd(inst.B0, inst.w0, tasks, alpha=alpha, rounds=cfg.rounds,
                              weights=sizes).dist(inst.Bstar)
        d_fed = linear_federated.fedavg(inst.B0, inst.w0, tasks, alpha=alpha, tau=cfg.tau, rounds=cfg.rounds,
                                 weights=sizes).dist(inst.Bstar)
        rows.append((inst.B0.shape[0], inst.B0.shape[1], delta, float(d_dgd[-1]), float(d_dgd.min()),
                     float(d_fed[-1])))
    cols = list(zip(*rows))
    return DgdLowerBoundResult(torch.tensor(cols[0]), torch.tensor(cols[1]),
                               *(torch.tensor(c, dtype=DTYPE) for c in cols[2:]))


def participation_curves(inst: Problem, *, alpha: float, rounds: int, tau: int,
                         clients_per_round: tuple[int, ...], seed: int = 0) -> dict:
    """dist(B_t, B_*) of D-GD and FedAvg(tau) when ``m`` clients are sampled per round.

    Returns ``{("D-GD" | "FedAvg", m): (rounds + 1,) tensor}`` for every m in
    ``clients_per_round`` (equal weights; m = M is full participation).
    """
    curves = {}
    for m in clients_per_round:
        for name, t in (("D-GD", 1), ("FedAvg", tau)):
            run = linear_federated.fedavg(inst.B0, inst.w0, inst.tasks, alpha=alpha, tau=t, rounds=rounds,
                                   clients_per_round=m, seed=seed)
            curves[name, m] = run.dist(inst.Bstar)
    return curves

