"""Book 5.8: more local epochs help FedRep and hurt FedAvg (Collins, Hassani, Mokhtari,
Shakkottai 2021, Fig. 5).

CIFAR-10 over clients holding S classes each (:func:`replearn.experiments.ch05_fedrep.cifar_federation.make_federation`);
FedRep with ``E`` head epochs (and ``local_epochs`` body epochs) and FedAvg with ``E`` local
epochs, for every ``E`` in ``epochs``, from one initial network and one seed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated

import torch

from replearn.neural import algorithms, data as D
from replearn import neural
from replearn.backend import derive_seed
from replearn.book import scales, seeds, wording
from replearn.book.results import Section, floats
from replearn.book.scales import require_data
from replearn.experiments.ch05_fedrep.cifar_federation import (AUTHORS_PIPELINE, PAPER_CIFAR, FederationSettings,
                                                               make_federation)
from replearn.book.claims import fmt, glue_diff, glue_pm
from replearn.table import Table
from replearn.book.plotting import COLORS
from replearn.book.seeds import mean_sd
from replearn.settings import Distinct, Each, Ge, OneOf, Profile, sourced


#: What the FedRep paper's text states of Fig. 5's setting, by settings field: (value, where).
PAPER_SETTINGS = {"dataset": ("cifar10", "FedRep paper, Fig. 5 caption"),
                  "clients": (100, "FedRep paper, Sec. 5.2 (Fig. 5: n = 100 clients)"),
                  "classes_per_client": (2, "FedRep paper, Sec. 5.2 (Fig. 5: S = 2 classes each)"),
                  **{name: PAPER_CIFAR[name] for name in ("train.last_rounds", "train_per_client",
                                                          "train.participation", "train.rounds")}}

#: What the FedRep authors' code (lgcollins/FedRep) does, by settings field: (value, where). It
#: has no script for Fig. 5; these are its defaults and its optimiser and data pipeline.
AUTHORS_CODE = {**AUTHORS_PIPELINE}


@dataclass(frozen=True)
class EpochSettings(FederationSettings):
    """Fig. 5: ``dataset``, ``clients`` clients with S = ``classes_per_client`` classes; FedRep
    with ``E`` head epochs and FedAvg with ``E`` local epochs, for every ``E`` in ``epochs``.
    CPU default: 100 training images per client, 15 rounds, epochs (not steps) for both
    phases, E in {1, 3}."""

    dataset: Annotated[str, OneOf("cifar10", "cifar100")] = "cifar10"
    epochs: Annotated[tuple[int, ...], Distinct(), Each(Ge(1))] = (1, 3)
    train_per_client: int | None = 100
    train: neural.TrainConfig = replace(FederationSettings.train, rounds=15, eval_every=15, local_steps=None,
                                        head_steps=None)

    PAPER = sourced(PAPER_SETTINGS, AUTHORS_CODE, ours={"epochs": (1, 5, 10, 20)},
                    doc="n = 100, S = 2 (Sec. 5.2); E in {1, 5, 10, 20} is our choice (our copy of the paper has "
                        "the caption of Fig. 5 but not its axis).")
    LONG = Profile({"epochs": (1, 5), "seeds": (0, 1), "full_data": False, "train.rounds": 50}, base="paper",
                   doc="Near-paper on a CPU: the paper profile (n = 100, S = 2, r = 0.1, the authors' CNN and "
                       "optimiser, float32) on the offline subset (20,000 of CIFAR-10's 50,000 training images, "
                       "so 200 per client; 50 test images per client), E in {1, 5} (the paper profile: also 10 "
                       "and 20), T = 50 rounds (the paper: 100), evaluated every round and reported as the mean "
                       "of the last 10, 2 seeds (a seed takes about 15 minutes of one core here; E = 10 would "
                       "double it).")
    GPU = Profile({"epochs": (1, 5, 10), "seeds": (0,), "full_data": False, "train.rounds": 50,
                   "train.eval_every": 5, "train.vmap_clients": 10, "train.augment": False},
                  doc="The paper profile sized for a few minutes of one GPU on the offline subset (200 images per "
                      "client): E in {1, 5, 10}, T = 50, evaluated every 5 rounds (the final 10 rounds' mean uses "
                      "the evaluations in them), one seed, a round's 10 clients batched.")


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


def federation(s: EpochSettings, cifar: D.CifarData) -> tuple[torch.nn.Module, neural.ClientData]:
    """The network every run of :func:`run_epochs` starts from and the clients' data in its dtype
    (``s.clients`` clients with ``s.classes_per_client`` classes each, drawn from ``s.seed``)."""
    require_data(cifar, s.full_data, "EpochSettings")
    fed = make_federation(cifar, s.clients, s.classes_per_client, train_per_client=s.train_per_client,
                          test_per_client=s.test_per_client, seed=s.seed, split=s.split)
    model = s.network(s.dataset, fed.n_classes, derive_seed(s.seed, 3), fed.clients.device)
    return model, neural.check_inputs(model, fed.clients)


def run_epochs(s: EpochSettings, *, cifar: D.CifarData | None = None) -> EpochResult:
    """Paper Fig. 5 (see the module docstring): FedRep and FedAvg for every E in ``s.epochs``,
    each from the network of :func:`federation`."""
    cifar = cifar if cifar is not None else D.load_cifar(s.dataset)
    model, cl = federation(s, cifar)
    acc = {"FedRep": [], "FedAvg": []}
    curves = {"FedRep": [], "FedAvg": []}
    for e in s.epochs:
        for method in ("FedRep", "FedAvg"):
            cfg = s.config(head_epochs=e) if method == "FedRep" else s.config(local_epochs=e)
            r = algorithms.run(method, model, cl, cfg)
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


def e_values(epochs) -> str:
    """The values of E in words: ``(1, 3)`` -> ``"E = 1 and E = 3"``, ``(1, 5, 10)`` -> ``"E = 1, 5 and 10"``."""
    e = [str(x) for x in epochs]
    if len(e) == 1:
        return f"E = {e[0]}"
    if len(e) == 2:
        return f"E = {e[0]} and E = {e[1]}"
    return f"E = {', '.join(e[:-1])} and {e[-1]}"


def settings_rows(s: EpochSettings) -> list[tuple[str, str]]:
    """The settings of a run of :func:`run_epochs` in words, ``(setting, value)`` with no field
    names: clients and their data, rounds and participation, the optimiser, what E counts for each
    method, the network, the seeds and when the accuracy is read."""
    t = s.train
    per_round = max(1, round(t.participation * s.clients))
    widths = s.network_spec(s.dataset).widths
    rows = [["clients", f"{s.clients}, each holding {s.classes_per_client} of CIFAR-"
                        f"{'10' if s.dataset == 'cifar10' else '100'}'s classes"],
            ["images per client", "an equal share of the training and test images" if s.train_per_client is None else
             f"{s.train_per_client} for training, {s.test_per_client or 'a share of the test set'} for testing"],
            ["rounds", f"{t.rounds}, {per_round} of the {s.clients} clients sampled in each"],
            ["local SGD", f"step size {fmt(t.lr, 'g')}, momentum {fmt(t.momentum, 'g')}, batches of {t.batch_size}"
                          + (f", weight decay {fmt(t.weight_decay, 'g')}" if t.weight_decay else "")
                          + (", random crops and flips" if t.augment else "")],
            ["FedRep's round", f"E epochs on the head, then {t.local_epochs} on the body"],
            ["FedAvg's round", "E epochs on the whole network"],
            ["local epochs E", e_values(s.epochs)],
            ["network", f"the FedRep CNN with {widths[0]} and {widths[1]} channels, in "
                        f"{'double' if s.dtype == 'float64' else 'single'} precision"],
            ["seeds", f"{wording.seeds(s)}: each its own partition, network and batches"],
            ["accuracy read", "after the last round" if t.last_rounds == 1 else
             f"mean over the last {t.last_rounds} rounds"]]
    return [tuple(r) for r in rows]


def settings_table(s, caption: str):
    """:func:`settings_rows` of ``s`` as a table (setting | value)."""
    return wording.settings_table(settings_rows(s), caption)


def profiles_table(caption: str):
    """:func:`settings_rows` of the paper profile, the near-paper (``long``) run and the CPU default
    side by side (setting | paper profile | near-paper run | CPU default)."""
    cls = EpochSettings
    rows = wording.side_by_side(*(settings_rows(cls.profile(p)) for p in ("paper", "long", "default")))
    return wording.settings_table(rows, caption, columns=("paper profile", "near-paper run", "CPU default"))


def glue_accuracies(acc: dict, epochs, prefix: str) -> tuple[dict, dict]:
    """Glue every method's accuracy at every E in % (``{prefix}-<method>-<E>``: mean ± sd over
    seeds), then each method's change from the first to the last E (``{prefix}-<method>-change``:
    the paired difference over seeds in points, last E minus first, with its 95% interval);
    returns ``(shown, change)``: the strings of the table and the comparisons the checks judge by."""
    shown = {m: [glue_pm(f"{prefix}-{m.lower()}-{e}", acc[m][j], scale=100) for j, e in enumerate(epochs)]
             for m in acc}
    change = {m: glue_diff(f"{prefix}-{m.lower()}-change", acc[m][-1], acc[m][0], scale=100, unit="points")
              for m in acc}
    return shown, change


def accuracy_table(shown: dict, epochs, caption: str):
    """One row per E: FedRep's and FedAvg's accuracy (% mean ± sd, :func:`glue_accuracies`)."""
    return Table(["local epochs E", "FedRep (%)", "FedAvg (%)"],
                 [[str(e), shown["FedRep"][j].text, shown["FedAvg"][j].text] for j, e in enumerate(epochs)],
                 caption=caption)


def checks(acc: dict, epochs, change: dict, *, prefix: str = "ep", scale: str = "CPU",
           require: bool = True) -> list[tuple[str, str, object, dict]]:
    """The verdicts of a run (``acc``, E in ``epochs``; ``change``: the comparisons of
    :func:`glue_accuracies`) as ``(name, label, condition, options)`` for
    :func:`replearn.book.claims.verdict`, every comparison paired over seeds in points: FedRep above
    FedAvg at every E (Fig. 5), FedRep not lower at the last E than at the first (Fig. 5; a claim
    of no drop) and higher there (the book's), FedAvg higher at the last E (the book's; Fig. 5
    says more local epochs do not necessarily help it). ``prefix`` names the glue (``ep``: the
    page's run, ``ep-long``: the committed near-paper run, whose verdicts carry ``scale="long"``);
    with ``require`` the first two stop the notebook when they fail."""
    first, last = epochs[0], epochs[-1]
    rep, avg = acc["FedRep"], acc["FedAvg"]
    at = e_values(epochs)
    drop = seeds.points(rep[0], rep[-1])       # E = first minus E = last: a drop with E is "holds" here
    return [(f"{prefix}-v-every", f"FedRep above FedAvg at {at}",
             seeds.every([seeds.points(rep[j], avg[j]) for j in range(len(epochs))]),
             dict(require=require, scale=scale, holds=f"is above FedAvg's at {at} by more than the spread over seeds",
                  fails=f"is not separated from FedAvg's at {at} by the spread over seeds",
                  opposite=f"is below FedAvg's at {at} by more than the spread over seeds",
                  paper="Fig. 5: FedRep's error below FedAvg's at every E")),
            (f"{prefix}-v-nohurt", f"FedRep's accuracy not lower at E = {last} than at E = {first}",
             drop.outcome != "holds",
             dict(require=require, absence=True, scale=scale, difference=change["FedRep"].text,
                  holds=f"is not lower at E = {last} than at E = {first} beyond the spread",
                  fails=f"is lower at E = {last} than at E = {first} by more than the spread",
                  paper="Fig. 5: FedRep's error does not grow with E")),
            (f"{prefix}-v-help", f"FedRep's accuracy higher at E = {last} than at E = {first}", change["FedRep"],
             dict(scale=scale, holds=f"is higher at E = {last} than at E = {first} by more than the spread",
                  fails=f"is not separated between E = {first} and E = {last} by the spread over seeds",
                  opposite=f"is lower at E = {last} than at E = {first} by more than the spread")),
            (f"{prefix}-v-fedavg", f"FedAvg's accuracy higher at E = {last} than at E = {first}", change["FedAvg"],
             dict(scale=scale, holds=f"is higher at E = {last} than at E = {first} by more than the spread",
                  fails=f"is not separated between E = {first} and E = {last} by the spread over seeds",
                  opposite=f"is lower at E = {last} than at E = {first} by more than the spread",
                  paper=None if scale == "CPU" else "Fig. 5: more local epochs do not necessarily improve FedAvg"))]


def plot_epochs(acc: dict, epochs, classes_per_client: int, title: str):
    """Fig. 5 in accuracy: the personalised test accuracy (%) of FedRep and FedAvg against the
    local epochs E (mean ± sd over seeds), with the accuracy of a head that always predicts one
    of a client's ``classes_per_client`` classes; the legend below the axes. Returns the figure."""
    import matplotlib.pyplot as plt
    import numpy as np

    x = np.arange(len(epochs))
    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    for m in METHODS:
        mean, sd = zip(*(mean_sd([100 * v for v in vals]) for vals in acc[m]))
        ax.errorbar(x, mean, yerr=sd, fmt="o-", capsize=4, color=COLORS[m],
                    label=f"{m} ({'head epochs' if m == 'FedRep' else 'local epochs'})")
    ax.axhline(100 / classes_per_client, color="k", ls=":", lw=1, label="chance")
    ax.set(xticks=x, xticklabels=[str(e) for e in epochs], xlabel="local epochs E",
           ylabel="personalised test accuracy (%)", ylim=(0, 100), title=title)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    fig.tight_layout()
    return fig


def per_seed_table(long, caption: str):
    """The committed run's accuracy (%) for every seed and E: one row per seed."""
    epochs = list(long.settings["epochs"])
    rows = [[str(seed)] + [f"{100 * long.values('accuracy', m, j)[k]:.2f}" for j in range(len(epochs)) for m in METHODS]
            for k, seed in enumerate(long.seeds)]
    return Table(["seed"] + [f"{m}, E = {e} (%)" for e in epochs for m in METHODS], rows, caption=caption)


def summarise(r: EpochResult) -> dict:
    """One seed's result as its results file keeps it: the epochs and each method's accuracies."""
    return {"epochs": list(r.epochs), "accuracy": {m: floats(v) for m, v in r.accuracy.items()}}


#: What ``scripts/run_results.py`` runs of this section (:class:`replearn.book.results.Section`).
RESULTS = (Section("5.8", EpochSettings, run_epochs, summarise, work),)
