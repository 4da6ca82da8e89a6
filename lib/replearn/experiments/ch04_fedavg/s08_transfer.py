"""Book 4.8: FedAvg's representation transfers to new tasks better than D-SGD's (Collins et al.
2022, Fig. 5).

FedAvg and D-SGD are pre-trained on CIFAR-100 clients at a matched number of local updates
(:func:`replearn.experiments.ch04_fedavg.cifar_transfer.pretrain`); then new clients holding held-out CIFAR-100 classes, and
CIFAR-10 clients holding all 10 classes, fine-tune the whole model
(:func:`replearn.experiments.ch04_fedavg.cifar_transfer.finetune_all`, a fresh head) on varying numbers of training images;
accuracy per new client.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch

from replearn.neural import data as D
from replearn.backend import derive_seed
from replearn.book import scales, seeds, wording as w
from replearn.book.results import Section, floats
from replearn.book.claims import fmt, glue_diff, glue_pm, glue_text
from replearn.book.scales import require_data
from replearn.experiments.ch04_fedavg.cifar_transfer import (PRETRAIN_STATED, PretrainSettings, finetune_all,
                                                             new_clients, pretrain, pretrain_work)
from replearn.table import Table
from replearn.book.seeds import mean_sd, points
from replearn.book.plotting import COLORS
from replearn.settings import Each, Ge, Profile, sourced


#: What the sources state of Fig. 5's setting, by settings field: (value, where it says so).
PAPER_SETTINGS = {**{name: PRETRAIN_STATED[name] for name in ("clients", "tau", "total_steps")},
                  "n_new": (20, "FedAvg-FT paper, Sec. 5.2 (20 new classes)"),
                  "ft_epochs": (10, "FedAvg-FT paper, Sec. 5.2 (10 epochs of SGD)"),
                  "trials": (5, "FedAvg-FT paper, Fig. 5 caption (five trials)"),
                  "new_clients": (5, "FedAvg-FT paper, Fig. 5 caption (five new clients per trial)")}

#: What the authors' code does: the FedAvg-FT paper (Collins et al., 2022) has no public code, so
#: Appendix B's column says so for every setting.
AUTHORS_CODE = None


@dataclass(frozen=True)
class TransferSettings(PretrainSettings):
    """Fig. 5: after :func:`~replearn.experiments.ch04_fedavg.cifar_transfer.pretrain`, ``new_clients`` new clients per trial
    holding ``new_classes_per_client`` of the held-out CIFAR-100 classes fine-tune on ``samples``
    (each value in turn) training images; as many CIFAR-10 clients holding all 10 classes
    fine-tune on ``cifar10_samples`` images; ``trials`` draws of new clients (the models are
    trained once). CPU default: new clients hold pairs of held-out classes (chance 1/2)."""

    samples: Annotated[tuple[int, ...], Each(Ge(1))] = (20, 100)
    cifar10_samples: Annotated[tuple[int, ...], Each(Ge(1))] = (100,)
    new_clients: Annotated[int, Ge(1)] = 4
    new_classes_per_client: Annotated[int, Ge(1)] = 2
    test_per_client: Annotated[int, Ge(1)] = 100
    trials: Annotated[int, Ge(1)] = 1

    PAPER = sourced(PAPER_SETTINGS, ours={"samples": (50, 100, 200, 500), "cifar10_samples": (50, 100, 200, 500),
                                          "new_classes_per_client": 5, "test_per_client": 200},
                    doc="The paper's 80/20 classes, tau = 50, 10 fine-tuning epochs and 5 trials x 5 new clients; "
                        "80 clients of C = 5 classes (500 images each on the full dataset); the rest as in "
                        "PretrainSettings.PAPER. Sample sizes per new client: our choice.")
    LONG = Profile({"samples": (50, 500), "cifar10_samples": (50, 500), "trials": 1},
                   doc="PretrainSettings.LONG's pre-training (shared with 4.9), then one trial (the paper: 5) of 5 "
                       "new clients with 5 held-out classes each, and 5 CIFAR-10 clients, each fine-tuning for 10 "
                       "epochs on 50 and on 500 images.")
    GPU = Profile({"trials": 1}, doc="PretrainSettings.GPU's pre-training (shared with 4.9), one trial of 5 new "
                                     "clients.")


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


def target_clients(s: TransferSettings, cifar: D.CifarData, classes, target: int, n: int, trial: int = 0):
    """The new clients of :func:`run_transfer` for target number ``target`` (0: the held-out
    CIFAR-100 ``classes``, ``s.new_classes_per_client`` of them each; 1: CIFAR-10, ``classes`` None,
    all ten) and trial ``trial``, each keeping ``n`` random training images, and the seed their
    fine-tuning derives its own from (:func:`~replearn.experiments.ch04_fedavg.cifar_transfer.finetune_all`). New clients
    hold distinct classes (a pair: chance 1/2), whatever the training split."""
    seed = derive_seed(s.seed, 20, target, trial)
    cpc = s.new_classes_per_client if classes is not None else cifar.n_classes
    cl = new_clients(cifar, classes, s.new_clients, cpc, s.test_per_client, seed, "disjoint")
    return cl.take_train(n, seed=derive_seed(seed, 3, n)), seed


def run_transfer(s: TransferSettings, *, cifar10: D.CifarData | None = None,
                 cifar100: D.CifarData | None = None) -> TransferResult:
    """Paper Fig. 5 (see the module docstring)."""
    cifar10 = cifar10 if cifar10 is not None else D.load_cifar("cifar10")
    cifar100 = cifar100 if cifar100 is not None else D.load_cifar("cifar100")
    require_data(cifar10, s.full_data, "TransferSettings")
    pre = pretrain(s, cifar100)
    acc = {}
    targets = {"cifar100-new": (cifar100, pre.new_classes, s.samples), "cifar10": (cifar10, None, s.cifar10_samples)}
    for t_i, (target, (cifar, classes, samples)) in enumerate(targets.items()):
        n_cls = len(classes) if classes is not None else cifar.n_classes
        for tau, state in pre.states.items():
            rows = []
            for n in samples:
                row = []
                for trial in range(s.trials):
                    cl, seed = target_clients(s, cifar, classes, t_i, n, trial)
                    _, res = finetune_all(s, state, cl, n_cls, seed)
                    row.append(res.final.accuracy)
                rows.append(torch.cat(row))
            acc[(target, tau)] = torch.stack(rows)
    return TransferResult(s.tau, {"cifar100-new": tuple(s.samples), "cifar10": tuple(s.cifar10_samples)}, acc,
                          pre.client_accuracy, (cifar100.describe(), cifar10.describe()))


# --------------------------------------------------------------------------- what the page shows

#: The paper's claim that the page checks (Fig. 5).
PAPER_CLAIM = "Fig. 5: FedAvg's body fine-tunes to a higher accuracy than D-SGD's on new clients"
#: The new clients of each target, as the tables and figures name them.
TARGET_NAMES = {"cifar100-new": "CIFAR-100, unseen classes", "cifar10": "CIFAR-10"}


def method_names(tau: int) -> dict[int, str]:
    """``{tau: "FedAvg, τ = tau", 1: "D-SGD"}``."""
    return {1: "D-SGD", tau: f"FedAvg, τ = {tau}"}


def pretrain_classes(settings) -> int:
    """The number of CIFAR-100 classes the clients pre-train on (settings or a results file's
    settings dict): ``n_pretrain``, else all but the ``n_new`` held out."""
    get = settings.get if isinstance(settings, dict) else lambda k: getattr(settings, k)
    return get("n_pretrain") or 100 - get("n_new")


def chance(new_classes_per_client: int) -> dict[str, float]:
    """Chance accuracy of a new client per target: 1 / its classes (CIFAR-10: 1/10)."""
    return {"cifar100-new": 1 / new_classes_per_client, "cifar10": 1 / 10}


def pretrain_accuracies(runs, tau: int) -> dict[int, list[float]]:
    """``{tau: [...], 1: [...]}``: FedAvg's and D-SGD's pre-training accuracy, one per run (seed)."""
    return {t: [r.pretrain_accuracy[t] for r in runs] for t in (tau, 1)}


def accuracies(runs, tau: int) -> dict[tuple[str, int], tuple[list[float], list[float]]]:
    """``{(target, samples): (FedAvg's, D-SGD's)}`` mean fine-tuned accuracy of the new
    clients, one value per run (seed), targets and sample sizes in the runs' order."""
    acc = {}
    for target, samples in runs[0].samples.items():
        for j, n in enumerate(samples):
            acc[(target, n)] = ([float(r.mean(target, tau)[j]) for r in runs],
                                [float(r.mean(target, 1)[j]) for r in runs])
    return acc


