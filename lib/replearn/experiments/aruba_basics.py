"""Single-task online learning, a meta-learned initialisation, and ARUBA's upper bounds
(book 3.1-3.3; Khodak, Balcan and Talwalkar 2019, blog "Adaptive gradient-based
meta-learning").

Three drivers, one per section, all built on :mod:`replearn.aruba`:

- :func:`single_task` (3.1): online gradient descent (OGD) from phi = 0 with the single-task
  rate eta = D/(G sqrt m) on tasks with m rounds, for a grid of m. It records the regret R_t,
  the sharp OGD bound ||phi - u||^2/(2 eta) + (eta/2) sum_i ||g_i||^2 (blog, first bound, with
  the constant 1/2 of the textbook proof), the library's U_t (gradient term doubled, as in the
  blog) and the worst-case level D G sqrt m. :func:`rademacher_regret` runs OGD on the random
  sign sequences of the Omega(D G sqrt m) lower bound.
- :func:`meta_init` (3.2): the task-averaged regret R-bar_t of OGD whose initialisation is
  learned by follow-the-leader on U_t (the running mean of the optima theta*_t), for several task
  similarities V, against single-task OGD; a sweep over fixed rates eta; and the bound
  R-bar_T <= 4 D^2 (1 + ln T)/(eta T) + V^2/(2 eta) + eta G^2 m / 2 of book 3.2.
- :func:`framework` (3.3): Reptile's last-iterate target against the optimum target, and
  ARUBA's learned scalar rate (``rate="aruba_scalar"``) against the best fixed rate in hindsight;
  :func:`convexity_gaps` checks that U_t(phi, eta) is jointly convex for eta > 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .. import aruba
from ..backend import DTYPE, make_generator
from ..checks import (check_int, check_ints, check_nonnegative, check_number, check_positive, check_positives,
                      check_sequence)
from ..profiles import Settings


def late_mean(regret: torch.Tensor) -> float:
    """Mean within-task regret over the second half of the tasks and over runs (the level a
    meta-learner settles at), from a (runs, T) tensor."""
    return float(regret[:, regret.shape[1] // 2:].mean())


# --------------------------------------------------------------------------------------------
# 3.1 single-task online learning


@dataclass(frozen=True)
class SingleTaskSettings(Settings):
    """Dimension d, the grid ``ms`` of task lengths, ``tasks`` x ``runs`` independent tasks per
    m, ball radius D, per-coordinate spread and label noise of the task family, the number of
    random sign sequences for the lower bound, and the seed."""

    d: int = 10
    ms: tuple[int, ...] = (10, 20, 40, 80, 160, 320, 640)
    tasks: int = 25
    runs: int = 4
    radius: float = 10.0
    spread: float = 0.3
    noise: float = 0.1
    sign_runs: int = 400
    seed: int = 0

    @classmethod
    def paper(cls):
        """Longer tasks and more repetitions (the blog states these rates without an experiment)."""
        return cls(ms=(10, 20, 40, 80, 160, 320, 640, 1280, 2560), tasks=50, sign_runs=2000)

    def validate(self) -> None:
        super().validate()
        for name in ("d", "tasks", "runs", "sign_runs"):
            check_int(getattr(self, name), name, 1)
        check_ints(self.ms, "ms")
        check_positive(self.radius, "radius")
        check_nonnegative(self.spread, "spread")
        check_nonnegative(self.noise, "noise")


@dataclass(frozen=True)
class SingleTaskResult:
    """Per m (axis 0) and per task (axis 1, ``tasks * runs`` of them): the regret ``regret``
    against the comparator, the sharp OGD bound ``sharp``, the library's ``U`` (gradient term
    doubled) and the worst-case level ``worst`` = ||phi - u||^2/(2 eta) + (eta/2) G^2 m;
    ``G`` and ``D`` of the family, the rates ``eta`` (M,) and ``ms`` (M,)."""

    ms: torch.Tensor
    eta: torch.Tensor
    regret: torch.Tensor
    sharp: torch.Tensor
    U: torch.Tensor
    worst: torch.Tensor
    G: float
    D: float


def single_task(cfg: SingleTaskSettings, loss: str = "absolute") -> SingleTaskResult:
    """OGD from phi = 0 with eta = D/(G sqrt m) on fresh tasks of every length m in ``cfg.ms``.

    The comparator u is the library's theta*_t: the exact hindsight minimiser over the ball for
    the squared loss, the generating parameter for the absolute and logistic losses (a fixed
    point of the ball; the OGD bound holds for every such u).
    """
    rows = {key: [] for key in ("regret", "sharp", "U", "worst")}
    etas = []
    fam = None
    for index, m in enumerate(cfg.ms):
        fam = aruba.TaskFamily(d=cfg.d, m=m, radius=cfg.radius, spread=cfg.spread, noise=cfg.noise, loss=loss)
        tasks = aruba.sample_tasks(fam, cfg.tasks, runs=cfg.runs, seed=cfg.seed + index)
        eta = fam.single_task_rate()
        phi = torch.zeros_like(tasks.theta_star)
        run = aruba.ogd(tasks.X, tasks.y, phi, eta, loss=loss, radius=fam.radius)
        distance = tasks.theta_star.pow(2).sum(-1) / (2 * eta)
        rows["regret"].append(aruba.regret(tasks.X, tasks.y, run.losses, tasks.theta_star, loss).flatten())
        rows["sharp"].append((distance + 0.5 * eta * run.grad_sq.sum(-1)).flatten())
        rows["U"].append(aruba.regret_upper_bound(phi, tasks.theta_star, eta, grad_sq=run.grad_sq).flatten())
        rows["worst"].append((distance + 0.5 * eta * fam.G ** 2 * m).flatten())
        etas.append(eta)
    return SingleTaskResult(ms=torch.tensor(cfg.ms, dtype=DTYPE), eta=torch.tensor(etas, dtype=DTYPE),
                            G=fam.G, D=fam.radius, **{k: torch.stack(v) for k, v in rows.items()})


def rademacher_regret(m: int, radius: float, runs: int, *, seed: int = 0) -> torch.Tensor:
    """Regret of OGD (eta = D/sqrt m, G = 1) on ``runs`` random sign sequences, shape (runs,).

    Round i has the linear loss eps_i * theta on Theta = [-D, D] with eps_i = +-1 fair coin
    flips, written as the absolute loss |theta - y_i| with y_i = -eps_i M and M > D (on Theta it
    equals eps_i theta + M, and the constant M cancels in the regret). The best point in
    hindsight is -D sign(sum_i eps_i), so the regret is sum_i eps_i theta_i + D |sum_i eps_i|.
    """
    check_int(m, "m", 1)
    check_int(runs, "runs", 1)
    check_positive(radius, "radius")
    gen = make_generator(seed)
    eps = torch.where(torch.rand(runs, m, generator=gen, dtype=DTYPE) < 0.5, -1.0, 1.0).to(DTYPE)
    X = torch.ones(runs, m, 1, dtype=DTYPE)
    y = -eps * (2 * radius + 1)
    run = aruba.ogd(X, y, torch.zeros(runs, 1, dtype=DTYPE), radius / math.sqrt(m), loss="absolute",
                    radius=radius)
    best = -radius * torch.sign(eps.sum(-1, keepdim=True))
    return aruba.regret(X, y, run.losses, best, "absolute")


def expected_abs_walk(m: int) -> float:
    """E|eps_1 + ... + eps_m| for fair signs, exactly (binomial sum)."""
    check_int(m, "m", 1)
    return sum(math.comb(m, k) * abs(2 * k - m) for k in range(m + 1)) / 2 ** m


# --------------------------------------------------------------------------------------------
# 3.2 meta-learning the initialisation


@dataclass(frozen=True)
class MetaInitSettings(Settings):
    """Least-squares task families in dimension d with m rounds per task, T tasks per run,
    ``runs`` independent sequences, optima spread ``spreads`` per coordinate around phi*
    (so V = spread sqrt(d)), the grid ``rates`` of fixed rates for the sweep, and the seed."""

    d: int = 10
    m: int = 40
    T: int = 200
    runs: int = 4
    radius: float = 10.0
    center_norm: float = 3.0
    noise: float = 0.1
    spreads: tuple[float, ...] = (0.03, 0.1, 0.3, 0.6, 1.0)
    rates: tuple[float, ...] = tuple(0.0005 * 2 ** k for k in range(13))
    seed: int = 1

    @classmethod
    def paper(cls):
        """More tasks and runs."""
        return cls(T=1000, runs=10)

    def validate(self) -> None:
        super().validate()
        _validate_family(self)
        check_positives(self.spreads, "spreads")
        check_positives(self.rates, "rates")

    def family(self, spread: float) -> aruba.TaskFamily:
        return aruba.TaskFamily(d=self.d, m=self.m, radius=self.radius, center_norm=self.center_norm,
                                spread=spread, noise=self.noise)


def _validate_family(cfg) -> None:
    """Checks shared by the settings of 3.2 and 3.3 (a least-squares family, T tasks, runs)."""
    for name in ("d", "m", "T", "runs"):
        check_int(getattr(cfg, name), name, 1)
    check_positive(cfg.radius, "radius")
    check_number(cfg.center_norm, "center_norm (phi* must lie inside the ball)", low=0.0, high=cfg.radius,
                 high_open=True)
    check_nonnegative(cfg.noise, "noise")


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


def ftl_meta_regret(init: torch.Tensor, theta_star: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Meta-level regret of the initialisations on the distance terms and its bound (book 3.2).

    With f_t(phi) = ||phi - theta*_t||^2 (the first term of U_t times 2 eta), returns
    sum_t f_t(phi_t) - min_phi sum_t f_t(phi) and the follow-the-leader bound
    sum_t 2 ||phi_t - theta*_t||^2 / t, both of shape (runs,), from init (runs, T, d) and
    theta_star (runs, T, d).
    """
    if init.shape != theta_star.shape or init.ndim != 3:
        raise ValueError(f"init and theta_star must both be (runs, T, d), got {tuple(init.shape)} "
                         f"and {tuple(theta_star.shape)}")
    f = (init - theta_star).pow(2).sum(-1)
    best = (theta_star - theta_star.mean(1, keepdim=True)).pow(2).sum(-1).sum(-1)
    t = torch.arange(1, init.shape[1] + 1, dtype=init.dtype, device=init.device)
    return f.sum(-1) - best, (2 * f / t).sum(-1)


