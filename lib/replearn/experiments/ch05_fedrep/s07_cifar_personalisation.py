"""Book 5.7: personalised accuracy on CIFAR, Table 1 of Collins, Hassani, Mokhtari, Shakkottai (2021).

For each partition (dataset, n clients, S classes per client) of
:func:`replearn.neural.personalisation.make_federation`, every method of ``methods`` (CPU default:
:data:`TABLE_METHODS`; paper profile: every method of Table 1, :func:`replearn.neural.algorithms.table1`) trains
from one initial network, one seed and one optimiser, each from the registry
:mod:`replearn.neural.algorithms`; a +FT method is its base method's global model with each client's
head fine-tuned for ``ft_epochs`` epochs (:meth:`~replearn.neural.algorithms.fine_tuning.FineTuned.fine_tune`). Accuracies are as
in the paper: the mean over clients (weighted by test-set size) of the local test accuracy,
averaged over the evaluations in the final ``last_rounds`` rounds, except for the +FT methods,
evaluated once after fine-tuning.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from replearn.neural import data as D
from replearn import neural
from replearn.backend import derive_seed
from replearn.checks import check_int
from replearn.book import scales
from replearn.neural import algorithms
from replearn.neural.algorithms.fine_tuning import FineTuned
from replearn.book.scales import require_data
from replearn.neural.personalisation import PAPER_OPTIM, FederationSettings, first_protocol, make_federation

#: Methods of Table 1 that the CPU default runs, in the paper's order (the paper and gpu
#: profiles run every method of Table 1, :func:`replearn.neural.algorithms.table1`).
TABLE_METHODS = ("Local only", "FedAvg", "FedAvg+FT", "FedPer", "LG-FedAvg", "FedRep")

#: Table 1 of Collins et al. (2021): average test accuracy (%) of its methods for (dataset, n
#: clients, S classes per client), r = 0.1, read from each method's file
#: (``paper_accuracy``; the paper's "LG-Fed" is LG-FedAvg, "PerFedAvg" Per-FedAvg).
PAPER_TABLE1 = algorithms.paper_table1()


#: What the FedRep paper states of Table 1's setting, by settings field: (value, where it says so).
PAPER_SETTINGS = {"partitions": (tuple(PAPER_TABLE1), "FedRep paper, Table 1 (CIFAR columns)"),
                  "train_per_client": (None, "FedRep paper, Sec. 5.2 (50,000/n each: the whole training set)"),
                  "train.lr": (0.01, "the FedRep authors' code (not in the paper)"),
                  "train.momentum": (0.5, "the FedRep authors' code (not in the paper)"),
                  "train.batch_size": (10, "the FedRep authors' code (not in the paper)"),
                  "train.participation": (0.1, "FedRep paper, Sec. 5.2 (r = 0.1)"),
                  "train.weight_decay": (1e-4, "the FedRep authors' code, models/Update.py (weights only; not in the paper)"),
                  "train.augment": (True, "the FedRep authors' code, utils/train_utils.py (RandomCrop(32, 4) + flip)"),
                  "split": ("authors", "the FedRep authors' code, utils/sampling.py (noniid)"),
                  "local_only_epochs": (10, "the FedRep authors' code, main_local.py (--epochs default; not in the paper)"),
                  "lg_shared_layers": (2, "the FedRep authors' code, main_fedrep.py (w_glob_keys fc2, fc3 for --alg lg)"),
                  "train.rounds": (100, "FedRep paper, Sec. 5.2 (T = 100 for CIFAR)"),
                  "train.head_epochs": (10, "FedRep paper, Sec. 5.2 (ten head epochs)"),
                  "train.last_rounds": (10, "FedRep paper, Sec. 5.2 (final 10 rounds averaged)"),
                  "ft_epochs": (10, "FedRep paper, Sec. 5.2 (+FT: ten epochs of the head)"),
                  "methods": (algorithms.table1(), "FedRep paper, Table 1 (every method)")}


@dataclass(frozen=True)
class TableSettings(FederationSettings):
    """Table 1: ``partitions`` are (dataset, n clients, S classes per client); every method of
    ``methods`` run on each; a +FT method fine-tunes the head of its base method's global model
    for ``ft_epochs`` epochs.
    ``local_only_epochs``: every client's epochs under Local only (the authors' ``main_local.py``
    trains each client on its own for ``--epochs`` epochs, default 10; ``None``: only in the rounds
    where it is sampled, as the book's first near-paper runs did); ``lg_shared_layers``: the top
    layers LG-FedAvg shares (2: the authors' ``fc2`` and ``fc3``; 1: the head only).
    The ``clients`` and ``classes_per_client`` fields are not used here: each partition names its own."""

    def options(self, method: str):
        """The options ``method`` runs with (None: its defaults)."""
        if method == "Local only":
            return algorithms.get(method).Options(epochs=self.local_only_epochs)
        if method == "LG-FedAvg":
            return algorithms.get(method).Options(shared_layers=self.lg_shared_layers)
        return None

    partitions: tuple[tuple[str, int, int], ...] = (("cifar10", 5, 2),)
    ft_epochs: int = 10
    methods: tuple[str, ...] = TABLE_METHODS
    local_only_epochs: int | None = 10
    lg_shared_layers: int = 2

    def validate(self) -> None:
        super().validate()
        check_int(self.ft_epochs, "ft_epochs", 1)
        algorithms.get("Local only").Options(epochs=self.local_only_epochs)
        algorithms.get("LG-FedAvg").Options(shared_layers=self.lg_shared_layers)
        unknown = [m for m in self.methods if m not in algorithms.table1()]
        if unknown or len(set(self.methods)) != len(self.methods):
            raise ValueError(f"methods must be distinct names of Table 1 {algorithms.table1()}, got {self.methods!r}")
        for part in self.partitions:
            if not (isinstance(part, tuple) and len(part) == 3 and part[0] in ("cifar10", "cifar100")):
                raise ValueError(f"each partition must be (dataset, n, S) with dataset 'cifar10' or "
                                 f"'cifar100', got {part!r}")
            check_int(part[1], "n (clients of a partition)", 1)
            check_int(part[2], "S (classes per client of a partition)", 1)

    @classmethod
    def long(cls):
        """Near-paper on a CPU: the paper profile (the authors' CNN and optimiser, r = 0.1, 10 head
        epochs and 1 body epoch, +FT with 10 head epochs, float32) for every method on Table 1's
        first column, CIFAR-10 with n = 100 and S = 2, on the offline subset (20,000 of CIFAR-10's
        50,000 training images, so 200 per client; 5,000 test images, so 50 per client);
        T = 50 rounds (the paper: 100; a client takes part in about 5), evaluated every 5 rounds
        (the reported accuracy is the mean of the evaluations in the last 10 rounds, as in the
        paper); one seed (about 70 minutes of one core here; the spread of a comparison is over
        the 100 clients). Until its results are re-run it keeps the protocol of the book's first
        near-paper runs (:func:`replearn.neural.personalisation.first_protocol`: disjoint shard split,
        no weight decay or augmentation; Local only trained in its sampled rounds; LG-FedAvg
        sharing the head only)."""
        p = first_protocol(cls.paper())
        return replace(p, partitions=(("cifar10", 100, 2),), seeds=(0,), full_data=False,
                       local_only_epochs=None, lg_shared_layers=1, train=replace(p.train, rounds=50, eval_every=5))

    @classmethod
    def more_seeds(cls, profile: str = "long"):
        """``profile``'s settings for the CPU default's six methods (:data:`TABLE_METHODS`:
        Local only, FedAvg, FedAvg+FT, FedPer, LG-FedAvg, FedRep) over seeds 1 and 2: with the
        profile's own seed 0 (which runs every method), three seeds for the main comparisons
        (section ``5.7-seeds`` of ``scripts/run_results.py``)."""
        return replace(cls.profile(profile), methods=TABLE_METHODS, seeds=(1, 2))

    @classmethod
    def paper(cls):
        """The five CIFAR columns of Table 1 with Sec. 5.2's settings (full datasets)."""
        return cls(partitions=tuple(PAPER_TABLE1), ft_epochs=10, methods=algorithms.table1(), **PAPER_OPTIM)

    @classmethod
    def gpu(cls):
        """The paper profile sized for a few minutes of one GPU on the offline subsets: two
        partitions, CIFAR-10 (100, 2) and CIFAR-100 (100, 5), every method of Table 1, T = 100 rounds (the
        paper's), evaluated every 5 rounds, one seed; every method trains a round's 10 clients as
        one batched computation (``vmap_clients``: the batched path of :func:`replearn.neural.run`,
        fine-tuning included). Without augmentation, which the batched path does not draw."""
        p = cls.paper()
        return replace(p, partitions=(("cifar10", 100, 2), ("cifar100", 100, 5)), seeds=(0,), full_data=False,
                       train=replace(p.train, eval_every=5, vmap_clients=10, augment=False))


def work(s: TableSettings, *, batched: bool = True) -> dict:
    """:func:`replearn.book.scales.launch_estimate` of :func:`run_table` with ``s``: per partition,
    every method's rounds (FedRep: head and body epochs; the others: the body epochs; a +FT
    method adds ``ft_epochs`` head epochs per client, batched like training; a method whose clients train
    ``models`` models a round, such as Ditto and APFL, counts that many times), and the evaluations every ``eval_every`` rounds; a method's clients
    count as batched when ``batched`` and the algorithm has a batched path (all of Table 1's)."""
    cfg = s.train
    parts = []
    for name, n, _ in s.partitions:
        for method in s.methods:
            if method.endswith("+FT"):
                per_client, _ = scales.federated_steps(name, s.full_data, n, s.train_per_client,
                                                       replace(s.train, rounds=1, participation=1.0), s.ft_epochs)
                parts.append(scales.launch_estimate(per_client, n,  # every client, batched like training
                                                    batched_clients=scales.batching(cfg, n, batched)))
                continue
            epochs = cfg.local_epochs + (cfg.head_epochs if method == "FedRep" else 0)
            k, m = scales.federated_steps(name, s.full_data, n, s.train_per_client, cfg, epochs)
            parts.append(scales.launch_estimate(k * algorithms.get(method).models, n * -(-cfg.rounds // cfg.eval_every),
                                                batched_clients=scales.batching(cfg, m,
                                                                                batched and algorithms.get(method).batched)))
    return scales.combine(*parts)


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
    cifar = dict(cifar or {})
    acc, cacc, curves, ntr, nte, desc = {}, {}, {}, {}, {}, {}
    cfg = s.config()
    for part in s.partitions:
        name, n, S = part
        if name not in cifar:
            cifar[name] = D.load_cifar(name)
        require_data(cifar[name], s.full_data, "TableSettings")
        fed = make_federation(cifar[name], n, S, train_per_client=s.train_per_client,
                              test_per_client=s.test_per_client, seed=s.seed, split=s.split)
        cl = fed.clients

        def model_fn():
            return s.network(name, fed.n_classes, derive_seed(s.seed, 3), cl.device)

        acc[part], cacc[part], curves[part] = {}, {}, {}
        trained = {}
        for method in s.methods:
            alg = algorithms.get(method)
            if isinstance(alg, FineTuned):  # the base method's trained global model, each client's head tuned
                if alg.base.name not in trained:
                    trained[alg.base.name] = alg.base.run(model_fn(), cl, cfg, s.options(alg.base.name))
                r = alg.fine_tune(trained[alg.base.name], model_fn(), cl, alg.Options(epochs=s.ft_epochs, seed=derive_seed(s.seed, 5)))
                acc[part][method] = r.final.average
                curves[part][method] = torch.full((cfg.rounds,), float("nan"))
            else:
                r = trained[method] = alg.run(model_fn(), cl, cfg, s.options(method))
                acc[part][method] = r.accuracy
                curves[part][method] = r.test_accuracy
            cacc[part][method] = r.final.accuracy
        ntr[part], nte[part], desc[part] = cl.train_sizes, cl.test_sizes, cifar[name].describe()
    return TableResult(tuple(s.partitions), acc, cacc, curves, ntr, nte, desc)


def column_label(partition: tuple[str, int, int]) -> str:
    """A partition (dataset, n, S) in words, for captions: ``"CIFAR-10, n = 100, S = 2"``."""
    name, n, S = partition
    return f"{name.upper().replace('CIFAR', 'CIFAR-')}, n = {n}, S = {S}"


def paper_reference(partition: tuple[str, int, int]) -> tuple[tuple[str, int, int], dict]:
    """The Table 1 column to show beside ``partition``: the same (dataset, n, S) if the paper
    has it, else the paper's column with the same dataset and S and n = 100."""
    name, n, S = partition
    key = partition if partition in PAPER_TABLE1 else (name, 100, S)
    if key not in PAPER_TABLE1:
        raise ValueError(f"Table 1 has no column for {name} with S = {S}")
    return key, PAPER_TABLE1[key]
