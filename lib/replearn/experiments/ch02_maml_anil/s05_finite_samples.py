"""Book 2.5: ANIL and FO-ANIL with finite samples: the distance they reach with ``m`` fresh
samples per task and iteration as m and the number of tasks n vary (Collins, Mokhtari, Oh &
Shakkottai, ICML 2022, Sec. 5: m = Omega((d/n + 1) k^3) suffices, far below d).

:func:`run_finite_samples` runs the grids of :class:`FiniteSampleSettings`;
:func:`finite_sample_distance` is one run (:func:`replearn.theory.maml.meta_train` on a
:class:`replearn.theory.linear.FreshSamples` sampler from the structured start).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np
import torch

from replearn.theory import linear, maml
from replearn.checks import check_int
from replearn.settings import Each, Ge, Gt, Lt, OneOf, Profile, Settings


@dataclass(frozen=True)
class FiniteSampleSettings(Settings):
    """ANIL / FO-ANIL with ``m`` fresh inner and ``m`` fresh outer samples per task and
    iteration (noise ``noise_std``), n tasks with centred heads of condition number ``cond``,
    structured start at ``delta0``. Grid ``ms`` at ``n_fixed`` tasks and grid ``ns`` at
    ``m_fixed`` samples; the reported error is dist(B_t, B_*) averaged over the last ``tail``
    iterations and over ``seeds`` instances."""

    WORDS = {"n": "training tasks n", "cond": "condition number of the heads' covariance",
             "scale": "scale L of the heads' second moment", "mean_norm": "norm of the heads' mean",
             "delta0": "distance of the start from B* (δ₀)", "alpha": "inner step size α",
             "beta": "outer step size β", "iterations": "iterations", "noise_std": "label noise σ",
             "tail": "last iterations averaged", "ms": "samples per task m (sweep)",
             "n_fixed": "tasks n while m varies", "ns": "tasks n (sweep)",
             "m_fixed": "samples per task m while n varies", "algorithms": "algorithms compared",
             "seeds": "random instances"}

    d: int = 50
    k: Annotated[int, Ge(1)] = 3
    cond: Annotated[float, Ge(1, why="a condition number")] = 2.0
    noise_std: Annotated[float, Ge(0)] = 0.1
    alpha: Annotated[float, Gt(0, why="the inner step size")] = 0.25
    beta: Annotated[float, Gt(0, why="the outer step size")] = 0.5
    delta0: Annotated[float, Gt(0, why="a distance"), Lt(1)] = 0.5
    iterations: Annotated[int, Ge(1)] = 80
    tail: Annotated[int, Ge(1)] = 20
    ms: Annotated[tuple[int, ...], Each(Ge(1, why="sample sizes"))] = (8, 16, 32, 64)
    n_fixed: Annotated[int, Ge(1)] = 40
    ns: Annotated[tuple[int, ...], Each(Ge(1, why="task counts"))] = (5, 10, 20, 40, 80)
    m_fixed: Annotated[int, Ge(1)] = 16
    algorithms: Annotated[tuple[str, ...], Each(OneOf("ANIL", "FO-ANIL"))] = ("ANIL", "FO-ANIL")
    seeds: Annotated[int, Ge(1)] = 2
    seed: int = 0

    PAPER = Profile({"d": 100, "k": 5, "iterations": 500, "tail": 50, "ms": (16, 32, 64, 128, 256),
                     "ns": (10, 20, 40, 80, 160, 320), "m_fixed": 32, "n_fixed": 50, "seeds": 5},
                    doc="The paper's dimension d = 100 with k = 5 (Collins et al. 2022, Sec. 5), longer runs.")

    def validate(self) -> None:
        """The relations between the fields (each field's own range is beside it): k < d and
        tail <= iterations."""
        super().validate()
        check_int(self.d, "d (needs 1 <= k < d)", self.k + 1)
        check_int(self.tail, "tail", 1, self.iterations)


@dataclass(frozen=True)
class FiniteSampleResult:
    """``by_m[alg]`` (len(ms), seeds) and ``by_n[alg]`` (len(ns), seeds): the tail-averaged
    distances; ``curves[alg]`` {m: (T + 1,) dist of the first seed at n_fixed}."""

    ms: tuple
    ns: tuple
    by_m: dict
    by_n: dict
    curves: dict


def finite_sample_distance(cfg: FiniteSampleSettings, algorithm: str, n: int, m: int, seed: int) -> np.ndarray:
    """dist(B_t, B_*) (T + 1,) of one fresh-sample run with n tasks and m samples (inner and outer)."""
    if algorithm not in maml.ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}")
    Bstar = linear.ground_truth_representation(cfg.d, cfg.k, seed=seed)
    W = linear.make_heads(n, cfg.k, cond=cfg.cond, exact=n > cfg.k, seed=seed + 1)
    B0, w0 = maml.structured_init(Bstar, cfg.alpha, cfg.delta0, seed=seed + 2)
    data = linear.FreshSamples(Bstar, W, m, noise_std=cfg.noise_std)  # inner and outer samples: m each
    traj = maml.meta_train(B0, w0, data, algorithm=algorithm, alpha=cfg.alpha, beta=cfg.beta,
                           iterations=cfg.iterations, seed=seed + 3)
    return traj.dist(Bstar).cpu().numpy()


def run_finite_samples(cfg: FiniteSampleSettings) -> FiniteSampleResult:
    """The grids of :class:`FiniteSampleSettings` (runs with one torch thread: many tiny ops)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        seeds = [cfg.seed + 10 * s for s in range(cfg.seeds)]
        by_m, by_n, curves = {}, {}, {}
        for alg in cfg.algorithms:
            runs_m = [[finite_sample_distance(cfg, alg, cfg.n_fixed, m, s) for s in seeds] for m in cfg.ms]
            runs_n = [[finite_sample_distance(cfg, alg, n, cfg.m_fixed, s) for s in seeds] for n in cfg.ns]
            by_m[alg] = np.array([[r[-cfg.tail:].mean() for r in row] for row in runs_m])
            by_n[alg] = np.array([[r[-cfg.tail:].mean() for r in row] for row in runs_n])
            curves[alg] = {m: row[0] for m, row in zip(cfg.ms, runs_m)}
    finally:
        torch.set_num_threads(threads)
    return FiniteSampleResult(cfg.ms, cfg.ns, by_m, by_n, curves)
