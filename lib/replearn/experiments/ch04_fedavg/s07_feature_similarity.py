"""Book 4.7: FedAvg's features separate classes that D-SGD's do not (Collins et al. 2022, Fig. 4).

CIFAR-10 over ``clients`` clients with Dirichlet(``alpha``) label skew; FedAvg with each
``tau`` in ``taus`` (``tau = 1``: D-SGD) for the same number of local updates
(:func:`replearn.experiments.ch04_fedavg.cifar_transfer.train_matched`); per ``tau`` the 10 x 10 matrix of average cosine
similarity between the body features (the input of the last layer) of test images of each pair
of classes (:func:`replearn.neural.similarity.class_cosine_similarity`) and its intra- minus
inter-class gap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

import numpy as np
import torch

from replearn.neural import data as D, similarity
from replearn import neural
from replearn.backend import derive_seed
from replearn.book.claims import fmt, glue_diff, glue_pm
from replearn.book.plotting import to_numpy
from replearn.book import scales, seeds, wording as words
from replearn.book.results import Section
from replearn.book.scales import require_data, require_images
from replearn.neural.specs import FederationSpec
from replearn.experiments.ch04_fedavg.cifar_transfer import (MatchedTraining, accuracy, method_name, probe_set,
                                                             train_matched)
from replearn.book.widgets import explorer as build_explorer, Menu
from replearn.table import Table
from replearn.book.seeds import points, separated
from replearn.settings import Distinct, Each, Ge, Gt, Profile, sourced


#: What the paper states of Fig. 4's setting, by settings field: (value, where it says so).
PAPER_SETTINGS = {"clients": (100, "FedAvg-FT paper, Sec. 5.2 (M = 100)"),
                  "alpha": (0.6, "FedAvg-FT paper, Sec. 5.2 (Dirichlet 0.6)")}

#: What the authors' code does: the FedAvg-FT paper (Collins et al., 2022) has no public code, so
#: Appendix B's column says so for every setting.
AUTHORS_CODE = None


@dataclass(frozen=True)
class SimilaritySettings(MatchedTraining):
    """Fig. 4: Dirichlet(``alpha``) label skew over ``clients``; FedAvg with each ``tau`` in
    ``taus`` (1 = D-SGD); cosine similarities on ``probe_per_class`` test images of each class;
    ``test_per_client`` test images per client for the (reported) client accuracy."""

    alpha: Annotated[float, Gt(0)] = 0.6
    taus: Annotated[tuple[int, ...], Distinct(), Each(Ge(1))] = (1, 5, 20)
    probe_per_class: Annotated[int, Ge(2)] = 100
    test_per_client: Annotated[int, Ge(1)] = 20

    def validate(self) -> None:
        """The relation between the fields (each field's own range is beside it): every tau
        divides ``total_steps``."""
        super().validate()
        self.check_taus(self.taus)

    PAPER = sourced(PAPER_SETTINGS, ours={"model": "fedavg_cnn", "channels": (32, 64, 128), "hidden": (256, 128),
                                          "train.lr": 0.01, "train.momentum": 0.5, "train.batch_size": 10,
                                          "train.participation": 0.1, "total_steps": 50_000, "dtype": "float32",
                                          "taus": (1, 5, 10, 50), "probe_per_class": 1000, "test_per_client": 100,
                                          "full_data": True},
                    doc="M = 100 clients, Dirichlet(0.6), the paper's CNN (our widths 32/64/128, MLP 256/128); tau "
                        "in {1, 5, 10, 50} (our choice: our copy's text says only \"varying tau\"); optimiser as in "
                        "the FedRep authors' code (lr 0.01, momentum 0.5, batch 10, 10% participation; the FedAvg "
                        "paper has no public code); 50,000 local updates (our choice: not in our source).")
    LONG = Profile({"taus": (1, 5, 50), "total_steps": 750, "seeds": (0, 1), "probe_per_class": 500,
                    "test_per_client": 50, "full_data": False}, base="paper",
                   doc="Near-paper on a CPU: the paper profile (M = 100, Dirichlet(0.6), r = 0.1, the paper's CNN, "
                       "the authors' optimiser, float32) on the offline subset (20,000 of CIFAR-10's 50,000 "
                       "training images, so 200 per client; a probe of 500 test images per class and 50 test "
                       "images per client, all the subset holds), tau in {1, 5, 50} (the paper profile adds 10) "
                       "at 750 local updates, so 15 rounds at tau = 50 (the paper profile: 50,000, about 4 days of "
                       "one core), 2 seeds (a seed takes about 40 minutes of one core here).")
    GPU = Profile({"taus": (1, 5, 50), "total_steps": 5000, "seeds": (0,), "probe_per_class": 500,
                   "test_per_client": 50, "full_data": False, "train.vmap_clients": 10},
                  doc="The paper profile sized for about a minute of one GPU on the offline subset (20,000 images: "
                      "200 per client): tau in {1, 5, 50} at 5,000 local updates, one seed, probe of 500 test "
                      "images per class (all the subset has), 50 test images per client; a round's 10 clients "
                      "trained as one batched computation (vmap_clients).")


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


def federation(s: SimilaritySettings, cifar: D.CifarData) -> neural.ClientData:
    """The training clients of :func:`run_similarity`: CIFAR-10's training images spread over
    ``s.clients`` clients with Dirichlet(``s.alpha``) label skew, ``s.test_per_client`` test
    images each, partition and test draws seeded from ``s.seed``."""
    require_data(cifar, s.full_data, "SimilaritySettings")
    require_images(s.clients * s.test_per_client, len(cifar.y_test), "test_per_client x clients",
                   "lower test_per_client or clients")
    fed = FederationSpec(s.clients, alpha=s.alpha, test_per_client=s.test_per_client)
    return fed.build(cifar, partition_seed=derive_seed(s.seed, 1), test_seed=derive_seed(s.seed, 2)).clients


def run_similarity(s: SimilaritySettings, *, cifar: D.CifarData | None = None) -> SimilarityResult:
    """Paper Fig. 4 (see the module docstring)."""
    cifar = cifar if cifar is not None else D.load_cifar("cifar10")
    k = cifar.n_classes
    clients = federation(s, cifar)
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


# --------------------------------------------------------------------------- what the page shows

#: The statistics of the page's tables, by column name: the value of one run's result at one tau.
STATISTICS = {"intra": lambda r, t: r.intra(t), "inter": lambda r, t: r.inter(t),
              "gap": lambda r, t: r.gap[t], "probe acc": lambda r, t: r.probe_accuracy[t]}
#: Where a results file of the long profile holds each statistic (per seed, under the tau).
RESULT_KEYS = {"intra": "intra", "inter": "inter", "gap": "gap", "probe acc": "probe_accuracy"}
#: The statistics in the unit of the results table, average cosine similarity; the probe accuracy
#: is shown in percent, apart from them.
SIMILARITIES = ("intra", "inter", "gap")
#: The paper's two claims that the page checks (Fig. 4).
PAPER_GAP = "Fig. 4: FedAvg's features separate the classes better than D-SGD's (intra–inter gap)"
PAPER_GROWS = "Fig. 4: the separation improves with τ"


def statistics(runs) -> dict[str, dict[int, list[float]]]:
    """``{statistic: {tau: [one value per run]}}`` of :data:`STATISTICS` over ``runs`` (one
    :class:`SimilarityResult` per seed), taus in the runs' order."""
    if not runs:
        raise ValueError("statistics: no runs")
    return {k: {t: [f(r, t) for r in runs] for t in runs[0].taus} for k, f in STATISTICS.items()}


def long_statistics(long) -> dict[str, dict[int, list[float]]]:
    """The same ``{statistic: {tau: [one value per seed]}}`` read from a committed results file
    (:func:`replearn.book.results.load`), taus in the order of its settings."""
    taus = [int(t) for t in long.settings["taus"]]
    return {k: {t: long.values(key, str(t)) for t in taus} for k, key in RESULT_KEYS.items()}


def glue_statistics(vals: dict, prefix: str, labels: dict | None = None) -> dict:
    """Glue the mean ± sd of every statistic and tau of ``vals`` (:func:`statistics`) as
    ``{prefix}-{label}-{tau}`` (with ``-mean`` and ``-sd``: :func:`replearn.book.claims.glue_pm`),
    the label being the statistic's name with ``-`` for spaces unless ``labels`` renames it; the
    probe accuracy in percent; returns ``{statistic: {tau: MeanPm}}``, the strings the tables show."""
    labels = labels or {}
    return {k: {t: glue_pm(f"{prefix}-{labels.get(k, k.replace(' ', '-'))}-{t}", v,
                           scale=1.0 if k in SIMILARITIES else 100.0) for t, v in by_tau.items()}
            for k, by_tau in vals.items()}


def glue_gap_diffs(gap: dict, prefix: str) -> dict:
    """Glue the paired difference of the gap between each tau and the next larger one
    (``{prefix}-gapdiff-{a}-{b}``: gap(b) - gap(a) with its 95% interval); returns
    ``{(a, b): Comparison}``."""
    taus = sorted(gap)
    return {(a, b): glue_diff(f"{prefix}-gapdiff-{a}-{b}", gap[b], gap[a]) for a, b in zip(taus, taus[1:])}


def statistics_table(shown: dict, caption: str):
    """The table of :func:`glue_statistics`'s strings in one unit, average cosine similarity: one
    row per method, a column each for the intra-class, the inter-class similarity and their gap."""
    taus = list(shown["gap"])
    return Table(["method", "intra-class", "inter-class", "gap (intra − inter)"],
                 [[method_name(t), *(shown[k][t].text for k in SIMILARITIES)] for t in taus], caption=caption)


def settings_rows(s) -> list[tuple[str, str]]:
    """The settings of a run (settings object or a results file's settings dict) in words, for
    :func:`replearn.book.wording.settings_table`."""
    taus = [int(t) for t in words.get(s, "taus")]
    return [("clients", f"{words.get(s, 'clients')}, Dirichlet({fmt(words.get(s, 'alpha'), 'g')}) label skew over "
                        f"CIFAR-10's classes"),
            ("network", words.network(s)),
            ("training", words.training(s)),
            ("local updates", f"{words.get(s, 'total_steps'):,} per participating client for every method"),
            ("methods", "D-SGD (τ = 1) and FedAvg with τ = " + ", ".join(str(t) for t in taus if t != 1)),
            ("probe set", f"{words.get(s, 'probe_per_class')} CIFAR-10 test images of each class"),
            ("seeds", words.seeds(s))]


def phrases(c) -> dict:
    """The phrases :func:`replearn.book.claims.verdict` glues for the outcome of the comparison
    ``c``: the book's own words, "holds", "not separated (n = ...)" or "opposite"."""
    return dict(holds="holds", fails=f"not separated (n = {c.n})", opposite="opposite")


def gap_checks(gap: dict, *, scale: str = "CPU") -> list[tuple[str, str, object, dict]]:
    """The page's verdicts on the gap, as ``(name, label, comparison, options)`` for
    :func:`replearn.book.claims.verdict`: each FedAvg's gap above D-SGD's (tau = 1) (Fig. 4), and the
    gap growing from the second-smallest to the largest tau, each by the paired 95% interval over
    seeds (:func:`replearn.book.seeds.separated`); the glued phrase is the outcome (:func:`phrases`).
    ``scale`` ``"long"``: the names and labels of the committed near-paper run."""
    taus = sorted(gap)
    long = scale == "long"
    pre, run = ("sim-long", "near-paper run: ") if long else ("sim", "")
    extra = {"scale": "long"} if long else {}
    checks = []
    for t in taus[1:]:
        c = seeds.separated(gap[t], gap[1])
        checks.append((f"{pre}-v-{t}", f"{run}gap of {method_name(t)} above D-SGD's", c,
                       dict(phrases(c), paper=PAPER_GAP, **extra)))
    a, b = taus[1], taus[-1]
    c = seeds.separated(gap[b], gap[a])
    checks.append((f"{pre}-v-grow", f"{run}gap grows from {method_name(a)} to {method_name(b)}", c,
                   dict(phrases(c), paper=PAPER_GROWS, **extra)))
    return checks


def paper_table(lvals: dict, lshown: dict):
    """The paper's Fig. 4 (what its text states) beside the near-paper run (``lvals``, ``lshown``:
    :func:`long_statistics`, :func:`glue_statistics`): each cell the outcome of the paired
    comparison over seeds, with the difference and its 95% interval (gaps in cosine similarity,
    accuracies in percentage points)."""
    def cell(c):
        return f"{c.word}: {c.text}"

    gap, acc = lvals["gap"], lvals["probe acc"]
    taus = sorted(gap)
    big = taus[-1]
    rows = [[f"gap, {method_name(big)} above D-SGD", "higher", cell(separated(gap[big], gap[1]))],
            [f"gap, {method_name(big)} above τ = {taus[1]}", "higher: quality improves with τ",
             cell(separated(gap[big], gap[taus[1]]))],
            ["D-SGD's intra- / inter-class similarity", "both low: features all dissimilar",
             f"{lshown['intra'][1].text} / {lshown['inter'][1].text}"],
            [f"probe accuracy, {method_name(big)} above D-SGD", "not reported", cell(points(acc[big], acc[1]))]]
    return Table(["claim", "the paper (Fig. 4, its text)", f"near-paper run ({len(gap[1])} seeds)"], rows,
                 caption="each comparison paired over seeds: the outcome, then the mean difference and its 95% "
                         "interval", align="lll")


def plot_matrices(res: SimilarityResult, seed: int):
    """Fig. 4 for one run: one heat map of the class cosine-similarity matrix per model, all on
    the colour scale of the lowest entry, with the model's gap in its title. Returns the figure."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(res.taus), figsize=(3.0 * len(res.taus) + 1.0, 3.9), layout="constrained")
    vmin = min(float(m.min()) for m in res.matrices.values())
    for j, (ax, tau) in enumerate(zip(axes, res.taus)):
        im = ax.imshow(res.matrices[tau].numpy(), vmin=vmin, vmax=1.0, cmap="viridis")
        ax.set_title(f"{method_name(tau)}\ngap {res.gap[tau]:.3f} (seed {seed})", fontsize=11)
        ax.set_xticks(range(10), res.class_names, rotation=90, fontsize=10)
        ax.set_yticks(range(10), res.class_names if j == 0 else [], fontsize=10)   # class names once, at the left
        ax.grid(False)
    fig.colorbar(im, ax=axes, shrink=0.8, label="average cosine similarity")
    return fig


def summarise(r: SimilarityResult) -> dict:
    """One seed's result as its results file keeps it: per tau, the gap, the intra- and
    inter-class similarities and the probe's and the clients' accuracies."""
    return {"gap": {str(t): r.gap[t] for t in r.taus}, "intra": {str(t): r.intra(t) for t in r.taus},
            "inter": {str(t): r.inter(t) for t in r.taus}, "probe_accuracy": {str(t): r.probe_accuracy[t] for t in r.taus},
            "client_accuracy": {str(t): r.client_accuracy[t] for t in r.taus}}


#: What ``scripts/run_results.py`` runs of this section (:class:`replearn.book.results.Section`).
RESULTS = (Section("4.7", SimilaritySettings, run_similarity, summarise, work),)