def long_pretrain_accuracies(long) -> dict[int, list[float]]:
    """:func:`pretrain_accuracies` read from a committed results file, FedAvg first."""
    tau = int(long.settings["tau"])
    return {t: long.values("pretrain_accuracy", str(t)) for t in (tau, 1)}


def long_accuracies(long) -> dict[tuple[str, int], tuple[list[float], list[float]]]:
    """:func:`accuracies` read from a committed results file."""
    tau, acc = int(long.settings["tau"]), {}
    for target, key in (("cifar100-new", "samples"), ("cifar10", "cifar10_samples")):
        for j, n in enumerate(long.settings[key]):
            acc[(target, n)] = tuple(long.values("mean_accuracy", f"{target}/{t}", j) for t in (tau, 1))
    return acc


def settings_rows(s) -> list[tuple[str, str]]:
    """The settings of a run (settings object or a results file's settings dict) in words, for
    :func:`replearn.book.wording.settings_table`."""
    k = pretrain_classes(s)
    return [("pre-training", f"{k} CIFAR-100 classes, {w.get(s, 'n_new')} others held out; "
                             f"{w.get(s, 'clients')} clients of {w.get(s, 'classes_per_client')} single-class shards"),
            ("network", w.network(s)),
            ("training", w.training(s)),
            ("local updates", f"{w.get(s, 'total_steps'):,} per participating client; FedAvg with "
                              f"τ = {w.get(s, 'tau')} against D-SGD"),
            ("new clients", f"{w.get(s, 'new_clients')} per seed on each target: {w.get(s, 'new_classes_per_client')} "
                            f"unseen CIFAR-100 classes each, or all 10 CIFAR-10 classes"),
            ("fine-tuning", f"{w.get(s, 'ft_epochs')} epochs of SGD on the whole network (a fresh head), step size "
                            f"{fmt(w.get(s, 'ft_lr'), 'g')}, on " + " or ".join(str(n) for n in w.get(s, 'samples')) +
                            " CIFAR-100 images, " + " or ".join(str(n) for n in w.get(s, 'cifar10_samples')) +
                            " CIFAR-10 images"),
            ("seeds", w.seeds(s))]


