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

import dataclasses
from dataclasses import dataclass, field, replace

import matplotlib.pyplot as plt
import numpy as np
import torch

from replearn.neural import data as D
from replearn import neural
from replearn.backend import derive_seed
from replearn.checks import check_int
from replearn.book import scales, seeds
from replearn.book.claims import fmt, glue_diff, glue_pm
from replearn.book.plotting import COLORS, Table
from replearn.book.seeds import mean_sd
from replearn.neural import algorithms
from replearn.neural.algorithms.fine_tuning import FineTuned
from replearn.book.scales import require_data
from replearn.neural.personalisation import AUTHORS_PIPELINE, PAPER_OPTIM, FederationSettings, make_federation

#: Methods of Table 1 that the CPU default runs, in the paper's order (the paper and gpu
#: profiles run every method of Table 1, :func:`replearn.neural.algorithms.table1`).
TABLE_METHODS = ("Local only", "FedAvg", "FedAvg+FT", "FedPer", "LG-FedAvg", "FedRep")

#: The clients and methods of the data-per-client comparison (:meth:`TableSettings.per_client_images`):
#: the three methods whose near-paper accuracies sit furthest from the paper's.
DATA_CLIENTS = 40
DATA_METHODS = ("Local only", "FedAvg", "FedRep")

#: Table 1 of Collins et al. (2021): average test accuracy (%) of its methods for (dataset, n
#: clients, S classes per client), r = 0.1, read from each method's file
#: (``paper_accuracy``; the paper's "LG-Fed" is LG-FedAvg, "PerFedAvg" Per-FedAvg).
PAPER_TABLE1 = algorithms.paper_table1()


#: What the FedRep paper's text states of Table 1's setting, by settings field: (value, where).
PAPER_SETTINGS = {"partitions": (tuple(PAPER_TABLE1), "FedRep paper, Table 1 (CIFAR columns)"),
                  "train_per_client": (None, "FedRep paper, Sec. 5.2 (50,000/n each: the whole training set)"),
                  "train.participation": (0.1, "FedRep paper, Sec. 5.2 (r = 0.1)"),
                  "train.rounds": (100, "FedRep paper, Sec. 5.2 (T = 100 for CIFAR)"),
                  "train.head_epochs": (10, "FedRep paper, Sec. 5.2 (ten head epochs)"),
                  "train.last_rounds": (10, "FedRep paper, Sec. 5.2 (final 10 rounds averaged)"),
                  "ft_epochs": (10, "FedRep paper, Sec. 5.2 (+FT: ten epochs of the head)"),
                  "methods": (algorithms.table1(), "FedRep paper, Table 1 (every method)")}

#: What the FedRep authors' code (public repository lgcollins/FedRep) does, by settings field:
#: (value, the file and argument that set it; a value with a space describes rather than states):
#: its pipeline (:data:`replearn.neural.personalisation.AUTHORS_PIPELINE`) and Table 1's scripts.
AUTHORS_CODE = {**AUTHORS_PIPELINE,
                "partitions": (tuple(PAPER_TABLE1), "scripts/FedRep_cifar10_2shards.sh, _5shards, _2shards_1000users, "
                                                    "FedRep_cifar100_5shards.sh, _20shards"),
                "train_per_client": ("its shards, at most 500", "utils/options.py (--m_tr 500)"),
                "test_per_client": ("test images of its classes", "utils/sampling.py (noniid, the training label sets)"),
                "train.rounds": (100, "scripts/FedRep_cifar10_2shards.sh (--epochs 100)"),
                "train.lr": (0.01, "scripts/FedRep_cifar10_2shards.sh (--lr 0.01)"),
                "train.batch_size": (10, "scripts/FedRep_cifar10_2shards.sh (--local_bs 10)"),
                "train.head_epochs": (10, "scripts/FedRep_cifar10_2shards.sh (--local_ep 11 with --local_rep_ep 1)"),
                "train.local_epochs": (1, "scripts/FedRep_cifar10_2shards.sh (--local_rep_ep 1)"),
                "train.participation": (0.1, "scripts/FedRep_cifar10_2shards.sh (--frac 0.1)"),
                "train.eval_every": ("rounds 50, 100 and the last 10", "main_fedrep.py (--test_freq 50, and every "
                                                                      "round of the last 10)"),
                "train.last_rounds": (10, "main_fedrep.py (accs10: the final 10 rounds)"),
                "seeds": ("five runs", "scripts/FedRep_cifar10_2shards.sh (for RUN in 1 to 5)"),
                "ft_epochs": (10, "main_fedrep.py (the final round tunes the head for 10 local epochs)"),
                "methods": (algorithms.table1(), "main_fedrep.py (--alg fedavg, prox, maml, lg, fedper, fedrep), "
                                                 "main_local.py, main_scaffold.py, main_mtl.py, main_l2gd.py, "
                                                 "main_apfl.py, main_ditto.py"),
                "train.first_visit": ("average", "main_fedrep.py, main_ditto.py, main_apfl.py (a client not yet "
                                                 "sampled holds views of net_glob's tensors: the last round's "
                                                 "average of every parameter, heads included)")}

