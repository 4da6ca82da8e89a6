"""Book 5.7: personalised accuracy on CIFAR, Table 1 of Collins, Hassani, Mokhtari, Shakkottai (2021).

For each partition (dataset, n clients, S classes per client) of
:func:`replearn.personalisation.make_federation`, every method of :data:`TABLE_METHODS` trains
from one initial network, one seed and one optimiser: Local only, FedAvg, FedAvg+FT (the FedAvg
model with each client's head fine-tuned for ``ft_epochs`` epochs,
:func:`replearn.neural.finetune`), FedPer, LG-FedAvg and FedRep. Accuracies are as in the paper:
the mean over clients (weighted by test-set size) of the local test accuracy, averaged over the
evaluations in the final ``last_rounds`` rounds, except for FedAvg+FT, which is evaluated once
after fine-tuning.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ... import data as D
from ... import neural
from ...backend import derive_seed
from ...checks import check_int
from ...scales import require_data
from ...personalisation import ALGORITHMS, PAPER_OPTIM, FederationSettings, make_federation

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

#: What the FedRep paper states of Table 1's setting, by settings field: (value, where it says so).
PAPER_SETTINGS = {"partitions": (tuple(PAPER_TABLE1), "FedRep paper, Table 1 (CIFAR columns)"),
                  "train_per_client": (None, "FedRep paper, Sec. 5.2 (50,000/n each: the whole training set)"),
                  "train.lr": (0.01, "the FedRep authors' code (not in the paper)"),
                  "train.momentum": (0.5, "the FedRep authors' code (not in the paper)"),
                  "train.batch_size": (10, "the FedRep authors' code (not in the paper)"),
                  "train.participation": (0.1, "FedRep paper, Sec. 5.2 (r = 0.1)"),
                  "train.rounds": (100, "FedRep paper, Sec. 5.2 (T = 100 for CIFAR)"),
                  "train.head_epochs": (10, "FedRep paper, Sec. 5.2 (ten head epochs)"),
                  "train.last_rounds": (10, "FedRep paper, Sec. 5.2 (final 10 rounds averaged)"),
                  "ft_epochs": (10, "FedRep paper, Sec. 5.2 (+FT: ten epochs of the head)")}


@dataclass(frozen=True)
class TableSettings(FederationSettings):
    """Table 1: ``partitions`` are (dataset, n clients, S classes per client); every method of
    :data:`TABLE_METHODS` runs on each; FedAvg+FT fine-tunes the head for ``ft_epochs`` epochs.
    The ``clients`` and ``classes_per_client`` fields are not used here: each partition names its own."""

    partitions: tuple[tuple[str, int, int], ...] = (("cifar10", 5, 2),)
    ft_epochs: int = 10

    def validate(self) -> None:
        super().validate()
        check_int(self.ft_epochs, "ft_epochs", 1)
        for part in self.partitions:
            if not (isinstance(part, tuple) and len(part) == 3 and part[0] in ("cifar10", "cifar100")):
                raise ValueError(f"each partition must be (dataset, n, S) with dataset 'cifar10' or "
                                 f"'cifar100', got {part!r}")
            check_int(part[1], "n (clients of a partition)", 1)
            check_int(part[2], "S (classes per client of a partition)", 1)

    @classmethod
    def long(cls):
        """100 rounds (80 per client), 5 seeds (about 10 minutes on one core)."""
        return cls(train=replace(cls().train, rounds=100, eval_every=100), seeds=(0, 1, 2, 3, 4))

    @classmethod
    def paper(cls):
        """The five CIFAR columns of Table 1 with Sec. 5.2's settings (full datasets)."""
        return cls(partitions=tuple(PAPER_TABLE1), ft_epochs=10, **PAPER_OPTIM)


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
                              test_per_client=s.test_per_client, seed=s.seed)
        cl = fed.clients

        def model_fn():
            return s.network(name, fed.n_classes, derive_seed(s.seed, 3), cl.device)

        acc[part], cacc[part], curves[part] = {}, {}, {}
        for method in TABLE_METHODS:
            if method == "FedAvg+FT":
                r = neural.finetune(model_fn(), cl, state=fedavg.state, epochs=s.ft_epochs, part="head",
                                    lr=cfg.lr, momentum=cfg.momentum, batch_size=cfg.batch_size,
                                    seed=derive_seed(s.seed, 5))
                acc[part][method] = r.final.average
                curves[part][method] = torch.full((cfg.rounds,), float("nan"))
            else:
                r = ALGORITHMS[method](model_fn(), cl, cfg)
                if method == "FedAvg":
                    fedavg = r
                acc[part][method] = r.accuracy
                curves[part][method] = r.test_accuracy
            cacc[part][method] = r.final.accuracy
        ntr[part], nte[part], desc[part] = cl.train_sizes, cl.test_sizes, cifar[name].describe()
    return TableResult(tuple(s.partitions), acc, cacc, curves, ntr, nte, desc)


def paper_reference(partition: tuple[str, int, int]) -> tuple[tuple[str, int, int], dict]:
    """The Table 1 column to show beside ``partition``: the same (dataset, n, S) if the paper
    has it, else the paper's column with the same dataset and S and n = 100."""
    name, n, S = partition
    key = partition if partition in PAPER_TABLE1 else (name, 100, S)
    if key not in PAPER_TABLE1:
        raise ValueError(f"Table 1 has no column for {name} with S = {S}")
    return key, PAPER_TABLE1[key]
