"""ARUBA's learning rate on a small network: few-shot sinusoid regression (book 3.5).

The blog of Khodak, Balcan and Talwalkar (2019) meta-learns, with Reptile, an initialisation
and a per-coordinate learning rate for a convolutional network and reports that the learned
rates are smaller for the lower layers than for the classification head. This driver repeats
the experiment on a CPU scale, on the sinusoid family of Finn et al. (2017):

- task: y = a sin(x - b) with amplitude a ~ U[0.1, 5] and phase b ~ U[0, pi]; x ~ U[-5, 5];
  ``shots`` support points for adaptation, ``query`` points to measure the adapted model;
- model: an MLP 1 -> hidden -> hidden -> 1 with ReLU; a batch of tasks carries its own copy of
  the parameters (leading axis), so every task adapts at once with batched matrix products;
- within-task learner: ``inner_steps`` full-batch gradient steps on the mean squared error of
  the support set, with one learning rate per parameter tensor (the six groups W1, b1, W2, b2,
  W3, b3); the last iterate theta_hat_t is the task's model;
- meta-learner (Reptile with ARUBA, blog last section): phi <- phi + beta_k (mean theta_hat - phi)
  with beta_k decaying linearly from ``meta_step`` to 0, and for each group g
  eta_g = sqrt((B_g + eps_t) / (G_g + zeta_t)) with B_g = 1/2 sum over past tasks of
  ||phi_g - theta_hat_g||^2 and G_g = the sum of their squared gradients (all steps, all
  coordinates of the group), t = number of tasks seen.

Smoothing (the blog leaves it open; same form as :mod:`replearn.aruba`): zeta_t =
``smoothing`` * G_1g * t^``power`` with G_1g the mean squared-gradient sum of group g on the
first meta-batch (the network has no a priori gradient bound), and eps_t = eta0^2 zeta_t, so
the first meta-batch runs with eta0 in every group.

Held-out comparison (:func:`run`): on fresh tasks, adapt with the ``inner_steps`` steps from
(a) the meta-learned init with the ARUBA rates, (b) the same init with the best single rate of
``rate_grid`` (tuned on separate validation tasks), (c) a Reptile init meta-learned with a
fixed single rate eta0 and (d) the random initialisation with its best single rate; report
the query loss after every step.

Tiny batched products run much faster on one CPU thread than on several, so :func:`run`
sets ``torch.set_num_threads(1)`` for its duration on the CPU and restores the old value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..backend import DTYPE, SeedLike, make_generator
from ..checks import check_int, check_number, check_positive, check_positives
from ..profiles import Settings

GROUPS = ("W1", "b1", "W2", "b2", "W3", "b3")
LAYERS = {"layer 1": ("W1", "b1"), "layer 2": ("W2", "b2"), "head": ("W3", "b3")}


@dataclass(frozen=True)
class ArubaNeuralSettings(Settings):
    """Network width ``hidden``; ``shots`` support and ``query`` points per task; ``inner_steps``
    gradient steps per task; ``meta_iterations`` Reptile updates on ``meta_batch`` tasks each with
    outer step ``meta_step`` (linearly annealed to 0); initial inner rate ``eta0``; ARUBA smoothing
    constants; ``eval_tasks`` held-out (and as many validation) tasks; the single-rate grid."""

    hidden: int = 40
    shots: int = 10
    query: int = 50
    inner_steps: int = 5
    meta_iterations: int = 1500
    meta_batch: int = 10
    meta_step: float = 0.5
    eta0: float = 0.01
    smoothing: float = 1.0
    power: float = 0.4
    eval_tasks: int = 500
    rate_grid: tuple = (0.001, 0.003, 0.01, 0.02, 0.03, 0.05, 0.1)
    seed: int = 0

    @classmethod
    def paper(cls):
        """Longer meta-training and more held-out tasks (Finn et al. 2017: 70k iterations of
        25 tasks; a CPU-feasible fraction of it)."""
        return cls(meta_iterations=10000, meta_batch=25, eval_tasks=2000)

    def validate(self) -> None:
        super().validate()
        for name in ("hidden", "shots", "query", "inner_steps", "meta_iterations", "meta_batch", "eval_tasks"):
            check_int(getattr(self, name), name, 1)
        for name in ("meta_step", "eta0", "smoothing"):
            check_positive(getattr(self, name), name)
        check_number(self.power, "power (o(t) smoothing)", low=0.0, high=1.0, high_open=True)
        check_positives(self.rate_grid, "rate_grid")


# --------------------------------------------------------------------------------------------
# tasks and model


@dataclass(frozen=True)
class SinusoidTasks:
    """A batch of sinusoid tasks: support (n, shots, 1), query (n, query, 1), amplitude, phase."""

    x_support: torch.Tensor
    y_support: torch.Tensor
    x_query: torch.Tensor
    y_query: torch.Tensor
    amplitude: torch.Tensor
    phase: torch.Tensor


def sample_sinusoids(n: int, shots: int, query: int, *, seed: SeedLike = 0) -> SinusoidTasks:
    """n tasks y = a sin(x - b), a ~ U[0.1, 5], b ~ U[0, pi], x ~ U[-5, 5] (Finn et al. 2017)."""
    if not all(isinstance(v, int) and v >= 1 for v in (n, shots, query)):
        raise ValueError(f"n, shots and query must be integers >= 1, got {n!r}, {shots!r}, {query!r}")
    gen = make_generator(seed)
    a = 0.1 + 4.9 * torch.rand(n, 1, 1, generator=gen, dtype=DTYPE)
    b = math.pi * torch.rand(n, 1, 1, generator=gen, dtype=DTYPE)
    xs = -5 + 10 * torch.rand(n, shots, 1, generator=gen, dtype=DTYPE)
    xq = -5 + 10 * torch.rand(n, query, 1, generator=gen, dtype=DTYPE)
    return SinusoidTasks(xs, a * torch.sin(xs - b), xq, a * torch.sin(xq - b), a.flatten(), b.flatten())


def init_params(hidden: int = 40, *, seed: SeedLike = 0) -> dict:
    """PyTorch's default (uniform fan-in) initialisation of the MLP 1 -> hidden -> hidden -> 1."""
    gen = make_generator(seed)
    shapes = {"W1": (1, hidden), "b1": (hidden,), "W2": (hidden, hidden), "b2": (hidden,),
              "W3": (hidden, 1), "b3": (1,)}
    fan_in = {"W1": 1, "b1": 1, "W2": hidden, "b2": hidden, "W3": hidden, "b3": hidden}
    return {name: (2 * torch.rand(*shape, generator=gen, dtype=DTYPE) - 1) / math.sqrt(fan_in[name])
            for name, shape in shapes.items()}