#: Rows beside Table 1's that run a method as the authors' code runs it, where that is another
#: algorithm than the method's paper (row label -> the registered method it runs).
AUTHORS_VARIANTS = {"Per-FedAvg (authors' code)": "Per-FedAvg", "L2GD (authors' code)": "L2GD"}

#: Every method option the near-paper and paper profiles set as the FedRep authors' code does:
#: (row, option, value, where it is stated). A method's own default is its paper's algorithm
#: (the option's docstring says where its value comes from); :func:`authors_options` builds the
#: profiles' options from this table, so each value is stated once.
AUTHORS_OPTIONS = (
    ("Local only", "epochs", 100, "scripts/*.sh (--epochs 100, which main_local.py reads as each client's epochs)"),
    ("FedProx", "mu", 0.1, "utils/options.py (--mu 0.1)"),
    ("SCAFFOLD", "global_lr", 0.1, "utils/options.py (--lr_g 0.1)"),
    ("Ditto", "lam", 1.0, "utils/options.py (--lam_ditto 1)"),
    ("APFL", "alpha", 0.75, "utils/options.py (--alpha_apfl 0.75)"),
    ("APFL", "adapt_alpha", False, "main_apfl.py (alpha is never updated)"),
    ("L2GD", "p", 0.9, "main_l2gd.py (p = 0.9)"),
    ("L2GD", "lam", 4.5, "main_l2gd.py (--lambda_l2gd 0.5 in the pull lr·λ with lr = α/(n(1−p)); Alg. 1's pull "
                         "ηλ/(np) with the same local step needs λ = 0.5 · 0.9 / 0.1 = 4.5)"),
    ("L2GD (authors' code)", "p", 0.9, "main_l2gd.py (p = 0.9)"),
    ("L2GD (authors' code)", "lam", 4.5, "main_l2gd.py (as for L2GD)"),
    ("L2GD (authors' code)", "coin", "round", "main_l2gd.py (one coin per iteration, for every client at once)"),
    ("Per-FedAvg (authors' code)", "variant", "authors", "main_fedrep.py (--alg maml trains with the plain "
                                                          "LocalUpdate; LocalUpdateMAML is never called)"))

#: Training settings the authors' code sets for one method or one column: (row or "*", column
#: ``dataset/n/S`` or "*", ``TrainConfig`` field, value, where), applied in order
#: (:meth:`TableSettings.config_for`).
AUTHORS_TRAIN = (
    ("Local only", "*", "weight_decay", 0.0, "main_local.py (SGD with momentum 0.5 and no weight decay)"),
    ("L2GD (authors' code)", "*", "participation", 1.0, "main_l2gd.py (every client in every iteration)"),
    ("*", "cifar10/1000/2", "local_epochs", 5, "scripts/FedAvg_cifar10_2shards_1000users.sh (--local_ep 5)"),
    ("FedRep", "cifar10/100/5", "local_epochs", 5, "scripts/FedRep_cifar10_5shards.sh (--local_rep_ep 5)"),
    ("FedRep", "cifar10/1000/2", "local_epochs", 5, "scripts/FedRep_cifar10_2shards_1000users.sh (--local_rep_ep 5)"),
    ("FedRep", "cifar100/100/5", "local_epochs", 5, "scripts/FedRep_cifar100_5shards.sh (--local_rep_ep 5)"),
    ("FedRep", "cifar100/100/20", "local_epochs", 5, "scripts/FedRep_cifar100_20shards.sh (--local_rep_ep 5)"))