def theorem_bound(D: float, G: float, m: int, T: int, V: float, eta: float) -> float:
    """R-bar_T <= 4 D^2 (1 + ln T)/(eta T) + V^2/(2 eta) + eta G^2 m / 2 (book 3.2)."""
    for value, name in ((D, "D"), (G, "G"), (eta, "eta")):
        check_positive(value, name)
    check_int(m, "m", 1)
    check_int(T, "T", 1)
    check_nonnegative(V, "V")
    return 4 * D ** 2 * (1 + math.log(T)) / (eta * T) + V ** 2 / (2 * eta) + eta * G ** 2 * m / 2


def meta_init(cfg: MetaInitSettings) -> MetaInitResult:
    """Run single-task OGD and the learned initialisation for every spread of ``cfg``."""
    names = ("single", "theorem", "learned_single_rate")
    rbar = {k: [] for k in names}
    late = {k: [] for k in names}
    V, V_hat, sweep, bound, dist, meta_r, meta_b = [], [], [], [], [], [], []
    gap = 0.0
    for index, spread in enumerate(cfg.spreads):
        fam = cfg.family(spread)
        tasks = aruba.sample_tasks(fam, cfg.T, runs=cfg.runs, seed=cfg.seed + index)
        runs = {"single": aruba.single_task_ogd(tasks),
                "theorem": aruba.meta_learn(tasks, init="learned", rate=fam.oracle_rate()),
                "learned_single_rate": aruba.meta_learn(tasks, init="learned", rate=fam.single_task_rate())}
        for k, r in runs.items():
            rbar[k].append(r.task_averaged().mean(0))
            late[k].append(late_mean(r.regret))
        row = []
        for eta in cfg.rates:
            try:
                row.append(late_mean(aruba.meta_learn(tasks, init="learned", rate=eta).regret))
            except ValueError:  # OGD diverged: this rate is beyond the stability limit
                row.append(math.nan)
        sweep.append(row)
        v_hat = aruba.task_similarity(tasks.theta_star)
        V.append(fam.V)
        V_hat.append(float(v_hat.mean()))
        bound.append(sum(theorem_bound(fam.radius, fam.G, fam.m, cfg.T, float(v), fam.oracle_rate())
                         for v in v_hat) / cfg.runs)
        theorem = runs["theorem"]
        dist.append((theorem.init - fam.phi_star()).norm(dim=-1).mean(0))
        gap = max(gap, float((theorem.final_init - tasks.theta_star.mean(1)).abs().max()))
        r, b = ftl_meta_regret(theorem.init, tasks.theta_star)
        meta_r.append(float(r.mean()))
        meta_b.append(float(b.mean()))
    fam = cfg.family(cfg.spreads[0])
    as_t = lambda xs: torch.tensor(xs, dtype=DTYPE)  # noqa: E731
    return MetaInitResult(V=as_t(V), V_hat=as_t(V_hat), rbar={k: torch.stack(v) for k, v in rbar.items()},
                          late={k: as_t(v) for k, v in late.items()}, rates=as_t(cfg.rates), sweep=as_t(sweep),
                          bound=as_t(bound), init_distance=torch.stack(dist), mean_gap=gap,
                          meta_regret=as_t(meta_r), meta_bound=as_t(meta_b), G=fam.G, D=fam.radius)


