"""FedAvg's representations on CIFAR (Collins, Hassani, Mokhtari, Shakkottai 2022, Sec. 5.2; book 4.7-4.9).

Three drivers, each training FedAvg with ``tau`` local steps and D-SGD (FedAvg with ``tau = 1``)
for the **same total number of local updates** (``T tau`` steps per participating client, D-SGD
running ``tau`` times more rounds, :func:`replearn.neural.matched_dsgd_config`), from the same
initial model and with the same seeds:

- :func:`run_similarity` (Fig. 4): CIFAR-10 over clients with Dirichlet(0.6) label skew; for
  each ``tau`` (``tau = 1`` is D-SGD) the 10 x 10 matrix of average cosine similarity between
  the body features (the input of the last layer) of test images of each pair of classes
  (:func:`replearn.similarity.class_cosine_similarity`) and its intra- minus inter-class gap;
- :func:`run_transfer` (Fig. 5): train on clients holding ``C`` classes each of the CIFAR-100
  classes left after holding out ``n_new`` classes (:func:`replearn.data.class_split`), then
  fine-tune the whole model (:func:`replearn.neural.finetune`, 10 epochs) on new clients holding
  the held-out classes with varying numbers of training samples, and on new clients from
  CIFAR-10; accuracy per new client;
- :func:`run_cka` (Fig. 2): the same training on CIFAR-100, fine-tuning on CIFAR-10 clients,
  and the linear CKA of every layer's activations on a fixed probe set of CIFAR-10 test images
  before vs after fine-tuning, for FedAvg and D-SGD, plus the CKA between the FedAvg and
  D-SGD models layer by layer.

Our copy of the paper lacks its appendix C, so the paper profiles use what the main text
states (M = 100 clients, Dirichlet(0.6), tau in {1, 5, 10, 50}, 80/20 CIFAR-100 classes, 500
images per training client, 10 fine-tuning epochs, 5 trials x 5 new clients) and, where it is
silent, the settings of the authors' FedRep code base (SGD, lr 0.01, momentum 0.5, batch 10,
10% participation) and the book's design notes (T tau = 125,000 local updates for Fig. 5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch

from .. import data as D
from .. import neural, similarity
from ..backend import derive_seed
from ..models import make_model
from ..profiles import Settings, check_int

DSGD = 1  # tau of D-SGD

DTYPES = {"float32": torch.float32, "float64": torch.float64}


def method_name(tau: int) -> str:
    """``"D-SGD"`` for tau = 1, else ``"FedAvg, τ = tau"``."""
    return "D-SGD" if tau == DSGD else f"FedAvg, τ = {tau}"


# --------------------------------------------------------------------------- seeds: mean and spread


def check_seeds(seeds) -> None:
    """``seeds`` must be a non-empty tuple of distinct non-negative ints."""
    if not isinstance(seeds, tuple) or not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be a non-empty tuple of distinct ints, got {seeds!r}")
    for k in seeds:
        check_int(k, "seeds", 0)


def over_seeds(run, s, **kwargs) -> list:
    """``run(replace(s, seed=k), **kwargs)`` for every ``k`` in ``s.seeds``: one result per seed
    (each seed draws its own partition, initial network, batches and new clients)."""
    check_seeds(s.seeds)
    return [run(replace(s, seed=k), **kwargs) for k in s.seeds]


def mean_sd(values) -> tuple[float, float]:
    """Mean and sample standard deviation (``ddof = 1``; 0 for a single value) of ``values``
    (one number per seed), as Python floats."""
    x = torch.as_tensor([float(v) for v in values], dtype=torch.float64)
    if x.numel() == 0 or not bool(torch.isfinite(x).all()):
        raise ValueError(f"mean_sd needs finite values, got {list(values)!r}")
    return float(x.mean()), (float(x.std()) if x.numel() > 1 else 0.0)


def decimals(sd: float, *, most: int = 3) -> int:
    """Decimals that show the standard deviation ``sd`` with one significant digit (at most
    ``most``; 0 for ``sd >= 1``): the precision the spread over seeds supports."""
    if not sd > 0:
        return most
    return max(0, min(most, -math.floor(math.log10(sd))))


def pm(values, *, scale: float = 1.0, digits: int | None = None) -> str:
    """``"mean ± sd"`` over seeds of ``scale * values``, rounded by :func:`decimals` unless
    ``digits`` is given."""
    m, sd = mean_sd([scale * float(v) for v in values])
    d = decimals(sd) if digits is None else digits
    return f"{m:.{d}f} ± {sd:.{d}f}"


def separated(a, b) -> bool:
    """True when the mean of ``a`` exceeds the mean of ``b`` by more than the sum of their
    standard deviations over seeds (the criterion for asserting an ordering in the book)."""
    (ma, sa), (mb, sb) = mean_sd(a), mean_sd(b)
    return ma - mb > sa + sb


# --------------------------------------------------------------------------- shared settings


@dataclass(frozen=True)
class _Common(Settings):
    """Model and optimiser settings shared by the three experiments.

    ``model``: ``"fedavg_cnn"`` (the paper's CNN) with ``channels``/``hidden`` widths, or
    ``"fedrep_cnn"`` with widths ``variant`` (CPU default ``"narrow"``: the FedRep authors'
    network with 16/32 channels); ``total_steps``: local SGD steps per participating client over the whole
    of training (FedAvg: ``total_steps / tau`` rounds of ``tau`` steps; D-SGD: ``total_steps``
    rounds of one step); ``participation``: fraction of clients per round; ``dtype``:
    ``"float64"`` on the CPU (float32 SGD turns last-bit differences between CPUs and thread
    counts into visible accuracy changes over hundreds of steps; float64 keeps them near
    1e-16), ``"float32"`` on a GPU; ``seeds``: the seeds :func:`over_seeds` runs (``seed``: the
    one a single run uses).
    """

    model: str = "fedrep_cnn"
    channels: tuple[int, int, int] = (16, 32, 64)
    hidden: tuple[int, int] = (128, 64)
    variant: str = "narrow"
    clients: int = 10
    participation: float = 0.3
    total_steps: int = 400
    lr: float = 0.02
    momentum: float = 0.5
    batch_size: int = 10
    dtype: str = "float64"
    seeds: tuple[int, ...] = (0, 1, 2)
    seed: int = 0

    def model_kwargs(self) -> dict:
        if self.model == "fedavg_cnn":
            return dict(channels=tuple(self.channels), hidden=tuple(self.hidden))
        return dict(variant=self.variant)

    def make(self, n_classes: int, seed: int, device):
        """The network of these settings for ``n_classes`` classes, initialised from ``seed``."""
        return make_model(self.model, n_classes, seed, device=device, dtype=DTYPES[self.dtype],
                          **self.model_kwargs())

    def _check_common(self, taus) -> None:
        check_int(self.clients, "clients", 1)
        check_int(self.total_steps, "total_steps", 1)
        check_int(self.batch_size, "batch_size", 1)
        check_int(self.seed, "seed", 0)
        check_seeds(self.seeds)
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {tuple(DTYPES)}, got {self.dtype!r}")
        if not 0 < self.participation <= 1:
            raise ValueError(f"participation must be in (0, 1], got {self.participation!r}")
        if not (self.lr > 0 and 0 <= self.momentum < 1):
            raise ValueError(f"need lr > 0 and momentum in [0, 1), got {self.lr!r}, {self.momentum!r}")
        for tau in taus:
            check_int(tau, "tau", 1)
            if self.total_steps % tau:
                raise ValueError(f"total_steps = {self.total_steps} must be a multiple of every tau "
                                 f"(equal local updates for all methods); tau = {tau} does not divide it")


def train_matched(model_fn, clients: neural.ClientData, taus, s: _Common) -> dict[int, neural.FedResult]:
    """FedAvg for every tau in ``taus`` (tau = 1: D-SGD via :func:`~replearn.neural.matched_dsgd_config`)
    with ``s.total_steps`` local steps per participating client, all from ``model_fn()`` and one
    seed; evaluated once, after the last round."""
    out = {}
    for tau in taus:
        rounds = s.total_steps // tau
        cfg = neural.TrainConfig(rounds=rounds, local_steps=tau, lr=s.lr, momentum=s.momentum,
                                 batch_size=s.batch_size, participation=s.participation,
                                 eval_every=rounds, last_rounds=1, seed=s.seed)
        if tau == DSGD:
            out[tau] = neural.dsgd(model_fn(), clients, cfg)
        else:
            out[tau] = neural.fedavg(model_fn(), clients, cfg)
    return out


def _probe(x: torch.Tensor, y: torch.Tensor, per_class: int, n_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``per_class`` test images of each class (a fixed, balanced probe set), indices and labels."""
    idx = torch.cat([torch.nonzero(y == c).flatten()[:per_class] for c in range(n_classes)])
    short = [c for c in range(n_classes) if int((y == c).sum()) < per_class]
    if short:
        raise ValueError(f"classes {short} have fewer than {per_class} test images for the probe set")
    return idx, y[idx]


@torch.no_grad()
def _accuracy(model, state, x, y) -> float:
    model = model.eval()
    for n, p in model.named_parameters():
        p.copy_(state[n])
    return float((model(x).argmax(1) == y).float().mean())


# --------------------------------------------------------------------------- Fig. 4


@dataclass(frozen=True)
class SimilaritySettings(_Common):
    """Fig. 4: CIFAR-10 over ``clients`` with Dirichlet(``alpha``) label skew; FedAvg with each
    ``tau`` in ``taus`` (1 = D-SGD); cosine similarities on ``probe_per_class`` test images of
    each class; ``test_per_client`` test images per client for the (reported) client accuracy."""

    clients: int = 10
    participation: float = 0.3
    alpha: float = 0.6
    taus: tuple[int, ...] = (1, 5, 20)
    probe_per_class: int = 100
    test_per_client: int = 20

    @classmethod
    def long(cls):
        """About half an hour of CPU: 20 clients, 4,000 local updates, 5 seeds."""
        return cls(clients=20, total_steps=4000, seeds=(0, 1, 2, 3, 4))

    @classmethod
    def paper(cls):
        """M = 100 clients, Dirichlet(0.6), tau in {1, 5, 10, 50}, the paper's CNN (our widths
        32/64/128, MLP 256/128); optimiser as in the authors' code (lr 0.01, momentum 0.5,
        batch 10, 10% participation); 50,000 local updates (our choice: not in our source)."""
        return cls(model="fedavg_cnn", channels=(32, 64, 128), hidden=(256, 128), clients=100, participation=0.1,
                   total_steps=50_000, lr=0.01, momentum=0.5, batch_size=10, dtype="float32",
                   taus=(1, 5, 10, 50), probe_per_class=1000, test_per_client=100)


@dataclass(frozen=True)
class SimilarityResult:
    """Per tau: the class cosine-similarity matrix (10 x 10, float64), its intra - inter gap,
    the global model's accuracy on the probe set and the clients' mean test accuracy."""

    taus: tuple[int, ...]
    matrices: dict[int, torch.Tensor]
    gap: dict[int, float]
    probe_accuracy: dict[int, float]
    client_accuracy: dict[int, float]
    class_names: tuple[str, ...]
    data: str
    client_sizes: torch.Tensor = field(repr=False)

    def intra(self, tau: int) -> float:
        return float(torch.diagonal(self.matrices[tau]).mean())

    def inter(self, tau: int) -> float:
        M = self.matrices[tau]
        c = M.shape[0]
        return float((M.sum() - torch.diagonal(M).sum()) / (c * (c - 1)))


def run_similarity(s: SimilaritySettings, *, cifar: D.CifarData | None = None) -> SimilarityResult:
    """Paper Fig. 4 (see the module docstring)."""
    s._check_common(s.taus)
    if not s.taus or len(set(s.taus)) != len(s.taus):
        raise ValueError(f"taus must be distinct and non-empty, got {s.taus!r}")
    if not s.alpha > 0:
        raise ValueError(f"alpha must be positive, got {s.alpha!r}")
    check_int(s.probe_per_class, "probe_per_class", 2)
    check_int(s.test_per_client, "test_per_client", 1)
    cifar = cifar if cifar is not None else D.load_cifar("cifar10")
    k = cifar.n_classes
    train = D.dirichlet_partition(cifar.y_train, s.clients, s.alpha, seed=derive_seed(s.seed, 1))
    test = D.client_test_split(train, cifar.y_train, cifar.y_test, seed=derive_seed(s.seed, 2),
                               n_per_client=s.test_per_client)
    clients = neural.ClientData.from_partition(cifar.x_train, cifar.y_train, train, cifar.x_test, cifar.y_test,
                                               test, dataset=cifar.name)
    pidx, py = _probe(cifar.x_test, cifar.y_test, s.probe_per_class, k)
    px = D.normalise(cifar.x_test[pidx], cifar.name).to(clients.device)
    py = py.to(clients.device)

    def model_fn():
        return s.make(k, derive_seed(s.seed, 3), clients.device)

    results = train_matched(model_fn, clients, sorted(s.taus), s)
    matrices, gap, pacc, cacc = {}, {}, {}, {}
    probe_model = model_fn()
    for tau in s.taus:
        r = results[tau]
        pacc[tau] = _accuracy(probe_model, r.state, px, py)
        with torch.no_grad():
            feats = probe_model.features(px)
        matrices[tau] = similarity.class_cosine_similarity(feats, py, k).cpu()
        gap[tau] = float(similarity.intra_inter_gap(matrices[tau]))
        cacc[tau] = r.final.average
    return SimilarityResult(tuple(s.taus), matrices, gap, pacc, cacc, cifar.class_names, cifar.describe(),
                            clients.train_sizes)


# --------------------------------------------------------------------------- CIFAR-100 pre-training


PAPER_PRETRAIN = dict(model="fedavg_cnn", channels=(32, 64, 128), hidden=(256, 128), clients=80,
                      participation=0.1, tau=50, total_steps=125_000, lr=0.01, momentum=0.5, batch_size=10,
                      dtype="float32", n_pretrain=None, classes_per_client=5, ft_lr=0.01, ft_batch_size=10)


@dataclass(frozen=True)
class PretrainSettings(_Common):
    """Training on CIFAR-100 for Figs. 2 and 5: ``n_new`` classes are held out
    (:func:`replearn.data.class_split`); of the others, the first ``n_pretrain`` (all when
    ``None``) are cut into shards of single classes and each of ``clients`` clients gets
    ``classes_per_client`` of them (:func:`replearn.data.shard_partition`); FedAvg with ``tau``
    local steps vs D-SGD with the same ``total_steps``. Fine-tuning: ``ft_epochs`` epochs of SGD
    on the whole model (a fresh head for the new label set) with ``ft_lr`` in batches of
    ``ft_batch_size``. CPU default: 20 pre-training classes (chance 1/20), so that the short
    CPU pre-training learns a task instead of sitting near 1/80."""

    n_new: int = 20
    n_pretrain: int | None = 20
    classes_per_client: int = 4
    tau: int = 10
    clients: int = 10
    participation: float = 0.3
    ft_epochs: int = 10
    ft_lr: float = 0.01
    ft_batch_size: int = 10

    def _check_pretrain(self) -> None:
        self._check_common((self.tau,))
        check_int(self.n_new, "n_new", 1)
        if self.n_pretrain is not None:
            check_int(self.n_pretrain, "n_pretrain", 2)
        check_int(self.classes_per_client, "classes_per_client", 1)
        check_int(self.ft_epochs, "ft_epochs", 1)
        check_int(self.ft_batch_size, "ft_batch_size", 1)
        if self.tau < 2:
            raise ValueError(f"FedAvg's tau must be >= 2 (tau = 1 is D-SGD), got {self.tau}")
        if not self.ft_lr > 0:
            raise ValueError(f"ft_lr must be positive, got {self.ft_lr!r}")

    @classmethod
    def long(cls):
        """About half an hour of CPU per section: 2,000 local updates, 5 seeds."""
        return cls(total_steps=2000, seeds=(0, 1, 2, 3, 4))

    @classmethod
    def paper(cls):
        """The paper-scale pre-training of :data:`PAPER_PRETRAIN`."""
        return cls(**PAPER_PRETRAIN)



@dataclass(frozen=True)
class Pretrained:
    """FedAvg's and D-SGD's CIFAR-100 models (``states[tau]``, tau = 1 for D-SGD), the classes
    used and each model's accuracy on its clients' test images of the pre-training classes
    (chance: ``1 / len(train_classes)``)."""

    states: dict[int, dict]
    train_classes: torch.Tensor
    new_classes: torch.Tensor
    client_accuracy: dict[int, float]
    data: str


def pretrain(s: PretrainSettings, cifar100: D.CifarData) -> Pretrained:
    """Train FedAvg (tau = ``s.tau``) and D-SGD on the CIFAR-100 training classes."""
    s._check_pretrain()
    train_cls, new_cls = D.class_split(cifar100.n_classes, s.n_new, seed=derive_seed(s.seed, 10))
    if s.n_pretrain is not None:
        if s.n_pretrain > len(train_cls):
            raise ValueError(f"n_pretrain = {s.n_pretrain} exceeds the {len(train_cls)} classes left after "
                             f"holding out n_new = {s.n_new}")
        train_cls = train_cls[:s.n_pretrain]
    tr_idx, tr_y = D.restrict_classes(cifar100.y_train, train_cls)
    te_idx, te_y = D.restrict_classes(cifar100.y_test, train_cls)
    parts = D.shard_partition(tr_y, s.clients, s.classes_per_client, seed=derive_seed(s.seed, 11))
    tests = D.client_test_split(parts, tr_y, te_y, seed=derive_seed(s.seed, 12), n_per_client=50)
    clients = neural.ClientData.from_partition(cifar100.x_train[tr_idx], tr_y, parts, cifar100.x_test[te_idx],
                                               te_y, tests, dataset=cifar100.name)
    n_out = len(train_cls)

    def model_fn():
        return s.make(n_out, derive_seed(s.seed, 13), clients.device)

    results = train_matched(model_fn, clients, (DSGD, s.tau), s)
    return Pretrained({t: r.state for t, r in results.items()}, train_cls, new_cls,
                      {t: r.final.average for t, r in results.items()}, cifar100.describe())


def _new_model(s: _Common, state: dict, n_classes: int, seed: int, device):
    """The pre-trained body with a fresh (seeded) head for ``n_classes`` classes: model and state."""
    model = s.make(n_classes, seed, device)
    own = {n: p.detach().clone() for n, p in model.named_parameters()}
    full = {n: (state[n].to(device).clone() if not n.startswith("head.") else own[n]) for n in own}
    return model, full


def new_clients(cifar: D.CifarData, classes: torch.Tensor | None, n_clients: int, classes_per_client: int,
                test_per_client: int, seed: int) -> neural.ClientData:
    """New clients holding ``classes_per_client`` of ``classes`` (all classes when ``None``) each,
    labels renumbered 0..len(classes)-1, ``test_per_client`` test images each: the first
    ``n_clients`` of a shard partition into the smallest number of clients >= ``n_clients`` that
    cuts every class into equally many shards."""
    if classes is None:
        classes = torch.arange(cifar.n_classes)
    tr_idx, tr_y = D.restrict_classes(cifar.y_train, classes)
    te_idx, te_y = D.restrict_classes(cifar.y_test, classes)
    pool = n_clients  # shard_partition needs pool * classes_per_client to be a multiple of len(classes)
    while (pool * classes_per_client) % len(classes):
        pool += 1
    parts = D.shard_partition(tr_y, pool, classes_per_client, seed=derive_seed(seed, 1))[:n_clients]
    tests = D.client_test_split(parts, tr_y, te_y, seed=derive_seed(seed, 2), n_per_client=test_per_client)
    return neural.ClientData.from_partition(cifar.x_train[tr_idx], tr_y, parts, cifar.x_test[te_idx], te_y,
                                            tests, dataset=cifar.name)


def finetune_all(s: PretrainSettings, state: dict, clients: neural.ClientData, n_classes: int, seed: int):
    """Fine-tune the whole pre-trained model (fresh head) on every new client: ``FedResult``."""
    model, full = _new_model(s, state, n_classes, derive_seed(seed, 5), clients.device)
    return model, neural.finetune(model, clients, state=full, epochs=s.ft_epochs, part="all", lr=s.ft_lr,
                                  momentum=s.momentum, batch_size=s.ft_batch_size, seed=derive_seed(seed, 6))


# --------------------------------------------------------------------------- Fig. 5


@dataclass(frozen=True)
class TransferSettings(PretrainSettings):
    """Fig. 5: after :func:`pretrain`, ``new_clients`` new clients per trial holding
    ``new_classes_per_client`` of the held-out CIFAR-100 classes fine-tune on ``samples`` (each
    value in turn) training images; as many CIFAR-10 clients holding all 10 classes fine-tune on
    ``cifar10_samples`` images; ``trials`` draws of new clients (the models are trained once).
    CPU default: new clients hold pairs of held-out classes (chance 1/2)."""

    samples: tuple[int, ...] = (20, 100)
    cifar10_samples: tuple[int, ...] = (100,)
    new_clients: int = 4
    new_classes_per_client: int = 2
    test_per_client: int = 100
    trials: int = 1

    @classmethod
    def paper(cls):
        """The paper's 80/20 classes, tau = 50, 10 fine-tuning epochs and 5 trials x 5 new clients;
        80 clients of C = 5 classes (500 images each on the full dataset); the rest as in
        :data:`PAPER_PRETRAIN`. Sample sizes per new client: our choice."""
        return cls(**PAPER_PRETRAIN, samples=(50, 100, 200, 500), cifar10_samples=(50, 100, 200, 500),
                   new_clients=5, new_classes_per_client=5, trials=5, test_per_client=200)


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
    s._check_pretrain()
    for name, values in (("samples", s.samples), ("cifar10_samples", s.cifar10_samples)):
        if not values:
            raise ValueError(f"{name} must be non-empty")
        for v in values:
            check_int(v, name, 1)
    check_int(s.trials, "trials", 1)
    check_int(s.new_clients, "new_clients", 1)
    cifar10 = cifar10 if cifar10 is not None else D.load_cifar("cifar10")
    cifar100 = cifar100 if cifar100 is not None else D.load_cifar("cifar100")
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
                    cl = new_clients(cifar, classes, s.new_clients, cpc, s.test_per_client, seed)
                    cl = cl.take_train(n, seed=derive_seed(seed, 3, n))
                    _, res = finetune_all(s, state, cl, n_cls, seed)
                    row.append(res.final.accuracy)
                rows.append(torch.cat(row))
            acc[(target, tau)] = torch.stack(rows)
    return TransferResult(s.tau, {"cifar100-new": tuple(s.samples), "cifar10": tuple(s.cifar10_samples)}, acc,
                          pre.client_accuracy, (cifar100.describe(), cifar10.describe()))


# --------------------------------------------------------------------------- Fig. 2 (CKA)


@dataclass(frozen=True)
class CKASettings(PretrainSettings):
    """Fig. 2: after :func:`pretrain`, ``ft_clients`` CIFAR-10 clients (all 10 classes each,
    ``ft_samples`` training images) fine-tune both models; linear CKA of every layer on
    ``probe_per_class`` CIFAR-10 test images of each class, before vs after fine-tuning,
    averaged over the clients."""

    ft_clients: int = 2
    ft_samples: int = 200
    probe_per_class: int = 30

    @classmethod
    def paper(cls):
        """CIFAR-100 with 5 classes per client (paper Fig. 2), fine-tuned on CIFAR-10; the rest as
        in :data:`PAPER_PRETRAIN`; 5 CIFAR-10 clients of 500 images (our choice)."""
        return cls(**PAPER_PRETRAIN, ft_clients=5, ft_samples=500, probe_per_class=100)


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


def layer_activations(model, state: dict, x: torch.Tensor, layers) -> dict[str, torch.Tensor]:
    """Activations of ``layers`` of ``model`` loaded with ``state`` on ``x``."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(state[n])
    return similarity.capture_activations(model, x, layers)


def run_cka(s: CKASettings, *, cifar10: D.CifarData | None = None,
            cifar100: D.CifarData | None = None) -> CKALayerResult:
    """Paper Fig. 2 (see the module docstring); the head is replaced for CIFAR-10, so the layers
    compared are the body's (each convolution and hidden linear layer after its ReLU)."""
    s._check_pretrain()
    check_int(s.ft_clients, "ft_clients", 1)
    check_int(s.ft_samples, "ft_samples", 1)
    check_int(s.probe_per_class, "probe_per_class", 2)
    cifar10 = cifar10 if cifar10 is not None else D.load_cifar("cifar10")
    cifar100 = cifar100 if cifar100 is not None else D.load_cifar("cifar100")
    pre = pretrain(s, cifar100)
    cl = new_clients(cifar10, None, s.ft_clients, cifar10.n_classes, 20, derive_seed(s.seed, 30))
    cl = cl.take_train(s.ft_samples, seed=derive_seed(s.seed, 31))
    pidx, _ = _probe(cifar10.x_test, cifar10.y_test, s.probe_per_class, cifar10.n_classes)
    px = D.normalise(cifar10.x_test[pidx], cifar10.name).to(cl.device)
    before_after, ft_acc, before = {}, {}, {}
    layers = None
    for tau, state in pre.states.items():
        model, full = _new_model(s, state, cifar10.n_classes, derive_seed(s.seed, 32), cl.device)
        layers = tuple(name for name in model.layer_names() if name != "head")
        res = neural.finetune(model, cl, state=full, epochs=s.ft_epochs, part="all", lr=s.ft_lr,
                              momentum=s.momentum, batch_size=s.ft_batch_size, seed=derive_seed(s.seed, 33))
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