def column_key(partition) -> str:
    """A column (dataset, n, S) as settings and results files name it: ``"cifar10/100/2"``."""
    return "/".join(map(str, partition))


def column_slug(partition) -> str:
    """A column in section names: ``("cifar100", 100, 20)`` -> ``"c100-100-20"``."""
    name, n, S = partition
    return f"c{name.removeprefix('cifar')}-{n}-{S}"


def authors_options(rows) -> dict:
    """``{row: options}`` for the rows ``rows`` of a table, with the values of
    :data:`AUTHORS_OPTIONS` (a row without any keeps its method's defaults and is left out)."""
    out = {}
    for row, option, value, _ in AUTHORS_OPTIONS:
        if row in rows:
            out.setdefault(row, {})[option] = value
    return {row: algorithms.get(AUTHORS_VARIANTS.get(row, row)).Options(**kw) for row, kw in out.items()}


def authors_train(rows, partitions) -> tuple:
    """The rows of :data:`AUTHORS_TRAIN` that concern ``rows`` and ``partitions``, without their sources."""
    columns = {column_key(p) for p in partitions}
    return tuple((row, col, name, value) for row, col, name, value, _ in AUTHORS_TRAIN
                 if row in ("*", *rows) and col in ("*", *columns))


@dataclass(frozen=True)
class TableSettings(FederationSettings):
    """Table 1: ``partitions`` are (dataset, n clients, S classes per client); every row of
    ``methods`` run on each (a row is a registered method of Table 1, or a label of
    ``variants``, which names the method it runs); a +FT method fine-tunes the head of its base
    method's global model for ``ft_epochs`` epochs.
    ``options``: ``{row: options}`` (an instance of its method's ``Options``; a row not listed
    runs its method's defaults, which are its paper's algorithm); ``variants``: ``{row label:
    registered method}`` for rows that run a method with other options beside its own row (e.g.
    :data:`AUTHORS_VARIANTS`); ``train_overrides``: ``(row or "*", column "dataset/n/S" or "*",
    TrainConfig field, value)`` applied in order to ``train`` for the runs they match (a +FT
    row trains as its base row);
    ``kept_per_client``: after the partition, each client keeps this many of its training images,
    drawn at random (:meth:`replearn.neural.ClientData.take_train`; ``None``: all), so that runs
    with different amounts of data per client share their label sets and test sets.
    The ``clients`` and ``classes_per_client`` fields are not used here: each partition names its own."""

    WORDS = {"partitions": "columns (dataset, clients n, classes per client S)", "ft_epochs": "+FT: head epochs",
             "methods": "rows (methods)", "options": "method options", "variants": "rows of the authors' variants",
             "train_overrides": "training settings per row or column (row, column, setting, value)",
             "kept_per_client": "training images each client keeps"}

    partitions: tuple[tuple[str, int, int], ...] = (("cifar10", 5, 2),)
    ft_epochs: int = 10
    methods: tuple[str, ...] = TABLE_METHODS
    options: dict = field(default_factory=dict)
    variants: dict = field(default_factory=dict)
    train_overrides: tuple = ()
    kept_per_client: int | None = None

    def method_of(self, row: str) -> str:
        """The registered method a row runs (a +FT row: its own name, e.g. ``"FedAvg+FT"``)."""
        return self.variants.get(row, row)

    def options_for(self, row: str):
        """The options ``row`` runs with (None: its method's defaults)."""
        return self.options.get(row)

    def config_for(self, row: str, partition) -> neural.TrainConfig:
        """:meth:`config` with the ``train_overrides`` that match ``row`` and ``partition``."""
        column = column_key(partition)
        changes = {name: value for r, col, name, value in self.train_overrides
                   if r in ("*", row) and col in ("*", column)}
        return self.config(**changes)

    def validate(self) -> None:
        super().validate()
        check_int(self.ft_epochs, "ft_epochs", 1)
        if self.kept_per_client is not None:
            check_int(self.kept_per_client, "kept_per_client", 1)
        table = algorithms.table1()
        for row, method in self.variants.items():
            if method not in table or row in table:
                raise ValueError(f"variants maps a new row label to a method of Table 1 {table}, got {row!r}: {method!r}")
        unknown = [m for m in self.methods if m not in table and m not in self.variants]
        if unknown or len(set(self.methods)) != len(self.methods):
            raise ValueError(f"methods must be distinct names of Table 1 {table} or labels of variants, got "
                             f"{self.methods!r}")
        bases = {algorithms.get(m).base.name for m in self.methods if m in table
                 and isinstance(algorithms.get(m), FineTuned)}
        rows = set(table) | set(self.variants)   # a row not run keeps its options unused
        for row, opts in self.options.items():
            if row not in rows:
                raise ValueError(f"options has {row!r}, which is neither a method of Table 1 nor a label of variants")
            algorithms.get(self.method_of(row)).check_options(opts)
        fields = {f.name for f in dataclasses.fields(neural.TrainConfig)} - {"seed"}
        for entry in self.train_overrides:
            if not (isinstance(entry, tuple) and len(entry) == 4):
                raise ValueError(f"each train_overrides entry is (row or '*', column 'dataset/n/S' or '*', "
                                 f"TrainConfig field, value), got {entry!r}")
            row, col, name, value = entry
            if name not in fields:
                raise ValueError(f"train_overrides: {name!r} is not a TrainConfig field ({sorted(fields)})")
            if row != "*" and row not in rows:
                raise ValueError(f"train_overrides: {row!r} is neither a method of Table 1 nor a label of variants")
            if col != "*" and col not in {column_key(p) for p in (*PAPER_TABLE1, *self.partitions)}:
                raise ValueError(f"train_overrides: column {col!r} is neither a column of Table 1 nor of partitions")
        for part in self.partitions:
            if not (isinstance(part, tuple) and len(part) == 3 and part[0] in ("cifar10", "cifar100")):
                raise ValueError(f"each partition must be (dataset, n, S) with dataset 'cifar10' or "
                                 f"'cifar100', got {part!r}")
            check_int(part[1], "n (clients of a partition)", 1)
            check_int(part[2], "S (classes per client of a partition)", 1)
            for row in [*self.methods, *bases]:
                self.config_for(row, part)  # every override is a valid TrainConfig

    @classmethod
    def authors(cls, partitions, methods, **changes):
        """The paper profile on ``partitions`` for ``methods`` with every option and training setting
        the FedRep authors' code sets (:data:`AUTHORS_OPTIONS`, :data:`AUTHORS_TRAIN`, each personal
        part starting, before its client's first visit, at the last round's average,
        ``train.first_visit = "average"``) and the rows of :data:`AUTHORS_VARIANTS` among
        ``methods``."""
        p = cls(partitions=tuple(PAPER_TABLE1), ft_epochs=10, methods=algorithms.table1(), **PAPER_OPTIM)
        rows = tuple(methods)
        return replace(p, partitions=tuple(partitions), methods=rows, options=authors_options(rows),
                       variants={r: m for r, m in AUTHORS_VARIANTS.items() if r in rows},
                       train_overrides=authors_train(rows, partitions),
                       train=replace(p.train, first_visit="average"), **changes)

    @classmethod
    def long(cls):
        """Near-paper on a CPU, Table 1's first column, CIFAR-10 with n = 100 and S = 2, as the
        FedRep authors' code runs it (:meth:`authors`): every method of Table 1 with the authors'
        option values, and beside them the two rows where their code runs another algorithm than
        the method's paper (:data:`AUTHORS_VARIANTS`); the paper's T = 100 rounds at r = 0.1,
        evaluated every round and reported as the mean of the last 10; one seed; on the offline
        subset (20,000 of CIFAR-10's 50,000 training images, so 200 per client against the
        paper's 500; 5,000 test images, so 50 per client)."""
        return cls.column(("cifar10", 100, 2))

    @classmethod
    def column(cls, partition, profile: str = "long"):
        """Table 1's column ``partition`` near-paper on a CPU (``profile = "long"``, as
        :meth:`long` for the first column: sections ``5.7-c10-100-5``, ``5.7-c10-1000-2``,
        ``5.7-c100-100-5`` and ``5.7-c100-100-20`` of ``scripts/run_results.py``), or at
        ``profile = "paper"`` (the full datasets)."""
        if tuple(partition) not in PAPER_TABLE1:
            raise ValueError(f"{partition!r} is not a column of Table 1 {tuple(PAPER_TABLE1)}")
        rows = (*algorithms.table1(), *AUTHORS_VARIANTS)
        if profile == "paper":
            return cls.authors((tuple(partition),), rows)
        if profile != "long":
            raise ValueError(f"column: profile must be 'long' or 'paper', got {profile!r}")
        return cls.authors((tuple(partition),), rows, seeds=(0,), full_data=False)

    @classmethod
    def earlier_protocol(cls, profile: str = "long"):
        """``profile``'s first column as run before the baselines took the authors' options (the
        2026-11 near-paper runs of sections ``5.7-seeds``, ``5.7-m200``, ``5.7-m500`` and
        ``5.7-fedavg-local``): the authors' split, optimiser, weight decay, augmentation, T and
        evaluation, but every method at its own defaults (Local only 10 epochs with weight decay,
        LG-FedAvg sharing fc2 and fc3) and every personal part starting at the initial network."""
        p = cls.profile(profile)
        return replace(p, methods=tuple(m for m in p.methods if m not in AUTHORS_VARIANTS), options={},
                       variants={}, train_overrides=(), train=replace(p.train, first_visit="initial"))

    @classmethod
    def more_seeds(cls, profile: str = "long"):
        """:meth:`earlier_protocol` for the CPU default's six methods (:data:`TABLE_METHODS`:
        Local only, FedAvg, FedAvg+FT, FedPer, LG-FedAvg, FedRep) over seeds 1 and 2 (section
        ``5.7-seeds`` of ``scripts/run_results.py``)."""
        return replace(cls.earlier_protocol(profile), methods=TABLE_METHODS, seeds=(1, 2))

    @classmethod
    def per_client_images(cls, images: int, profile: str = "long"):
        """:meth:`earlier_protocol` for :data:`DATA_METHODS` on :data:`DATA_CLIENTS` CIFAR-10 clients
        of S = 2 classes with ``images`` training images each (sections ``5.7-m200`` and
        ``5.7-m500`` of ``scripts/run_results.py``). The offline subset's 20,000 CIFAR-10 images
        give 40 clients the paper's 500 each (the paper: 100 clients of 500; ``long``: 100 of 200),
        so the two sections differ only in the data per client: both partition 500 images per
        client and the 200-image run keeps 200 of each client's (``kept_per_client``), so they have
        the same label sets and test sets, rounds, participation (a client is sampled about 10
        times in T = 100, as in the paper) and initial network; paired over the clients, they
        measure what the paper's larger client datasets are worth (:func:`data_gap`)."""
        check_int(images, "images", 1)
        if images > 500:
            raise ValueError(f"images: at most the 500 each of the {DATA_CLIENTS} clients holds, got {images}")
        return replace(cls.earlier_protocol(profile), partitions=(("cifar10", DATA_CLIENTS, 2),),
                       methods=DATA_METHODS, train_per_client=500, kept_per_client=None if images == 500 else images)

    @classmethod
    def local_budget(cls, profile: str = "long"):
        """Local only at the authors' budget (:data:`AUTHORS_OPTIONS`: 100 epochs, no weight decay) on
        the :data:`DATA_CLIENTS` clients of 500 images of :meth:`per_client_images` (section
        ``5.7-m500-local100``): paired over the clients with ``5.7-m500``'s Local only (10 epochs),
        what the authors' 100 epochs are worth."""
        base = cls.per_client_images(500, profile)
        return replace(base, methods=("Local only",), options=authors_options(("Local only",)),
                       train_overrides=authors_train(("Local only",), base.partitions))

    @classmethod
    def fedavg_local(cls, profile: str = "long"):
        """:meth:`earlier_protocol`'s FedAvg run tested with each client's locally updated copy
        instead of the global model (section ``5.7-fedavg-local`` of ``scripts/run_results.py``):
        the same training as that protocol's FedAvg, bit for bit, so that paired over the clients
        it measures how much of a FedAvg number depends on which model is tested."""
        return replace(cls.earlier_protocol(profile), methods=("FedAvg",),
                       options={"FedAvg": algorithms.get("FedAvg").Options(evaluate="local")})

    @classmethod
    def paper(cls):
        """The five CIFAR columns of Table 1 with Sec. 5.2's settings (full datasets), every method of
        Table 1 as the authors' code runs it (:meth:`authors`; :meth:`column` with ``profile =
        "paper"`` runs one column with the rows of :data:`AUTHORS_VARIANTS` too)."""
        return cls.authors(tuple(PAPER_TABLE1), algorithms.table1())

    @classmethod
    def gpu(cls):
        """The paper profile sized for a few minutes of one GPU on the offline subsets: two
        partitions, CIFAR-10 (100, 2) and CIFAR-100 (100, 5), every method of Table 1, T = 100 rounds (the
        paper's), evaluated every 5 rounds, one seed; every method trains a round's 10 clients as
        one batched computation (``vmap_clients``: the batched path of :func:`replearn.neural.run`,
        fine-tuning included). Without augmentation, which the batched path does not draw, and with
        Local only at 10 epochs: it trains one client at a time, and the authors' 100 would take most
        of the few minutes."""
        p = cls.paper()
        options = {**p.options, "Local only": algorithms.get("Local only").Options(epochs=10)}
        return replace(p, partitions=(("cifar10", 100, 2), ("cifar100", 100, 5)), seeds=(0,), full_data=False,
                       options=options, train=replace(p.train, eval_every=5, vmap_clients=10, augment=False))


