"""Book 3.3: ARUBA as a framework (Khodak, Balcan and Talwalkar 2019, blog "Adaptive
gradient-based meta-learning", Reptile and the learned rate).

:func:`framework` compares Reptile's last-iterate target with the optimum target for the
learned initialisation (``target=`` of :func:`replearn.theory.aruba.meta_learn`), and ARUBA's learned
scalar rate (``rate="aruba_scalar"``) with the best fixed rate in hindsight
(:func:`replearn.theory.aruba.fixed_rate_sweep`). The joint convexity of U_t(phi, eta) for eta > 0 is
checked by :func:`replearn.theory.aruba.convexity_gaps`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from replearn.theory import aruba
from replearn.backend import DTYPE
from replearn.checks import check_int, check_nonnegative, check_positive, check_positives, check_sequence
from replearn.book.profiles import Settings


@dataclass(frozen=True)
class FrameworkSettings(Settings):
    """The least-squares task ``family`` (:class:`replearn.theory.aruba.TaskFamily`, as in 3.2) of the
    Reptile comparison; its ``spread`` is replaced by each value of ``spreads`` for the learned
    scalar rate; T tasks per run, ``runs`` independent sequences; the fixed within-task rates
    ``reptile_rates`` (0 stands for the single-task rate D/(G sqrt m)); the grid ``rates`` of
    fixed rates; ARUBA's ``smoothing`` (see :func:`replearn.theory.aruba.meta_learn`) and the seed."""

    family: aruba.TaskFamily = aruba.TaskFamily(m=40, spread=0.1)
    T: int = 300
    runs: int = 4
    spreads: tuple[float, ...] = (0.03, 0.1, 0.3)
    reptile_rates: tuple[float, ...] = (0.0, 0.5)
    rates: tuple[float, ...] = tuple(0.01 * 2 ** k for k in range(9))
    smoothing: float = 1e-4
    seed: int = 2

    @classmethod
    def paper(cls):
        """More tasks and runs."""
        return cls(T=1000, runs=10)

    def validate(self) -> None:
        super().validate()
        check_int(self.T, "T", 1)
        check_int(self.runs, "runs", 1)
        check_positives(self.spreads, "spreads")
        check_positives(self.rates, "rates")
        check_sequence(self.reptile_rates, "reptile_rates (0 = the single-task rate)", check_nonnegative)
        check_positive(self.smoothing, "smoothing")


@dataclass(frozen=True)
class FrameworkResult:
    """``reptile[(target, eta)]``: distance ||phi_t - phi*|| (T,) averaged over runs, for the
    targets "optimum" and "last_iterate" and each within-task rate; ``reptile_late`` the
    matching late regrets. Per spread of ``spreads`` (axis 0): ``V``, the learned scalar rate
    ``learned_rate`` (S, T) averaged over runs, late regrets of ARUBA's scalar rate
    (``aruba_late``), of every fixed rate of the grid (``grid_late`` (S, len(rates)), NaN where
    OGD diverged), of the worst-case oracle rate V/(G sqrt m) (``oracle_late``) and its value
    ``oracle_rate``."""

    reptile: dict
    reptile_late: dict
    V: torch.Tensor
    rates: torch.Tensor
    learned_rate: torch.Tensor
    aruba_late: torch.Tensor
    grid_late: torch.Tensor
    oracle_late: torch.Tensor
    oracle_rate: torch.Tensor

    def best_grid(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Best fixed rate of the grid per spread and its late regret, each (S,)."""
        values = self.grid_late.nan_to_num(math.inf)
        best, index = values.min(-1)
        return self.rates[index], best


def framework(cfg: FrameworkSettings) -> FrameworkResult:
    """Reptile vs follow-the-leader on the optima, and the learned scalar rate vs fixed rates."""
    fam = cfg.family
    tasks = aruba.sample_tasks(fam, cfg.T, runs=cfg.runs, seed=cfg.seed)
    reptile, reptile_late = {}, {}
    for eta in cfg.reptile_rates:
        rate = fam.single_task_rate() if eta == 0 else eta
        for target in aruba.TARGETS:
            run = aruba.meta_learn(tasks, init="learned", target=target, rate=rate)
            reptile[(target, eta)] = (run.init - fam.phi_star()).norm(dim=-1).mean(0)
            reptile_late[(target, eta)] = aruba.late_mean(run.regret)
    V, learned, aruba_late, grid, oracle_late, oracle_rate = [], [], [], [], [], []
    for index, spread in enumerate(cfg.spreads):
        fam = replace(cfg.family, spread=spread)
        tasks = aruba.sample_tasks(fam, cfg.T, runs=cfg.runs, seed=cfg.seed + 1 + index)
        run = aruba.meta_learn(tasks, init="learned", rate="aruba_scalar", smoothing=cfg.smoothing)
        learned.append(run.rate[..., 0].mean(0))
        aruba_late.append(aruba.late_mean(run.regret))
        grid.append(aruba.fixed_rate_sweep(tasks, cfg.rates))
        oracle_late.append(aruba.late_mean(aruba.meta_learn(tasks, init="learned", rate=fam.oracle_rate()).regret))
        oracle_rate.append(fam.oracle_rate())
        V.append(fam.V)
    as_t = lambda xs: torch.tensor(xs, dtype=DTYPE)  # noqa: E731
    return FrameworkResult(reptile=reptile, reptile_late=reptile_late, V=as_t(V), rates=as_t(cfg.rates),
                           learned_rate=torch.stack(learned), aruba_late=as_t(aruba_late),
                           grid_late=torch.stack(grid), oracle_late=as_t(oracle_late), oracle_rate=as_t(oracle_rate))
