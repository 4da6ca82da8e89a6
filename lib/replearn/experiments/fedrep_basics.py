"""FedRep in the linear model: personalisation, the algorithm and its theory (book 5.1-5.3).

Collins, Hassani, Mokhtari and Shakkottai (ICML 2021) study n clients with samples
``x ~ N(0, I_d)``, ``y = <B_* w_*_i, x> + noise``. This module holds the experiments of the
first three sections of chapter 5, all built on :mod:`replearn.fedrep`:

- :func:`run_personalisation` (5.1): the single shared regressor that minimises the pooled
  objective (4) has the global error (1/2n) sum_i ||theta_*_i - theta_bar_*||^2, which grows
  with the spread of the heads, while the personalised objective (3) has minimum zero;
  local-only least squares needs m >= d samples per client.
- :func:`run_moments` and :func:`expected_moment_matrix` (5.2): the method-of-moments
  initialisation of Algorithm 2, E[y^2 x x^T] = (||theta||^2 + sigma^2) I + 2 theta theta^T,
  and the distance of its estimate from col(B_*) as the number of clients n and samples m grow;
  :func:`run_trajectory`: one FedRep run from the method-of-moments start and from a random one.
- :func:`run_rates` (5.3): measured per-round contraction of dist(B_t, B_*) against the factor
  (1 - eta E_0 sigma_min^2 / 2)^(1/2) of Theorem 1 and the first-order factor 1 - eta sigma_min^2;
  :func:`run_federation`: final distance of FedRep over a grid of (n, m), against local-only
  learning with the same m, i.e. when federation lowers the samples each client needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .. import fedrep, linalg, linear, rates
from ..backend import default_device
from ..checks import (check_fraction, check_int, check_ints, check_nonnegative, check_number, check_positive,
                      check_positives, check_sequence)
from ..profiles import Settings


# --------------------------------------------------------------------------- checks


def _check_dims(d, k) -> None:
    check_int(d, "d")
    check_int(k, "k")
    if k >= d:
        raise ValueError(f"need 1 <= k < d, got d={d}, k={k}")


def _device(device):
    return default_device() if device is None else torch.device(device)


# --------------------------------------------------------------------------- 5.1 personalisation

@dataclass(frozen=True)
class PersonalisationSettings(Settings):
    """Dimension d, representation size k, n clients with m noiseless samples each. The heads
    are ``make_heads(mean_norm=mean_norm, scale=s, exact=True)`` for each spread s in ``spreads``:
    a common mean head of norm ``mean_norm`` plus a centred part whose covariance is exactly
    s^2 I_k. ``local_ms`` are the per-client sample sizes of the local-only fits (paper heads,
    ||w_*_i|| = sqrt(k)); FedRep (MoM start, step ``eta``, ``rounds``) runs on the same data."""

    d: int = 20
    k: int = 2
    n: int = 100
    m: int = 50
    mean_norm: float = 1.0
    spreads: tuple = (0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0)
    local_ms: tuple = (2, 5, 10, 15, 20, 30, 40)
    eta: float = 0.5
    rounds: int = 200
    seed: int = 0

    @classmethod
    def paper(cls):
        """Sec. 5.1 of the paper: d = 20, k = 2, n = 100 clients."""
        return cls(n=100, m=100, rounds=500)

    def validate(self) -> None:
        super().validate()
        _check_dims(self.d, self.k)
        check_int(self.n, "n", 2)
        check_int(self.m, "m")
        check_ints(self.local_ms, "local_ms")
        check_int(self.rounds, "rounds", 0)
        check_positive(self.eta, "eta")
        check_positives(self.spreads, "spreads")
        check_nonnegative(self.mean_norm, "mean_norm")


@dataclass(frozen=True)
class PersonalisationResult:
    """Per spread: the global error of the fitted single model ``single`` and the formula
    ``formula`` = (1/2n) sum ||theta_*_i - theta_bar||^2 (= k s^2 / 2), the distance
    ``to_mean`` = ||theta_hat - theta_bar_*||, FedRep's global error ``fedrep`` (eq. 3) and
    final distance ``fedrep_dist``. Per local sample size: ``local`` error and its formula
    ``local_formula`` = (1 - m/d)_+ mean ||theta_*_i||^2 / 2."""

    spreads: torch.Tensor
    single: torch.Tensor
    formula: torch.Tensor
    to_mean: torch.Tensor
    fedrep: torch.Tensor
    fedrep_dist: torch.Tensor
    local_ms: torch.Tensor
    local: torch.Tensor
    local_formula: torch.Tensor


def single_model_error_formula(theta_star: torch.Tensor) -> torch.Tensor:
    """(1/2n) sum_i ||theta_*_i - theta_bar_*||^2: the smallest global error of one shared model."""
    return fedrep.global_error(theta_star.mean(0), theta_star)


def run_personalisation(cfg: PersonalisationSettings, device=None) -> PersonalisationResult:
    """Single model vs personalised model vs local-only, on sampled noiseless data (book 5.1)."""
    device = _device(device)
    Bstar = linear.ground_truth_representation(cfg.d, cfg.k, seed=cfg.seed, device=device)
    single, formula, to_mean, fr, fr_dist = [], [], [], [], []
    for j, s in enumerate(cfg.spreads):
        W = linear.make_heads(cfg.n, cfg.k, mean_norm=cfg.mean_norm, scale=float(s), exact=True,
                              seed=cfg.seed + 1, device=device)
        theta_star = linear.targets(Bstar, W)
        data = linear.sample_tasks(Bstar, W, cfg.m, seed=cfg.seed + 2 + j)
        theta = fedrep.single_model_least_squares(data)
        single.append(fedrep.global_error(theta, theta_star))
        formula.append(single_model_error_formula(theta_star))
        to_mean.append((theta - theta_star.mean(0)).norm())
        res = fedrep.fedrep(fedrep.method_of_moments_init(data, cfg.k), data, eta=cfg.eta, rounds=cfg.rounds)
        fr.append(res.global_error(Bstar, W))
        fr_dist.append(res.dist(Bstar)[-1])
    W = fedrep.paper_heads(cfg.n, cfg.k, seed=cfg.seed + 1, device=device)
    theta_star = linear.targets(Bstar, W)
    local, local_formula = [], []
    for j, m in enumerate(cfg.local_ms):
        data = linear.sample_tasks(Bstar, W, m, seed=cfg.seed + 100 + j)
        local.append(fedrep.global_error(fedrep.local_only(data), theta_star))
        local_formula.append(max(0.0, 1.0 - m / cfg.d) * 0.5 * float(theta_star.square().sum(-1).mean()))
    stack = lambda xs: torch.stack(xs).cpu()  # noqa: E731
    return PersonalisationResult(
        spreads=torch.tensor(cfg.spreads, dtype=torch.float64), single=stack(single), formula=stack(formula),
        to_mean=stack(to_mean), fedrep=stack(fr), fedrep_dist=stack(fr_dist),
        local_ms=torch.tensor(cfg.local_ms), local=stack(local),
        local_formula=torch.tensor(local_formula, dtype=torch.float64))


# --------------------------------------------------------------------------- 5.2 method of moments

def expected_moment_matrix(Bstar: torch.Tensor, W: torch.Tensor, noise_std: float = 0.0) -> torch.Tensor:
    """(1/n) sum_i E[y_i^2 x x^T] = (1/n) sum_i (||theta_*_i||^2 + noise^2) I + 2 theta_*_i theta_*_i^T
    for x ~ N(0, I_d) (book 5.2, the method-of-moments lemma)."""
    if not noise_std >= 0:
        raise ValueError(f"noise_std must be >= 0, got {noise_std}")
    theta = linear.targets(Bstar, W)
    n, d = theta.shape
    scale = float(theta.square().sum(-1).mean()) + noise_std**2
    return scale * torch.eye(d, dtype=theta.dtype, device=theta.device) + 2.0 * theta.T @ theta / n


@dataclass(frozen=True)
class MomentSettings(Settings):
    """Dimension d, rank k, client counts ``ns`` and per-client sample sizes ``ms`` of the
    initial batch, ``repeats`` independent draws (data and heads) averaged, label noise."""

    d: int = 20
    k: int = 2
    ns: tuple = (10, 30, 100, 300, 1000)
    ms: tuple = (2, 5, 10, 20)
    repeats: int = 4
    noise_std: float = 0.0
    seed: int = 0

    @classmethod
    def paper(cls):
        return cls(ns=(10, 30, 100, 300, 1000, 3000), repeats=10)

    def validate(self) -> None:
        super().validate()
        _check_dims(self.d, self.k)
        check_ints(self.ns, "ns")
        check_ints(self.ms, "ms")
        check_int(self.repeats, "repeats")
        check_nonnegative(self.noise_std, "noise_std")


@dataclass(frozen=True)
class MomentResult:
    """``dist[a, b]``: mean dist(B_0, B_*) over the repeats for m = ms[a], n = ns[b]; ``spread``
    the standard deviation over the repeats."""

    ns: torch.Tensor
    ms: torch.Tensor
    dist: torch.Tensor
    spread: torch.Tensor


def run_moments(cfg: MomentSettings, device=None) -> MomentResult:
    """dist(method_of_moments_init, B_*) over a grid of (m, n), paper heads (book 5.2)."""
    device = _device(device)
    out = torch.zeros(len(cfg.ms), len(cfg.ns), cfg.repeats, dtype=torch.float64)
    for rep in range(cfg.repeats):
        seed = cfg.seed + 1000 * rep
        Bstar = linear.ground_truth_representation(cfg.d, cfg.k, seed=seed, device=device)
        for b, n in enumerate(cfg.ns):
            W = fedrep.paper_heads(n, cfg.k, seed=seed + 1, device=device)
            for a, m in enumerate(cfg.ms):
                data = linear.sample_tasks(Bstar, W, m, noise_std=cfg.noise_std, seed=seed + 2 + 10 * a + 100 * b)
                B0 = fedrep.method_of_moments_init(data, cfg.k)
                out[a, b, rep] = float(linalg.principal_angle_distance(B0, Bstar))
    return MomentResult(ns=torch.tensor(cfg.ns), ms=torch.tensor(cfg.ms), dist=out.mean(-1),
                        spread=out.std(-1) if cfg.repeats > 1 else torch.zeros_like(out[..., 0]))


# --------------------------------------------------------------------------- 5.2 one run

@dataclass(frozen=True)
class TrajectorySettings(Settings):
    """Algorithm 2 with fresh batches of m samples per selected client and round, n clients,
    participation rate r, step eta, ``rounds``, label noise ``noise_std``; paper heads."""

    d: int = 20
    k: int = 2
    n: int = 100
    m: int = 10
    r: float = 1.0
    eta: float = 0.5
    rounds: int = 150
    noise_std: float = 0.0
    seed: int = 0

    @classmethod
    def paper(cls):
        return cls(rounds=500)

    def validate(self) -> None:
        super().validate()
        _check_dims(self.d, self.k)
        check_int(self.n, "n")
        check_int(self.m, "m")
        check_int(self.rounds, "rounds", 0)
        check_fraction(self.r, "r (participation rate)")
        check_positive(self.eta, "eta")
        check_nonnegative(self.noise_std, "noise_std")


@dataclass(frozen=True)
class TrajectoryResult:
    """dist(B_t, B_*) for t = 0..T from the method-of-moments start (``mom``) and from a Haar-random
    orthonormal start (``random``); ``B0`` the MoM start."""

    mom: torch.Tensor
    random: torch.Tensor
    B0: torch.Tensor


def run_trajectory(cfg: TrajectorySettings, device=None) -> TrajectoryResult:
    device = _device(device)
    Bstar = linear.ground_truth_representation(cfg.d, cfg.k, seed=cfg.seed, device=device)
    W = fedrep.paper_heads(cfg.n, cfg.k, seed=cfg.seed + 1, device=device)
    data = linear.FreshSamples(Bstar, W, cfg.m, noise_std=cfg.noise_std)
    B0 = fedrep.method_of_moments_init(
        linear.sample_tasks(Bstar, W, cfg.m, noise_std=cfg.noise_std, seed=cfg.seed + 2), cfg.k)
    Brand = linalg.random_orthonormal(cfg.d, cfg.k, cfg.seed + 3, device=device)
    kw = dict(eta=cfg.eta, rounds=cfg.rounds, r=cfg.r, seed=cfg.seed + 4)
    return TrajectoryResult(mom=fedrep.fedrep(B0, data, **kw).dist(Bstar).cpu(),
                            random=fedrep.fedrep(Brand, data, **kw).dist(Bstar).cpu(), B0=B0.cpu())


# --------------------------------------------------------------------------- 5.3 rates

@dataclass(frozen=True)
class RateSettings(Settings):
    """FedRep with the QR step of Theorem 1 (orthonormal B_t), fresh batches of m samples, full
    participation, from a start at distance ``dist0`` (E_0 = 1 - dist0^2). Heads
    ``make_heads(cond=c, exact=True)``: (1/n) W^T W has eigenvalues from 1 down to 1/c exactly,
    so sigma_max^2 = 1 and sigma_min^2 = 1/c. The rate is measured over the rounds with
    ``window[0] < dist < window[1]``."""

    d: int = 20
    k: int = 2
    n: int = 100
    m: int = 20
    etas: tuple = (0.05, 0.1, 0.25)
    conds: tuple = (1.0, 4.0)
    dist0: float = 0.5
    rounds: int = 400
    window: tuple = (1e-12, 0.1)
    seed: int = 0

    @classmethod
    def paper(cls):
        return cls(etas=(0.025, 0.05, 0.1, 0.25), conds=(1.0, 2.0, 4.0, 8.0), rounds=1000)

    def validate(self) -> None:
        super().validate()
        _check_dims(self.d, self.k)
        check_int(self.n, "n", self.k)
        check_int(self.m, "m")
        check_int(self.rounds, "rounds", 3)
        check_number(self.dist0, "dist0", low=0.0, high=1.0, low_open=True, high_open=True)
        check_positives(self.etas, "etas", each_name="every eta")
        check_sequence(self.conds, "conds (condition numbers)", lambda v, n: check_number(v, n, low=1.0))
        if len(self.window) != 2 or not 0 <= self.window[0] < self.window[1]:
            raise ValueError(f"window must be a pair 0 <= low < high of distances, got {self.window!r}")


@dataclass(frozen=True)
class RateResult:
    """Per (cond, eta) key: ``dist`` curves (T + 1,), measured per-round factor ``rate``,
    Theorem 1's factor ``theorem`` = sqrt(1 - eta E_0 sigma_min^2 / 2), the first-order factor
    ``first_order`` = 1 - eta sigma_min^2, and ``r2`` the R^2 of a straight-line fit of log dist
    in the window (1 for exactly linear convergence); ``sigma2`` maps cond to
    (sigma_min^2, sigma_max^2); ``E0`` = 1 - dist0^2."""

    dist: dict
    rate: dict
    theorem: dict
    first_order: dict
    r2: dict
    sigma2: dict
    E0: float


def theorem_factor(eta: float, E0: float, sigma_min2: float) -> float:
    """Per-round factor of Theorem 1: dist_T <= factor^T dist_0 with factor = (1 - eta E_0 sigma_min^2/2)^(1/2)."""
    x = eta * E0 * sigma_min2 / 2
    if not 0 <= x <= 1:
        raise ValueError(f"eta E_0 sigma_min^2 / 2 = {x} must lie in [0, 1]")
    return math.sqrt(1 - x)


def fit_rate(dist: torch.Tensor, window: tuple = (1e-12, 0.1)) -> tuple[float, float]:
    """Per-round factor exp(slope) of the least-squares line through log dist_t over the rounds
    with window[0] < dist_t < window[1] (:func:`replearn.rates.log_linear_fit`, at least 3
    rounds), the quantity Theorem 1 bounds (:func:`theorem_factor`), and the fit's R^2."""
    fit = rates.log_linear_fit(torch.arange(len(dist)), dist, low=window[0], high=window[1], min_points=3)
    return math.exp(fit.slope), fit.r2


