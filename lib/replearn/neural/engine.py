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

Speed: the clients' images live as tensors on the device (the training images in the
layout of :func:`work_layout`: ``channels_last`` except in float64); there is no
``DataLoader``, no per-sample augmentation (:func:`replearn.neural.data.augment` works on whole batches) and no ``deepcopy`` per client: each
client's parameters are loaded into one working copy of the model (:func:`fast_copy`: ReLU
after max-pooling, weights in the working layout; same function and gradients), updated in place
with foreach kernels, and averaged as tensors. A phase that trains only the head runs on body
features computed once per phase (:class:`LocalSGD`). On a CPU the clients of a round train
concurrently, one per thread (``workers`` of :func:`run_spec`, default torch's thread count),
each thread running its operations on one intra-op thread: at these sizes one convolution does
not keep two cores busy, two clients do. The server still sums the clients in order, so a run
gives the same iterates bit for bit for any number of workers (those of a one-thread run).
Clients with the same batch schedule can instead be trained together with ``torch.func.vmap``
(``vmap_clients > 1``: stacked parameters, one batched forward/backward for the group), meant
for GPUs; on a CPU it is slower. On a CPU the training is compute-bound: the convolutions
(oneDNN in float32, ATen's slower kernels in float64) take most of the time
(``bench/neural_rounds.py`` compares with a PFLlib-style loop and prints the share of the GEMM
rate). The dtype follows the model (float32 or float64).

All random numbers (client selection, batches, augmentation) come from one CPU
``torch.Generator`` seeded with ``cfg.seed``, so a run is bit-for-bit reproducible on the CPU.

The pieces an FL framework (e.g. :mod:`replearn.neural.flower`) needs are public:
:func:`split_body_head` (the body/head parameter names), :func:`algorithm_spec` (an
:class:`AlgorithmSpec`: shared and local names and the local :class:`Phase` s of each
algorithm in :data:`ALGORITHMS`), :func:`sample_clients` and :func:`plan_batches` (a round's
random draws; :func:`plan_round` makes both in the engine's order), :class:`LocalSGD` (one
client's local phase) and :func:`run_spec` (the in-process round loop of these algorithms).

Algorithms beyond this shared/local/phases model (FedProx, SCAFFOLD, Ditto, APFL, L2GD,
Per-FedAvg, Fed-MTL: extra gradient terms, client and server state, server steps other than
an average, custom local steps) are units of :mod:`replearn.neural.algorithms` run by
:func:`run_protocol`, a round loop beside :func:`run_spec` on the same client threads, batch
plans and random stream; :func:`run_spec` and the functions above keep their code path. With
``vmap_clients > 1`` an algorithm that declares ``batched`` (all of Table 1's) runs its own
per-client ``client_update`` once per group of clients under ``torch.func.vmap``, with a
:class:`FunctionalSGD` worker on stacked images, batches and states (:func:`foreach_add` and
its siblings keep foreach arithmetic outside the transform): the per-client iterates to float
rounding, with 2.5-5x fewer operator launches per round at ten clients
(``bench/results/neural_rounds_counts.txt``).

Inputs are checked before any training (images larger than :data:`MAX_INPUT`, starting
states that are not finite or exceed :data:`MAX_PARAMETER`, work beyond
:data:`MAX_PHASE_BATCHES` / :data:`MAX_RUN_STEPS`), and a run whose minibatch loss becomes
non-finite or exceeds :data:`DIVERGENCE_FACTOR` times its starting loss raises
``FloatingPointError`` naming the learning rate.
"""

from __future__ import annotations

import copy
import math
import numbers
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, NamedTuple, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from replearn.neural import checkpoints
from replearn.backend import default_device, make_generator
from replearn.checks import check_count, check_int, check_seed

Params = dict[str, torch.Tensor]

__all__ = ['ClientData', 'TrainConfig', 'Evaluation', 'FedResult', 'split_body_head', 'layers', 'top_layers', 'Phase', 'AlgorithmSpec', 'algorithm_spec', 'sample_clients', 'plan_batches', 'RoundPlan', 'plan_round', 'work_layout', 'fast_copy', 'forward_chunk', 'LocalSGD', 'foreach_add', 'foreach_sub', 'foreach_mul', 'decays', 'add_weight_decay', 'Momentum', 'FunctionalSGD', 'model_dtype', 'check_inputs', 'evaluate', 'check_work', 'starting_state', 'divergence_advice', 'check_divergence', 'run_spec', 'run_rounds', 'fedavg', 'dsgd', 'matched_dsgd_config', 'fedrep', 'fedper', 'lg_fedavg', 'local_only', 'finetune', 'ClientRound', 'ClientUpdate', 'run_protocol', 'MAX_PHASE_BATCHES', 'MAX_RUN_STEPS', 'MAX_INPUT', 'MAX_PARAMETER', 'DIVERGENCE_FACTOR', 'ALGORITHMS', 'Params']

MAX_PHASE_BATCHES = 10**6
"""Most minibatches one client's local phase may plan in one round (``steps``, or ``epochs``
times the batches of an epoch): a round's batch plan is held in memory, and 10**6 index
tensors per client are about 100 MB. The book's largest phase has 500."""

MAX_RUN_STEPS = 10**9
"""Most local SGD steps a run may plan (rounds x clients per round x steps per client): at a
millisecond per step on the tiniest network this is 11 days. Checked at the start of a run,
before anything is allocated, with the fields that set it named."""

MAX_INPUT = 1e4
"""Largest absolute image value the engine accepts: normalised images lie within a few units,
raw 0-255 pixels below 256; larger values (e.g. 1e30) make the first step overflow and would
otherwise be blamed on the learning rate."""

MAX_PARAMETER = 1e6
"""Largest absolute entry of a starting state (or a model to evaluate) the engine accepts."""

DIVERGENCE_FACTOR = 1e3
"""Local training has diverged when a minibatch loss exceeds ``DIVERGENCE_FACTOR`` times
``max(L0, 1)``, where ``L0`` is the run's starting loss (the first minibatch loss of the first
client trained in round 0): cross-entropy starts near ``log C`` and a finite loss a thousand
times that is a blow-up, not noise. The engine then raises ``FloatingPointError`` naming the
learning rate (and the algorithm's options that scale its steps, :func:`divergence_advice`),
like it does for a non-finite loss or parameter."""


# --------------------------------------------------------------------------------------------
# Client data


@dataclass(frozen=True)
class ClientData:
    """Per-client train and test tensors on one device: images float32 or float64 (n_i, C, H,
    W), already normalised and finite, all of one dtype and one image shape; labels int64
    (n_i,), non-negative. Every client needs training data; a client may have no test data
    (it is then left out of the test averages, see :class:`Evaluation`), but at least one
    client must have some. The training runs cast the images to the model's dtype."""

    x_train: tuple[torch.Tensor, ...]
    y_train: tuple[torch.Tensor, ...]
    x_test: tuple[torch.Tensor, ...]
    y_test: tuple[torch.Tensor, ...]

    def __post_init__(self):
        lists = (self.x_train, self.y_train, self.x_test, self.y_test)
        if not all(isinstance(t, tuple) for t in lists):
            raise ValueError("x_train, y_train, x_test and y_test must be tuples of tensors (one per client)")
        if len({len(t) for t in lists}) != 1 or not self.x_train:
            raise ValueError("x_train, y_train, x_test and y_test need one entry per client "
                             "(at least one client)")
        first = self.x_train[0]
        for i, (xa, ya, xb, yb) in enumerate(zip(*lists)):
            for x, y, split in ((xa, ya, "train"), (xb, yb, "test")):
                if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
                    raise ValueError(f"client {i} {split} images and labels must be tensors")
                if x.ndim != 4 or x.dtype not in (torch.float32, torch.float64):
                    raise ValueError(f"client {i} {split} images must be float32 or float64 (n, C, H, W), "
                                     f"got {x.dtype} {tuple(x.shape)}; normalise uint8 images first "
                                     f"(ClientData.from_partition does)")
                if x.dtype != first.dtype or x.shape[1:] != first.shape[1:] or x.device != first.device:
                    raise ValueError(f"client {i} {split} images are {x.dtype} {tuple(x.shape[1:])} on "
                                     f"{x.device}, client 0's train images {first.dtype} "
                                     f"{tuple(first.shape[1:])} on {first.device}: all must agree")
                if y.shape != (x.shape[0],) or y.dtype != torch.int64 or y.device != x.device:
                    raise ValueError(f"client {i} {split} labels must be int64 of shape ({x.shape[0]},) on "
                                     f"{x.device}, got {y.dtype} {tuple(y.shape)} on {y.device}")
                if x.shape[0] and not bool(torch.isfinite(x).all()):
                    raise ValueError(f"client {i} {split} images contain NaN or infinite values")
                if y.numel() and int(y.min()) < 0:
                    raise ValueError(f"client {i} {split} labels must be >= 0, got {int(y.min())}")
            if xa.shape[0] == 0:
                raise ValueError(f"client {i} has no training data; drop it or change the partition")
        if all(x.shape[0] == 0 for x in self.x_test):
            raise ValueError("no client has test data; every run evaluates on the clients' test sets")

    @property
    def dtype(self) -> torch.dtype:
        return self.x_train[0].dtype

    def to(self, dtype: torch.dtype) -> "ClientData":
        """The same clients with images of ``dtype`` (float32 or float64); ``self`` if equal."""
        if dtype == self.dtype:
            return self
        return ClientData(tuple(x.to(dtype) for x in self.x_train), self.y_train,
                          tuple(x.to(dtype) for x in self.x_test), self.y_test)

    @classmethod
    def from_partition(cls, x_train: torch.Tensor, y_train: torch.Tensor, train_parts: Sequence[torch.Tensor],
                       x_test: torch.Tensor, y_test: torch.Tensor, test_parts: Sequence[torch.Tensor], *,
                       dataset: str | None = None, device: torch.device | str | None = None,
                       dtype: torch.dtype = torch.float32) -> "ClientData":
        """Clients from whole arrays and index lists (one index tensor per client).

        uint8 images are normalised with :func:`replearn.neural.data.normalise` (``dataset`` names
        the channel statistics, e.g. ``"cifar10"``); float images are taken as they are. The
        images are stored as ``dtype`` (float32 or float64: the dtype of the model to train).
        """
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}")
        if len(train_parts) != len(test_parts):
            raise ValueError(f"{len(train_parts)} train index lists but {len(test_parts)} test index lists")
        device = torch.device(device) if device is not None else default_device()

        def prepare(x):
            if x.dtype == torch.uint8:
                if dataset is None:
                    raise ValueError("uint8 images need dataset= (e.g. 'cifar10') to pick the normalisation")
                from replearn.neural.data import normalise
                x = normalise(x, dataset)
            return x.to(device=device, dtype=dtype)

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
    with ``torch.func.vmap``, and how many with test sets of equal size are evaluated together
    (1: one after another).
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
        counts = dict(rounds=self.rounds, batch_size=self.batch_size, local_epochs=self.local_epochs,
                      eval_every=self.eval_every, last_rounds=self.last_rounds, vmap_clients=self.vmap_clients)
        if self.local_steps is not None:
            counts["local_steps (tau)"] = self.local_steps
        if self.head_steps is not None:
            counts["head_steps"] = self.head_steps
        for name, value in counts.items():
            check_int(value, name, 1)
        check_int(self.head_epochs, "head_epochs", 0)
        # sizes that set work: at most checks.MAX_COUNT each (the run checks their product
        # against MAX_RUN_STEPS once the data sizes are known)
        for name in ("rounds", "local_epochs", "local_steps", "head_epochs", "head_steps", "vmap_clients"):
            if getattr(self, name) is not None:
                check_count(getattr(self, name), name, 0)
        check_seed(self.seed, "seed")
        reals = dict(lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay,
                     participation=self.participation)
        for name, value in reals.items():
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise ValueError(f"{name} must be a finite real number, got {value!r}")
            if not isinstance(value, int):  # a NumPy real is kept (printed, hashed, stored) as the float it stands for
                object.__setattr__(self, name, float(value))
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr!r}")
        if not 0 <= self.momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum!r}")
        if not self.weight_decay >= 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay!r}")
        if not 0 < self.participation <= 1:
            raise ValueError(f"participation must be in (0, 1], got {self.participation!r}")
        if not isinstance(self.augment, bool):
            raise ValueError(f"augment must be True or False, got {self.augment!r}")


