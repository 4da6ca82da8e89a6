"""Book 4.9: under fine-tuning, FedAvg's early layers change less than D-SGD's (Collins et al.
2022, Fig. 2).

FedAvg and D-SGD are pre-trained on CIFAR-100 (:func:`replearn.experiments.ch04_fedavg.cifar_transfer.pretrain`); CIFAR-10
clients fine-tune both (a fresh head); the linear CKA (:func:`replearn.neural.similarity.linear_cka`)
of every body layer's activations on a fixed probe set of CIFAR-10 test images before vs after
fine-tuning, and between the FedAvg and D-SGD models layer by layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from replearn.neural import algorithms, data as D, similarity
from replearn.neural.algorithms.fine_tuning import FineTuningOptions
from replearn import neural
from replearn.backend import derive_seed
from replearn.book import scales, seeds, wording as w
from replearn.book.results import Section, floats
from replearn.book.claims import fmt, fmt as fmt_, glue_diff, glue_pm, glue_text
from replearn.book.scales import require_data
from replearn.experiments.ch04_fedavg.cifar_transfer import (DSGD, PRETRAIN_STATED, PretrainSettings, layer_activations, new_clients, new_model,
                         pretrain, pretrain_work, probe_set)
from replearn.table import Table
from replearn.book.seeds import mean_sd, points, separated
from replearn.book.plotting import COLORS
from replearn.settings import Ge, sourced


#: What the sources state of Fig. 2's setting, by settings field: (value, where it says so)
#: (the paper defers the details to an appendix that our copy does not hold).
PAPER_SETTINGS = {name: PRETRAIN_STATED[name] for name in ("classes_per_client", "tau", "total_steps")}

#: What the authors' code does: the FedAvg-FT paper (Collins et al., 2022) has no public code, so
#: Appendix B's column says so for every setting.
AUTHORS_CODE = None


@dataclass(frozen=True)
class CKASettings(PretrainSettings):
    """Fig. 2: after :func:`~replearn.experiments.ch04_fedavg.cifar_transfer.pretrain`, ``ft_clients`` CIFAR-10 clients (all 10
    classes each, ``ft_samples`` training images) fine-tune both models; linear CKA of every layer
    on ``probe_per_class`` CIFAR-10 test images of each class, before vs after fine-tuning,
    averaged over the clients."""

    ft_clients: Annotated[int, Ge(1)] = 2
    ft_samples: Annotated[int, Ge(1)] = 200
    probe_per_class: Annotated[int, Ge(2)] = 30

    PAPER = sourced(PAPER_SETTINGS, ours={"ft_clients": 5, "ft_samples": 500, "probe_per_class": 100},
                    doc="CIFAR-100 with 5 classes per client (paper Fig. 2), fine-tuned on CIFAR-10; the rest as in "
                        "PretrainSettings.PAPER; 5 CIFAR-10 clients of 500 images (our choice).")


def work(s: CKASettings, *, batched: bool = True, shared_pretraining: bool = True) -> dict:
    """:func:`replearn.book.scales.launch_estimate` of :func:`run_cka` with ``s``: fine-tuning both
    models on every CIFAR-10 client, plus the pre-training unless it is shared with 4.8
    (``shared_pretraining``: same :func:`~replearn.experiments.ch04_fedavg.cifar_transfer.pretrain_key`, one process)."""
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


def cka_clients(s: CKASettings, cifar10: D.CifarData):
    """The CIFAR-10 clients of :func:`run_cka` (``s.ft_clients``, each one shard of every class
    and ``s.ft_samples`` training images; the authors' split could deal a client a class twice and
    another not at all) and the probe images (the first ``s.probe_per_class`` test images of each
    class, normalised), on the clients' device."""
    cl = new_clients(cifar10, None, s.ft_clients, cifar10.n_classes, 20, derive_seed(s.seed, 30), "disjoint")
    cl = cl.take_train(s.ft_samples, seed=derive_seed(s.seed, 31))
    pidx, _ = probe_set(cifar10.x_test, cifar10.y_test, s.probe_per_class, cifar10.n_classes)
    return cl, D.normalise(cifar10.x_test[pidx], cifar10.name).to(cl.device)


def fine_tuning(s: CKASettings) -> neural.TrainConfig:
    """The SGD of the CIFAR-10 clients' fine-tuning: step size ``ft_lr``, the pre-training's
    momentum, batches of ``ft_batch_size``, its own seed."""
    return neural.TrainConfig(lr=s.ft_lr, momentum=s.train.momentum, batch_size=s.ft_batch_size,
                              seed=derive_seed(s.seed, 33), vmap_clients=s.train.vmap_clients)