# --------------------------------------------------------------------------------------------
# 3.3 ARUBA as a framework


def convexity_gaps(pairs: int = 2000, d: int = 5, *, per_coordinate: bool = True, seed: int = 0) -> torch.Tensor:
    """Midpoint gaps (U(a) + U(b))/2 - U((a + b)/2) of U_t(phi, eta) along random segments
    between points a = (phi, eta), b = (phi', eta') with eta, eta' > 0, for a fixed task
    (theta*, sum of squared gradients); non-negative up to rounding iff U_t is midpoint convex
    on the sampled segments. Shape (pairs,)."""
    check_int(pairs, "pairs", 1)
    check_int(d, "d", 1)
    gen = make_generator(seed)
    width = d if per_coordinate else 1
    theta_star = torch.randn(pairs, d, generator=gen, dtype=DTYPE)
    grad_sq = torch.rand(pairs, d, generator=gen, dtype=DTYPE) * 5
    phi_a, phi_b = (torch.randn(pairs, d, generator=gen, dtype=DTYPE) * 3 for _ in range(2))
    eta_a, eta_b = (torch.exp(4 * torch.randn(pairs, width, generator=gen, dtype=DTYPE)) for _ in range(2))

    def U(phi, eta):
        return aruba.regret_upper_bound(phi, theta_star, eta, grad_sq=grad_sq)

    scale = 1 + U(phi_a, eta_a).abs() + U(phi_b, eta_b).abs()
    return ((U(phi_a, eta_a) + U(phi_b, eta_b)) / 2 - U((phi_a + phi_b) / 2, (eta_a + eta_b) / 2)) / scale


