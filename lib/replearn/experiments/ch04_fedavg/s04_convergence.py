"""Book 4.4: FedAvg learns B_*: Fig. 1 and the linear rate of Theorem 1 (Collins et al. 2022).

On the problems of :func:`replearn.theory.fedavg_problems.make_problem`: :func:`figure1` reproduces
the paper's Fig. 1 (FedAvg against D-GD on Fig. 1 problems), :func:`participation` runs FedAvg
with part of the clients per round, and :func:`rate_sweep` measures the empirical linear rate
(:func:`linear_rate`: the slope of -log dist(B_t, B_*) per round in the linear phase) on rate
problems over tau and over the head diversity, against the scaling alpha^2 tau mu^2 E_0 that
Theorem 1 predicts. The explorer (:func:`explorer`) reruns FedAvg and D-GD on a small problem
for any tau, step size, head condition number and participation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np
import torch

from replearn.theory import linear_federated, linear, rates
from replearn.backend import DTYPE, derive_seed
from replearn.checks import check_fraction, check_number
from replearn.theory.fedavg_problems import FedAvgProblemSettings, make_problem
from replearn.settings import Each, Ge, Gt, Le, Lt, Profile
from replearn.book.plotting import COLORS, plot_curves, to_numpy
from replearn.book.widgets import explorer as build_explorer, Slider


@dataclass(frozen=True)
class ConvergenceSettings(FedAvgProblemSettings):
    """The problem and FedAvg run of :class:`replearn.theory.fedavg_problems.FedAvgProblemSettings`
    (``d``, ``k``, ``M``, ``alpha``, ``tau``, ``rounds``), averaged over ``seeds`` problem
    instances (instance j drawn from the seed :func:`replearn.backend.derive_seed`
    ``(seed, j)``).

    The rate sweep (:func:`rate_sweep`) uses ``taus`` at the head condition number 1 and
    ``conds`` at ``diversity_tau`` local steps, ``sweep_rounds`` rounds from distance
    ``delta0`` and ``sweep_seeds`` instances; :func:`participation` samples
    ``round(f * M)`` clients per round for every fraction f in ``fractions``.

    CPU default: 1000 rounds, the paper's horizon; from a random start the slowest of our three
    instances needs more than 600 (it is at dist 9e-3 after 600 rounds, 2e-5 after 1000).
    """

    WORDS = {"M": "clients M", "alpha": "step size α", "tau": "FedAvg's local steps τ",
             "seeds": "problem instances averaged", "taus": "rate sweep: local steps τ",
             "conds": "rate sweep: condition numbers of the heads",
             "diversity_tau": "rate sweep over conditions: local steps τ",
             "delta0": "rate sweep: starting distance from B* (δ₀)", "sweep_rounds": "rate sweep: rounds",
             "sweep_seeds": "rate sweep: instances", "fractions": "participation: fractions of clients per round"}

    rounds: int = 1000
    seeds: Annotated[int, Ge(1)] = 3
    taus: Annotated[tuple, Each(Ge(1, why="local steps per round"))] = (1, 2, 3, 5, 10)
    conds: Annotated[tuple, Each(Ge(1, why="condition numbers"))] = (1.0, 2.0, 4.0, 8.0, 16.0)
    diversity_tau: Annotated[int, Ge(1)] = 5
    delta0: Annotated[float, Ge(0, why="a distance"), Lt(1)] = 0.9
    sweep_rounds: Annotated[int, Ge(1)] = 600
    sweep_seeds: Annotated[int, Ge(1)] = 2
    fractions: Annotated[tuple, Each(Gt(0, why="of participating clients"), Le(1))] = (1.0, 0.5, 0.25)

    PAPER = Profile({"d": 100, "k": 5, "M": 40, "tau": 2, "rounds": 1000, "seeds": 10, "sweep_seeds": 5},
                    doc="Collins et al. (2022), Fig. 1: d = 100, k = 5, M = 40, all clients, tau = 2, 10 runs.")


# --------------------------------------------------------------------------- Fig. 1

@dataclass(frozen=True)
class CurvesResult:
    """dist(B_t, B_*) per method: ``dist[name]`` of shape (runs, T + 1), rounds 0..T."""

    dist: dict

    def mean(self, name: str) -> torch.Tensor:
        return self.dist[name].mean(0)

    def band(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        return self.dist[name].min(0).values, self.dist[name].max(0).values


def figure1(cfg: ConvergenceSettings, device=None) -> CurvesResult:
    """Collins et al. (2022), Fig. 1: dist(B_t, B_*) of FedAvg (tau local steps) and D-GD
    (tau = 1), all clients, same step size and start, over ``cfg.seeds`` instances."""
    curves = {"FedAvg": [], "D-GD": []}
    for j in range(cfg.seeds):
        s = derive_seed(cfg.seed, j)
        pb = make_problem(cfg, s, device=device)
        fed = linear_federated.fedavg(pb.B0, pb.w0, pb.tasks, alpha=cfg.alpha, tau=cfg.tau, rounds=cfg.rounds)
        gd = linear_federated.dgd(pb.B0, pb.w0, pb.tasks, alpha=cfg.alpha, rounds=cfg.rounds)
        curves["FedAvg"].append(fed.dist(pb.Bstar).cpu())
        curves["D-GD"].append(gd.dist(pb.Bstar).cpu())
    return CurvesResult({name: torch.stack(c) for name, c in curves.items()})


def participation(cfg: ConvergenceSettings, device=None) -> CurvesResult:
    """FedAvg(tau) on the Fig. 1 problems with m = round(f M) clients sampled per round, for
    every fraction f in ``cfg.fractions``; keys ``"m = ..."``."""
    curves = {}
    for f in cfg.fractions:
        m = max(1, round(f * cfg.M))
        runs = []
        for j in range(cfg.seeds):
            s = derive_seed(cfg.seed, j)
            pb = make_problem(cfg, s, device=device)
            tr = linear_federated.fedavg(pb.B0, pb.w0, pb.tasks, alpha=cfg.alpha, tau=cfg.tau, rounds=cfg.rounds,
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


# --------------------------------------------------------------------------- the rate

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
        dist = linear_federated.fedavg(pb.B0, pb.w0, pb.tasks, alpha=cfg.alpha, tau=tau,
                                rounds=cfg.sweep_rounds).dist(pb.Bstar).cpu()
        measured.append(linear_rate(dist))
        mu2s.append(linear.head_diversity(pb.W, centred=True)[0])
        first = dist if first is None else first
    return sum(measured) / len(measured), sum(mu2s) / len(mu2s), first


def rate_sweep(cfg: ConvergenceSettings, device=None) -> RateSweepResult:
    """Empirical linear rate of FedAvg over ``cfg.taus`` (heads with cond = 1) and over
    ``cfg.conds`` (at ``cfg.diversity_tau`` local steps), with the predicted scaling
    alpha^2 tau mu^2 of Theorem 1 (mu^2: smallest eigenvalue of the centred head covariance,
    Assumption 2; E_0 = 1 - delta0^2 is the same for every run and left out)."""
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


# --------------------------------------------------------------------------- the explorer

def explorer_curves(tau: int, alpha: float, cond: float, participation: float, *, d: int = 30,
                    k: int = 3, M: int = 20, rounds: int = 300, seed: int = 0) -> dict:
    """dist(B_t, B_*) of FedAvg with ``tau`` local steps and of D-GD (tau = 1), t = 0..rounds.

    One problem of :func:`replearn.theory.fedavg_problems.make_problem`: Haar-random B_* (d, k), M
    heads whose centred covariance has condition number ``cond`` (``make_heads(exact=True)``),
    random B_0 with alpha B_0^T B_0 = I_k and w_0 = 0. Each round samples
    m = max(1, round(participation M)) clients; both methods use the same step ``alpha``, the
    same start and the same client samples, so with ``tau = 1`` the two curves are identical.
    Returns numpy arrays ``{"round", "FedAvg", "D-GD"}``, each (rounds + 1,). Raises ValueError
    on bad input (the sizes, tau, alpha, rounds and seed are checked by
    :class:`~replearn.theory.fedavg_problems.FedAvgProblemSettings`) and when the iterates diverge
    (step size too large).
    """
    check_number(cond, "cond (a condition number)", low=1.0)
    check_fraction(participation, "participation (a fraction of clients)")
    cfg = FedAvgProblemSettings(d=d, k=k, M=M, alpha=alpha, tau=tau, rounds=rounds, seed=seed)
    pb = make_problem(cfg, seed, cond=float(cond))
    m = max(1, round(participation * M))
    fed = linear_federated.fedavg(pb.B0, pb.w0, pb.tasks, alpha=float(alpha), tau=tau, rounds=rounds,
                           clients_per_round=m, seed=seed)
    gd = linear_federated.dgd(pb.B0, pb.w0, pb.tasks, alpha=float(alpha), rounds=rounds, clients_per_round=m, seed=seed)
    return {"round": np.arange(rounds + 1), "FedAvg": to_numpy(fed.dist(pb.Bstar)),
            "D-GD": to_numpy(gd.dist(pb.Bstar))}


def draw_explorer(ax, curves: dict, title: str = "") -> None:
    """Plot the curves of :func:`explorer_curves` on a log axis."""
    floor = 1e-12  # FedAvg can reach machine precision; keep the log axis finite
    shown = {name: np.maximum(curves[name], floor) for name in ("FedAvg", "D-GD")}
    plot_curves(ax, curves["round"], shown, logy=True, xlabel="round t", ylabel=r"dist$(B_t, B_*)$",
                title=title)
    ax.set_ylim(max(floor, 0.5 * float(shown["FedAvg"].min())), 1.5)


def explorer(**defaults):
    """An ipywidgets panel: sliders for tau, alpha, the head condition number and the fraction
    of clients per round, and a plot of :func:`explorer_curves` (keyword ``defaults`` set the
    initial slider values)."""
    controls = {"tau": Slider(2, 1, 10, 1, "τ", "int"), "alpha": Slider(0.2, 0.05, 0.4, 0.05, "α"),
                "cond": Slider(1.0, 0, 1.5, 0.1, "cond", "log"), "participation": Slider(1.0, 0.1, 1.0, 0.05, "m / M")}

    def draw(ax, v):
        title = f"τ = {v['tau']}, α = {v['alpha']:.2f}, cond = {v['cond']:.1f}, m/M = {v['participation']:.2f}"
        draw_explorer(ax, explorer_curves(**v), title)

    return build_explorer(controls, draw, defaults=defaults, continuous_update=False)


# --------------------------------------------------------------------------- what the page shows

def rate_table(sweep: RateSweepResult, alpha: float) -> str:
    """The rate sweep as lines of text: per tau (cond = 1), then per head condition number (at
    ``sweep.tau_at_cond``), the measured linear rate beside the prediction ``alpha^2 tau mu^2``."""
    lines = ["   tau  cond   mu^2   measured rate   alpha^2 tau mu^2   ratio"]
    for tau, r, p in zip(sweep.taus, sweep.rate_tau, sweep.predicted_tau):
        lines.append(f"{tau:6d} {1.0:5.0f} {1.0:6.4f} {round(float(r), 4) + 0.0:15.4f} {float(p):18.4f} "
                     f"{float(r / p):7.2f}")
    for cond, r, p in zip(sweep.conds, sweep.rate_cond, sweep.predicted_cond):
        mu2 = float(p) / (alpha**2 * sweep.tau_at_cond)
        lines.append(f"{sweep.tau_at_cond:6d} {cond:5.0f} {mu2:6.4f} {float(r):15.4f} {float(p):18.4f} "
                     f"{float(r / p):7.2f}")
    return "\n".join(lines)


def plot_rates(sweep: RateSweepResult, rounds: int, slope_scale: float):
    """Left: the distance to B_* over ``rounds`` rounds for every tau of the sweep (cond = 1);
    right: the measured rate against the prediction ``alpha^2 tau mu^2`` for both sweeps, with
    a line of slope 1 through ``slope_scale`` times the prediction. Returns the figure."""
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.5, 3.6))
    t = np.arange(rounds + 1)
    shades = plt.cm.Blues(np.linspace(0.35, 1.0, len(sweep.taus)))
    for tau, curve, color in zip(sweep.taus, sweep.curves_tau, shades):
        c = COLORS["D-GD"] if tau == 1 else color
        ax1.semilogy(t, to_numpy(curve).clip(1e-16), color=c, label=f"τ = {tau}")
    ax1.set(xlabel="round t", ylabel=r"dist$(B_t, B_*)$", title="cond = 1", ylim=(1e-14, 2))
    ax1.legend(ncol=2)
    pred = np.concatenate([to_numpy(sweep.predicted_tau[1:]), to_numpy(sweep.predicted_cond)])
    ax2.loglog(to_numpy(sweep.predicted_tau[1:]), to_numpy(sweep.rate_tau[1:]), "o", color=COLORS["FedAvg"],
               label="τ sweep (cond = 1)")
    for tau, x, y in zip(sweep.taus[1:], sweep.predicted_tau[1:], sweep.rate_tau[1:]):
        ax2.annotate(f"τ={tau}", (float(x), float(y)), textcoords="offset points", xytext=(4, -10), fontsize=8)
    ax2.loglog(to_numpy(sweep.predicted_cond), to_numpy(sweep.rate_cond), "s", mfc="none", color="k",
               label=f"cond sweep (τ = {sweep.tau_at_cond})")
    grid = np.array([pred.min() / 1.5, pred.max() * 1.5])
    ax2.loglog(grid, grid * slope_scale, "k--", lw=1, label="slope 1")
    ax2.set(xlabel=r"$\alpha^2 \tau \mu^2$", ylabel=r"measured rate $\hat\rho$", title="rate vs prediction")
    ax2.legend()
    plt.tight_layout()
    return fig


def rate_numbers(sweep: RateSweepResult, alpha: float) -> dict:
    """The numbers the prose quotes of the rate sweep, rounded as it shows them, by glue name
    (without the ``fed-conv-`` prefix): the range of measured over predicted rate over the
    smaller taus and over the condition numbers, the largest tau's ratio and its ``alpha^2 tau``,
    the spread of all ratios, the two largest taus and the range of condition numbers."""
    ratio_tau = sweep.rate_tau[1:] / sweep.predicted_tau[1:]
    ratio_cond = sweep.rate_cond / sweep.predicted_cond
    both = torch.cat([ratio_tau[:-1], ratio_cond])
    two_digits = {"ratio-tau-min": ratio_tau[:-1].min(), "ratio-tau-max": ratio_tau[:-1].max(),
                  "ratio-tau-last": ratio_tau[-1], "ratio-cond-min": ratio_cond.min(),
                  "ratio-cond-max": ratio_cond.max(), "a2tau-last": alpha**2 * sweep.taus[-1]}
    return {**{label: round(float(value), 2) for label, value in two_digits.items()},
            "ratio-spread": round(float(both.max() / both.min()), 1),
            "tau-mid": sweep.taus[-2], "tau-last": sweep.taus[-1],
            "cond-range": max(sweep.conds) / min(sweep.conds)}
