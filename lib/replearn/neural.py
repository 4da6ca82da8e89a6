"""Fast federated simulation of neural networks: FedAvg, D-SGD, FedRep, FedPer, LG-FedAvg,
local-only training and fine-tuning, all on one round structure.

Every algorithm is a choice of three things (Collins et al., 2021, Alg. 1 and their baselines;
Collins et al., 2022, eqs. (2)-(3)):

- the **shared** parameters, averaged by the server with the clients' sample counts as
  weights, ``theta <- sum_i n_i theta_i / sum_i n_i`` over the participating clients (eq. 3);
- the **local** parameters, kept per client across rounds (FedRep's and FedPer's heads,
  LG-FedAvg's bodies, everything for local-only training);
- the **local phases**: which parameters are trained, for how many steps or epochs. FedRep
  trains the head with the body frozen, then the body with the head frozen (the authors' code:
  10 head epochs, then the representation epochs); FedAvg, FedPer, LG-FedAvg and local-only
  train everything jointly.

Local training is SGD as in ``torch.optim.SGD`` (momentum without dampening, weight decay
added to the gradient), with a fresh momentum buffer for every phase of every round, as the
authors' code builds a new optimiser for each local update. A phase is either ``tau`` steps
of ``batch_size`` samples (the FedAvg-FT paper's tau local steps; the samples come from
successive random permutations of the client's data) or ``E`` epochs over a fresh random
permutation in batches of ``batch_size`` with a smaller last batch (like a ``DataLoader``
with ``shuffle=True``, ``drop_last=False``).

Speed: the clients' images live as tensors on the device; there is no ``DataLoader``, no
per-sample augmentation (:func:`replearn.data.augment` works on whole batches) and no
``deepcopy`` per client: each client's parameters are loaded into one working copy of the
model, updated in place with foreach kernels, and averaged as tensors. Clients with the same
batch schedule can instead be trained together with ``torch.func.vmap`` (``vmap_clients > 1``:
stacked parameters, one batched forward/backward for the group), meant for GPUs; on a CPU the
sequential path is as fast or faster. On a 2-core CPU the training is compute-bound
(``bench/neural_rounds.py``: about a third of the GEMM peak, like the reference loop).

All random numbers (client selection, batches, augmentation) come from one CPU
``torch.Generator`` seeded with ``cfg.seed``, so a run is bit-for-bit reproducible on the CPU.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from .backend import default_device, make_generator

Params = dict[str, torch.Tensor]


# --------------------------------------------------------------------------------------------
# Client data


@dataclass(frozen=True)
class ClientData:
    """Per-client train and test tensors on one device: images float32 (n_i, C, H, W),
    already normalised, labels int64 (n_i,)."""

    x_train: tuple[torch.Tensor, ...]
    y_train: tuple[torch.Tensor, ...]
    x_test: tuple[torch.Tensor, ...]
    y_test: tuple[torch.Tensor, ...]

    def __post_init__(self):
        lists = (self.x_train, self.y_train, self.x_test, self.y_test)
        if len({len(t) for t in lists}) != 1 or not self.x_train:
            raise ValueError("x_train, y_train, x_test and y_test need one entry per client "
                             "(at least one client)")
        for i, (xa, ya, xb, yb) in enumerate(zip(*lists)):
            for x, y, split in ((xa, ya, "train"), (xb, yb, "test")):
                if x.ndim != 4 or x.dtype != torch.float32:
                    raise ValueError(f"client {i} {split} images must be float32 (n, C, H, W), got "
                                     f"{x.dtype} {tuple(x.shape)}; normalise uint8 images first")
                if y.shape != (x.shape[0],) or y.dtype != torch.int64:
                    raise ValueError(f"client {i} {split} labels must be int64 of shape ({x.shape[0]},)")
            if xa.shape[0] == 0:
                raise ValueError(f"client {i} has no training data; drop it or change the partition")

    @classmethod
    def from_partition(cls, x_train: torch.Tensor, y_train: torch.Tensor, train_parts: Sequence[torch.Tensor],
                       x_test: torch.Tensor, y_test: torch.Tensor, test_parts: Sequence[torch.Tensor], *,
                       dataset: str | None = None, device: torch.device | str | None = None) -> "ClientData":
        """Clients from whole arrays and index lists (one index tensor per client).

        uint8 images are normalised with :func:`replearn.data.normalise` (``dataset`` names
        the channel statistics, e.g. ``"cifar10"``); float images are taken as they are.
        """
        if len(train_parts) != len(test_parts):
            raise ValueError(f"{len(train_parts)} train index lists but {len(test_parts)} test index lists")
        device = torch.device(device) if device is not None else default_device()

        def prepare(x):
            if x.dtype == torch.uint8:
                if dataset is None:
                    raise ValueError("uint8 images need dataset= (e.g. 'cifar10') to pick the normalisation")
                from .data import normalise
                x = normalise(x, dataset)
            return x.to(device=device, dtype=torch.float32)

        def take(x, y, parts):
            xs, ys = [], []
            for idx in parts:
                idx = torch.as_tensor(idx, dtype=torch.int64)
                xs.append(prepare(x[idx]))
                ys.append(y[idx].to(device=device, dtype=torch.int64))
            return tuple(xs), tuple(ys)

        xtr, ytr = take(x_train, y_train, train_parts)
        xte, yte = take(x_test, y_test, test_parts)
        return cls(xtr, ytr, xte, yte)

    @property
    def n_clients(self) -> int:
        return len(self.x_train)

    @property
    def train_sizes(self) -> torch.Tensor:
        return torch.tensor([x.shape[0] for x in self.x_train], dtype=torch.int64)

    @property
    def test_sizes(self) -> torch.Tensor:
        return torch.tensor([x.shape[0] for x in self.x_test], dtype=torch.int64)

    @property
    def device(self) -> torch.device:
        return self.x_train[0].device

    def subset(self, clients: Sequence[int]) -> "ClientData":
        """The clients with the given indices, in that order."""
        idx = list(clients)
        return ClientData(*(tuple(part[i] for i in idx) for part in
                            (self.x_train, self.y_train, self.x_test, self.y_test)))

    def take_train(self, n: int, *, seed: int) -> "ClientData":
        """Each client keeps ``n`` random training samples (all if it has fewer); for
        fine-tuning with a given number of samples per client."""
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        gen = make_generator(seed)
        xs, ys = [], []
        for x, y in zip(self.x_train, self.y_train):
            keep = torch.randperm(x.shape[0], generator=gen)[:n].to(x.device)
            xs.append(x[keep])
            ys.append(y[keep])
        return ClientData(tuple(xs), tuple(ys), self.x_test, self.y_test)


# --------------------------------------------------------------------------------------------
# Configuration and results


@dataclass(frozen=True)
class TrainConfig:
    """Hyper-parameters shared by all algorithms (defaults: the FedRep authors' code: SGD,
    lr 0.01, momentum 0.5, batch 10, 10 head epochs; one representation epoch).

    ``local_steps`` (tau) overrides ``local_epochs`` when given; likewise ``head_steps`` for
    FedRep's head phase. ``participation`` is the fraction r of clients sampled per round
    (``max(1, round(r M))`` clients, uniformly without replacement). ``last_rounds``: the
    reported accuracy is the mean over the last evaluated rounds (FedRep: final 10 rounds).
    ``vmap_clients``: how many clients with identical batch schedules are trained together
    with ``torch.func.vmap`` (1: one after another).
    """

    rounds: int = 10
    lr: float = 0.01
    momentum: float = 0.5
    weight_decay: float = 0.0
    batch_size: int = 10
    local_epochs: int = 1
    local_steps: int | None = None
    head_epochs: int = 10
    head_steps: int | None = None
    participation: float = 1.0
    augment: bool = False
    eval_every: int = 1
    last_rounds: int = 10
    vmap_clients: int = 1
    seed: int = 0

    def __post_init__(self):
        positive = dict(rounds=self.rounds, batch_size=self.batch_size, local_epochs=self.local_epochs,
                        eval_every=self.eval_every, last_rounds=self.last_rounds,
                        vmap_clients=self.vmap_clients)
        if self.local_steps is not None:
            positive["local_steps (tau)"] = self.local_steps
        if self.head_steps is not None:
            positive["head_steps"] = self.head_steps
        for name, value in positive.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if not isinstance(self.head_epochs, int) or self.head_epochs < 0:
            raise ValueError(f"head_epochs must be an int >= 0, got {self.head_epochs!r}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be positive, got {self.lr!r}")
        if not 0 <= self.momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum!r}")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay!r}")
        if not 0 < self.participation <= 1:
            raise ValueError(f"participation must be in (0, 1], got {self.participation!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {self.seed!r}")


@dataclass(frozen=True)
class Evaluation:
    """Per-client test accuracy and loss; ``average`` weights clients by test-set size."""

    accuracy: torch.Tensor
    loss: torch.Tensor
    test_sizes: torch.Tensor

    @property
    def average(self) -> float:
        w = self.test_sizes.to(self.accuracy.dtype)
        return float((w * self.accuracy).sum() / w.sum())


@dataclass(frozen=True)
class FedResult:
    """Outcome of a federated run.

    ``state``: the server's parameters (for names in ``local_names`` these are the values the
    clients started from); ``local``: per-client parameters stacked along a first client axis
    (empty when nothing is local); ``train_loss[t]``: the n_i-weighted mean minibatch loss of
    round t's local updates; ``test_accuracy[t]``: the average test accuracy after round t (NaN
    where not evaluated); ``participants[t]``: the clients sampled in round t.
    """

    algorithm: str
    state: Params
    local: Params
    shared_names: tuple[str, ...]
    local_names: tuple[str, ...]
    train_loss: torch.Tensor
    test_accuracy: torch.Tensor
    participants: tuple[tuple[int, ...], ...]
    final: Evaluation
    config: TrainConfig = field(repr=False)

    @property
    def accuracy(self) -> float:
        """Mean test accuracy over the last ``config.last_rounds`` evaluated rounds."""
        acc = self.test_accuracy[-self.config.last_rounds:]
        return float(acc[~torch.isnan(acc)].mean())

    def client_state(self, i: int) -> Params:
        """Client ``i``'s full parameters: shared ones from the server, local ones its own."""
        return {n: (self.local[n][i] if n in self.local else p) for n, p in self.state.items()}

    def load_into(self, model: nn.Module, client: int | None = None) -> nn.Module:
        """Copy the server's (``client=None``) or a client's parameters into ``model``."""
        params = self.state if client is None else self.client_state(client)
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(params[n])
        return model


