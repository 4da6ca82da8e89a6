"""Book 4.2: local convergence is not enough: averaging locally fitted models (the k = n = 2
example of the FedAvg part of Mokhtari's talk on Collins et al. 2022).

A two-client instance of the multi-task linear representation model with k = 2 in d >= 3
dimensions: client i has regressor theta_*_i = e_i, so B_* = [e_1, e_2] and the heads are
w_*_1 = (1, 0), w_*_2 = (0, 1). Each client fits its own data exactly with

    B_hat_1 = [e_1, e_3],  B_hat_2 = [e_2, e_3],  w_hat_1 = w_hat_2 = (1, 0),

since B_hat_i w_hat_i = e_i. The server average is B_bar = [(e_1 + e_2) / 2, e_3] with
w_bar = (1, 0): a full-rank representation whose column space contains e_3, which is
orthogonal to col(B_*), so dist(B_bar, B_*) = 1. Optionally everything is rotated by a
Haar-random orthogonal Q (distances and losses are rotation invariant).

:func:`local_fit_instance` builds the instance and the local fits (their average and its
measurements: :func:`replearn.theory.linear_federated.average_local_fits`), and :func:`run` contrasts this
with FedAvg (Collins et al. 2022, Alg. 1) on the same two clients for several numbers of
local steps tau, from a generic start and from the averaged local fits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from replearn.theory import linear_federated, linalg, linear
from replearn.backend import DTYPE, default_device, make_generator, randn
from replearn.theory.linear_federated import AveragedModel
from replearn.theory.linear import PopulationTasks
from replearn.settings import Each, Ge, Gt, Profile, Settings
from replearn.book.plotting import COLORS


@dataclass(frozen=True)
class LocalFitInstance:
    """Ground truth ``Bstar`` (d, 2), heads ``W`` (2, 2), the population ``tasks`` and each
    client's exact local fit ``B_local`` (2, d, 2), ``w_local`` (2, 2)."""

    Bstar: torch.Tensor
    W: torch.Tensor
    tasks: PopulationTasks
    B_local: torch.Tensor
    w_local: torch.Tensor

    @property
    def d(self) -> int:
        return self.Bstar.shape[0]

    def local_losses(self) -> torch.Tensor:
        """f_i(B_hat_i, w_hat_i) for both clients, shape (2,): zero for exact fits."""
        return linear.losses(self.B_local, self.w_local, self.tasks)


def local_fit_instance(d: int = 3, *, rotation_seed: int | None = None, device=None) -> LocalFitInstance:
    """The two-client, k = 2 instance and its local fits (see the module docstring).

    ``d`` >= 3 is the ambient dimension; with ``rotation_seed`` (an int) every vector is
    rotated by the same Haar-random orthogonal matrix, otherwise the standard basis is used.
    """
    if not isinstance(d, int) or isinstance(d, bool) or d < 3:
        raise ValueError(f"the construction needs an integer dimension d >= 3 (a third direction "
                         f"outside col(B_*)), got d={d!r}")
    E = torch.eye(d, dtype=DTYPE)
    if rotation_seed is not None:
        E = linalg.random_orthonormal(d, d, seed=rotation_seed)
    e1, e2, e3 = E[:, 0], E[:, 1], E[:, 2]
    Bstar = torch.stack([e1, e2], dim=1)
    W = torch.eye(2, dtype=DTYPE)
    B_local = torch.stack([torch.stack([e1, e3], dim=1), torch.stack([e2, e3], dim=1)])
    w_local = torch.tensor([[1.0, 0.0], [1.0, 0.0]], dtype=DTYPE)
    if device is not None:
        Bstar, W, B_local, w_local = (t.to(device) for t in (Bstar, W, B_local, w_local))
    return LocalFitInstance(Bstar=Bstar, W=W, tasks=linear.population_tasks(Bstar, W),
                            B_local=B_local, w_local=w_local)


# --------------------------------------------------------------------------- FedAvg on the instance

