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
from replearn.neural.transfer import (DSGD, PAPER_PRETRAIN, PretrainSettings, describe_pretraining, layer_activations, new_clients, new_model,
                         pretrain, pretrain_work, probe_set)


#: What the sources state of Fig. 2's setting, by settings field: (value, where it says so)
#: (the paper defers the details to an appendix that our copy does not hold).
PAPER_SETTINGS = {"tau": (50, "talk (FedAvg tau = 50)"),
                  "total_steps": (125_000, "talk (T tau = 125,000)")}

#: What the authors' code does: the FedAvg-FT paper (Collins et al., 2022) has no public code, so
#: Appendix B's column says so for every setting.
AUTHORS_CODE = None


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
    """``{1: "D-SGD", tau: "FedAvg, τ = tau"}``."""
    return {1: "D-SGD", tau: f"FedAvg, τ = {tau}"}


def glue_accuracy_table(runs, s: CKASettings):
    """Glue FedAvg's and D-SGD's pre-training and fine-tuned accuracy over ``runs`` (mean ± sd,
    ``cka-pretrain_accuracy-<tau>``, ``cka-ft_accuracy-<tau>``) and return them as a table."""
    from replearn.book.claims import fmt, glue_pm
    from replearn.book.plotting import Table

    k = s.n_pretrain or 100 - s.n_new
    rows = []
    for what, attr, chance in (("pre-training accuracy on the clients' test images", "pretrain_accuracy", 1 / k),
                               ("CIFAR-10 accuracy after fine-tuning", "ft_accuracy", 0.1)):
        cells = [glue_pm(f"cka-{attr}-{t}", [getattr(r, attr)[t] for r in runs]).text for t in (s.tau, 1)]
        rows.append([f"{what} (chance {fmt(chance, '.2f')})", *cells])
    return Table(["", method_names(s.tau)[s.tau], "D-SGD"], rows, caption=f"mean ± sd over {len(runs)} seeds")


def layer_cka(runs, tau: int):
    """``(ba, between)``: ``ba[t][j]``, the CKA of layer ``j`` before vs after fine-tuning of the
    model with ``t`` (``tau`` and 1), one value per run; ``between[j]``, FedAvg's vs D-SGD's."""
    layers = range(len(runs[0].layers))
    ba = {t: [[float(r.mean(t)[j]) for r in runs] for j in layers] for t in (tau, 1)}
    between = [[float(r.between[j]) for r in runs] for j in layers]
    return ba, between


def glue_cka_table(short: list[str], ba: dict, between: list):
    """Glue every layer's CKA (``cka-fedavg-<layer>``, ``cka-dsgd-<layer>``,
    ``cka-between-<layer>``: mean ± sd over seeds) and return them as a table."""
    from replearn.book.claims import glue_pm
    from replearn.book.plotting import Table

    tau, rows = max(ba), []
    for j, layer in enumerate(short):
        cells = [glue_pm(f"cka-{name}-{layer}", v).text
                 for name, v in (("fedavg", ba[tau][j]), ("dsgd", ba[1][j]), ("between", between[j]))]
        rows.append([layer, *cells])
    return Table(["layer", "FedAvg: before vs after", "D-SGD: before vs after", "FedAvg vs D-SGD"], rows,
                 caption=f"linear CKA, mean ± sd over {len(between[0])} seeds")


def checks(short: list[str], ba: dict, between: list) -> list[tuple[str, str, object, dict]]:
    """The page's verdicts as ``(name, label, condition, options)`` for
    :func:`replearn.book.claims.verdict`: per convolution, FedAvg's CKA above D-SGD's (Fig. 2) and
    the reverse, beyond the spread over seeds; the mean CKA falling with depth for both models, and
    between the two models."""
    from replearn.book import seeds

    tau = max(ba)
    out = []
    for j in (j for j, layer in enumerate(short) if not layer.startswith("relu_fc")):
        out.append((f"cka-v-{short[j]}", f"{short[j]}: FedAvg's CKA above D-SGD's (changes less) by more than the spread",
                    seeds.separated(ba[tau][j], ba[1][j]),
                    dict(holds="changes less than D-SGD's under fine-tuning, by more than the spread over seeds",
                         fails="does not change less than D-SGD's beyond the spread over seeds", paper=PAPER_CLAIM)))
        out.append((f"cka-v-rev-{short[j]}", f"{short[j]}: D-SGD's CKA above FedAvg's by more than the spread",
                    seeds.separated(ba[1][j], ba[tau][j]),
                    dict(holds="D-SGD's changes less than FedAvg's by more than the spread",
                         fails="neither changes less than the other beyond the spread")))
    mean = [{t: [seeds.mean_sd(v)[0] for v in ba[t]] for t in ba}, [seeds.mean_sd(v)[0] for v in between]]
    deeper = all(mean[0][t][j] > mean[0][t][j + 1] for t in ba for j in range(len(short) - 1))
    out.append(("cka-v-depth", "for both models the mean CKA falls from each layer to the next", deeper,
                dict(holds="falls from each layer to the next, for both models",
                     fails="does not fall steadily with depth for both models")))
    out.append(("cka-v-between", "the CKA between the two models falls from each layer to the next",
                all(a > b for a, b in zip(mean[1], mean[1][1:])),
                dict(holds="falls from each layer to the next", fails="does not fall steadily with depth")))
    return out


