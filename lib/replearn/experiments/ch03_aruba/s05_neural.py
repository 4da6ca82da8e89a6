"""Book 3.5: ARUBA's learning rate on a small network, few-shot sinusoid regression (Khodak,
Balcan and Talwalkar 2019, blog "Adaptive gradient-based meta-learning", last section).

The blog of Khodak, Balcan and Talwalkar (2019) meta-learns, with Reptile, an initialisation
and a per-coordinate learning rate for a convolutional network and reports that the learned
rates are smaller for the lower layers than for the classification head. This driver repeats
the experiment on a CPU scale, on the sinusoid family of Finn et al. (2017), with the
algorithms of :mod:`replearn.theory.sinusoid`:

- task: y = a sin(x - b) with amplitude a ~ U[0.1, 5] and phase b ~ U[0, pi]; x ~ U[-5, 5];
  ``shots`` support points for adaptation, ``query`` points to measure the adapted model
  (:func:`replearn.theory.sinusoid.sinusoid_tasks`);
- model: an MLP 1 -> hidden -> hidden -> 1 with ReLU (:func:`replearn.theory.sinusoid.relu_mlp`);
- within-task learner: ``inner_steps`` full-batch gradient steps on the mean squared error of
  the support set, with one learning rate per parameter tensor (the six groups W1, b1, W2, b2,
  W3, b3; :func:`replearn.theory.sinusoid.adapt`); the last iterate theta_hat_t is the task's model;
- meta-learner: Reptile with ARUBA's per-group rates (:func:`replearn.theory.sinusoid.reptile`, whose
  docstring gives the update and the smoothing constants ``smoothing``, ``power``, ``eta0``).

Held-out comparison (:func:`run`): on fresh tasks, adapt with the ``inner_steps`` steps from
(a) the meta-learned init with the ARUBA rates, (b) the same init with the best single rate of
``rate_grid`` (tuned on separate validation tasks), (c) a Reptile init meta-learned with a
fixed single rate eta0 and (d) the random initialisation with its best single rate; report
the query loss after every step.

Tiny batched products run much faster on one CPU thread than on several, so :func:`run`
sets ``torch.set_num_threads(1)`` for its duration on the CPU and restores the old value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from replearn.theory import sinusoid
from replearn.backend import SeedLike, make_generator
from replearn.settings import Each, Ge, Gt, Lt, Profile, Settings
from replearn.book.plotting import to_numpy


@dataclass(frozen=True)
class ArubaNeuralSettings(Settings):
    """Network width ``hidden``; ``shots`` support and ``query`` points per task; ``inner_steps``
    gradient steps per task; ``meta_iterations`` Reptile updates on ``meta_batch`` tasks each with
    outer step ``meta_step`` (linearly annealed to 0); initial inner rate ``eta0``; ARUBA smoothing
    constants; ``eval_tasks`` held-out (and as many validation) tasks; the single-rate grid."""

    WORDS = {"hidden": "hidden units per layer", "shots": "support points per task",
             "query": "query points per task", "inner_steps": "inner steps",
             "meta_iterations": "meta-iterations", "meta_batch": "tasks per meta-iteration",
             "meta_step": "meta step size", "eta0": "initial step size η₀",
             "smoothing": "ARUBA's smoothing ε", "power": "ARUBA's power p", "eval_tasks": "evaluation tasks",
             "rate_grid": "single step sizes tried"}

    hidden: Annotated[int, Ge(1)] = 40
    shots: Annotated[int, Ge(1)] = 10
    query: Annotated[int, Ge(1)] = 50
    inner_steps: Annotated[int, Ge(1)] = 5
    meta_iterations: Annotated[int, Ge(1)] = 1500
    meta_batch: Annotated[int, Ge(1)] = 10
    meta_step: Annotated[float, Gt(0)] = 0.5
    eta0: Annotated[float, Gt(0)] = 0.01
    smoothing: Annotated[float, Gt(0)] = 1.0
    power: Annotated[float, Ge(0, why="o(t) smoothing"), Lt(1)] = 0.4
    eval_tasks: Annotated[int, Ge(1)] = 500
    rate_grid: Annotated[tuple, Each(Gt(0))] = (0.001, 0.003, 0.01, 0.02, 0.03, 0.05, 0.1)
    seed: int = 0

    PAPER = Profile({"meta_iterations": 10000, "meta_batch": 25, "eval_tasks": 2000},
                    doc="Longer meta-training and more held-out tasks (Finn et al. 2017: 70k iterations of 25 "
                        "tasks; a CPU-feasible fraction of it).")


def reptile(cfg: ArubaNeuralSettings, *, learn_rate: bool = True, seed: SeedLike = 0) -> sinusoid.MetaTraining:
    """:func:`replearn.theory.sinusoid.reptile` with the network, tasks and meta-training of ``cfg``:
    ARUBA's per-group rates with ``learn_rate``, otherwise the fixed rate ``cfg.eta0``."""
    return sinusoid.reptile(hidden=cfg.hidden, shots=cfg.shots, inner_steps=cfg.inner_steps,
                            meta_iterations=cfg.meta_iterations, meta_batch=cfg.meta_batch,
                            meta_step=cfg.meta_step, eta0=cfg.eta0, smoothing=cfg.smoothing, power=cfg.power,
                            learn_rate=learn_rate, seed=seed)


@dataclass(frozen=True)
class ArubaNeuralResult:
    """``aruba`` and ``fixed`` meta-trainings (ARUBA rates / fixed eta0); ``layer_rates`` of
    ARUBA; the held-out query-loss curves ``curves[method]`` (inner_steps + 1, eval_tasks);
    the tuned single rates ``tuned[method]``; the random ``initial`` parameters."""

    aruba: sinusoid.MetaTraining
    fixed: sinusoid.MetaTraining
    layer_rates: dict
    curves: dict
    tuned: dict
    initial: dict

    def final_loss(self) -> dict:
        """Mean held-out query loss after the last adaptation step, per method."""
        return {name: float(c[-1].mean()) for name, c in self.curves.items()}