@dataclass(frozen=True)
class Evaluation:
    """Per-client test accuracy and loss (NaN for a client without test data).

    ``average``: the clients' accuracies weighted by their test-set sizes n_i^test, i.e. the
    accuracy over all test samples pooled; clients without test data have weight 0 and are
    left out."""

    accuracy: torch.Tensor
    loss: torch.Tensor
    test_sizes: torch.Tensor

    @property
    def average(self) -> float:
        has = self.test_sizes > 0
        w = self.test_sizes[has].to(self.accuracy.dtype)
        return float((w * self.accuracy[has]).sum() / w.sum())


@dataclass(frozen=True)
class FedResult:
    """Outcome of a federated run.

    ``state``: the server's parameters (for names in ``local_names`` these are the values the
    clients started from); ``local``: per-client parameters stacked along a first client axis
    (empty when nothing is local; for the algorithms of :func:`run_protocol`, the parameters
    each client is evaluated with, e.g. Ditto's personal or APFL's mixed model); ``train_loss[t]``: the n_i-weighted mean minibatch loss of
    round t's local updates; ``test_accuracy[t]``: the average test accuracy after round t (NaN
    where not evaluated); ``participants[t]``: the clients sampled in round t; ``final``: the
    last evaluation, of what each client would use; ``extras``: what an algorithm keeps
    besides (:func:`run_protocol`: ``"server"`` its server state, ``"clients"`` the clients'
    states; the +FT wrappers: the ``"base"`` run and the ``"finetune"`` run).
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
    extras: dict = field(default_factory=dict, repr=False)

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
# The public pieces an FL framework needs: body/head split, algorithm specs, client sampling,
# batch plans, the local-SGD worker


def split_body_head(model: nn.Module) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The parameter names of the model's body and of its head (the names starting with
    ``head.``), in ``named_parameters`` order. FedRep's head is the last layer (Collins et
    al., 2021, Sec. 3); the models of :mod:`replearn.neural.models` have a ``head`` submodule."""
    names = [n for n, _ in model.named_parameters()]
    head = tuple(n for n in names if n.startswith("head."))
    body = tuple(n for n in names if not n.startswith("head."))
    if not head or not body:
        raise ValueError("the model needs a `head` submodule (last layer) and a body; use replearn.neural.models")
    return body, head


def layers(model: nn.Module) -> list[tuple[str, ...]]:
    """The model's layers in ``named_parameters`` order, each as the names of its parameters
    (a layer is the module that owns them, e.g. ``body.fc2`` with its weight and bias)."""
    found: dict[str, list[str]] = {}
    for n, _ in model.named_parameters():
        found.setdefault(n.rpartition(".")[0], []).append(n)
    return [tuple(v) for v in found.values()]


def top_layers(model: nn.Module, k: int) -> tuple[str, ...]:
    """The parameter names of the model's last ``k`` layers (:func:`layers`); ``k = 1`` is the
    head of :func:`split_body_head`."""
    check_int(k, "k (layers)", 1)
    all_layers = layers(model)
    if k >= len(all_layers):
        raise ValueError(f"k = {k} layers would leave no layer below them: the model has {len(all_layers)}")
    return tuple(n for layer in all_layers[-k:] for n in layer)


class Phase(NamedTuple):
    """One local phase: the ``trainable`` parameter names (the others are frozen), and either
    ``steps`` SGD steps (when not None) or ``epochs`` epochs."""

    trainable: tuple[str, ...]
    steps: int | None
    epochs: int


@dataclass(frozen=True)
class AlgorithmSpec:
    """What an algorithm shares, keeps local and trains (see the module docstring).

    ``shared``: names averaged by the server with weights n_i over the round's clients
    (Collins et al., 2022, eq. 3); ``local``: names each client keeps across rounds; every
    other parameter stays at its initial value. ``phases``: the local phases run in order by
    every sampled client, each with a fresh momentum buffer. ``cfg``: the configuration the
    algorithm runs with (for D-SGD, ``local_steps = 1``).
    """

    algorithm: str
    shared: tuple[str, ...]
    local: tuple[str, ...]
    phases: tuple[Phase, ...]
    cfg: "TrainConfig"

    def __post_init__(self):
        both = set(self.shared) & set(self.local)
        if both:
            raise ValueError(f"parameters both shared and local: {sorted(both)}")
        if not self.phases:
            raise ValueError("an algorithm needs at least one local phase")
        for k, ph in enumerate(self.phases):
            if not isinstance(ph, Phase):
                raise ValueError(f"phase {k} must be a neural.Phase(trainable, steps, epochs), got {ph!r}")
            if not ph.trainable:
                raise ValueError(f"phase {k} trains no parameter")
            check_int(ph.epochs if ph.steps is None else ph.steps,
                         f"phase {k} {'epochs' if ph.steps is None else 'steps'}", 1)

    def check(self, model: nn.Module) -> None:
        """Raise ``ValueError`` if a name is not one of ``model``'s parameters."""
        names = {n for n, _ in model.named_parameters()}
        used = set(self.shared) | set(self.local) | {n for ph in self.phases for n in ph.trainable}
        if used - names:
            raise ValueError(f"{self.algorithm}: unknown parameter names {sorted(used - names)}; "
                             f"the model has {sorted(names)}")


ALGORITHMS = ("fedavg", "dsgd", "fedrep", "fedper", "lg_fedavg", "local_only", "finetune_head", "finetune_all")


def algorithm_spec(algorithm: str, model: nn.Module, cfg: "TrainConfig", *, lg_shared_layers: int = 2) -> AlgorithmSpec:
    """The :class:`AlgorithmSpec` of ``algorithm`` (one of :data:`ALGORITHMS`) for ``model``
    split by :func:`split_body_head`:

    - ``fedavg``: everything shared, one joint phase (``local_steps`` or ``local_epochs``);
    - ``dsgd``: FedAvg with ``local_steps = 1``;
    - ``fedrep``: body shared, head local; a head phase (``head_steps``/``head_epochs``, body
      frozen), then a body phase (``local_steps``/``local_epochs``, head frozen) (Alg. 1);
    - ``fedper``: body shared, head local, one joint phase;
    - ``lg_fedavg``: the top ``lg_shared_layers`` layers shared (:func:`top_layers`; default 2,
      the FedRep authors' split for their CIFAR CNN: ``fc2`` and ``fc3``, ``w_glob_keys`` of
      ``main_fedrep.py`` in lgcollins/FedRep), the layers below local, one joint phase;
    - ``local_only``: everything local, one joint phase, nothing communicated;
    - ``finetune_head`` / ``finetune_all``: the head / everything local, ``local_epochs``
      epochs (used with one round by :func:`finetune`).
    """
    body, head = split_body_head(model)
    joint = body + head
    if algorithm == "dsgd":
        cfg = replace(cfg, local_steps=1)
    one = (Phase(joint, cfg.local_steps, cfg.local_epochs),)
    if algorithm in ("fedavg", "dsgd"):
        return AlgorithmSpec(algorithm, joint, (), one, cfg)
    if algorithm == "fedrep":
        if cfg.head_steps is None and cfg.head_epochs < 1:
            raise ValueError("FedRep needs head_epochs >= 1 or head_steps")
        return AlgorithmSpec(algorithm, body, head, (Phase(head, cfg.head_steps, cfg.head_epochs),
                                                    Phase(body, cfg.local_steps, cfg.local_epochs)), cfg)
    if algorithm == "fedper":
        return AlgorithmSpec(algorithm, body, head, one, cfg)
    if algorithm == "lg_fedavg":
        top = top_layers(model, lg_shared_layers)
        return AlgorithmSpec(algorithm, top, tuple(n for n in joint if n not in top), one, cfg)
    if algorithm == "local_only":
        return AlgorithmSpec(algorithm, (), joint, one, cfg)
    if algorithm in ("finetune_head", "finetune_all"):
        tuned = head if algorithm == "finetune_head" else joint
        return AlgorithmSpec(algorithm, (), tuned, (Phase(tuned, None, cfg.local_epochs),), cfg)
    raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")


def sample_clients(n_clients: int, participation: float, generator: torch.Generator) -> list[int]:
    """The clients of one round, sorted: ``m = max(1, round(participation * n_clients))``
    clients drawn uniformly without replacement as ``torch.randperm(n_clients)[:m]`` from
    ``generator``; all clients, with no draw, when ``m = n_clients``."""
    check_int(n_clients, "n_clients", 1)
    m = max(1, round(participation * n_clients))
    if m >= n_clients:
        return list(range(n_clients))
    return sorted(torch.randperm(n_clients, generator=generator)[:m].tolist())


