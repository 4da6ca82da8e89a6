"""FedAvg against D-SGD on CIFAR at a matched number of local updates, and what their networks
transfer (Collins, Hassani, Mokhtari, Shakkottai 2022, Sec. 5.2; the training shared by book
4.7-4.9).

FedAvg runs ``T`` rounds of ``tau`` local SGD steps per participating client; D-SGD
(:data:`DSGD`, FedAvg with ``tau = 1``) runs ``T tau`` rounds of one step, so that both take
the same ``total_steps`` local updates per participating client from the same initial network
and seed (:func:`train_matched`). :func:`pretrain` trains both on CIFAR-100 clients holding a
few of the classes left after holding out ``n_new`` classes (the pre-training of the paper's
Figs. 2 and 5); :func:`new_clients` and :func:`finetune_all` build new clients from held-out
classes (or another dataset) and fine-tune a pre-trained body with a fresh head on them.

Settings compose the library's :class:`~replearn.neural.TrainConfig` (``train``: optimiser,
batch size, participation) instead of copying its fields; :meth:`MatchedTraining.config` sets
the rounds and local steps of one ``tau``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Annotated

import torch

from replearn.neural import data as D
from replearn.neural import checkpoints, similarity
from replearn import neural
from replearn.neural import algorithms
from replearn.backend import default_device, derive_seed
from replearn.checks import check_int
from replearn.settings import Distinct, Ge, Gt, OneOf, Profile, Settings, sourced
from replearn.book.scales import require_data
from replearn.neural.specs import DTYPES, FederationSpec, NetworkSpec

__all__ = ["DSGD", "DTYPES", "PAPER_PRETRAIN", "MatchedTraining", "PretrainSettings", "Pretrained",
           "accuracy", "finetune_all", "layer_activations", "method_name", "new_clients", "new_model",
           "pretrain", "pretrain_key", "pretrain_work", "probe_set", "train_matched"]

DSGD = 1  # tau of D-SGD



def method_name(tau: int) -> str:
    """``"D-SGD"`` for tau = 1, else ``"FedAvg, τ = tau"``."""
    return "D-SGD" if tau == DSGD else f"FedAvg, τ = {tau}"


@dataclass(frozen=True)
class MatchedTraining(Settings):
    """Network and federated-training settings of a matched FedAvg / D-SGD comparison.

    ``model``: ``"fedavg_cnn"`` (the paper's CNN) with ``channels``/``hidden`` widths, or
    ``"fedrep_cnn"`` with widths ``variant`` (CPU default ``"narrow"``: the FedRep authors'
    network with 16/32 channels); ``clients``: number of training clients; ``total_steps``:
    local SGD steps per participating client over the whole of training (FedAvg:
    ``total_steps / tau`` rounds of ``tau`` steps; D-SGD: ``total_steps`` rounds of one step);
    ``train``: the optimiser (lr, momentum, batch size) and the participation r of every run
    (its ``rounds``, ``local_steps``, ``eval_every``, ``last_rounds`` and ``seed`` are set per
    run by :meth:`config`); ``dtype``: ``"float64"`` on the CPU (float32 SGD turns last-bit
    differences between CPUs and thread counts into visible accuracy changes over hundreds of
    steps; float64 keeps them near 1e-16), ``"float32"`` on a GPU; ``seeds``: the seeds
    :func:`replearn.book.seeds.over_seeds` runs (``seed``: the one a single run uses); ``full_data``:
    the run needs the full official datasets and stops before training on the offline subsets
    (:func:`replearn.book.scales.require_data`; set by the paper profiles).
    """

    model: str = "fedrep_cnn"
    channels: tuple[int, int, int] = (16, 32, 64)
    hidden: tuple[int, int] = (128, 64)
    variant: str = "narrow"
    clients: Annotated[int, Ge(1)] = 10
    total_steps: Annotated[int, Ge(1)] = 400
    train: neural.TrainConfig = neural.TrainConfig(lr=0.02, momentum=0.5, batch_size=10, participation=0.3)
    dtype: Annotated[str, OneOf(*DTYPES)] = "float64"
    seeds: Annotated[tuple[int, ...], Distinct()] = (0, 1, 2)
    seed: int = 0
    full_data: bool = False

    def check_taus(self, taus) -> None:
        """Every ``tau`` must be a positive int dividing ``total_steps`` (equal local updates)."""
        for tau in taus:
            check_int(tau, "tau", 1)
            if self.total_steps % tau:
                raise ValueError(f"total_steps = {self.total_steps} must be a multiple of every tau "
                                 f"(equal local updates for all methods); tau = {tau} does not divide it")

    def config(self, tau: int) -> neural.TrainConfig:
        """The run with ``tau`` local steps: ``total_steps / tau`` rounds, evaluated once at the end."""
        rounds = self.total_steps // tau
        return replace(self.train, rounds=rounds, local_steps=tau, eval_every=rounds, last_rounds=1, seed=self.seed)

    def network_spec(self) -> NetworkSpec:
        """The network of these settings, resolved (:class:`replearn.neural.specs.NetworkSpec`)."""
        if self.model == "fedavg_cnn":
            return NetworkSpec.fedavg_cnn(self.channels, self.hidden, self.dtype)
        if self.model == "fedrep_cnn":
            return NetworkSpec.fedrep_cnn(self.variant, self.dtype)
        raise ValueError(f"model must be 'fedavg_cnn' or 'fedrep_cnn', got {self.model!r}")

    def networks(self) -> dict[str, NetworkSpec]:
        """The resolved network by dataset (one for all here), as results files record it."""
        return {"all": self.network_spec()}

    def make(self, n_classes: int, seed: int, device):
        """The network of these settings for ``n_classes`` classes, initialised from ``seed``."""
        return self.network_spec().build(n_classes, seed, device)


def train_matched(model_fn, clients: neural.ClientData, taus, s: MatchedTraining) -> dict[int, neural.FedResult]:
    """FedAvg for every tau in ``taus`` (tau = 1: D-SGD) with ``s.total_steps`` local steps per
    participating client, all from ``model_fn()`` and one seed; evaluated once, after the last round."""
    s.check_taus(taus)
    out = {}
    for tau in taus:
        out[tau] = algorithms.run("D-SGD" if tau == DSGD else "FedAvg", model_fn(), clients, s.config(tau))
    return out


def probe_set(x: torch.Tensor, y: torch.Tensor, per_class: int, n_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``per_class`` test images of each class (a fixed, balanced probe set), indices and labels."""
    check_int(per_class, "per_class (probe images per class)", 1)
    short = [c for c in range(n_classes) if int((y == c).sum()) < per_class]
    if short:
        raise ValueError(f"classes {short} have fewer than {per_class} test images for the probe set")
    idx = torch.cat([torch.nonzero(y == c).flatten()[:per_class] for c in range(n_classes)])
    return idx, y[idx]


@torch.no_grad()
def accuracy(model, state: dict, x: torch.Tensor, y: torch.Tensor) -> float:
    """Accuracy of ``model`` loaded with ``state`` on images ``x`` with labels ``y``."""
    model = model.eval()
    for n, p in model.named_parameters():
        p.copy_(state[n])
    return float((model(x).argmax(1) == y).float().mean())


# --------------------------------------------------------------------------- CIFAR-100 pre-training


#: What the FedAvg-FT paper and the talk state of the pre-training that 4.8 and 4.9 share, by
#: settings field: (value, where).
PRETRAIN_STATED = {"clients": (80, "FedAvg-FT paper, Sec. 5.2 (80 clients)"),
                   "classes_per_client": (5, "FedAvg-FT paper, Fig. 2 caption (CIFAR-100 with 5 classes/client)"),
                   "tau": (50, "FedAvg-FT paper, Fig. 5 caption; talk (FedAvg tau = 50)"),
                   "total_steps": (125_000, "talk (T tau = 125,000: tau = 50, T = 2,500)")}

#: The paper-scale pre-training's values that no source states: the paper's CNN (our widths), all
#: 80 training classes, the FedRep authors' optimiser (lr 0.01, momentum 0.5, batch 10, 10%
#: participation; the FedAvg-FT paper has no public code), float32 on a GPU, the full dataset.
PAPER_PRETRAIN = dict(model="fedavg_cnn", channels=(32, 64, 128), hidden=(256, 128),
                      train=neural.TrainConfig(lr=0.01, momentum=0.5, batch_size=10, participation=0.1),
                      dtype="float32", n_pretrain=None, ft_lr=0.01, ft_batch_size=10, full_data=True)


@dataclass(frozen=True)
class PretrainSettings(MatchedTraining):
    """Training on CIFAR-100 for Figs. 2 and 5: ``n_new`` classes are held out
    (:func:`replearn.neural.data.class_split`); of the others, the first ``n_pretrain`` (all when
    ``None``) are cut into shards of single classes and each of ``clients`` clients gets
    ``classes_per_client`` of them (``split``: :func:`replearn.neural.data.shard_partition`, the
    LG-FedAvg/FedRep code's split, or ``"disjoint"``, :func:`replearn.neural.data.disjoint_shard_partition`);
    FedAvg with ``tau``
    local steps vs D-SGD with the same ``total_steps``. Fine-tuning: ``ft_epochs`` epochs of SGD
    on the whole model (a fresh head for the new label set) with ``ft_lr`` in batches of
    ``ft_batch_size`` (momentum: ``train.momentum``). CPU default: 20 pre-training classes
    (chance 1/20), so that the short CPU pre-training learns a task instead of sitting near 1/80."""

    n_new: Annotated[int, Ge(1)] = 20
    n_pretrain: Annotated[int | None, Ge(2)] = 20
    classes_per_client: Annotated[int, Ge(1)] = 4
    tau: Annotated[int, Ge(2, why="FedAvg's local steps; tau = 1 is D-SGD")] = 10
    ft_epochs: Annotated[int, Ge(1)] = 10
    ft_lr: Annotated[float, Gt(0)] = 0.01
    ft_batch_size: Annotated[int, Ge(1)] = 10
    split: Annotated[str, OneOf(*D.SHARD_SPLITS)] = "authors"

    def validate(self) -> None:
        """The relation between the fields (each field's own range is beside it): ``tau`` divides
        ``total_steps``."""
        super().validate()
        self.check_taus((self.tau,))

    PAPER = sourced(PRETRAIN_STATED, ours=PAPER_PRETRAIN,
                    doc="The paper-scale pre-training: PRETRAIN_STATED with PAPER_PRETRAIN's choices.")
    LONG = Profile({"total_steps": 750, "seeds": (0, 1), "full_data": False}, base="paper",
                   doc="Near-paper on a CPU: the paper profile (the paper's CNN, 80 clients of 5 of the 80 training "
                       "classes, tau = 50, the authors' optimiser, float32) on the offline subset (250 images of "
                       "each CIFAR-100 class, so 250 per client, not 500), with 750 local updates (T = 15 rounds "
                       "of tau = 50; the paper: 125,000, which would take about two weeks of one core), 2 seeds (a "
                       "seed of 4.8 takes about 40 minutes of one core here). One pre-training per seed serves 4.8 "
                       "and 4.9.")
    GPU = Profile({"total_steps": 10_000, "seeds": (0,), "full_data": False, "train.vmap_clients": 8},
                  doc="The paper profile sized for a minute of one GPU on the offline subset (250 images of each "
                      "CIFAR-100 class): 10,000 local updates (2,000 x fewer rounds than the paper's 125,000), one "
                      "seed; a round's 8 clients trained as one batched computation.")


@dataclass(frozen=True)
class Pretrained:
    """FedAvg's and D-SGD's CIFAR-100 models (``states[tau]``, tau = 1 for D-SGD), the classes
    they were trained on, the held-out classes, each model's test accuracy on its training
    clients (``client_accuracy[tau]``) and which data ran."""

    states: dict[int, dict]
    train_classes: torch.Tensor
    new_classes: torch.Tensor
    client_accuracy: dict[int, float]
    data: str


#: The latest pre-trainings of this process by (settings key, device, digest of the data): 4.8
#: and 4.9 run the same pre-training per seed, and ``scripts/run_results.py`` runs them one after
#: the other (every seed of 4.8, then every seed of 4.9) in one process, each loading its own data.
_PRETRAINED: dict = {}
_PRETRAINED_KEEP = 8


def pretrain_key(s: PretrainSettings) -> PretrainSettings:
    """The settings that determine :func:`pretrain`'s result: ``s`` as a plain
    :class:`PretrainSettings` with the fine-tuning fields at their defaults (fine-tuning does
    not change the pre-training), so that the sections sharing a pre-training compare equal."""
    keep = {f.name for f in fields(MatchedTraining)} | {"n_new", "n_pretrain", "classes_per_client", "tau"}
    return PretrainSettings(**{name: getattr(s, name) for name in keep})


def pretrain(s: PretrainSettings, cifar100: D.CifarData) -> Pretrained:
    """Train FedAvg (tau = ``s.tau``) and D-SGD on the CIFAR-100 training classes.

    The result is reused when one of the last few calls had the same :func:`pretrain_key`,
    device and data (the same images and labels, by :func:`replearn.neural.checkpoints.digest`, so a
    fresh load of the same files counts): 4.8 and 4.9 share their pre-training. The states are
    returned as read-only values (:func:`new_model` copies them)."""
    key = (pretrain_key(s), str(default_device()), checkpoints.digest(cifar100))
    if key not in _PRETRAINED:
        _PRETRAINED[key] = _pretrain(s, cifar100)
        while len(_PRETRAINED) > _PRETRAINED_KEEP:
            del _PRETRAINED[next(iter(_PRETRAINED))]
    return _PRETRAINED[key]


def _pretrain(s: PretrainSettings, cifar100: D.CifarData) -> Pretrained:
    require_data(cifar100, s.full_data, type(s).__name__)
    train_cls, new_cls = D.class_split(cifar100.n_classes, s.n_new, seed=derive_seed(s.seed, 10))
    if s.n_pretrain is not None:
        if s.n_pretrain > len(train_cls):
            raise ValueError(f"n_pretrain = {s.n_pretrain} exceeds the {len(train_cls)} classes left after "
                             f"holding out n_new = {s.n_new}")
        train_cls = train_cls[:s.n_pretrain]
    spec = FederationSpec(s.clients, classes_per_client=s.classes_per_client, test_per_client=50,
                          classes=tuple(int(c) for c in train_cls), split=s.split)
    clients = spec.build(cifar100, partition_seed=derive_seed(s.seed, 11), test_seed=derive_seed(s.seed, 12)).clients
    n_out = len(train_cls)

    def model_fn():
        return s.make(n_out, derive_seed(s.seed, 13), clients.device)

    results = train_matched(model_fn, clients, (DSGD, s.tau), s)
    return Pretrained({t: r.state for t, r in results.items()}, train_cls, new_cls,
                      {t: r.final.average for t, r in results.items()}, cifar100.describe())


def pretrain_work(s: PretrainSettings) -> tuple[int, int]:
    """Client SGD steps and participating clients per round of :func:`pretrain` (FedAvg and
    D-SGD, ``total_steps`` each), for :func:`replearn.book.scales.launch_estimate`."""
    m = max(1, round(s.train.participation * s.clients))
    return 2 * s.total_steps * m, m


def new_model(s: MatchedTraining, state: dict, n_classes: int, seed: int, device):
    """The pre-trained body of ``state`` with a fresh (seeded) head for ``n_classes`` classes:
    the model and its full state."""
    model = s.make(n_classes, seed, device)
    own = {n: p.detach().clone() for n, p in model.named_parameters()}
    full = {n: (state[n].to(device).clone() if not n.startswith("head.") else own[n]) for n in own}
    return model, full


def new_clients(cifar: D.CifarData, classes: torch.Tensor | None, n_clients: int, classes_per_client: int,
                test_per_client: int, seed: int, split: str = "authors") -> neural.ClientData:
    """New clients holding ``classes_per_client`` of ``classes`` (all classes when ``None``) each,
    labels renumbered 0..len(classes)-1, ``test_per_client`` test images each: the first
    ``n_clients`` of a shard partition into the smallest number of clients >= ``n_clients`` that
    cuts every class into equally many shards (``split``: the shard split)."""
    check_int(n_clients, "n_clients", 1)
    check_int(classes_per_client, "classes_per_client", 1)
    spec = FederationSpec(n_clients, classes_per_client=classes_per_client, test_per_client=test_per_client,
                          classes=None if classes is None else tuple(int(c) for c in torch.as_tensor(classes)),
                          shard_pool=True, split=split)
    return spec.build(cifar, partition_seed=derive_seed(seed, 1), test_seed=derive_seed(seed, 2)).clients


def finetune_all(s: PretrainSettings, state: dict, clients: neural.ClientData, n_classes: int, seed: int):
    """Fine-tune the whole pre-trained model (fresh head) on every new client: the model and the
    :class:`~replearn.neural.FedResult` of the registry's "Fine-tuning" with ``part="all"``."""
    model, full = new_model(s, state, n_classes, derive_seed(seed, 5), clients.device)
    cfg = neural.TrainConfig(lr=s.ft_lr, momentum=s.train.momentum, batch_size=s.ft_batch_size,
                             seed=derive_seed(seed, 6), vmap_clients=s.train.vmap_clients)
    tuning = algorithms.get("Fine-tuning")
    return model, tuning.run(model, clients, cfg, tuning.Options(part="all", epochs=s.ft_epochs), state=full)


def layer_activations(model, state: dict, x: torch.Tensor, layers) -> dict[str, torch.Tensor]:
    """Activations of ``layers`` of ``model`` loaded with ``state`` on ``x``."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(state[n])
    return similarity.capture_activations(model, x, layers)
