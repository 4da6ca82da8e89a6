"""FedRep's synthetic experiments (Collins, Hassani, Mokhtari, Shakkottai 2021, Sec. 5.1; book 5.4-5.6).

Every client ``i`` has samples ``x ~ N(0, I_d)`` and labels ``y = <B_* w_*_i, x> + N(0, noise_std^2)``
with a Haar-random ``B_*`` (d x k, orthonormal) and heads ``w_*_i`` of norm ``sqrt(k)``
(:func:`replearn.fedrep.paper_heads`, Assumption 3). Three drivers:

- :func:`run_fig1` (Fig. 1): fixed data, ``m`` samples per client; the global error of eq. (3),
  ``(1/2n) sum_i ||theta_i - theta_*_i||^2``, of local-only ridge regression, of the single shared
  model minimising objective (4) (FedAvg's objective; we use its exact minimiser
  :func:`replearn.fedrep.single_model_least_squares` in place of running FedAvg) and of FedRep
  (Algorithm 2 on the fixed data, method-of-moments start, heads refitted on the final B);
- :func:`run_fig3` (Fig. 3): fresh samples every round (Algorithm 2), participation ``r``;
  dist(B_t, B_*) (Definition 1) along FedRep (exact head), 10GD-GD and GD-GD (K = 10 or 1
  gradient steps on the head), for several numbers of clients ``n``, from one shared
  method-of-moments start per (n, seed);
- :func:`run_fig4` (Fig. 4): train FedRep as in Fig. 1, and FedAvg (``fedavg_tau`` local steps of
  size ``fedavg_alpha``) on the same data from B_0 = Q/sqrt(alpha) (the start of Collins et al.
  2022, Theorem 1 (ii)) and from the unscaled B_0 = Q, w_0 = 0; then new clients with ``m_new``
  samples fit only a k-dimensional head on each learned B (:func:`replearn.fedrep.new_client_head`);
  compared with local-only least squares in R^d and with the head fitted on the true B_*.

The paper writes the label noise as N(., 10^-3); we read 10^-3 as the *variance*
(``noise_std = sqrt(1e-3)``, :data:`PAPER_NOISE_STD`), the usual meaning of N(mean, variance).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .. import federated, fedrep
from ..backend import DTYPE, default_device, derive_seed, make_generator, randn
from ..linalg import principal_angle_distance, random_orthonormal
from ..linear import FreshSamples, SampledTasks, ground_truth_representation, predict, sample_tasks, targets
from ..checks import check_fraction, check_int, check_ints, check_nonnegative, check_positive
from ..profiles import Settings

#: Reading N(., 10^-3) in Sec. 5.1 as a variance: the noise standard deviation sqrt(1e-3) ~ 0.032.
PAPER_NOISE_STD = 1e-3**0.5

FIG1_METHODS = ("local only", "single model", "FedRep")
FIG3_METHODS = ("FedRep", "10GD-GD", "GD-GD")
HEAD_STEPS = {"FedRep": None, "10GD-GD": 10, "GD-GD": 1}
FIG4_METHODS = ("FedRep", "FedAvg", "FedAvg, unscaled start", "local only", "true representation")
#: The methods of Fig. 4 that learn a representation on the training clients.
FIG4_LEARNED = ("FedRep", "FedAvg", "FedAvg, unscaled start")


def _check_common(d, k, noise_std, eta, rounds, seeds, seed) -> None:
    check_int(k, "k", 1)
    check_int(d, "d (needs k < d)", k + 1)
    check_nonnegative(noise_std, "noise_std")
    check_positive(eta, "eta")
    check_int(rounds, "rounds", 1)
    check_int(seeds, "seeds (independent repetitions)", 1)
    check_int(seed, "seed", 0)


def _instance(d: int, k: int, n: int, seed: int, device):
    """B_* (d, k) and paper heads W (n, k) of one repetition."""
    Bstar = ground_truth_representation(d, k, seed=derive_seed(seed, 1), device=device)
    W = fedrep.paper_heads(n, k, seed=derive_seed(seed, 2), device=device)
    return Bstar, W


def train_fedrep(Bstar: torch.Tensor, W: torch.Tensor, m: int, *, noise_std: float, eta: float,
                 rounds: int, r: float = 1.0, seed: int = 0):
    """FedRep on fixed data (m samples per client, the setting of Figs. 1 and 4).

    Draws the clients' data, starts from the method-of-moments estimate on the same data,
    runs Algorithm 2 (one gradient step on B per round, exact heads) and refits every
    client's head on the final B. Returns ``(data, result, heads)``.
    """
    data = sample_tasks(Bstar, W, m, noise_std=noise_std, seed=derive_seed(seed, 3))
    B0 = fedrep.method_of_moments_init(data, Bstar.shape[1])
    res = fedrep.fedrep(B0, data, eta=eta, rounds=rounds, r=r, seed=derive_seed(seed, 4))
    heads = fedrep.head_solve(res.B[-1], data)
    return data, res, heads


# --------------------------------------------------------------------------- Fig. 1

@dataclass(frozen=True)
class Fig1Settings(Settings):
    """Fig. 1: dimension d, representation size k, n clients, the grid ``ms`` of samples per
    client, label noise, FedRep's step ``eta``, ``rounds`` and participation ``r``, the
    local-only ``ridge`` (in the 1/(2m) normalisation of eq. (7)), and the number of
    independent repetitions ``seeds`` (new B_*, heads and data each)."""

    d: int = 20
    k: int = 2
    n: int = 100
    ms: tuple[int, ...] = (5, 10, 20)
    noise_std: float = PAPER_NOISE_STD
    eta: float = 0.5
    rounds: int = 200
    r: float = 1.0
    ridge: float = 0.01
    seeds: int = 5
    seed: int = 0

    @classmethod
    def paper(cls):
        """The paper's d = 20, k = 2, n = 100 and m in {5, 10, 20}; rounds and repetitions are
        not stated, we use 1000 rounds and 10 repetitions."""
        return cls(rounds=1000, seeds=10)

    def validate(self) -> None:
        super().validate()
        _check_common(self.d, self.k, self.noise_std, self.eta, self.rounds, self.seeds, self.seed)
        check_int(self.n, "n (clients)", 1)
        check_ints(self.ms, "ms (samples per client)", each_name="every m in ms (samples per client)")
        check_fraction(self.r, "r (participation rate)")
        check_nonnegative(self.ridge, "ridge")


@dataclass(frozen=True)
class Fig1Result:
    """``errors[method]`` (seeds, M): global error (3) at every m in ``ms``; ``dist0`` and
    ``dist`` (seeds, M): FedRep's distance at the start (method of moments) and at the end;
    ``floor`` (seeds,): the population global error of the best single model (Sec. 2.1)."""

    ms: tuple
    errors: dict
    dist0: torch.Tensor
    dist: torch.Tensor
    floor: torch.Tensor

    def mean(self, method: str) -> torch.Tensor:
        return self.errors[method].mean(0)

    def sem(self, method: str) -> torch.Tensor:
        e = self.errors[method]
        return e.std(0) / math.sqrt(e.shape[0]) if e.shape[0] > 1 else torch.zeros_like(e[0])


def run_fig1(cfg: Fig1Settings, device=None) -> Fig1Result:
    """Global error (3) of local-only, the single model of (4) and FedRep at every m (Fig. 1)."""
    device = default_device() if device is None else torch.device(device)
    errors = {name: torch.zeros(cfg.seeds, len(cfg.ms), dtype=DTYPE) for name in FIG1_METHODS}
    dist0 = torch.zeros(cfg.seeds, len(cfg.ms), dtype=DTYPE)
    dist = torch.zeros_like(dist0)
    floor = torch.zeros(cfg.seeds, dtype=DTYPE)
    for s in range(cfg.seeds):
        Bstar, W = _instance(cfg.d, cfg.k, cfg.n, derive_seed(cfg.seed, s), device)
        theta = targets(Bstar, W)
        floor[s] = float(fedrep.global_error(theta.mean(0), theta))
        for j, m in enumerate(cfg.ms):
            data, res, heads = train_fedrep(Bstar, W, m, noise_std=cfg.noise_std, eta=cfg.eta,
                                            rounds=cfg.rounds, r=cfg.r, seed=derive_seed(cfg.seed, s, m))
            fits = {"local only": fedrep.local_only(data, cfg.ridge),
                    "single model": fedrep.single_model_least_squares(data),
                    "FedRep": predict(res.B[-1], heads)}
            for name, fit in fits.items():
                errors[name][s, j] = float(fedrep.global_error(fit, theta))
            d_t = res.dist(Bstar)
            dist0[s, j], dist[s, j] = float(d_t[0]), float(d_t[-1])
    return Fig1Result(tuple(cfg.ms), errors, dist0, dist, floor)


# --------------------------------------------------------------------------- Fig. 3

@dataclass(frozen=True)
class Fig3Settings(Settings):
    """Fig. 3: d, k, m fresh samples per selected client per round, participation r, the
    numbers of clients ``ns``, label noise, representation step ``eta``, head step
    ``head_lr`` of GD-GD / 10GD-GD, ``rounds`` and repetitions ``seeds``."""

    d: int = 10
    k: int = 2
    m: int = 5
    r: float = 0.1
    ns: tuple[int, ...] = (10, 100, 1000)
    noise_std: float = 0.0
    eta: float = 0.2
    head_lr: float = 0.1
    rounds: int = 300
    seeds: int = 3
    seed: int = 0

    @classmethod
    def paper(cls):
        """The paper's d = 10, k = 2, m = 5, r = 0.1 with its label noise. The text plots four
        values of n without listing them; we add n = 10000 to our three, and use 1000 rounds
        and 5 repetitions (not stated)."""
        return cls(ns=(10, 100, 1000, 10000), noise_std=PAPER_NOISE_STD, rounds=1000, seeds=5)

    def validate(self) -> None:
        super().validate()
        _check_common(self.d, self.k, self.noise_std, self.eta, self.rounds, self.seeds, self.seed)
        check_int(self.m, "m (fresh samples per round)", 1)
        check_ints(self.ns, "ns (numbers of clients)", each_name="every n in ns (clients)")
        check_fraction(self.r, "the participation rate r")
        check_positive(self.head_lr, "head_lr")


@dataclass(frozen=True)
class Fig3Result:
    """``dist[n][method]`` (seeds, rounds + 1): dist(B_t, B_*) for every n in ``ns``."""

    ns: tuple
    dist: dict

    def geometric_mean(self, n: int, method: str, floor: float = 1e-15) -> torch.Tensor:
        """exp(mean log dist) over the repetitions (distances clipped at ``floor``), (rounds + 1,)."""
        return self.dist[n][method].clamp_min(floor).log().mean(0).exp()


def run_fig3(cfg: Fig3Settings, device=None) -> Fig3Result:
    """dist(B_t, B_*) of FedRep, 10GD-GD and GD-GD with fresh samples for every n (Fig. 3).

    The three methods share the method-of-moments start (from one initial batch of m samples
    per client) and the seed of the client sampling. GD heads start at zero.
    """
    device = default_device() if device is None else torch.device(device)
    out = {}
    for n in cfg.ns:
        runs = {name: [] for name in FIG3_METHODS}
        for s in range(cfg.seeds):
            curves = dist_curves(n, cfg.m, cfg.r, {name: HEAD_STEPS[name] for name in FIG3_METHODS},
                                 d=cfg.d, k=cfg.k, rounds=cfg.rounds, eta=cfg.eta, head_lr=cfg.head_lr,
                                 noise_std=cfg.noise_std, seed=derive_seed(cfg.seed, s, n), device=device)
            for name in FIG3_METHODS:
                runs[name].append(curves[name])
        out[n] = {name: torch.stack(runs[name]) for name in FIG3_METHODS}
    return Fig3Result(tuple(cfg.ns), out)


def dist_curves(n: int, m: int, r: float, variants: dict, *, d: int, k: int, rounds: int, eta: float,
                head_lr: float, noise_std: float, seed: int, device=None) -> dict:
    """dist(B_t, B_*) (rounds + 1,) on one instance with fresh samples for each head rule in
    ``variants`` ({name: None for the exact head, K for K GD steps of size ``head_lr``}).
    All variants share B_*, the heads, the method-of-moments start and the sampling seed."""
    device = default_device() if device is None else torch.device(device)
    Bstar, W = _instance(d, k, n, seed, device)
    B0 = fedrep.method_of_moments_init(sample_tasks(Bstar, W, m, noise_std=noise_std, seed=derive_seed(seed, 3)), k)
    data = FreshSamples(Bstar, W, m, noise_std)
    out = {}
    for name, K in variants.items():
        res = fedrep.fedrep(B0, data, eta=eta, rounds=rounds, r=r, head_steps=K,
                            head_lr=None if K is None else head_lr, seed=derive_seed(seed, 4))
        out[name] = res.dist(Bstar).cpu()
    return out


def rounds_to_reach(curve: torch.Tensor, level: float) -> int | None:
    """First round t with curve[t] <= level (None if never)."""
    hit = (curve <= level).nonzero()
    return int(hit[0]) if len(hit) else None


# --------------------------------------------------------------------------- Fig. 4

@dataclass(frozen=True)
class Fig4Settings(Settings):
    """Fig. 4: FedRep trained as in Fig. 1 on n clients with m samples each, and FedAvg with
    ``fedavg_tau`` local steps of size ``fedavg_alpha`` for as many rounds on the same data; then
    ``new`` new clients (fresh heads of norm sqrt(k)) per sample size in ``m_news``."""

    d: int = 20
    k: int = 2
    n: int = 100
    m: int = 10
    noise_std: float = PAPER_NOISE_STD
    eta: float = 0.5
    rounds: int = 200
    m_news: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 30, 40, 60)
    new: int = 200
    seeds: int = 3
    seed: int = 0
    fedavg_tau: int = 10
    fedavg_alpha: float = 0.1

    @classmethod
    def paper(cls):
        """The paper's d = 20, k = 2, n = 100 (m, rounds and the number of new clients are not
        stated; we keep m = 10 and use 1000 rounds, 1000 new clients, 5 repetitions)."""
        return cls(rounds=1000, new=1000, seeds=5)

    def validate(self) -> None:
        super().validate()
        _check_common(self.d, self.k, self.noise_std, self.eta, self.rounds, self.seeds, self.seed)
        check_int(self.n, "n (clients)", 1)
        check_int(self.m, "m (samples per training client)", 1)
        check_int(self.new, "new (new clients per sample size)", 1)
        check_ints(self.m_news, "m_news", each_name="every m_new in m_news")
        check_int(self.fedavg_tau, "fedavg_tau (FedAvg's local steps)", 1)
        check_positive(self.fedavg_alpha, "fedavg_alpha")


@dataclass(frozen=True)
class Fig4Result:
    """``errors[method]`` (seeds, M, new): ||theta_c - theta_*_c||^2 of every new client (its test
    MSE minus the noise variance) at every m_new; for each method of :data:`FIG4_LEARNED`,
    ``dist[method]`` (seeds,): dist of the trained B, and ``leak[method]`` (seeds,): the new
    clients' average ||(I - P_B) theta_*_c||^2, the part of their regressors that the learned
    column space misses, and ``cond[method]`` (seeds,): sigma_max(B) / sigma_min(B), large when a
    direction of the learned B has collapsed."""

    m_news: tuple
    errors: dict
    dist: dict
    leak: dict
    cond: dict

    def mean(self, method: str) -> torch.Tensor:
        return self.errors[method].mean(dim=(0, 2))

    def median(self, method: str) -> torch.Tensor:
        e = self.errors[method]
        return e.transpose(0, 1).reshape(e.shape[1], -1).median(-1).values


def run_fig4(cfg: Fig4Settings, device=None) -> Fig4Result:
    """New clients fit a head on FedRep's B versus local-only least squares in R^d (Fig. 4).

    Local only is the min-norm least-squares fit (no ridge), whose expected error has the
    closed form of book 1.1 (:func:`replearn.linear.expected_ls_error` with p = d); the head on
    the true B_* is the oracle with p = k. FedAvg (Algorithm 1 of Collins et al. 2022 on the
    clients' least-squares losses, full participation) runs ``rounds`` rounds from w_0 = 0 and a
    Haar-random Q, scaled to B_0 = Q/sqrt(fedavg_alpha) ("FedAvg") or not ("FedAvg, unscaled
    start"); the new clients fit their heads on its final B.
    """
    device = default_device() if device is None else torch.device(device)
    errors = {name: torch.zeros(cfg.seeds, len(cfg.m_news), cfg.new, dtype=DTYPE) for name in FIG4_METHODS}
    dist = {name: torch.zeros(cfg.seeds, dtype=DTYPE) for name in FIG4_LEARNED}
    leak = {name: torch.zeros(cfg.seeds, dtype=DTYPE) for name in FIG4_LEARNED}
    cond = {name: torch.zeros(cfg.seeds, dtype=DTYPE) for name in FIG4_LEARNED}
    for s in range(cfg.seeds):
        Bstar, W = _instance(cfg.d, cfg.k, cfg.n, derive_seed(cfg.seed, s), device)
        data, res, _ = train_fedrep(Bstar, W, cfg.m, noise_std=cfg.noise_std, eta=cfg.eta, rounds=cfg.rounds,
                                    seed=derive_seed(cfg.seed, s, cfg.m))
        Q0 = random_orthonormal(cfg.d, cfg.k, seed=derive_seed(cfg.seed, s, 7), device=device)
        w0 = torch.zeros(cfg.k, dtype=DTYPE, device=device)
        learned = {"FedRep": res.B[-1]}
        for name, B0 in (("FedAvg", Q0 / cfg.fedavg_alpha**0.5), ("FedAvg, unscaled start", Q0)):
            learned[name] = federated.fedavg(B0, w0, data, alpha=cfg.fedavg_alpha, tau=cfg.fedavg_tau,
                                             rounds=cfg.rounds).final[0]
        W_new = fedrep.paper_heads(cfg.new, cfg.k, seed=derive_seed(cfg.seed, s, 5), device=device)
        theta = targets(Bstar, W_new)
        for name, B in learned.items():
            dist[name][s] = float(principal_angle_distance(B, Bstar))
            sv = torch.linalg.svdvals(B)
            cond[name][s] = float(sv[0] / sv[-1])
            Q = torch.linalg.qr(B).Q
            leak[name][s] = float((theta - (theta @ Q) @ Q.T).square().sum(-1).mean())
        for j, m_new in enumerate(cfg.m_news):
            gen = make_generator(derive_seed(cfg.seed, s, 6, m_new))
            X = randn(cfg.new, m_new, cfg.d, generator=gen, device=device)
            y = torch.einsum("cmd,cd->cm", X, theta) + cfg.noise_std * randn(cfg.new, m_new, generator=gen,
                                                                             device=device)
            for name, rep in (*learned.items(), ("true representation", Bstar)):
                heads = fedrep.new_client_head(rep, X, y)
                errors[name][s, j] = fedrep.new_client_error(rep, heads, theta).cpu()
            local = fedrep.local_only(SampledTasks(X, y), 0.0)
            errors["local only"][s, j] = (local - theta).square().sum(-1).cpu()
    return Fig4Result(tuple(cfg.m_news), errors, dist, leak, cond)