def plan_batches(n: int, batch_size: int, *, steps: int | None, epochs: int,
                 generator: torch.Generator) -> list[torch.Tensor]:
    """Index batches (CPU int64) for one local phase on a client with ``n`` samples:
    ``steps`` batches of ``min(batch_size, n)`` indices cut from successive random
    permutations (each permutation's incomplete tail dropped), or, when ``steps`` is None,
    ``epochs`` permutations each cut into batches of ``batch_size`` (the last one smaller,
    like ``DataLoader(shuffle=True, drop_last=False)``)."""
    check_int(n, "n", 1)
    check_int(batch_size, "batch_size", 1)
    planned = steps if steps is not None else epochs * -(-n // batch_size)
    if isinstance(planned, int) and planned > MAX_PHASE_BATCHES:
        what = f"steps = {steps}" if steps is not None else f"epochs = {epochs} of {-(-n // batch_size)} batches"
        raise ValueError(f"a local phase of {what} plans {planned:.3g} minibatches, more than MAX_PHASE_BATCHES = "
                         f"{MAX_PHASE_BATCHES:.0e} (a round's batch plan is held in memory); use fewer local "
                         f"steps or epochs")
    if steps is None:
        check_int(epochs, "epochs", 1)
        out = []
        for _ in range(epochs):
            out.extend(torch.randperm(n, generator=generator).split(batch_size))
        return out
    check_int(steps, "steps", 1)
    b = min(batch_size, n)
    per_perm = n // b
    perms = [torch.randperm(n, generator=generator)[: per_perm * b] for _ in range(-(-steps // per_perm))]
    return list(torch.cat(perms).split(b)[:steps])


@dataclass(frozen=True)
class RoundPlan:
    """One round's random choices: the sampled ``clients`` (sorted) and ``batches[i][k]``,
    client i's index batches for phase k."""

    clients: tuple[int, ...]
    batches: dict[int, tuple[tuple[torch.Tensor, ...], ...]]


def plan_round(train_sizes: Sequence[int], phases: Sequence[Phase], cfg: "TrainConfig",
               generator: torch.Generator) -> RoundPlan:
    """Draw one round from ``generator``: :func:`sample_clients` with ``cfg.participation``,
    then, for each sampled client in increasing order and each phase in order,
    :func:`plan_batches` with ``cfg.batch_size``. This is the order :func:`run_spec` draws in,
    so a framework that calls ``plan_round`` with a generator seeded by
    ``make_generator(cfg.seed)`` replays an in-process run (without augmentation, whose draws
    follow during training)."""
    sizes = [int(n) for n in train_sizes]
    clients = sample_clients(len(sizes), cfg.participation, generator)
    batches = {i: tuple(tuple(plan_batches(sizes[i], cfg.batch_size, steps=ph.steps, epochs=ph.epochs,
                                           generator=generator)) for ph in phases) for i in clients}
    return RoundPlan(tuple(clients), batches)


def _augment(x: torch.Tensor, cfg: "TrainConfig", generator: torch.Generator | None) -> torch.Tensor:
    if not cfg.augment:
        return x
    if generator is None:
        raise ValueError("cfg.augment is on: pass the generator the augmentation draws from")
    from replearn.neural.data import augment
    return augment(x.flatten(0, x.ndim - 4), generator).view_as(x)


def work_layout(dtype: torch.dtype) -> torch.memory_format:
    """The memory layout of the engine's working copies and images for ``dtype``:
    ``channels_last`` (NHWC, oneDNN's native layout, which saves the layout conversions of
    every convolution and pooling) except in float64, which oneDNN does not run: there ATen's
    ``slow_conv2d`` runs both layouts and is 5-25% slower on ``channels_last`` (measured with
    ``bench/algorithm_rounds.py``), so float64 keeps the plain layout."""
    return torch.contiguous_format if dtype == torch.float64 else torch.channels_last


def fast_copy(model: nn.Module) -> nn.Module:
    """A copy of ``model`` that computes the same function and the same gradients faster on
    the CPU (a private working copy for training):

    - in every ``nn.Sequential``, a ``ReLU`` directly followed by a ``MaxPool2d`` is swapped
      with it: ``maxpool(relu(x)) = relu(maxpool(x))`` exactly (ReLU is non-decreasing), and
      the gradients agree too (both pass the gradient to the window's first maximum when it
      is positive, and 0 otherwise), but the ReLU and its backward then touch a quarter of
      the elements;
    - the parameters of 4-d weights are stored in :func:`work_layout` of the model's dtype
      (``channels_last`` except in float64).

    Only the floating-point summation order of the convolutions changes (in float32), so the
    iterates agree with the plain model's to rounding error, not bit for bit."""
    work = copy.deepcopy(model)
    for seq in work.modules():
        if isinstance(seq, nn.Sequential):
            keys = list(seq._modules)
            for a, b in zip(keys, keys[1:]):
                first, second = seq._modules[a], seq._modules[b]
                if (type(first) is nn.ReLU and type(second) is nn.MaxPool2d
                        and not second.return_indices):
                    seq._modules[a], seq._modules[b] = second, first
    dtype = next((p.dtype for p in work.parameters() if p.is_floating_point()), torch.float32)
    return work.to(memory_format=work_layout(dtype))


def _in_work_layout(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous(memory_format=work_layout(x.dtype)) if x.ndim == 4 else x


def forward_chunk(x: torch.Tensor, largest: int) -> int:
    """Images per gradient-free forward pass over ``x`` (caching body features, evaluation):
    ``largest``, except on a CPU in float64, where at most 16: ATen's ``slow_conv2d`` gets slower per
    image as the batch grows (measured on one thread, the FedRep CNN's forward pass over 400
    images: 0.7 s in chunks of 16 against 1.4 s in one batch at the authors' widths, 0.22 s
    against 0.37 s at the narrow widths). The chunks change no value beyond rounding."""
    return min(16, largest) if x.dtype == torch.float64 and x.device.type == "cpu" else largest


class LocalSGD:
    """The local-SGD worker: one working copy of the model (:func:`fast_copy`), into which
    each client's parameters are loaded in turn (instead of a ``deepcopy`` per client).

    A phase that trains only the head of a model with ``body`` and ``head`` submodules and
    ``forward(x) = head(body(x))`` (checked on the first images it sees) without augmentation
    (FedRep's head phase, head fine-tuning) passes the phase's images through the frozen body
    once and runs the head's SGD steps on these features: the same steps, without a body
    forward per step."""

    _FEATURE_CHUNK = 512  # images per body forward when caching features (at most; :func:`forward_chunk`)

    def __init__(self, model: nn.Module):
        self.model = fast_copy(model)
        self.params = dict(self.model.named_parameters())
        self.first_loss: torch.Tensor | None = None  # see watch()
        self.peak_loss: torch.Tensor | None = None
        body, head = getattr(self.model, "body", None), getattr(self.model, "head", None)
        self._head_names: frozenset[str] = frozenset()
        self._split_checked = False
        if isinstance(body, nn.Module) and isinstance(head, nn.Module):
            own = {n for n, _ in self.model.named_parameters()}
            split = {f"body.{n}" for n, _ in body.named_parameters()} | {f"head.{n}" for n, _ in head.named_parameters()}
            if own == split:
                self._head_names = frozenset(f"head.{n}" for n, _ in head.named_parameters())

    def _features_suffice(self, trainable: Sequence[str], x: torch.Tensor, cfg: "TrainConfig") -> bool:
        """Whether this phase can run on cached body features (see the class docstring)."""
        if cfg.augment or not self._head_names or not set(trainable) <= self._head_names:
            return False
        if not self._split_checked:
            with torch.no_grad():
                probe = x[:2]
                same = torch.equal(self.model(probe), self.model.head(self.model.body(probe.to(x.dtype))))
            if not same:
                self._head_names = frozenset()
                return False
            self._split_checked = True
        return True

    def watch(self) -> None:
        """Start recording the minibatch losses of :meth:`train` and :meth:`gradient`:
        ``first_loss`` (the first one) and ``peak_loss`` (the largest), 0-d tensors (the engine
        compares them with :data:`DIVERGENCE_FACTOR`); None until a loss is computed."""
        self.first_loss = self.peak_loss = None

    def _record(self, loss: torch.Tensor) -> None:
        loss = loss.detach()
        if self.first_loss is None:
            self.first_loss = self.peak_loss = loss
        else:
            self.peak_loss = torch.maximum(self.peak_loss, loss)

    def gradient(self, params: Params, trainable: Sequence[str], x: torch.Tensor, y: torch.Tensor,
                 idx: torch.Tensor | None, cfg: "TrainConfig",
                 generator: torch.Generator | None = None) -> tuple[torch.Tensor, Params]:
        """The mean cross-entropy on rows ``idx`` of ``x``, ``y`` (all rows when None; augmented
        when ``cfg.augment``) of the model with parameters ``params``, and its gradient with
        respect to the names in ``trainable`` (copies): the building block of algorithms with
        their own local steps (:mod:`replearn.neural.algorithms`)."""
        with torch.no_grad():
            for n, p in self.params.items():
                p.copy_(params[n])
                p.requires_grad_(n in trainable)
                p.grad = None
        x = _in_work_layout(x)
        xb, yb = (x, y) if idx is None else (x[idx.to(x.device)], y[idx.to(y.device)])
        loss = F.cross_entropy(self.model(_augment(xb, cfg, generator) if idx is not None else xb), yb)
        loss.backward()
        self._record(loss)
        return loss.detach(), {n: self.params[n].grad.clone(memory_format=torch.contiguous_format)
                               for n in trainable}

    def train(self, params: Params, trainable: Sequence[str], x: torch.Tensor, y: torch.Tensor,
              batches: Sequence[torch.Tensor], cfg: "TrainConfig",
              generator: torch.Generator | None = None, *,
              extra_grad: Callable[[list[torch.Tensor]], Sequence[torch.Tensor]] | None = None
              ) -> tuple[Params, torch.Tensor]:
        """One local phase on one client: SGD on the mean cross-entropy of each index batch
        of ``batches`` (rows of ``x``, ``y``), updating only the names in ``trainable``
        (``params`` gives every parameter's starting value), with ``torch.optim.SGD``
        semantics and a fresh momentum buffer: ``g <- grad + weight_decay * theta`` for the weights, not the biases (:func:`decays`);
        ``buf <- g`` at the first step, else ``momentum * buf + g``; ``theta <- theta - lr * buf``.
        ``generator`` is needed only when ``cfg.augment`` is on (augmentation draws per batch).
        ``extra_grad(theta)``: terms added to the minibatch gradient at every step, given the
        current trainable tensors in ``trainable``'s order (an objective's extra terms, e.g.
        FedProx's ``mu (theta - theta_global)``); ``g <- grad + extra + weight_decay * theta``.
        Returns the trained parameters (copies, names in ``trainable``) and the summed
        minibatch loss (a 0-d tensor)."""
        with torch.no_grad():
            for n, p in self.params.items():
                p.copy_(params[n])
                p.requires_grad_(n in trainable)
        tp = [self.params[n] for n in trainable]
        buf = None
        x = _in_work_layout(x)  # no copy when the engine already stores it so
        loss_sum = torch.zeros((), device=x.device, dtype=x.dtype)
        net = self.model
        if batches and self._features_suffice(trainable, x, cfg):
            used, where = torch.unique(torch.cat(list(batches)), return_inverse=True)
            used = used.to(x.device)
            with torch.no_grad():
                x = torch.cat([self.model.body(x[part]) for part in used.split(forward_chunk(x, self._FEATURE_CHUNK))])
            y = y[used]
            batches = where.split([len(b) for b in batches])
            net = self.model.head
        for idx in batches:
            idx = idx.to(x.device)
            for p in tp:
                p.grad = None
            loss = F.cross_entropy(net(_augment(x[idx], cfg, generator)), y[idx])
            loss.backward()
            with torch.no_grad():
                loss_sum += loss
                self._record(loss)
                grads = [p.grad for p in tp]
                if extra_grad is not None:
                    grads = torch._foreach_add(grads, list(extra_grad(tp)))
                if cfg.weight_decay:
                    grads = add_weight_decay(grads, tp, cfg.weight_decay)
                if cfg.momentum:
                    if buf is None:
                        buf = [g.clone() for g in grads]
                    else:
                        torch._foreach_mul_(buf, cfg.momentum)
                        torch._foreach_add_(buf, grads)
                    grads = buf
                torch._foreach_add_(tp, grads, alpha=-cfg.lr)
        return {n: self.params[n].detach().clone(memory_format=torch.contiguous_format) for n in trainable}, loss_sum


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
    loss_sum = torch.zeros(len(xs), device=xs[0].device, dtype=xs[0].dtype)
    first = peak = None
    for s, idx in enumerate(batches):
        xb = torch.stack([x[i.to(x.device)] for x, i in zip(xs, idx)])
        yb = torch.stack([y[i.to(y.device)] for y, i in zip(ys, idx)])
        grads, loss = step(train, frozen, _augment(xb, cfg, generator), yb)
        loss_sum += loss.detach()
        first = loss.detach() if first is None else first
        peak = loss.detach() if peak is None else torch.maximum(peak, loss.detach())
        for n, g in grads.items():
            if cfg.weight_decay and decays(train[n][0]):  # train[n] is stacked along the client axis
                g = g + cfg.weight_decay * train[n]
            if cfg.momentum:
                g = buf[n] = g if s == 0 else cfg.momentum * buf[n] + g
            train[n] = train[n] - cfg.lr * g
    return {**params, **train}, loss_sum, first, peak


# --------------------------------------------------------------------------------------------
# Foreach arithmetic that also runs under torch.func.vmap, and the functional worker


def _in_transform(tensors: Sequence[torch.Tensor]) -> bool:
    return any(torch._C._functorch.is_functorch_wrapped_tensor(t) for t in tensors)


def foreach_add(xs: Sequence[torch.Tensor], ys: Sequence[torch.Tensor], *, alpha: float = 1.0) -> list[torch.Tensor]:
    """``[x + alpha * y]`` (new tensors): one ``torch._foreach_add`` call, or, inside a
    ``torch.func`` transform (which has no batching rule for foreach operators), the same
    arithmetic tensor by tensor. The building block of client steps that must also run on the
    batched path (:class:`FunctionalSGD`)."""
    xs, ys = list(xs), list(ys)
    if _in_transform(xs + ys):
        return [torch.add(x, y, alpha=alpha) for x, y in zip(xs, ys)]
    return torch._foreach_add(xs, ys, alpha=alpha)


def foreach_sub(xs: Sequence[torch.Tensor], ys: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """``[x - y]`` (new tensors), as :func:`foreach_add`."""
    xs, ys = list(xs), list(ys)
    if _in_transform(xs + ys):
        return [torch.sub(x, y) for x, y in zip(xs, ys)]
    return torch._foreach_sub(xs, ys)


def foreach_mul(xs: Sequence[torch.Tensor], scalar: float) -> list[torch.Tensor]:
    """``[scalar * x]`` (new tensors), as :func:`foreach_add`."""
    xs = list(xs)
    if _in_transform(xs):
        return [torch.mul(x, scalar) for x in xs]
    return torch._foreach_mul(xs, scalar)


def decays(p: torch.Tensor) -> bool:
    """Whether weight decay applies to parameter ``p``: to weights (matrices, convolution
    kernels), not to biases (vectors), as the FedRep authors' optimiser does (``models/Update.py``
    of lgcollins/FedRep: ``weight_decay`` 1e-4 for the ``weight_p`` group, 0 for ``bias_p``)."""
    return p.ndim > 1


def add_weight_decay(grads: Sequence[torch.Tensor], params: Sequence[torch.Tensor],
                     weight_decay: float) -> list[torch.Tensor]:
    """``g + weight_decay * theta`` for the weights (:func:`decays`), ``g`` for the biases."""
    return [g + weight_decay * p if decays(p) else g for g, p in zip(grads, params)]


class Momentum:
    """``torch.optim.SGD``'s step direction (momentum without dampening, weight decay added to
    the gradient of the weights, :func:`decays`) for a fixed list of tensors, with a fresh
    buffer: ``g <- grad + weight_decay * theta``; ``buf <- g`` at the first step, else
    ``momentum * buf + g``; :meth:`step` returns ``theta - lr * buf`` (new tensors)."""

    def __init__(self, momentum: float, weight_decay: float):
        self.momentum, self.weight_decay, self.buf = momentum, weight_decay, None

    def step(self, params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], lr: float) -> list[torch.Tensor]:
        grads = list(grads)
        if self.weight_decay:
            grads = add_weight_decay(grads, params, self.weight_decay)
        if self.momentum:
            if self.buf is None:
                self.buf = [g.clone() for g in grads]
            else:
                self.buf = foreach_add(foreach_mul(self.buf, self.momentum), grads)
            grads = self.buf
        return foreach_add(params, grads, alpha=-lr)


class FunctionalSGD:
    """The worker of :func:`run_protocol`'s batched path: :class:`LocalSGD`'s :meth:`train`,
    :meth:`gradient` and :meth:`watch` (same arguments, steps and ``torch.optim.SGD``
    semantics) written with ``torch.func`` (gradients by ``grad_and_value`` of a
    ``functional_call``; nothing updated in place), so that an algorithm's ``client_update``,
    written for one client, runs under ``torch.func.vmap`` for a group of clients at once:
    stacked parameters, states and images, one batched forward/backward per step for the
    group (``cfg.vmap_clients > 1``; meant for GPUs). No feature caching and no augmentation.
    ``first_loss``/``peak_loss`` are recorded as in :class:`LocalSGD` (per client under vmap)."""

    def __init__(self, model: nn.Module):
        self.model = model
        self._grad = grad_and_value(_loss_fn(model))
        self.first_loss: torch.Tensor | None = None
        self.peak_loss: torch.Tensor | None = None

    def watch(self) -> None:
        """As :meth:`LocalSGD.watch`."""
        self.first_loss = self.peak_loss = None

    def _record(self, loss: torch.Tensor) -> None:
        loss = loss.detach()
        self.first_loss = loss if self.first_loss is None else self.first_loss
        self.peak_loss = loss if self.peak_loss is None else torch.maximum(self.peak_loss, loss)

    @staticmethod
    def _check(cfg: "TrainConfig") -> None:
        if cfg.augment:
            raise ValueError("the batched path (cfg.vmap_clients > 1) of run_protocol does not augment; "
                             "use cfg.vmap_clients = 1 with cfg.augment = True")

    def gradient(self, params: Params, trainable: Sequence[str], x: torch.Tensor, y: torch.Tensor,
                 idx: torch.Tensor | None, cfg: "TrainConfig",
                 generator: torch.Generator | None = None) -> tuple[torch.Tensor, Params]:
        """As :meth:`LocalSGD.gradient`."""
        self._check(cfg)
        train = {n: params[n] for n in trainable}
        frozen = {n: p for n, p in params.items() if n not in train}
        xb, yb = (x, y) if idx is None else (x[idx.to(x.device)], y[idx.to(y.device)])
        grads, loss = self._grad(train, frozen, xb, yb)
        self._record(loss)
        return loss.detach(), grads

    def train(self, params: Params, trainable: Sequence[str], x: torch.Tensor, y: torch.Tensor,
              batches: Sequence[torch.Tensor], cfg: "TrainConfig",
              generator: torch.Generator | None = None, *,
              extra_grad: Callable[[list[torch.Tensor]], Sequence[torch.Tensor]] | None = None
              ) -> tuple[Params, torch.Tensor]:
        """As :meth:`LocalSGD.train`: ``g <- grad + extra + weight_decay * theta``; ``buf <- g``
        at the first step, else ``momentum * buf + g``; ``theta <- theta - lr * buf``."""
        self._check(cfg)
        names = list(trainable)
        theta = [params[n] for n in names]
        frozen = {n: p for n, p in params.items() if n not in set(names)}
        sgd = Momentum(cfg.momentum, cfg.weight_decay)
        loss_sum = torch.zeros((), device=x.device, dtype=x.dtype)
        for idx in batches:
            idx = idx.to(x.device)
            g, loss = self._grad(dict(zip(names, theta)), frozen, x[idx], y[idx])
            loss_sum = loss_sum + loss.detach()
            self._record(loss)
            grads = [g[n] for n in names]
            if extra_grad is not None:
                grads = foreach_add(grads, list(extra_grad(theta)))
            theta = sgd.step(theta, grads, cfg.lr)
        return dict(zip(names, theta)), loss_sum


def model_dtype(model: nn.Module) -> torch.dtype:
    """The one floating dtype of ``model``'s parameters (the dtype the engine trains in)."""
    dtypes = {p.dtype for p in model.parameters()}
    if len(dtypes) != 1 or next(iter(dtypes)) not in (torch.float32, torch.float64):
        raise ValueError(f"the model's parameters must have one floating dtype, float32 or float64, got "
                         f"{sorted(map(str, dtypes))}; use model.to(torch.float32) or model.to(torch.float64)")
    return next(iter(dtypes))


@torch.no_grad()
def check_inputs(model: nn.Module, clients: ClientData) -> ClientData:
    """Check that ``clients`` fit ``model`` and return them in the model's dtype.

    The images are cast to :func:`model_dtype` (float32 <-> float64: the dtype follows the
    model). One training image is passed through the model: a ``ValueError`` names the image
    shape if the model rejects it, and every client's labels must lie in ``[0, C)`` for the
    model's ``C`` outputs."""
    clients = clients.to(model_dtype(model))
    for split, xs in (("train", clients.x_train), ("test", clients.x_test)):
        for i, x in enumerate(xs):
            big = float(x.abs().max()) if x.numel() else 0.0
            if big > MAX_INPUT:
                raise ValueError(f"client {i} {split} images have a value of magnitude {big:.3g}, more than "
                                 f"MAX_INPUT = {MAX_INPUT:g}: normalise the images first "
                                 f"(replearn.neural.data.normalise; ClientData.from_partition does it for uint8)")
    devices = {p.device for p in model.parameters()}
    if devices != {clients.device}:
        raise ValueError(f"the model is on {sorted(map(str, devices))} but the clients' data on {clients.device}; "
                         f"move one of them (model.to(device) or ClientData.from_partition(device=...))")
    probe = clients.x_train[0][:1]
    try:
        out = model(probe)
    except RuntimeError as err:
        raise ValueError(f"images of shape {tuple(probe.shape[1:])} do not fit the model ({err}); "
                         f"resize the images or build the model for this input size") from err
    if out.ndim != 2:
        raise ValueError(f"the model must return logits (batch, classes), got shape {tuple(out.shape)}")
    n_classes = out.shape[1]
    for split, ys in (("train", clients.y_train), ("test", clients.y_test)):
        for i, y in enumerate(ys):
            if y.numel() and int(y.max()) >= n_classes:
                raise ValueError(f"client {i} {split} labels go up to {int(y.max())}, but the model's head has "
                                 f"{n_classes} outputs (labels 0..{n_classes - 1}); build the model with "
                                 f"n_classes > {int(y.max())} or relabel the data")
    return clients


@torch.no_grad()
def evaluate(model: nn.Module, clients: ClientData, state: Params | None = None, local: Params | None = None,
             *, batch_size: int = 1000) -> Evaluation:
    """Per-client test accuracy and mean cross-entropy of ``model`` with parameters ``state``
    (default: the model's own), where client i uses ``local[name][i]`` for the names in
    ``local`` (personalised heads or bodies). The inputs are checked by :func:`check_inputs`;
    a client without test data gets NaN (left out of :attr:`Evaluation.average`). The
    forward passes run on a :func:`fast_copy` of the model, over at most ``batch_size`` images
    each (:func:`forward_chunk`)."""
    clients = check_inputs(model, clients)
    check_int(batch_size, "batch_size", 1)
    params = dict(state) if state is not None else {n: p.detach() for n, p in model.named_parameters()}
    for n, _ in model.named_parameters():  # a NaN model would report the accuracy of always guessing class 0
        own = local is not None and n in local
        if not own and n not in params:
            raise ValueError(f"state lacks the model's parameter {n!r}")
        for t, what in (((local[n], "local parameter"),) if own else ((params[n], "parameter"),)):
            if not bool(torch.isfinite(t).all()):
                raise ValueError(f"the model's {what} {n!r} contains NaN or infinite values; its predictions are "
                                 f"meaningless (a diverged run?), so it is not evaluated")
    work = fast_copy(model).requires_grad_(False)
    return _evaluation(clients, [_test_client(work, clients, params, local or {}, i, batch_size)
                                 for i in range(clients.n_clients)])


def _test_client(work: nn.Module, clients: ClientData, params: Params, local: Params, i: int,
                 batch_size: int) -> tuple[float, float]:
    """Client ``i``'s test accuracy and mean loss with ``work`` (a :func:`fast_copy`) holding
    ``params``, and ``local[name][i]`` for the names in ``local``; NaN without test data."""
    x, y = clients.x_test[i], clients.y_test[i]
    if not x.shape[0]:
        return float("nan"), float("nan")
    with torch.no_grad():  # grad mode is per thread: set it here for the client threads
        for n, slot in work.named_parameters():
            slot.copy_(local[n][i] if n in local else params[n])
        correct, total = 0.0, 0.0
        chunk = forward_chunk(x, batch_size)
        for xb, yb in zip(x.split(chunk), y.split(chunk)):
            out = work(_in_work_layout(xb))
            correct += float((out.argmax(1) == yb).sum())
            total += float(F.cross_entropy(out, yb, reduction="sum"))
    return correct / x.shape[0], total / x.shape[0]


def _test_groups(clients: ClientData, size: int) -> list[list[int]]:
    """The clients with test data in groups of at most ``size`` with equal test-set sizes (for
    :func:`_test_group`), in client order within each group."""
    by_size: dict[int, list[int]] = {}
    for i in range(clients.n_clients):
        if n := int(clients.x_test[i].shape[0]):
            by_size.setdefault(n, []).append(i)
    return [g[k:k + size] for g in by_size.values() for k in range(0, len(g), size)]


@torch.no_grad()
def _test_group(model: nn.Module, clients: ClientData, shared: Params, own: Params,
                group: Sequence[int]) -> dict[int, tuple[float, float]]:
    """:func:`_test_client` for a group of clients with equal test-set sizes as one batched
    computation (the batched path's evaluation): ``own[name]`` stacks the group's own values of
    the names it holds (first axis in ``group``'s order), ``shared`` gives the others; one
    ``torch.func.vmap`` forward pass over the stacked test images and one host sync for the
    group. The same numbers as :func:`_test_client` to float rounding."""
    x = torch.stack([clients.x_test[i] for i in group])
    y = torch.stack([clients.y_test[i] for i in group])
    rest = {n: p for n, p in shared.items() if n not in own}

    def one(mine: Params, xb: torch.Tensor, yb: torch.Tensor):
        out = functional_call(model, {**rest, **mine}, (xb,))
        return (out.argmax(-1) == yb).sum().to(out.dtype), F.cross_entropy(out, yb, reduction="sum")

    correct, total = vmap(one)(own, x, y)
    n = x.shape[1]
    return {i: (c / n, t / n) for i, c, t in zip(group, correct.tolist(), total.tolist())}


def _test_all(model: nn.Module, clients: ClientData, shared: Params, own: Params, size: int) -> list[tuple[float, float]]:
    """Every client tested on the batched path, ``size`` clients at a time (``own[name][i]``:
    client i's value of a name it holds); NaN for a client without test data."""
    out = {i: (float("nan"), float("nan")) for i in range(clients.n_clients)}
    for group in _test_groups(clients, size):
        out.update(_test_group(model, clients, shared, {n: v[group] for n, v in own.items()}, group))
    return [out[i] for i in range(clients.n_clients)]


def _evaluation(clients: ClientData, results: Sequence[tuple[float, float]]) -> Evaluation:
    acc, loss = zip(*results)
    return Evaluation(torch.tensor(acc), torch.tensor(loss), clients.test_sizes)


# --------------------------------------------------------------------------------------------
# The shared round structure


def _finite(loss_sum: torch.Tensor, params: Sequence[torch.Tensor]) -> torch.Tensor:
    """Per client (first axis), whether its summed loss and trained parameters are finite."""
    norms = torch.stack([loss_sum] + [p.reshape(len(p), -1).norm(dim=1) for p in params]) if params else loss_sum[None]
    return torch.isfinite(norms).all(dim=0)


def _groups(selected: Sequence[int], signatures: dict[int, tuple], size: int) -> list[list[int]]:
    """Clients with equal batch-size signatures, in chunks of at most ``size``."""
    by_sig: dict[tuple, list[int]] = {}
    for i in selected:
        by_sig.setdefault(signatures[i], []).append(i)
    return [g[k:k + size] for g in by_sig.values() for k in range(0, len(g), size)]


def _client_workers(workers: int | None, device: torch.device, cfg: TrainConfig, n_clients: int) -> int:
    """How many client threads :func:`run_spec` uses (1: none, train in the calling thread)."""
    if workers is not None:
        check_int(workers, "workers", 1)
        if workers > 1 and (cfg.augment or cfg.vmap_clients > 1):
            raise ValueError("workers > 1 needs cfg.augment = False (augmentation draws from the shared generator "
                             "during training) and cfg.vmap_clients = 1; use workers=1")
    if device.type != "cpu" or cfg.augment or cfg.vmap_clients > 1:
        return 1
    return min(workers or torch.get_num_threads(), n_clients)


class _ClientThreads:
    """``n`` threads for training clients concurrently on a CPU, each with its own
    :class:`LocalSGD` worker (made up front, so that starting a thread is quick) and one
    intra-op thread, so that a client's arithmetic does not depend on how many threads there
    are. The calling thread also runs one intra-op thread while the pool is open (otherwise
    its idle OpenMP threads spin on the cores the clients need); ``close`` restores torch's
    thread count."""

    def __init__(self, model: nn.Module, n: int):
        self._spare = [LocalSGD(model) for _ in range(n)]
        self._local = threading.local()
        self._threads = torch.get_num_threads()
        torch.set_num_threads(1)
        self._pool = ThreadPoolExecutor(n, thread_name_prefix="replearn-client")

    def _worker(self) -> LocalSGD:
        worker = getattr(self._local, "worker", None)
        if worker is None:
            torch.set_num_threads(1)
            worker = self._local.worker = self._spare.pop()
        return worker

    def map(self, fn: Callable, items: Sequence) -> Iterator:
        """``fn(worker, item)`` for each item, computed on the threads, yielded in order."""
        return self._pool.map(lambda item: fn(self._worker(), item), items)

    def close(self) -> None:
        self._pool.shutdown(cancel_futures=True)
        torch.set_num_threads(self._threads)


def check_work(phases: Sequence[Phase], train_sizes: Sequence[int], cfg: TrainConfig) -> int:
    """The number of local steps a run of ``cfg.rounds`` rounds with these ``phases`` plans
    (at most: every sampled client counted with the largest data size); raise ``ValueError``
    naming the fields if one client's phase exceeds :data:`MAX_PHASE_BATCHES` or the run
    :data:`MAX_RUN_STEPS`. Runs call it before anything is allocated."""
    n = max(int(s) for s in train_sizes)
    m = max(1, round(cfg.participation * len(train_sizes)))
    per_client = 0
    for k, ph in enumerate(phases):
        batches = ph.steps if ph.steps is not None else ph.epochs * -(-n // cfg.batch_size)
        what = (f"phase {k}: {ph.steps} steps" if ph.steps is not None else
                f"phase {k}: {ph.epochs} epochs x {-(-n // cfg.batch_size)} batches")
        if batches > MAX_PHASE_BATCHES:
            raise ValueError(f"{what} = {batches:.3g} minibatches per client and round, more than "
                             f"MAX_PHASE_BATCHES = {MAX_PHASE_BATCHES:.0e}; lower local_steps/local_epochs "
                             f"(or head_steps/head_epochs)")
        per_client += batches
    total = cfg.rounds * m * per_client
    if total > MAX_RUN_STEPS:
        raise ValueError(f"rounds = {cfg.rounds} x {m} clients per round x {per_client} local steps per client = "
                         f"{total:.3g} SGD steps, more than MAX_RUN_STEPS = {MAX_RUN_STEPS:.0e} (days of work); "
                         f"lower rounds, participation or the local steps/epochs")
    return total


def starting_state(model: nn.Module, state: Params | None, device: torch.device, dtype: torch.dtype) -> Params:
    """The parameters a run starts from (``state``, default the model's), as copies on
    ``device`` in ``dtype``; ``ValueError`` naming the parameter if one is missing, not finite
    or larger than :data:`MAX_PARAMETER` in absolute value (checked before any training, so a
    bad start is never blamed on the learning rate). A given ``state`` must be a dict naming
    exactly the model's parameters, each a tensor of the model's shape: else ``ValueError``
    naming the parameter with the expected and the given shape (a state made for another
    architecture), not a torch shape error from inside training."""
    names = [n for n, _ in model.named_parameters()]
    origin = "starting state" if state is not None else "model"
    if state is None:
        state = {n: p.detach() for n, p in model.named_parameters()}
    else:
        if not isinstance(state, Mapping):
            raise ValueError(f"state must be a dict of parameter name -> tensor (e.g. a FedResult's state), "
                             f"got {type(state).__name__}")
        missing = [n for n in names if n not in state]
        if missing:
            raise ValueError(f"state lacks the model's parameters {missing}")
        extra = [n for n in state if n not in names]
        if extra:
            raise ValueError(f"state has entries {extra} that are not parameters of the model (whose "
                             f"parameters are {names}); it was made for another model: pass the state of "
                             f"this architecture")
        for n, p in model.named_parameters():
            t = state[n]
            if not isinstance(t, torch.Tensor):
                raise ValueError(f"the starting state's parameter {n!r} must be a torch.Tensor, got "
                                 f"{type(t).__name__}")
            if tuple(t.shape) != tuple(p.shape):
                raise ValueError(f"the starting state's parameter {n!r} has shape {tuple(t.shape)}, but the "
                                 f"model's has shape {tuple(p.shape)}; the state was made for another "
                                 f"architecture (other widths or number of classes): pass a state of this "
                                 f"model")
    out = {}
    for n in names:
        t = state[n].detach()
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"the {origin}'s parameter {n!r} contains NaN or infinite values; start from finite "
                             f"parameters (e.g. a freshly built model)")
        big = float(t.abs().max()) if t.numel() else 0.0
        if big > MAX_PARAMETER:
            raise ValueError(f"the {origin}'s parameter {n!r} has an entry of magnitude {big:.3g}, more than "
                             f"MAX_PARAMETER = {MAX_PARAMETER:.0e}; start from a sensible model")
        out[n] = t.to(device=device, dtype=dtype).clone()
    return out


def divergence_advice(lr: float, algorithm: str | None = None, options=None) -> str:
    """The end of a divergence message: ``"with lr = 0.1; lower the learning rate"``, or, when
    ``options`` (an algorithm's options dataclass) declares ``step_scales`` (the names of its
    fields that scale a step besides the learning rate: FedProx's ``mu``, Ditto's ``lam``,
    SCAFFOLD's ``global_lr``, ...), these with their values too, e.g. ``"with lr = 0.01 and
    FedProx's mu = 1e+06; lower mu or the learning rate"`` (fields set to None are left out)."""
    scales = [(n, getattr(options, n)) for n in getattr(options, "step_scales", ())]
    scales = [(n, v) for n, v in scales if v is not None]
    if not scales:
        return f"with lr = {lr:g}; lower the learning rate"
    values = ", ".join(f"{n} = {v:g}" if isinstance(v, (int, float)) else f"{n} = {v!r}" for n, v in scales)
    who = f"{algorithm}'s " if algorithm else ""
    names = ", ".join(n for n, _ in scales)
    return f"with lr = {lr:g} and {who}{values}; lower {names} or the learning rate (each scales the steps)"


def check_divergence(t: int, client: int, first: float, peak: float, reference: float | None, lr: float, *,
                     algorithm: str | None = None, options=None) -> float:
    """Raise ``FloatingPointError`` naming ``lr`` (and the step-scaling ``options`` of
    ``algorithm``, :func:`divergence_advice`) if client ``client``'s largest minibatch loss
    ``peak`` in round ``t`` exceeds :data:`DIVERGENCE_FACTOR` times ``max(reference, 1)``;
    ``reference`` is the run's starting loss (None in the first check: ``first`` becomes it).
    Returns the reference."""
    ref = first if reference is None else reference
    if not math.isfinite(peak) or peak > DIVERGENCE_FACTOR * max(ref, 1.0):
        raise FloatingPointError(
            f"round {t}: client {client}'s local training diverged: its minibatch loss reached {peak:.3g}, more "
            f"than DIVERGENCE_FACTOR = {DIVERGENCE_FACTOR:g} times the starting loss {ref:.3g} (or 1), "
            f"{divergence_advice(lr, algorithm, options)}")
    return ref


class _OneIntraOpThread:
    """While open, torch runs on one intra-op thread (restored on exit): augmented runs train
    the clients in the calling thread, and one thread makes their arithmetic that of a
    one-thread run for any thread count (issue: different accuracies at 1 and 2 threads)."""

    def __init__(self, active: bool):
        self.active, self.threads = active, torch.get_num_threads()

    def __enter__(self):
        if self.active:
            torch.set_num_threads(1)
        return self

    def __exit__(self, *exc):
        if self.active:
            torch.set_num_threads(self.threads)


def run_spec(spec: AlgorithmSpec, model: nn.Module, clients: ClientData, *, state: Params | None = None,
             callback: Callable[[int, dict], None] | None = None, workers: int | None = None) -> FedResult:
    """Run ``spec.cfg.rounds`` rounds of the algorithm ``spec`` (see the module docstring).

    Each round: :func:`plan_round` (clients and batches), then every sampled client runs the
    phases from the server's shared parameters and its own local ones (:class:`LocalSGD`),
    then the server sets each shared parameter to the n_i-weighted average over the round's
    clients. ``state``: the starting parameters (default: the model's). ``callback(t,
    metrics)`` is called after every round with ``train_loss`` and, on evaluated rounds,
    ``test_accuracy``.

    ``workers``: on a CPU, how many clients train at the same time, each on its own thread
    running one intra-op thread (default: ``torch.get_num_threads()``); the server still sums
    the clients in their order, so the iterates are the same bit for bit for every
    ``workers >= 2`` and equal those of a run with ``torch.set_num_threads(1)``. Used only
    without augmentation (which draws from the shared generator during training) and with
    ``vmap_clients = 1``; otherwise, and on a GPU, the clients train one after another. With
    ``vmap_clients > 1`` (the batched path, for GPUs) the clients with equal batch schedules
    train in groups of that size as one vmapped computation, and the evaluation tests the
    clients with test sets of equal size in groups too (one vmapped forward pass and one host
    sync per group): the per-client numbers to float rounding.

    Inside :func:`replearn.neural.checkpoints.resumable`, a finished run is stored and an identical
    call (same settings, network, starting parameters and data; no ``callback``) loads it instead.
    """
    return _stored_or_run({"kind": "run_spec", "algorithm": spec.algorithm, "spec": repr(spec)}, model, state,
                          clients, callback,
                          lambda cb: _run_spec(spec, model, clients, state=state, callback=cb, workers=workers))


def _stored_or_run(run_info: dict[str, str], model: nn.Module, state: Params | None, clients: ClientData,
                   callback, run: Callable) -> "FedResult":
    """``run(callback)``, or, inside :func:`replearn.neural.checkpoints.resumable` and without a
    callback, the stored run recorded by ``run_info`` (kind, algorithm, settings), the network,
    the starting parameters and the data (:func:`replearn.neural.checkpoints.record`)."""
    if checkpoints.active() is None or callback is not None:
        return run(callback)
    start = state if state is not None else {n: p.detach() for n, p in model.named_parameters()}
    return checkpoints.cached(checkpoints.record(run_info, model, start, clients), lambda: run(None))


def _run_spec(spec: AlgorithmSpec, model: nn.Module, clients: ClientData, *, state: Params | None = None,
             callback: Callable[[int, dict], None] | None = None, workers: int | None = None) -> FedResult:
    """The run of :func:`run_spec` (without the store)."""
    spec.check(model)
    if spec.cfg.vmap_clients > 1 and spec.cfg.augment:
        raise ValueError(f"{spec.algorithm}: the batched path (cfg.vmap_clients > 1) does not augment (its crops and "
                         f"flips would be drawn in another order than one client after another); use "
                         f"cfg.vmap_clients = 1 with cfg.augment = True")
    clients = check_inputs(model, clients)
    cfg, shared, local, phases = spec.cfg, spec.shared, spec.local, spec.phases
    check_work(phases, clients.train_sizes.tolist(), cfg)
    names = [n for n, _ in model.named_parameters()]
    device = clients.device
    state = starting_state(model, state, device, clients.dtype)
    M = clients.n_clients
    x_train: dict[int, torch.Tensor] = {}  # training images in the working layout, made by the thread that first needs them
    local_state = {n: state[n].unsqueeze(0).repeat(M, *([1] * state[n].ndim)) for n in local}
    sizes = clients.train_sizes
    gen = make_generator(cfg.seed)
    losses = torch.full((cfg.rounds,), float("nan"))
    accs = torch.full((cfg.rounds,), float("nan"))
    participants = []
    evaluation = None
    n_workers = _client_workers(workers, device, cfg, M)
    pool = _ClientThreads(model, n_workers) if n_workers > 1 else None
    worker = LocalSGD(model) if pool is None else None
    reference = None  # the run's starting loss (check_divergence)
    one_thread = _OneIntraOpThread(pool is None and device.type == "cpu")
    try:
        one_thread.__enter__()
        for t in range(cfg.rounds):
            plan = plan_round(sizes.tolist(), phases, cfg, gen)
            selected = list(plan.clients)
            participants.append(plan.clients)
            plans = plan.batches
            sigs = {i: tuple(tuple(len(b) for b in batches) for batches in plans[i]) for i in selected}
            acc_shared = {n: torch.zeros_like(state[n]) for n in shared}
            round_loss = 0.0
            groups = _groups(selected, sigs, cfg.vmap_clients)

            def train_group(worker: LocalSGD, group: list[int]):
                """Every phase of one group of clients from the round's starting parameters;
                returns the local parameters, the n_i-weighted shared ones, the n_i-weighted
                mean loss and which clients stayed finite (computed on the worker's thread)."""
                G = len(group)
                params = {n: (local_state[n][group] if n in local_state else
                              state[n].unsqueeze(0).expand(G, *state[n].shape)) for n in names}
                for i in group:
                    if i not in x_train:
                        x_train[i] = _in_work_layout(clients.x_train[i])
                xs = [x_train[i] for i in group]
                ys = [clients.y_train[i] for i in group]
                loss_sum = torch.zeros(G, device=device, dtype=clients.dtype)
                n_steps = 0
                first = peak = None
                worker.watch()
                for k, phase in enumerate(phases):
                    if G == 1:
                        new, ls = worker.train({n: p[0] for n, p in params.items()}, phase.trainable, xs[0], ys[0],
                                               plans[group[0]][k], cfg, gen)
                        params = {**params, **{n: p.unsqueeze(0) for n, p in new.items()}}
                    else:
                        batches = list(zip(*(plans[i][k] for i in group)))
                        params, ls, f, pk = _sgd_vmap(model, params, phase.trainable, xs, ys, batches, cfg, gen)
                        first = f if first is None else first
                        peak = pk if peak is None else torch.maximum(peak, pk)
                    loss_sum += ls
                    n_steps += len(plans[group[0]][k])
                if G == 1:
                    first, peak = worker.first_loss.reshape(1), worker.peak_loss.reshape(1)
                w = sizes[group].to(device=device, dtype=loss_sum.dtype)
                weighted = {n: torch.tensordot(w, params[n], dims=1) for n in shared}
                finite = _finite(loss_sum, [params[n] for n in shared + local])
                return ({n: params[n] for n in local}, weighted, float((w * loss_sum).sum()) / max(n_steps, 1),
                        finite, first.tolist(), peak.tolist())

            if pool is not None:
                trained = pool.map(train_group, groups)
            else:
                trained = (train_group(worker, g) for g in groups)
            for group, (own, weighted, loss, finite, firsts, peaks) in zip(groups, trained):  # in order: the same sums
                if not bool(finite.all()):
                    raise FloatingPointError(
                        f"round {t}: client {group[int((~finite).nonzero()[0])]}'s local training diverged "
                        f"(non-finite loss or parameters) with lr = {cfg.lr:g}; lower the learning rate")
                for i, f, pk in zip(group, firsts, peaks):
                    reference = check_divergence(t, i, f, pk, reference, cfg.lr)
                for n in local:
                    local_state[n][group] = own[n]
                for n in shared:
                    acc_shared[n] += weighted[n]
                round_loss += loss
            total = float(sizes[selected].sum())
            for n in shared:
                state[n] = acc_shared[n] / total
            losses[t] = round_loss / total
            metrics = {"train_loss": float(losses[t])}
            if (t + 1) % cfg.eval_every == 0 or t == cfg.rounds - 1:
                def test(w: LocalSGD, i: int) -> tuple[float, float]:
                    return _test_client(w.model, clients, state, local_state, i, batch_size=1000)

                if cfg.vmap_clients > 1:
                    tested = _test_all(model, clients, state, local_state, cfg.vmap_clients)
                else:
                    tested = pool.map(test, range(M)) if pool is not None else (test(worker, i) for i in range(M))
                evaluation = _evaluation(clients, list(tested))
                accs[t] = metrics["test_accuracy"] = evaluation.average
            if callback is not None:
                callback(t, metrics)
    finally:
        one_thread.__exit__()
        if pool is not None:
            pool.close()
    return FedResult(spec.algorithm, state, local_state, shared, local, losses, accs, tuple(participants),
                     evaluation, cfg)


def run_rounds(algorithm: str, model: nn.Module, clients: ClientData, cfg: TrainConfig, *,
               shared: Sequence[str], local: Sequence[str], phases: Sequence[tuple],
               state: Params | None = None, callback: Callable[[int, dict], None] | None = None) -> FedResult:
    """:func:`run_spec` with a spec given by its parts: ``shared`` and ``local`` names and
    ``phases`` as ``(trainable names, steps or None, epochs)`` triples (or :class:`Phase`)."""
    spec = AlgorithmSpec(algorithm, tuple(shared), tuple(local),
                         tuple(Phase(tuple(tr), st, ep) for tr, st, ep in phases), cfg)
    return run_spec(spec, model, clients, state=state, callback=callback)


# --------------------------------------------------------------------------------------------
# The algorithms


def fedavg(model: nn.Module, clients: ClientData, cfg: TrainConfig, *, callback=None) -> FedResult:
    """FedAvg (McMahan et al., 2017; Collins et al., 2022, eqs. 2-3): each round the sampled
    clients run ``local_steps`` (tau) SGD steps or ``local_epochs`` epochs from the global
    model, which becomes their n_i-weighted average."""
    return run_spec(algorithm_spec("fedavg", model, cfg), model, clients, callback=callback)


def dsgd(model: nn.Module, clients: ClientData, cfg: TrainConfig, *, callback=None) -> FedResult:
    """D-SGD: FedAvg with one local step per round (tau = 1). For the same total number of
    local updates as FedAvg with tau steps and T rounds, pass :func:`matched_dsgd_config`."""
    return run_spec(algorithm_spec("dsgd", model, cfg), model, clients, callback=callback)


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
    return run_spec(algorithm_spec("fedrep", model, cfg), model, clients, callback=callback)


def fedper(model: nn.Module, clients: ClientData, cfg: TrainConfig, *, callback=None) -> FedResult:
    """FedPer (Arivazhagan et al., 2019): joint local updates of body and head; the body is
    averaged, each client keeps its head."""
    return run_spec(algorithm_spec("fedper", model, cfg), model, clients, callback=callback)


def lg_fedavg(model: nn.Module, clients: ClientData, cfg: TrainConfig, *, callback=None) -> FedResult:
    """LG-FedAvg (Liang et al., 2020), as compared in the FedRep paper: local bodies
    (representations), a shared head averaged by the server; joint local updates."""
    return run_spec(algorithm_spec("lg_fedavg", model, cfg), model, clients, callback=callback)


def local_only(model: nn.Module, clients: ClientData, cfg: TrainConfig, *, callback=None) -> FedResult:
    """Every client trains its own copy of the initial model; nothing is communicated.
    A "round" is one local phase for the sampled clients."""
    return run_spec(algorithm_spec("local_only", model, cfg), model, clients, callback=callback)


def finetune(model: nn.Module, clients: ClientData, *, state: Params | None = None, epochs: int = 10,
             part: str = "head", lr: float = 0.01, momentum: float = 0.5, weight_decay: float = 0.0,
             batch_size: int = 10, augment: bool = False, seed: int = 0, vmap_clients: int = 1) -> FedResult:
    """+FT: every client fine-tunes ``part`` ("head" or "all") of the trained model ``state``
    (default: the model's parameters) for ``epochs`` epochs of SGD on its training data
    (FedRep paper: 10 epochs of the head; FedAvg-FT paper: 10 epochs) and is tested on its
    test data. Returns a one-round :class:`FedResult` with the fine-tuned parts in ``local``.
    ``vmap_clients``: clients with equal data sizes fine-tune together as one batched computation
    (the engine's batched path, :class:`TrainConfig`; for a GPU), 1: one after another."""
    if part not in ("head", "all"):
        raise ValueError(f"part must be 'head' or 'all', got {part!r}")
    check_count(epochs, "epochs", 1)
    cfg = TrainConfig(rounds=1, lr=lr, momentum=momentum, weight_decay=weight_decay, batch_size=batch_size,
                      local_epochs=epochs, augment=augment, last_rounds=1, seed=seed, vmap_clients=vmap_clients)
    return run_spec(algorithm_spec(f"finetune_{part}", model, cfg), model, clients, state=state)


# --------------------------------------------------------------------------------------------
# The open algorithm model: a round loop for algorithms with their own client and server steps


@dataclass
class ClientRound:
    """What one sampled client sees in one round of :func:`run_protocol` (built on the
    client's thread): its index ``client``, a :class:`LocalSGD` ``worker`` to train or take
    gradients with, its training images ``x`` (in :func:`work_layout`) and labels ``y``, its size
    ``n``, ``batches[k]``: the index batches planned for phase k, the run's ``cfg`` and the
    algorithm's ``options``, ``generator`` (for augmentation only; None when clients train on
    threads, which needs ``cfg.augment = False``), the server's parameters ``global_params``
    and ``server`` state at the start of the round, the round's ``broadcast`` (the same for
    every client), the client's own ``state`` (its dict from the last round it took part in,
    or the algorithm's initial client state) and ``draw``: the algorithm's extra random draws
    for this client, made in the calling thread before training. ``initial``: the run's
    starting parameters. Nothing here may be modified in place: a client's new state is
    returned in its :class:`ClientUpdate`. At evaluation, ``batches`` and ``broadcast`` are
    empty and ``draw`` is None. On the batched path (``cfg.vmap_clients > 1``) ``worker`` is a
    :class:`FunctionalSGD`, ``x``, ``y``, ``batches`` and ``state`` are one client's slices of
    the group's stacked tensors under ``torch.func.vmap``, and ``client`` and ``n`` are those of
    the group's first client."""

    client: int
    worker: "LocalSGD"
    x: torch.Tensor
    y: torch.Tensor
    n: int
    batches: tuple
    cfg: TrainConfig
    options: object
    generator: torch.Generator | None
    global_params: Params
    server: dict
    broadcast: dict
    state: dict
    draw: object
    initial: Params


@dataclass
class ClientUpdate:
    """A client's answer in :func:`run_protocol`: ``upload``: tensors the server averages with
    weights n_i over the round's clients (any names); ``state``: the client's state kept for
    its next round (and for its evaluation); ``loss_sum`` (a 0-d tensor) and ``n_steps``: the
    summed minibatch loss of its steps and how many (for ``train_loss``)."""

    upload: Params
    state: dict
    loss_sum: torch.Tensor
    n_steps: int


def _all_finite(loss_sum: torch.Tensor, tensors: Sequence[torch.Tensor]) -> bool:
    norms = [torch.as_tensor(loss_sum, dtype=torch.float64).reshape(())]
    norms += [t.detach().norm().to(torch.float64) for t in tensors if t.is_floating_point() and t.numel()]
    return bool(torch.isfinite(torch.stack(norms)).all())


def _tensors_of(state) -> list[torch.Tensor]:
    if isinstance(state, torch.Tensor):
        return [state]
    if isinstance(state, dict):
        return [t for v in state.values() for t in _tensors_of(v)]
    return []


def _hashable(obj):
    """``obj`` (an algorithm's draw for a client) as a hashable value, equal for equal draws."""
    if isinstance(obj, torch.Tensor):
        return ("tensor", tuple(obj.shape), tuple(obj.flatten().tolist()))
    if isinstance(obj, (list, tuple)):
        return tuple(_hashable(o) for o in obj)
    if isinstance(obj, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in obj.items()))
    return obj


def _stack_states(states: Sequence[dict]) -> dict:
    """Client states (nested dicts of tensors) stacked along a new first (client) axis."""
    out = {}
    for k, v in states[0].items():
        if isinstance(v, dict):
            out[k] = _stack_states([s[k] for s in states])
        elif isinstance(v, torch.Tensor):
            out[k] = torch.stack([s[k] for s in states])
        else:
            raise TypeError(f"the batched path (cfg.vmap_clients > 1) needs client states made of tensors; "
                            f"state {k!r} is a {type(v).__name__}: use cfg.vmap_clients = 1")
    return out


def _client_slice(state: dict, g: int) -> dict:
    """Client ``g``'s part of a stacked state (copies, so that one client keeps no group alive)."""
    return {k: _client_slice(v, g) if isinstance(v, dict) else v[g].clone() for k, v in state.items()}


def _protocol_group(algorithm, model: nn.Module, clients: ClientData, group: Sequence[int], plan: RoundPlan,
                    draw, broadcast: dict, states: dict, images: Callable[[int], torch.Tensor], cfg: TrainConfig,
                    options, params: Params, server: dict, initial: Params) -> dict[int, tuple]:
    """One round of ``client_update`` for a group of clients with the same batch sizes, data size
    and draw, as one batched computation: the algorithm's per-client code runs once under
    ``torch.func.vmap`` with a :class:`FunctionalSGD` worker, on the clients' stacked images,
    index batches and states (the server's parameters, state and broadcast are shared). Returns,
    per client, what :func:`run_protocol`'s per-client step returns (update, n_i-weighted upload,
    finite, first and peak loss)."""
    lead = group[0]
    xs = torch.stack([images(i) for i in group])
    ys = torch.stack([clients.y_train[i] for i in group])
    batches = tuple(tuple(torch.stack(step) for step in zip(*(plan.batches[i][k] for i in group)))
                    for k in range(len(plan.batches[lead])))
    worker = FunctionalSGD(model)
    n_steps = []
    zero = torch.zeros((), device=clients.device, dtype=clients.dtype)

    def one(state, x, y, idx):
        worker.watch()
        update = algorithm.client_update(ClientRound(lead, worker, x, y, int(clients.train_sizes[lead]), idx, cfg,
                                                     options, None, params, server, broadcast, state, draw, initial))
        if not isinstance(update, ClientUpdate):
            raise TypeError(f"{algorithm.name}: client_update must return a neural.ClientUpdate")
        n_steps.append(update.n_steps)
        first = zero if worker.first_loss is None else worker.first_loss
        peak = zero if worker.peak_loss is None else worker.peak_loss
        return update.upload, update.state, update.loss_sum + zero, first, peak

    upload, state, loss_sum, first, peak = vmap(one)(_stack_states([states[i] for i in group]), xs, ys, batches)
    finite = _finite(loss_sum, list(upload.values()) + _tensors_of(state)).tolist()
    firsts, peaks = first.tolist(), peak.tolist()
    out = {}
    for g, i in enumerate(group):
        own = {k: v[g] for k, v in upload.items()}
        n_i = float(clients.train_sizes[i])
        out[i] = (ClientUpdate(own, _client_slice(state, g), loss_sum[g], n_steps[0]),
                  {k: v * n_i for k, v in own.items()}, finite[g], firsts[g], peaks[g])
    return out


def run_protocol(algorithm, model: nn.Module, clients: ClientData, cfg: TrainConfig, options=None, *,
                 state: Params | None = None, callback: Callable[[int, dict], None] | None = None,
                 workers: int | None = None) -> FedResult:
    """Run ``cfg.rounds`` rounds of an algorithm given by its client and server steps (the
    protocol of :class:`replearn.neural.algorithms.base.ProtocolAlgorithm`): FedProx, SCAFFOLD,
    Ditto, APFL, L2GD, Per-FedAvg, Fed-MTL and any new one.

    ``algorithm`` provides ``name``, ``check_options(options) -> options``,
    ``phases(model, cfg, options)`` (the :class:`Phase` s whose batches :func:`plan_round`
    draws for every sampled client), ``check(model, cfg, options)``,
    ``init_server(params, options) -> dict``, ``init_client(initial, options) -> dict``,
    ``draw(plan, cfg, options, generator) -> {client: anything}``,
    ``broadcast(params, server, states, selected, options) -> dict``,
    ``client_update(ClientRound) -> ClientUpdate``,
    ``server_update(params, server, mean_upload, selected, n_clients, options) -> (params, server)``,
    ``personal_names(model, options) -> names`` and ``eval_params(ClientRound) -> Params``.

    Each round, in the calling thread: :func:`plan_round` (clients and batches), then the
    algorithm's extra draws and broadcast; every sampled client runs ``client_update`` (on
    the client threads of :func:`run_spec`, each with one intra-op thread); the uploads are
    summed with weights n_i in client order and divided by the round's total, and
    ``server_update`` makes the new server parameters and state. So, as with
    :func:`run_spec`, the iterates are the same bit for bit for every number of workers.
    Client states are made by ``init_client`` from the starting parameters when a client is
    first sampled (or evaluated). On evaluated rounds every client is tested with
    ``eval_params`` (what it would use: its personal model, a mixed or an adapted one); the
    result's ``local`` holds these parameters for the names of ``personal_names``. A
    non-finite loss, upload or client state, or a loss above :data:`DIVERGENCE_FACTOR` times
    the starting loss, raises ``FloatingPointError`` naming ``lr`` and the options that scale
    the algorithm's steps (its options' ``step_scales``, :func:`divergence_advice`).

    With ``cfg.vmap_clients > 1`` and an algorithm whose ``batched`` is true, the sampled
    clients with the same batch sizes, data size and draw train in groups of up to
    ``vmap_clients`` as one batched computation: ``client_update`` runs once per group under
    ``torch.func.vmap`` with a :class:`FunctionalSGD` worker, on the group's stacked images,
    index batches and client states (the server's parameters, state and broadcast shared); a
    client without a partner trains alone as above. The uploads are still summed per client in
    client order, so the iterates are the per-client ones to float rounding (meant for GPUs: on
    a CPU the per-client threads are faster). Needs ``cfg.augment = False``. The evaluation then
    tests the clients' ``eval_params`` in groups, as :func:`run_spec`'s batched path does.

    Inside :func:`replearn.neural.checkpoints.resumable`, a finished run is stored and an identical
    call (same settings, network, starting parameters and data; no ``callback``) loads it instead.
    """
    run_info = {"kind": "run_protocol", "algorithm": algorithm.name, "config": repr(cfg),
                "options": repr(algorithm.check_options(options))}
    return _stored_or_run(run_info, model, state, clients, callback,
                          lambda cb: _run_protocol(algorithm, model, clients, cfg, options, state=state, callback=cb,
                                                   workers=workers))


def _run_protocol(algorithm, model: nn.Module, clients: ClientData, cfg: TrainConfig, options=None, *,
                 state: Params | None = None, callback: Callable[[int, dict], None] | None = None,
                 workers: int | None = None) -> FedResult:
    """The run of :func:`run_protocol` (without the store)."""
    options = algorithm.check_options(options)
    if not isinstance(cfg, TrainConfig):
        raise ValueError(f"cfg must be a neural.TrainConfig, got {type(cfg).__name__}")
    if cfg.vmap_clients > 1 and cfg.augment:
        raise ValueError(f"{algorithm.name}: the batched path (cfg.vmap_clients > 1) does not augment; "
                         f"use cfg.vmap_clients = 1 with cfg.augment = True")
    clients = check_inputs(model, clients)
    phases = tuple(algorithm.phases(model, cfg, options))
    AlgorithmSpec(algorithm.name, (), (), phases, cfg).check(model)  # the phases' names exist
    algorithm.check(model, cfg, options)
    sizes = clients.train_sizes
    check_work(phases, sizes.tolist(), cfg)
    device, M = clients.device, clients.n_clients
    names = [n for n, _ in model.named_parameters()]
    params = starting_state(model, state, device, clients.dtype)
    initial = {n: p.clone() for n, p in params.items()}
    server = algorithm.init_server(params, options)
    states: dict[int, dict] = {}
    personal = tuple(algorithm.personal_names(model, options))
    x_train: dict[int, torch.Tensor] = {}
    gen = make_generator(cfg.seed)
    losses = torch.full((cfg.rounds,), float("nan"))
    accs = torch.full((cfg.rounds,), float("nan"))
    participants, evaluation, final_params = [], None, []
    n_workers = _client_workers(workers, device, cfg, M)
    pool = _ClientThreads(model, n_workers) if n_workers > 1 else None
    worker = LocalSGD(model) if pool is None else None
    reference = None
    one_thread = _OneIntraOpThread(pool is None and device.type == "cpu")

    def images(i: int) -> torch.Tensor:
        if i not in x_train:
            x_train[i] = _in_work_layout(clients.x_train[i])
        return x_train[i]

    def context(w: LocalSGD, i: int, batches, broadcast, draw, own: dict) -> ClientRound:
        return ClientRound(i, w, images(i), clients.y_train[i], int(sizes[i]), batches, cfg, options,
                           gen if pool is None else None, params, server, broadcast, own, draw, initial)

    try:
        one_thread.__enter__()
        for t in range(cfg.rounds):
            plan = plan_round(sizes.tolist(), phases, cfg, gen)
            selected = list(plan.clients)
            participants.append(plan.clients)
            draws = algorithm.draw(plan, cfg, options, gen) or {}
            for i in selected:
                if i not in states:
                    states[i] = algorithm.init_client(initial, options)
            broadcast = algorithm.broadcast(params, server, {i: states[i] for i in selected}, selected, options)

            def train_client(w: LocalSGD, i: int):
                w.watch()
                update = algorithm.client_update(context(w, i, plan.batches[i], broadcast, draws.get(i), states[i]))
                if not isinstance(update, ClientUpdate):
                    raise TypeError(f"{algorithm.name}: client_update must return a neural.ClientUpdate")
                n_i = float(sizes[i])
                weighted = {k: v * n_i for k, v in update.upload.items()}
                finite = _all_finite(update.loss_sum, list(update.upload.values()) + _tensors_of(update.state))
                first = float(w.first_loss) if w.first_loss is not None else 0.0
                peak = float(w.peak_loss) if w.peak_loss is not None else 0.0
                return update, weighted, finite, first, peak

            if cfg.vmap_clients > 1 and getattr(algorithm, "batched", False):
                keys = {i: (tuple(tuple(len(b) for b in bs) for bs in plan.batches[i]), int(sizes[i]),
                            _hashable(draws.get(i))) for i in selected}
                done: dict[int, tuple] = {}
                for group in _groups(selected, keys, cfg.vmap_clients):
                    if len(group) == 1:
                        done[group[0]] = train_client(worker, group[0])
                    else:
                        done.update(_protocol_group(algorithm, model, clients, group, plan, draws.get(group[0]),
                                                    broadcast, states, images,
                                                    cfg, options, params, server, initial))
                trained = (done[i] for i in selected)
            else:
                trained = pool.map(train_client, selected) if pool is not None else (
                    train_client(worker, i) for i in selected)
            acc: Params = {}
            round_loss = 0.0
            for i, (update, weighted, finite, first, peak) in zip(selected, trained):  # in order: the same sums
                if not finite:
                    raise FloatingPointError(
                        f"round {t}: client {i}'s local training diverged (non-finite loss, parameters or state) "
                        f"{divergence_advice(cfg.lr, algorithm.name, options)}")
                reference = check_divergence(t, i, first, peak, reference, cfg.lr, algorithm=algorithm.name,
                                             options=options)
                states[i] = update.state
                for k, v in weighted.items():
                    if k not in acc:
                        acc[k] = torch.zeros_like(v)
                    acc[k] += v
                round_loss += float(sizes[i]) * float(update.loss_sum) / max(update.n_steps, 1)
            total = float(sizes[selected].sum())
            mean_upload = {k: v / total for k, v in acc.items()}
            params, server = algorithm.server_update(params, server, mean_upload, selected, M, options)
            losses[t] = round_loss / total
            metrics = {"train_loss": float(losses[t])}
            if (t + 1) % cfg.eval_every == 0 or t == cfg.rounds - 1:
                def test(w: LocalSGD, i: int):
                    own = states[i] if i in states else algorithm.init_client(initial, options)
                    p_i = algorithm.eval_params(context(w, i, (), {}, None, own))
                    with torch.no_grad():
                        kept = {n: p_i[n].detach().clone() for n in personal}
                        finite = torch.stack([torch.isfinite(p_i[n]).all() for n in names]).tolist()  # one sync
                        if not all(finite):
                            n = names[finite.index(False)]
                            raise FloatingPointError(f"round {t}: client {i}'s evaluated parameter {n!r} is "
                                                     f"not finite, "
                                                     f"{divergence_advice(cfg.lr, algorithm.name, options)}")
                    if cfg.vmap_clients > 1:
                        return p_i, kept  # tested below, in groups
                    return _test_client(w.model, clients, p_i, {}, i, batch_size=1000), kept

                tested = list(pool.map(test, range(M)) if pool is not None else (test(worker, i) for i in range(M)))
                if cfg.vmap_clients > 1:
                    own = {n: torch.stack([p_i[n] for p_i, _ in tested]) for n in names}
                    tested = list(zip(_test_all(model, clients, {}, own, cfg.vmap_clients), [k for _, k in tested]))
                evaluation = _evaluation(clients, [r for r, _ in tested])
                final_params = [p for _, p in tested]
                accs[t] = metrics["test_accuracy"] = evaluation.average
            if callback is not None:
                callback(t, metrics)
    finally:
        one_thread.__exit__()
        if pool is not None:
            pool.close()
    local = {n: torch.stack([p[n] for p in final_params]) for n in personal}
    shared = tuple(n for n in names if n not in personal)
    return FedResult(algorithm.name, params, local, shared, personal, losses, accs, tuple(participants),
                     evaluation, cfg, {"server": server, "clients": states})