def run_rates(cfg: RateSettings, device=None) -> RateResult:
    """Measured linear rate of FedRep (with QR) against Theorem 1 (book 5.3)."""
    device = _device(device)
    Bstar = linear.ground_truth_representation(cfg.d, cfg.k, seed=cfg.seed, device=device)
    B0 = linalg.basis_at_distance(Bstar, cfg.dist0, seed=cfg.seed + 3)
    E0 = 1.0 - cfg.dist0**2
    dist, rate, thm, first, r2, sigma2 = {}, {}, {}, {}, {}, {}
    for cond in cfg.conds:
        W = linear.make_heads(cfg.n, cfg.k, cond=float(cond), exact=True, seed=cfg.seed + 1, device=device)
        ev = torch.linalg.eigvalsh(W.T @ W / cfg.n)
        smin, smax = float(ev[0]), float(ev[-1])
        sigma2[cond] = (smin, smax)
        data = linear.FreshSamples(Bstar, W, cfg.m)
        for eta in cfg.etas:
            res = fedrep.fedrep(B0, data, eta=eta, rounds=cfg.rounds, orthonormalize=True, seed=cfg.seed + 4)
            curve = res.dist(Bstar).cpu()
            dist[cond, eta] = curve
            rate[cond, eta], r2[cond, eta] = fit_rate(curve, cfg.window)
            thm[cond, eta] = theorem_factor(eta, E0, smin)
            first[cond, eta] = 1.0 - eta * smin
    return RateResult(dist=dist, rate=rate, theorem=thm, first_order=first, r2=r2, sigma2=sigma2, E0=E0)


