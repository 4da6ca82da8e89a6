"""Book 2.1: from ARM to MAML and ANIL, and how large the Hessian term of the exact
meta-gradient is (Collins, Mokhtari, Oh & Shakkottai, ICML 2022, Sec. 2: the algorithms and
their first-order versions).

On the population instance of :mod:`replearn.theory.maml_instances` (structured start),
:func:`hessian_term` measures the relative size of the Hessian term that FO-MAML and FO-ANIL
drop (:func:`replearn.theory.maml.relative_hessian_term`) along a MAML run and, early in training,
as the inner step alpha grows. The formulas themselves are checked in the notebook against
:mod:`replearn.theory.maml` (closed forms, :func:`replearn.theory.maml.adapted_heads_autograd`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from replearn.theory import maml
from replearn.theory.maml_instances import PopulationSettings, make_problem
from replearn.settings import Each, Gt


@dataclass(frozen=True)
class HessianTermSettings(PopulationSettings):
    """The population instance (:class:`~replearn.theory.maml_instances.PopulationSettings`) and the
    inner step sizes ``hessian_alphas`` at which :func:`hessian_term` measures the Hessian term
    early in training."""

    WORDS = {"n": "training tasks n", "cond": "condition number of the heads' second moment",
             "scale": "scale L of the heads' second moment", "mean_norm": "norm of the heads' mean",
             "delta0": "distance of the start from B* (δ₀)", "alpha": "inner step size α",
             "beta": "outer step size β", "iterations": "outer iterations",
             "hessian_alphas": "inner step sizes α at which the Hessian term is measured"}

    hessian_alphas: Annotated[tuple, Each(Gt(0))] = (0.025, 0.05, 0.1, 0.2, 0.4)


def hessian_term(cfg: HessianTermSettings, *, at: int = 10, device=None) -> dict:
    """Relative size of the Hessian term of the exact meta-gradient,

        ||G_exact - G_first-order|| / ||G_exact||   (G = (G_B, G_w) flattened),

    for MAML vs FO-MAML and ANIL vs FO-ANIL (:func:`replearn.theory.maml.relative_hessian_term`).
    ``"trajectory"`` maps each pair to a (T + 1,) tensor along the MAML run of ``cfg``
    (T = ``cfg.iterations``); ``"alphas"`` maps each pair to a tensor over
    ``cfg.hessian_alphas``, each measured at iterate ``at`` of a MAML run with that inner step
    (B_0 rescaled by 1/sqrt(alpha)); ``"dist"``: dist(B_t, B_*) along the MAML run. Iterate 0 is
    skipped on the trajectory curve (w_0 = 0 makes the exact and first-order representation
    gradients vanish and coincide), where the entry is NaN.
    """
    if not isinstance(at, int) or at < 1:
        raise ValueError(f"at must be a positive integer (an iterate of the run), got {at!r}")
    exact = tuple(maml.FIRST_ORDER)

    def gap(B, w, tasks, alpha):
        return {name: maml.relative_hessian_term(B, w, tasks, algorithm=name, alpha=alpha) for name in exact}

    pb = make_problem(cfg, device=device)
    traj = maml.meta_train(pb.B0, pb.w0, pb.tasks, algorithm="MAML", alpha=cfg.alpha, beta=cfg.beta,
                           iterations=cfg.iterations)
    along = {name: [float("nan")] for name in exact}
    for t in range(1, cfg.iterations + 1):
        for name, value in gap(traj.B[t], traj.w[t], pb.tasks, cfg.alpha).items():
            along[name].append(value)
    over_alpha = {name: [] for name in exact}
    for alpha in cfg.hessian_alphas:
        pa = make_problem(cfg, alpha=alpha, device=device)
        ta = maml.meta_train(pa.B0, pa.w0, pa.tasks, algorithm="MAML", alpha=alpha, beta=cfg.beta, iterations=at)
        for name, value in gap(ta.B[at], ta.w[at], pa.tasks, alpha).items():
            over_alpha[name].append(value)
    as_tensor = lambda d: {k: torch.tensor(v, dtype=torch.float64) for k, v in d.items()}  # noqa: E731
    return {"trajectory": as_tensor(along), "alphas": as_tensor(over_alpha),
            "dist": traj.dist(pb.Bstar).cpu()}
