"""Book 5.3: the theory of FedRep in the linear model (Collins, Hassani, Mokhtari, Shakkottai,
ICML 2021, Theorem 1).

:func:`run_rates`: the measured per-round contraction of dist(B_t, B_*)
(:func:`replearn.theory.linear_fedrep.fit_rate`) against the factor (1 - eta E_0 sigma_min^2 / 2)^(1/2) of
Theorem 1 (:func:`replearn.theory.linear_fedrep.theorem_factor`) and the first-order factor
1 - eta sigma_min^2; :func:`run_federation`: final distance of FedRep over a grid of (n, m),
against local-only learning with the same m and the counting bound
(:func:`replearn.theory.linear_fedrep.counting_bound`), i.e. when federation lowers the samples each client needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from replearn.theory import linear_fedrep, linalg, linear
from replearn.backend import default_device
from replearn.checks import check_int
from replearn.theory.linear_fedrep import InstanceSettings
from replearn.book.plotting import to_numpy
from replearn.settings import Each, Ge, Gt, Lt, Pair, Profile


# --------------------------------------------------------------------------- rates

@dataclass(frozen=True)
class RateSettings(InstanceSettings):
    """FedRep with the QR step of Theorem 1 (orthonormal B_t), fresh batches of m samples, full
    participation, from a start at distance ``dist0`` (E_0 = 1 - dist0^2). Heads
    ``make_heads(cond=c, exact=True)``: (1/n) W^T W has eigenvalues from 1 down to 1/c exactly,
    so sigma_max^2 = 1 and sigma_min^2 = 1/c. The rate is measured over the rounds with
    ``window[0] < dist < window[1]``."""

    WORDS = {"n": "clients n", "m": "fresh samples per client and round m", "etas": "step sizes η",
             "conds": "condition numbers κ² of the heads", "dist0": "starting distance to col(B_*)",
             "window": "distances over which the rate is fitted"}

    n: int = 100
    m: Annotated[int, Ge(1)] = 20
    etas: Annotated[tuple, Each(Gt(0), entry="every eta")] = (0.05, 0.1, 0.25)
    conds: Annotated[tuple, Each(Ge(1, why="condition numbers"))] = (1.0, 4.0)
    dist0: Annotated[float, Gt(0), Lt(1)] = 0.5
    rounds: Annotated[int, Ge(3)] = 400
    window: Annotated[tuple, Pair(strict=True, why="a range of distances"), Each(Ge(0))] = (1e-12, 0.1)

    PAPER = Profile({"etas": (0.025, 0.05, 0.1, 0.25), "conds": (1.0, 2.0, 4.0, 8.0), "rounds": 1000})

    def validate(self) -> None:
        """The relation between the fields (each field's own range is beside it): n >= k."""
        super().validate()
        check_int(self.n, "n", self.k)


@dataclass(frozen=True)
class RateResult:
    """Per (cond, eta) key: ``dist`` curves (T + 1,), measured per-round factor ``rate``,
    Theorem 1's factor ``theorem`` = sqrt(1 - eta E_0 sigma_min^2 / 2), the first-order factor
    ``first_order`` = 1 - eta sigma_min^2, and ``r2`` the R^2 of a straight-line fit of log dist
    in the window (1 for exactly linear convergence); ``sigma2`` maps cond to
    (sigma_min^2, sigma_max^2); ``E0`` = 1 - dist0^2."""

    dist: dict
    rate: dict
    theorem: dict
    first_order: dict
    r2: dict
    sigma2: dict
    E0: float


def run_rates(cfg: RateSettings, device=None) -> RateResult:
    """Measured linear rate of FedRep (with QR) against Theorem 1 (book 5.3)."""
    device = default_device() if device is None else torch.device(device)
    Bstar = linear.ground_truth_representation(cfg.d, cfg.k, seed=cfg.seed, device=device)
    B0 = linalg.basis_at_distance(Bstar, cfg.dist0, seed=cfg.seed + 3)
    E0 = 1.0 - cfg.dist0**2
    dist, rate, thm, first, r2, sigma2 = {}, {}, {}, {}, {}, {}
    for cond in cfg.conds:
        W = linear.make_heads(cfg.n, cfg.k, cond=float(cond), exact=True, seed=cfg.seed + 1, device=device)
        ev = torch.linalg.eigvalsh(W.T @ W / cfg.n)
        smin, smax = float(ev[0]), float(ev[-1])
        sigma2[cond] = (smin, smax)
        data = linear.FreshSamples(Bstar, W, cfg.m)
        for eta in cfg.etas:
            res = linear_fedrep.fedrep(B0, data, eta=eta, rounds=cfg.rounds, orthonormalize=True, seed=cfg.seed + 4)
            curve = res.dist(Bstar).cpu()
            dist[cond, eta] = curve
            rate[cond, eta], r2[cond, eta] = linear_fedrep.fit_rate(curve, cfg.window)
            thm[cond, eta] = linear_fedrep.theorem_factor(eta, E0, smin)
            first[cond, eta] = 1.0 - eta * smin
    return RateResult(dist=dist, rate=rate, theorem=thm, first_order=first, r2=r2, sigma2=sigma2, E0=E0)


# --------------------------------------------------------------------------- federation

@dataclass(frozen=True)
class LinearFederationSettings(InstanceSettings):
    """Grid of client counts ``ns`` and per-client sample sizes ``ms`` (fixed noiseless data,
    each client keeps its m samples for the whole run), dimension d, rank k, paper heads; FedRep
    (exact heads, MoM start, step eta, full participation) for ``rounds``; a run counts as
    recovering col(B_*) when its final distance is below ``tol``."""

    WORDS = {"ns": "client counts n", "ms": "samples per client m", "eta": "step size η",
             "tol": "final distance counted as recovery"}

    d: int = 30
    ns: Annotated[tuple, Each(Ge(1))] = (10, 20, 50, 100, 200, 400)
    ms: Annotated[tuple, Each(Ge(1))] = (3, 4, 6, 8, 12, 16, 24)
    eta: Annotated[float, Gt(0)] = 0.5
    rounds: Annotated[int, Ge(0)] = 300
    tol: Annotated[float, Gt(0)] = 1e-3

    PAPER = Profile({"ns": (10, 20, 50, 100, 200, 400, 1000), "ms": (3, 4, 5, 6, 8, 10, 12, 16, 24, 32),
                     "rounds": 1000})


@dataclass(frozen=True)
class FederationResult:
    """``dist[a, b]`` final dist(B_T, B_*) and ``error[a, b]`` FedRep's global error (eq. 3) for
    m = ms[a], n = ns[b]; ``local[a]`` local-only global error at m = ms[a] (largest n's clients),
    ``local_formula[a]`` = (1 - m/d)_+ k/2; ``counting[b]`` = k + k(d - k)/n, the per-client sample
    size at which the number of equations nm equals the number of unknowns of (B, W)."""

    ns: torch.Tensor
    ms: torch.Tensor
    dist: torch.Tensor
    error: torch.Tensor
    local: torch.Tensor
    local_formula: torch.Tensor
    counting: torch.Tensor
    tol: float

    @property
    def recovered(self) -> torch.Tensor:
        return self.dist < self.tol

    def smallest_m(self) -> torch.Tensor:
        """Per n, the smallest m of the grid from which on every larger m recovers (inf if none)."""
        out = []
        for b in range(len(self.ns)):
            ok = self.recovered[:, b].tolist()
            best = float("inf")
            for a in reversed(range(len(ok))):
                if not ok[a]:
                    break
                best = float(self.ms[a])
            out.append(best)
        return torch.tensor(out, dtype=torch.float64)


def run_federation(cfg: LinearFederationSettings, device=None) -> FederationResult:
    """FedRep over an (m, n) grid against local-only least squares (book 5.3)."""
    device = default_device() if device is None else torch.device(device)
    Bstar = linear.ground_truth_representation(cfg.d, cfg.k, seed=cfg.seed, device=device)
    dist = torch.zeros(len(cfg.ms), len(cfg.ns), dtype=torch.float64)
    error = torch.zeros_like(dist)
    for b, n in enumerate(cfg.ns):
        W = linear_fedrep.paper_heads(n, cfg.k, seed=cfg.seed + 1, device=device)
        for a, m in enumerate(cfg.ms):
            data = linear.sample_tasks(Bstar, W, m, seed=cfg.seed + 2 + 10 * a + 1000 * b)
            res = linear_fedrep.fedrep(linear_fedrep.method_of_moments_init(data, cfg.k), data, eta=cfg.eta, rounds=cfg.rounds)
            dist[a, b] = float(res.dist(Bstar)[-1])
            error[a, b] = float(res.global_error(Bstar, W))
    W = linear_fedrep.paper_heads(cfg.ns[-1], cfg.k, seed=cfg.seed + 1, device=device)
    theta_star = linear.targets(Bstar, W)
    local = torch.tensor([float(linear_fedrep.global_error(linear_fedrep.local_only(
        linear.sample_tasks(Bstar, W, m, seed=cfg.seed + 7 + a)), theta_star)) for a, m in enumerate(cfg.ms)],
        dtype=torch.float64)
    local_formula = torch.tensor([max(0.0, 1 - m / cfg.d) * cfg.k / 2 for m in cfg.ms], dtype=torch.float64)
    counting = torch.tensor([linear_fedrep.counting_bound(cfg.d, cfg.k, n) for n in cfg.ns], dtype=torch.float64)
    return FederationResult(ns=torch.tensor(cfg.ns), ms=torch.tensor(cfg.ms), dist=dist, error=error,
                            local=local, local_formula=local_formula, counting=counting, tol=cfg.tol)


# --------------------------------------------------------------------------- what the page shows

def rate_table(rates: RateResult) -> str:
    """Per head condition number and step size, as lines of text: the measured linear rate
    beside the infinite-sample limit ``1 - eta sigma_min^2`` and Theorem 1's factor, the fit's
    R^2 and how many times faster than the theorem's the measured rate is (in the exponent)."""
    import numpy as np

    lines = [f"E_0 = {rates.E0:.2f}",
             " kappa^2 | eta  | measured | 1 - eta sigma_min^2 | Theorem 1 | R^2 of fit | speed-up over Theorem 1"]
    for (cond, eta), r in rates.rate.items():
        thm, first = rates.theorem[cond, eta], rates.first_order[cond, eta]
        lines.append(f"   {cond:4.1f}  | {eta:4.2f} |  {r:.4f}  |       {first:.4f}        |  {thm:.4f}   |   "
                     f"{rates.r2[cond, eta]:.4f}   |    {np.log(r) / np.log(thm):4.1f}x")
    return "\n".join(lines)


def federation_table(fed: FederationResult, cfg: LinearFederationSettings) -> str:
    """Per number of clients n, as lines of text: the smallest m at which FedRep recovers
    col(B_*), the counting bound and local-only training's error at that m."""
    import numpy as np

    need = fed.smallest_m()
    lines = ["  n   | smallest m recovering col(B_*) | counting bound | local-only error at that m"]
    for b, n in enumerate(cfg.ns):
        a = cfg.ms.index(int(need[b])) if np.isfinite(float(need[b])) else None
        local = f"{float(fed.local[a]):.2f} (formula {float(fed.local_formula[a]):.2f})" if a is not None else "-"
        lines.append(f" {n:4d} |              {float(need[b]):4.0f}              |      "
                     f"{float(fed.counting[b]):4.1f}      | {local}")
    return "\n".join(lines)


def plot_federation(fed: FederationResult, cfg: LinearFederationSettings):
    """FedRep's final distance to B_* (log10) over the number of clients n and samples per
    client m, recoveries ticked, with the counting bound ``k + k(d-k)/n``. Returns the figure."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    logd = np.log10(to_numpy(fed.dist).clip(1e-16))
    im = ax.pcolormesh(np.arange(len(cfg.ns) + 1), np.arange(len(cfg.ms) + 1), logd,
                       cmap="viridis_r", vmin=-16, vmax=0, shading="flat")
    for a in range(len(cfg.ms)):
        for b in range(len(cfg.ns)):
            if bool(fed.recovered[a, b]):
                ax.text(b + 0.5, a + 0.5, "✓", ha="center", va="center", color="white", fontsize=9)
    # counting bound, drawn in grid coordinates by interpolating over the m grid
    ms = np.array(cfg.ms, dtype=float)
    pos = np.interp(to_numpy(fed.counting), ms, np.arange(len(ms)) + 0.5, left=0.0)
    ax.plot(np.arange(len(cfg.ns)) + 0.5, pos, "w--", lw=1.2, label="counting bound k + k(d-k)/n")
    ax.set_xticks(np.arange(len(cfg.ns)) + 0.5, [str(n) for n in cfg.ns])
    ax.set_yticks(np.arange(len(cfg.ms)) + 0.5, [str(m) for m in cfg.ms])
    ax.set(xlabel="number of clients n", ylabel=f"samples per client m  (local only needs {cfg.d})",
           title=r"FedRep: $\log_{10}$ dist$(B_T, B_*)$, ✓ = below $10^{-3}$")
    ax.grid(False)
    ax.legend(loc="upper right")
    fig.colorbar(im, ax=ax)
    plt.tight_layout()
    return fig