def run_cka(s: CKASettings, *, cifar10: D.CifarData | None = None,
            cifar100: D.CifarData | None = None) -> CKALayerResult:
    """Paper Fig. 2 (see the module docstring); the head is replaced for CIFAR-10, so the layers
    compared are the body's (each convolution and hidden linear layer after its ReLU)."""
    cifar10 = cifar10 if cifar10 is not None else D.load_cifar("cifar10")
    cifar100 = cifar100 if cifar100 is not None else D.load_cifar("cifar100")
    require_data(cifar10, s.full_data, "CKASettings")
    pre = pretrain(s, cifar100)
    cl, px = cka_clients(s, cifar10)
    before_after, ft_acc, before = {}, {}, {}
    layers = None
    for tau, state in pre.states.items():
        model, full = new_model(s, state, cifar10.n_classes, derive_seed(s.seed, 32), cl.device)
        layers = tuple(name for name in model.layer_names() if name != "head")
        res = algorithms.run("Fine-tuning", model, cl, fine_tuning(s), FineTuningOptions("all", s.ft_epochs), state=full)
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


# --------------------------------------------------------------------------- what the page shows

#: The paper's claim that the page checks (Fig. 2).
PAPER_CLAIM = "Fig. 2: FedAvg's early layers change less under fine-tuning than D-SGD's"


def demo_representations(seed: int = 0):
    """The CKA demo's data (float64, seeded): ``X`` (200 x 30), ``Y = X M + noise`` (200 x 20)
    and ``{name: Z}``, five maps of ``X``: itself, an orthogonal map, a scaling, a translation
    and an ill-conditioned invertible map (singular values from 0.01 to 1)."""
    g = torch.Generator().manual_seed(seed)
    n, p, f64 = 200, 30, torch.float64
    X = torch.randn(n, p, generator=g, dtype=f64)
    Y = X @ torch.randn(p, 20, generator=g, dtype=f64) + 0.5 * torch.randn(n, 20, generator=g, dtype=f64)
    Q, _ = torch.linalg.qr(torch.randn(p, p, generator=g, dtype=f64))
    A = torch.randn(p, p, generator=g, dtype=f64) @ torch.diag(torch.logspace(-2, 0, p, dtype=f64))
    maps = {"X": X, "X Q (orthogonal)": X @ Q, "3.7 X (scaling)": 3.7 * X, "X + 5 (translation)": X + 5.0,
            "X A (invertible)": X @ A}
    return X, Y, maps


def method_names(tau: int) -> dict[int, str]:
    """``{tau: "FedAvg, τ = tau", 1: "D-SGD"}``."""
    return {tau: f"FedAvg, τ = {tau}", 1: "D-SGD"}


def layer_labels(layers) -> dict[str, str]:
    """The book's names of a body's layers (``relu...`` names, with or without ``body.``), in
    order: the convolutions "conv 1", "conv 2", ..., the hidden linear layers "fc 1", "fc 2", ..."""
    names = [layer.removeprefix("body.") for layer in layers]
    conv = [n for n in names if not n.startswith("relu_fc")]
    fc = [n for n in names if n.startswith("relu_fc")]
    return {**{n: f"conv {i}" for i, n in enumerate(conv, 1)}, **{n: f"fc {i}" for i, n in enumerate(fc, 1)}}


def settings_rows(s) -> list[tuple[str, str]]:
    """The settings of a run (settings object or a results file's settings dict) in words, for
    :func:`replearn.book.wording.settings_table`."""
    k = w.get(s, "n_pretrain") or 100 - w.get(s, "n_new")
    return [("pre-training", f"{k} CIFAR-100 classes; {w.get(s, 'clients')} clients of "
                             f"{w.get(s, 'classes_per_client')} single-class shards"),
            ("network", w.network(s)),
            ("training", w.training(s)),
            ("local updates", f"{w.get(s, 'total_steps'):,} per participating client; FedAvg with "
                              f"τ = {w.get(s, 'tau')} against D-SGD"),
            ("fine-tuning", f"{w.get(s, 'ft_clients')} CIFAR-10 clients of {w.get(s, 'ft_samples')} images, "
                            f"{w.get(s, 'ft_epochs')} epochs of SGD on the whole network (a fresh head), step size "
                            f"{fmt(w.get(s, 'ft_lr'), 'g')}"),
            ("probe set", f"{w.get(s, 'probe_per_class')} CIFAR-10 test images of each class"),
            ("seeds", w.seeds(s))]


