"""Book 4.7: FedAvg's features separate classes that D-SGD's do not (Collins et al. 2022, Fig. 4).

CIFAR-10 over ``clients`` clients with Dirichlet(``alpha``) label skew; FedAvg with each
``tau`` in ``taus`` (``tau = 1``: D-SGD) for the same number of local updates
(:func:`replearn.neural.transfer.train_matched`); per ``tau`` the 10 x 10 matrix of average cosine
similarity between the body features (the input of the last layer) of test images of each pair
of classes (:func:`replearn.neural.similarity.class_cosine_similarity`) and its intra- minus
inter-class gap.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import torch

from replearn.neural import data as D
from replearn import neural
from replearn.neural import similarity
from replearn.backend import derive_seed
from replearn.checks import check_int
from replearn.book.plotting import to_numpy
from replearn.book import scales
from replearn.book.scales import require_data, require_images
from replearn.neural.specs import FederationSpec
from replearn.neural.transfer import MatchedTraining, accuracy, method_name, probe_set, train_matched
from replearn.book.widgets import Menu
from replearn.book.widgets import explorer as build_explorer


#: What the paper states of Fig. 4's setting, by settings field: (value, where it says so).
PAPER_SETTINGS = {"clients": (100, "FedAvg-FT paper, Sec. 5.2 (M = 100)"),
                  "alpha": (0.6, "FedAvg-FT paper, Sec. 5.2 (Dirichlet 0.6)")}


@dataclass(frozen=True)
class SimilaritySettings(MatchedTraining):
    """Fig. 4: Dirichlet(``alpha``) label skew over ``clients``; FedAvg with each ``tau`` in
    ``taus`` (1 = D-SGD); cosine similarities on ``probe_per_class`` test images of each class;
    ``test_per_client`` test images per client for the (reported) client accuracy."""

    alpha: float = 0.6
    taus: tuple[int, ...] = (1, 5, 20)
    probe_per_class: int = 100
    test_per_client: int = 20

    def validate(self) -> None:
        super().validate()
        if len(set(self.taus)) != len(self.taus):
            raise ValueError(f"taus must be distinct, got {self.taus!r}")
        self.check_taus(self.taus)
        if not self.alpha > 0:
            raise ValueError(f"alpha must be positive, got {self.alpha!r}")
        check_int(self.probe_per_class, "probe_per_class", 2)
        check_int(self.test_per_client, "test_per_client", 1)

    @classmethod
    def long(cls):
        """Near-paper on a CPU: the paper profile (M = 100, Dirichlet(0.6), r = 0.1, the paper's
        CNN, the authors' optimiser, float32) on the offline subset (20,000 of CIFAR-10's 50,000
        training images, so 200 per client; a probe of 500 test images per class and 50 test
        images per client, all the subset holds), tau in {1, 5, 50} (the paper also shows 10)
        at 750 local updates (paper(): 50,000, about 4 days of one core), 2 seeds (a seed takes about
        40 minutes of one core here)."""
        return replace(cls.paper(), taus=(1, 5, 50), total_steps=750, seeds=(0, 1), probe_per_class=500,
                       test_per_client=50, full_data=False)

    @classmethod
    def paper(cls):
        """M = 100 clients, Dirichlet(0.6), tau in {1, 5, 10, 50}, the paper's CNN (our widths
        32/64/128, MLP 256/128); optimiser as in the authors' code (lr 0.01, momentum 0.5,
        batch 10, 10% participation); 50,000 local updates (our choice: not in our source)."""
        return cls(model="fedavg_cnn", channels=(32, 64, 128), hidden=(256, 128), clients=100,
                   train=replace(cls().train, lr=0.01, momentum=0.5, batch_size=10, participation=0.1),
                   total_steps=50_000, dtype="float32", taus=(1, 5, 10, 50), probe_per_class=1000,
                   test_per_client=100, full_data=True)

    @classmethod
    def gpu(cls):
        """The paper profile sized for about a minute of one GPU on the offline subset (20,000
        images: 200 per client): tau in {1, 5, 50} at 5,000 local updates, one seed, probe of
        500 test images per class (all the subset has), 50 test images per client; a round's 10
        clients trained as one batched computation (``vmap_clients``)."""
        p = cls.paper()
        return replace(p, taus=(1, 5, 50), total_steps=5000, seeds=(0,), probe_per_class=500,
                       test_per_client=50, full_data=False, train=replace(p.train, vmap_clients=10))


def work(s: SimilaritySettings, *, batched: bool = True) -> dict:
    """:func:`replearn.book.scales.launch_estimate` of :func:`run_similarity` with ``s``: every tau
    makes ``total_steps`` local steps on each of the round's ``m`` clients; the final
    evaluation tests every client and the probe set (``batched``: ``train.vmap_clients`` clients
    per launch sequence, as the run does; else one client at a time)."""
    m = max(1, round(s.train.participation * s.clients))
    steps = len(s.taus) * s.total_steps * m
    evals = len(s.taus) * (s.clients + -(-s.probe_per_class * 10 // 1000))
    return scales.launch_estimate(steps, evals, batched_clients=scales.batching(s.train, m, batched))


@dataclass(frozen=True)
class SimilarityResult:
    """Per tau: the class cosine-similarity matrix (10 x 10, float64), its intra - inter gap,
    the accuracy on the probe set and the clients' average test accuracy."""

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
    cifar = cifar if cifar is not None else D.load_cifar("cifar10")
    require_data(cifar, s.full_data, "SimilaritySettings")
    require_images(s.clients * s.test_per_client, len(cifar.y_test), "test_per_client x clients",
                   "lower test_per_client or clients")
    k = cifar.n_classes
    fed = FederationSpec(s.clients, alpha=s.alpha, test_per_client=s.test_per_client)
    clients = fed.build(cifar, partition_seed=derive_seed(s.seed, 1), test_seed=derive_seed(s.seed, 2)).clients
    pidx, py = probe_set(cifar.x_test, cifar.y_test, s.probe_per_class, k)
    px = D.normalise(cifar.x_test[pidx], cifar.name).to(clients.device)
    py = py.to(clients.device)

    def model_fn():
        return s.make(k, derive_seed(s.seed, 3), clients.device)

    results = train_matched(model_fn, clients, sorted(s.taus), s)
    matrices, gap, pacc, cacc = {}, {}, {}, {}
    probe_model = model_fn()
    for tau in s.taus:
        r = results[tau]
        pacc[tau] = accuracy(probe_model, r.state, px, py)
        with torch.no_grad():
            feats = probe_model.features(px)
        matrices[tau] = similarity.class_cosine_similarity(feats, py, k).cpu()
        gap[tau] = float(similarity.intra_inter_gap(matrices[tau]))
        cacc[tau] = r.final.average
    return SimilarityResult(tuple(s.taus), matrices, gap, pacc, cacc, cifar.class_names, cifar.describe(),
                            clients.train_sizes)