def plot_cka(short: list[str], ba: dict, between: list):
    """Fig. 2: left, each layer's CKA before vs after fine-tuning for FedAvg and D-SGD (bars: mean
    ± sd; dots: seeds); right, FedAvg's vs D-SGD's pre-trained layers. Returns the figure."""
    import matplotlib.pyplot as plt
    import numpy as np

    from replearn.book.plotting import COLORS
    from replearn.book.seeds import mean_sd

    tau, n = max(ba), len(between[0])
    names = method_names(tau)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10.0, 3.6))
    x = np.arange(len(short))
    for off, t, color in ((-0.2, tau, COLORS["FedAvg"]), (0.2, 1, COLORS["D-GD"])):
        ax1.bar(x + off, [mean_sd(v)[0] for v in ba[t]], 0.4, yerr=[mean_sd(v)[1] for v in ba[t]],
                capsize=3, color=color, label=names[t])
        for j in range(len(short)):
            ax1.plot(np.full(n, x[j] + off), ba[t][j], "k.", ms=3)
    ax1.set_xticks(x, short)
    ax1.set(ylim=(0, 1.3), yticks=np.linspace(0, 1, 6), ylabel="linear CKA",
            title="each layer: before vs after fine-tuning on CIFAR-10")
    ax1.legend(fontsize=8, loc="upper center", ncol=2, frameon=False)   # above the bars (y up to 1.3)
    ax2.bar(x, [mean_sd(v)[0] for v in between], 0.5, yerr=[mean_sd(v)[1] for v in between], capsize=3,
            color="grey")
    ax2.set_xticks(x, short)
    ax2.set(ylim=(0, 1.05), ylabel="linear CKA", title=f"FedAvg vs D-SGD (pre-trained); {n} seeds")
    plt.tight_layout()
    return fig


