"""The measurements and bounds of book 3.1-3.3: the late-half mean regret (:func:`late_mean`)
and the fixed-rate grid (:func:`fixed_rate_sweep`); OGD's regret on random signs
(:func:`rademacher_regret`) and its mean (:func:`expected_abs_walk`), the Omega(D G sqrt m)
lower bound; the meta-regret of the follow-the-leader initialisations (:func:`ftl_meta_regret`)
and the average-regret theorem (:func:`average_regret_bound`); and the midpoint convexity of
U_t in (phi, eta) (:func:`convexity_gaps`)."""

from __future__ import annotations

import math

import torch

from replearn.backend import DTYPE, SeedLike, make_generator
from replearn.checks import check_count, check_int, check_nonnegative, check_positive
from replearn.theory.aruba.meta_learning import meta_learn
from replearn.theory.aruba.online import ogd, regret, regret_upper_bound
from replearn.theory.aruba.tasks import OnlineTasks

__all__ = ["average_regret_bound", "convexity_gaps", "expected_abs_walk", "fixed_rate_sweep",
           "ftl_meta_regret", "late_mean", "rademacher_regret"]


def late_mean(regret: torch.Tensor) -> float:
    """Mean within-task regret over the second half of the tasks and over runs (the level a
    meta-learner settles at), from a (runs, T) tensor."""
    return float(regret[:, regret.shape[1] // 2:].mean())


def fixed_rate_sweep(tasks: OnlineTasks, rates, *, init: str = "learned") -> torch.Tensor:
    """:func:`late_mean` of :func:`~replearn.theory.aruba.meta_learn` with each fixed rate of
    ``rates`` (and ``init``), NaN where OGD diverged (a rate beyond the stability limit), shape
    (len(rates),)."""
    row = []
    for eta in rates:
        try:
            row.append(late_mean(meta_learn(tasks, init=init, rate=eta).regret))
        except ValueError:  # OGD diverged: this rate is beyond the stability limit
            row.append(math.nan)
    return torch.tensor(row, dtype=DTYPE)


def rademacher_regret(m: int, radius: float, runs: int, *, seed: SeedLike = 0) -> torch.Tensor:
    """Regret of OGD (eta = D/sqrt m, G = 1) on ``runs`` random sign sequences, shape (runs,).

    Round i has the linear loss eps_i * theta on Theta = [-D, D] with eps_i = +-1 fair coin
    flips, written as the absolute loss |theta - y_i| with y_i = -eps_i M and M > D (on Theta it
    equals eps_i theta + M, and the constant M cancels in the regret). The best point in
    hindsight is -D sign(sum_i eps_i), so the regret is sum_i eps_i theta_i + D |sum_i eps_i|.
    Its mean is D E|eps_1 + ... + eps_m| (:func:`expected_abs_walk`), the Omega(D G sqrt m)
    lower bound of book 3.1.
    """
    check_count(m, "m", 1)
    check_count(runs, "runs", 1)
    check_positive(radius, "radius")
    gen = make_generator(seed)
    eps = torch.where(torch.rand(runs, m, generator=gen, dtype=DTYPE) < 0.5, -1.0, 1.0).to(DTYPE)
    X = torch.ones(runs, m, 1, dtype=DTYPE)
    y = -eps * (2 * radius + 1)
    run = ogd(X, y, torch.zeros(runs, 1, dtype=DTYPE), radius / math.sqrt(m), loss="absolute", radius=radius)
    best = -radius * torch.sign(eps.sum(-1, keepdim=True))
    return regret(X, y, run.losses, best, "absolute")


def expected_abs_walk(m: int) -> float:
    """E|eps_1 + ... + eps_m| for fair signs, exactly (binomial sum)."""
    check_int(m, "m", 1)
    return sum(math.comb(m, k) * abs(2 * k - m) for k in range(m + 1)) / 2 ** m


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


def average_regret_bound(D: float, G: float, m: int, T: int, V: float, eta: float) -> float:
    """The theorem of book 3.2 for OGD from the follow-the-leader initialisation with a fixed
    rate eta: R-bar_T <= 4 D^2 (1 + ln T)/(eta T) + V^2/(2 eta) + eta G^2 m / 2."""
    for value, name in ((D, "D"), (G, "G"), (eta, "eta")):
        check_positive(value, name)
    check_int(m, "m", 1)
    check_int(T, "T", 1)
    check_nonnegative(V, "V")
    return 4 * D ** 2 * (1 + math.log(T)) / (eta * T) + V ** 2 / (2 * eta) + eta * G ** 2 * m / 2


def convexity_gaps(pairs: int = 2000, d: int = 5, *, per_coordinate: bool = True,
                   seed: SeedLike = 0) -> torch.Tensor:
    """Midpoint gaps (U(a) + U(b))/2 - U((a + b)/2) of U_t(phi, eta) along random segments
    between points a = (phi, eta), b = (phi', eta') with eta, eta' > 0, for a fixed task
    (theta*, sum of squared gradients), relative to 1 + |U(a)| + |U(b)|; non-negative up to
    rounding iff U_t is midpoint convex on the sampled segments (book 3.3). Shape (pairs,)."""
    check_count(pairs, "pairs", 1)
    check_count(d, "d", 1)
    gen = make_generator(seed)
    width = d if per_coordinate else 1
    theta_star = torch.randn(pairs, d, generator=gen, dtype=DTYPE)
    grad_sq = torch.rand(pairs, d, generator=gen, dtype=DTYPE) * 5
    phi_a, phi_b = (torch.randn(pairs, d, generator=gen, dtype=DTYPE) * 3 for _ in range(2))
    eta_a, eta_b = (torch.exp(4 * torch.randn(pairs, width, generator=gen, dtype=DTYPE)) for _ in range(2))

    def U(phi, eta):
        return regret_upper_bound(phi, theta_star, eta, grad_sq=grad_sq)

    scale = 1 + U(phi_a, eta_a).abs() + U(phi_b, eta_b).abs()
    return ((U(phi_a, eta_a) + U(phi_b, eta_b)) / 2 - U((phi_a + phi_b) / 2, (eta_a + eta_b) / 2)) / scale