# --------------------------------------------------------------------------- 5.3 federation

@dataclass(frozen=True)
class FederationSettings(Settings):
    """Grid of client counts ``ns`` and per-client sample sizes ``ms`` (fixed noiseless data,
    each client keeps its m samples for the whole run), dimension d, rank k, paper heads; FedRep
    (exact heads, MoM start, step eta, full participation) for ``rounds``; a run counts as
    recovering col(B_*) when its final distance is below ``tol``."""

    d: int = 30
    k: int = 2
    ns: tuple = (10, 20, 50, 100, 200, 400)
    ms: tuple = (3, 4, 6, 8, 12, 16, 24)
    eta: float = 0.5
    rounds: int = 300
    tol: float = 1e-3
    seed: int = 0

    @classmethod
    def paper(cls):
        return cls(ns=(10, 20, 50, 100, 200, 400, 1000), ms=(3, 4, 5, 6, 8, 10, 12, 16, 24, 32), rounds=1000)

    def validate(self) -> None:
        super().validate()
        _check_dims(self.d, self.k)
        check_ints(self.ns, "ns")
        check_ints(self.ms, "ms")
        check_int(self.rounds, "rounds", 0)
        check_positive(self.eta, "eta")
        check_positive(self.tol, "tol")


@dataclass(frozen=True)
class FederationResult:
    """``dist[a, b]`` final dist(B_T, B_*) and ``error[a, b]`` FedRep's global error (eq. 3) for
    m = ms[a], n = ns[b]; ``local[a]`` local-only global error at m = ms[a] (largest n's clients),
    ``local_formula[a]`` = (1 - m/d)_+ k/2; ``counting[b]`` = k + k(d - k)/n, the per-client sample
    size at which the number of equations nm equals the number of unknowns of (B, W)."""

    ns: torch.Tensor
    ms: torch.Tensor
    dist: torch.Tensor
    error: torch.Tensor
    local: torch.Tensor
    local_formula: torch.Tensor
    counting: torch.Tensor
    tol: float

    @property
    def recovered(self) -> torch.Tensor:
        return self.dist < self.tol

    def smallest_m(self) -> torch.Tensor:
        """Per n, the smallest m of the grid from which on every larger m recovers (inf if none)."""
        out = []
        for b in range(len(self.ns)):
            ok = self.recovered[:, b].tolist()
            best = float("inf")
            for a in reversed(range(len(ok))):
                if not ok[a]:
                    break
                best = float(self.ms[a])
            out.append(best)
        return torch.tensor(out, dtype=torch.float64)


