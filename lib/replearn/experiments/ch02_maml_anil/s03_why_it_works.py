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


@dataclass(frozen=True)
class HypothesesSettings(PopulationSettings):
    """The population instance of :class:`~replearn.theory.maml_instances.PopulationSettings`: the
    meta-learners run ``iterations`` steps from its structured start."""


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
