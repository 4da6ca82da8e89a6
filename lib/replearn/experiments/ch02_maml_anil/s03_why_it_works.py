"""Book 2.3: why MAML and ANIL learn B_*: the FO-ANIL prior/signal decomposition and the
inductive hypotheses A1-A6 of the main theorem's proof (Collins, Mokhtari, Oh & Shakkottai,
ICML 2022, Sec. 4), with diverse and with degenerate heads.

On the population instance of :mod:`replearn.theory.maml_instances` (structured start):

* :func:`decomposition_check` checks the identity B_{t+1} = B_t P_t + B_* S_t of
  :func:`replearn.theory.maml.fo_anil_decomposition` along the FO-ANIL run and compares the rank of
  the signal weight with ARM's (:func:`replearn.theory.meta.arm_decomposition`);
* :func:`hypotheses_runs` tracks the quantities of A1-A6 (:func:`replearn.theory.maml.hypotheses`)
  along the run of every meta-learner.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from replearn.theory import maml, meta
from replearn.theory.maml_instances import PopulationSettings, make_problem
from replearn.book.plotting import COLORS


@dataclass(frozen=True)
class HypothesesSettings(PopulationSettings):
    """The population instance of :class:`~replearn.theory.maml_instances.PopulationSettings`: the
    meta-learners run ``iterations`` steps from its structured start."""

    WORDS = {"n": "training tasks n", "cond": "condition number of the heads' second moment",
             "scale": "scale L of the heads' second moment", "mean_norm": "norm of the heads' mean",
             "delta0": "distance of the start from B* (δ₀)", "alpha": "inner step size α",
             "beta": "outer step size β", "iterations": "outer iterations"}


def decomposition_check(cfg: HypothesesSettings, device=None) -> dict:
    """Along the FO-ANIL run of ``cfg``: the largest entry of |B_t P_t + B_* S_t - B_{t+1}| with
    (P_t, S_t) from :func:`replearn.theory.maml.fo_anil_decomposition` (``"error"``); the smallest
    singular value of S_t at every step (``"signal_min_sv"``, (T,)); and the singular values of
    ARM's signal weight (:func:`replearn.theory.meta.arm_decomposition`) at the same points
    (``"arm_signal_sv"``, (T, k)), which has rank at most one."""
    pb = make_problem(cfg, device=device)
    traj = maml.meta_train(pb.B0, pb.w0, pb.tasks, algorithm="FO-ANIL", alpha=cfg.alpha, beta=cfg.beta,
                           iterations=cfg.iterations)
    err, sv_min, arm_sv = 0.0, [], []
    for t in range(cfg.iterations):
        B, w = traj.B[t], traj.w[t]
        prior, signal = maml.fo_anil_decomposition(B, w, pb.Bstar, pb.W, alpha=cfg.alpha, beta=cfg.beta)
        err = max(err, float((B @ prior + pb.Bstar @ signal - traj.B[t + 1]).abs().max()))
        sv_min.append(torch.linalg.svdvals(signal)[-1])
        arm_sv.append(torch.linalg.svdvals(meta.arm_decomposition(w, pb.W, cfg.beta)[1]))
    return {"error": err, "signal_min_sv": torch.stack(sv_min).cpu(), "arm_signal_sv": torch.stack(arm_sv).cpu(),
            "trajectory": traj, "problem": pb}


def hypotheses_runs(cfg: HypothesesSettings, *, degenerate: bool = False, device=None) -> dict:
    """:func:`replearn.theory.maml.hypotheses` (the quantities of A1-A6) along the run of every
    meta-learner for ``cfg.iterations`` steps from the structured start of ``cfg``
    (``degenerate=True``: heads without diversity). Returns ``{algorithm: {quantity: (T + 1,) tensor}}``."""
    pb = make_problem(cfg, degenerate=degenerate, device=device)
    out = {}
    for algorithm in maml.ALGORITHMS:
        traj = maml.meta_train(pb.B0, pb.w0, pb.tasks, algorithm=algorithm, alpha=cfg.alpha, beta=cfg.beta,
                               iterations=cfg.iterations)
        quantities = maml.hypotheses(traj, pb.Bstar, pb.W, cfg.alpha)
        out[algorithm] = {key: val.cpu() for key, val in quantities.items()}
    return out


def check_hypotheses(h: dict, cfg: HypothesesSettings, rho: float) -> dict[str, bool]:
    """Whether the run ``h`` (one entry of :func:`hypotheses_runs`) satisfies each inductive
    hypothesis A1-A6 at every iteration, with contraction factor ``rho`` (A2 only while the
    distance is above 1e-6, where it is not rounding noise)."""
    steps = torch.arange(cfg.iterations + 1, dtype=torch.float64)
    late = h["dist"][:-1] > 1e-6
    return {"A1": bool((h["w_norm"] <= cfg.alpha**0.5).all()),
            "A2": bool((h["delta_norm"][1:][late] <= h["dist"][:-1][late] ** 2).all()),
            "A3": bool((h["delta_norm"] <= 0.1).all()),
            "A4": bool((h["psi_cond"] <= 2 * cfg.cond).all()),
            "A5": bool((h["perp_ratio"][1:] <= rho).all()),
            "A6": bool((h["dist"] <= cfg.delta0 * rho**steps + 1e-12).all())}


def plot_hypotheses(hyp: dict, cfg: HypothesesSettings, rho: float):
    """One panel per quantity of the hypotheses A1-A6 along every run of ``hyp``
    (:func:`hypotheses_runs`), with the bounds they are checked against, three rows of two, the
    methods' legend above them (the bounds are named in their panels). Returns the figure."""
    import matplotlib.pyplot as plt

    t = torch.arange(cfg.iterations + 1)
    fig, axes = plt.subplots(3, 2, figsize=(7.5, 8.4))
    panels = [("w_norm", r"A1: $\|w_t\| / \sqrt{\alpha}$", cfg.alpha**-0.5, False),
              ("delta_norm", r"A2, A3: $\|\Delta_t\|$", 1.0, True),
              ("psi_cond", r"A4: $\kappa(\Psi_t)$", 1.0, False),
              ("perp_ratio", r"A5: $\|B_{*\perp}^\top B_t\| / \|B_{*\perp}^\top B_{t-1}\|$", 1.0, False),
              ("dist", r"A6: dist$(B_t, B_*)$", 1.0, True),
              ("perp_norm", r"$\|B_{*\perp}^\top B_t\|$", 1.0, True)]
    for ax, (key, title, factor, logy) in zip(axes.flat, panels):
        for name, h in hyp.items():
            y = (h[key] * factor).clamp_min(1e-18) if logy else h[key] * factor
            ax.plot(t, y, color=COLORS[name], ls="--" if name.startswith("FO-") else "-", label=name)
        if logy:
            ax.set_yscale("log")
        ax.set(title=title, xlabel="iteration t")
    a2, a4, a5, a6 = axes.flat[1], axes.flat[2], axes.flat[3], axes.flat[4]
    bounds = [a2.semilogy(t[1:], hyp["FO-ANIL"]["dist"][:-1] ** 2, "k:", lw=1, label=r"dist$_{t-1}^2$"),
              a6.semilogy(t, cfg.delta0 * rho ** t.double(), "k:", lw=1, label=r"$\delta_0\rho^t$"),
              [a5.axhline(rho, color="k", ls=":", lw=1, label=r"$\rho$")]]
    for ax, (line,) in zip((a2, a6, a5), bounds):
        ax.legend(handles=[line])
    a4.set_ylim(1.0, 2 * cfg.cond)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=len(labels), bbox_to_anchor=(0.5, 1.0))
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    return fig