def glue_accuracies(runs, s: CKASettings) -> dict:
    """Glue FedAvg's and D-SGD's pre-training and fine-tuned accuracy over ``runs`` in percent
    (mean ± sd, ``cka-pretrain_accuracy-<tau>``, ``cka-ft_accuracy-<tau>``) and the chance levels
    (``cka-chance-pre``, ``cka-chance-ft``); returns ``{attribute: {tau: [accuracy per seed]}}``."""
    k = s.n_pretrain or 100 - s.n_new
    glue_text("cka-chance-pre", fmt_(100 / k, ".0f"))
    glue_text("cka-chance-ft", fmt_(100 / 10, ".0f"))
    out = {}
    for attr in ("pretrain_accuracy", "ft_accuracy"):
        out[attr] = {t: [getattr(r, attr)[t] for r in runs] for t in (s.tau, 1)}
        for t, v in out[attr].items():
            glue_pm(f"cka-{attr}-{t}", v, scale=100)
    return out


def layer_cka(runs, tau: int):
    """``(ba, between)``: ``ba[t][j]``, the CKA of layer ``j`` before vs after fine-tuning of the
    model with ``t`` (``tau`` and 1), one value per run; ``between[j]``, FedAvg's vs D-SGD's."""
    layers = range(len(runs[0].layers))
    ba = {t: [[float(r.mean(t)[j]) for r in runs] for j in layers] for t in (tau, 1)}
    between = [[float(r.between[j]) for r in runs] for j in layers]
    return ba, between


def glue_cka_table(short: list[str], ba: dict, between: list):
    """Glue every layer's CKA (``cka-fedavg-<layer>``, ``cka-dsgd-<layer>``,
    ``cka-between-<layer>``: mean ± sd over seeds) and FedAvg's minus D-SGD's, paired over seeds
    (``cka-diff-<layer>``), and return them as one table in CKA, the layers as the book names them."""
    tau, rows, labels = max(ba), [], layer_labels(short)
    for j, layer in enumerate(short):
        cells = [glue_pm(f"cka-{name}-{layer}", v).text for name, v in (("fedavg", ba[tau][j]), ("dsgd", ba[1][j]))]
        cells.append(glue_diff(f"cka-diff-{layer}", ba[tau][j], ba[1][j]).text)
        cells.append(glue_pm(f"cka-between-{layer}", between[j]).text)
        rows.append([labels[layer], *cells])
    return Table(["layer", "FedAvg: before vs after", "D-SGD: before vs after", "FedAvg − D-SGD [95% interval]",
                  "FedAvg vs D-SGD (pre-trained)"], rows,
                 caption=f"linear CKA, mean ± sd over {len(between[0])} seeds; the difference paired over seeds")


def phrases(c) -> dict:
    """The phrases :func:`replearn.book.claims.verdict` glues for the outcome of the comparison
    ``c``: the book's own words, "holds", "not separated (n = ...)" or "opposite"."""
    return dict(holds="holds", fails=f"not separated (n = {c.n})", opposite="opposite")


def checks(short: list[str], ba: dict) -> list[tuple[str, str, object, dict]]:
    """The page's verdicts as ``(name, label, comparison, options)`` for
    :func:`replearn.book.claims.verdict`: per convolution, FedAvg's CKA before vs after fine-tuning
    above D-SGD's (it changes less; Fig. 2), FedAvg minus D-SGD paired over seeds as in the table
    ("opposite": D-SGD's changes less)."""
    tau, labels = max(ba), layer_labels(short)
    out = []
    for j in (j for j, layer in enumerate(short) if not layer.startswith("relu_fc")):
        c = seeds.separated(ba[tau][j], ba[1][j])
        out.append((f"cka-v-{short[j]}", f"{labels[short[j]]}: FedAvg's CKA above D-SGD's (changes less)", c,
                    dict(phrases(c), paper=PAPER_CLAIM)))
    return out


def falls_with_depth(ba: dict, between: list) -> tuple[bool, bool]:
    """Whether the mean CKA over seeds falls from each layer to the next, before vs after
    fine-tuning for both models, and between the two pre-trained models."""
    mean = {t: [mean_sd(v)[0] for v in ba[t]] for t in ba}
    both = all(a > b for t in ba for a, b in zip(mean[t], mean[t][1:]))
    bm = [mean_sd(v)[0] for v in between]
    return both, all(a > b for a, b in zip(bm, bm[1:]))


