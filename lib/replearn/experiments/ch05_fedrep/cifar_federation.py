"""Personalised federated learning on CIFAR (Collins, Hassani, Mokhtari, Shakkottai 2021,
Sec. 5.2; the set-up shared by book 5.7-5.9).

:func:`make_federation` partitions (a subset of) CIFAR over ``n`` clients holding ``S`` classes
each (``split``: :func:`replearn.neural.data.shard_partition`, the pathological non-IID split of the
LG-FedAvg and FedRep code, by default) with per-client test sets of the same classes and proportions
(:func:`replearn.neural.data.client_test_split`); :class:`FederationSettings` hold the partition, the
network (the authors' CNN, :class:`replearn.neural.models.FedRepCNN`, whose head is the last linear
layer) and a :class:`~replearn.neural.TrainConfig` (composed, not copied);
the methods they compare come from the registry :mod:`replearn.neural.algorithms`;
:func:`fit_heads` lets new clients fit a head on a frozen body, evaluated after every epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated

import torch

from replearn.neural import data as D
from replearn import neural
from replearn.neural import algorithms
from replearn.backend import derive_seed
from replearn.checks import check_int
from replearn.neural.specs import DTYPES, Federation, FederationSpec, NetworkSpec
from replearn.settings import Distinct, Ge, OneOf, Settings, sourced

__all__ = ["AUTHORS_PIPELINE", "PAPER_CIFAR", "PAPER_OPTIM", "Federation", "FederationSettings", "fit_heads", "make_federation"]



#: What the FedRep authors' code (public repository lgcollins/FedRep) does for every experiment,
#: by settings field: (value, the file and argument that set it): its optimiser's defaults, its
#: data pipeline, split and networks. Each CIFAR section of chapter 5 records these with its own
#: (``AUTHORS_CODE`` of its driver; Appendix B's "authors' code" column).
AUTHORS_PIPELINE = {"train.lr": (0.01, "utils/options.py (--lr default)"),
                    "train.momentum": (0.5, "utils/options.py (--momentum default)"),
                    "train.batch_size": (10, "utils/options.py (--local_bs default)"),
                    "train.participation": (0.1, "utils/options.py (--frac default)"),
                    "train.weight_decay": (1e-4, "models/Update.py (weights only)"),
                    "train.local_epochs": (1, "utils/options.py (--local_rep_ep default)"),
                    "train.augment": (True, "utils/train_utils.py (RandomCrop(32, 4) + flip)"),
                    "split": ("authors", "utils/sampling.py (noniid)"),
                    "variant": (None, "models/Nets.py (CNNCifar, CNNCifar100)"),
                    "authors_dropout": (True, "models/Nets.py (CNNCifar100: nn.Dropout(0.6) on fc2's output, "
                                              "before fc3; CNNCifar: none)"),
                    "dtype": ("float32", "PyTorch's default")}


#: What Sec. 5.2 of the FedRep paper states of every CIFAR experiment, by settings field: (value, where).
PAPER_CIFAR = {"train_per_client": (None, "FedRep paper, Sec. 5.2 (50,000/n each: the whole training set)"),
               "train.participation": (0.1, "FedRep paper, Sec. 5.2 (r = 0.1)"),
               "train.rounds": (100, "FedRep paper, Sec. 5.2 (T = 100 for CIFAR)"),
               "train.head_epochs": (10, "FedRep paper, Sec. 5.2 (ten head epochs)"),
               "train.last_rounds": (10, "FedRep paper, Sec. 5.2 (accuracy averaged over the final 10 rounds)")}

#: The paper profile's values that neither the paper's text nor the authors' pipeline states: the
#: whole test set, the full datasets, epochs (not steps) in both phases, evaluated every round.
PAPER_OPTIM = {"test_per_client": None, "full_data": True, "train.local_steps": None, "train.head_steps": None,
               "train.eval_every": 1}


@dataclass(frozen=True)
class FederationSettings(Settings):
    """Data, network and training settings of a personalised-FL experiment on CIFAR.

    ``clients`` n with ``classes_per_client`` S classes each; ``train_per_client``: training
    images per client (``None``: the whole training set is partitioned, 50,000/n in the paper);
    ``test_per_client``: test images per client (``None``: the whole test set is spread over
    the clients); ``train``: rounds T, participation r, optimiser, local epochs or steps of
    every method's joint local update and FedRep's body update (``local_epochs`` /
    ``local_steps``), FedRep's head phase (``head_epochs`` / ``head_steps``), evaluation every
    ``eval_every`` rounds, and the reported accuracy is the mean of the evaluations in the last
    ``last_rounds`` rounds (paper: every round, final 10); its ``seed`` is derived from
    ``seed`` per run (:meth:`config`); ``variant``: the network widths (``None``: the authors'
    widths for the dataset); ``authors_dropout``: the network drops fc2's outputs in training as the
    authors' network for the dataset does (CIFAR-100: p = 0.6; CIFAR-10: none;
    :data:`replearn.neural.specs.FEDREP_DROPOUT`); ``dtype``: ``"float64"`` on the CPU (printed results independent
    of the CPU's kernels and thread count), ``"float32"`` on a GPU; ``seeds``: the seeds
    :func:`replearn.book.seeds.over_seeds` runs; ``split``: the shard split (``"authors"``:
    :func:`replearn.neural.data.shard_partition`; ``"disjoint"``: disjoint class groups,
    :func:`replearn.neural.data.disjoint_shard_partition`); ``full_data``: the run needs the full official
    dataset and stops before training on the offline subsets (:func:`replearn.book.scales.require_data`;
    set by the paper profiles, whose ``None`` counts mean the paper's whole training and test sets).

    CPU default: 5 clients with 200 training images each, 4 sampled per round for 20 rounds
    (16 rounds per client), 10 local steps of 10 images per round (FedRep's head: 10 steps
    before them), evaluated after the last round, the narrow (16/32 channel) network in float64.
    """

    clients: Annotated[int, Ge(1)] = 5
    classes_per_client: Annotated[int, Ge(1)] = 2
    train_per_client: Annotated[int | None, Ge(1)] = 200
    test_per_client: Annotated[int | None, Ge(1)] = 100
    train: neural.TrainConfig = neural.TrainConfig(rounds=20, participation=0.8, lr=0.05, momentum=0.5,
                                                   batch_size=10, local_epochs=1, head_epochs=5, local_steps=10,
                                                   head_steps=10, eval_every=20, last_rounds=1)
    variant: str | None = "narrow"
    authors_dropout: bool = False
    dtype: Annotated[str, OneOf(*DTYPES)] = "float64"
    seeds: Annotated[tuple[int, ...], Distinct()] = (0, 1, 2)
    seed: int = 0
    full_data: bool = False
    split: Annotated[str, OneOf(*D.SHARD_SPLITS)] = "authors"

    PAPER = sourced(PAPER_CIFAR, AUTHORS_PIPELINE, ours=PAPER_OPTIM,
                    doc="Sec. 5.2 of the FedRep paper and the authors' pipeline: full datasets, the authors' shard "
                        "split, r = 0.1, T = 100 rounds, 10 head epochs and 1 representation epoch, SGD with lr "
                        "0.01, momentum 0.5, weight decay 1e-4 on the weights, batch 10, RandomCrop(32, padding 4) "
                        "and horizontal flips, evaluated every round (final 10 averaged), the authors' widths and "
                        "dropout (CIFAR-100: p = 0.6 before the head), float32 on a GPU.")

    def config(self, **overrides) -> neural.TrainConfig:
        """``train`` with the run's seed (derived from ``seed``) and ``overrides``."""
        return replace(self.train, seed=derive_seed(self.seed, 4), **overrides)

    def network_spec(self, dataset: str) -> NetworkSpec:
        """The FedRep CNN for ``dataset``, resolved: ``variant`` widths (``None``: the authors'
        widths for the dataset) in ``dtype``, with the authors' dropout for the dataset when
        ``authors_dropout`` (:class:`replearn.neural.specs.NetworkSpec`)."""
        return NetworkSpec.fedrep_cnn(self.variant, self.dtype, dataset=dataset, authors_dropout=self.authors_dropout)

    def networks(self) -> dict[str, NetworkSpec]:
        """The resolved network of every dataset these settings train on, as results files record it."""
        datasets = [p[0] for p in getattr(self, "partitions", ())] or [getattr(self, "dataset", "cifar10")]
        return {d: self.network_spec(d) for d in dict.fromkeys(datasets)}

    def network(self, dataset: str, n_classes: int, seed: int, device):
        """The network of :meth:`network_spec` for ``n_classes`` classes, initialised from ``seed``."""
        return self.network_spec(dataset).build(n_classes, seed, device)


def make_federation(cifar: D.CifarData, n_clients: int, classes_per_client: int, *,
                    train_per_client: int | None, test_per_client: int | None, seed: int,
                    classes=None, split: str = "authors") -> Federation:
    """``n_clients`` clients with ``classes_per_client`` classes each, from the classes
    ``classes`` of ``cifar`` (default: all, relabelled ``0..K-1``). With ``train_per_client``,
    a random balanced subset of ``train_per_client * n_clients`` training images is partitioned
    (every client gets that many); otherwise all training images of those classes. The
    :class:`~replearn.neural.specs.FederationSpec` of these arguments (``split``: the shard split),
    built with seeds derived from ``seed``."""
    check_int(n_clients, "clients", 1)
    check_int(classes_per_client, "classes_per_client", 1)
    spec = FederationSpec(n_clients, classes_per_client=classes_per_client, train_per_client=train_per_client,
                          test_per_client=test_per_client, split=split,
                          classes=None if classes is None else tuple(int(c) for c in torch.as_tensor(classes)))
    return spec.build(cifar, subset_seed=derive_seed(seed, 10), partition_seed=derive_seed(seed, 11),
                      test_seed=derive_seed(seed, 12))


def fit_heads(model, clients: neural.ClientData, state: dict, *, epochs: int, lr: float, momentum: float,
              batch_size: int, seed: int, vmap_clients: int = 1) -> neural.FedResult:
    """Each client fits its own head on the frozen body of ``state`` (the registry's
    "Fine-tuning" with ``part="head"``), one epoch per round, evaluated after every epoch:
    ``test_accuracy[e]`` is the accuracy after ``e + 1`` epochs. The momentum buffer restarts
    every epoch (in one fine-tuning run of several epochs it starts only once); with
    ``epochs = 1`` this is exactly that fine-tuning with ``epochs=1``. ``vmap_clients``: clients with equal data
    sizes fit their heads together as one batched computation (for a GPU), 1: one after another."""
    check_int(epochs, "epochs", 1)
    cfg = neural.TrainConfig(rounds=epochs, lr=lr, momentum=momentum, batch_size=batch_size, local_epochs=1,
                             eval_every=1, last_rounds=1, seed=seed, vmap_clients=vmap_clients)
    tuning = algorithms.get("Fine-tuning")
    return neural.run(tuning, model, clients, cfg, tuning.Options(part="head", epochs=1), state=state)