def glue_tables(pre: dict, acc: dict, s, prefix: str = "tr"):
    """One table in percent: the pre-training accuracy, then the fine-tuned accuracy per target and
    sample size, FedAvg's and D-SGD's (mean ± sd over seeds) and their paired difference in
    percentage points. Glued for the prose: ``{prefix}-pre-fedavg`` / ``-dsgd``,
    ``{prefix}-chance-pre``, and per target and size ``{prefix}-{target}-{n}-fedavg``, ``-dsgd``
    and ``-diff``; ``s``: the run's settings (object or results file dict). Returns the table."""
    tau, k, n = max(pre), pretrain_classes(s), len(pre[1])
    glue_text(f"{prefix}-chance-pre", fmt(100 / k, ".1f"))
    rows = [[f"pre-training clients ({k} classes)", "",
             *(glue_pm(f"{prefix}-pre-{name}", pre[t], scale=100).text for t, name in ((tau, "fedavg"), (1, "dsgd"))),
             glue_diff(f"{prefix}-pre-diff", pre[tau], pre[1], scale=100, unit="points").text]]
    for (target, size), (fed, dsgd) in acc.items():
        rows.append([TARGET_NAMES[target], str(size),
                     *(glue_pm(f"{prefix}-{target}-{size}-{name}", v, scale=100).text
                       for name, v in (("fedavg", fed), ("dsgd", dsgd))),
                     glue_diff(f"{prefix}-{target}-{size}-diff", fed, dsgd, scale=100, unit="points").text])
    return Table(["clients", "images each", method_names(tau)[tau], "D-SGD", "FedAvg − D-SGD [95% interval]"], rows,
                 align="lrrrr", caption=f"test accuracy in %, mean ± sd over {n} seeds; the difference paired over seeds")


def lowest(acc: dict) -> dict[str, float]:
    """The lowest fine-tuned accuracy of either method at any sample size and seed, per target."""
    return {t: min(min(v[i]) for (tt, _), v in acc.items() if tt == t for i in (0, 1)) for t, _ in acc}


def phrases(c) -> dict:
    """The phrases :func:`replearn.book.claims.verdict` glues for the outcome of the comparison
    ``c``: the book's own words, "holds", "not separated (n = ...)" or "opposite"."""
    return dict(holds="holds", fails=f"not separated (n = {c.n})", opposite="opposite")


