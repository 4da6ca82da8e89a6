"""Book 5.8: more local epochs help FedRep and hurt FedAvg (Collins, Hassani, Mokhtari,
Shakkottai 2021, Fig. 5).

CIFAR-10 over clients holding S classes each (:func:`replearn.neural.personalisation.make_federation`);
FedRep with ``E`` head epochs (and ``local_epochs`` body epochs) and FedAvg with ``E`` local
epochs, for every ``E`` in ``epochs``, from one initial network and one seed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from replearn.neural import data as D
from replearn.neural import algorithms
from replearn import neural
from replearn.backend import derive_seed
from replearn.checks import check_int
from replearn.book import scales
from replearn.book.scales import require_data
from replearn.neural.personalisation import PAPER_OPTIM, FederationSettings, first_protocol, make_federation


#: What the FedRep paper states of Fig. 5's setting, by settings field: (value, where it says so).
PAPER_SETTINGS = {"dataset": ("cifar10", "FedRep paper, Fig. 5 caption"),
                  "train_per_client": (None, "FedRep paper, Sec. 5.2 (50,000/n each)"),
                  "train.lr": (0.01, "the FedRep authors' code (not in the paper)"),
                  "train.momentum": (0.5, "the FedRep authors' code (not in the paper)"),
                  "train.batch_size": (10, "the FedRep authors' code (not in the paper)"),
                  "train.participation": (0.1, "FedRep paper, Sec. 5.2 (r = 0.1)"),
                  "train.weight_decay": (1e-4, "the FedRep authors' code, models/Update.py (weights only; not in the paper)"),
                  "train.augment": (True, "the FedRep authors' code, utils/train_utils.py (RandomCrop(32, 4) + flip)"),
                  "split": ("authors", "the FedRep authors' code, utils/sampling.py (noniid)"),
                  "train.rounds": (100, "FedRep paper, Sec. 5.2 (T = 100 for CIFAR)")}


@dataclass(frozen=True)
class EpochSettings(FederationSettings):
    """Fig. 5: ``dataset``, ``clients`` clients with S = ``classes_per_client`` classes; FedRep
    with ``E`` head epochs and FedAvg with ``E`` local epochs, for every ``E`` in ``epochs``.
    CPU default: 100 training images per client, 15 rounds, epochs (not steps) for both
    phases, E in {1, 3}."""

    dataset: str = "cifar10"
    epochs: tuple[int, ...] = (1, 3)
    train_per_client: int | None = 100
    train: neural.TrainConfig = replace(FederationSettings.train, rounds=15, eval_every=15, local_steps=None,
                                        head_steps=None)

    def validate(self) -> None:
        super().validate()
        if len(set(self.epochs)) != len(self.epochs):
            raise ValueError(f"epochs must be distinct, got {self.epochs!r}")
        for e in self.epochs:
            check_int(e, "epochs", 1)
        if self.dataset not in ("cifar10", "cifar100"):
            raise ValueError(f"unknown dataset {self.dataset!r}; use 'cifar10' or 'cifar100'")

    @classmethod
    def long(cls):
        """Near-paper on a CPU: the paper profile (n = 100, S = 2, r = 0.1, the authors' CNN and
        optimiser, float32) on the offline subset (20,000 of CIFAR-10's 50,000 training images,
        so 200 per client; 50 test images per client), E in {1, 5} (paper(): also 10 and 20),
        T = 30 rounds (the paper: 100), evaluated every 5 rounds, 2 seeds (a seed takes about
        20 minutes of one core here; E = 10 would triple it)."""
        p = cls.paper()
        p = first_protocol(p)  # the protocol its committed results used, until they are re-run
        return replace(p, epochs=(1, 5), seeds=(0, 1), full_data=False,
                       train=replace(p.train, rounds=30, eval_every=5))

    @classmethod
    def paper(cls):
        """n = 100, S = 2 (Sec. 5.2); E in {1, 5, 10, 20} is our choice (our copy of the paper
        has the caption of Fig. 5 but not its axis)."""
        return cls(clients=100, classes_per_client=2, epochs=(1, 5, 10, 20), **PAPER_OPTIM)

    @classmethod
    def gpu(cls):
        """The paper profile sized for a few minutes of one GPU on the offline subset (200
        images per client): E in {1, 5, 10}, T = 50, evaluated every 5 rounds (the final 10
        rounds' mean uses the evaluations in them), one seed, a round's 10 clients batched."""
        p = cls.paper()
        return replace(p, epochs=(1, 5, 10), seeds=(0,), full_data=False,
                       train=replace(p.train, rounds=50, eval_every=5, vmap_clients=10, augment=False))


def work(s: EpochSettings, *, batched: bool = True) -> dict:
    """:func:`replearn.book.scales.launch_estimate` of :func:`run_epochs` with ``s``: FedRep with E
    head epochs and ``local_epochs`` body epochs, FedAvg with E epochs, for every E."""
    per_round = sum(2 * e + s.train.local_epochs for e in s.epochs)
    steps, m = scales.federated_steps(s.dataset, s.full_data, s.clients, s.train_per_client, s.train, per_round)
    evals = 2 * len(s.epochs) * s.clients * -(-s.train.rounds // s.train.eval_every)
    return scales.launch_estimate(steps, evals, batched_clients=scales.batching(s.train, m, batched))


@dataclass(frozen=True)
class EpochResult:
    """``accuracy[method][j]``: personalised accuracy with ``epochs[j]`` local epochs
    (method "FedRep": head epochs; "FedAvg": local epochs); ``curves[method][j]``: accuracy
    after each round."""

    epochs: tuple[int, ...]
    accuracy: dict
    curves: dict
    train_sizes: torch.Tensor
    test_sizes: torch.Tensor
    data: str

    def error(self, method: str) -> torch.Tensor:
        return 1 - self.accuracy[method]


def run_epochs(s: EpochSettings, *, cifar: D.CifarData | None = None) -> EpochResult:
    """Paper Fig. 5 (see the module docstring)."""
    cifar = cifar if cifar is not None else D.load_cifar(s.dataset)
    require_data(cifar, s.full_data, "EpochSettings")
    fed = make_federation(cifar, s.clients, s.classes_per_client, train_per_client=s.train_per_client,
                          test_per_client=s.test_per_client, seed=s.seed, split=s.split)
    cl = fed.clients
    acc = {"FedRep": [], "FedAvg": []}
    curves = {"FedRep": [], "FedAvg": []}
    for e in s.epochs:
        for method in ("FedRep", "FedAvg"):
            model = s.network(s.dataset, fed.n_classes, derive_seed(s.seed, 3), cl.device)
            if method == "FedRep":
                r = algorithms.run("FedRep", model, cl, s.config(head_epochs=e))
            else:
                r = algorithms.run("FedAvg", model, cl, s.config(local_epochs=e))
            acc[method].append(r.accuracy)
            curves[method].append(r.test_accuracy)
    return EpochResult(tuple(s.epochs), {m: torch.tensor(v) for m, v in acc.items()},
                       {m: torch.stack(v) for m, v in curves.items()}, cl.train_sizes, cl.test_sizes,
                       cifar.describe())