def plot_cka(short: list[str], ba: dict, between: list):
    """Fig. 2: left, each layer's CKA before vs after fine-tuning for FedAvg and D-SGD (bars: mean
    ± sd; dots: seeds); right, FedAvg's vs D-SGD's pre-trained layers. Returns the figure."""
    import matplotlib.pyplot as plt
    import numpy as np

    tau, n = max(ba), len(between[0])
    names, labels = method_names(tau), layer_labels(short)
    ticks = [labels[layer] for layer in short]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10.0, 3.6))
    x = np.arange(len(short))
    for off, t, color in ((-0.2, tau, COLORS["FedAvg"]), (0.2, 1, COLORS["D-GD"])):
        ax1.bar(x + off, [mean_sd(v)[0] for v in ba[t]], 0.4, yerr=[mean_sd(v)[1] for v in ba[t]],
                capsize=3, color=color, label=names[t])
        for j in range(len(short)):
            ax1.plot(np.full(n, x[j] + off), ba[t][j], "k.", ms=3)
    ax1.set_xticks(x, ticks)
    ax1.set(ylim=(0, 1.3), yticks=np.linspace(0, 1, 6), ylabel="linear CKA",
            title="each layer: before vs after fine-tuning on CIFAR-10")
    ax1.legend(loc="upper center", ncol=2, frameon=False)   # above the bars (y up to 1.3)
    ax2.bar(x, [mean_sd(v)[0] for v in between], 0.5, yerr=[mean_sd(v)[1] for v in between], capsize=3,
            color="grey")
    ax2.set_xticks(x, ticks)
    ax2.set(ylim=(0, 1.05), ylabel="linear CKA", title=f"FedAvg vs D-SGD (pre-trained); {n} seeds")
    plt.tight_layout()
    return fig


@dataclass(frozen=True)
class LongCKA:
    """What a committed results file of the long profile holds, per seed: ``layers`` (short
    names), ``pre`` and ``ft`` (``{tau: [accuracy per seed]}``, FedAvg first) and ``ba``
    (``{layer: (D-SGD's CKA per seed, FedAvg's)}``, before vs after fine-tuning)."""

    tau: int
    layers: list
    pre: dict
    ft: dict
    ba: dict


def read_long(long) -> LongCKA:
    """:class:`LongCKA` of a results file (:func:`replearn.book.results.load`)."""
    tau = int(long.settings["tau"])
    layers = [layer.removeprefix("body.") for layer in long.results[str(long.seeds[0])]["layers"]]
    names = method_names(tau)
    pre = {t: long.values("pretrain_accuracy", str(t)) for t in names}
    ft = {t: long.values("ft_accuracy", str(t)) for t in names}
    ba = {layer: (long.values("before_after", "1", i), long.values("before_after", str(tau), i))
          for i, layer in enumerate(layers)}
    return LongCKA(tau, layers, pre, ft, ba)


def glue_long_tables(lv: LongCKA) -> tuple:
    """Glue the long run's accuracies in percent (``cka-long-pre-<method>``, ``cka-long-ft-<method>``,
    FedAvg minus D-SGD in points ``cka-long-pre-diff``, ``cka-long-ft-diff``), each layer's CKA
    (``cka-long-<layer>-<method>``, ``-diff``) and the first layer's again (``cka-long-first-...``);
    return the accuracy table (in %) and the CKA table, FedAvg first, layers as the book names them."""
    names, n, labels = method_names(lv.tau), len(lv.pre[1]), layer_labels(lv.layers)
    slug = {1: "dsgd", lv.tau: "fedavg"}
    rows = []
    for what, key, v in (("pre-training clients", "pre", lv.pre), ("CIFAR-10 after fine-tuning", "ft", lv.ft)):
        rows.append([what, *(glue_pm(f"cka-long-{key}-{slug[t]}", v[t], scale=100).text for t in names),
                     glue_diff(f"cka-long-{key}-diff", v[lv.tau], v[1], scale=100, unit="points").text])
    acc = Table(["accuracy", *names.values(), "FedAvg − D-SGD [95% interval]"], rows,
                caption=f"near-paper run: test accuracy in %, mean ± sd over {n} seeds; the difference paired over seeds")
    rows = []
    for layer, (a, b) in lv.ba.items():
        rows.append([labels[layer], *(glue_pm(f"cka-long-{layer}-{name}", v).text for name, v in (("fedavg", b), ("dsgd", a))),
                     glue_diff(f"cka-long-{layer}-diff", b, a).text])
    a, b = lv.ba[lv.layers[0]]
    for name, v in (("dsgd", a), ("fedavg", b)):
        glue_pm(f"cka-long-first-{name}", v)
    glue_diff("cka-long-first-diff", b, a)
    return acc, Table(["layer", "FedAvg", "D-SGD", "FedAvg − D-SGD [95% interval]"], rows,
                      caption=f"near-paper run: linear CKA before vs after fine-tuning, mean ± sd over {n} seeds; the "
                              f"difference paired over seeds")