def run(cfg: ArubaNeuralSettings) -> ArubaNeuralResult:
    """Meta-train with ARUBA rates and with a fixed rate, then compare adaptation on held-out
    tasks (module docstring). Deterministic for a given ``cfg.seed``; CPU only."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        aruba = reptile(cfg, learn_rate=True, seed=cfg.seed)
        fixed = reptile(cfg, learn_rate=False, seed=cfg.seed)
        initial = sinusoid.relu_mlp_init(cfg.hidden, seed=make_generator(cfg.seed))
        valid = sinusoid.sinusoid_tasks(cfg.eval_tasks, cfg.shots, cfg.query, seed=cfg.seed + 1)
        test = sinusoid.sinusoid_tasks(cfg.eval_tasks, cfg.shots, cfg.query, seed=cfg.seed + 2)
        steps = cfg.inner_steps
        tuned = {"meta init + single tuned rate": sinusoid.tune_rate(aruba.phi, valid, cfg.rate_grid, steps)[0],
                 "random init + single tuned rate": sinusoid.tune_rate(initial, valid, cfg.rate_grid, steps)[0]}
        plans = {"meta init + ARUBA rates": (aruba.phi, aruba.eta),
                 "meta init + single tuned rate": (aruba.phi, tuned["meta init + single tuned rate"]),
                 "Reptile init (fixed rate)": (fixed.phi, cfg.eta0),
                 "random init + single tuned rate": (initial, tuned["random init + single tuned rate"])}
        curves = {name: sinusoid.adapt(phi, test, eta, steps, record=True)[2] for name, (phi, eta) in plans.items()}
    finally:
        torch.set_num_threads(threads)
    return ArubaNeuralResult(aruba, fixed, sinusoid.layer_rates(aruba.eta), curves, tuned, initial)


# --------------------------------------------------------------------------- what the page shows

#: The colour of each tensor group's layer in the figures (weights and biases alike).
GROUP_COLORS = {"W1": "C0", "b1": "C0", "W2": "C2", "b2": "C2", "W3": "C3", "b3": "C3"}
#: The line style of each adaptation curve of :func:`plot_adaptation`: (colour, line style).
CURVE_STYLES = {"meta init + ARUBA rates": ("C3", "-"), "meta init + single tuned rate": ("C3", "--"),
                "Reptile init (fixed rate)": ("C0", "-"), "random init + single tuned rate": ("C7", "-")}


def plot_rates(res: ArubaNeuralResult, cfg: ArubaNeuralSettings):
    """Left: every tensor group's ARUBA rate during meta-training; right: the final rate per
    layer, weights and biases, against the fixed rate ``eta0``. Returns the figure."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.6, 3.6))
    steps = np.arange(1, cfg.meta_iterations + 1)
    colors = GROUP_COLORS
    for j, g in enumerate(sinusoid.GROUPS):
        ax1.plot(steps, to_numpy(res.aruba.rates[:, j]), color=colors[g], ls="-" if g[0] == "W" else "--", label=g)
    ax1.set(yscale="log", xlabel="meta-iteration", ylabel=r"$\eta_g$", title="ARUBA rates during meta-training")
    ax1.legend(ncol=3)
    layers = list(sinusoid.LAYERS)
    x = np.arange(len(layers))
    for shift, kind in ((-0.2, 0), (0.2, 1)):
        values = [res.aruba.eta[sinusoid.LAYERS[layer][kind]] for layer in layers]
        ax2.bar(x + shift, values, width=0.4, color=[colors[sinusoid.LAYERS[l][0]] for l in layers],
                alpha=1.0 if kind == 0 else 0.5, label="weights" if kind == 0 else "biases")
    ax2.axhline(cfg.eta0, color="k", lw=0.8, ls=":", label=r"$\eta_0$")
    ax2.set(xticks=x, xticklabels=layers, ylabel=r"final $\eta_g$", title="final rates per layer")
    ax2.legend()
    plt.tight_layout()
    return fig


def moves_and_gradients(res: ArubaNeuralResult, adapted: dict, grad_sq: dict, inner_steps: int) -> tuple[dict, dict]:
    """Per tensor group, the RMS move of its coordinates during adaptation (``adapted``: the
    adapted parameters per task) and the RMS gradient (``grad_sq``: summed squared gradients over
    ``inner_steps`` steps)."""
    moves, grads = {}, {}
    for g in sinusoid.GROUPS:
        n = res.aruba.phi[g].numel()
        moves[g] = float((adapted[g] - res.aruba.phi[g]).pow(2).flatten(1).sum(1).mean() / n) ** 0.5
        grads[g] = float((grad_sq[g].mean() / (n * inner_steps)) ** 0.5)
    return moves, grads


def plot_adaptation(res: ArubaNeuralResult, inner_steps: int):
    """The held-out tasks' query MSE along ``inner_steps`` adaptation steps, one curve per
    initialisation and rate of ``res.curves``. Returns the figure."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for name, curve in res.curves.items():
        color, ls = CURVE_STYLES[name]
        ax.plot(np.arange(inner_steps + 1), to_numpy(curve.mean(1)), color=color, ls=ls, marker="o", ms=3, label=name)
    ax.set(xlabel="gradient steps on the 10 support points", ylabel="query MSE (held-out tasks)",
           title="few-shot sinusoid regression")
    ax.legend()
    plt.tight_layout()
    return fig
