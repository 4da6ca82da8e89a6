"""Book 5.7: personalised accuracy on CIFAR, Table 1 of Collins, Hassani, Mokhtari, Shakkottai (2021).

For each partition (dataset, n clients, S classes per client) of
:func:`replearn.experiments.ch05_fedrep.cifar_federation.make_federation`, every method of ``methods`` (CPU default:
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
import functools
from dataclasses import dataclass, field, replace
from typing import Annotated

import matplotlib.pyplot as plt
import numpy as np
import torch
from scipy.stats import spearmanr

from replearn.neural import data as D
from replearn import neural
from replearn.backend import derive_seed
from replearn.checks import check_int
from replearn.book import results, scales, seeds
from replearn.book.results import Section, floats
from replearn.book.claims import compared, fmt, glue_diff, glue_pm, glue_text
from replearn.book.plotting import COLORS, Table
from replearn.book.seeds import compare, mean_sd
from replearn.neural import algorithms
from replearn.neural.algorithms.fine_tuning import FineTuned
from replearn.book.scales import require_data
from replearn.experiments.ch05_fedrep.cifar_federation import AUTHORS_PIPELINE, PAPER_OPTIM, FederationSettings, make_federation
from replearn.settings import Ge

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
#: its pipeline (:data:`replearn.experiments.ch05_fedrep.cifar_federation.AUTHORS_PIPELINE`) and Table 1's scripts.
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
                "methods": (algorithms.table1(), "main_fedrep.py (--alg fedavg, prox, maml, lg, fedper, fedrep; "
                                                 "maml trains the plain LocalUpdate, not Per-FedAvg's), "
                                                 "main_scaffold.py, main_mtl.py; main_local.py, main_l2gd.py, "
                                                 "main_apfl.py and main_ditto.py cannot run as published "
                                                 "(undefined names), so their stated values are used"),
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
    ("SCAFFOLD", "max_grad_norm", 10.0, "models/Update.py (LocalUpdateScaffold: clip_grad_norm_(max_norm=10) "
                                        "after backward())"),
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
    ft_epochs: Annotated[int, Ge(1)] = 10
    methods: tuple[str, ...] = TABLE_METHODS
    options: dict = field(default_factory=dict)
    variants: dict = field(default_factory=dict)
    train_overrides: tuple = ()
    kept_per_client: Annotated[int | None, Ge(1)] = None

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
    epochs per client, batched like training), and the evaluations every ``eval_every`` rounds;
    what a method trains in a round, over which rounds, and whether it can batch its clients is its
    own :meth:`~replearn.neural.algorithms.base.Algorithm.cost` (FedRep: head and body epochs;
    Ditto and APFL: two models; Local only with ``epochs``: every client once). A method's clients
    count as batched when ``batched`` and its cost says they can. A client's images are
    ``kept_per_client`` when set, else ``train_per_client``."""
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
            cfg, epochs, can_batch = alg.cost(s.config_for(row, part), alg.check_options(s.options_for(row)))
            k, m = scales.federated_steps(name, s.full_data, n, images, cfg, epochs)
            parts.append(scales.launch_estimate(k, n * -(-cfg.rounds // cfg.eval_every),
                                                batched_clients=scales.batching(cfg, m, batched and can_batch)))
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


def summarise(r: TableResult) -> dict:
    """One seed's result as its results file keeps it: per partition (``"cifar10/100/2"``), each
    row's accuracy and its clients' accuracies."""
    key = {p: "/".join(map(str, p)) for p in r.partitions}
    return {"accuracy": {key[p]: dict(r.accuracy[p]) for p in r.partitions},
            "client_accuracy": {key[p]: {m: floats(v) for m, v in r.client_accuracy[p].items()}
                                for p in r.partitions}}


def _section(name: str, variant=None) -> Section:
    return Section(name, TableSettings, run_table, summarise, work, variant=variant)


#: What ``scripts/run_results.py`` runs of this section: ``5.7``, the first column with the authors'
#: values, by default; run only when named, its six main methods over seeds 1 and 2 (``5.7-seeds``);
#: Local only, FedAvg and FedRep on 40 clients with 200, then the paper's 500 training images each
#: (``5.7-m200``, ``5.7-m500``), and Local only there at the authors' 100 epochs
#: (``5.7-m500-local100``); every method at its own defaults (``5.7-defaults``); FedAvg tested with
#: the clients' locally updated copies (``5.7-fedavg-local``); Table 1's other four columns as the
#: authors ran them (``5.7-c10-100-5`` ...).
RESULTS = (_section("5.7"),
           _section("5.7-seeds", TableSettings.more_seeds),
           _section("5.7-m200", functools.partial(TableSettings.per_client_images, 200)),
           _section("5.7-m500", functools.partial(TableSettings.per_client_images, 500)),
           _section("5.7-fedavg-local", TableSettings.fedavg_local),
           _section("5.7-m500-local100", TableSettings.local_budget),
           _section("5.7-defaults", TableSettings.earlier_protocol),
           *(_section(f"5.7-{column_slug(col)}", functools.partial(TableSettings.column, col))
             for col in PAPER_TABLE1 if col != ("cifar10", 100, 2)))


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


# --------------------------------------------------------------------------- Appendix B.5.7: the near-paper runs
# (read from the committed results files, book/results/long/5.7*.json; nothing here trains)

def rank(values: dict) -> dict:
    """``{method: its rank}`` by decreasing value (1 = best; ties share the better rank)."""
    return {m: 1 + sum(v > values[m] for v in values.values()) for m in values}


def ordinal(k: int) -> str:
    """``1`` -> ``"first"``, ``2`` -> ``"second"``, ``3`` -> ``"third"``, else ``"<k>th"``."""
    return {1: "first", 2: "second", 3: "third"}.get(k, f"{k}th")


@dataclass(frozen=True)
class LongTable:
    """The committed near-paper run (one seed): its partition ``part`` (and as the results
    file's key, ``label``), the paper's column ``key`` with its accuracies ``paper``, the
    ``methods`` run, ``acc`` (``{method: accuracy %}``) and ``client`` (``{method: final
    accuracy % per client}``)."""

    part: tuple
    label: str
    key: tuple
    paper: dict
    methods: list
    seed: int
    acc: dict
    client: dict


def read_long(long) -> LongTable:
    """:class:`LongTable` of a results file with one seed (:func:`replearn.book.results.load`); a
    row of the authors' variants (``variants``) is set beside its method's paper number."""
    (seed,) = long.seeds
    part = tuple(long.settings["partitions"][0])
    label = column_key(part)
    key, paper = paper_reference(part)
    paper = {**paper, **{row: paper[m] for row, m in long.settings.get("variants", {}).items()}}
    methods = list(long.settings["methods"])
    acc = {m: 100 * long.values("accuracy", label, m)[0] for m in methods}
    client = {m: [100 * a for a in long.results[str(seed)]["client_accuracy"][label][m]] for m in methods}
    return LongTable(part, label, key, paper, methods, seed, acc, client)


def paper_word(paper: dict, a: str, b: str) -> str:
    """How the paper's column ``paper`` orders ``a`` and ``b``: ``"higher (+2.09)"``."""

    d = paper[a] - paper[b]
    return f"{'higher' if d > 0 else 'lower'} ({fmt(d, '+.2f')})"


def seed_accuracies(more, lv: LongTable) -> dict[str, list[float]]:
    """``{method: [accuracy %, seed by seed]}`` of the methods of the extra seeds' results file
    ``more``, the near-paper run's seed first."""
    return {m: [lv.acc[m]] + [100 * v for v in more.values("accuracy", lv.label, m)] for m in more.settings["methods"]}


def seed_tables(sacc: dict, lv: LongTable, seeds_run: tuple, rounds: int) -> tuple:
    """Glue each method's mean ± sd over the seeds (``t1-seeds-<slug>``) and return two tables:
    accuracy per seed beside the paper's, and the paper's pairwise claims paired over seeds."""

    shown = {m: glue_pm(f"t1-seeds-{slug(m)}", v) for m, v in sacc.items()}
    k = len(seeds_run)
    rows = [[m, fmt(lv.paper[m], ".2f")] + [fmt(v, ".1f") for v in sacc[m]] + [shown[m].text] for m in sacc]
    return (Table(["method", "paper %"] + [f"seed {s} %" for s in seeds_run] + ["mean ± sd"], rows,
                  align="l" + "r" * (k + 2),
                  caption=f"the near-paper run ({column_label(lv.part)}, T = {rounds}) of the six main methods on "
                          f"{k} seeds"),
            Table(["claim", f"paper (Table 1, {column_label(lv.key)})", f"near-paper ({k} seeds, paired over seeds)"],
                  [[f"{a} vs {b}", paper_word(lv.paper, a, b), compared(sacc[a], sacc[b])]
                   for a, b in PAIRS if a in sacc and b in sacc],
                  align="lll", caption="first minus second method, in points: the paired mean difference over seeds "
                                       "and its 95% interval"))


def seed_checks(sacc: dict, paper: dict) -> list[tuple[str, str, object, dict]]:
    """The verdicts of the near-paper run over its seeds (paired over seeds): FedRep above
    FedAvg, FedPer and LG-FedAvg, and FedRep and Local only in the paper's order (Local only
    above), each with the paper's own difference."""

    def diff(a, b):
        return dict(paper_difference=paper[a] - paper[b], scale="long")

    label = "near-paper run, three seeds: FedRep above {} beyond the spread over seeds"
    near = dict(holds="is above it beyond the spread over seeds", fails="is not separated from it by the spread over seeds")
    reverse = seeds.separated(sacc["FedRep"], sacc["Local only"], unit="points")
    return [("t1-seeds-v-fedrep-fedavg", label.format("FedAvg"), seeds.separated(sacc["FedRep"], sacc["FedAvg"], unit="points"),
             dict(holds="is above FedAvg's beyond the spread over seeds",
                  fails="is not above FedAvg's beyond the spread over seeds",
                  paper="Table 1: FedRep far above FedAvg without fine-tuning", **diff("FedRep", "FedAvg"))),
            ("t1-seeds-v-fedrep-fedper", label.format("FedPer"), seeds.separated(sacc["FedRep"], sacc["FedPer"], unit="points"),
             dict(**near, paper="Table 1: FedRep above FedPer (+0.57 points)", **diff("FedRep", "FedPer"))),
            ("t1-seeds-v-fedrep-lg", label.format("LG-FedAvg"), seeds.separated(sacc["FedRep"], sacc["LG-FedAvg"], unit="points"),
             dict(**near, paper="Table 1: FedRep above LG-FedAvg (+3.56 points)", **diff("FedRep", "LG-FedAvg"))),
            ("t1-seeds-v-fedrep-local", "near-paper run, three seeds: FedRep and Local only ordered as in the paper "
                                        "(Local only above) beyond the spread over seeds",
             seeds.separated(sacc["Local only"], sacc["FedRep"], unit="points"),
             dict(holds="is below it beyond the spread over seeds, as in the paper",
                  fails=("is above it beyond the spread over seeds, the reverse of the paper's order" if reverse
                         else "is not separated from it by the spread over seeds, unlike the paper"),
                  paper="Table 1: Local only above FedRep (+2.09 points) at (100, 2)",
                  **diff("Local only", "FedRep")))]


# --------------------------------------------------------------------------- data per client

def read_data_gap(m200, m500) -> tuple[LongTable, LongTable]:
    """The runs of sections ``5.7-m200`` and ``5.7-m500`` (results files, :func:`replearn.book.results.load`)
    as two :class:`LongTable`, checked to differ only in the data per client
    (:meth:`TableSettings.per_client_images`): the same settings but ``kept_per_client``."""
    same = [k for k in set(m200.settings) | set(m500.settings)
            if k != "kept_per_client" and m200.settings.get(k) != m500.settings.get(k)]
    if same or m200.seeds != m500.seeds:
        raise ValueError(f"5.7-m200 and 5.7-m500 must differ only in kept_per_client; they also differ in "
                         f"{sorted(same) or 'their seeds'}: re-run both with the same code")
    return read_long(m200), read_long(m500)


def data_gap_table(small: LongTable, big: LongTable, near: LongTable):
    """What the paper's 500 training images per client are worth, for each method of both runs:
    the paper's accuracy, the near-paper run's (``near``: 100 clients of 200 images), the 40-client
    runs with 200 (``small``) and 500 (``big``) images each, the gain from 500 images paired over
    the 40 clients (the same label sets and test sets; :func:`replearn.book.claims.compared`) and
    the gap to the paper left with 500. Glues ``t1-m200-<slug>`` and ``t1-m500-<slug>`` (%),
    ``t1-mgain-<slug>`` (the paired comparison, in words), ``t1-mdiff-<slug>`` (its difference and
    interval, ``"+5 [+2, +8]"``) and ``t1-mleft-<slug>`` (the paper minus the
    500-image run, in points)."""

    rows = []
    for m in small.methods:
        gain = compared(big.client[m], small.client[m])
        left = fmt(big.paper[m] - big.acc[m], "+.1f")
        glue_text(f"t1-m200-{slug(m)}", fmt(small.acc[m], ".1f"))
        glue_text(f"t1-m500-{slug(m)}", fmt(big.acc[m], ".1f"))
        glue_text(f"t1-mgain-{slug(m)}", gain)
        glue_text(f"t1-mdiff-{slug(m)}", compare(big.client[m], small.client[m]).text)
        glue_text(f"t1-mleft-{slug(m)}", left)
        rows.append([m, fmt(big.paper[m], ".2f"), fmt(near.acc[m], ".1f") if m in near.acc else "not run",
                     fmt(small.acc[m], ".1f"), fmt(big.acc[m], ".1f"), gain, left])
    n = len(small.client[small.methods[0]])
    return Table(["method", "paper %", f"near-paper % ({near.part[1]} x 200)", f"{n} x 200 %", f"{n} x 500 %",
                  "500 minus 200, paired over clients", "paper minus 500, points"], rows, align="lrrrrlr",
                 caption=f"the near-paper protocol on {n} CIFAR-10 clients of S = {small.part[2]} classes with 200 "
                         f"and with 500 training images each (the same clients, label sets and test sets; one seed)")


def paper_gaps(lv: LongTable):
    """How far each method of the near-paper run is from the paper's number, by the book's rule
    (:mod:`replearn.book.seeds`): the gap (ours minus the paper's, in points) counts when it exceeds
    the half-width of the 95% t-interval of the mean over the clients (of their final accuracies).
    Glues ``t1-long-gap-<slug>`` (the gap, points), ``t1-long-n-gaps`` (``"<k> of <all>"``) and
    ``t1-long-gaps-largest`` (the three largest beyond the spread, with their gaps); returns the table and the methods beyond the spread, largest gap first."""

    rows, beyond = [], []
    for m in lv.methods:
        half, gap = spread(lv, m), lv.acc[m] - lv.paper[m]
        glue_text(f"t1-long-gap-{slug(m)}", fmt(gap, "+.1f"))
        if abs(gap) > half:
            beyond.append(m)
        rows.append([m, fmt(lv.paper[m], ".2f"), fmt(lv.acc[m], ".1f"), fmt(gap, "+.1f"), f"± {fmt(half, '.1f')}",
                     "beyond the spread" if abs(gap) > half else "within the spread"])
    glue_text("t1-long-n-gaps", f"{len(beyond)} of {len(lv.methods)}")
    beyond.sort(key=lambda m: -abs(lv.acc[m] - lv.paper[m]))
    glue_text("t1-long-gaps-largest", ", ".join(f"{m} ({fmt(lv.acc[m] - lv.paper[m], '+.1f')})" for m in beyond[:3])
              or "none")
    return (Table(["method", "paper %", "near-paper %", "gap, points", "spread (95%, over clients)", ""], rows,
                  align="lrrrrl", caption=f"each method of the near-paper run ({column_label(lv.part)}, one seed) "
                                          f"against the paper's Table 1 ({column_label(lv.key)})"), beyond)


def fedavg_local(local, long, lv: LongTable) -> str:
    """The near-paper FedAvg run tested with the clients' locally updated copies (the results
    file ``local`` of section ``5.7-fedavg-local``), checked to be the run of ``long`` (the
    ``5.7-defaults`` file, read as ``lv``) but for what is tested, against its global model, paired over the clients.
    Glues ``t1-fedavg-local`` (%) and ``t1-fedavg-local-vs`` (:func:`replearn.book.claims.compared`,
    the copies minus the global model) and returns the latter."""

    differ = [k for k in set(local.settings) | set(long.settings) if k not in ("methods", "options")
              and local.settings.get(k) != long.settings.get(k)]
    evaluate = local.settings.get("options", {}).get("FedAvg", {}).get("evaluate")
    if differ or local.seeds != long.seeds or evaluate != "local":
        raise ValueError(f"5.7-fedavg-local must be the run of {long.section} with FedAvg's evaluate='local'; it "
                         f"differs in {sorted(differ) or 'its seeds or FedAvg options'}: re-run it with the same code")
    copies = read_long(local)
    glue_text("t1-fedavg-local", fmt(copies.acc["FedAvg"], ".1f"))
    return glue_text("t1-fedavg-local-vs", compared(copies.client["FedAvg"], lv.client["FedAvg"]))


# --------------------------------------------------------------------------- Table 1 as the authors ran it

def setting_words(value) -> str:
    """A setting's value as the page writes it: ``True`` -> ``"yes"``, ``0.0001`` -> ``"0.0001"``,
    ``None`` (an option left off, e.g. no clipping) -> ``"none"``."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return fmt(value, "g") if isinstance(value, float) else str(value)


def authors_table():
    """Every option and training setting the near-paper profiles take from the FedRep authors'
    code (:data:`AUTHORS_OPTIONS`, :data:`AUTHORS_TRAIN`) beside the value the method's own
    paper runs (the library's default, whose docstring names its source): ``method | setting |
    the method's paper (ours by default) | the authors' code | where``."""
    rows = []
    for row, option, value, where in AUTHORS_OPTIONS:
        default = getattr(algorithms.get(AUTHORS_VARIANTS.get(row, row)).Options(), option)
        rows.append([row, option, setting_words(default), setting_words(value), where])
    train = PAPER_OPTIM["train"]
    for row, col, name, value, where in AUTHORS_TRAIN:
        who = "every method" if row == "*" else row
        rows.append([who + ("" if col == "*" else f", column {col.replace('/', ' ')}"), name,
                     setting_words(getattr(train, name)), setting_words(value), where])
    rows.append(["every method with a personal part", "first_visit", "initial", "average",
                 "main_fedrep.py, main_ditto.py, main_apfl.py (w_locals: views of net_glob's tensors)"])
    return Table(["method", "setting", "its paper (ours by default)", "the authors' code", "where"], rows,
                 align="lllll", caption="what the near-paper profiles take from the FedRep authors' code")


#: The results section of each column of Table 1 run near-paper with the authors' values.
COLUMN_SECTIONS = {col: "5.7" if col == ("cifar10", 100, 2) else f"5.7-{column_slug(col)}" for col in PAPER_TABLE1}


def read_columns(root=None) -> dict:
    """``{column: LongTable}`` of the columns of Table 1 whose near-paper run with the authors'
    values is committed (:data:`COLUMN_SECTIONS`), in Table 1's order; a column not yet run is
    left out (:func:`missing_columns` names it)."""
    out = {}
    for col, section in COLUMN_SECTIONS.items():
        try:
            out[col] = read_long(results.load(section, "long", root=root))
        except FileNotFoundError:
            continue
    return out


def missing_columns(runs: dict) -> list[str]:
    """The columns of Table 1 without a committed near-paper run, in words."""
    return [column_label(col) for col in PAPER_TABLE1 if col not in runs]


def columns_table(runs: dict):
    """Every row of the near-paper runs (``runs``: :func:`read_columns`) beside the paper's Table 1,
    one pair of columns (ours, the paper's) per column run, in %."""
    rows_order = list(dict.fromkeys(m for lv in runs.values() for m in lv.methods))
    header, rows = ["method"], []
    for col in runs:
        header += [f"{column_label(col)}: ours", "paper"]
    for m in rows_order:
        row = [m]
        for lv in runs.values():
            row += [fmt(lv.acc[m], ".1f") if m in lv.acc else "not run", fmt(lv.paper[m], ".2f") if m in lv.paper
                    else "—"]
        rows.append(row)
    return Table(header, rows, align="l" + "r" * (len(header) - 1),
                 caption="Table 1 as the FedRep authors ran it, near-paper on the offline subsets (one seed each; "
                         "a row '(authors' code)' runs what their code runs for that method, beside the paper's number "
                         "for the method)")


def spread_gaps(lv: LongTable) -> list[str]:
    """The rows whose accuracy is further from the paper's than the half-width of the 95% interval
    of the mean over the clients, largest gap first."""
    beyond = [m for m in lv.methods if abs(lv.acc[m] - lv.paper[m]) > spread(lv, m)]
    return sorted(beyond, key=lambda m: -abs(lv.acc[m] - lv.paper[m]))


def spread(lv: LongTable, m: str) -> float:
    """The half-width of the 95% t-interval of row ``m``'s mean accuracy over the clients (points)."""
    c = compare(lv.client[m], [lv.paper[m]] * len(lv.client[m]))
    return (c.hi - c.lo) / 2


def column_claims(lv: LongTable) -> dict:
    """The paper's three claims on one column, paired over its clients (:mod:`replearn.book.seeds`):
    ``best``: FedRep above, or not separated from, the best other row of Table 1 (the paper: best or
    close to the best); ``head``: FedAvg+FT above FedAvg (a personal head rescues a global model);
    ``personal``: every row with a personal part above each global model (:data:`GLOBAL`), judged by
    the weakest pair (the smallest lower bound: all pairs hold when it does). Each is a
    :class:`replearn.book.seeds.Comparison` in points, with the pair or the best row it concerns."""
    c = {m: [x / 100 for x in v] for m, v in lv.client.items()}
    others = [m for m in lv.methods if m != "FedRep" and m not in AUTHORS_VARIANTS]
    best = max(others, key=lambda m: lv.acc[m])
    personal = [m for m in lv.methods if m not in GLOBAL and m not in AUTHORS_VARIANTS]
    pairs = {(m, g): seeds.points(c[m], c[g]) for m in personal for g in GLOBAL}
    weakest = min(pairs, key=lambda pair: pairs[pair].lo)   # every pair holds when this one does
    return {"best": (best, seeds.points(c["FedRep"], c[best])),
            "head": seeds.points(c["FedAvg+FT"], c["FedAvg"]),
            "personal": (weakest, pairs[weakest])}


def best_word(comparison) -> str:
    """FedRep against the best other row, in the book's vocabulary: above it ("holds"), not
    separated from it (also what the paper claims: close to the best), or below it ("opposite")."""
    return {"holds": "holds (FedRep best)", "opposite": "opposite (FedRep below it)"}.get(
        comparison.outcome, f"holds (FedRep not separated from the best, n = {comparison.n})")


def columns_summary(runs: dict):
    """Per column run: FedRep's rank here and in the paper, the Spearman correlation of the rows
    with the paper's, how many rows are further from the paper than the spread over clients, and
    the paper's three claims (:func:`column_claims`) with their paired differences in points."""
    rows = []
    for col, lv in runs.items():
        table_rows = [m for m in lv.methods if m not in AUTHORS_VARIANTS]
        ours, paper = rank({m: lv.acc[m] for m in table_rows}), rank({m: lv.paper[m] for m in table_rows})
        rho = spearmanr([lv.acc[m] for m in table_rows], [lv.paper[m] for m in table_rows]).statistic
        claims = column_claims(lv)
        best, vs_best = claims["best"]
        rows.append([column_label(col), f"{ordinal(ours['FedRep'])} (paper: {ordinal(paper['FedRep'])})", fmt(rho, ".2f"),
                     f"{len([m for m in spread_gaps(lv) if m in table_rows])} of {len(table_rows)}",
                     f"{best_word(vs_best)}: FedRep minus {best} {vs_best.text}",
                     f"{claims['head'].word}: {claims['head'].text}",
                     f"{claims['personal'][1].word}: weakest pair {' minus '.join(claims['personal'][0])} "
                     f"{claims['personal'][1].text}"])
    return Table(["column", "FedRep's rank", "Spearman with the paper", "rows beyond the spread from the paper",
                  "FedRep best or close to the best", "FedAvg+FT minus FedAvg", "every personal row above every global one"],
                 rows, align="lllllll",
                 caption="per column run near-paper: paired over its clients (one seed), the book's rule; rank and "
                         "correlation over Table 1's rows")


def authors_against_defaults(authors: LongTable, own: LongTable):
    """Each row of Table 1 run with the authors' values (``authors``: section 5.7) against the same
    column, seed, clients and initial network with every method at its own defaults (``own``:
    ``5.7-defaults``), paired over the clients, in points; glues ``t1-ad-<slug>`` (the comparison)."""
    if authors.part != own.part or authors.seed != own.seed:
        raise ValueError(f"5.7 and 5.7-defaults must run the same column and seed, got {authors.part} seed "
                         f"{authors.seed} and {own.part} seed {own.seed}")
    rows = []
    for m in own.methods:
        c = compare(authors.client[m], own.client[m], unit="points")
        glue_text(f"t1-ad-{slug(m)}", c.text)
        rows.append([m, fmt(own.acc[m], ".1f"), fmt(authors.acc[m], ".1f"), c.text, c.word,
                     fmt(authors.paper[m], ".2f")])
    for row, m in AUTHORS_VARIANTS.items():
        if row in authors.acc:
            c = compare(authors.client[row], own.client[m], unit="points")
            glue_text(f"t1-ad-{slug(row)}", c.text)
            rows.append([row, fmt(own.acc[m], ".1f") + f" ({m})", fmt(authors.acc[row], ".1f"), c.text, c.word,
                         fmt(authors.paper[row], ".2f")])
    return Table(["method", "its own defaults %", "the authors' values %", "difference, paired over clients",
                  "outcome", "paper %"], rows, align="lrrllr",
                 caption=f"{column_label(own.part)}: each method at its own defaults (5.7-defaults) and with the "
                         f"FedRep authors' values (5.7), the same clients and initial network, one seed")


def local_budget(ten: LongTable, hundred: LongTable):
    """Local only after 10 epochs (``ten``: section 5.7-m500, with weight decay) and after the
    authors' 100 epochs (``hundred``: 5.7-m500-local100, without), on the same clients of 500
    images, paired over them, in points; glues ``t1-local-10``, ``t1-local-100`` (%) and
    ``t1-local-gain`` (the comparison)."""
    if ten.part != hundred.part or ten.seed != hundred.seed:
        raise ValueError("5.7-m500 and 5.7-m500-local100 must run the same clients and seed")
    c = compare(hundred.client["Local only"], ten.client["Local only"], unit="points")
    glue_text("t1-local-10", fmt(ten.acc["Local only"], ".1f"))
    glue_text("t1-local-100", fmt(hundred.acc["Local only"], ".1f"))
    glue_text("t1-local-gain", c.text)
    return Table(["Local only", "accuracy %", "paper %"],
                 [["10 epochs (the library's default; weight decay 1e-4)", fmt(ten.acc["Local only"], ".1f"),
                   fmt(ten.paper["Local only"], ".2f")],
                  ["100 epochs (the authors' scripts; no weight decay)", fmt(hundred.acc["Local only"], ".1f"),
                   fmt(hundred.paper["Local only"], ".2f")],
                  ["100 minus 10 epochs, paired over clients", c.text, c.word]], align="lrr",
                 caption=f"Local only on {column_label(ten.part)} clients of 500 training images each, one seed")


def column_verdicts(lv: LongTable) -> list[tuple[str, str, object, dict]]:
    """The paper's three claims on the column of ``lv`` (:func:`column_claims`) as ``(name, label,
    condition, options)`` for :func:`replearn.book.claims.verdict`, at scale ``"long"``; names
    ``t1a-<column slug>-best``, ``-head`` and ``-personal``."""
    claims, key = column_claims(lv), f"t1a-{column_slug(lv.part)}"
    best, vs_best = claims["best"]
    where = column_label(lv.part)
    return [(f"{key}-best", f"{where}: FedRep not below the best other method ({best}) beyond the spread",
             vs_best.hi >= 0, dict(holds="is not below it", fails="is below it", absence=True,
                                   paper="Table 1: FedRep the best method or close to it", scale="long",
                                   fedrep_minus_best=vs_best.full)),
            (f"{key}-head", f"{where}: FedAvg+FT above FedAvg", claims["head"],
             dict(holds="is above it", fails="is not separated from it", opposite="is below it",
                  paper="Table 1: a personal head rescues a global model", scale="long",
                  paper_difference=lv.paper["FedAvg+FT"] - lv.paper["FedAvg"])),
            (f"{key}-personal", f"{where}: every method with a personal part above each global model "
                                f"(the weakest pair, {' vs '.join(claims['personal'][0])}, decides)",
             claims["personal"][1], dict(holds="all are above", fails="not all are separated from them",
                                      opposite="one is below a global model",
                                      paper="Table 1: every personalised method above FedAvg, FedProx and SCAFFOLD",
                                      scale="long"))]
