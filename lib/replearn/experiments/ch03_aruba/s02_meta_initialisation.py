"""Book 3.2: meta-learning the initialisation (Khodak, Balcan and Talwalkar 2019, blog
"Adaptive gradient-based meta-learning", the bound in the task similarity V).

:func:`meta_init` runs, for several task similarities V, OGD whose initialisation is learned by
follow-the-leader on U_t (the running mean of the optima theta*_t;
:func:`replearn.theory.aruba.meta_learn`) against single-task OGD; a sweep over fixed rates eta
(:func:`replearn.theory.aruba.fixed_rate_sweep`); the bound
R-bar_T <= 4 D^2 (1 + ln T)/(eta T) + V^2/(2 eta) + eta G^2 m / 2
(:func:`replearn.theory.aruba.average_regret_bound`) and the meta-level regret of follow-the-leader
(:func:`replearn.theory.aruba.ftl_meta_regret`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from replearn.theory import aruba
from replearn.backend import DTYPE
from replearn.checks import check_int, check_positives
from replearn.book.profiles import Settings


@dataclass(frozen=True)
class MetaInitSettings(Settings):
    """The least-squares task ``family`` (:class:`replearn.theory.aruba.TaskFamily`: dimension d, m
    rounds per task, ball radius, ||phi*||, label noise; its ``spread`` is replaced by each value
    of ``spreads``, so V = spread sqrt(d)), T tasks per run, ``runs`` independent sequences, the
    grid ``rates`` of fixed rates for the sweep, and the seed."""

    family: aruba.TaskFamily = aruba.TaskFamily(m=40)
    T: int = 200
    runs: int = 4
    spreads: tuple[float, ...] = (0.03, 0.1, 0.3, 0.6, 1.0)
    rates: tuple[float, ...] = tuple(0.0005 * 2 ** k for k in range(13))
    seed: int = 1

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


@dataclass(frozen=True)
class MetaInitResult:
    """Per spread (axis 0): the family's ``V``, the empirical ``V_hat`` of the optima (runs
    averaged), R-bar_t curves (S, T) averaged over runs for ``single`` (fixed phi = 0, eta =
    D/(G sqrt m)), ``theorem`` (learned phi, eta = V/(G sqrt m)) and ``learned_single_rate``
    (learned phi, eta = D/(G sqrt m)); late-half mean regrets ``late[name]`` (S,); the
    ``sweep`` (S, len(rates)) of late regrets with learned phi and fixed eta (NaN where OGD
    diverged); the theorem's bound on R-bar_T per spread; the distance of phi_t to phi* (S, T);
    the largest gap between phi_{T+1} and the mean of the optima; and the meta-level regret of
    FTL on the distance terms with its bound (S,)."""

    V: torch.Tensor
    V_hat: torch.Tensor
    rbar: dict
    late: dict
    rates: torch.Tensor
    sweep: torch.Tensor
    bound: torch.Tensor
    init_distance: torch.Tensor
    mean_gap: float
    meta_regret: torch.Tensor
    meta_bound: torch.Tensor
    G: float
    D: float


def meta_init(cfg: MetaInitSettings) -> MetaInitResult:
    """Run single-task OGD and the learned initialisation for every spread of ``cfg``."""
    names = ("single", "theorem", "learned_single_rate")
    rbar = {k: [] for k in names}
    late = {k: [] for k in names}
    V, V_hat, sweep, bound, dist, meta_r, meta_b = [], [], [], [], [], [], []
    gap = 0.0
    for index, spread in enumerate(cfg.spreads):
        fam = replace(cfg.family, spread=spread)
        tasks = aruba.sample_tasks(fam, cfg.T, runs=cfg.runs, seed=cfg.seed + index)
        runs = {"single": aruba.single_task_ogd(tasks),
                "theorem": aruba.meta_learn(tasks, init="learned", rate=fam.oracle_rate()),
                "learned_single_rate": aruba.meta_learn(tasks, init="learned", rate=fam.single_task_rate())}
        for k, r in runs.items():
            rbar[k].append(r.task_averaged().mean(0))
            late[k].append(aruba.late_mean(r.regret))
        sweep.append(aruba.fixed_rate_sweep(tasks, cfg.rates))
        v_hat = aruba.task_similarity(tasks.theta_star)
        V.append(fam.V)
        V_hat.append(float(v_hat.mean()))
        bound.append(sum(aruba.average_regret_bound(fam.radius, fam.G, fam.m, cfg.T, float(v), fam.oracle_rate())
                         for v in v_hat) / cfg.runs)
        theorem = runs["theorem"]
        dist.append((theorem.init - fam.phi_star()).norm(dim=-1).mean(0))
        gap = max(gap, float((theorem.final_init - tasks.theta_star.mean(1)).abs().max()))
        r, b = aruba.ftl_meta_regret(theorem.init, tasks.theta_star)
        meta_r.append(float(r.mean()))
        meta_b.append(float(b.mean()))
    as_t = lambda xs: torch.tensor(xs, dtype=DTYPE)  # noqa: E731
    return MetaInitResult(V=as_t(V), V_hat=as_t(V_hat), rbar={k: torch.stack(v) for k, v in rbar.items()},
                          late={k: as_t(v) for k, v in late.items()}, rates=as_t(cfg.rates),
                          sweep=torch.stack(sweep), bound=as_t(bound), init_distance=torch.stack(dist),
                          mean_gap=gap, meta_regret=as_t(meta_r), meta_bound=as_t(meta_b), G=cfg.family.G,
                          D=cfg.family.radius)
