"""Book 5.8: more local epochs help FedRep and hurt FedAvg (Collins, Hassani, Mokhtari,
Shakkottai 2021, Fig. 5).

CIFAR-10 over clients holding S classes each (:func:`replearn.neural.personalisation.make_federation`);
FedRep with ``E`` head epochs (and ``local_epochs`` body epochs) and FedAvg with ``E`` local
epochs, for every ``E`` in ``epochs``, from one initial network and one seed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from replearn.neural import data as D
from replearn.neural import algorithms
from replearn import neural
from replearn.backend import derive_seed
from replearn.checks import check_int
from replearn.book import scales
from replearn.book.scales import require_data
from replearn.neural.personalisation import AUTHORS_PIPELINE, PAPER_OPTIM, FederationSettings, make_federation


#: What the FedRep paper's text states of Fig. 5's setting, by settings field: (value, where).
PAPER_SETTINGS = {"dataset": ("cifar10", "FedRep paper, Fig. 5 caption"),
                  "train_per_client": (None, "FedRep paper, Sec. 5.2 (50,000/n each)"),
                  "train.participation": (0.1, "FedRep paper, Sec. 5.2 (r = 0.1)"),
                  "train.rounds": (100, "FedRep paper, Sec. 5.2 (T = 100 for CIFAR)")}

#: What the FedRep authors' code (lgcollins/FedRep) does, by settings field: (value, where). It
#: has no script for Fig. 5; these are its defaults and its optimiser and data pipeline.
AUTHORS_CODE = {**AUTHORS_PIPELINE}


@dataclass(frozen=True)
class EpochSettings(FederationSettings):
    """Fig. 5: ``dataset``, ``clients`` clients with S = ``classes_per_client`` classes; FedRep
    with ``E`` head epochs and FedAvg with ``E`` local epochs, for every ``E`` in ``epochs``.
    CPU default: 100 training images per client, 15 rounds, epochs (not steps) for both
    phases, E in {1, 3}."""

    dataset: str = "cifar10"
    epochs: tuple[int, ...] = (1, 3)
    train_per_client: int | None = 100
    train: neural.TrainConfig = replace(FederationSettings.train, rounds=15, eval_every=15, local_steps=None,
                                        head_steps=None)

    def validate(self) -> None:
        super().validate()
        if len(set(self.epochs)) != len(self.epochs):
            raise ValueError(f"epochs must be distinct, got {self.epochs!r}")
        for e in self.epochs:
            check_int(e, "epochs", 1)
        if self.dataset not in ("cifar10", "cifar100"):
            raise ValueError(f"unknown dataset {self.dataset!r}; use 'cifar10' or 'cifar100'")

    @classmethod
    def long(cls):
        """Near-paper on a CPU: the paper profile (n = 100, S = 2, r = 0.1, the authors' CNN and
        optimiser, float32) on the offline subset (20,000 of CIFAR-10's 50,000 training images,
        so 200 per client; 50 test images per client), E in {1, 5} (paper(): also 10 and 20),
        T = 50 rounds (the paper: 100), evaluated every round and reported as the mean of the
        last 10, 2 seeds (a seed takes about 15 minutes of one core here; E = 10 would double it)."""
        p = cls.paper()
        return replace(p, epochs=(1, 5), seeds=(0, 1), full_data=False,
                       train=replace(p.train, rounds=50))

    @classmethod
    def paper(cls):
        """n = 100, S = 2 (Sec. 5.2); E in {1, 5, 10, 20} is our choice (our copy of the paper
        has the caption of Fig. 5 but not its axis)."""
        return cls(clients=100, classes_per_client=2, epochs=(1, 5, 10, 20), **PAPER_OPTIM)

    @classmethod
    def gpu(cls):
        """The paper profile sized for a few minutes of one GPU on the offline subset (200
        images per client): E in {1, 5, 10}, T = 50, evaluated every 5 rounds (the final 10
        rounds' mean uses the evaluations in them), one seed, a round's 10 clients batched."""
        p = cls.paper()
        return replace(p, epochs=(1, 5, 10), seeds=(0,), full_data=False,
                       train=replace(p.train, rounds=50, eval_every=5, vmap_clients=10, augment=False))


def work(s: EpochSettings, *, batched: bool = True) -> dict:
    """:func:`replearn.book.scales.launch_estimate` of :func:`run_epochs` with ``s``: FedRep with E
    head epochs and ``local_epochs`` body epochs, FedAvg with E epochs, for every E."""
    per_round = sum(2 * e + s.train.local_epochs for e in s.epochs)
    steps, m = scales.federated_steps(s.dataset, s.full_data, s.clients, s.train_per_client, s.train, per_round)
    evals = 2 * len(s.epochs) * s.clients * -(-s.train.rounds // s.train.eval_every)
    return scales.launch_estimate(steps, evals, batched_clients=scales.batching(s.train, m, batched))


@dataclass(frozen=True)
class EpochResult:
    """``accuracy[method][j]``: personalised accuracy with ``epochs[j]`` local epochs
    (method "FedRep": head epochs; "FedAvg": local epochs); ``curves[method][j]``: accuracy
    after each round."""

    epochs: tuple[int, ...]
    accuracy: dict
    curves: dict
    train_sizes: torch.Tensor
    test_sizes: torch.Tensor
    data: str

    def error(self, method: str) -> torch.Tensor:
        return 1 - self.accuracy[method]


def run_epochs(s: EpochSettings, *, cifar: D.CifarData | None = None) -> EpochResult:
    """Paper Fig. 5 (see the module docstring)."""
    cifar = cifar if cifar is not None else D.load_cifar(s.dataset)
    require_data(cifar, s.full_data, "EpochSettings")
    fed = make_federation(cifar, s.clients, s.classes_per_client, train_per_client=s.train_per_client,
                          test_per_client=s.test_per_client, seed=s.seed, split=s.split)
    cl = fed.clients
    acc = {"FedRep": [], "FedAvg": []}
    curves = {"FedRep": [], "FedAvg": []}
    for e in s.epochs:
        for method in ("FedRep", "FedAvg"):
            model = s.network(s.dataset, fed.n_classes, derive_seed(s.seed, 3), cl.device)
            if method == "FedRep":
                r = algorithms.run("FedRep", model, cl, s.config(head_epochs=e))
            else:
                r = algorithms.run("FedAvg", model, cl, s.config(local_epochs=e))
            acc[method].append(r.accuracy)
            curves[method].append(r.test_accuracy)
    return EpochResult(tuple(s.epochs), {m: torch.tensor(v) for m, v in acc.items()},
                       {m: torch.stack(v) for m, v in curves.items()}, cl.train_sizes, cl.test_sizes,
                       cifar.describe())


# --------------------------------------------------------------------------- what the page shows

#: The two methods the page compares.
METHODS = ("FedRep", "FedAvg")


def accuracies(runs) -> dict[str, list[list[float]]]:
    """``{method: [per E: personalised accuracy (fraction), one per run]}``, E in the runs' order."""
    n = len(runs[0].epochs)
    return {m: [[float(r.accuracy[m][j]) for r in runs] for j in range(n)] for m in METHODS}


def long_accuracies(long) -> dict[str, list[list[float]]]:
    """:func:`accuracies` read from a committed results file."""
    n = len(long.settings["epochs"])
    return {m: [long.values("accuracy", m, j) for j in range(n)] for m in METHODS}


def glue_accuracies(acc: dict, epochs, prefix: str) -> tuple[dict, dict]:
    """Glue every method's accuracy at every E in % (``{prefix}-<method>-<E>``: mean ± sd over
    seeds), then each method's change from the first to the last E (``{prefix}-<method>-change``:
    paired difference in points); returns ``(shown, change)``."""
    from replearn.book.claims import glue_diff, glue_pm

    shown = {m: [glue_pm(f"{prefix}-{m.lower()}-{e}", acc[m][j], scale=100) for j, e in enumerate(epochs)]
             for m in acc}
    change = {m: glue_diff(f"{prefix}-{m.lower()}-change", acc[m][-1], acc[m][0], scale=100) for m in acc}
    return shown, change


def accuracy_table(shown: dict, epochs, caption: str):
    """One row per E: FedRep's and FedAvg's accuracy (% mean ± sd, :func:`glue_accuracies`)."""
    from replearn.book.plotting import Table

    return Table(["E", "FedRep %", "FedAvg %"],
                 [[str(e), shown["FedRep"][j].text, shown["FedAvg"][j].text] for j, e in enumerate(epochs)],
                 caption=caption)


def describe_change(change: dict, epochs) -> str:
    """One line per method: its change from the first to the last E, paired over seeds."""
    return "\n".join(f"{m}: E = {epochs[-1]} minus E = {epochs[0]}, paired over seeds: {c} points"
                     for m, c in change.items())


def checks(acc: dict, epochs) -> list[tuple[str, str, object, dict]]:
    """The CPU run's verdicts as ``(name, label, condition, options)`` for
    :func:`replearn.book.claims.verdict`: FedRep above FedAvg at every E (Fig. 5; required), more
    head epochs do not hurt FedRep (required) and help it, and FedAvg's accuracy differs between
    the first and last E, each beyond the spread over seeds."""
    from replearn.book import seeds

    first, last = epochs[0], epochs[-1]
    rep, avg = acc["FedRep"], acc["FedAvg"]
    return [("ep-v-every", "FedRep beats FedAvg at every E by more than the spread (paper Fig. 5)",
             all(seeds.separated(rep[j], avg[j]) for j in range(len(epochs))),
             dict(require=True, holds="is above FedAvg's at every E by more than the spread over seeds",
                  fails="is not above FedAvg's at every E by more than the spread over seeds",
                  paper="Fig. 5: FedRep's error below FedAvg's at every E")),
            ("ep-v-nohurt", f"more head epochs do not hurt FedRep: E = {first} is not better than E = {last} "
                            f"beyond the spread",
             not seeds.separated(rep[0], rep[-1]),
             dict(require=True, absence=True, holds=f"is not lower at E = {last} than at E = {first} beyond the spread",
                  fails=f"is lower at E = {last} than at E = {first} by more than the spread",
                  paper="Fig. 5: FedRep's error does not grow with E")),
            ("ep-v-help", f"more head epochs help FedRep: E = {last} better than E = {first} beyond the spread",
             seeds.separated(rep[-1], rep[0]),
             dict(holds=f"is higher at E = {last} than at E = {first} by more than the spread",
                  fails=f"is not higher at E = {last} than at E = {first} beyond the spread")),
            ("ep-v-fedavg", f"FedAvg's accuracy differs between E = {first} and E = {last} beyond the spread",
             seeds.separated(avg[-1], avg[0]) or seeds.separated(avg[0], avg[-1]),
             dict(holds="differs between the two values of E by more than the spread",
                  fails="does not differ between the two values of E beyond the spread"))]


def long_checks(lacc: dict, epochs) -> list[tuple[str, str, object, dict]]:
    """The committed near-paper run's verdicts (as :func:`checks`, none required): FedRep above
    FedAvg at every E, FedRep not lower and higher at the last E, FedAvg not higher there."""
    from replearn.book import seeds

    first, last = epochs[0], epochs[-1]
    rf, fa = lacc["FedRep"], lacc["FedAvg"]
    return [("ep-long-v-every", "near-paper run: FedRep beats FedAvg at every E by more than the spread",
             all(seeds.separated(rf[j], fa[j]) for j in range(len(epochs))),
             dict(holds="is above FedAvg's at every E by more than the spread over seeds",
                  fails="is not above FedAvg's at every E by more than the spread over seeds",
                  paper="Fig. 5: FedRep's error below FedAvg's at every E", scale="long")),
            ("ep-long-v-nohurt", f"near-paper run: FedRep's accuracy at E = {last} not below E = {first} beyond the "
                                 f"spread",
             not seeds.separated(rf[0], rf[-1]),
             dict(absence=True, holds=f"is not lower at E = {last} beyond the spread",
                  fails=f"is lower at E = {last} by more than the spread",
                  paper="Fig. 5: FedRep's error does not grow with E", scale="long")),
            ("ep-long-v-help", f"near-paper run: FedRep's accuracy higher at E = {last} than at E = {first} beyond "
                               f"the spread",
             seeds.separated(rf[-1], rf[0]),
             dict(holds=f"is higher at E = {last} by more than the spread",
                  fails=f"is not higher at E = {last} beyond the spread", scale="long")),
            ("ep-long-v-fedavg", f"near-paper run: FedAvg's accuracy not higher at E = {last} than at E = {first} "
                                 f"beyond the spread",
             not seeds.separated(fa[-1], fa[0]),
             dict(absence=True, holds=f"is not higher at E = {last} beyond the spread",
                  fails=f"is higher at E = {last} by more than the spread",
                  paper="Fig. 5: more local epochs do not necessarily improve FedAvg", scale="long"))]


def plot_epochs(acc: dict, s: EpochSettings):
    """Fig. 5: local test error (%) of FedRep and FedAvg against the local epochs E (mean ± sd
    over seeds), with the error of a majority-class head. Returns the figure."""
    import matplotlib.pyplot as plt
    import numpy as np

    from replearn.book.plotting import COLORS
    from replearn.book.seeds import mean_sd

    x = np.arange(len(s.epochs))
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for m in METHODS:
        err = [100 * (1 - mean_sd(v)[0]) for v in acc[m]]
        sd = [100 * mean_sd(v)[1] for v in acc[m]]
        ax.errorbar(x, err, yerr=sd, fmt="o-", capsize=4, color=COLORS[m],
                    label=f"{m} ({'head epochs' if m == 'FedRep' else 'local epochs'})")
    ax.axhline(100 * (1 - 1 / s.classes_per_client), color="k", ls=":", lw=1,
               label="error of a majority-class head")
    ax.set(xticks=x, xticklabels=[str(e) for e in s.epochs], xlabel="local epochs E",
           ylabel="local test error (%)", ylim=(0, 100),
           title=f"CIFAR-10, n = {s.clients}, S = {s.classes_per_client}, T = {s.train.rounds}; "
                 f"{len(acc['FedRep'][0])} seeds")
    ax.legend(fontsize=8)
    plt.tight_layout()
    return fig


def paper_table(acc: dict, lacc: dict, epochs, lepochs):
    """The paper's claims about Fig. 5 beside the CPU run (``acc``, E in ``epochs``) and the
    near-paper run (``lacc``, E in ``lepochs``), in points, paired over seeds."""
    from replearn.book.claims import compared
    from replearn.book.plotting import Table

    def pts(v):
        return [100 * x for x in v]

    def both(a, i, b, j):
        return [compared(pts(acc[a][i]), pts(acc[b][j])), compared(pts(lacc[a][i]), pts(lacc[b][j]))]

    rows = [["FedRep vs FedAvg, E = 1", "higher (lower error at every E)", *both("FedRep", 0, "FedAvg", 0)],
            [f"FedRep vs FedAvg, largest E ({epochs[-1]} / {lepochs[-1]})", "higher (lower error at every E)",
             *both("FedRep", -1, "FedAvg", -1)],
            ["FedRep, largest E vs E = 1", "not lower (non-decreasing in E)", *both("FedRep", -1, "FedRep", 0)],
            ["FedAvg, largest E vs E = 1", "not necessarily higher", *both("FedAvg", -1, "FedAvg", 0)]]
    return Table(["claim", "paper (Fig. 5, its text)",
                  f"CPU default ({len(acc['FedRep'][0])} seeds, E in {tuple(epochs)})",
                  f"near-paper ({len(lacc['FedRep'][0])} seeds, E in {tuple(lepochs)})"], rows, align="llll",
                 caption="first minus second, in points: the paired mean difference over seeds with its 95% interval; "
                         "'beyond the spread': the 95% interval of the paired difference excludes 0")