def work(s: TableSettings, *, batched: bool = True) -> dict:
    """:func:`replearn.book.scales.launch_estimate` of :func:`run_table` with ``s``: per partition,
    every row's rounds with the training settings it runs with (:meth:`TableSettings.config_for`;
    FedRep: head and body epochs; the others: the body epochs; a +FT row adds ``ft_epochs`` head
    epochs per client, batched like training; a method whose clients train ``models`` models a
    round, such as Ditto and APFL, counts that many times), and the evaluations every
    ``eval_every`` rounds; a method's clients count as batched when ``batched`` and the algorithm
    has a batched path (all of Table 1's). A client's images are ``kept_per_client`` when set, else
    ``train_per_client``; Local only with ``epochs`` trains every client once for that many epochs
    (one client at a time)."""
    images = s.kept_per_client or s.train_per_client
    parts = []
    for part in s.partitions:
        name, n, _ = part
        for row in s.methods:
            alg = algorithms.get(s.method_of(row))
            if isinstance(alg, FineTuned):
                cfg = s.config_for(alg.base.name, part)
                per_client, _ = scales.federated_steps(name, s.full_data, n, images,
                                                       replace(cfg, rounds=1, participation=1.0), s.ft_epochs)
                parts.append(scales.launch_estimate(per_client, n,  # every client, batched like training
                                                    batched_clients=scales.batching(cfg, n, batched)))
                continue
            cfg = s.config_for(row, part)
            opts = alg.check_options(s.options_for(row))
            if alg.name == "Local only" and opts.epochs is not None:  # every client, once
                k, _ = scales.federated_steps(name, s.full_data, n, images,
                                              replace(cfg, rounds=1, participation=1.0), opts.epochs)
                parts.append(scales.launch_estimate(k, n, batched_clients=1))
                continue
            epochs = cfg.local_epochs + (cfg.head_epochs if alg.name == "FedRep" else 0)
            k, m = scales.federated_steps(name, s.full_data, n, images, cfg, epochs)
            parts.append(scales.launch_estimate(k * alg.models, n * -(-cfg.rounds // cfg.eval_every),
                                                batched_clients=scales.batching(cfg, m, batched and alg.batched)))
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


def clients_and_network(s: TableSettings, cifar: D.CifarData, part) -> tuple:
    """The clients of partition ``part`` (dataset, n, S) of ``cifar`` under ``s`` (each keeping
    ``kept_per_client`` images when set) and a function making the run's initial network: what
    every row of :func:`run_table` on ``part`` starts from."""
    name, n, S = part
    require_data(cifar, s.full_data, "TableSettings")
    fed = make_federation(cifar, n, S, train_per_client=s.train_per_client, test_per_client=s.test_per_client,
                          seed=s.seed, split=s.split)
    cl = fed.clients
    if s.kept_per_client is not None:
        cl = cl.take_train(s.kept_per_client, seed=derive_seed(s.seed, 13), option="kept_per_client")

    def model_fn():
        return s.network(name, fed.n_classes, derive_seed(s.seed, 3), cl.device)

    return cl, model_fn


def run_table(s: TableSettings, *, cifar: dict | None = None) -> TableResult:
    """Paper Table 1 (see the module docstring). ``cifar``: optional preloaded datasets by name."""
    cifar = dict(cifar or {})
    acc, cacc, curves, ntr, nte, desc = {}, {}, {}, {}, {}, {}
    for part in s.partitions:
        name = part[0]
        if name not in cifar:
            cifar[name] = D.load_cifar(name)
        cl, model_fn = clients_and_network(s, cifar[name], part)
        acc[part], cacc[part], curves[part] = {}, {}, {}
        trained = {}
        for row in s.methods:
            alg = algorithms.get(s.method_of(row))
            if isinstance(alg, FineTuned):  # the base method's trained global model, each client's head tuned
                base = alg.base.name
                if base not in trained:
                    trained[base] = alg.base.run(model_fn(), cl, s.config_for(base, part), s.options_for(base))
                r = alg.fine_tune(trained[base], model_fn(), cl, alg.Options(epochs=s.ft_epochs, seed=derive_seed(s.seed, 5)))
                acc[part][row] = r.final.average
                curves[part][row] = torch.full((s.train.rounds,), float("nan"))
            else:
                r = trained[row] = alg.run(model_fn(), cl, s.config_for(row, part), s.options_for(row))
                acc[part][row] = r.accuracy
                curves[part][row] = r.test_accuracy
            cacc[part][row] = r.final.accuracy
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


# --------------------------------------------------------------------------- what the page shows

#: The methods of the CPU default with a personal part (all but FedAvg), FedRep aside.
PERSONAL = tuple(m for m in TABLE_METHODS if m not in ("FedAvg", "FedRep"))
#: The global models of Table 1 (no personal part) that the near-paper run compares with.
GLOBAL = ("FedAvg", "FedProx", "SCAFFOLD")
#: The paper's pairwise claims the page puts beside our runs: (first method, second method).
PAIRS = (("FedRep", "FedAvg"), ("FedAvg+FT", "FedAvg"), ("FedRep", "FedAvg+FT"), ("FedRep", "FedPer"),
         ("FedRep", "LG-FedAvg"), ("FedRep", "Local only"), ("FedRep", "Ditto"), ("FedRep", "APFL"))


def slug(method: str) -> str:
    """A method's name in glue labels: ``"FedAvg+FT"`` -> ``"fedavgft"``, ``"LG-FedAvg"`` -> ``"lgfedavg"``."""
    return method.lower().replace(" ", "").replace("+", "").replace("-", "")


def method_color(method: str) -> str:
    """The book's colour of a method (a +FT method takes its base method's; brown if none)."""
    return COLORS.get(method.split("+")[0], "#8c564b")


def accuracies(runs, part) -> dict[str, list[float]]:
    """``{method: [personalised accuracy (fraction), one per run]}`` on partition ``part``, for
    the methods of :data:`TABLE_METHODS`."""
    return {m: [r.accuracy[part][m] for r in runs] for m in TABLE_METHODS}


def glue_tables(acc: dict, part, key, paper: dict) -> tuple[dict, tuple]:
    """Glue every method's accuracy in % (``t1-<slug>``: mean ± sd over seeds) and FedRep's lead
    over each personalised method (``t1-diff-<slug>``: paired difference in points); returns the
    shown strings ``{method: MeanPm}`` and two tables: ours beside the paper's column ``key``
    (``paper``: its accuracies) and FedRep's leads."""
    n = len(acc["FedRep"])
    shown = {m: glue_pm(f"t1-{slug(m)}", acc[m], scale=100) for m in acc}
    diffs = {m: glue_diff(f"t1-diff-{slug(m)}", acc["FedRep"], acc[m], scale=100) for m in PERSONAL}
    return shown, (Table(["method", "ours %", "paper %"], [[m, shown[m].text, fmt(paper[m], ".2f")] for m in acc],
                         caption=f"{column_label(part)} (the paper: n = {key[1]}); ours: mean ± sd over {n} seeds"),
                   Table(["FedRep minus", "points, paired over seeds [95% interval]"],
                         [[m, diffs[m].text] for m in PERSONAL]))


def checks(acc: dict, shown: dict, S: int) -> list[tuple[str, str, object, dict]]:
    """The CPU run's verdicts as ``(name, label, condition, options)`` for
    :func:`replearn.book.claims.verdict`, every ordering paired over seeds in percentage points
    (the unit of the table beside them): FedRep and FedAvg+FT above FedAvg (Table 1; required),
    FedAvg below the floor 1/``S`` of a personal head on every seed, every personalised method
    above it, and FedRep ahead of at least one other personalised method."""
    floor, (_, paper) = 100 / S, paper_reference(("cifar10", 100, S))
    above = dict(holds="is above FedAvg's beyond the spread over seeds", fails="is not separated from FedAvg's",
                 opposite="is below FedAvg's beyond the spread over seeds")
    return [("t1-v-fedrep-fedavg", "FedRep above FedAvg without a personal head (paper Table 1)",
             seeds.points(acc["FedRep"], acc["FedAvg"]),
             dict(require=True, **above, paper="Table 1: FedRep far above FedAvg without fine-tuning",
                  paper_difference=paper["FedRep"] - paper["FedAvg"],
                  fedrep=shown["FedRep"].text, fedavg=shown["FedAvg"].text)),
            ("t1-v-ft", "a personal head rescues FedAvg's model: FedAvg+FT above FedAvg",
             seeds.points(acc["FedAvg+FT"], acc["FedAvg"]),
             dict(require=True, **above, paper="Table 1: fine-tuning a head (FedAvg+FT) closes FedAvg's gap",
                  fedavg_ft=shown["FedAvg+FT"].text)),
            ("t1-v-fedavg-floor", f"FedAvg below the floor 1/S = {floor:.0f}% of a personal head on every seed",
             100 * max(acc["FedAvg"]) < floor, dict(holds="is below it on every seed",
                                                     fails="is not below it on every seed")),
            ("t1-v-floor", f"every personalised method's mean accuracy above the floor 1/S = {floor:.0f}%",
             all(100 * seeds.mean_sd(acc[m])[0] > floor for m in [*PERSONAL, "FedRep"]),
             dict(holds="are all above", fails="are not all above")),
            ("t1-v-rank", "FedRep ahead of at least one other personalised method",
             seeds.some(seeds.points(acc["FedRep"], acc[m]) for m in PERSONAL),
             dict(holds="FedRep is ahead of at least one of them beyond the spread over seeds",
                  fails="FedRep is not separated from them", opposite="FedRep is below all of them",
                  paper="Table 1: FedRep ahead of (or close to the best of) FedPer, LG-FedAvg and Local only"))]


def plot_table(acc: dict, paper: dict, part, key, rounds: int):
    """Left: our personalised accuracy per method (bars: mean ± sd; dots: seeds) with the floor
    1/S of a personal head; right: the paper's Table 1 column ``key``. Returns the figure."""
    methods = list(acc)
    x = np.arange(len(methods))
    colors = [method_color(m) for m in methods]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10.0, 3.6), sharey=True)
    ax1.set_ylim(0, 112)
    ax1.bar(x, [100 * mean_sd(acc[m])[0] for m in methods], yerr=[100 * mean_sd(acc[m])[1] for m in methods],
            capsize=3, color=colors)
    for j, m in enumerate(methods):
        ys = 100 * np.array(acc[m])
        ax1.plot(np.full(len(ys), x[j]) + np.linspace(-0.2, 0.2, len(ys)), ys, "k.", ms=4)
    ax1.axhline(100 / part[2], color="k", ls=":", lw=1, label="floor 1/S of a personal head")
    ax1.set(xticks=x, ylabel="personalised test accuracy (%)",
            title=f"ours: {column_label(part)}, T = {rounds}; {len(acc[methods[0]])} seeds")
    ax1.set_xticklabels(methods, rotation=30, ha="right")
    ax1.legend(fontsize=8, loc="upper right", frameon=False)   # above the bars
    ax2.bar(x, [paper[m] for m in methods], color=colors)
    ax2.axhline(100 / part[2], color="k", ls=":", lw=1)
    ax2.set(xticks=x, title=f"paper's Table 1: n = {key[1]}, S = {key[2]}, T = 100")
    ax2.set_xticklabels(methods, rotation=30, ha="right")
    plt.tight_layout()
    return fig
