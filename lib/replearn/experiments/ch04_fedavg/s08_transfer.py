"""Book 4.8: FedAvg's representation transfers to new tasks better than D-SGD's (Collins et al.
2022, Fig. 5).

FedAvg and D-SGD are pre-trained on CIFAR-100 clients at a matched number of local updates
(:func:`replearn.neural.transfer.pretrain`); then new clients holding held-out CIFAR-100 classes, and
CIFAR-10 clients holding all 10 classes, fine-tune the whole model
(:func:`replearn.neural.transfer.finetune_all`, a fresh head) on varying numbers of training images;
accuracy per new client.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from replearn.neural import data as D
from replearn.backend import derive_seed
from replearn.checks import check_int
from replearn.book import scales
from replearn.book.scales import require_data
from replearn.neural.transfer import PAPER_PRETRAIN, PretrainSettings, finetune_all, new_clients, pretrain, pretrain_work


#: What the sources state of Fig. 5's setting, by settings field: (value, where it says so).
PAPER_SETTINGS = {"clients": (80, "FedAvg-FT paper, Sec. 5.2 (80 clients)"),
                  "n_new": (20, "FedAvg-FT paper, Sec. 5.2 (20 new classes)"),
                  "tau": (50, "FedAvg-FT paper, Fig. 5 caption; talk"),
                  "total_steps": (125_000, "talk (T tau = 125,000: tau = 50, T = 2,500)"),
                  "ft_epochs": (10, "FedAvg-FT paper, Sec. 5.2 (10 epochs of SGD)"),
                  "trials": (5, "FedAvg-FT paper, Fig. 5 caption (five trials)"),
                  "new_clients": (5, "FedAvg-FT paper, Fig. 5 caption (five new clients per trial)")}


@dataclass(frozen=True)
class TransferSettings(PretrainSettings):
    """Fig. 5: after :func:`~replearn.neural.transfer.pretrain`, ``new_clients`` new clients per trial
    holding ``new_classes_per_client`` of the held-out CIFAR-100 classes fine-tune on ``samples``
    (each value in turn) training images; as many CIFAR-10 clients holding all 10 classes
    fine-tune on ``cifar10_samples`` images; ``trials`` draws of new clients (the models are
    trained once). CPU default: new clients hold pairs of held-out classes (chance 1/2)."""

    samples: tuple[int, ...] = (20, 100)
    cifar10_samples: tuple[int, ...] = (100,)
    new_clients: int = 4
    new_classes_per_client: int = 2
    test_per_client: int = 100
    trials: int = 1

    def validate(self) -> None:
        super().validate()
        for name in ("samples", "cifar10_samples"):
            for v in getattr(self, name):
                check_int(v, name, 1)
        for name in ("new_clients", "new_classes_per_client", "test_per_client", "trials"):
            check_int(getattr(self, name), name, 1)

    @classmethod
    def paper(cls):
        """The paper's 80/20 classes, tau = 50, 10 fine-tuning epochs and 5 trials x 5 new clients;
        80 clients of C = 5 classes (500 images each on the full dataset); the rest as in
        :data:`~replearn.neural.transfer.PAPER_PRETRAIN`. Sample sizes per new client: our choice."""
        return cls(**PAPER_PRETRAIN, samples=(50, 100, 200, 500), cifar10_samples=(50, 100, 200, 500),
                   new_clients=5, new_classes_per_client=5, trials=5, test_per_client=200)

    @classmethod
    def long(cls):
        """:meth:`~replearn.neural.transfer.PretrainSettings.long`'s pre-training (shared with 4.9), then
        one trial (the paper: 5) of 5 new clients with 5 held-out classes each, and 5 CIFAR-10
        clients, each fine-tuning for 10 epochs on 50 and on 500 images."""
        return replace(super().long(), samples=(50, 500), cifar10_samples=(50, 500), trials=1)

    @classmethod
    def gpu(cls):
        """:meth:`~replearn.neural.transfer.PretrainSettings.gpu`'s pre-training (shared with 4.9), one
        trial of 5 new clients."""
        return replace(super().gpu(), trials=1)


def work(s: TransferSettings, *, batched: bool = True) -> dict:
    """:func:`replearn.book.scales.launch_estimate` of :func:`run_transfer` with ``s`` (pre-training,
    then ``ft_epochs`` epochs of fine-tuning per new client, sample size, trial, target and model;
    a trial's new clients batched like the training clients)."""
    steps, m = pretrain_work(s)
    per_client = sum(-(-n // s.ft_batch_size) for n in s.samples) + sum(-(-n // s.ft_batch_size)
                                                                       for n in s.cifar10_samples)
    ft = 2 * s.trials * s.new_clients * s.ft_epochs * per_client
    evals = 2 * s.trials * s.new_clients * (len(s.samples) + len(s.cifar10_samples))
    return scales.combine(scales.launch_estimate(steps, 0, batched_clients=scales.batching(s.train, m, batched)),
                          scales.launch_estimate(ft, evals, batched_clients=scales.batching(s.train, s.new_clients, batched)))


@dataclass(frozen=True)
class TransferResult:
    """``accuracy[(target, tau)]``: (len(samples), trials * new_clients) fine-tuned test accuracies,
    target ``"cifar100-new"`` or ``"cifar10"``; tau = 1 is D-SGD."""

    tau: int
    samples: dict[str, tuple[int, ...]]
    accuracy: dict[tuple[str, int], torch.Tensor]
    pretrain_accuracy: dict[int, float]
    data: tuple[str, str]

    def mean(self, target: str, tau: int) -> torch.Tensor:
        return self.accuracy[(target, tau)].mean(1)

    def std(self, target: str, tau: int) -> torch.Tensor:
        return self.accuracy[(target, tau)].std(1, unbiased=False)


def run_transfer(s: TransferSettings, *, cifar10: D.CifarData | None = None,
                 cifar100: D.CifarData | None = None) -> TransferResult:
    """Paper Fig. 5 (see the module docstring)."""
    cifar10 = cifar10 if cifar10 is not None else D.load_cifar("cifar10")
    cifar100 = cifar100 if cifar100 is not None else D.load_cifar("cifar100")
    require_data(cifar10, s.full_data, "TransferSettings")
    pre = pretrain(s, cifar100)
    acc = {}
    targets = {"cifar100-new": (cifar100, pre.new_classes, s.new_classes_per_client, s.samples),
               "cifar10": (cifar10, None, cifar10.n_classes, s.cifar10_samples)}
    for t_i, (target, (cifar, classes, cpc, samples)) in enumerate(targets.items()):
        n_cls = len(classes) if classes is not None else cifar.n_classes
        for tau, state in pre.states.items():
            rows = []
            for n in samples:
                row = []
                for trial in range(s.trials):
                    seed = derive_seed(s.seed, 20, t_i, trial)
                    # new clients hold distinct classes (a pair: chance 1/2), whatever the training split
                    cl = new_clients(cifar, classes, s.new_clients, cpc, s.test_per_client, seed, "disjoint")
                    cl = cl.take_train(n, seed=derive_seed(seed, 3, n))
                    _, res = finetune_all(s, state, cl, n_cls, seed)
                    row.append(res.final.accuracy)
                rows.append(torch.cat(row))
            acc[(target, tau)] = torch.stack(rows)
    return TransferResult(s.tau, {"cifar100-new": tuple(s.samples), "cifar10": tuple(s.cifar10_samples)}, acc,
                          pre.client_accuracy, (cifar100.describe(), cifar10.describe()))