@dataclass(frozen=True)
class LongCKA:
    """What a committed results file of the long profile holds, per seed: ``layers`` (short
    names), ``pre`` and ``ft`` (``{tau: [accuracy per seed]}``, D-SGD first) and ``ba``
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
    """Glue the long run's accuracies (``cka-long-pre-<method>``, ``cka-long-ft-<method>``), each
    layer's CKA (``cka-long-<layer>-<method>``, ``-diff``) and the first layer's again
    (``cka-long-first-...``); return the accuracy table and the CKA table."""
    from replearn.book.claims import glue_diff, glue_pm
    from replearn.book.plotting import Table

    names, n = method_names(lv.tau), len(lv.pre[1])
    slug = {1: "dsgd", lv.tau: "fedavg"}
    acc_rows = [[names[t], glue_pm(f"cka-long-pre-{slug[t]}", lv.pre[t]).text,
                 glue_pm(f"cka-long-ft-{slug[t]}", lv.ft[t]).text] for t in names]
    rows = []
    for layer, (a, b) in lv.ba.items():
        rows.append([layer, *(glue_pm(f"cka-long-{layer}-{name}", v).text for name, v in (("dsgd", a), ("fedavg", b))),
                     glue_diff(f"cka-long-{layer}-diff", b, a).text])
    a, b = lv.ba[lv.layers[0]]
    for name, v in (("dsgd", a), ("fedavg", b)):
        glue_pm(f"cka-long-first-{name}", v)
    glue_diff("cka-long-first-diff", b, a)
    return (Table(["method", "pre-training accuracy", "fine-tuned CIFAR-10 accuracy"], acc_rows,
                  caption=f"long profile (near-paper), committed results: mean ± sd over {n} seeds"),
            Table(["layer", "D-SGD", "FedAvg", "FedAvg − D-SGD [95% interval]"], rows,
                  caption=f"long profile: CKA before vs after fine-tuning, mean ± sd over {n} seeds; the "
                          f"difference: paired mean and its 95% interval"))


def glue_long_ordering(lv: LongCKA) -> tuple[list, list]:
    """The long run's convolutions where FedAvg's layer changes less (``less``) or more
    (``more``) than D-SGD's beyond the spread over seeds, glued as counts with their names
    (``cka-long-n-conv``, ``-n-less``, ``-n-more``); returns ``(less, more)``."""
    from replearn.book import seeds
    from replearn.book.claims import glue_text

    conv = [layer for layer in lv.layers if not layer.startswith("relu_fc")]
    less = [layer for layer in conv if seeds.separated(lv.ba[layer][1], lv.ba[layer][0])]
    more = [layer for layer in conv if seeds.separated(lv.ba[layer][0], lv.ba[layer][1])]
    glue_text("cka-long-n-conv", str(len(conv)))
    glue_text("cka-long-n-less", f"{len(less)} ({', '.join(less)})" if less else "none")
    glue_text("cka-long-n-more", f"{len(more)} ({', '.join(more)})" if more else "none")
    return less, more


def long_checks(lv: LongCKA, less: list, more: list) -> list[tuple[str, str, object, dict]]:
    """The long run's verdicts (as :func:`checks`): its first layer changes less for FedAvg than
    for D-SGD (Fig. 2), or the reverse, and D-SGD's pre-training accuracy above FedAvg's."""
    from replearn.book import seeds

    first = lv.layers[0]
    return [("cka-long-v-first", f"long run, {first}: FedAvg's CKA above D-SGD's by more than the spread",
             first in less,
             dict(holds="changes less than D-SGD's under fine-tuning, by more than the spread over seeds",
                  fails="does not change less than D-SGD's beyond the spread over seeds", paper=PAPER_CLAIM,
                  scale="long")),
            ("cka-long-v-rev-first", f"long run, {first}: D-SGD's CKA above FedAvg's by more than the spread",
             first in more,
             dict(holds="D-SGD's changes less than FedAvg's by more than the spread (Fig. 2 reversed)",
                  fails="neither changes less than the other beyond the spread", scale="long")),
            ("cka-long-v-pre", "long run: D-SGD's pre-training accuracy above FedAvg's by more than the spread",
             seeds.separated(lv.pre[1], lv.pre[lv.tau]),
             dict(holds="is above FedAvg's by more than the spread over seeds",
                  fails="is not above FedAvg's by more than the spread over seeds", scale="long"))]


def describe_long(ls: dict, cfg: CKASettings) -> str:
    """What the committed long run trained, beside the CPU run of the page (``cfg``)."""
    return (f"{describe_pretraining(ls)}; {ls['ft_clients']} CIFAR-10 clients of {ls['ft_samples']} "
            f"images\n(the CPU run above: the {cfg.model} network in {cfg.dtype}, {cfg.total_steps} local updates, "
            f"tau = {cfg.tau})")


def by_position(layers: list[str]) -> dict[str, str]:
    """The layers the paper's Fig. 2 compares, by position: the first and last convolution and
    hidden linear layer (``relu_fc...``)."""
    conv = [layer for layer in layers if not layer.startswith("relu_fc")]
    fc = [layer for layer in layers if layer.startswith("relu_fc")]
    return {"first convolution": conv[0], "last convolution": conv[-1], "first hidden linear": fc[0],
            "last hidden linear": fc[-1]}


def paper_table(short: list[str], ba: dict, ft: dict, lv: LongCKA):
    """The paper's Fig. 2 beside the CPU run (``short``, ``ba``: :func:`layer_cka`; ``ft``:
    ``{tau: fine-tuned accuracy per seed}``) and the long run, layers matched by position:
    FedAvg's CKA minus D-SGD's, paired over seeds."""
    from replearn.book.claims import compared
    from replearn.book.plotting import Table

    tau = max(ba)
    cpu_at, long_at = by_position(short), by_position(lv.layers)
    paper_says = {"first convolution": "higher: early layers change much less", "last convolution": "not stated",
                  "first hidden linear": "not stated", "last hidden linear": "not stated"}
    rows = []
    for where in cpu_at:
        j, layer = short.index(cpu_at[where]), long_at[where]
        rows.append([f"CKA, {where}", paper_says[where], f"{cpu_at[where]}: {compared(ba[tau][j], ba[1][j])}",
                     f"{layer}: {compared(lv.ba[layer][1], lv.ba[layer][0])}"])
    rows.append(["fine-tuned CIFAR-10 accuracy", "not reported", compared(ft[tau], ft[1]),
                 compared(lv.ft[lv.tau], lv.ft[1])])
    return Table(["FedAvg vs D-SGD", "paper (Fig. 2, its text)", f"CPU default ({len(ft[1])} seeds)",
                  f"near-paper long run ({len(lv.pre[1])} seeds)"], rows, align="llll",
                 caption="the paper's claim and our two runs: FedAvg minus D-SGD, paired over seeds, with its 95% "
                         "interval")
