"""One description of the federation and one of the network a CIFAR section trains, each with
one builder: :class:`FederationSpec` (dataset, classes, S classes per client or Dirichlet alpha,
clients, samples per client, test split; :meth:`FederationSpec.build`) and
:class:`NetworkSpec` (family, resolved widths, dtype; :meth:`NetworkSpec.build`).

The four ways the CIFAR sections make clients (the FedRep partition of
:func:`replearn.experiments.ch05_fedrep.cifar_federation.make_federation`, 4.7's Dirichlet skew, the CIFAR-100
pre-training of :func:`replearn.experiments.ch04_fedavg.cifar_transfer.pretrain` and the new clients of
:func:`replearn.experiments.ch04_fedavg.cifar_transfer.new_clients`) are all :meth:`FederationSpec.build` with their own seeds.

Every CIFAR settings class resolves its network to a :class:`NetworkSpec`
(:meth:`replearn.experiments.ch04_fedavg.cifar_transfer.MatchedTraining.network_spec`,
:meth:`replearn.experiments.ch05_fedrep.cifar_federation.FederationSettings.network_spec`) and builds it through it, so
the two families of the book (the FedAvg-FT paper's CNN, :class:`replearn.neural.models.FedAvgCNN`,
and the FedRep authors' CNN, :class:`replearn.neural.models.FedRepCNN`) are made in one place.
Results files record the resolved spec (:meth:`NetworkSpec.record`: the widths themselves, not
a name such as ``"narrow"``), so a change of a width makes a committed result stale.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from replearn.neural import data as D
from replearn import neural
from replearn.checks import check_int
from replearn.neural.models import make_model

__all__ = ["DTYPES", "FAMILIES", "Federation", "FederationSpec", "NetworkSpec"]


@dataclass(frozen=True)
class Federation:
    """Clients of one partition: the :class:`~replearn.neural.ClientData`, the number of
    classes of the (possibly restricted) label space and the original class of each label."""

    clients: neural.ClientData
    n_classes: int
    classes: tuple[int, ...]


@dataclass(frozen=True)
class FederationSpec:
    """A federated CIFAR set-up: ``clients`` clients of the classes ``classes`` of the dataset
    (``None``: all, relabelled ``0..K-1`` in that order) holding either
    ``classes_per_client`` S classes each, cut by ``split`` (``"authors"``:
    :func:`replearn.neural.data.shard_partition`, the pathological non-IID split of the LG-FedAvg and
    FedRep code; ``"disjoint"``: :func:`replearn.neural.data.disjoint_shard_partition`, disjoint class
    groups, which gives new clients distinct classes) or Dirichlet(``alpha``)
    label proportions (:func:`replearn.neural.data.dirichlet_partition`); ``train_per_client``: a
    random class-balanced subset of that many images per client is partitioned (``None``: all
    training images of the classes); ``test_per_client``: test images per client in the
    proportions of its training labels (``None``: the whole test set spread over the clients,
    :func:`replearn.neural.data.client_test_split`); ``shard_pool``: for new clients, the first
    ``clients`` of the smallest shard partition (of at least ``clients`` clients) that cuts every
    class into equally many shards."""

    clients: int
    classes_per_client: int | None = None
    alpha: float | None = None
    train_per_client: int | None = None
    test_per_client: int | None = None
    classes: tuple[int, ...] | None = None
    shard_pool: bool = False
    split: str = "authors"

    def __post_init__(self):
        check_int(self.clients, "clients", 1)
        if self.split not in D.SHARD_SPLITS:
            raise ValueError(f"split must be one of {tuple(D.SHARD_SPLITS)}, got {self.split!r}")
        if (self.classes_per_client is None) == (self.alpha is None):
            raise ValueError("give exactly one of classes_per_client (S classes per client) and alpha (Dirichlet)")
        if self.classes_per_client is not None:
            check_int(self.classes_per_client, "classes_per_client", 1)
        elif (isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float))
              or not 0 < self.alpha < float("inf")):
            raise ValueError(f"alpha must be a positive finite number, got {self.alpha!r}")
        for name in ("train_per_client", "test_per_client"):
            if getattr(self, name) is not None:
                check_int(getattr(self, name), name, 1)
        if self.shard_pool and self.classes_per_client is None:
            raise ValueError("shard_pool needs classes_per_client (a shard partition)")
        if self.train_per_client is not None and self.alpha is not None:
            raise ValueError("train_per_client (a class-balanced subset) goes with classes_per_client, not alpha")

    def _checked_classes(self, cifar: D.CifarData) -> list[int]:
        """``classes`` (None: all of ``cifar``'s) as distinct ints, each a class of ``cifar`` with
        training and test images, else ``ValueError`` naming the missing classes and the
        dataset's range (a label space with an empty class is never built)."""
        if self.classes is None:
            given = list(range(cifar.n_classes))
        else:
            given = list(self.classes) if isinstance(self.classes, (list, tuple)) else None
        if not given or any(isinstance(c, (bool, np.bool_)) or not isinstance(c, (int, np.integer))
                            for c in given):
            raise ValueError(f"classes must be a non-empty tuple of integer class labels of {cifar.name} "
                             f"(0..{cifar.n_classes - 1}) or None (all), got {self.classes!r}")
        given = [int(c) for c in given]
        if len(set(given)) != len(given):
            raise ValueError(f"classes must be distinct, got {tuple(given)}")
        unknown = [c for c in given if not 0 <= c < cifar.n_classes]
        if unknown:
            raise ValueError(f"classes {unknown} are not classes of {cifar.name}: its labels are "
                             f"0..{cifar.n_classes - 1} ({cifar.n_classes} classes); name classes in that "
                             f"range")
        for split, y in (("training", cifar.y_train), ("test", cifar.y_test)):
            have = set(torch.unique(y).tolist())
            empty = [c for c in given if c not in have]
            if empty:
                raise ValueError(f"classes {empty} have no {split} images in this {cifar.name} data "
                                 f"(labels 0..{cifar.n_classes - 1}, of which {len(have)} occur); the label "
                                 f"space would have an empty class: leave them out of classes")
        return given

    def build(self, cifar: D.CifarData, *, partition_seed: int, test_seed: int,
              subset_seed: int | None = None) -> Federation:
        """The clients of this set-up on ``cifar``: the subset of ``train_per_client`` images
        drawn with ``subset_seed``, the partition with ``partition_seed``, the test split with
        ``test_seed`` (a section derives the three from its own seed)."""
        classes = torch.as_tensor(self._checked_classes(cifar), dtype=torch.int64)
        itr, ytr = D.restrict_classes(cifar.y_train, classes)
        ite, yte = D.restrict_classes(cifar.y_test, classes)
        k = len(classes)
        n, S = self.clients, self.classes_per_client
        if S is not None and S > k:
            raise ValueError(f"classes_per_client = {S} exceeds the {k} classes available")
        if self.train_per_client is not None:
            if subset_seed is None:
                raise ValueError("train_per_client draws a subset: pass subset_seed")
            total = self.train_per_client * n
            if total % k:
                raise ValueError(f"train_per_client * clients = {total} must be a multiple of the {k} classes "
                                 f"(a balanced subset)")
            rng = np.random.default_rng(subset_seed)
            keep = []
            for c in range(k):
                pos = np.flatnonzero(ytr.numpy() == c)
                if len(pos) < total // k:
                    raise ValueError(f"class {int(classes[c])} has {len(pos)} training images, need {total // k}")
                keep.append(rng.choice(pos, total // k, replace=False))
            keep = torch.from_numpy(np.sort(np.concatenate(keep)))
            itr, ytr = itr[keep], ytr[keep]
        if S is None:
            parts = D.dirichlet_partition(ytr, n, self.alpha, seed=partition_seed)
        elif self.shard_pool:
            pool = n  # a shard split needs pool * S to be a multiple of the number of classes
            while (pool * S) % k:
                pool += 1
            parts = D.SHARD_SPLITS[self.split](ytr, pool, S, seed=partition_seed)[:n]
        else:
            parts = D.SHARD_SPLITS[self.split](ytr, n, S, seed=partition_seed)
        tests = D.client_test_split(parts, ytr, yte, seed=test_seed, n_per_client=self.test_per_client)
        clients = neural.ClientData.from_partition(cifar.x_train[itr], ytr, parts, cifar.x_test[ite], yte, tests,
                                                   dataset=cifar.name)
        return Federation(clients, k, tuple(int(c) for c in classes))

#: The FedRep CNN's widths (conv1, conv2, fc1, fc2) by name: the authors' ``CNNCifar`` for
#: CIFAR-10 and ``CNNCifar100`` for CIFAR-100 (lgcollins/FedRep ``models/Nets.py``), and
#: ``"narrow"`` (16/32 channels), the book's CPU-sized body. The only table of widths by name.
FEDREP_WIDTHS = {"cifar10": (64, 64, 120, 64), "cifar100": (64, 128, 256, 128), "narrow": (16, 32, 120, 64)}
#: The dropout of the authors' FedRep CNN by dataset: ``CNNCifar100`` drops fc2's outputs with
#: p = 0.6 in training (``self.drop = nn.Dropout(0.6)`` before ``fc3``); ``CNNCifar`` has none.
FEDREP_DROPOUT = {"cifar10": 0.0, "cifar100": 0.6}

#: The network families and the names of their widths.
FAMILIES = {"fedavg_cnn": ("conv1", "conv2", "conv3", "fc1", "fc2"),
            "fedrep_cnn": ("conv1", "conv2", "fc1", "fc2")}
#: The floating-point types a settings class may name (its ``dtype`` field), by name.
DTYPES = {"float32": torch.float32, "float64": torch.float64}


@dataclass(frozen=True)
class NetworkSpec:
    """A network: ``family`` (a key of :data:`FAMILIES`), its ``widths`` (resolved numbers, in
    the order of :data:`FAMILIES`), the FedRep CNN's ``variant`` name those widths come from
    (``None`` for the FedAvg CNN), the ``dtype`` it trains in (``"float32"`` or ``"float64"``)
    and the FedRep CNN's ``dropout`` before its head in training (0: none;
    :class:`replearn.neural.models.DropoutLinear`)."""

    family: str
    widths: tuple[int, ...]
    dtype: str
    variant: str | None = None
    dropout: float = 0.0

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {tuple(FAMILIES)}, got {self.family!r}")
        if len(self.widths) != len(FAMILIES[self.family]) or not all(
                isinstance(w, int) and not isinstance(w, bool) and w >= 1 for w in self.widths):
            raise ValueError(f"{self.family} needs {len(FAMILIES[self.family])} positive integer widths "
                             f"{FAMILIES[self.family]}, got {self.widths!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {tuple(DTYPES)}, got {self.dtype!r}")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) \
                or not 0.0 <= self.dropout < 1.0 or (self.dropout and self.family != "fedrep_cnn"):
            raise ValueError(f"dropout must be a probability in [0, 1), and 0 for the FedAvg CNN, got {self.dropout!r}")
        if self.family == "fedrep_cnn" and FEDREP_WIDTHS.get(self.variant) != tuple(self.widths):
            raise ValueError(f"the FedRep CNN's widths come from its variant: {self.variant!r} has "
                             f"{FEDREP_WIDTHS.get(self.variant)}, not {self.widths}")

    @classmethod
    def fedavg_cnn(cls, channels, hidden, dtype: str) -> "NetworkSpec":
        """The FedAvg-FT paper's CNN with conv ``channels`` (3) and MLP ``hidden`` widths (2)."""
        return cls("fedavg_cnn", tuple(channels) + tuple(hidden), dtype)

    @classmethod
    def fedrep_cnn(cls, variant: str | None, dtype: str, *, dataset: str | None = None,
                   authors_dropout: bool = False) -> "NetworkSpec":
        """The FedRep authors' CNN with the widths of ``variant`` (:data:`FEDREP_WIDTHS`); ``None``:
        the authors' widths for ``dataset`` (``"cifar100"``'s for CIFAR-100, else ``"cifar10"``'s);
        with ``authors_dropout``, the authors' dropout for ``dataset`` (:data:`FEDREP_DROPOUT`).
        This is where every CIFAR section's widths are resolved."""
        if variant is None:
            if dataset not in ("cifar10", "cifar100"):
                raise ValueError(f"variant None means the authors' widths for the dataset: name the dataset "
                                 f"('cifar10' or 'cifar100'), got {dataset!r}")
            variant = dataset
        if not isinstance(variant, str) or variant not in FEDREP_WIDTHS:
            raise ValueError(f"variant must be one of {tuple(FEDREP_WIDTHS)} (or None for the dataset's), got {variant!r}")
        if authors_dropout and dataset not in FEDREP_DROPOUT:
            raise ValueError(f"the authors' dropout depends on the dataset: name it ({tuple(FEDREP_DROPOUT)}), "
                             f"got {dataset!r}")
        return cls("fedrep_cnn", FEDREP_WIDTHS[variant], dtype, variant,
                   FEDREP_DROPOUT[dataset] if authors_dropout else 0.0)

    def build(self, n_classes: int, seed: int, device) -> torch.nn.Module:
        """The network for ``n_classes`` classes, initialised from ``seed``, on ``device``."""
        if self.family == "fedavg_cnn":
            kwargs = dict(channels=self.widths[:3], hidden=self.widths[3:])
        else:
            kwargs = dict(widths=tuple(self.widths), dropout=self.dropout)
        return make_model(self.family, n_classes, seed, device=device, dtype=DTYPES[self.dtype], **kwargs)

    def record(self) -> dict:
        """The spec as a results file records it: family, named widths, dtype and, where there is
        one, the dropout (a file from before dropout existed records none: no dropout)."""
        return {"family": self.family, "widths": dict(zip(FAMILIES[self.family], self.widths)),
                "dtype": self.dtype, **({"dropout": self.dropout} if self.dropout else {})}
