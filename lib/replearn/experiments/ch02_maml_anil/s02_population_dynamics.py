"""Book 2.2: MAML, FO-MAML, ANIL and FO-ANIL learn B_*, ARM does not, at the linear rate of the
main theorem (Collins, Mokhtari, Oh & Shakkottai, ICML 2022, Theorem 1 and Fig. 1, with
population losses).

On the population instance of :mod:`replearn.theory.maml_instances` (structured start):

* :func:`run` trains ARM and the four meta-learners from the same start;
* :func:`contraction_envelope` is the form of the theorem's bound with an explicit constant;
* :func:`rate_sweep` measures the linear rate of dist(B_t, B_*) (:func:`linear_rate`) against
  the theorem's beta alpha mu_*^2 over head condition numbers, inner and outer steps.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated

import torch

from replearn.theory import linear, maml, meta, rates
from replearn.theory.maml_instances import PopulationSettings, make_problem
from replearn.book.plotting import COLORS
from replearn.settings import Each, Ge, Gt, Profile

METHODS = ("ARM",) + maml.ALGORITHMS


@dataclass(frozen=True)
class PopulationDynamicsSettings(PopulationSettings):
    """The population instance (:class:`~replearn.theory.maml_instances.PopulationSettings`) and the
    rate sweep (:func:`rate_sweep`): ``sweep_iterations`` steps for every value in ``conds``
    (at alpha, beta), ``alphas`` (at beta, cond) and ``betas`` (at alpha, cond)."""

    WORDS = {"n": "training tasks n", "cond": "condition number of the heads' second moment",
             "scale": "scale L of the heads' second moment", "mean_norm": "norm of the heads' mean",
             "delta0": "distance of the start from B* (δ₀)", "alpha": "inner step size α",
             "beta": "outer step size β", "iterations": "outer iterations",
             "conds": "sweep: condition numbers", "alphas": "sweep: inner step sizes α",
             "betas": "sweep: outer step sizes β", "sweep_iterations": "sweep: iterations per value"}

    conds: Annotated[tuple, Each(Ge(1, why="condition numbers"))] = (1.0, 2.0, 4.0, 8.0, 16.0)
    alphas: Annotated[tuple, Each(Gt(0))] = (0.05, 0.1, 0.2, 0.4, 0.8)
    betas: Annotated[tuple, Each(Gt(0))] = (0.1, 0.2, 0.4, 0.8, 1.6)
    sweep_iterations: Annotated[int, Ge(1)] = 600

    PAPER = Profile({"sweep_iterations": 1000}, doc="The paper-size instance of PopulationSettings.PAPER with "
                                                    "longer sweep runs.")


@dataclass(frozen=True)
class PopulationDynamicsResult:
    """The instance ``problem``, the trajectories and distances ``dist[method]`` (T + 1,) of ARM
    and the four meta-learners, and ARM's subspace ``floor`` (:func:`replearn.theory.meta.arm_subspace_floor`)."""

    problem: linear.Problem
    trajectories: dict
    dist: dict
    floor: float


def run(cfg: PopulationSettings, *, degenerate: bool = False, device=None) -> PopulationDynamicsResult:
    """ARM (step beta) and MAML, FO-MAML, ANIL, FO-ANIL (inner step alpha, outer step beta) for
    ``cfg.iterations`` steps from the structured start of ``cfg`` (Collins et al. 2022, Fig. 1
    setting with population losses); ``degenerate=True``: heads without diversity."""
    pb = make_problem(cfg, degenerate=degenerate, device=device)
    trajectories = {"ARM": meta.arm(pb.B0, pb.w0, pb.tasks, beta=cfg.beta, iterations=cfg.iterations)}
    for algorithm in maml.ALGORITHMS:
        trajectories[algorithm] = maml.meta_train(pb.B0, pb.w0, pb.tasks, algorithm=algorithm, alpha=cfg.alpha,
                                                  beta=cfg.beta, iterations=cfg.iterations)
    return PopulationDynamicsResult(
        problem=pb, trajectories=trajectories,
        dist={name: tr.dist(pb.Bstar).cpu() for name, tr in trajectories.items()},
        floor=float(meta.arm_subspace_floor(pb.B0, pb.Bstar, pb.W)))


def linear_rate(dist: torch.Tensor) -> float:
    """The section's empirical linear rate of dist(B_t, B_*): :func:`replearn.theory.rates.linear_rate`
    over the linear phase ``1e-8 < dist < 1e-1`` (above machine precision, past the transient),
    with at least 10 iterates in it. A per-step contraction factor rho gives the rate -log rho."""
    return rates.linear_rate(dist, low=1e-8, high=1e-1, min_points=10)


