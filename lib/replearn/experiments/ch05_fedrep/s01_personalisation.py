"""Book 5.1: personalisation in the linear model (Collins, Hassani, Mokhtari, Shakkottai, ICML 2021,
Sec. 2.1, objectives (3) and (4)).

n clients with samples ``x ~ N(0, I_d)``, ``y = <B_* w_*_i, x>``: the single shared regressor that
minimises the pooled objective (4) has the global error (1/2n) sum_i ||theta_*_i - theta_bar_*||^2
(:func:`replearn.theory.linear_fedrep.single_model_error_formula`), which grows with the spread of the heads,
while the personalised objective (3) has minimum zero (FedRep on the same data reaches it);
local-only least squares needs m >= d samples per client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from replearn.theory import linear_fedrep, linear
from replearn.backend import default_device
from replearn.theory.linear_fedrep import InstanceSettings
from replearn.book.plotting import COLORS, to_numpy
from replearn.settings import Each, Ge, Gt, Profile


@dataclass(frozen=True)
class PersonalisationSettings(InstanceSettings):
    """Dimension d, representation size k, n clients with m noiseless samples each. The heads
    are ``make_heads(mean_norm=mean_norm, scale=s, exact=True)`` for each spread s in ``spreads``:
    a common mean head of norm ``mean_norm`` plus a centred part whose covariance is exactly
    s^2 I_k. ``local_ms`` are the per-client sample sizes of the local-only fits (paper heads,
    ||w_*_i|| = sqrt(k)); FedRep (MoM start, step ``eta``, ``rounds``) runs on the same data."""

    WORDS = {"n": "clients n", "m": "samples per client m", "mean_norm": "norm of the mean head",
             "spreads": "spreads s of the heads", "local_ms": "samples per client of the local-only fits",
             "eta": "FedRep's step size η", "rounds": "FedRep's rounds"}

    n: Annotated[int, Ge(2)] = 100
    m: Annotated[int, Ge(1)] = 50
    mean_norm: Annotated[float, Ge(0)] = 1.0
    spreads: Annotated[tuple, Each(Gt(0))] = (0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0)
    local_ms: Annotated[tuple, Each(Ge(1))] = (2, 5, 10, 15, 20, 30, 40)
    eta: Annotated[float, Gt(0)] = 0.5
    rounds: Annotated[int, Ge(0)] = 200

    PAPER = Profile({"n": 100, "m": 100, "rounds": 500},
                    doc="Sec. 5.1 of the paper: d = 20, k = 2, n = 100 clients.")


@dataclass(frozen=True)
class PersonalisationResult:
    """Per spread: the global error of the fitted single model ``single`` and the formula
    ``formula`` = (1/2n) sum ||theta_*_i - theta_bar||^2 (= k s^2 / 2), the distance
    ``to_mean`` = ||theta_hat - theta_bar_*||, FedRep's global error ``fedrep`` (eq. 3) and
    final distance ``fedrep_dist``. Per local sample size: ``local`` error and its formula
    ``local_formula`` = (1 - m/d)_+ mean ||theta_*_i||^2 / 2."""

    spreads: torch.Tensor
    single: torch.Tensor
    formula: torch.Tensor
    to_mean: torch.Tensor
    fedrep: torch.Tensor
    fedrep_dist: torch.Tensor
    local_ms: torch.Tensor
    local: torch.Tensor
    local_formula: torch.Tensor


def run_personalisation(cfg: PersonalisationSettings, device=None) -> PersonalisationResult:
    """Single model vs personalised model vs local-only, on sampled noiseless data (book 5.1)."""
    device = default_device() if device is None else torch.device(device)
    Bstar = linear.ground_truth_representation(cfg.d, cfg.k, seed=cfg.seed, device=device)
    single, formula, to_mean, fr, fr_dist = [], [], [], [], []
    for j, s in enumerate(cfg.spreads):
        W = linear.make_heads(cfg.n, cfg.k, mean_norm=cfg.mean_norm, scale=float(s), exact=True,
                              seed=cfg.seed + 1, device=device)
        theta_star = linear.targets(Bstar, W)
        data = linear.sample_tasks(Bstar, W, cfg.m, seed=cfg.seed + 2 + j)
        theta = linear_fedrep.single_model_least_squares(data)
        single.append(linear_fedrep.global_error(theta, theta_star))
        formula.append(linear_fedrep.single_model_error_formula(theta_star))
        to_mean.append((theta - theta_star.mean(0)).norm())
        res = linear_fedrep.fedrep(linear_fedrep.method_of_moments_init(data, cfg.k), data, eta=cfg.eta, rounds=cfg.rounds)
        fr.append(res.global_error(Bstar, W))
        fr_dist.append(res.dist(Bstar)[-1])
    W = linear_fedrep.paper_heads(cfg.n, cfg.k, seed=cfg.seed + 1, device=device)
    theta_star = linear.targets(Bstar, W)
    local, local_formula = [], []
    for j, m in enumerate(cfg.local_ms):
        data = linear.sample_tasks(Bstar, W, m, seed=cfg.seed + 100 + j)
        local.append(linear_fedrep.global_error(linear_fedrep.local_only(data), theta_star))
        local_formula.append(max(0.0, 1.0 - m / cfg.d) * 0.5 * float(theta_star.square().sum(-1).mean()))
    stack = lambda xs: torch.stack(xs).cpu()  # noqa: E731
    return PersonalisationResult(
        spreads=torch.tensor(cfg.spreads, dtype=torch.float64), single=stack(single), formula=stack(formula),
        to_mean=stack(to_mean), fedrep=stack(fr), fedrep_dist=stack(fr_dist),
        local_ms=torch.tensor(cfg.local_ms), local=stack(local),
        local_formula=torch.tensor(local_formula, dtype=torch.float64))


# --------------------------------------------------------------------------- what the page shows

def _small(x: float) -> str:
    return "< 1e-12" if x < 1e-12 else f"{x:.1e}"   # below 1e-12 is rounding noise


def spread_table(res: PersonalisationResult, cfg: PersonalisationSettings) -> str:
    """Per head spread s, as lines of text: the single model's global error beside the formula
    ``k s^2/2`` and its excess, and FedRep's error and distance to B_*."""
    k = cfg.k
    lines = [" spread s | single-model error | k s^2/2 formula | excess = 0.5||theta - mean||^2 | FedRep error "
             "| FedRep dist"]
    for j, s in enumerate(cfg.spreads):
        excess = float(res.single[j] - res.formula[j])
        lines.append(f"   {s:5.2f}  |      {float(res.single[j]):7.4f}       |     {k * s**2 / 2:7.4f}     |"
                     f"        {excess:.4f} = {0.5 * float(res.to_mean[j])**2:.4f}       |"
                     f"  {_small(float(res.fedrep[j])):>7}   |  {_small(float(res.fedrep_dist[j])):>7}")
    return "\n".join(lines)


