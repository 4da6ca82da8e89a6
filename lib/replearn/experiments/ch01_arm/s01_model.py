"""Book 1.1: a new task needs O(k) samples once col(B_*) is known and Omega(d) without (the
remark of Collins et al. 2022 and Tripuraneni et al. 2021; book 1.1, Proposition ``arm-model-prop-ls``).

A new task of the multi-task linear representation model has ``x ~ N(0, I_d)`` and
``y = <theta_*, x> + z`` with ``theta_* = B_* w_*``, ``z ~ N(0, sigma^2)``. We compare two
estimators fitted on ``m`` samples:

- **known representation**: least squares of ``y`` on the ``k`` features ``B_*^T x``,
  ``theta_hat = B_* w_hat`` (a ``k``-dimensional regression);
- **from scratch**: minimum-norm least squares of ``y`` on ``x`` in ``R^d``.

Both are instances of minimum-norm least squares in dimension ``p`` with Gaussian design,
whose expected parameter error has the closed form of :func:`replearn.theory.linear.expected_ls_error`:

    E ||theta_hat - theta||^2 = sigma^2 p / (m - p - 1)                        (m >= p + 2)
    E ||theta_hat - theta||^2 = (1 - m/p) ||theta||^2 + sigma^2 m / (p - m - 1)  (m <= p - 2)

with ``p = k`` for the known representation and ``p = d`` from scratch. :func:`run` estimates
both errors by Monte Carlo (:func:`replearn.theory.few_shot.new_task_errors`, vectorised over trials);
the smallest m reaching a target error is :func:`replearn.theory.linear.samples_to_reach`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated

import torch

from replearn.backend import DTYPE, default_device, derive_seed, make_generator, randn
from replearn.theory.few_shot import KNOWN, SCRATCH, new_task_errors
from replearn.theory.linear import expected_ls_error, ground_truth_representation
from replearn.settings import Each, Ge, Profile, Settings

METHODS = (KNOWN, SCRATCH)


@dataclass(frozen=True)
class SampleComplexitySettings(Settings):
    """Monte-Carlo settings: dimension ``d``, representation size ``k``, noise level,
    the grid of sample sizes ``ms``, the number of independent trials per sample size,
    how many trials are solved in one batched call, and the seed."""

    WORDS = {"ms": "sample sizes m"}

    d: Annotated[int, Ge(1)] = 50
    k: Annotated[int, Ge(1)] = 5
    noise_std: Annotated[float, Ge(0)] = 0.3
    ms: Annotated[tuple[int, ...], Each(Ge(1), entry="every m in ms (samples of the new task)")] = (
        10, 15, 20, 30, 40, 44, 56, 60, 80, 100, 150, 200)
    trials: Annotated[int, Ge(1)] = 1000
    batch: Annotated[int, Ge(1)] = 500
    seed: int = 0

    PAPER = Profile({"d": 200, "k": 10,
                     "ms": (20, 30, 40, 60, 80, 120, 160, 190, 210, 250, 300, 400, 600, 800), "trials": 4000,
                     "batch": 1000},
                    doc="A larger instance (the papers state this comparison without an experiment).")

    def validate(self) -> None:
        """The relation between the fields (each field's own range is beside it): k <= d."""
        super().validate()
        if self.k > self.d:
            raise ValueError(f"k = {self.k} > d = {self.d}: the representation cannot have more columns "
                             "than dimensions")


@dataclass(frozen=True)
class SampleComplexityResult:
    """Per-trial squared parameter errors ``errors[method]`` (M, trials) at the sample sizes
    ``ms`` (M,), and the closed-form expectations ``theory[method]`` (M,)."""

    ms: torch.Tensor
    errors: dict
    theory: dict

    def mean(self, method: str) -> torch.Tensor:
        """Monte-Carlo average of the error at every m, shape (M,)."""
        return self.errors[method].mean(-1)

    def sem(self, method: str) -> torch.Tensor:
        """Standard error of :meth:`mean` (sample std / sqrt(trials)), shape (M,)."""
        e = self.errors[method]
        return e.std(-1) / math.sqrt(e.shape[-1])

    def z_scores(self, method: str) -> torch.Tensor:
        """(average - theory) / standard error; 0 where both the gap and the error are ~0."""
        gap = self.mean(method) - self.theory[method]
        sem = self.sem(method)
        return torch.where(gap.abs() < 1e-12, torch.zeros_like(gap), gap / sem)


def run(cfg: SampleComplexitySettings, device=None) -> SampleComplexityResult:
    """Monte-Carlo errors of both estimators at every m in ``cfg.ms``, with the closed forms.

    The new task has a Haar-random ``B_*`` and a unit-norm head ``w_*`` drawn from
    ``cfg.seed`` (so ``||theta_*|| = 1``); each sample size gets its own seed derived from
    ``(cfg.seed, m)``. Implements the comparison of book 1.1, Proposition ``arm-model-prop-ls``.
    """
    device = default_device() if device is None else torch.device(device)
    gen = make_generator(cfg.seed)
    Bstar = ground_truth_representation(cfg.d, cfg.k, gen).to(device)
    w_star = randn(cfg.k, generator=gen)
    w_star = (w_star / w_star.norm()).to(device)
    per_m = [new_task_errors(Bstar, w_star, m, noise_std=cfg.noise_std, trials=cfg.trials,
                             seed=derive_seed(cfg.seed, m), batch=cfg.batch) for m in cfg.ms]
    errors = {name: torch.stack([e[name] for e in per_m]).cpu() for name in METHODS}
    var = cfg.noise_std**2
    dims = {KNOWN: cfg.k, SCRATCH: cfg.d}
    theory = {name: torch.tensor([expected_ls_error(m, dims[name], var) for m in cfg.ms], dtype=DTYPE)
              for name in METHODS}
    return SampleComplexityResult(torch.tensor(cfg.ms), errors, theory)


def plot_tilts(phis, d_one, d_two, frob):
    """The distance of two families of planes tilted by ``phis`` out of a fixed plane S0 (one
    direction tilted: ``d_one``; both: ``d_two``) against ``sin phi``, with the Frobenius
    distance of the projectors (``frob``, both tilted). Returns the figure."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.0, 3.2))
    ax.plot(phis, d_one, "o", ms=4, label="dist, one tilt")
    ax.plot(phis, d_two, "x", ms=5, label="dist, two tilts")
    ax.plot(phis, torch.sin(phis), "k--", lw=1, label=r"$\sin\varphi$")
    ax.plot(phis, frob, ":", color="gray", label=r"$\|P_0 - P_\varphi\|_F/\sqrt{2}$, two tilts")
    ax.set(xlabel=r"tilt angle $\varphi$", ylabel="distance to $S_0$", xticks=[0, math.pi / 2, math.pi],
           xticklabels=["0", "π/2", "π"])
    ax.legend(loc="lower center")
    return fig