def rate_sweep(cfg: PopulationDynamicsSettings, algorithms=("ANIL", "FO-ANIL"), device=None) -> dict:
    """Measured linear rates (:func:`linear_rate`) against the theorem's scale beta alpha mu_*^2.

    Three one-parameter sweeps around ``cfg``: the head condition number over ``cfg.conds``
    (mu_*^2 = scale^2 / cond), the inner step over ``cfg.alphas`` and the outer step over
    ``cfg.betas``, each run for ``cfg.sweep_iterations`` steps. Returns
    ``{sweep: {"values": (p,), "x": beta alpha mu^2 (p,), algorithm: rates (p,)}}`` for
    ``sweep`` in ``"cond"``, ``"alpha"``, ``"beta"``.
    """
    for algorithm in algorithms:
        if algorithm not in maml.ALGORITHMS:
            raise ValueError(f"unknown algorithm {algorithm!r}; choose from {maml.ALGORITHMS}")
    grids = {"cond": cfg.conds, "alpha": cfg.alphas, "beta": cfg.betas}
    out = {}
    for sweep, values in grids.items():
        rows = {"values": torch.tensor(values, dtype=torch.float64), "x": []}
        rows.update({a: [] for a in algorithms})
        for value in values:
            c = replace(cfg, **{sweep: float(value)})
            pb = make_problem(c, device=device)
            rows["x"].append(c.beta * c.alpha * c.mu2)
            for algorithm in algorithms:
                traj = maml.meta_train(pb.B0, pb.w0, pb.tasks, algorithm=algorithm, alpha=c.alpha, beta=c.beta,
                                       iterations=c.sweep_iterations)
                rows[algorithm].append(linear_rate(traj.dist(pb.Bstar)))
        out[sweep] = {key: torch.as_tensor(val, dtype=torch.float64) for key, val in rows.items()}
    return out


def contraction_envelope(cfg: PopulationSettings, c: float = 0.5) -> torch.Tensor:
    """delta0 (1 - c beta alpha mu_*^2)^t for t = 0..T: the form of the main theorem's bound
    with an explicit constant c in the Omega(.) (an illustration, not the paper's constant)."""
    rho = 1.0 - c * cfg.beta * cfg.alpha * cfg.mu2
    if not 0.0 < rho < 1.0:
        raise ValueError(f"1 - c beta alpha mu^2 = {rho} is not in (0, 1): choose a smaller c or step sizes")
    return cfg.delta0 * torch.tensor([rho**t for t in range(cfg.iterations + 1)], dtype=torch.float64)


def plot_rate_sweep(sweep: dict):
    """The measured linear rates of :func:`rate_sweep` against ``beta alpha mu_*^2``, one panel
    per swept parameter (log-log, two to a row), with the rate ``x`` and ``-log(1 - x)`` it lies
    between; the legend fills the fourth place. Returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    fig, grid_axes = plt.subplots(2, 2, figsize=(7.5, 5.8), sharey=True)
    axes = grid_axes.flat
    labels = {"cond": r"cond ($\mu_*^2 = 1/$cond)", "alpha": r"inner step $\alpha$",
              "beta": r"outer step $\beta$"}
    for ax, (name, rows) in zip(axes, sweep.items()):
        x = rows["x"]
        grid = torch.linspace(float(x.min()), float(x.max()), 100, dtype=torch.float64)
        for algorithm, marker in zip(("ANIL", "FO-ANIL", "FO-MAML"), ("o", "s", "^")):
            ax.loglog(x, rows[algorithm], marker, color=COLORS[algorithm], label=algorithm,
                      ms=6 - len(algorithm) // 3)
        ax.loglog(grid, grid, "k--", lw=1, label=r"$\beta\alpha\mu_*^2$")
        ax.loglog(grid, -torch.log1p(-grid), "k:", lw=1, label=r"$-\log(1 - \beta\alpha\mu_*^2)$")
        ax.set(xlabel=r"$\beta\alpha\mu_*^2$", ylabel="measured linear rate", title=f"varying the {labels[name]}")
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))   # 0.01, 0.02, 0.05, 0.1, ...
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())                          # no crowded 3x, 4x, 6x labels
    grid_axes[1, 1].axis("off")
    grid_axes[1, 1].legend(*grid_axes[0, 0].get_legend_handles_labels(), loc="center")
    plt.tight_layout()
    return fig