def glue_long_ordering(lv: LongCKA) -> tuple[list, list]:
    """The long run's convolutions where FedAvg's layer changes less (``less``) or more
    (``more``) than D-SGD's, by the paired 95% interval over seeds, glued as counts with the
    layers' names (``cka-long-n-conv``, ``-n-less``, ``-n-more``); returns ``(less, more)``."""
    labels = layer_labels(lv.layers)
    conv = [layer for layer in lv.layers if not layer.startswith("relu_fc")]
    less = [layer for layer in conv if seeds.separated(lv.ba[layer][1], lv.ba[layer][0])]
    more = [layer for layer in conv if seeds.separated(lv.ba[layer][0], lv.ba[layer][1])]
    glue_text("cka-long-n-conv", str(len(conv)))
    for key, found in (("less", less), ("more", more)):
        glue_text(f"cka-long-n-{key}", f"{len(found)} ({', '.join(labels[x] for x in found)})" if found else "none")
    return less, more


def long_checks(lv: LongCKA) -> list[tuple[str, str, object, dict]]:
    """The long run's verdicts (as :func:`checks`), FedAvg minus D-SGD as in its tables: its first
    layer's CKA above D-SGD's (Fig. 2), and FedAvg's pre-training accuracy above D-SGD's, in points."""
    first = lv.layers[0]
    c = seeds.separated(lv.ba[first][1], lv.ba[first][0])
    p = seeds.points(lv.pre[lv.tau], lv.pre[1])
    return [("cka-long-v-first", f"near-paper run, {layer_labels(lv.layers)[first]}: FedAvg's CKA above D-SGD's", c,
             dict(phrases(c), paper=PAPER_CLAIM, scale="long")),
            ("cka-long-v-pre", "near-paper run: FedAvg's pre-training accuracy above D-SGD's", p,
             dict(phrases(p), scale="long"))]


def by_position(layers: list[str]) -> dict[str, str]:
    """The layers the paper's Fig. 2 compares, by position: the first and last convolution and
    hidden linear layer (``relu_fc...``)."""
    conv = [layer for layer in layers if not layer.startswith("relu_fc")]
    fc = [layer for layer in layers if layer.startswith("relu_fc")]
    return {"first convolution": conv[0], "last convolution": conv[-1], "first hidden linear": fc[0],
            "last hidden linear": fc[-1]}


def paper_table(lv: LongCKA):
    """The paper's Fig. 2 (what its text states) beside the near-paper run, layers by position:
    FedAvg's CKA minus D-SGD's and the fine-tuned accuracy (in points), paired over seeds, with
    the outcome."""
    def cell(c):
        return f"{c.word}: {c.text}"

    at, labels = by_position(lv.layers), layer_labels(lv.layers)
    paper_says = {"first convolution": "higher: early layers change much less", "last convolution": "not stated",
                  "first hidden linear": "not stated", "last hidden linear": "not stated"}
    rows = [[f"CKA, {where} ({labels[layer]})", paper_says[where], cell(separated(lv.ba[layer][1], lv.ba[layer][0]))]
            for where, layer in at.items()]
    rows.append(["fine-tuned CIFAR-10 accuracy", "not reported", cell(points(lv.ft[lv.tau], lv.ft[1]))])
    return Table(["FedAvg above D-SGD", "the paper (Fig. 2, its text)", f"near-paper run ({len(lv.pre[1])} seeds)"],
                 rows, align="lll", caption="each comparison paired over seeds: the outcome, then FedAvg minus D-SGD "
                                            "and its 95% interval")


def summarise(r: CKALayerResult) -> dict:
    """One seed's result as its results file keeps it: the layers, CKA before against after
    fine-tuning per tau, between the two models, and the accuracies."""
    return {"layers": list(r.layers), "before_after": {str(t): floats(r.mean(t)) for t in r.before_after},
            "between": floats(r.between), "ft_accuracy": {str(t): v for t, v in r.ft_accuracy.items()},
            "pretrain_accuracy": {str(t): v for t, v in r.pretrain_accuracy.items()}}


#: What ``scripts/run_results.py`` runs of this section; its seeds share the pre-training with 4.8's.
RESULTS = (Section("4.9", CKASettings, run_cka, summarise, work, run_group=("4.8", "4.9")),)
