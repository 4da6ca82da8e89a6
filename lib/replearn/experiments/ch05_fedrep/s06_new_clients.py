"""Book 5.6: new clients fit only a head on a learned representation (Collins, Hassani, Mokhtari,
Shakkottai 2021, Sec. 5.1, Fig. 4), and the explorer of FedRep's convergence.

:func:`run_fig4`: train FedRep as in Fig. 1 (:func:`replearn.theory.linear_fedrep.train_fedrep`), and FedAvg
(``fedavg_tau`` local steps of size ``fedavg_alpha``) on the same data from B_0 = Q/sqrt(alpha)
(the start of Collins et al. 2022, Theorem 1 (ii)) and from the unscaled B_0 = Q, w_0 = 0; then
new clients with ``m_new`` samples fit only a k-dimensional head on each learned B
(:func:`replearn.theory.linear_fedrep.new_client_head`); compared with local-only least squares in R^d and
with the head fitted on the true B_*. :func:`explorer` redraws dist(B_t, B_*) of FedRep with
fresh samples (:func:`explorer_curves`, :func:`replearn.theory.linear_fedrep.dist_curves`) as the number of
clients, the samples per round, the participation and the head rule vary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np
import torch

from replearn.theory import linear_federated, linear_fedrep
from replearn.backend import DTYPE, default_device, derive_seed, make_generator, randn
from replearn.checks import check_fraction, check_int, check_nonnegative, check_positive, check_seed
from replearn.theory.linear_fedrep import FigureSettings
from replearn.theory.linalg import principal_angle_distance, random_orthonormal
from replearn.theory.linear import expected_ls_error, SampledTasks, targets
from replearn.book.plotting import COLORS, legend_outside, plot_curves, to_numpy
from replearn.book.widgets import explorer as build_explorer, Slider
from replearn.settings import Each, Ge, Gt, Profile

FIG4_METHODS = ("FedRep", "FedAvg", "FedAvg, unscaled start", "local only", "true representation")
#: The methods of Fig. 4 that learn a representation on the training clients.
FIG4_LEARNED = ("FedRep", "FedAvg", "FedAvg, unscaled start")


@dataclass(frozen=True)
class Fig4Settings(FigureSettings):
    """Fig. 4: FedRep trained as in Fig. 1 on n clients with m samples each, and FedAvg with
    ``fedavg_tau`` local steps of size ``fedavg_alpha`` for as many rounds on the same data; then
    ``new`` new clients (fresh heads of norm sqrt(k)) per sample size in ``m_news``."""

    WORDS = {"seeds": "independent repetitions", "n": "clients n", "m": "samples per client m",
             "m_news": "new clients' sample sizes", "new": "new clients per sample size",
             "eta": "FedRep's step size η", "fedavg_tau": "FedAvg's local steps τ",
             "fedavg_alpha": "FedAvg's step size α"}

    n: Annotated[int, Ge(1, why="clients")] = 100
    m: Annotated[int, Ge(1, why="samples per training client")] = 10
    m_news: Annotated[tuple[int, ...], Each(Ge(1), entry="every m_new in m_news")] = (
        1, 2, 3, 4, 6, 8, 12, 16, 24, 30, 40, 60)
    new: Annotated[int, Ge(1, why="new clients per sample size")] = 200
    fedavg_tau: Annotated[int, Ge(1, why="FedAvg's local steps")] = 10
    fedavg_alpha: Annotated[float, Gt(0)] = 0.1

    PAPER = Profile({"rounds": 1000, "new": 1000, "seeds": 5},
                    doc="The paper's d = 20, k = 2, n = 100 (m, rounds and the number of new clients are not "
                        "stated; we keep m = 10 and use 1000 rounds, 1000 new clients, 5 repetitions).")


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
    closed form of book 1.1 (:func:`replearn.theory.linear.expected_ls_error` with p = d); the head on
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
        Bstar, W = linear_fedrep.paper_instance(cfg.d, cfg.k, cfg.n, derive_seed(cfg.seed, s), device)
        data, res, _ = linear_fedrep.train_fedrep(Bstar, W, cfg.m, noise_std=cfg.noise_std, eta=cfg.eta,
                                           rounds=cfg.rounds, seed=derive_seed(cfg.seed, s, cfg.m))
        Q0 = random_orthonormal(cfg.d, cfg.k, seed=derive_seed(cfg.seed, s, 7), device=device)
        w0 = torch.zeros(cfg.k, dtype=DTYPE, device=device)
        learned = {"FedRep": res.B[-1]}
        for name, B0 in (("FedAvg", Q0 / cfg.fedavg_alpha**0.5), ("FedAvg, unscaled start", Q0)):
            learned[name] = linear_federated.fedavg(B0, w0, data, alpha=cfg.fedavg_alpha, tau=cfg.fedavg_tau,
                                             rounds=cfg.rounds).final[0]
        W_new = linear_fedrep.paper_heads(cfg.new, cfg.k, seed=derive_seed(cfg.seed, s, 5), device=device)
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
                heads = linear_fedrep.new_client_head(rep, X, y)
                errors[name][s, j] = linear_fedrep.new_client_error(rep, heads, theta).cpu()
            local = linear_fedrep.local_only(SampledTasks(X, y), 0.0)
            errors["local only"][s, j] = (local - theta).square().sum(-1).cpu()
    return Fig4Result(tuple(cfg.m_news), errors, dist, leak, cond)


# --------------------------------------------------------------------------- explorer


def explorer_curves(n: int, m: int, r: float, head_steps: int | None, *, d: int = 10, k: int = 2,
                    rounds: int = 200, seed: int = 0, eta: float = 0.2, head_lr: float = 0.1,
                    noise_std: float = 0.0) -> dict:
    """dist(B_t, B_*) of FedRep (Algorithm 2, fresh samples) on one instance, t = 0..rounds.

    ``n`` clients with heads of norm sqrt(k) (:func:`replearn.theory.linear_fedrep.paper_heads`), Haar-random
    B_* (d, k), ``m`` fresh samples per selected client per round, a fraction ``r`` of the
    clients per round, the method-of-moments start and representation step ``eta``.
    ``head_steps`` chooses the head update: ``0`` or ``None`` is FedRep's exact least-squares
    head; ``K >= 1`` is K gradient steps of size ``head_lr`` from the client's previous head
    (GD-GD for K = 1, 10GD-GD for K = 10). Returns numpy arrays ``{"round", "dist", "exact"}``,
    each (rounds + 1,): the chosen variant and, as a reference, the exact-head FedRep on the
    same instance, start and client samples (the two are equal when the head is exact).
    Raises ValueError on bad input and when the iterates diverge (step size too large).
    """
    check_int(n, "n (clients)", 1)
    check_int(m, "m (fresh samples per round)", 1)
    check_fraction(r, "r (fraction of clients per round)")
    if head_steps is not None:
        check_int(head_steps, "head_steps (0 or None: exact head; K >= 1: K GD steps)", 0)
    check_int(rounds, "rounds", 1)
    check_int(k, "k", 1)
    check_int(d, "d (needs 1 <= k < d)", k + 1)
    check_positive(eta, "eta")
    check_positive(head_lr, "head_lr")
    check_nonnegative(noise_std, "noise_std")
    check_seed(seed)
    K = None if not head_steps else head_steps
    variants = {"exact": None} if K is None else {"exact": None, "dist": K}
    curves = linear_fedrep.dist_curves(n, m, float(r), variants, d=d, k=k, rounds=rounds, eta=float(eta),
                                head_lr=float(head_lr), noise_std=float(noise_std), seed=seed)
    out = {"round": np.arange(rounds + 1), "exact": to_numpy(curves["exact"])}
    out["dist"] = out["exact"].copy() if K is None else to_numpy(curves["dist"])
    return out


def draw_explorer(ax, curves: dict, head_steps: int | None, title: str = "") -> None:
    """Plot the curves of :func:`explorer_curves` on a log axis."""
    floor = 1e-12  # the exact-head runs reach machine precision; keep the log axis finite
    if head_steps:
        shown = {"FedRep": curves["exact"], ("GD-GD" if head_steps == 1 else f"{head_steps}GD-GD"): curves["dist"]}
    else:
        shown = {"FedRep": curves["exact"]}
    shown = {name: np.maximum(y, floor) for name, y in shown.items()}
    plot_curves(ax, curves["round"], shown, logy=True, xlabel="round t", ylabel=r"dist$(B_t, B_*)$",
                title=title)
    ax.set_ylim(max(floor, 0.5 * float(min(y.min() for y in shown.values()))), 1.5)


def explorer(**defaults):
    """An ipywidgets panel: sliders for the number of clients n, the fresh samples m per round,
    the participation r and the head steps K (0 = exact head), and a plot of
    :func:`explorer_curves` (keyword ``defaults`` set the initial slider values)."""
    controls = {"n": Slider(100, 10, 1000, 10, "n", "int"), "m": Slider(5, 1, 20, 1, "m", "int"),
                "r": Slider(0.1, 0.05, 1.0, 0.05, "r"), "head_steps": Slider(0, 0, 20, 1, "K (0: exact)", "int")}

    def draw(ax, v):
        K = v["head_steps"]
        title = f"n = {v['n']}, m = {v['m']}, r = {v['r']:.2f}, " + ("exact head" if not K else f"K = {K}")
        draw_explorer(ax, explorer_curves(**v), K, title)

    start = {k: (v or 0) if k == "head_steps" else v for k, v in defaults.items()}
    return build_explorer(controls, draw, defaults=start, continuous_update=False)


# --------------------------------------------------------------------------- what the page shows

def theory(cfg: Fig4Settings, eps: float) -> dict:
    """The predicted error of a new client with ``m`` samples, as functions of ``m``: FedRep's
    head on a column space that misses ``eps`` of the regressors' energy (the proposition;
    defined from m = k + 2), and local-only least squares in R^d (the closed form; not at m = d)."""
    k, d, var = cfg.k, cfg.d, cfg.noise_std**2

    def head(m):
        return eps + (var + eps) * k / (m - k - 1) if m >= k + 2 else np.nan

    return {"FedRep": head, "local only": lambda m: expected_ls_error(m, d, var, k) if abs(m - d) > 1 else np.nan}


def error_table(res: Fig4Result, cfg: Fig4Settings, theory_of: dict) -> str:
    """Per number of samples m_new of the new clients, as lines of text: FedRep's and
    local-only's error (median, mean and the prediction of ``theory_of``), and FedAvg's median
    from both starts."""
    lines = [f"{'m_new':>5} | {'FedRep median / mean / theory':>30} | {'local only median / mean / theory':>34}"
             f" | FedAvg median, unscaled start"]
    for j, m in enumerate(cfg.m_news):
        row = []
        for name in ("FedRep", "local only"):
            med, mean, th = float(res.median(name)[j]), float(res.mean(name)[j]), theory_of[name](m)
            mean_text = f"{mean:9.4f}" if mean < 10 else f"{mean:9.0f}"  # heavy tail at m_new = k: few digits
            row.append(f"{med:8.5f} / {mean_text} / " + ("    -  " if np.isnan(th) else f"{th:7.5f}"))
        fedavg = f"{float(res.median('FedAvg')[j]):8.5f}, {float(res.median('FedAvg, unscaled start')[j]):6.3f}"
        lines.append(f"{m:>5} | {row[0]:>30} | {row[1]:>34} | {fedavg}")
    return "\n".join(lines)


def quoted_numbers(res: Fig4Result, cfg: Fig4Settings, eps: dict) -> dict:
    """The numbers the prose quotes, rounded as it shows them, by glue name (without the
    ``rep-new-`` prefix): the energy FedRep's and FedAvg's column spaces miss, the range of
    their distances to B_*, how many runs from the unscaled start fail (distance above 0.5) of
    how many, and the condition numbers of the failed and of the scaled runs."""
    failed = res.dist["FedAvg, unscaled start"] > 0.5
    return {"eps-fedrep": float(f"{eps['FedRep']:.1e}"), "eps-fedavg": float(f"{eps['FedAvg']:.1e}"),
            "fedavg-dist-min": round(float(res.dist["FedAvg"].min()), 3),
            "fedavg-dist-max": round(float(res.dist["FedAvg"].max()), 3),
            "fedrep-dist-max": round(float(res.dist["FedRep"].max()), 3),
            "unscaled-fail": int(failed.sum()), "seeds": cfg.seeds,
            "unscaled-cond": round(float(res.cond["FedAvg, unscaled start"][failed].median())),
            "fedavg-cond": round(float(res.cond["FedAvg"].max()), 2)}


def plot_new_clients(res: Fig4Result, cfg: Fig4Settings, theory_of: dict):
    """Fig. 4: the new clients' median error against their samples m_new for every method, with
    the predictions of ``theory_of`` and the lines m_new = k and d. Returns the figure."""
    import matplotlib.pyplot as plt

    m_new = np.array(cfg.m_news)

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    colors = {"FedRep": COLORS["FedRep"], "FedAvg": COLORS["FedAvg"], "FedAvg, unscaled start": COLORS["FedAvg"],
              "local only": COLORS["local only"], "true representation": COLORS["true representation"]}
    labels = {"FedAvg": r"FedAvg, $B_0 = Q/\sqrt{\alpha}$", "FedAvg, unscaled start": r"FedAvg, $B_0 = Q$",
              "true representation": "true representation (oracle)"}
    for name in FIG4_METHODS:
        ax.plot(m_new, to_numpy(res.median(name)), marker="s" if name.startswith("FedAvg") else "o", ms=4,
                color=colors[name], ls=":" if name == "FedAvg, unscaled start" else "-", label=labels.get(name, name))
    grid = np.arange(1, m_new.max() + 1)
    ax.plot(grid, [theory_of["FedRep"](m) for m in grid], color=colors["FedRep"], ls="--", lw=1,
            label="FedRep, proposition")
    ax.plot(grid, [theory_of["local only"](m) for m in grid], color=colors["local only"], ls="--", lw=1,
            label="local only, closed form")
    for x, text in ((cfg.k, "k"), (cfg.d, "d")):
        ax.axvline(x, color="k", lw=0.6, ls=":")
        ax.text(x, 3.0, f" {text}", fontsize=9)
    ax.set(yscale="log", xlabel=r"samples of the new client $m_{new}$",
           ylabel=r"$\|\theta - \theta_*\|^2$ (median over new clients)", ylim=(1e-5, 10))
    legend_outside(ax, below=True, ncol=2)
    plt.tight_layout()
    return fig
