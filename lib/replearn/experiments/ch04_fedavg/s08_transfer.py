"""Book 4.8: FedAvg's representation transfers to new tasks better than D-SGD's (Collins et al.
2022, Fig. 5).

FedAvg and D-SGD are pre-trained on CIFAR-100 clients at a matched number of local updates
(:func:`replearn.neural.transfer.pretrain`); then new clients holding held-out CIFAR-100 classes, and
CIFAR-10 clients holding all 10 classes, fine-tune the whole model
(:func:`replearn.neural.transfer.finetune_all`, a fresh head) on varying numbers of training images;
accuracy per new client.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from replearn.neural import data as D
from replearn.backend import derive_seed
from replearn.checks import check_int
from replearn.book import scales
from replearn.book.scales import require_data
from replearn.neural.transfer import PAPER_PRETRAIN, PretrainSettings, describe_pretraining, finetune_all, new_clients, pretrain, pretrain_work


#: What the sources state of Fig. 5's setting, by settings field: (value, where it says so).
PAPER_SETTINGS = {"clients": (80, "FedAvg-FT paper, Sec. 5.2 (80 clients)"),
                  "n_new": (20, "FedAvg-FT paper, Sec. 5.2 (20 new classes)"),
                  "tau": (50, "FedAvg-FT paper, Fig. 5 caption; talk"),
                  "total_steps": (125_000, "talk (T tau = 125,000: tau = 50, T = 2,500)"),
                  "ft_epochs": (10, "FedAvg-FT paper, Sec. 5.2 (10 epochs of SGD)"),
                  "trials": (5, "FedAvg-FT paper, Fig. 5 caption (five trials)"),
                  "new_clients": (5, "FedAvg-FT paper, Fig. 5 caption (five new clients per trial)")}

#: What the authors' code does: the FedAvg-FT paper (Collins et al., 2022) has no public code, so
#: Appendix B's column says so for every setting.
AUTHORS_CODE = None


@dataclass(frozen=True)
class TransferSettings(PretrainSettings):
    """Fig. 5: after :func:`~replearn.neural.transfer.pretrain`, ``new_clients`` new clients per trial
    holding ``new_classes_per_client`` of the held-out CIFAR-100 classes fine-tune on ``samples``
    (each value in turn) training images; as many CIFAR-10 clients holding all 10 classes
    fine-tune on ``cifar10_samples`` images; ``trials`` draws of new clients (the models are
    trained once). CPU default: new clients hold pairs of held-out classes (chance 1/2)."""

    samples: tuple[int, ...] = (20, 100)
    cifar10_samples: tuple[int, ...] = (100,)
    new_clients: int = 4
    new_classes_per_client: int = 2
    test_per_client: int = 100
    trials: int = 1

    def validate(self) -> None:
        super().validate()
        for name in ("samples", "cifar10_samples"):
            for v in getattr(self, name):
                check_int(v, name, 1)
        for name in ("new_clients", "new_classes_per_client", "test_per_client", "trials"):
            check_int(getattr(self, name), name, 1)

    @classmethod
    def paper(cls):
        """The paper's 80/20 classes, tau = 50, 10 fine-tuning epochs and 5 trials x 5 new clients;
        80 clients of C = 5 classes (500 images each on the full dataset); the rest as in
        :data:`~replearn.neural.transfer.PAPER_PRETRAIN`. Sample sizes per new client: our choice."""
        return cls(**PAPER_PRETRAIN, samples=(50, 100, 200, 500), cifar10_samples=(50, 100, 200, 500),
                   new_clients=5, new_classes_per_client=5, trials=5, test_per_client=200)

    @classmethod
    def long(cls):
        """:meth:`~replearn.neural.transfer.PretrainSettings.long`'s pre-training (shared with 4.9), then
        one trial (the paper: 5) of 5 new clients with 5 held-out classes each, and 5 CIFAR-10
        clients, each fine-tuning for 10 epochs on 50 and on 500 images."""
        return replace(super().long(), samples=(50, 500), cifar10_samples=(50, 500), trials=1)

    @classmethod
    def gpu(cls):
        """:meth:`~replearn.neural.transfer.PretrainSettings.gpu`'s pre-training (shared with 4.9), one
        trial of 5 new clients."""
        return replace(super().gpu(), trials=1)


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


def run_transfer(s: TransferSettings, *, cifar10: D.CifarData | None = None,
                 cifar100: D.CifarData | None = None) -> TransferResult:
    """Paper Fig. 5 (see the module docstring)."""
    cifar10 = cifar10 if cifar10 is not None else D.load_cifar("cifar10")
    cifar100 = cifar100 if cifar100 is not None else D.load_cifar("cifar100")
    require_data(cifar10, s.full_data, "TransferSettings")
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
                    # new clients hold distinct classes (a pair: chance 1/2), whatever the training split
                    cl = new_clients(cifar, classes, s.new_clients, cpc, s.test_per_client, seed, "disjoint")
                    cl = cl.take_train(n, seed=derive_seed(seed, 3, n))
                    _, res = finetune_all(s, state, cl, n_cls, seed)
                    row.append(res.final.accuracy)
                rows.append(torch.cat(row))
            acc[(target, tau)] = torch.stack(rows)
    return TransferResult(s.tau, {"cifar100-new": tuple(s.samples), "cifar10": tuple(s.cifar10_samples)}, acc,
                          pre.client_accuracy, (cifar100.describe(), cifar10.describe()))


# --------------------------------------------------------------------------- what the page shows

#: The paper's claim that the page checks (Fig. 5).
PAPER_CLAIM = "Fig. 5: FedAvg's body fine-tunes to a higher accuracy than D-SGD's on new clients"
#: The figure's panel titles, by target.
TARGET_TITLES = {"cifar100-new": "CIFAR-100, pairs of unseen classes", "cifar10": "CIFAR-10"}


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
    """:func:`pretrain_accuracies` read from a committed results file, D-SGD first."""
    return {t: long.values("pretrain_accuracy", str(t)) for t in method_names(int(long.settings["tau"]))}


def long_accuracies(long) -> dict[tuple[str, int], tuple[list[float], list[float]]]:
    """:func:`accuracies` read from a committed results file."""
    tau, acc = int(long.settings["tau"]), {}
    for target, key in (("cifar100-new", "samples"), ("cifar10", "cifar10_samples")):
        for j, n in enumerate(long.settings[key]):
            acc[(target, n)] = tuple(long.values("mean_accuracy", f"{target}/{t}", j) for t in (tau, 1))
    return acc


def glue_accuracies(acc: dict, prefix: str) -> list[list[str]]:
    """Glue, per target and sample size of ``acc`` (:func:`accuracies`), FedAvg's and D-SGD's
    mean ± sd (``{prefix}-{target}-{n}-fedavg``, ``-dsgd``) and their paired difference
    (``-diff``); returns the rows of :func:`accuracy_table`."""
    from replearn.book.claims import glue_diff, glue_pm

    rows = []
    for (target, n), (fed, dsgd) in acc.items():
        shown = [glue_pm(f"{prefix}-{target}-{n}-{name}", v) for name, v in (("fedavg", fed), ("dsgd", dsgd))]
        shown.append(glue_diff(f"{prefix}-{target}-{n}-diff", fed, dsgd))
        rows.append([target, str(n), *(s.text for s in shown)])
    return rows


def pretrain_table(shown: dict, caption: str):
    """One row per method (the order of ``shown``: ``{tau: MeanPm}``): its pre-training accuracy."""
    from replearn.book.plotting import Table

    tau = max(shown)
    names = method_names(tau)
    return Table(["method", "pre-training accuracy"], [[names[t], shown[t].text] for t in shown], caption=caption)


def accuracy_table(rows: list, tau: int, caption: str):
    """The rows of :func:`glue_accuracies` under their header (FedAvg with ``tau``)."""
    from replearn.book.plotting import Table

    return Table(["new clients", "samples", method_names(tau)[tau], "D-SGD", "FedAvg − D-SGD [95% interval]"],
                 rows, align="lrrrr", caption=caption)


def glue_tables(pre: dict, acc: dict, s: TransferSettings) -> tuple:
    """The CPU run's two tables (pre-training accuracy; fine-tuned accuracy with the paired
    difference), their strings glued for the prose (``tr-pre-<tau>``, ``tr-chance-pre`` and
    :func:`glue_accuracies` under ``tr``)."""
    from replearn.book.claims import fmt, glue_pm, glue_text

    k, n = pretrain_classes(s), len(pre[1])
    shown = {t: glue_pm(f"tr-pre-{t}", v) for t, v in pre.items()}
    glue_text("tr-chance-pre", fmt(1 / k, ".2f"))
    rows = glue_accuracies(acc, "tr")
    return (pretrain_table(shown, f"accuracy on the training clients' test images ({k} CIFAR-100 classes, chance "
                                  f"{fmt(1 / k, '.2f')}; {s.total_steps} local updates per participating client), "
                                  f"mean ± sd over {n} seeds"),
            accuracy_table(rows, s.tau, f"test accuracy after fine-tuning, mean ± sd over {n} seeds"))


def glue_long_tables(lpre: dict, lacc: dict, ls: dict) -> tuple:
    """The long run's two tables, as :func:`glue_tables`, glued under ``tr-long`` (with the
    run's local updates, ``tr-long-steps``); ``ls``: the results file's settings."""
    from replearn.book.claims import fmt, glue_pm, glue_text

    lk, n = pretrain_classes(ls), len(lpre[1])
    shown = {t: glue_pm(f"tr-long-pre-{'dsgd' if t == 1 else 'fedavg'}", v) for t, v in lpre.items()}
    glue_text("tr-long-chance-pre", fmt(1 / lk, ".3f"))
    glue_text("tr-long-steps", f"{ls['total_steps']:,}")
    rows = glue_accuracies(lacc, "tr-long")
    return (pretrain_table(shown, f"long profile (near-paper), committed results ({lk} CIFAR-100 classes, chance "
                                  f"{fmt(1 / lk, '.3f')}), mean ± sd over {n} seeds"),
            accuracy_table(rows, int(ls["tau"]), f"long profile: test accuracy after fine-tuning (chance "
                                                 f"{fmt(1 / ls['new_classes_per_client'], '.1f')} on cifar100-new, "
                                                 f"0.1 on cifar10), mean ± sd over {n} seeds"))


def lowest(acc: dict) -> dict[str, float]:
    """The lowest fine-tuned accuracy of either method at any sample size and seed, per target."""
    return {t: min(min(v[i]) for (tt, _), v in acc.items() if tt == t for i in (0, 1)) for t, _ in acc}


def checks(pre: dict, acc: dict, *, scale: str = "CPU") -> list[tuple[str, str, object, dict]]:
    """The page's verdicts as ``(name, label, condition, options)`` for
    :func:`replearn.book.claims.verdict`: D-SGD's pre-training accuracy above FedAvg's, and at
    every target and sample size FedAvg's fine-tuned accuracy above D-SGD's (Fig. 5), each beyond
    the spread over seeds. ``scale="long"``: the names and wording of the committed long run."""
    from replearn.book import seeds

    tau = max(pre)
    long = scale == "long"
    pre_name, run, sep = ("tr-long", "long run, ", "the spread") if long else ("tr", "", "the spread over seeds")
    extra = {"scale": "long"} if long else {}
    out = [(f"{pre_name}-v-pre", f"{'long run: ' if long else ''}D-SGD's pre-training accuracy above FedAvg's by "
                                 f"more than {sep}",
            seeds.separated(pre[1], pre[tau]),
            dict(holds="is above FedAvg's by more than the spread over seeds",
                 fails=("is not above FedAvg's by more than the spread over seeds" if long
                        else "is not separated from FedAvg's by more than the spread over seeds"), **extra))]
    for (target, n), (fed, dsgd) in acc.items():
        out.append((f"{pre_name}-v-{target}-{n}", f"{run}{target}, n = {n}: FedAvg above D-SGD by more than {sep}",
                    seeds.separated(fed, dsgd),
                    dict(holds="is above D-SGD's by more than the spread over seeds",
                         fails=("is not above D-SGD's by more than the spread over seeds" if long
                                else "is not separated from D-SGD's by more than the spread over seeds"),
                         paper=PAPER_CLAIM, **extra)))
    return out


def describe_long(ls: dict, cfg: TransferSettings) -> str:
    """What the committed long run pre-trained, beside the CPU run of the page (``cfg``)."""
    return (f"{describe_pretraining(ls)}\n(the CPU run above: the {cfg.model} network in {cfg.dtype}, "
            f"{cfg.clients} clients of {cfg.classes_per_client} classes, {cfg.total_steps} local updates, "
            f"tau = {cfg.tau})")


def paper_table(pre: dict, acc: dict, lpre: dict, lacc: dict, new_classes: tuple[int, int]):
    """The paper's Fig. 5 beside the CPU run (``pre``, ``acc``: :func:`pretrain_accuracies`,
    :func:`accuracies`) and the long run (``lpre``, ``lacc``): FedAvg minus D-SGD, paired over
    seeds, per target and sample size ("not run" where a run has no such size), and the
    pre-training accuracy; ``new_classes``: the classes of a new CIFAR-100 client in each run."""
    from replearn.book.claims import compared
    from replearn.book.plotting import Table

    def cell(a, key):
        return compared(*a[key]) if key in a else "not run"

    keys = sorted(set(acc) | set(lacc), key=lambda k: (k[0] != "cifar100-new", k[1]))
    rows = [[f"{target}, n = {n}", "higher: significantly, in both plots", cell(acc, (target, n)),
             cell(lacc, (target, n))] for target, n in keys]
    tau, ltau = max(pre), max(lpre)
    rows.append(["pre-training accuracy", "not reported", compared(pre[tau], pre[1]), compared(lpre[ltau], lpre[1])])
    return Table(["FedAvg vs D-SGD", "paper (Fig. 5, its text)", f"CPU default ({len(pre[1])} seeds)",
                  f"near-paper long run ({len(lpre[1])} seeds)"], rows, align="llll",
                 caption=f"the paper's claim and our two runs; FedAvg minus D-SGD, paired over seeds, with its 95% "
                         f"interval; new CIFAR-100 clients hold {new_classes[0]} held-out classes in the CPU default, "
                         f"{new_classes[1]} in the long run")


def plot_transfer(acc: dict, tau: int, new_classes_per_client: int):
    """Fig. 5: per target, FedAvg's (with ``tau``) and D-SGD's fine-tuned accuracy (mean ± sd over seeds)
    against the training samples per new client, with the chance level; one legend, beside the
    panels, so that no curve or line crosses it. Returns the figure."""
    import matplotlib.pyplot as plt

    from replearn.book.plotting import COLORS
    from replearn.book.seeds import mean_sd

    names = method_names(tau)
    targets = list(dict.fromkeys(t for t, _ in acc))
    n_seeds = len(next(iter(acc.values()))[0])
    levels = chance(new_classes_per_client)
    fig, axes = plt.subplots(1, len(targets), figsize=(10.0, 3.6))
    axes = np.atleast_1d(axes)
    for ax, target in zip(axes, targets):
        samples = [n for t, n in acc if t == target]
        for i, (t, color) in enumerate(((tau, COLORS["FedAvg"]), (1, COLORS["D-GD"]))):
            means = [mean_sd(acc[(target, n)][i])[0] for n in samples]
            sds = [mean_sd(acc[(target, n)][i])[1] for n in samples]
            ax.errorbar(samples, means, yerr=sds, color=color, marker="o", capsize=4, label=names[t])
        ax.axhline(levels[target], color="grey", ls=":", label="chance")
        ax.set_xscale("log")
        ax.set_xticks(samples, [str(n) for n in samples])
        ax.minorticks_off()
        ax.set(xlabel="training samples per new client", ylabel="test accuracy after fine-tuning",
               title=f"{TARGET_TITLES.get(target, target)}; {n_seeds} seeds")
    axes[-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)   # beside the axes
    plt.tight_layout()
    return fig