@dataclass(frozen=True)
class FrameworkSettings(Settings):
    """Least-squares families as in 3.2 (d, m, T, runs); ``spread`` for the Reptile comparison
    and ``spreads`` for the learned scalar rate; the fixed within-task rates ``reptile_rates``
    (0 stands for the single-task rate D/(G sqrt m)); the grid ``rates`` of fixed rates; ARUBA's
    ``smoothing`` (see :func:`replearn.aruba.meta_learn`) and the seed."""

    d: int = 10
    m: int = 40
    T: int = 300
    runs: int = 4
    radius: float = 10.0
    center_norm: float = 3.0
    noise: float = 0.1
    spread: float = 0.1
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
        _validate_family(self)
        check_positive(self.spread, "spread")
        check_positives(self.spreads, "spreads")
        check_positives(self.rates, "rates")
        check_sequence(self.reptile_rates, "reptile_rates (0 = the single-task rate)", check_nonnegative)
        check_positive(self.smoothing, "smoothing")

    def family(self, spread: float) -> aruba.TaskFamily:
        return aruba.TaskFamily(d=self.d, m=self.m, radius=self.radius, center_norm=self.center_norm,
                                spread=spread, noise=self.noise)


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
    fam = cfg.family(cfg.spread)
    tasks = aruba.sample_tasks(fam, cfg.T, runs=cfg.runs, seed=cfg.seed)
    reptile, reptile_late = {}, {}
    for eta in cfg.reptile_rates:
        rate = fam.single_task_rate() if eta == 0 else eta
        for target in aruba.TARGETS:
            run = aruba.meta_learn(tasks, init="learned", target=target, rate=rate)
            reptile[(target, eta)] = (run.init - fam.phi_star()).norm(dim=-1).mean(0)
            reptile_late[(target, eta)] = late_mean(run.regret)
    V, learned, aruba_late, grid, oracle_late, oracle_rate = [], [], [], [], [], []
    for index, spread in enumerate(cfg.spreads):
        fam = cfg.family(spread)
        tasks = aruba.sample_tasks(fam, cfg.T, runs=cfg.runs, seed=cfg.seed + 1 + index)
        run = aruba.meta_learn(tasks, init="learned", rate="aruba_scalar", smoothing=cfg.smoothing)
        learned.append(run.rate[..., 0].mean(0))
        aruba_late.append(late_mean(run.regret))
        row = []
        for eta in cfg.rates:
            try:
                row.append(late_mean(aruba.meta_learn(tasks, init="learned", rate=eta).regret))
            except ValueError:  # OGD diverged
                row.append(math.nan)
        grid.append(row)
        oracle_late.append(late_mean(aruba.meta_learn(tasks, init="learned", rate=fam.oracle_rate()).regret))
        oracle_rate.append(fam.oracle_rate())
        V.append(fam.V)
    as_t = lambda xs: torch.tensor(xs, dtype=DTYPE)  # noqa: E731
    return FrameworkResult(reptile=reptile, reptile_late=reptile_late, V=as_t(V), rates=as_t(cfg.rates),
                           learned_rate=torch.stack(learned), aruba_late=as_t(aruba_late), grid_late=as_t(grid),
                           oracle_late=as_t(oracle_late), oracle_rate=as_t(oracle_rate))
