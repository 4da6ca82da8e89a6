"""Book 5.7: personalised accuracy on CIFAR, Table 1 of Collins, Hassani, Mokhtari, Shakkottai (2021).

For each partition (dataset, n clients, S classes per client) of
:func:`replearn.experiments.ch05_fedrep.cifar_federation.make_federation`, every method of ``methods`` (CPU default:
:data:`~replearn.experiments.ch05_fedrep.table1.TABLE_METHODS`; paper profile: every method of Table 1, :func:`replearn.neural.algorithms.table1`) trains
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

import torch

from replearn.neural import data as D
from replearn import neural
from replearn.backend import derive_seed
from replearn.checks import check_int
from replearn.book import scales
from replearn.book.results import Section, floats
from replearn.neural import algorithms
from replearn.neural.algorithms.fine_tuning import FineTuned
from replearn.book.scales import require_data
from replearn.experiments.ch05_fedrep.cifar_federation import (AUTHORS_PIPELINE, PAPER_CIFAR, FederationSettings,
                                                               make_federation)
from replearn.experiments.ch05_fedrep.table1 import (AUTHORS_ROWS, AUTHORS_VARIANTS, DATA_CLIENTS, DATA_METHODS, GAP_ROWS,
                                                     LOOP_ROWS_500, OPEN_ROWS, PAPER_TABLE1, TABLE_METHODS, authors_options, authors_rows,
                                                     authors_train, column_key, column_label, column_slug,
                                                     paper_reference)
from replearn.experiments.ch05_fedrep.table1_pages import accuracies, checks, glue_tables, plot_table
from replearn.settings import Ge, Profile, sourced

#: What the 5.7 page calls here: the run, and the page helpers of
#: :mod:`~replearn.experiments.ch05_fedrep.table1_pages` it shows the run with.
__all__ = ["AUTHORS_CODE", "PAPER_SETTINGS", "RESULTS", "TableResult", "TableSettings", "accuracies", "checks",
           "clients_and_network", "column_label", "glue_tables", "paper_reference", "plot_table", "run_table",
           "summarise", "work"]

#: What the FedRep paper's text states of Table 1's setting, by settings field: (value, where).
PAPER_SETTINGS = {"partitions": (tuple(PAPER_TABLE1), "FedRep paper, Table 1 (CIFAR columns)"),
                  **PAPER_CIFAR,
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
                                                 "main_mtl.py; main_scaffold.py, main_local.py, main_l2gd.py, "
                                                 "main_apfl.py and main_ditto.py cannot run as published "
                                                 "(undefined names: main_scaffold.py's optim and w_glob_keys), "
                                                 "so their stated values are used"),
                "train.first_visit": ("average", "main_fedrep.py, main_ditto.py, main_apfl.py (a client not yet "
                                                 "sampled holds views of net_glob's tensors: the last round's "
                                                 "average of every parameter, heads included)")}

@dataclass(frozen=True)
class TableSettings(FederationSettings):
    """Table 1: ``partitions`` are (dataset, n clients, S classes per client); every row of
    ``methods`` run on each (a row is a registered method, of Table 1 or a reader's own, or a label of
    ``variants``, which names the method it runs); a +FT method fine-tunes the head of its base
    method's global model for ``ft_epochs`` epochs.
    ``options``: ``{row: options}`` (an instance of its method's ``Options``; a row not listed
    runs its method's defaults, which are its paper's algorithm); ``variants``: ``{row label:
    registered method}`` for rows that run a method with other options beside its own row (e.g.
    :data:`~replearn.experiments.ch05_fedrep.table1.AUTHORS_VARIANTS`); ``train_overrides``: ``(row or "*", column "dataset/n/S" or "*",
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
        known = algorithms.names()   # Table 1's methods, and any other registered one (a reader's own)
        for row, method in self.variants.items():
            if method not in known or row in known:
                raise ValueError(f"variants maps a new row label to a registered method {known}, got {row!r}: "
                                 f"{method!r}")
        unknown = [m for m in self.methods if m not in known and m not in self.variants]
        if unknown or len(set(self.methods)) != len(self.methods):
            raise ValueError(f"methods must be distinct names of registered methods {known} or labels of variants, "
                             f"got {self.methods!r}")
        bases = {algorithms.get(m).base.name for m in self.methods if m in known
                 and isinstance(algorithms.get(m), FineTuned)}
        rows = set(known) | set(self.variants)   # a row not run keeps its options unused
        for row, opts in self.options.items():
            if row not in rows:
                raise ValueError(f"options has {row!r}, which is neither a registered method nor a label of variants")
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
                raise ValueError(f"train_overrides: {row!r} is neither a registered method nor a label of variants")
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

    PAPER = sourced(PAPER_SETTINGS, AUTHORS_CODE,
                    ours={"options": authors_options(algorithms.table1()),
                          "train_overrides": authors_train(algorithms.table1(), PAPER_TABLE1)},
                    doc="The five CIFAR columns of Table 1 with Sec. 5.2's settings (full datasets), every method "
                        "of Table 1 as the authors' code runs it: every option and training setting their code "
                        "sets (AUTHORS_OPTIONS, AUTHORS_TRAIN), each personal part starting, before its client's "
                        "first visit, at the last round's average (column() with profile 'paper' runs one column "
                        "with the rows of AUTHORS_VARIANTS too).")
    LONG = Profile({**authors_rows(AUTHORS_ROWS, (("cifar10", 100, 2),)), "seeds": (0,), "full_data": False},
                   base="paper",
                   doc="Near-paper on a CPU, Table 1's first column, CIFAR-10 with n = 100 and S = 2, as the FedRep "
                       "authors' code runs it: every method of Table 1 with the authors' option values, and beside "
                       "them the two rows where their code runs another algorithm than the method's paper "
                       "(AUTHORS_VARIANTS); the paper's T = 100 rounds at r = 0.1, evaluated every round and "
                       "reported as the mean of the last 10; one seed; on the offline subset (20,000 of CIFAR-10's "
                       "50,000 training images, so 200 per client against the paper's 500; 5,000 test images, so "
                       "50 per client).")
    GPU = Profile({"partitions": (("cifar10", 100, 2), ("cifar100", 100, 5)), "seeds": (0,), "full_data": False,
                   "options": {**authors_options(algorithms.table1()),
                               "Local only": algorithms.get("Local only").Options(epochs=10)},
                   "train.eval_every": 5, "train.vmap_clients": 10, "train.augment": False,
                   "authors_dropout": False},
                  doc="The paper profile sized for a few minutes of one GPU on the offline subsets: two partitions, "
                      "CIFAR-10 (100, 2) and CIFAR-100 (100, 5), every method of Table 1, T = 100 rounds (the "
                      "paper's), evaluated every 5 rounds, one seed; every method trains a round's 10 clients as "
                      "one batched computation (vmap_clients: the batched path of replearn.neural.run, fine-tuning "
                      "included). Without augmentation and CIFAR-100's dropout, which the batched path does not draw, "
                      "and with Local only "
                      "at 10 epochs: it trains one client at a time, and the authors' 100 would take most of the "
                      "few minutes.")

    @classmethod
    def column(cls, partition, profile: str = "long"):
        """Table 1's column ``partition`` with every row of :data:`~replearn.experiments.ch05_fedrep.table1.AUTHORS_ROWS`, near-paper on a CPU
        (``profile = "long"``, as the long profile for the first column: sections ``5.7-c10-100-5``,
        ``5.7-c10-1000-2``, ``5.7-c100-100-5`` and ``5.7-c100-100-20`` of ``scripts/run_results.py``),
        or at ``profile = "paper"`` (the full datasets)."""
        if tuple(partition) not in PAPER_TABLE1:
            raise ValueError(f"{partition!r} is not a column of Table 1 {tuple(PAPER_TABLE1)}")
        if profile not in ("long", "paper"):
            raise ValueError(f"column: profile must be 'long' or 'paper', got {profile!r}")
        return replace(cls.profile(profile), **authors_rows(AUTHORS_ROWS, (tuple(partition),)))

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
        """:meth:`earlier_protocol` for the CPU default's six methods (:data:`~replearn.experiments.ch05_fedrep.table1.TABLE_METHODS`:
        Local only, FedAvg, FedAvg+FT, FedPer, LG-FedAvg, FedRep) over seeds 1 and 2 (section
        ``5.7-seeds`` of ``scripts/run_results.py``)."""
        return replace(cls.earlier_protocol(profile), methods=TABLE_METHODS, seeds=(1, 2))

    @classmethod
    def per_client_images(cls, images: int, profile: str = "long", *, methods: tuple = DATA_METHODS):
        """:meth:`earlier_protocol` for :data:`~replearn.experiments.ch05_fedrep.table1.DATA_METHODS` on :data:`~replearn.experiments.ch05_fedrep.table1.DATA_CLIENTS` CIFAR-10 clients
        of S = 2 classes with ``images`` training images each (sections ``5.7-m200`` and
        ``5.7-m500`` of ``scripts/run_results.py``). The offline subset's 20,000 CIFAR-10 images
        give 40 clients the paper's 500 each (the paper: 100 clients of 500; ``long``: 100 of 200),
        so the two sections differ only in the data per client: both partition 500 images per
        client and the 200-image run keeps 200 of each client's (``kept_per_client``), so they have
        the same label sets and test sets, rounds, participation (a client is sampled about 10
        times in T = 100, as in the paper) and initial network; paired over the clients, they
        measure what the paper's larger client datasets are worth (:func:`~replearn.experiments.ch05_fedrep.table1_pages.data_gap_table`).
        ``methods``: other rows at their own defaults on the same clients (section ``5.7-m500-defaults``:
        :data:`~replearn.experiments.ch05_fedrep.table1.OPEN_ROWS`)."""
        check_int(images, "images", 1)
        if images > 500:
            raise ValueError(f"images: at most the 500 each of the {DATA_CLIENTS} clients holds, got {images}")
        return replace(cls.earlier_protocol(profile), partitions=(("cifar10", DATA_CLIENTS, 2),),
                       methods=tuple(methods), train_per_client=500, kept_per_client=None if images == 500 else images)

    @classmethod
    def per_client_images_authors(cls, images: int, profile: str = "long", *, rows: tuple = GAP_ROWS):
        """The ``rows`` (default :data:`~replearn.experiments.ch05_fedrep.table1.GAP_ROWS`) with the
        authors' values (``profile``'s) on the clients of :meth:`per_client_images` with ``images``
        training images each (sections ``5.7-m200-authors`` and ``5.7-m500-authors``; ``5.7-m500-variants``:
        :data:`~replearn.experiments.ch05_fedrep.table1.LOOP_ROWS_500`, the authors' own loop that
        trains there): paired over the clients, what the paper's 500 images instead of 200 are worth to each
        row whose first-column gap they may explain."""
        base = cls.per_client_images(images, profile)
        return replace(cls.profile(profile), train_per_client=500, kept_per_client=base.kept_per_client,
                       **authors_rows(rows, base.partitions))

    @classmethod
    def local_budget(cls, profile: str = "long"):
        """Local only at the authors' budget (:data:`~replearn.experiments.ch05_fedrep.table1.AUTHORS_OPTIONS`: 100 epochs, no weight decay) on
        the :data:`~replearn.experiments.ch05_fedrep.table1.DATA_CLIENTS` clients of 500 images of :meth:`per_client_images` (section
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
           _section("5.7-m200-authors", functools.partial(TableSettings.per_client_images_authors, 200)),
           _section("5.7-m500-authors", functools.partial(TableSettings.per_client_images_authors, 500)),
           _section("5.7-m500-variants", functools.partial(TableSettings.per_client_images_authors, 500,
                                                           rows=LOOP_ROWS_500)),
           _section("5.7-m500-defaults", functools.partial(TableSettings.per_client_images, 500, methods=OPEN_ROWS)),
           _section("5.7-defaults", TableSettings.earlier_protocol),
           *(_section(f"5.7-{column_slug(col)}", functools.partial(TableSettings.column, col))
             for col in PAPER_TABLE1 if col != ("cifar10", 100, 2)))
