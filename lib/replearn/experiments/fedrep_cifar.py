"""FedRep on CIFAR (Collins, Hassani, Mokhtari, Shakkottai 2021, Sec. 5.2; book 5.7-5.9).

Every experiment partitions (a subset of) CIFAR over ``clients`` clients holding ``S`` classes
each (:func:`replearn.data.shard_partition`, the pathological non-IID split of the LG-FedAvg
and FedRep code) with per-client test sets of the same classes and proportions
(:func:`replearn.data.client_test_split`), and trains the authors' CNN
(:class:`replearn.models.FedRepCNN`; its head is the last linear layer) with the algorithms of
:mod:`replearn.neural` from one initial model, one seed and one optimiser:

- :func:`run_table` (Table 1): personalised test accuracy of Local only, FedAvg, FedAvg+FT
  (the FedAvg model with each client's head fine-tuned for ``ft_epochs`` epochs,
  :func:`replearn.neural.finetune`), FedPer, LG-FedAvg and FedRep, for each partition in
  ``partitions`` (dataset, n, S);
- :func:`run_epochs` (Fig. 5): FedRep with ``E`` local epochs for the head (one for the body)
  and FedAvg with ``E`` local epochs, for every ``E`` in ``epochs``;
- :func:`run_new_clients` (in the spirit of Fig. 6, which uses FEMNIST): FedRep and FedAvg are
  trained on the classes left after holding out ``n_new`` classes
  (:func:`replearn.data.class_split`); new clients holding held-out classes keep the trained
  body fixed and fit only a fresh head for ``head_epochs`` epochs; the same for the untrained
  (random) body as a local-only baseline; accuracy after every epoch.

Accuracies are as in the paper: the mean over clients (weighted by test-set size) of the local
test accuracy, averaged over the evaluations in the final ``last_rounds`` rounds, except for
fine-tuned models, which are evaluated once after fine-tuning. The paper profiles use Sec. 5.2
(r = 0.1, T = 100 rounds, 10 head epochs and 1 representation epoch, 50,000/n training images
per client) and the authors' code (SGD, lr 0.01, momentum 0.5, batch 10); they need the full
datasets (``load_cifar(..., download=True)``) and a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import torch

from .. import data as D
from .. import neural
from ..backend import derive_seed
from ..models import make_model
from ..profiles import Settings, check_int
from .fedavg_cifar import DTYPES, check_seeds, decimals, mean_sd, over_seeds, pm, separated  # noqa: F401 (re-exported)

#: Methods of Table 1 that we run, in the paper's order.
TABLE_METHODS = ("Local only", "FedAvg", "FedAvg+FT", "FedPer", "LG-FedAvg", "FedRep")

#: Table 1 of Collins et al. (2021): average test accuracy (%) for (dataset, n clients, S classes
#: per client), r = 0.1; only the methods that we run (the paper's "LG-Fed" is LG-FedAvg).
PAPER_TABLE1 = {
    ("cifar10", 100, 2): {"Local only": 89.79, "FedAvg": 42.65, "FedAvg+FT": 87.65, "FedPer": 87.13,
                          "LG-FedAvg": 84.14, "FedRep": 87.70},
    ("cifar10", 100, 5): {"Local only": 70.68, "FedAvg": 51.78, "FedAvg+FT": 73.68, "FedPer": 73.84,
                          "LG-FedAvg": 63.02, "FedRep": 75.68},
    ("cifar10", 1000, 2): {"Local only": 78.30, "FedAvg": 44.31, "FedAvg+FT": 82.04, "FedPer": 81.73,
                           "LG-FedAvg": 77.48, "FedRep": 83.27},
    ("cifar100", 100, 5): {"Local only": 75.29, "FedAvg": 23.94, "FedAvg+FT": 79.34, "FedPer": 76.00,
                           "LG-FedAvg": 72.44, "FedRep": 79.15},
    ("cifar100", 100, 20): {"Local only": 41.29, "FedAvg": 31.97, "FedAvg+FT": 55.44, "FedPer": 55.68,
                            "LG-FedAvg": 38.76, "FedRep": 56.10},
}

_ALGORITHMS = {"Local only": neural.local_only, "FedAvg": neural.fedavg, "FedPer": neural.fedper,
               "LG-FedAvg": neural.lg_fedavg, "FedRep": neural.fedrep}




# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class _Common(Settings):
    """Data, model and optimiser settings shared by the three experiments.

    ``train_per_client``: training images per client (``None``: the whole training set is
    partitioned, 50,000/n in the paper); ``test_per_client``: test images per client (``None``:
    the whole test set is spread over the clients); ``rounds`` T; ``participation`` r;
    ``local_epochs``: epochs of every method's joint local update and of FedRep's body update;
    ``head_epochs``: FedRep's head epochs; ``local_steps`` / ``head_steps`` (``None``: use the
    epochs): SGD steps of every method's local update / of FedRep's head phase instead of
    epochs; ``eval_every`` (``None``: only after the last round)
    and ``last_rounds``: the reported accuracy is the mean of the evaluations in the last
    ``last_rounds`` rounds (paper: every round, final 10); ``dtype``: ``"float64"`` on the CPU
    (printed results independent of the CPU's kernels and thread count), ``"float32"`` on a
    GPU; ``seeds``: the seeds :func:`over_seeds` runs.

    CPU default: 5 clients with 200 training images each, 4 sampled per round for 20 rounds
    (16 rounds per client), 10 local steps of 10 images per round (FedRep's head: 10 steps
    before them), the narrow (16/32 channel) network in float64.
    """

    clients: int = 5
    classes_per_client: int = 2
    train_per_client: int | None = 200
    test_per_client: int | None = 100
    rounds: int = 20
    participation: float = 0.8
    lr: float = 0.05
    momentum: float = 0.5
    batch_size: int = 10
    local_epochs: int = 1
    head_epochs: int = 5
    local_steps: int | None = 10
    head_steps: int | None = 10
    eval_every: int | None = None
    last_rounds: int = 1
    variant: str | None = "narrow"
    dtype: str = "float64"
    seeds: tuple[int, ...] = (0, 1, 2)
    seed: int = 0

    def _check_common(self) -> None:
        for name in ("clients", "classes_per_client", "rounds", "batch_size", "local_epochs", "head_epochs",
                     "last_rounds"):
            check_int(getattr(self, name), name, 1)
        check_int(self.seed, "seed", 0)
        check_seeds(self.seeds)
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {tuple(DTYPES)}, got {self.dtype!r}")
        for name in ("train_per_client", "test_per_client", "eval_every", "local_steps", "head_steps"):
            if getattr(self, name) is not None:
                check_int(getattr(self, name), name, 1)
        if not 0 < self.participation <= 1:
            raise ValueError(f"participation must be in (0, 1], got {self.participation!r}")
        if not (self.lr > 0 and 0 <= self.momentum < 1):
            raise ValueError(f"need lr > 0 and momentum in [0, 1), got {self.lr!r}, {self.momentum!r}")

    def train_config(self, **overrides) -> neural.TrainConfig:
        """The :class:`~replearn.neural.TrainConfig` of every federated run."""
        cfg = neural.TrainConfig(rounds=self.rounds, lr=self.lr, momentum=self.momentum,
                                 batch_size=self.batch_size, local_epochs=self.local_epochs,
                                 head_epochs=self.head_epochs, local_steps=self.local_steps,
                                 head_steps=self.head_steps, participation=self.participation,
                                 eval_every=self.eval_every or self.rounds, last_rounds=self.last_rounds,
                                 seed=derive_seed(self.seed, 4))
        return replace(cfg, **overrides)


_PAPER_OPTIM = dict(train_per_client=None, test_per_client=None, rounds=100, participation=0.1, lr=0.01,
                    momentum=0.5, batch_size=10, local_epochs=1, head_epochs=10, local_steps=None, head_steps=None,
                    eval_every=1, last_rounds=10, variant=None, dtype="float32")


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Federation:
    """Clients of one partition: the :class:`~replearn.neural.ClientData`, the number of
    classes of the (possibly restricted) label space and the original class of each label."""

    clients: neural.ClientData
    n_classes: int
    classes: tuple[int, ...]


def make_federation(cifar: D.CifarData, n_clients: int, classes_per_client: int, *,
                    train_per_client: int | None, test_per_client: int | None, seed: int,
                    classes=None) -> Federation:
    """``n_clients`` clients with ``classes_per_client`` classes each, from the classes
    ``classes`` of ``cifar`` (default: all, relabelled ``0..K-1``). With ``train_per_client``,
    a random balanced subset of ``train_per_client * n_clients`` training images is partitioned
    (every client gets that many); otherwise all training images of those classes."""
    check_int(n_clients, "clients", 1)
    check_int(classes_per_client, "classes_per_client", 1)
    classes = torch.arange(cifar.n_classes) if classes is None else torch.as_tensor(classes, dtype=torch.int64)
    itr, ytr = D.restrict_classes(cifar.y_train, classes)
    ite, yte = D.restrict_classes(cifar.y_test, classes)
    k = len(classes)
    if classes_per_client > k:
        raise ValueError(f"classes_per_client = {classes_per_client} exceeds the {k} classes available")
    if train_per_client is not None:
        total = train_per_client * n_clients
        if total % k:
            raise ValueError(f"train_per_client * clients = {total} must be a multiple of the {k} classes "
                             f"(a balanced subset)")
        rng = np.random.default_rng(derive_seed(seed, 10))
        keep = []
        for c in range(k):
            pos = np.flatnonzero(ytr.numpy() == c)
            if len(pos) < total // k:
                raise ValueError(f"class {int(classes[c])} has {len(pos)} training images, need {total // k}")
            keep.append(rng.choice(pos, total // k, replace=False))
        keep = torch.from_numpy(np.sort(np.concatenate(keep)))
        itr, ytr = itr[keep], ytr[keep]
    parts = D.shard_partition(ytr, n_clients, classes_per_client, seed=derive_seed(seed, 11))
    tests = D.client_test_split(parts, ytr, yte, seed=derive_seed(seed, 12), n_per_client=test_per_client)
    clients = neural.ClientData.from_partition(cifar.x_train[itr], ytr, parts, cifar.x_test[ite], yte, tests,
                                               dataset=cifar.name)
    return Federation(clients, k, tuple(int(c) for c in classes))


def _model(s: _Common, dataset: str, n_classes: int, seed: int, device):
    """The FedRep CNN: ``s.variant`` widths (``None``: the authors' widths for ``dataset``) in ``s.dtype``."""
    variant = s.variant or ("cifar100" if dataset == "cifar100" else "cifar10")
    return make_model("fedrep_cnn", n_classes, seed, device=device, variant=variant, dtype=DTYPES[s.dtype])


# --------------------------------------------------------------------------- Table 1


@dataclass(frozen=True)
class TableSettings(_Common):
    """Table 1: ``partitions`` are (dataset, n clients, S classes per client); every method of
    :data:`TABLE_METHODS` runs on each; FedAvg+FT fine-tunes the head for ``ft_epochs`` epochs.
    The ``clients`` and ``classes_per_client`` fields are not used here: each partition names its own."""

    partitions: tuple[tuple[str, int, int], ...] = (("cifar10", 5, 2),)
    ft_epochs: int = 10

    @classmethod
    def long(cls):
        """About half an hour of CPU: 100 rounds (80 per client), 5 seeds."""
        return cls(rounds=100, seeds=(0, 1, 2, 3, 4))

    @classmethod
    def paper(cls):
        """The five CIFAR columns of Table 1 with Sec. 5.2's settings (full datasets)."""
        return cls(partitions=tuple(PAPER_TABLE1), ft_epochs=10, **_PAPER_OPTIM)


@dataclass(frozen=True)
class TableResult:
    """``accuracy[partition][method]``: personalised test accuracy (fraction);
    ``client_accuracy[partition][method]``: per-client accuracies (final evaluation);
    ``curves[partition][method]``: average test accuracy after each round (NaN where not
    evaluated); ``data``: which data ran; ``train_sizes``/``test_sizes``: per partition."""

    partitions: tuple[tuple[str, int, int], ...]
    accuracy: dict
    client_accuracy: dict
    curves: dict
    train_sizes: dict
    test_sizes: dict
    data: dict


def run_table(s: TableSettings, *, cifar: dict | None = None) -> TableResult:
    """Paper Table 1 (see the module docstring). ``cifar``: optional preloaded datasets by name."""
    s._check_common()
    check_int(s.ft_epochs, "ft_epochs", 1)
    if not s.partitions:
        raise ValueError("partitions must not be empty")
    cifar = dict(cifar or {})
    acc, cacc, curves, ntr, nte, desc = {}, {}, {}, {}, {}, {}
    for part in s.partitions:
        name, n, S = part
        if name not in ("cifar10", "cifar100"):
            raise ValueError(f"unknown dataset {name!r}; use 'cifar10' or 'cifar100'")
        if name not in cifar:
            cifar[name] = D.load_cifar(name)
        fed = make_federation(cifar[name], n, S, train_per_client=s.train_per_client,
                              test_per_client=s.test_per_client, seed=s.seed)
        cl = fed.clients

        def model_fn():
            return _model(s, name, fed.n_classes, derive_seed(s.seed, 3), cl.device)

        cfg = s.train_config()
        acc[part], cacc[part], curves[part] = {}, {}, {}
        for method in TABLE_METHODS:
            if method == "FedAvg+FT":
                base = results_fedavg
                r = neural.finetune(model_fn(), cl, state=base.state, epochs=s.ft_epochs, part="head", lr=s.lr,
                                    momentum=s.momentum, batch_size=s.batch_size, seed=derive_seed(s.seed, 5))
                acc[part][method] = r.final.average
                curves[part][method] = torch.full((s.rounds,), float("nan"))
            else:
                r = _ALGORITHMS[method](model_fn(), cl, cfg)
                if method == "FedAvg":
                    results_fedavg = r
                acc[part][method] = r.accuracy
                curves[part][method] = r.test_accuracy
            cacc[part][method] = r.final.accuracy
        ntr[part], nte[part], desc[part] = cl.train_sizes, cl.test_sizes, cifar[name].describe()
    return TableResult(tuple(s.partitions), acc, cacc, curves, ntr, nte, desc)


# --------------------------------------------------------------------------- Fig. 5


@dataclass(frozen=True)
class EpochSettings(_Common):
    """Fig. 5: CIFAR-10, ``clients`` clients with S = ``classes_per_client`` classes; FedRep with
    ``E`` head epochs (and ``local_epochs`` body epochs) and FedAvg with ``E`` local epochs, for
    every ``E`` in ``epochs``. CPU default: 100 training images per client, 15 rounds,
    epochs (not steps) for both phases, E in {1, 3}."""

    dataset: str = "cifar10"
    epochs: tuple[int, ...] = (1, 3)
    train_per_client: int | None = 100
    rounds: int = 15
    local_steps: int | None = None
    head_steps: int | None = None

    @classmethod
    def long(cls):
        """About half an hour of CPU: 200 training images per client, 60 rounds, E in {1, 3, 5}, 5 seeds."""
        return cls(train_per_client=200, rounds=60, epochs=(1, 3, 5), seeds=(0, 1, 2, 3, 4))

    @classmethod
    def paper(cls):
        """n = 100, S = 2 (Sec. 5.2); E in {1, 5, 10, 20} is our choice (our copy of the paper
        has the caption of Fig. 5 but not its axis)."""
        return cls(clients=100, classes_per_client=2, epochs=(1, 5, 10, 20), **_PAPER_OPTIM)


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
    s._check_common()
    if not s.epochs or len(set(s.epochs)) != len(s.epochs):
        raise ValueError(f"epochs must be distinct and non-empty, got {s.epochs!r}")
    for e in s.epochs:
        check_int(e, "epochs", 1)
    cifar = cifar if cifar is not None else D.load_cifar(s.dataset)
    fed = make_federation(cifar, s.clients, s.classes_per_client, train_per_client=s.train_per_client,
                          test_per_client=s.test_per_client, seed=s.seed)
    cl = fed.clients
    acc = {"FedRep": [], "FedAvg": []}
    curves = {"FedRep": [], "FedAvg": []}
    for e in s.epochs:
        for method in ("FedRep", "FedAvg"):
            model = _model(s, s.dataset, fed.n_classes, derive_seed(s.seed, 3), cl.device)
            if method == "FedRep":
                r = neural.fedrep(model, cl, s.train_config(head_epochs=e))
            else:
                r = neural.fedavg(model, cl, s.train_config(local_epochs=e))
            acc[method].append(r.accuracy)
            curves[method].append(r.test_accuracy)
    return EpochResult(tuple(s.epochs), {m: torch.tensor(v) for m, v in acc.items()},
                       {m: torch.stack(v) for m, v in curves.items()}, cl.train_sizes, cl.test_sizes,
                       cifar.describe())


# --------------------------------------------------------------------------- Fig. 6 (new clients)

NEW_METHODS = ("FedRep", "FedAvg", "random body")


@dataclass(frozen=True)
class NewClientSettings(_Common):
    """New clients: hold out ``n_new`` of the dataset's classes; train FedRep and FedAvg on
    ``clients`` clients with ``classes_per_client`` of the other classes; then ``new_clients``
    new clients with ``new_classes_per_client`` held-out classes, ``new_train`` training and
    ``new_test`` test images each, fit a fresh head on each body for ``head_epochs_new``
    epochs (accuracy after every epoch). CPU default: 4 CIFAR-10 classes held out, so the new
    clients hold different pairs of unseen classes; 6 training clients on the other 6 classes."""

    dataset: str = "cifar10"
    n_new: int = 4
    clients: int = 6
    participation: float = 0.67
    rounds: int = 25
    new_clients: int = 4
    new_classes_per_client: int = 2
    new_train: int = 50
    new_test: int = 100
    head_epochs_new: int = 10

    @classmethod
    def long(cls):
        """About half an hour of CPU: 100 rounds, 5 seeds."""
        return cls(rounds=100, seeds=(0, 1, 2, 3, 4))

    @classmethod
    def paper(cls):
        """Our CIFAR-100 analogue of Fig. 6 (which uses FEMNIST letters -> digits): 80/20
        classes, n = 100 training clients with S = 5, Sec. 5.2's optimiser and T = 100; new
        clients with 5 held-out classes and 500 training images (as in Fig. 6), 20 head epochs."""
        return cls(dataset="cifar100", n_new=20, clients=100, classes_per_client=5, new_clients=20,
                   new_classes_per_client=5, new_train=500, new_test=100, head_epochs_new=20,
                   **_PAPER_OPTIM)


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


def fit_heads(model, clients: neural.ClientData, state: dict, *, epochs: int, lr: float, momentum: float,
              batch_size: int, seed: int) -> neural.FedResult:
    """Each client fits its own head on the frozen body of ``state`` (the SGD of
    :func:`replearn.neural.finetune` with ``part="head"``), one epoch per round, evaluated after
    every epoch: ``test_accuracy[e]`` is the accuracy after ``e + 1`` epochs. The momentum buffer
    restarts every epoch (it does within ``finetune`` only once); with ``epochs = 1`` this is
    exactly ``finetune(..., epochs=1, part="head")``."""
    check_int(epochs, "epochs", 1)
    head = tuple(n for n, _ in model.named_parameters() if n.startswith("head."))
    cfg = neural.TrainConfig(rounds=epochs, lr=lr, momentum=momentum, batch_size=batch_size, local_epochs=1,
                             eval_every=1, last_rounds=1, seed=seed)
    return neural.run_rounds("finetune_head", model, clients, cfg, shared=(), local=head,
                             phases=[(head, None, 1)], state=state)


def run_new_clients(s: NewClientSettings, *, cifar: D.CifarData | None = None) -> NewClientResult:
    """New clients (see the module docstring)."""
    s._check_common()
    for name in ("new_clients", "new_classes_per_client", "new_train", "new_test", "head_epochs_new"):
        check_int(getattr(s, name), name, 1)
    cifar = cifar if cifar is not None else D.load_cifar(s.dataset)
    if not 0 < s.n_new < cifar.n_classes:
        raise ValueError(f"need 0 < n_new < {cifar.n_classes}, got {s.n_new}")
    if s.new_classes_per_client > s.n_new:
        raise ValueError(f"new_classes_per_client = {s.new_classes_per_client} exceeds n_new = {s.n_new}")
    train_cls, new_cls = D.class_split(cifar.n_classes, s.n_new, seed=derive_seed(s.seed, 20))
    fed = make_federation(cifar, s.clients, s.classes_per_client, train_per_client=s.train_per_client,
                          test_per_client=s.test_per_client, seed=s.seed, classes=train_cls)
    new = make_federation(cifar, s.new_clients, s.new_classes_per_client,
                          train_per_client=s.new_train, test_per_client=s.new_test,
                          seed=derive_seed(s.seed, 21), classes=new_cls)
    device = fed.clients.device
    init = _model(s, s.dataset, fed.n_classes, derive_seed(s.seed, 3), device)
    cfg = s.train_config()
    runs = {"FedRep": neural.fedrep(init, fed.clients, cfg), "FedAvg": neural.fedavg(init, fed.clients, cfg)}
    bodies = {m: r.state for m, r in runs.items()}
    bodies["random body"] = {n: p.detach() for n, p in init.named_parameters()}
    new_model = _model(s, s.dataset, new.n_classes, derive_seed(s.seed, 22), device)
    fresh_head = {n: p.detach() for n, p in new_model.named_parameters() if n.startswith("head.")}
    acc, cacc = {}, {}
    for method in NEW_METHODS:
        state = {**{n: p for n, p in bodies[method].items() if not n.startswith("head.")}, **fresh_head}
        r = fit_heads(new_model, new.clients, state, epochs=s.head_epochs_new, lr=s.lr, momentum=s.momentum,
                      batch_size=s.batch_size, seed=derive_seed(s.seed, 23))
        acc[method], cacc[method] = r.test_accuracy, r.final.accuracy
    return NewClientResult(tuple(int(c) for c in train_cls), tuple(int(c) for c in new_cls), acc, cacc,
                           {m: r.accuracy for m, r in runs.items()}, cifar.describe())


def paper_reference(partition: tuple[str, int, int]) -> tuple[tuple[str, int, int], dict]:
    """The Table 1 column to show beside ``partition``: the same (dataset, n, S) if the paper
    has it, else the paper's column with the same dataset and S and n = 100."""
    name, n, S = partition
    key = partition if partition in PAPER_TABLE1 else (name, 100, S)
    if key not in PAPER_TABLE1:
        raise ValueError(f"Table 1 has no column for {name} with S = {S}")
    return key, PAPER_TABLE1[key]