def local_table(res: PersonalisationResult, cfg: PersonalisationSettings) -> str:
    """Per number of samples m per client, as lines of text: local-only training's error
    beside the formula ``(1 - m/d)_+ k/2``."""
    lines = [" m  | m/d  | local-only error | (1 - m/d)_+ k/2"]
    for j, m in enumerate(cfg.local_ms):
        lines.append(f"{m:3d} | {m / cfg.d:4.2f} |      {float(res.local[j]):.3f}       |     "
                     f"{float(res.local_formula[j]):.3f}")
    return "\n".join(lines)


def plot_personalisation(res: PersonalisationResult, cfg: PersonalisationSettings):
    """Top: the global error of one shared model and of FedRep against the head spread, with
    ``k s^2/2``; bottom: local-only training's error against m/d, with ``(1 - m/d)_+ k/2`` (panels
    stacked, so the figure keeps its size on a narrow screen). Returns the figure."""
    import matplotlib.pyplot as plt
    import numpy as np

    k = cfg.k
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(6.0, 6.6))
    s = to_numpy(res.spreads)
    grid = np.linspace(0, s.max(), 100)
    ax1.plot(grid, k * grid**2 / 2, "k--", lw=1, label=r"$\mathcal{E}_{\rm het} = k s^2/2$")
    ax1.plot(s, to_numpy(res.single), "o", color=COLORS["FedAvg"], label="single model (fitted)")
    ax1.plot(s, to_numpy(res.fedrep), "s", color=COLORS["FedRep"], label="FedRep (personalised)")
    ax1.set(xlabel="head spread s", ylabel="global error", title="heterogeneity hurts one shared model")
    ax1.legend()
    ms = to_numpy(res.local_ms)
    mgrid = np.linspace(1, ms.max(), 200)
    ax2.plot(mgrid / cfg.d, np.clip(1 - mgrid / cfg.d, 0, None) * k / 2, "k--", lw=1, label=r"$(1 - m/d)_+\,k/2$")
    ax2.plot(ms / cfg.d, to_numpy(res.local), "o", color=COLORS["local only"], label="local only")
    ax2.set(xlabel="samples per client / dimension  (m/d)", ylabel="global error", title="learning alone needs m ≈ d")
    ax2.legend()
    plt.tight_layout()
    return fig