def forward(params: dict, x: torch.Tensor) -> torch.Tensor:
    """The MLP on a batch of tasks: params with a leading task axis, x (n, points, 1)."""
    h = torch.relu(torch.baddbmm(params["b1"].unsqueeze(1), x, params["W1"]))
    h = torch.relu(torch.baddbmm(params["b2"].unsqueeze(1), h, params["W2"]))
    return torch.baddbmm(params["b3"].unsqueeze(1), h, params["W3"])


def task_losses(params: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean squared error of every task, shape (n,)."""
    return (forward(params, x) - y).pow(2).mean((1, 2))


def _rates(eta, n: int) -> dict:
    """A learning rate per group, as (n, 1, ...) broadcastable tensors (number or dict)."""
    if not isinstance(eta, dict):
        eta = {g: float(eta) for g in GROUPS}
    out = {}
    for g in GROUPS:
        e = torch.as_tensor(eta[g], dtype=DTYPE)
        if not bool(torch.isfinite(e).all()) or not bool((e > 0).all()):
            raise ValueError(f"learning rates must be positive and finite, got {eta[g]!r} for {g}")
        out[g] = e
    return out


def adapt(phi: dict, tasks: SinusoidTasks, eta, steps: int, *, record: bool = False):
    """``steps`` gradient steps on each task's support MSE from the init ``phi`` (unbatched
    tensors) with rate ``eta`` (a number or one per group). Returns the adapted parameters
    (batched), the squared-gradient sums per group (n,) and, with ``record``, the query losses
    after 0..steps steps (steps + 1, n). Raises ValueError when the iterates blow up."""
    n = tasks.x_support.shape[0]
    rates = _rates(eta, n)
    theta = {g: p.unsqueeze(0).expand(n, *p.shape).clone() for g, p in phi.items()}
    grad_sq = {g: torch.zeros(n, dtype=DTYPE) for g in GROUPS}
    curve = []
    for s in range(steps + 1):
        if record:
            with torch.no_grad():
                curve.append(task_losses(theta, tasks.x_query, tasks.y_query))
        if s == steps:
            break
        leaves = {g: t.requires_grad_(True) for g, t in theta.items()}
        loss = task_losses(leaves, tasks.x_support, tasks.y_support).sum()
        grads = torch.autograd.grad(loss, list(leaves.values()))
        with torch.no_grad():
            theta = {}
            for (g, p), grad in zip(leaves.items(), grads):
                grad_sq[g] = grad_sq[g] + grad.pow(2).flatten(1).sum(1)
                theta[g] = p - rates[g] * grad
    final = {g: t.detach() for g, t in theta.items()}
    if not all(bool(torch.isfinite(t).all()) and float(t.abs().max()) < 1e6 for t in final.values()):
        raise ValueError("within-task gradient descent diverged: the learning rate is too large")
    return final, grad_sq, (torch.stack(curve) if record else None)


# --------------------------------------------------------------------------------------------
# meta-training


@dataclass(frozen=True)
class MetaTraining:
    """A meta-trained init ``phi`` (dict of tensors), the final rates ``eta`` per group, and the
    rate history ``rates`` (meta_iterations, 6) in the order of :data:`GROUPS`."""

    phi: dict
    eta: dict
    rates: torch.Tensor


def reptile(cfg: ArubaNeuralSettings, *, learn_rate: bool = True, seed: SeedLike = 0) -> MetaTraining:
    """Reptile over ``meta_iterations`` meta-batches; with ``learn_rate`` the inner rates are
    ARUBA's per-group rates (module docstring), otherwise the fixed rate ``eta0``."""
    gen = make_generator(seed)
    phi = init_params(cfg.hidden, seed=gen)
    B = {g: torch.zeros((), dtype=DTYPE) for g in GROUPS}
    G = {g: torch.zeros((), dtype=DTYPE) for g in GROUPS}
    scale = None
    eta = {g: cfg.eta0 for g in GROUPS}
    history = []
    for k in range(cfg.meta_iterations):
        tasks = sample_sinusoids(cfg.meta_batch, cfg.shots, 1, seed=gen)
        t = k * cfg.meta_batch + 1  # tasks seen, counting the current one
        if learn_rate and scale is not None:
            eta = {}
            for g in GROUPS:
                zeta = cfg.smoothing * scale[g] * t ** cfg.power
                eta[g] = float(((B[g] + cfg.eta0 ** 2 * zeta) / (G[g] + zeta)).sqrt())
        history.append([eta[g] for g in GROUPS])
        last, grad_sq, _ = adapt(phi, tasks, eta, cfg.inner_steps)
        if learn_rate:
            if scale is None:
                scale = {g: float(grad_sq[g].mean()) for g in GROUPS}
            for g in GROUPS:
                B[g] = B[g] + 0.5 * (last[g] - phi[g]).pow(2).flatten(1).sum(1).sum()
                G[g] = G[g] + grad_sq[g].sum()
        beta = cfg.meta_step * (1 - k / cfg.meta_iterations)
        phi = {g: phi[g] + beta * (last[g].mean(0) - phi[g]) for g in GROUPS}
    return MetaTraining(phi, dict(eta), torch.tensor(history, dtype=DTYPE))


