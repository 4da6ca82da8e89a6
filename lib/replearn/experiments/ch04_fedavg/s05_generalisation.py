"""Book 4.5: generalisation without convergence (Collins et al. 2022, Sec. 5.1 and Fig. 3).

One run draws an instance of the multi-task linear representation model as in the paper's
Sec. 5.1: B_* Haar-random in O^{d x k} (orthogonalised Gaussian) and ``M`` client heads with
i.i.d. N(0, 1) entries. FedAvg with ``tau`` local steps and D-GD (tau = 1) are trained on the
clients' population losses with full participation, from the same B_0 (orthonormal columns
scaled by 1/sqrt(alpha), so that alpha B_0^T B_0 = I) and w_0 = 0, with the same step size.

**Left panel.** Along both trajectories :func:`replearn.theory.linear_federated.global_gradient_norms`
records the norm of the gradient of the global objective with equal weights (Collins et al.
2022, eq. (6), written with the book's 1/2: (1/M) sum_i 1/2 ||B w - B_* w_*_i||^2), from the
mean regressor v = B_* wbar_* alone (book 1.2, Prop. ``arm-dyn-prop-avg``).

**Right panel.** A new client M+1 has head w_*_{M+1} ~ N(0, I_k) (drawn like the training
heads), ``n`` samples x ~ N(0, I_d) and y = <B_* w_*_{M+1}, x> + zeta, zeta ~ N(0, noise_std^2)
(the paper: variance 0.01). Each method's final global model (B_T, w_T) is fine-tuned by
``ft_steps`` full-batch GD steps jointly in (B, w) (:func:`replearn.theory.linear.finetune_joint`, the
batched form of :func:`replearn.theory.linear.finetune_gd` with ``update_representation=True``) and the
error ||B w - B_* w_*_{M+1}||^2 is recorded. The step size of a fine-tuning problem is
:func:`replearn.theory.linear.stable_finetune_step`: a fraction ``ft_lr`` of the inverse of the
curvature of the fine-tuning loss at the start. For comparison the
driver also fits the head alone by exact least squares on the frozen B_T
(:func:`replearn.theory.linear.finetune_head`) and on B_* (the oracle). All runs and new clients of
one sample size are fine-tuned in one batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from replearn.theory import linear_federated, linalg, linear
from replearn.backend import DTYPE, default_device, derive_seed, make_generator, randn
from replearn.checks import check_int
from replearn.settings import Each, Ge, Gt, Lt, Profile, Settings
from replearn.theory.linear import expected_head_error
from replearn.book.plotting import COLORS

METHODS = ("FedAvg", "D-GD")
HEAD_ONLY = {"FedAvg": "FedAvg, head only", "D-GD": "D-GD, head only"}
ORACLE = "true representation"
ERRORS = METHODS + tuple(HEAD_ONLY.values()) + (ORACLE,)


@dataclass(frozen=True)
class GeneralisationSettings(Settings):
    """Problem (``d``, ``k``, ``M`` training clients), training (step ``alpha``, FedAvg's
    ``tau`` local steps, ``rounds`` communication rounds for both methods), the new clients
    (label ``noise_std``, the sample sizes ``ns``, ``runs`` independent training instances and
    ``clients`` new clients per run and sample size), fine-tuning (``ft_steps`` GD steps with
    step size the fraction ``ft_lr`` of :func:`replearn.theory.linear.stable_finetune_step`) and the seed."""

    WORDS = {"M": "training clients M", "alpha": "step size α", "tau": "FedAvg's local steps τ",
             "rounds": "rounds (both methods)", "ns": "new clients' sample sizes n",
             "clients": "new clients per run and sample size", "ft_steps": "fine-tuning: gradient steps",
             "ft_lr": "fine-tuning: step as a fraction of the stability limit"}

    d: int = 50
    k: Annotated[int, Ge(1)] = 5
    M: Annotated[int, Ge(1)] = 20
    alpha: Annotated[float, Gt(0)] = 0.2
    tau: Annotated[int, Ge(2, why="FedAvg's local steps; tau = 1 is D-GD itself")] = 2
    rounds: Annotated[int, Ge(1)] = 5000
    noise_std: Annotated[float, Ge(0)] = 0.1
    ns: Annotated[tuple[int, ...], Each(Ge(1), entry="every n in ns (samples of the new client)")] = (
        3, 10, 20, 40, 80)
    runs: Annotated[int, Ge(1)] = 5
    clients: Annotated[int, Ge(1)] = 20
    ft_steps: Annotated[int, Ge(1)] = 200
    ft_lr: Annotated[float, Gt(0, why="a fraction of the fine-tuning stability bound"), Lt(2)] = 0.25
    seed: int = 0

    PAPER = Profile({"d": 100, "k": 5, "M": 40, "rounds": 10000, "ns": (3, 10, 20, 50, 100, 200), "runs": 10,
                     "clients": 10},
                    doc="Collins et al. (2022), Sec. 5.1: d = 100, k = 5, M = 40, tau = 2, 10 runs, tau' = 200 "
                        "fine-tuning steps with batch size b = n. The source does not state the grid of n of "
                        "Fig. 3 (right) nor the step sizes; we take n from 3 to 2d.")

    def validate(self) -> None:
        """The relation between the fields (each field's own range is beside it): k < d."""
        super().validate()
        check_int(self.d, "d (needs k < d: a representation that can miss directions)", self.k + 1)


@dataclass(frozen=True)
class GeneralisationResult:
    """``rounds`` (T + 1,); per method: gradient norms ``grad_norm[method]`` (runs, T + 1) of
    the global objective, final distances ``dist[method]`` (runs,) = dist(B_T, B_*) and
    head-only floors ``floor[method]`` (runs,) = ||(I - P_{B_T}) B_*||_F^2 (book 1.4,
    Prop. ``arm-ft-prop-floor``);
    new-client errors ``errors[name]`` (N, runs, clients) at the sample sizes ``ns`` (N,) for
    the names in :data:`ERRORS`, and the fine-tuning step sizes ``steps[method]`` (N, runs,
    clients) used by joint GD."""

    rounds: torch.Tensor
    grad_norm: dict
    dist: dict
    floor: dict
    ns: torch.Tensor
    errors: dict
    steps: dict

    def mean(self, name: str) -> torch.Tensor:
        """Error averaged over runs and new clients at every n, shape (N,)."""
        return self.errors[name].mean(dim=(1, 2))

    def run_means(self, name: str) -> torch.Tensor:
        """Error averaged over the new clients of each run, shape (N, runs)."""
        return self.errors[name].mean(dim=2)


def train(cfg: GeneralisationSettings, run: int, device=None) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """Instance ``run``: B_* (d, k), heads W (M, k) and the trajectories {method: Trajectory} of
    FedAvg (tau local steps) and D-GD on the population losses from the same (B_0, w_0 = 0)."""
    device = default_device() if device is None else torch.device(device)
    gen = make_generator(derive_seed(cfg.seed, run, 0))
    Bstar = linear.ground_truth_representation(cfg.d, cfg.k, gen).to(device)
    W = randn(cfg.M, cfg.k, generator=gen, device=device)
    B0 = linalg.random_orthonormal(cfg.d, cfg.k, gen).to(device) / cfg.alpha**0.5
    w0 = torch.zeros(cfg.k, dtype=DTYPE, device=device)
    tasks = linear.population_tasks(Bstar, W)
    trajectories = {
        "FedAvg": linear_federated.fedavg(B0, w0, tasks, alpha=cfg.alpha, tau=cfg.tau, rounds=cfg.rounds),
        "D-GD": linear_federated.dgd(B0, w0, tasks, alpha=cfg.alpha, rounds=cfg.rounds),
    }
    return Bstar, W, trajectories


def new_clients(Bstar: torch.Tensor, n: int, count: int, noise_std: float, seed: int):
    """``count`` new clients: regressors theta (count, d) = B_* w with w ~ N(0, I_k), and n
    samples each, X (count, n, d) standard Gaussian and y = X theta + N(0, noise_std^2)."""
    gen = make_generator(seed)
    d, k = Bstar.shape
    theta = randn(count, k, generator=gen, device=Bstar.device) @ Bstar.mT
    X = randn(count, n, d, generator=gen, device=Bstar.device)
    y = (X @ theta.unsqueeze(-1)).squeeze(-1) + noise_std * randn(count, n, generator=gen, device=Bstar.device)
    return theta, X, y


def run(cfg: GeneralisationSettings, device=None) -> GeneralisationResult:
    """Train FedAvg and D-GD on ``cfg.runs`` instances, record the gradient norms of the global
    objective, then fine-tune both final models on ``cfg.clients`` new clients per run and per
    n in ``cfg.ns`` (joint GD and head-only least squares) and on B_* (oracle)."""
    device = default_device() if device is None else torch.device(device)
    grad_norm = {m: [] for m in METHODS}
    dist = {m: [] for m in METHODS}
    floor = {m: [] for m in METHODS}
    finals = {m: ([], []) for m in METHODS}
    Bstars = []
    for r in range(cfg.runs):
        Bstar, W, trajectories = train(cfg, r, device)
        v = Bstar @ W.mean(0)
        Bstars.append(Bstar)
        for m, tr in trajectories.items():
            grad_norm[m].append(linear_federated.global_gradient_norms(tr, v))
            dist[m].append(linalg.principal_angle_distance(tr.B[-1], Bstar))
            floor[m].append(linear.head_error_floor(tr.B[-1], Bstar))
            finals[m][0].append(tr.B[-1])
            finals[m][1].append(tr.w[-1])
    c = cfg.clients
    Bstar_b = torch.stack(Bstars).repeat_interleave(c, dim=0)                     # (runs * c, d, k)
    models = {m: (torch.stack(Bs).repeat_interleave(c, dim=0), torch.stack(ws).repeat_interleave(c, dim=0))
              for m, (Bs, ws) in finals.items()}
    errors = {name: [] for name in ERRORS}
    steps = {m: [] for m in METHODS}
    for n in cfg.ns:
        data = [new_clients(Bstars[r], n, c, cfg.noise_std, derive_seed(cfg.seed, r, 1, n)) for r in range(cfg.runs)]
        theta, X, y = (torch.cat(parts) for parts in zip(*data))
        for m, (B, w) in models.items():
            lr = linear.stable_finetune_step(B, w, X, cfg.ft_lr)
            B_ft, w_ft = linear.finetune_joint(B, w, X, y, lr=lr, steps=cfg.ft_steps)
            errors[m].append(linear.excess_risk(B_ft, w_ft, theta))
            w_head = linear.finetune_head(B, X, y)
            errors[HEAD_ONLY[m]].append(linear.excess_risk(B, w_head, theta))
            steps[m].append(lr)
        errors[ORACLE].append(linear.excess_risk(Bstar_b, linear.finetune_head(Bstar_b, X, y), theta))
    shape = (len(cfg.ns), cfg.runs, c)
    return GeneralisationResult(
        rounds=torch.arange(cfg.rounds + 1),
        grad_norm={m: torch.stack(g).cpu() for m, g in grad_norm.items()},
        dist={m: torch.stack(x).cpu() for m, x in dist.items()},
        floor={m: torch.stack(x).cpu() for m, x in floor.items()},
        ns=torch.tensor(cfg.ns),
        errors={name: torch.stack(e).reshape(shape).cpu() for name, e in errors.items()},
        steps={m: torch.stack(s).reshape(shape).cpu() for m, s in steps.items()})


# --------------------------------------------------------------------------- what the page shows

#: The rows of the page's table of new-client errors, in its column order.
TABLE = ("FedAvg", "D-GD", "FedAvg, head only", "D-GD, head only", "true representation")


def gradient_table(res: GeneralisationResult, cfg: GeneralisationSettings) -> str:
    """The gradient norm of the global objective in the runs of ``res``, as lines of text: at the
    start, whether it fell by six orders of magnitude, FedAvg's final one per run, and the final
    distance to B_* per run."""
    g = res.grad_norm

    def listed(xs, digits: int) -> str:
        return ", ".join(f"{float(x):.{digits}f}" for x in xs)

    lines = [f"runs: {cfg.runs}, rounds: {cfg.rounds}, step alpha = {cfg.alpha}"]
    for m in METHODS:
        below = bool((g[m][:, -1] / g[m][:, 0]).max() < 1e-6)
        lines.append(f"{m:6s}: median |grad| at t = 0: {float(g[m][:, 0].median()):.3f}; final/initial |grad| "
                     f"below 1e-6 {'in every run' if below else 'not in every run'}")
    lines += [f"FedAvg: final |grad| per run: {listed(g['FedAvg'][:, -1], 3)}",
              f"dist(B_T, B*) per run:  FedAvg {listed(res.dist['FedAvg'], 4)}",
              f"                        D-GD   {listed(res.dist['D-GD'], 4)}"]
    return "\n".join(lines)


def error_table(res: GeneralisationResult, cfg: GeneralisationSettings) -> str:
    """The new clients' errors as lines of text: the fine-tuning, the head-only floors, and per
    number of samples n the mean error of every row of :data:`TABLE`."""
    lines = [f"fine-tuning: {cfg.ft_steps} joint GD steps, step = {cfg.ft_lr} / lambda; "
             f"{cfg.runs} runs x {cfg.clients} new clients per n; noise std {cfg.noise_std}",
             f"head-only floor ||(I - P_B) B*||_F^2, mean over runs: FedAvg {float(res.floor['FedAvg'].mean()):.4f}, "
             f"D-GD {float(res.floor['D-GD'].mean()):.3f} (k = {cfg.k})",
             f"{'n':>5s}" + "".join(f"{name:>21s}" for name in TABLE)]
    for i, n in enumerate(cfg.ns):
        lines.append(f"{n:5d}" + "".join(f"{float(res.mean(name)[i]):21.4f}" for name in TABLE))
    return "\n".join(lines)


def head_formula(res: GeneralisationResult, cfg: GeneralisationSettings) -> dict[str, torch.Tensor]:
    """Per method, the head-only error that the formula of Prop. arm-ft-prop-floor predicts at
    each n of ``cfg.ns`` from each run's floor, averaged over the runs."""
    return {m: torch.tensor([[expected_head_error(n, cfg.k, cfg.noise_std**2, float(F)) for F in res.floor[m]]
                             for n in cfg.ns]).mean(1) for m in METHODS}


def plot_generalisation(res: GeneralisationResult, cfg: GeneralisationSettings):
    """Left: the gradient norm of the global objective over the rounds (median and range over
    runs); right: the new clients' error after fine-tuning against their number of samples, for
    each method fine-tuned fully and head only, the oracle B_* and predicting zero. Returns the
    figure."""
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10.0, 3.8))
    t = res.rounds.numpy()
    labels = {"FedAvg": f"FedAvg, τ = {cfg.tau}", "D-GD": "D-GD"}
    for m in METHODS:
        gm = res.grad_norm[m].clamp_min(1e-17)
        ax1.semilogy(t, gm.median(0).values, color=COLORS[m], label=labels[m])
        ax1.fill_between(t, gm.amin(0), gm.amax(0), color=COLORS[m], alpha=0.2, linewidth=0)
    ax1.set(xlabel="communication round t", ylabel=r"$\|\nabla \bar f(B_t, w_t)\|$",
            title="gradient of the global objective")
    ax1.legend()
    ns = res.ns.numpy()
    for m in METHODS:
        ax2.loglog(ns, res.mean(m), "o-", color=COLORS[m], label=f"{labels[m]} + fine-tuning")
        ax2.loglog(ns, res.mean(HEAD_ONLY[m]), "s--", color=COLORS[m], alpha=0.6, label=f"{m}, head only")
    ax2.loglog(ns, res.mean(ORACLE), "^:", color=COLORS["true representation"], label="B* (oracle), head only")
    ax2.axhline(cfg.k, color="grey", lw=1, label="predict 0")
    ax2.axvline(cfg.d, color="k", ls=":", lw=1)
    ax2.set_xticks(ns, [str(n) for n in ns])
    ax2.set_xticks([], minor=True)
    ax2.set(xlabel="samples n of the new client", ylabel=r"$\|B w - B_* w_{*,M+1}\|^2$",
            title="new-client error after fine-tuning")
    ax2.legend(fontsize=7)
    plt.tight_layout()
    return fig
