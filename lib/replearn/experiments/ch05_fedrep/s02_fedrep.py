"""Book 5.2: the FedRep algorithm in the linear model (Collins, Hassani, Mokhtari, Shakkottai,
ICML 2021, Algorithm 2).

The method-of-moments initialisation of Algorithm 2: the distance of its estimate from col(B_*)
as the number of clients n and samples m grow (:func:`run_moments`; the expectation of the
moment matrix is :func:`replearn.theory.linear_fedrep.expected_moment_matrix`), and one FedRep run from the
method-of-moments start and from a random one (:func:`run_trajectory`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from replearn.theory import linear_fedrep, linalg, linear
from replearn.backend import default_device
from replearn.theory.linear_fedrep import InstanceSettings
from replearn.book.plotting import COLORS, to_numpy
from replearn.settings import Each, Ge, Gt, Le, Profile


# --------------------------------------------------------------------------- method of moments

@dataclass(frozen=True)
class MomentSettings(InstanceSettings):
    """Dimension d, rank k, client counts ``ns`` and per-client sample sizes ``ms`` of the
    initial batch, ``repeats`` independent draws (data and heads) averaged, label noise."""

    WORDS = {"ns": "client counts n", "ms": "samples per client m", "repeats": "independent draws averaged"}

    ns: Annotated[tuple, Each(Ge(1))] = (10, 30, 100, 300, 1000)
    ms: Annotated[tuple, Each(Ge(1))] = (2, 5, 10, 20)
    repeats: Annotated[int, Ge(1)] = 4
    noise_std: Annotated[float, Ge(0)] = 0.0

    PAPER = Profile({"ns": (10, 30, 100, 300, 1000, 3000), "repeats": 10})


@dataclass(frozen=True)
class MomentResult:
    """``dist[a, b]``: mean dist(B_0, B_*) over the repeats for m = ms[a], n = ns[b]; ``spread``
    the standard deviation over the repeats."""

    ns: torch.Tensor
    ms: torch.Tensor
    dist: torch.Tensor
    spread: torch.Tensor


def run_moments(cfg: MomentSettings, device=None) -> MomentResult:
    """dist(method_of_moments_init, B_*) over a grid of (m, n), paper heads (book 5.2)."""
    device = default_device() if device is None else torch.device(device)
    out = torch.zeros(len(cfg.ms), len(cfg.ns), cfg.repeats, dtype=torch.float64)
    for rep in range(cfg.repeats):
        seed = cfg.seed + 1000 * rep
        Bstar = linear.ground_truth_representation(cfg.d, cfg.k, seed=seed, device=device)
        for b, n in enumerate(cfg.ns):
            W = linear_fedrep.paper_heads(n, cfg.k, seed=seed + 1, device=device)
            for a, m in enumerate(cfg.ms):
                data = linear.sample_tasks(Bstar, W, m, noise_std=cfg.noise_std, seed=seed + 2 + 10 * a + 100 * b)
                B0 = linear_fedrep.method_of_moments_init(data, cfg.k)
                out[a, b, rep] = float(linalg.principal_angle_distance(B0, Bstar))
    return MomentResult(ns=torch.tensor(cfg.ns), ms=torch.tensor(cfg.ms), dist=out.mean(-1),
                        spread=out.std(-1) if cfg.repeats > 1 else torch.zeros_like(out[..., 0]))


# --------------------------------------------------------------------------- one run

@dataclass(frozen=True)
class TrajectorySettings(InstanceSettings):
    """Algorithm 2 with fresh batches of m samples per selected client and round, n clients,
    participation rate r, step eta, ``rounds``, label noise ``noise_std``; paper heads."""

    WORDS = {"n": "clients n", "m": "fresh samples per client and round m", "r": "participation rate r",
             "eta": "step size η"}

    n: Annotated[int, Ge(1)] = 100
    m: Annotated[int, Ge(1)] = 10
    r: Annotated[float, Gt(0, why="participation rate"), Le(1)] = 1.0
    eta: Annotated[float, Gt(0)] = 0.5
    rounds: Annotated[int, Ge(0)] = 150
    noise_std: Annotated[float, Ge(0)] = 0.0

    PAPER = Profile({"rounds": 500})


@dataclass(frozen=True)
class TrajectoryResult:
    """dist(B_t, B_*) for t = 0..T from the method-of-moments start (``mom``) and from a Haar-random
    orthonormal start (``random``); ``B0`` the MoM start."""

    mom: torch.Tensor
    random: torch.Tensor
    B0: torch.Tensor


def run_trajectory(cfg: TrajectorySettings, device=None) -> TrajectoryResult:
    """FedRep with fresh samples from the method-of-moments start and from a random one (book 5.2)."""
    device = default_device() if device is None else torch.device(device)
    Bstar = linear.ground_truth_representation(cfg.d, cfg.k, seed=cfg.seed, device=device)
    W = linear_fedrep.paper_heads(cfg.n, cfg.k, seed=cfg.seed + 1, device=device)
    data = linear.FreshSamples(Bstar, W, cfg.m, noise_std=cfg.noise_std)
    B0 = linear_fedrep.method_of_moments_init(
        linear.sample_tasks(Bstar, W, cfg.m, noise_std=cfg.noise_std, seed=cfg.seed + 2), cfg.k)
    Brand = linalg.random_orthonormal(cfg.d, cfg.k, cfg.seed + 3, device=device)
    kw = dict(eta=cfg.eta, rounds=cfg.rounds, r=cfg.r, seed=cfg.seed + 4)
    return TrajectoryResult(mom=linear_fedrep.fedrep(B0, data, **kw).dist(Bstar).cpu(),
                            random=linear_fedrep.fedrep(Brand, data, **kw).dist(Bstar).cpu(), B0=B0.cpu())


# --------------------------------------------------------------------------- what the page shows

def moment_table(mom: MomentResult, cfg: MomentSettings) -> str:
    """The mean distance of the method-of-moments start to B_*, one line of text per number of
    samples m per client, one column per number of clients n."""
    lines = ["mean dist(B_0, B_*)   n =" + "".join(f"{n:>7d}" for n in cfg.ns)]
    for a, m in enumerate(cfg.ms):
        lines.append(f"  m = {m:3d}              " + "".join(f"{float(x):7.3f}" for x in mom.dist[a]))
    return "\n".join(lines)


def trajectory_line(curve: torch.Tensor, rounds) -> str:
    """The distances of ``curve`` at the given ``rounds``: ``"t=0: 3.1e-01  t=10: <1e-12"``."""
    return "  ".join(f"t={t}: {float(curve[t]):.1e}" if float(curve[t]) > 1e-12 else f"t={t}: <1e-12"
                     for t in rounds)


def plot_fedrep(mom: MomentResult, mom_cfg: MomentSettings, traj: TrajectoryResult, run_cfg: TrajectorySettings):
    """Top: the method-of-moments start's distance to B_* against the total samples n m, one
    curve per m, with a slope of -1/2; bottom: FedRep's distance over the rounds from that start
    and from a random one (panels stacked, so the figure keeps its size on a narrow screen).
    Returns the figure."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(6.0, 6.8))
    ns = to_numpy(mom.ns)
    markers = ("o", "s", "^", "D", "v")
    for a, m in enumerate(mom_cfg.ms):
        ax1.loglog(ns * m, to_numpy(mom.dist[a]), marker=markers[a % 5], color=COLORS["FedRep"],
                   alpha=0.4 + 0.6 * (a + 1) / len(mom_cfg.ms), label=f"m = {m}")
    nm = np.array([ns.min() * min(mom_cfg.ms), ns.max() * max(mom_cfg.ms)], dtype=float)
    ref = float(mom.dist[-1, -1]) * np.sqrt(nm[1] / nm)
    ax1.loglog(nm, ref, "k--", lw=1, label=r"slope $-1/2$")
    ax1.set(xlabel="total samples n·m", ylabel=r"dist$(B_0, B_*)$", title="method-of-moments start", ylim=(0.05, 1.2))
    ax1.legend()
    t = np.arange(run_cfg.rounds + 1)
    ax2.semilogy(t, to_numpy(traj.mom).clip(1e-16), color=COLORS["FedRep"], label="FedRep, MoM start")
    ax2.semilogy(t, to_numpy(traj.random).clip(1e-16), color=COLORS["FedRep"], ls=":", label="FedRep, random start")
    ax2.set(xlabel="round t", ylabel=r"dist$(B_t, B_*)$", title=f"n = {run_cfg.n}, m = {run_cfg.m} < d = {run_cfg.d}")
    ax2.legend()
    plt.tight_layout()
    return fig
