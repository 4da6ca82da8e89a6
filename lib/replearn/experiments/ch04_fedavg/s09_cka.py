"""Book 4.9: under fine-tuning, FedAvg's early layers change less than D-SGD's (Collins et al.
2022, Fig. 2).

FedAvg and D-SGD are pre-trained on CIFAR-100 (:func:`replearn.neural.transfer.pretrain`); CIFAR-10
clients fine-tune both (a fresh head); the linear CKA (:func:`replearn.neural.similarity.linear_cka`)
of every body layer's activations on a fixed probe set of CIFAR-10 test images before vs after
fine-tuning, and between the FedAvg and D-SGD models layer by layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from replearn.neural import data as D
from replearn.neural import algorithms
from replearn.neural.algorithms.fine_tuning import FineTuningOptions
from replearn import neural
from replearn.neural import similarity
from replearn.backend import derive_seed
from replearn.checks import check_int
from replearn.book import scales
from replearn.book.scales import require_data
from replearn.neural.transfer import (DSGD, PAPER_PRETRAIN, PretrainSettings, layer_activations, new_clients, new_model,
                         pretrain, pretrain_work, probe_set)


#: What the sources state of Fig. 2's setting, by settings field: (value, where it says so)
#: (the paper defers the details to an appendix that our copy does not hold).
PAPER_SETTINGS = {"tau": (50, "talk (FedAvg tau = 50)"),
                  "total_steps": (125_000, "talk (T tau = 125,000)")}


@dataclass(frozen=True)
class CKASettings(PretrainSettings):
    """Fig. 2: after :func:`~replearn.neural.transfer.pretrain`, ``ft_clients`` CIFAR-10 clients (all 10
    classes each, ``ft_samples`` training images) fine-tune both models; linear CKA of every layer
    on ``probe_per_class`` CIFAR-10 test images of each class, before vs after fine-tuning,
    averaged over the clients."""

    ft_clients: int = 2
    ft_samples: int = 200
    probe_per_class: int = 30

    def validate(self) -> None:
        super().validate()
        check_int(self.ft_clients, "ft_clients", 1)
        check_int(self.ft_samples, "ft_samples", 1)
        check_int(self.probe_per_class, "probe_per_class", 2)

    @classmethod
    def paper(cls):
        """CIFAR-100 with 5 classes per client (paper Fig. 2), fine-tuned on CIFAR-10; the rest as
        in :data:`~replearn.neural.transfer.PAPER_PRETRAIN`; 5 CIFAR-10 clients of 500 images (our choice)."""
        return cls(**PAPER_PRETRAIN, ft_clients=5, ft_samples=500, probe_per_class=100)


def work(s: CKASettings, *, batched: bool = True, shared_pretraining: bool = True) -> dict:
    """:func:`replearn.book.scales.launch_estimate` of :func:`run_cka` with ``s``: fine-tuning both
    models on every CIFAR-10 client, plus the pre-training unless it is shared with 4.8
    (``shared_pretraining``: same :func:`~replearn.neural.transfer.pretrain_key`, one process)."""
    steps, m = pretrain_work(s)
    ft = 2 * s.ft_clients * s.ft_epochs * -(-s.ft_samples // s.ft_batch_size)
    evals = 2 * (s.ft_clients + 1) * -(-s.probe_per_class * 10 // 1000)
    pre = scales.launch_estimate(0 if shared_pretraining else steps, 0,
                                 batched_clients=scales.batching(s.train, m, batched))
    return scales.combine(pre, scales.launch_estimate(ft, evals, batched_clients=scales.batching(s.train, s.ft_clients, batched)))


@dataclass(frozen=True)
class CKALayerResult:
    """``before_after[tau]``: (ft_clients, layers) CKA of each layer before vs after fine-tuning;
    ``between``: CKA of each layer of FedAvg's vs D-SGD's pre-trained model; ``layers``: names."""

    tau: int
    layers: tuple[str, ...]
    before_after: dict[int, torch.Tensor]
    between: torch.Tensor
    ft_accuracy: dict[int, float]
    pretrain_accuracy: dict[int, float]
    data: tuple[str, str]

    def mean(self, tau: int) -> torch.Tensor:
        return self.before_after[tau].mean(0)


def run_cka(s: CKASettings, *, cifar10: D.CifarData | None = None,
            cifar100: D.CifarData | None = None) -> CKALayerResult:
    """Paper Fig. 2 (see the module docstring); the head is replaced for CIFAR-10, so the layers
    compared are the body's (each convolution and hidden linear layer after its ReLU)."""
    cifar10 = cifar10 if cifar10 is not None else D.load_cifar("cifar10")
    cifar100 = cifar100 if cifar100 is not None else D.load_cifar("cifar100")
    require_data(cifar10, s.full_data, "CKASettings")
    pre = pretrain(s, cifar100)
    # every client holds one shard of each of the ten classes (the authors' split could deal a
    # client a class twice and another not at all)
    cl = new_clients(cifar10, None, s.ft_clients, cifar10.n_classes, 20, derive_seed(s.seed, 30), "disjoint")
    cl = cl.take_train(s.ft_samples, seed=derive_seed(s.seed, 31))
    pidx, _ = probe_set(cifar10.x_test, cifar10.y_test, s.probe_per_class, cifar10.n_classes)
    px = D.normalise(cifar10.x_test[pidx], cifar10.name).to(cl.device)
    before_after, ft_acc, before = {}, {}, {}
    layers = None
    for tau, state in pre.states.items():
        model, full = new_model(s, state, cifar10.n_classes, derive_seed(s.seed, 32), cl.device)
        layers = tuple(name for name in model.layer_names() if name != "head")
        tuning = neural.TrainConfig(lr=s.ft_lr, momentum=s.train.momentum, batch_size=s.ft_batch_size,
                                    seed=derive_seed(s.seed, 33), vmap_clients=s.train.vmap_clients)
        res = algorithms.run("Fine-tuning", model, cl, tuning, FineTuningOptions("all", s.ft_epochs), state=full)
        before[tau] = layer_activations(model, full, px, layers)
        rows = []
        for i in range(cl.n_clients):
            after = layer_activations(model, res.client_state(i), px, layers)
            rows.append(torch.stack([similarity.linear_cka(before[tau][n], after[n]) for n in layers]))
        before_after[tau] = torch.stack(rows).float()
        ft_acc[tau] = res.final.average
    between = torch.stack([similarity.linear_cka(before[DSGD][n], before[s.tau][n]) for n in layers]).float()
    return CKALayerResult(s.tau, layers, before_after, between, ft_acc, pre.client_accuracy,
                          (cifar100.describe(), cifar10.describe()))