# --------------------------------------------------------------------------------------------
# Batches, local SGD, evaluation


def _batches(n: int, batch_size: int, *, steps: int | None, epochs: int,
             generator: torch.Generator) -> list[torch.Tensor]:
    """Index batches (CPU) for one local phase: ``steps`` batches of min(batch_size, n) from
    successive permutations, or ``epochs`` permutations cut into batches (smaller last)."""
    if steps is None:
        out = []
        for _ in range(epochs):
            out.extend(torch.randperm(n, generator=generator).split(batch_size))
        return out
    b = min(batch_size, n)
    per_perm = n // b
    perms = [torch.randperm(n, generator=generator)[: per_perm * b] for _ in range(-(-steps // per_perm))]
    return list(torch.cat(perms).split(b)[:steps])


def _augment(x: torch.Tensor, cfg: "TrainConfig", generator: torch.Generator) -> torch.Tensor:
    if not cfg.augment:
        return x
    from .data import augment
    return augment(x.flatten(0, x.ndim - 4), generator).view_as(x)


class _Worker:
    """One working copy of the model, into which each client's parameters are loaded in turn
    (instead of a ``deepcopy`` per client)."""

    def __init__(self, model: nn.Module):
        self.model = copy.deepcopy(model)
        self.params = dict(self.model.named_parameters())

    def sgd(self, params: Params, trainable: Sequence[str], x: torch.Tensor, y: torch.Tensor,
            batches: Sequence[torch.Tensor], cfg: "TrainConfig",
            generator: torch.Generator) -> tuple[Params, torch.Tensor]:
        """SGD on one client with ``torch.optim.SGD`` semantics (momentum buffer = first
        gradient, then ``m * buf + g``; weight decay added to the gradient), in place on the
        working model with foreach kernels. Returns the trained parameters and the summed loss."""
        with torch.no_grad():
            for n, p in self.params.items():
                p.copy_(params[n])
                p.requires_grad_(n in trainable)
        tp = [self.params[n] for n in trainable]
        buf = None
        loss_sum = torch.zeros((), device=x.device)
        for idx in batches:
            idx = idx.to(x.device)
            for p in tp:
                p.grad = None
            loss = F.cross_entropy(self.model(_augment(x[idx], cfg, generator)), y[idx])
            loss.backward()
            with torch.no_grad():
                loss_sum += loss
                grads = [p.grad for p in tp]
                if cfg.weight_decay:
                    grads = torch._foreach_add(grads, tp, alpha=cfg.weight_decay)
                if cfg.momentum:
                    if buf is None:
                        buf = [g.clone() for g in grads]
                    else:
                        torch._foreach_mul_(buf, cfg.momentum)
                        torch._foreach_add_(buf, grads)
                    grads = buf
                torch._foreach_add_(tp, grads, alpha=-cfg.lr)
        return {n: self.params[n].detach().clone() for n in trainable}, loss_sum


def _loss_fn(model: nn.Module):
    def loss(train: Params, frozen: Params, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(functional_call(model, {**train, **frozen}, (x,)), y)
    return loss


def _sgd_vmap(model: nn.Module, params: Params, trainable: Sequence[str], xs: Sequence[torch.Tensor],
              ys: Sequence[torch.Tensor], batches: Sequence[Sequence[torch.Tensor]], cfg: "TrainConfig",
              generator: torch.Generator) -> tuple[Params, torch.Tensor]:
    """The same SGD for G clients at once with ``torch.func.vmap``: ``params`` are stacked
    along a client axis; ``batches[s][g]`` are client g's indices at step s (equal sizes)."""
    step = vmap(grad_and_value(_loss_fn(model)))
    train = {n: params[n] for n in trainable}
    frozen = {n: p for n, p in params.items() if n not in train}
    buf: Params = {}
    loss_sum = torch.zeros(len(xs), device=xs[0].device)
    for s, idx in enumerate(batches):
        xb = torch.stack([x[i.to(x.device)] for x, i in zip(xs, idx)])
        yb = torch.stack([y[i.to(y.device)] for y, i in zip(ys, idx)])
        grads, loss = step(train, frozen, _augment(xb, cfg, generator), yb)
        loss_sum += loss.detach()
        for n, g in grads.items():
            if cfg.weight_decay:
                g = g + cfg.weight_decay * train[n]
            if cfg.momentum:
                g = buf[n] = g if s == 0 else cfg.momentum * buf[n] + g
            train[n] = train[n] - cfg.lr * g
    return {**params, **train}, loss_sum


@torch.no_grad()
def evaluate(model: nn.Module, clients: ClientData, state: Params | None = None, local: Params | None = None,
             *, batch_size: int = 1000) -> Evaluation:
    """Per-client test accuracy and mean cross-entropy of ``model`` with parameters ``state``
    (default: the model's own), where client i uses ``local[name][i]`` for the names in
    ``local`` (personalised heads or bodies)."""
    params = dict(state) if state is not None else {n: p.detach() for n, p in model.named_parameters()}
    local = local or {}
    acc, loss = [], []
    for i, (x, y) in enumerate(zip(clients.x_test, clients.y_test)):
        p = {**params, **{n: v[i] for n, v in local.items()}}
        correct, total = 0.0, 0.0
        for xb, yb in zip(x.split(batch_size), y.split(batch_size)):
            out = functional_call(model, p, (xb,))
            correct += float((out.argmax(1) == yb).sum())
            total += float(F.cross_entropy(out, yb, reduction="sum"))
        n = max(x.shape[0], 1)
        acc.append(correct / n if x.shape[0] else float("nan"))
        loss.append(total / n if x.shape[0] else float("nan"))
    return Evaluation(torch.tensor(acc), torch.tensor(loss), clients.test_sizes)


# --------------------------------------------------------------------------------------------
# The shared round structure

Phase = tuple[tuple[str, ...], int | None, int]  # (trainable names, steps or None, epochs)


def _groups(selected: list[int], signatures: dict[int, tuple], size: int) -> list[list[int]]:
    """Clients with equal batch-size signatures, in chunks of at most ``size``."""
    by_sig: dict[tuple, list[int]] = {}
    for i in selected:
        by_sig.setdefault(signatures[i], []).append(i)
    return [g[k:k + size] for g in by_sig.values() for k in range(0, len(g), size)]


def run_rounds(algorithm: str, model: nn.Module, clients: ClientData, cfg: TrainConfig, *,
               shared: Sequence[str], local: Sequence[str], phases: Sequence[Phase],
               state: Params | None = None, callback: Callable[[int, dict], None] | None = None) -> FedResult:
    """The round structure common to all algorithms (see the module docstring).

    ``shared`` names are averaged (n_i-weighted) over the participating clients after each
    round; ``local`` names are kept per client; every other parameter stays fixed. ``state``:
    the starting parameters (default: the model's). ``callback(t, metrics)`` is called after
    every round with ``train_loss`` and, on evaluated rounds, ``test_accuracy``.
    """
    names = [n for n, _ in model.named_parameters()]
    shared, local = tuple(shared), tuple(local)
    unknown = set(shared) | set(local) | {n for ph in phases for n in ph[0]}
    if unknown - set(names) or set(shared) & set(local):
        raise ValueError(f"bad parameter split: unknown {sorted(unknown - set(names))}, "
                         f"both shared and local {sorted(set(shared) & set(local))}")
    device = clients.device
    if state is None:
        state = {n: p.detach().to(device).clone() for n, p in model.named_parameters()}
    else:
        state = {n: state[n].detach().to(device).clone() for n in names}
    M = clients.n_clients
    local_state = {n: state[n].unsqueeze(0).repeat(M, *([1] * state[n].ndim)) for n in local}
    sizes = clients.train_sizes
    gen = make_generator(cfg.seed)
    worker = _Worker(model)
    m = max(1, round(cfg.participation * M))
    losses = torch.full((cfg.rounds,), float("nan"))
    accs = torch.full((cfg.rounds,), float("nan"))
    participants = []
    evaluation = None
    for t in range(cfg.rounds):
        selected = sorted(torch.randperm(M, generator=gen)[:m].tolist()) if m < M else list(range(M))
        participants.append(tuple(selected))
        plans = {i: [_batches(int(sizes[i]), cfg.batch_size, steps=st, epochs=ep, generator=gen)
                     for _, st, ep in phases] for i in selected}
        sigs = {i: tuple(tuple(len(b) for b in plan) for plan in plans[i]) for i in selected}
        acc_shared = {n: torch.zeros_like(state[n]) for n in shared}
        round_loss = 0.0
        for group in _groups(selected, sigs, cfg.vmap_clients):
            G = len(group)
            params = {n: (local_state[n][group] if n in local_state else
                          state[n].unsqueeze(0).expand(G, *state[n].shape)) for n in names}
            xs = [clients.x_train[i] for i in group]
            ys = [clients.y_train[i] for i in group]
            loss_sum = torch.zeros(G, device=device)
            n_steps = 0
            for k, (trainable, _, _) in enumerate(phases):
                if G == 1:
                    new, ls = worker.sgd({n: p[0] for n, p in params.items()}, trainable, xs[0], ys[0],
                                         plans[group[0]][k], cfg, gen)
                    params = {**params, **{n: p.unsqueeze(0) for n, p in new.items()}}
                else:
                    batches = list(zip(*(plans[i][k] for i in group)))
                    params, ls = _sgd_vmap(model, params, trainable, xs, ys, batches, cfg, gen)
                loss_sum += ls
                n_steps += len(plans[group[0]][k])
            w = sizes[group].to(device=device, dtype=torch.float32)
            for n in local:
                local_state[n][group] = params[n]
            for n in shared:
                acc_shared[n] += torch.tensordot(w, params[n], dims=1)
            round_loss += float((w * loss_sum).sum()) / max(n_steps, 1)
        total = float(sizes[selected].sum())
        for n in shared:
            state[n] = acc_shared[n] / total
        losses[t] = round_loss / total
        metrics = {"train_loss": float(losses[t])}
        if (t + 1) % cfg.eval_every == 0 or t == cfg.rounds - 1:
            evaluation = evaluate(model, clients, state, local_state)
            accs[t] = metrics["test_accuracy"] = evaluation.average
        if callback is not None:
            callback(t, metrics)
    return FedResult(algorithm, state, local_state, shared, local, losses, accs, tuple(participants),
                     evaluation, cfg)


# --------------------------------------------------------------------------------------------
# The algorithms


def _split(model: nn.Module) -> tuple[tuple[str, ...], tuple[str, ...]]:
    names = [n for n, _ in model.named_parameters()]
    head = tuple(n for n in names if n.startswith("head."))
    body = tuple(n for n in names if not n.startswith("head."))
    if not head or not body:
        raise ValueError("the model needs a `head` submodule (last layer) and a body; use replearn.models")
    return body, head


def fedavg(model: nn.Module, clients: ClientData, cfg: TrainConfig, *, callback=None) -> FedResult:
    """FedAvg (McMahan et al., 2017; Collins et al., 2022, eqs. 2-3): each round the sampled
    clients run ``local_steps`` (tau) SGD steps or ``local_epochs`` epochs from the global
    model, which becomes their n_i-weighted average."""
    body, head = _split(model)
    everything = body + head
    return run_rounds("fedavg", model, clients, cfg, shared=everything, local=(),
                      phases=[(everything, cfg.local_steps, cfg.local_epochs)], callback=callback)


def dsgd(model: nn.Module, clients: ClientData, cfg: TrainConfig, *, callback=None) -> FedResult:
    """D-SGD: FedAvg with one local step per round (tau = 1). For the same total number of
    local updates as FedAvg with tau steps and T rounds, pass :func:`matched_dsgd_config`."""
    result = fedavg(model, clients, replace(cfg, local_steps=1), callback=callback)
    return replace(result, algorithm="dsgd")


def matched_dsgd_config(cfg: TrainConfig) -> TrainConfig:
    """D-SGD settings making as many local updates as FedAvg with ``cfg`` (tau steps, T
    rounds): T * tau rounds of one step, evaluated every tau rounds, accuracy averaged over
    the same stretch of training (Collins et al., 2022, Sec. 5.2)."""
    if cfg.local_steps is None:
        raise ValueError("matched_dsgd_config needs cfg.local_steps (tau); epochs differ per client")
    tau = cfg.local_steps
    return replace(cfg, rounds=cfg.rounds * tau, local_steps=1, eval_every=cfg.eval_every * tau,
                   last_rounds=cfg.last_rounds * tau)


def fedrep(model: nn.Module, clients: ClientData, cfg: TrainConfig, *, callback=None) -> FedResult:
    """FedRep (Collins et al., 2021, Alg. 1): per-client heads kept across rounds; each round a
    client trains its head (``head_epochs``/``head_steps``, body frozen), then the body
    (``local_epochs``/``local_steps``, head frozen); the server averages the bodies only."""
    body, head = _split(model)
    if cfg.head_steps is None and cfg.head_epochs < 1:
        raise ValueError("FedRep needs head_epochs >= 1 or head_steps")
    return run_rounds("fedrep", model, clients, cfg, shared=body, local=head,
                      phases=[(head, cfg.head_steps, cfg.head_epochs),
                              (body, cfg.local_steps, cfg.local_epochs)], callback=callback)


def fedper(model: nn.Module, clients: ClientData, cfg: TrainConfig, *, callback=None) -> FedResult:
    """FedPer (Arivazhagan et al., 2019): joint local updates of body and head; the body is
    averaged, each client keeps its head."""
    body, head = _split(model)
    return run_rounds("fedper", model, clients, cfg, shared=body, local=head,
                      phases=[(body + head, cfg.local_steps, cfg.local_epochs)], callback=callback)


def lg_fedavg(model: nn.Module, clients: ClientData, cfg: TrainConfig, *, callback=None) -> FedResult:
    """LG-FedAvg (Liang et al., 2020), as compared in the FedRep paper: local bodies
    (representations), a shared head averaged by the server; joint local updates."""
    body, head = _split(model)
    return run_rounds("lg_fedavg", model, clients, cfg, shared=head, local=body,
                      phases=[(body + head, cfg.local_steps, cfg.local_epochs)], callback=callback)


def local_only(model: nn.Module, clients: ClientData, cfg: TrainConfig, *, callback=None) -> FedResult:
    """Every client trains its own copy of the initial model; nothing is communicated.
    A "round" is one local phase for the sampled clients."""
    body, head = _split(model)
    return run_rounds("local_only", model, clients, cfg, shared=(), local=body + head,
                      phases=[(body + head, cfg.local_steps, cfg.local_epochs)], callback=callback)


def finetune(model: nn.Module, clients: ClientData, *, state: Params | None = None, epochs: int = 10,
             part: str = "head", lr: float = 0.01, momentum: float = 0.5, weight_decay: float = 0.0,
             batch_size: int = 10, augment: bool = False, seed: int = 0) -> FedResult:
    """+FT: every client fine-tunes ``part`` ("head" or "all") of the trained model ``state``
    (default: the model's parameters) for ``epochs`` epochs of SGD on its training data
    (FedRep paper: 10 epochs of the head; FedAvg-FT paper: 10 epochs) and is tested on its
    test data. Returns a one-round :class:`FedResult` with the fine-tuned parts in ``local``."""
    if part not in ("head", "all"):
        raise ValueError(f"part must be 'head' or 'all', got {part!r}")
    body, head = _split(model)
    tuned = head if part == "head" else body + head
    cfg = TrainConfig(rounds=1, lr=lr, momentum=momentum, weight_decay=weight_decay, batch_size=batch_size,
                      local_epochs=epochs, augment=augment, last_rounds=1, seed=seed)
    result = run_rounds(f"finetune_{part}", model, clients, cfg, shared=(), local=tuned,
                        phases=[(tuned, None, epochs)], state=state)
    return result