def layer_rates(eta: dict) -> dict:
    """The rates averaged over the weight and bias of each layer ({"layer 1", "layer 2", "head"})."""
    return {layer: sum(eta[g] for g in groups) / len(groups) for layer, groups in LAYERS.items()}


def tune_rate(phi: dict, tasks: SinusoidTasks, grid, steps: int) -> tuple[float, dict]:
    """The rate of ``grid`` with the lowest mean query loss after ``steps`` steps (rates that
    diverge count as infinitely bad); also returns the loss of every rate."""
    scores = {}
    for rate in grid:
        try:
            _, _, curve = adapt(phi, tasks, float(rate), steps, record=True)
            scores[float(rate)] = float(curve[-1].mean())
        except ValueError:
            scores[float(rate)] = math.inf
    best = min(scores, key=scores.get)
    if not math.isfinite(scores[best]):
        raise ValueError("every rate of the grid diverged")
    return best, scores


@dataclass(frozen=True)
class ArubaNeuralResult:
    """``aruba`` and ``fixed`` meta-trainings (ARUBA rates / fixed eta0); ``layer_rates`` of
    ARUBA; the held-out query-loss curves ``curves[method]`` (inner_steps + 1, eval_tasks);
    the tuned single rates ``tuned[method]``; the random ``initial`` parameters."""

    aruba: MetaTraining
    fixed: MetaTraining
    layer_rates: dict
    curves: dict
    tuned: dict
    initial: dict

    def final_loss(self) -> dict:
        """Mean held-out query loss after the last adaptation step, per method."""
        return {name: float(c[-1].mean()) for name, c in self.curves.items()}


def run(cfg: ArubaNeuralSettings) -> ArubaNeuralResult:
    """Meta-train with ARUBA rates and with a fixed rate, then compare adaptation on held-out
    tasks (module docstring). Deterministic for a given ``cfg.seed``; CPU only."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        aruba = reptile(cfg, learn_rate=True, seed=cfg.seed)
        fixed = reptile(cfg, learn_rate=False, seed=cfg.seed)
        initial = init_params(cfg.hidden, seed=make_generator(cfg.seed))
        valid = sample_sinusoids(cfg.eval_tasks, cfg.shots, cfg.query, seed=cfg.seed + 1)
        test = sample_sinusoids(cfg.eval_tasks, cfg.shots, cfg.query, seed=cfg.seed + 2)
        steps = cfg.inner_steps
        tuned = {"meta init + single tuned rate": tune_rate(aruba.phi, valid, cfg.rate_grid, steps)[0],
                 "random init + single tuned rate": tune_rate(initial, valid, cfg.rate_grid, steps)[0]}
        plans = {"meta init + ARUBA rates": (aruba.phi, aruba.eta),
                 "meta init + single tuned rate": (aruba.phi, tuned["meta init + single tuned rate"]),
                 "Reptile init (fixed rate)": (fixed.phi, cfg.eta0),
                 "random init + single tuned rate": (initial, tuned["random init + single tuned rate"])}
        curves = {name: adapt(phi, test, eta, steps, record=True)[2] for name, (phi, eta) in plans.items()}
    finally:
        torch.set_num_threads(threads)
    return ArubaNeuralResult(aruba, fixed, layer_rates(aruba.eta), curves, tuned, initial)
