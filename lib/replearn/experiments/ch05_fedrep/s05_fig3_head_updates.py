"""Book 5.5: exact heads against gradient steps on the head (Collins, Hassani, Mokhtari,
Shakkottai 2021, Sec. 5.1, Fig. 3).

:func:`run_fig3`: fresh samples every round (Algorithm 2), participation ``r``; dist(B_t, B_*)
(Definition 1) along FedRep (exact head), 10GD-GD and GD-GD (K = 10 or 1 gradient steps on the
head), for several numbers of clients ``n``, from one shared method-of-moments start per
(n, seed) (:func:`replearn.theory.linear_fedrep.dist_curves`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from replearn.theory import linear_fedrep
from replearn.backend import default_device, derive_seed
from replearn.theory.linear_fedrep import PAPER_NOISE_STD, FigureSettings
from replearn.book.plotting import to_numpy
from replearn.settings import Each, Ge, Gt, Le, Profile

FIG3_METHODS = ("FedRep", "10GD-GD", "GD-GD")
HEAD_STEPS = {"FedRep": None, "10GD-GD": 10, "GD-GD": 1}


@dataclass(frozen=True)
class Fig3Settings(FigureSettings):
    """Fig. 3: d, k, m fresh samples per selected client per round, participation r, the
    numbers of clients ``ns``, label noise, representation step ``eta``, head step
    ``head_lr`` of GD-GD / 10GD-GD, ``rounds`` and repetitions ``seeds``."""

    WORDS = {"seeds": "independent repetitions", "m": "fresh samples per client and round m",
             "r": "participation rate r", "ns": "client counts n", "eta": "representation step size η",
             "head_lr": "head step size of GD-GD and 10GD-GD"}

    d: int = 10
    noise_std: float = 0.0
    eta: float = 0.2
    rounds: int = 300
    m: Annotated[int, Ge(1, why="fresh samples per round")] = 5
    r: Annotated[float, Gt(0, why="the participation rate"), Le(1)] = 0.1
    ns: Annotated[tuple[int, ...], Each(Ge(1), entry="every n in ns (clients)")] = (10, 100, 1000)
    head_lr: Annotated[float, Gt(0)] = 0.1

    PAPER = Profile({"ns": (10, 100, 1000, 10000), "noise_std": PAPER_NOISE_STD, "rounds": 1000, "seeds": 5},
                    doc="The paper's d = 10, k = 2, m = 5, r = 0.1 with its label noise. The text plots four "
                        "values of n without listing them; we add n = 10000 to our three, and use 1000 rounds "
                        "and 5 repetitions (not stated).")


@dataclass(frozen=True)
class Fig3Result:
    """``dist[n][method]`` (seeds, rounds + 1): dist(B_t, B_*) for every n in ``ns``."""

    ns: tuple
    dist: dict

    def geometric_mean(self, n: int, method: str, floor: float = 1e-15) -> torch.Tensor:
        """exp(mean log dist) over the repetitions (distances clipped at ``floor``), (rounds + 1,)."""
        return self.dist[n][method].clamp_min(floor).log().mean(0).exp()


def run_fig3(cfg: Fig3Settings, device=None) -> Fig3Result:
    """dist(B_t, B_*) of FedRep, 10GD-GD and GD-GD with fresh samples for every n (Fig. 3).

    The three methods share the method-of-moments start (from one initial batch of m samples
    per client) and the seed of the client sampling. GD heads start at zero.
    """
    device = default_device() if device is None else torch.device(device)
    out = {}
    for n in cfg.ns:
        runs = {name: [] for name in FIG3_METHODS}
        for s in range(cfg.seeds):
            curves = linear_fedrep.dist_curves(n, cfg.m, cfg.r, {name: HEAD_STEPS[name] for name in FIG3_METHODS},
                                        d=cfg.d, k=cfg.k, rounds=cfg.rounds, eta=cfg.eta, head_lr=cfg.head_lr,
                                        noise_std=cfg.noise_std, seed=derive_seed(cfg.seed, s, n), device=device)
            for name in FIG3_METHODS:
                runs[name].append(curves[name])
        out[n] = {name: torch.stack(runs[name]) for name in FIG3_METHODS}
    return Fig3Result(tuple(cfg.ns), out)


#: The line style of each method in the figures.
STYLES = {"FedRep": dict(color="#ff7f0e"), "10GD-GD": dict(color="#8c564b", ls="--"),
          "GD-GD": dict(color="#7f7f7f", ls=":")}


def at_round(res: Fig3Result, n: int, name: str, t: int) -> float:
    """Method ``name``'s distance to B_* after ``t`` rounds with ``n`` clients (geometric mean
    over the runs)."""
    return float(res.geometric_mean(n, name)[t])


def budget_table(res: Fig3Result, budget: int, seeds: int) -> str:
    """Per number of clients n, as lines of text: each method's distance to B_* at round
    ``budget`` and the rounds it takes to reach 1e-3 (geometric mean over ``seeds`` runs)."""
    lines = [f"dist(B_t, B_*) at round {budget} (geometric mean over {seeds} runs) | rounds to reach 1e-3"]
    for n in res.ns:
        at = {name: at_round(res, n, name, budget) for name in FIG3_METHODS}
        hit = {name: linear_fedrep.rounds_to_reach(res.geometric_mean(n, name), 1e-3) for name in FIG3_METHODS}
        lines.append(f"n = {n:>5}: " + ", ".join(f"{name} {at[name]:.1e}" for name in FIG3_METHODS)
                     + " | " + ", ".join(f"{hit[name]}" for name in FIG3_METHODS))
    return "\n".join(lines)


def plot_fig3(res: Fig3Result, title: str, floor: float = 1e-12):
    """Fig. 3: one panel per number of clients n, stacked, each method's distance to B_* over the
    rounds (geometric mean over runs), clipped at ``floor``. Returns the figure."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(len(res.ns), 1, figsize=(6.0, 0.6 + 2.4 * len(res.ns)), sharex=True)
    axes = np.atleast_1d(axes)
    t = np.arange(res.dist[res.ns[0]]["FedRep"].shape[1])
    for ax, n in zip(axes, res.ns):
        for name in FIG3_METHODS:
            ax.semilogy(t, np.maximum(to_numpy(res.geometric_mean(n, name)), floor), label=name, **STYLES[name])
        ax.set(title=f"n = {n}", ylabel=r"dist$(B_t, B_*)$", ylim=(floor, 2.0))
    axes[-1].set_xlabel("round t")
    axes[0].legend()
    fig.suptitle(title, fontsize=10)
    plt.tight_layout()
    return fig