def counting_bound(d: int, k: int, n: int) -> float:
    """k + k(d - k)/n: nm equations against the dk - k^2 + nk unknowns of (col(B), W)."""
    return k + k * (d - k) / n


def run_federation(cfg: FederationSettings, device=None) -> FederationResult:
    """FedRep over an (m, n) grid against local-only least squares (book 5.3)."""
    device = _device(device)
    Bstar = linear.ground_truth_representation(cfg.d, cfg.k, seed=cfg.seed, device=device)
    dist = torch.zeros(len(cfg.ms), len(cfg.ns), dtype=torch.float64)
    error = torch.zeros_like(dist)
    for b, n in enumerate(cfg.ns):
        W = fedrep.paper_heads(n, cfg.k, seed=cfg.seed + 1, device=device)
        for a, m in enumerate(cfg.ms):
            data = linear.sample_tasks(Bstar, W, m, seed=cfg.seed + 2 + 10 * a + 1000 * b)
            res = fedrep.fedrep(fedrep.method_of_moments_init(data, cfg.k), data, eta=cfg.eta, rounds=cfg.rounds)
            dist[a, b] = float(res.dist(Bstar)[-1])
            error[a, b] = float(res.global_error(Bstar, W))
    W = fedrep.paper_heads(cfg.ns[-1], cfg.k, seed=cfg.seed + 1, device=device)
    theta_star = linear.targets(Bstar, W)
    local = torch.tensor([float(fedrep.global_error(fedrep.local_only(
        linear.sample_tasks(Bstar, W, m, seed=cfg.seed + 7 + a)), theta_star)) for a, m in enumerate(cfg.ms)],
        dtype=torch.float64)
    local_formula = torch.tensor([max(0.0, 1 - m / cfg.d) * cfg.k / 2 for m in cfg.ms], dtype=torch.float64)
    counting = torch.tensor([counting_bound(cfg.d, cfg.k, n) for n in cfg.ns], dtype=torch.float64)
    return FederationResult(ns=torch.tensor(cfg.ns), ms=torch.tensor(cfg.ms), dist=dist, error=error,
                            local=local, local_formula=local_formula, counting=counting, tol=cfg.tol)