def checks(pre: dict, acc: dict, *, scale: str = "CPU") -> list[tuple[str, str, object, dict]]:
    """The page's verdicts as ``(name, label, comparison, options)`` for
    :func:`replearn.book.claims.verdict`, each by the paired 95% interval over seeds in percentage
    points (:func:`replearn.book.seeds.points`), FedAvg minus D-SGD as in the table: FedAvg's
    pre-training accuracy above D-SGD's, and at every target and sample size FedAvg's fine-tuned
    accuracy above D-SGD's (Fig. 5).
    ``scale="long"``: the names and labels of the committed near-paper run."""
    tau = max(pre)
    long = scale == "long"
    pre_name, run = ("tr-long", "near-paper run: ") if long else ("tr", "")
    extra = {"scale": "long"} if long else {}
    c = seeds.points(pre[tau], pre[1])
    out = [(f"{pre_name}-v-pre", f"{run}FedAvg's pre-training accuracy above D-SGD's", c, dict(phrases(c), **extra))]
    for (target, n), (fed, dsgd) in acc.items():
        c = seeds.points(fed, dsgd)
        out.append((f"{pre_name}-v-{target}-{n}", f"{run}{TARGET_NAMES[target]}, {n} images: FedAvg above D-SGD", c,
                    dict(phrases(c), paper=PAPER_CLAIM, **extra)))
    return out


def paper_table(lpre: dict, lacc: dict):
    """The paper's Fig. 5 (what its text states) beside the near-paper run (``lpre``, ``lacc``:
    :func:`long_pretrain_accuracies`, :func:`long_accuracies`): FedAvg minus D-SGD, paired over
    seeds, in percentage points, with the outcome."""
    def cell(a, b):
        c = points(a, b)
        return f"{c.word}: {c.text}"

    rows = [[f"{TARGET_NAMES[target]}, {n} images", "higher: significantly, in both plots", cell(*lacc[(target, n)])]
            for target, n in lacc]
    tau = max(lpre)
    rows.append(["pre-training clients", "not reported", cell(lpre[tau], lpre[1])])
    return Table(["FedAvg above D-SGD", "the paper (Fig. 5, its text)", f"near-paper run ({len(lpre[1])} seeds)"],
                 rows, align="lll", caption="each comparison paired over seeds: the outcome, then FedAvg minus D-SGD "
                                            "and its 95% interval")


def plot_transfer(acc: dict, tau: int, new_classes_per_client: int):
    """Fig. 5: for every target fine-tuned on two or more sample sizes, FedAvg's (with ``tau``) and
    D-SGD's fine-tuned accuracy in % (mean ± sd over seeds) against the training images per new
    client, with the chance level (a target run at one size only is a row of the table, not a
    panel); one legend, beside the panels, so that no curve or line crosses it. Returns the figure."""
    import matplotlib.pyplot as plt

    names = method_names(tau)
    targets = [t for t in dict.fromkeys(t for t, _ in acc) if sum(tt == t for tt, _ in acc) >= 2]
    if not targets:
        raise ValueError("plot_transfer needs a target fine-tuned on at least two sample sizes; "
                         "show a single size in the table")
    n_seeds = len(next(iter(acc.values()))[0])
    levels = chance(new_classes_per_client)
    fig, axes = plt.subplots(1, len(targets), figsize=(4.2 * len(targets) + 2.0, 3.6), squeeze=False)
    axes = axes[0]
    for ax, target in zip(axes, targets):
        samples = [n for t, n in acc if t == target]
        for i, (t, color) in enumerate(((tau, COLORS["FedAvg"]), (1, COLORS["D-GD"]))):
            stats = [mean_sd([100 * x for x in acc[(target, n)][i]]) for n in samples]
            ax.errorbar(samples, [m for m, _ in stats], yerr=[sd for _, sd in stats], color=color, marker="o",
                        capsize=4, label=names[t])
        ax.axhline(100 * levels[target], color="grey", ls=":", label="chance")
        ax.set_xscale("log")
        ax.set_xticks(samples, [str(n) for n in samples])
        ax.minorticks_off()
        ax.set(xlabel="training images per new client", ylabel="test accuracy after fine-tuning (%)",
               title=f"{TARGET_NAMES[target]}; {n_seeds} seeds")
    axes[-1].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)   # beside the axes
    plt.tight_layout()
    return fig


def summarise(r: TransferResult) -> dict:
    """One seed's result as its results file keeps it: the pre-trained accuracies, the sample sizes
    and the mean fine-tuned accuracy per target and tau."""
    return {"pretrain_accuracy": {str(t): v for t, v in r.pretrain_accuracy.items()},
            "samples": {k: list(v) for k, v in r.samples.items()},
            "mean_accuracy": {f"{target}/{tau}": floats(r.mean(target, tau)) for target, tau in r.accuracy}}


#: What ``scripts/run_results.py`` runs of this section; its seeds share the pre-training with 4.9's.
RESULTS = (Section("4.8", TransferSettings, run_transfer, summarise, work, run_group=("4.8", "4.9")),)