@dataclass(frozen=True)
class LocalFitsSettings(Settings):
    """Ambient dimension ``d`` of the two-client instance, FedAvg step ``alpha``, ``rounds``,
    the numbers of local steps ``taus`` (tau = 1 is D-GD; the largest is close to local
    convergence), the size ``perturbation`` of the random kick added to the averaged local
    fits for the second start, and the seed of the random start and the kick."""

    WORDS = {"d": "dimension d of the two-client instance", "alpha": "step size α",
             "taus": "local steps τ (1 is D-GD)",
             "perturbation": "size of the kick added to the averaged local fits"}

    d: Annotated[int, Ge(3, why="the construction needs d >= 3")] = 10
    alpha: Annotated[float, Gt(0)] = 0.2
    rounds: Annotated[int, Ge(1)] = 300
    taus: Annotated[tuple, Each(Ge(1))] = (1, 2, 10, 100)
    perturbation: Annotated[float, Ge(0)] = 0.01
    seed: int = 0

    PAPER = Profile({"d": 100, "rounds": 1000},
                    doc="A larger ambient dimension (the paper has no such instance; d = 100 as in its Fig. 1).")


@dataclass(frozen=True)
class LocalFitsResult:
    """The instance, the averaged local fits ``averaged``, and per tau: distances to B_* from
    the random start ``dist[tau]`` (T + 1,), from the averaged local fits ``dist_avg[tau]``
    and from their perturbation ``dist_kick[tau]``, and the clients' mean local loss after
    their tau local steps of every round ``local_loss[tau]`` (T + 1,), next to the loss at
    the start of the round ``start_loss[tau]`` (T + 1,)."""

    instance: LocalFitInstance
    averaged: AveragedModel
    dist: dict
    dist_avg: dict
    dist_kick: dict
    local_loss: dict
    start_loss: dict


def _local_loss_after(traj, tasks: PopulationTasks, alpha: float, tau: int) -> torch.Tensor:
    """Mean client loss after the tau local steps taken from every global iterate of traj."""
    out = []
    for B, w in zip(traj.B, traj.w):
        B_loc, w_loc = linear_federated.local_updates(B, w, tasks, None, alpha=alpha, tau=tau)
        out.append(linear.losses(B_loc, w_loc, tasks).mean())
    return torch.stack(out)


def run(cfg: LocalFitsSettings, device=None) -> LocalFitsResult:
    """FedAvg(tau) on the two-client instance for every tau in ``cfg.taus``, from (i) a
    random B_0 with orthonormal columns scaled by 1/sqrt(alpha) and w_0 = 0 (the normalisation
    of Collins et al. 2022), (ii) the averaged local fits and (iii) those plus a Gaussian kick
    of size ``cfg.perturbation``."""
    device = default_device() if device is None else torch.device(device)
    inst = local_fit_instance(cfg.d, device=device)
    avg = linear_federated.average_local_fits(inst.B_local, inst.w_local, inst.Bstar, W=inst.W)
    gen = make_generator(cfg.seed)
    B0 = linalg.random_orthonormal(cfg.d, 2, seed=gen, device=device) / cfg.alpha**0.5
    w0 = torch.zeros(2, dtype=DTYPE, device=device)
    B_kick = avg.B + cfg.perturbation * randn(cfg.d, 2, generator=gen, device=device)
    w_kick = avg.w + cfg.perturbation * randn(2, generator=gen, device=device)
    dist, dist_avg, dist_kick, local_loss, start_loss = {}, {}, {}, {}, {}
    for tau in cfg.taus:
        traj = linear_federated.fedavg(B0, w0, inst.tasks, alpha=cfg.alpha, tau=tau, rounds=cfg.rounds)
        dist[tau] = traj.dist(inst.Bstar).cpu()
        local_loss[tau] = _local_loss_after(traj, inst.tasks, cfg.alpha, tau).cpu()
        residual = linear.predict(traj.B, traj.w).unsqueeze(-2) - inst.tasks.theta
        start_loss[tau] = (0.5 * residual.pow(2).sum(-1).mean(-1)).cpu()
        run_avg = linear_federated.fedavg(avg.B, avg.w, inst.tasks, alpha=cfg.alpha, tau=tau, rounds=cfg.rounds)
        dist_avg[tau] = run_avg.dist(inst.Bstar).cpu()
        run_kick = linear_federated.fedavg(B_kick, w_kick, inst.tasks, alpha=cfg.alpha, tau=tau, rounds=cfg.rounds)
        dist_kick[tau] = run_kick.dist(inst.Bstar).cpu()
    return LocalFitsResult(instance=inst, averaged=avg, dist=dist, dist_avg=dist_avg, dist_kick=dist_kick,
                           local_loss=local_loss, start_loss=start_loss)


