"""Book 5.9: FedRep's body serves new clients with unseen classes (in the spirit of Collins,
Hassani, Mokhtari, Shakkottai 2021, Fig. 6, which uses FEMNIST).

FedRep and FedAvg are trained on the classes left after holding out ``n_new`` classes
(:func:`replearn.neural.data.class_split`); new clients holding held-out classes keep the trained body
fixed and fit only a fresh head (:func:`replearn.neural.personalisation.fit_heads`); the same for the
untrained (random) body as a baseline; accuracy after every head epoch.
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
from replearn.neural.personalisation import PAPER_OPTIM, FederationSettings, first_protocol, fit_heads, make_federation

NEW_METHODS = ("FedRep", "FedAvg", "random body")


#: What the FedRep paper states of Fig. 6's setting that carries over to our CIFAR analogue, by
#: settings field: (value, where it says so). Fig. 6 itself uses FEMNIST letters -> digits.
PAPER_SETTINGS = {"new_train": (500, "FedRep paper, Sec. 5.2 (500 samples at the new client)"),
                  "train.lr": (0.01, "the FedRep authors' code (not in the paper)"),
                  "train.momentum": (0.5, "the FedRep authors' code (not in the paper)"),
                  "train.batch_size": (10, "the FedRep authors' code (not in the paper)"),
                  "train.weight_decay": (1e-4, "the FedRep authors' code, models/Update.py (weights only; not in the paper)"),
                  "train.augment": (True, "the FedRep authors' code, utils/train_utils.py (RandomCrop(32, 4) + flip)"),
                  "split": ("authors", "the FedRep authors' code, utils/sampling.py (noniid)"),
                  "train.participation": (0.1, "FedRep paper, Sec. 5.2 (r = 0.1)")}


@dataclass(frozen=True)
class NewClientSettings(FederationSettings):
    """Hold out ``n_new`` of the dataset's classes; train FedRep and FedAvg on ``clients``
    clients with ``classes_per_client`` of the other classes; then ``new_clients`` new clients
    with ``new_classes_per_client`` held-out classes, ``new_train`` training and ``new_test``
    test images each, fit a fresh head on each body for ``head_epochs_new`` epochs (accuracy
    after every epoch; optimiser: ``train``'s lr, momentum and batch size). CPU default: 4
    CIFAR-10 classes held out, so the new clients hold different pairs of unseen classes; 6
    training clients on the other 6 classes."""

    dataset: str = "cifar10"
    n_new: int = 4
    clients: int = 6
    train: neural.TrainConfig = replace(FederationSettings.train, rounds=25, eval_every=25, participation=0.67)
    new_clients: int = 4
    new_classes_per_client: int = 2
    new_train: int = 50
    new_test: int = 100
    head_epochs_new: int = 10

    def validate(self) -> None:
        super().validate()
        for name in ("n_new", "new_clients", "new_classes_per_client", "new_train", "new_test", "head_epochs_new"):
            check_int(getattr(self, name), name, 1)
        if self.dataset not in ("cifar10", "cifar100"):
            raise ValueError(f"unknown dataset {self.dataset!r}; use 'cifar10' or 'cifar100'")
        if self.new_classes_per_client > self.n_new:
            raise ValueError(f"new_classes_per_client = {self.new_classes_per_client} exceeds n_new = {self.n_new}")

    @classmethod
    def long(cls):
        """Near-paper on a CPU: the paper profile (CIFAR-100, 80/20 classes, 80 training clients
        with S = 5, r = 0.1, the authors' CNN and optimiser, float32; 20 new clients with 5
        held-out classes, 20 head epochs) on the offline subset (250 training images per
        CIFAR-100 class, so 250 per training client and 250 per new client; the paper: 500),
        T = 50 rounds (the paper: 100), evaluated every 5 rounds, 2 seeds (a seed takes about
        20 minutes of one core here)."""
        p = cls.paper()
        p = first_protocol(p)  # the protocol its committed results used, until they are re-run
        return replace(p, new_train=250, seeds=(0, 1), full_data=False,
                       train=replace(p.train, rounds=50, eval_every=5))

    @classmethod
    def paper(cls):
        """Our CIFAR-100 analogue of Fig. 6 (which trains a 2-layer MLP on FEMNIST): 80/20
        classes; n = 80 training clients with S = 5 (the paper's n = 100 cannot cut 80 classes
        into equally many shards: 100 x 5 shards over 80 classes; 80 x 5 gives 5 shards per
        class), Sec. 5.2's optimiser and T = 100; 20 new clients with 5 held-out classes and 500
        training images each (all 500 training images of each held-out class are used), 20 head
        epochs (our choice)."""
        return cls(dataset="cifar100", n_new=20, clients=80, classes_per_client=5, new_clients=20,
                   new_classes_per_client=5, new_train=500, new_test=100, head_epochs_new=20, **PAPER_OPTIM)

    @classmethod
    def gpu(cls):
        """The paper profile on the offline subset (250 images per CIFAR-100 class, so new
        clients get 250 training images, not 500), T = 100, evaluated every 5 rounds, one seed,
        a round's 8 clients batched."""
        p = cls.paper()
        return replace(p, new_train=250, seeds=(0,), full_data=False,
                       train=replace(p.train, eval_every=5, vmap_clients=8, augment=False))


def work(s: NewClientSettings, *, batched: bool = True) -> dict:
    """:func:`replearn.book.scales.launch_estimate` of :func:`run_new_clients` with ``s``: FedRep (head
    epochs + body epochs) and FedAvg on the training classes, then three heads per new client
    (the new clients batched like the training clients)."""
    cfg = s.train
    classes = 10 if s.dataset == "cifar10" else 100
    used = (classes - s.n_new) / classes
    fedrep, m = scales.federated_steps(s.dataset, s.full_data, s.clients, s.train_per_client, cfg,
                                       cfg.head_epochs + cfg.local_epochs, classes_used=used)
    fedavg, _ = scales.federated_steps(s.dataset, s.full_data, s.clients, s.train_per_client, cfg,
                                       cfg.local_epochs, classes_used=used)
    heads = 3 * s.new_clients * s.head_epochs_new * -(-s.new_train // cfg.batch_size)
    evals = 2 * s.clients * -(-cfg.rounds // cfg.eval_every) + 3 * s.new_clients * s.head_epochs_new
    return scales.combine(scales.launch_estimate(fedrep + fedavg, evals,
                                                 batched_clients=scales.batching(cfg, m, batched)),
                          scales.launch_estimate(heads, 0, batched_clients=scales.batching(cfg, s.new_clients, batched)))


@dataclass(frozen=True)
class NewClientResult:
    """``accuracy[method][e]``: new clients' mean test accuracy after ``e + 1`` head epochs;
    ``client_accuracy[method]``: per new client after the last epoch; ``trained[method]``:
    the personalised accuracy of the federated run on the training clients."""

    train_classes: tuple[int, ...]
    new_classes: tuple[int, ...]
    accuracy: dict
    client_accuracy: dict
    trained: dict
    data: str

    @property
    def epochs(self) -> torch.Tensor:
        return torch.arange(1, len(next(iter(self.accuracy.values()))) + 1)


def run_new_clients(s: NewClientSettings, *, cifar: D.CifarData | None = None) -> NewClientResult:
    """New clients (see the module docstring)."""
    cifar = cifar if cifar is not None else D.load_cifar(s.dataset)
    require_data(cifar, s.full_data, "NewClientSettings")
    if not s.n_new < cifar.n_classes:
        raise ValueError(f"need 0 < n_new < {cifar.n_classes}, got {s.n_new}")
    train_cls, new_cls = D.class_split(cifar.n_classes, s.n_new, seed=derive_seed(s.seed, 20))
    fed = make_federation(cifar, s.clients, s.classes_per_client, train_per_client=s.train_per_client,
                          test_per_client=s.test_per_client, seed=s.seed, classes=train_cls, split=s.split)
    new = make_federation(cifar, s.new_clients, s.new_classes_per_client,
                          train_per_client=s.new_train, test_per_client=s.new_test,
                          seed=derive_seed(s.seed, 21), classes=new_cls,
                          split="disjoint")  # each new client holds distinct held-out classes (chance 1/S)
    device = fed.clients.device
    init = s.network(s.dataset, fed.n_classes, derive_seed(s.seed, 3), device)
    cfg = s.config()
    runs = {name: algorithms.run(name, init, fed.clients, cfg) for name in ("FedRep", "FedAvg")}
    bodies = {m: r.state for m, r in runs.items()}
    bodies["random body"] = {n: p.detach() for n, p in init.named_parameters()}
    new_model = s.network(s.dataset, new.n_classes, derive_seed(s.seed, 22), device)
    fresh_head = {n: p.detach() for n, p in new_model.named_parameters() if n.startswith("head.")}
    acc, cacc = {}, {}
    for method in NEW_METHODS:
        state = {**{n: p for n, p in bodies[method].items() if not n.startswith("head.")}, **fresh_head}
        r = fit_heads(new_model, new.clients, state, epochs=s.head_epochs_new, lr=cfg.lr, momentum=cfg.momentum,
                      batch_size=cfg.batch_size, seed=derive_seed(s.seed, 23), vmap_clients=cfg.vmap_clients)
        acc[method], cacc[method] = r.test_accuracy, r.final.accuracy
    return NewClientResult(tuple(int(c) for c in train_cls), tuple(int(c) for c in new_cls), acc, cacc,
                           {m: r.accuracy for m, r in runs.items()}, cifar.describe())