# --------------------------------------------------------------------------- the explorer


def draw_explorer(axes, matrices: dict, class_names, tau: int, cls: int) -> None:
    """Left: the class cosine-similarity matrix ``matrices[tau]`` (K, K) as a heat map on the
    colour scale shared by all models; right: its row ``cls`` (the similarity of class ``cls``
    to every class) beside the same row of D-SGD's matrix (``matrices[1]``) when present.
    ``axes`` is a pair of matplotlib axes."""
    if tau not in matrices:
        raise ValueError(f"no matrix for tau = {tau!r}; have {sorted(matrices)}")
    M = to_numpy(matrices[tau])
    K = M.shape[0]
    if M.shape != (K, K) or len(class_names) != K:
        raise ValueError(f"need a square (K, K) matrix and K class names, got {M.shape} and {len(class_names)}")
    if not (isinstance(cls, (int, np.integer)) and 0 <= cls < K):
        raise ValueError(f"cls must be a class index in [0, {K}), got {cls!r}")
    vmin = min(float(to_numpy(m).min()) for m in matrices.values())
    left, right = axes
    left.imshow(M, vmin=vmin, vmax=1.0, cmap="viridis")
    left.set_xticks(range(K), class_names, rotation=90, fontsize=7)
    left.set_yticks(range(K), class_names, fontsize=7)
    left.axhline(cls, color="w", lw=0.8)
    left.grid(False)
    name = method_name(tau)
    left.set_title(name)
    x = np.arange(K)
    rows = {name: M[cls]} if tau == 1 or 1 not in matrices else {name: M[cls], "D-SGD": to_numpy(matrices[1])[cls]}
    width = 0.8 / len(rows)
    for j, (label, row) in enumerate(rows.items()):
        right.bar(x + (j - (len(rows) - 1) / 2) * width, row, width, label=label)
    right.set_xticks(x, class_names, rotation=90, fontsize=7)
    right.set(ylabel="average cosine similarity", title=f"row of class {class_names[cls]!s}")
    right.legend(fontsize=7)


def explorer(matrices: dict, class_names, *, tau: int | None = None, cls: int = 0):
    """An ipywidgets panel: menus for the model (tau; 1 is D-SGD) and a class, and the plot of
    :func:`draw_explorer` for the class cosine-similarity ``matrices`` of book 4.7."""
    taus = sorted(matrices)
    if not taus:
        raise ValueError("matrices is empty: pass {tau: (K, K) matrix}")
    start = taus[-1] if tau is None else tau
    if start not in matrices:
        raise ValueError(f"no matrix for tau = {start!r}; have {taus}")
    names = [str(c) for c in class_names]
    controls = {"tau": Menu(start, tuple(("D-SGD" if t == 1 else f"τ = {t}", t) for t in taus), "model"),
                "cls": Menu(cls, tuple((n, i) for i, n in enumerate(names)), "class")}
    return build_explorer(controls, lambda axes, v: draw_explorer(axes, matrices, names, v["tau"], v["cls"]),
                    figsize=(8.0, 3.6), axes=2)