# --------------------------------------------------------------------------- what the page shows

def run_table(res: LocalFitsResult, taus, rounds: int) -> str:
    """Per tau, as lines of text: the distance to B_* after ``rounds`` / 10 and ``rounds``
    rounds from the random start, from the averaged and from the kicked local fits, and the local
    loss after the first round's local steps (and before them)."""
    lines = [f"dist(B_0, B*) of the random start: {float(res.dist[taus[0]][0]):.4f}",
             "  tau   dist after T/10, T rounds   from averaged fits   from kicked fits   local loss after tau "
             "steps, round 0"]
    T = rounds
    for tau in taus:
        lines.append(f"{tau:5d}   {float(res.dist[tau][T // 10]):12.4f} {float(res.dist[tau][T]):8.4f}"
                     f"   {float(res.dist_avg[tau][T]):18.4f}   {float(res.dist_kick[tau][T]):16.4f}"
                     f"   {float(res.local_loss[tau][0]):10.4f} (start {float(res.start_loss[tau][0]):.4f})")
    return "\n".join(lines)


def plot_local_fits(res: LocalFitsResult, cfg: LocalFitsSettings):
    """Left: the two clients' exact local fits and their average in the plane span(e1, e2) (the
    second column of both fits is e3); right: the distance to B_* over the rounds for every tau
    of ``cfg``, and from the averaged fits. Returns the figure."""
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.0, 3.6), gridspec_kw={"width_ratios": [1, 1.6]})
    arrows = {r"$\theta_{*,1} = \hat B_1 \hat w_1$": ((1.0, 0.0), COLORS["true representation"]),
              r"$\theta_{*,2} = \hat B_2 \hat w_2$": ((0.0, 1.0), COLORS["true representation"]),
              r"$\bar B \bar w$ (first column of $\bar B$)": ((0.5, 0.5), COLORS["D-GD"])}
    for text, ((x, y), color) in arrows.items():
        ax1.annotate("", xy=(x, y), xytext=(0, 0), arrowprops=dict(arrowstyle="->", color=color, lw=2))
        ax1.text(x + 0.03, y + 0.03, text, color=color, fontsize=8)
    ax1.plot([0, 0.7], [0, -0.7], ls=":", color="k")
    ax1.text(0.5, -0.78, r"$(e_1 - e_2)/\sqrt{2}$: missed", fontsize=8)
    ax1.set(xlim=(-0.2, 1.45), ylim=(-0.8, 1.2), xlabel=r"$e_1$", ylabel=r"$e_2$", title=r"local fits; 2nd column $e_3$")
    ax1.set_aspect("equal")
    t = torch.arange(cfg.rounds + 1)
    shades = ["#d62728", "#1f77b4", "#6baed6", "#08306b"]
    for tau, color in zip(cfg.taus, shades):
        label = "D-GD (τ = 1)" if tau == 1 else f"FedAvg, τ = {tau}"
        ax2.semilogy(t, res.dist[tau].clamp_min(1e-16), color=color, label=label)
    ax2.semilogy(t, res.dist_avg[cfg.taus[-1]], color="k", ls="--", label="from averaged fits (any τ)")
    ax2.set(xlabel="round t", ylabel=r"dist$(B_t, B_*)$", ylim=(1e-8, 2), title="FedAvg on the two clients")
    ax2.legend(fontsize=8)
    plt.tight_layout()
    return fig
