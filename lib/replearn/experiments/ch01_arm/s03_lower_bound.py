"""Book 1.3: ARM stays stuck on adversarial ground truths (Collins et al. 2022, Prop. 1; book 1.3,
Theorem ``arm-lb-thm``).

Collins et al. (2022, Prop. 1; the same statement for D-GD in Collins et al. 2022, FedAvg
paper) show: for every delta in (0, 1/2], step size, horizon T, head set and full-rank B_0
there is a B_* with dist(B_0, B_*) = delta and dist(B_T, B_*) > 0.7 delta for ARM. Book 1.3
proves the sharper dist(B_t, B_*) >= delta for every t, using the construction of
:func:`replearn.theory.lower_bound.adversarial_ground_truth` (the mean regressor ``B_* wbar_*`` lies
in col(B_0), so col(B_t) never leaves col(B_0)).

:func:`run_sweep` checks the bound on many random instances of
:func:`replearn.theory.lower_bound.make_instance`. The notebook's "generic tilt" comparison (every
direction of col(B_0) tilted; ARM can improve at most one of them) measures all principal angles
with :func:`replearn.theory.linalg.principal_sines`. :func:`explorer` is the section's interactive panel
(ARM versus FedAvg on one adversarial instance, :func:`explorer_curves`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np
import torch

from replearn.backend import DTYPE, derive_seed, make_generator
from replearn.checks import check_int, check_number, check_positive
from replearn.theory.linear_federated import fedavg
from replearn.theory.lower_bound import make_instance, stable_step
from replearn.theory.meta import arm
from replearn.book.plotting import plot_curves, to_numpy
from replearn.settings import Each, Ge, Gt, Lt, Pair, Profile, Settings
from replearn.book.widgets import Slider, explorer as build_explorer


@dataclass(frozen=True)
class LowerBoundSweepSettings(Settings):
    """Random adversarial instances: how many, the ranges of d (k is drawn in [2, min(k_max,
    d - 1)] and n in [k + 1, n_max]), the largest head condition number and mean norm, the
    largest horizon T, the range of the step as a fraction of
    :func:`~replearn.theory.lower_bound.stable_step`, and the seed. delta is uniform on (0, 1/2] as in
    the theorem."""

    WORDS = {"instances": "random instances", "d_min": "smallest dimension d", "d_max": "largest dimension d",
             "k_max": "largest representation size k", "n_max": "most tasks n",
             "cond_max": "largest condition number of the heads",
             "mean_norm_max": "largest norm of the heads' mean", "T_max": "longest horizon T",
             "step_fraction": "step size, as a fraction of the stable step (range)"}

    instances: Annotated[int, Ge(1)] = 200
    d_min: Annotated[int, Ge(3)] = 3
    d_max: int = 30
    k_max: Annotated[int, Ge(2)] = 6
    n_max: int = 30
    cond_max: Annotated[float, Ge(1)] = 100.0
    mean_norm_max: Annotated[float, Ge(0)] = 2.0
    T_max: Annotated[int, Ge(1)] = 150
    step_fraction: Annotated[tuple[float, float], Pair(), Each(Gt(0), Lt(1))] = (0.05, 0.5)
    seed: Annotated[int, Ge(0)] = 0

    PAPER = Profile({"instances": 2000, "d_max": 100, "k_max": 20, "n_max": 100, "T_max": 1000},
                    doc="More and larger instances with longer runs.")

    def validate(self) -> None:
        """The relations between the fields (each field's own range is beside it): d_min <= d_max
        and n_max > min(k_max, d_max - 1)."""
        super().validate()
        check_int(self.d_max, "d_max", self.d_min)
        check_int(self.n_max, "n_max", min(self.k_max, self.d_max - 1) + 1)


@dataclass(frozen=True)
class LowerBoundSweepResult:
    """One entry per instance: the drawn ``d, k, n, delta, beta, T`` and ARM's final
    distance ``dist_T`` and smallest distance ``min_dist`` over t = 0..T."""

    d: torch.Tensor
    k: torch.Tensor
    n: torch.Tensor
    delta: torch.Tensor
    beta: torch.Tensor
    T: torch.Tensor
    dist_T: torch.Tensor
    min_dist: torch.Tensor

    @property
    def ratio_T(self) -> torch.Tensor:
        """dist(B_T, B_*) / delta (the theorem says > 0.7; book 1.3 proves >= 1)."""
        return self.dist_T / self.delta

    @property
    def ratio_min(self) -> torch.Tensor:
        """min_t dist(B_t, B_*) / delta."""
        return self.min_dist / self.delta


def _draw_and_run(cfg: LowerBoundSweepSettings, i: int) -> tuple:
    """Draw instance ``i`` of the sweep, run ARM on it, return its row of the result."""
    gen = make_generator(derive_seed(cfg.seed, i))
    u = torch.rand(5, generator=gen, dtype=DTYPE).tolist()
    d = int(torch.randint(cfg.d_min, cfg.d_max + 1, (1,), generator=gen))
    k = int(torch.randint(2, min(cfg.k_max, d - 1) + 1, (1,), generator=gen))
    n = int(torch.randint(k + 1, cfg.n_max + 1, (1,), generator=gen))
    T = int(torch.randint(1, cfg.T_max + 1, (1,), generator=gen))
    delta = 0.5 * (1.0 - u[0])                        # uniform on (0, 1/2]
    cond = cfg.cond_max ** u[1]                       # log-uniform on [1, cond_max]
    inst = make_instance(d, k, n, delta, cond=cond, mean_norm=cfg.mean_norm_max * u[2],
                         b0_scale=2.0 ** (2 * u[3] - 1), w0_scale=0.1, seed=gen)
    lo, hi = cfg.step_fraction
    beta = (lo + (hi - lo) * u[4]) * stable_step(inst)
    dist = arm(inst.B0, inst.w0, inst.tasks, beta=beta, iterations=T).dist(inst.Bstar)
    return d, k, n, delta, beta, T, float(dist[-1]), float(dist.min())


def run_sweep(cfg: LowerBoundSweepSettings) -> LowerBoundSweepResult:
    """Run ARM on ``cfg.instances`` random adversarial instances (Theorem ``arm-lb-thm``).

    Instance i draws, from its own seed derived from ``(cfg.seed, i)``: d in [d_min, d_max],
    k in [2, min(k_max, d - 1)], n in [k + 1, n_max], delta uniform on (0, 1/2], a head
    condition number log-uniform on [1, cond_max], a mean-head norm uniform on
    [0, mean_norm_max], a Gaussian B_0 of random scale, a small random w_0, T in [1, T_max]
    and beta a random fraction (``step_fraction``) of :func:`replearn.theory.lower_bound.stable_step`.
    """
    rows = [_draw_and_run(cfg, i) for i in range(cfg.instances)]
    cols = list(zip(*rows))
    ints = [torch.tensor(c) for c in (cols[0], cols[1], cols[2])]
    floats = [torch.tensor(c, dtype=DTYPE) for c in (cols[3], cols[4])]
    return LowerBoundSweepResult(*ints, *floats, torch.tensor(cols[5]),
                                 torch.tensor(cols[6], dtype=DTYPE), torch.tensor(cols[7], dtype=DTYPE))


# --------------------------------------------------------------------------- the explorer

def explorer_curves(delta: float, beta: float, T: int, cond: float, *, d: int = 20, k: int = 3,
                    n: int = 20, tau: int = 2, seed: int = 0) -> dict:
    """dist(B_t, B_*) for ARM and for FedAvg with ``tau`` local steps on one adversarial instance.

    The instance is :func:`replearn.theory.lower_bound.make_instance` (Gaussian B_0 with
    N(0, 1/d) entries, w_0 = 0, heads with condition number ``cond`` and a unit-norm mean,
    B_* from the construction of book 1.3, Theorem ``arm-lb-thm``). Both methods use the
    step size ``beta`` for ``T`` iterations (rounds). ARM's curve is constant at ``delta``.
    Returns numpy arrays ``{"iteration": (T + 1,), "ARM": (T + 1,), "FedAvg": (T + 1,)}``.
    Raises ValueError on bad input, and FedAvg's ValueError when its iterates diverge.
    """
    check_number(delta, "delta", low=0.0, high=1.0, low_open=True, high_open=True)
    check_positive(beta, "beta")
    check_number(cond, "cond (a condition number)", low=1.0)
    check_int(T, "T (iterations)", 1)
    inst = make_instance(d, k, n, delta, cond=cond, seed=seed)
    tasks = inst.tasks
    dist_arm = arm(inst.B0, inst.w0, tasks, beta=beta, iterations=T).dist(inst.Bstar)
    dist_fed = fedavg(inst.B0, inst.w0, tasks, alpha=beta, tau=tau, rounds=T).dist(inst.Bstar)
    return {"iteration": np.arange(T + 1), "ARM": to_numpy(dist_arm), "FedAvg": to_numpy(dist_fed)}


def draw_explorer(ax, curves: dict, delta: float) -> None:
    """Plot the curves of :func:`explorer_curves` on a log axis with the level delta."""
    floor = 1e-12  # FedAvg reaches machine precision; keep the log axis finite
    shown = {name: np.maximum(curves[name], floor) for name in ("ARM", "FedAvg")}
    plot_curves(ax, curves["iteration"], shown, logy=True, xlabel="iteration t",
                ylabel=r"dist$(B_t, B_*)$")
    ax.axhline(delta, color="k", lw=0.8, ls="--")
    ax.set_ylim(max(floor, 0.5 * float(shown["FedAvg"].min())), 1.5)


def explorer(**defaults):
    """An ipywidgets panel: sliders for delta, beta, T and the head condition number, and a
    plot of :func:`explorer_curves` (keyword ``defaults`` set the initial slider values)."""
    controls = {"delta": Slider(0.3, 0.05, 0.95, 0.05, "δ"), "beta": Slider(0.3, 0.05, 0.5, 0.05, "β"),
                "T": Slider(200, 10, 500, 10, "T", "int"), "cond": Slider(4.0, 0, 2, 0.1, "cond", "log")}
    return build_explorer(controls, lambda ax, v: draw_explorer(ax, explorer_curves(**v), v["delta"]),
                          defaults=defaults)
