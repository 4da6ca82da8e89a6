"""Book 5.4: local only, one global model and FedRep on fixed data (Collins, Hassani, Mokhtari,
Shakkottai 2021, Sec. 5.1, Fig. 1).

Every client ``i`` has ``m`` fixed samples ``x ~ N(0, I_d)``, ``y = <B_* w_*_i, x> + N(0, noise_std^2)``
with a Haar-random ``B_*`` and heads of norm ``sqrt(k)`` (:func:`replearn.theory.linear_fedrep.paper_instance`).
:func:`run_fig1` measures the global error of eq. (3), ``(1/2n) sum_i ||theta_i - theta_*_i||^2``,
of local-only ridge regression, of the single shared model minimising objective (4) (FedAvg's
objective; we use its exact minimiser :func:`replearn.theory.linear_fedrep.single_model_least_squares` in place
of running FedAvg) and of FedRep (:func:`replearn.theory.linear_fedrep.train_fedrep`: Algorithm 2 on the fixed
data, method-of-moments start, heads refitted on the final B). The paper's label noise
N(., 10^-3) is read as a variance (:data:`replearn.theory.linear_fedrep.PAPER_NOISE_STD`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import torch

from replearn.theory import linear_fedrep
from replearn.backend import DTYPE, default_device, derive_seed
from replearn.theory.linear_fedrep import FigureSettings
from replearn.theory.linear import predict, targets
from replearn.settings import Each, Ge, Gt, Le, Profile

FIG1_METHODS = ("local only", "single model", "FedRep")


@dataclass(frozen=True)
class Fig1Settings(FigureSettings):
    """Fig. 1: dimension d, representation size k, n clients, the grid ``ms`` of samples per
    client, label noise, FedRep's step ``eta``, ``rounds`` and participation ``r``, the
    local-only ``ridge`` (in the 1/(2m) normalisation of eq. (7)), and the number of
    independent repetitions ``seeds`` (new B_*, heads and data each)."""

    WORDS = {"seeds": "independent repetitions", "n": "clients n", "ms": "samples per client m",
             "r": "participation rate r", "ridge": "ridge of the local-only fits",
             "eta": "FedRep's step size η"}

    seeds: int = 5
    n: Annotated[int, Ge(1, why="clients")] = 100
    ms: Annotated[tuple[int, ...], Each(Ge(1), entry="every m in ms (samples per client)")] = (5, 10, 20)
    r: Annotated[float, Gt(0, why="participation rate"), Le(1)] = 1.0
    ridge: Annotated[float, Ge(0)] = 0.01

    PAPER = Profile({"rounds": 1000, "seeds": 10},
                    doc="The paper's d = 20, k = 2, n = 100 and m in {5, 10, 20}; rounds and repetitions are "
                        "not stated, we use 1000 rounds and 10 repetitions.")


@dataclass(frozen=True)
class Fig1Result:
    """``errors[method]`` (seeds, M): global error (3) at every m in ``ms``; ``dist0`` and
    ``dist`` (seeds, M): FedRep's distance at the start (method of moments) and at the end;
    ``floor`` (seeds,): the population global error of the best single model (Sec. 2.1)."""

    ms: tuple
    errors: dict
    dist0: torch.Tensor
    dist: torch.Tensor
    floor: torch.Tensor

    def mean(self, method: str) -> torch.Tensor:
        return self.errors[method].mean(0)

    def sem(self, method: str) -> torch.Tensor:
        e = self.errors[method]
        return e.std(0) / math.sqrt(e.shape[0]) if e.shape[0] > 1 else torch.zeros_like(e[0])


def run_fig1(cfg: Fig1Settings, device=None) -> Fig1Result:
    """Global error (3) of local-only, the single model of (4) and FedRep at every m (Fig. 1)."""
    device = default_device() if device is None else torch.device(device)
    errors = {name: torch.zeros(cfg.seeds, len(cfg.ms), dtype=DTYPE) for name in FIG1_METHODS}
    dist0 = torch.zeros(cfg.seeds, len(cfg.ms), dtype=DTYPE)
    dist = torch.zeros_like(dist0)
    floor = torch.zeros(cfg.seeds, dtype=DTYPE)
    for s in range(cfg.seeds):
        Bstar, W = linear_fedrep.paper_instance(cfg.d, cfg.k, cfg.n, derive_seed(cfg.seed, s), device)
        theta = targets(Bstar, W)
        floor[s] = float(linear_fedrep.single_model_error_formula(theta))
        for j, m in enumerate(cfg.ms):
            data, res, heads = linear_fedrep.train_fedrep(Bstar, W, m, noise_std=cfg.noise_std, eta=cfg.eta,
                                                   rounds=cfg.rounds, r=cfg.r, seed=derive_seed(cfg.seed, s, m))
            fits = {"local only": linear_fedrep.local_only(data, cfg.ridge),
                    "single model": linear_fedrep.single_model_least_squares(data),
                    "FedRep": predict(res.B[-1], heads)}
            for name, fit in fits.items():
                errors[name][s, j] = float(linear_fedrep.global_error(fit, theta))
            d_t = res.dist(Bstar)
            dist0[s, j], dist[s, j] = float(d_t[0]), float(d_t[-1])
    return Fig1Result(tuple(cfg.ms), errors, dist0, dist, floor)


def error_table(res: Fig1Result, cfg: Fig1Settings) -> str:
    """Per number of samples m per client, as lines of text: the global error (mean ± s.e.m.
    over seeds) of local-only training, the single model and FedRep, and FedRep's distance to
    B_* at the start and at the end."""
    lines = [f"{'m':>3} | {'local only':>16} | {'single model':>16} | {'FedRep':>18} | dist(B_0) -> dist(B_T)"]
    for j, m in enumerate(cfg.ms):
        cols = [f"{float(res.mean(name)[j]):.4f} ± {float(res.sem(name)[j]):.4f}" for name in ("local only",
                                                                                             "single model")]
        fed = f"{float(res.mean('FedRep')[j]) * 1e4:.2f}e-4 ± {float(res.sem('FedRep')[j]) * 1e4:.2f}e-4"
        lines.append(f"{m:>3} | {cols[0]:>16} | {cols[1]:>16} | {fed:>18} | "
                     f"{float(res.dist0[:, j].mean()):.3f} -> {float(res.dist[:, j].mean()):.4f}")
    return "\n".join(lines)
