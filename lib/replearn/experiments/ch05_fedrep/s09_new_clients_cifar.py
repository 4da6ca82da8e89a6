"""Book 5.9: FedRep's body serves new clients with unseen classes (in the spirit of Collins,
Hassani, Mokhtari, Shakkottai 2021, Fig. 6, which uses FEMNIST).

FedRep and FedAvg are trained on the classes left after holding out ``n_new`` classes
(:func:`replearn.neural.data.class_split`); new clients holding held-out classes keep the trained body
fixed and fit only a fresh head (:func:`replearn.experiments.ch05_fedrep.cifar_federation.fit_heads`); the same for the
untrained (random) body as a baseline; accuracy after every head epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated

import torch

from replearn.neural import algorithms, data as D
from replearn import neural
from replearn.backend import derive_seed
from replearn.book import scales, wording
from replearn.book.results import Section, floats
from replearn.book.scales import require_data
from replearn.experiments.ch05_fedrep.cifar_federation import (AUTHORS_PIPELINE, PAPER_CIFAR, FederationSettings,
                                                               fit_heads, make_federation)
from replearn.book.claims import fmt, glue_diff, glue_pm, glue_text
from replearn.table import Table
from replearn.book.plotting import COLORS
from replearn.settings import Ge, OneOf, Profile, sourced

NEW_METHODS = ("FedRep", "FedAvg", "random body")


#: What the FedRep paper's text states of Fig. 6's setting, by settings field: (value, where).
#: Fig. 6 trains on FEMNIST letters and meets new clients holding digits; our analogue is on CIFAR,
#: so its dataset, clients and rounds differ from these (Appendix B marks them).
PAPER_SETTINGS = {"dataset": ("femnist", "FedRep paper, Sec. 5.2 (Fig. 6: FEMNIST letters, then digits)"),
                  "clients": (150, "FedRep paper, Sec. 5.2 (FEMNIST: n = 150)"),
                  "train.rounds": (200, "FedRep paper, Sec. 5.2 (T = 200 for FEMNIST)"),
                  "new_train": (500, "FedRep paper, Sec. 5.2 (500 samples at the new client)"),
                  "train.participation": PAPER_CIFAR["train.participation"]}

#: Where the paper profile departs from Fig. 6's setting on purpose, and why (Appendix B shows it).
DEPARTURES = {"dataset": "a CIFAR-100 analogue: FEMNIST is not among the book's data; 20 held-out classes play "
                         "the digits",
              "clients": "the CIFAR-100 analogue's 80 clients, 5 of the 80 training classes each",
              "train.rounds": "T = 100, the paper's rounds for CIFAR"}

#: What the FedRep authors' code (lgcollins/FedRep) does, by settings field: (value, where): its
#: optimiser and data pipeline. It has no new-client experiment (its ``--m_ft`` caps the training
#: clients' data in the final round, not a new client's).
AUTHORS_CODE = {**AUTHORS_PIPELINE}


@dataclass(frozen=True)
class NewClientSettings(FederationSettings):
    """Hold out ``n_new`` of the dataset's classes; train FedRep and FedAvg on ``clients``
    clients with ``classes_per_client`` of the other classes; then ``new_clients`` new clients
    with ``new_classes_per_client`` held-out classes, ``new_train`` training and ``new_test``
    test images each, fit a fresh head on each body for ``head_epochs_new`` epochs (accuracy
    after every epoch; optimiser: ``train``'s lr, momentum and batch size). CPU default: 4
    CIFAR-10 classes held out, so the new clients hold different pairs of unseen classes; 6
    training clients on the other 6 classes."""

    dataset: Annotated[str, OneOf("cifar10", "cifar100")] = "cifar10"
    n_new: Annotated[int, Ge(1)] = 4
    clients: int = 6
    train: neural.TrainConfig = replace(FederationSettings.train, rounds=25, eval_every=25, participation=0.67)
    new_clients: Annotated[int, Ge(1)] = 4
    new_classes_per_client: Annotated[int, Ge(1)] = 2
    new_train: Annotated[int, Ge(1)] = 50
    new_test: Annotated[int, Ge(1)] = 100
    head_epochs_new: Annotated[int, Ge(1)] = 10

    def validate(self) -> None:
        """The relation between the fields (each field's own range is beside it): a new client's
        classes are among the ``n_new`` held-out ones."""
        super().validate()
        if self.new_classes_per_client > self.n_new:
            raise ValueError(f"new_classes_per_client = {self.new_classes_per_client} exceeds n_new = {self.n_new}")

    PAPER = sourced(PAPER_SETTINGS, AUTHORS_CODE, departures=DEPARTURES,
                    ours={"dataset": "cifar100", "clients": 80, "train.rounds": 100, "n_new": 20,
                          "classes_per_client": 5, "new_clients": 20, "new_classes_per_client": 5,
                          "head_epochs_new": 20},
                    doc="Our CIFAR-100 analogue of Fig. 6 (which trains a 2-layer MLP on FEMNIST): 80/20 classes; "
                        "n = 80 training clients with S = 5 (the paper's n = 100 cannot cut 80 classes into "
                        "equally many shards: 100 x 5 shards over 80 classes; 80 x 5 gives 5 shards per class), "
                        "Sec. 5.2's optimiser and T = 100; 20 new clients with 5 held-out classes and 500 training "
                        "images each (all 500 training images of each held-out class are used), 20 head epochs "
                        "(our choice).")
    LONG = Profile({"new_train": 250, "seeds": (0, 1), "full_data": False, "train.rounds": 50}, base="paper",
                   doc="Near-paper on a CPU: the paper profile (CIFAR-100, 80/20 classes, 80 training clients with "
                       "S = 5, r = 0.1, the authors' CNN and optimiser, float32; 20 new clients with 5 held-out "
                       "classes, 20 head epochs) on the offline subset (250 training images per CIFAR-100 class, "
                       "so 250 per training client and 250 per new client; the paper: 500), T = 50 rounds (the "
                       "paper: 100), evaluated every round and reported as the mean of the last 10, 2 seeds (a "
                       "seed takes about 10 minutes of one core here).")
    GPU = Profile({"new_train": 250, "seeds": (0,), "full_data": False, "train.eval_every": 5,
                   "train.vmap_clients": 8, "train.augment": False, "authors_dropout": False},
                  doc="The paper profile on the offline subset (250 images per CIFAR-100 class, so new clients get "
                      "250 training images, not 500), T = 100, evaluated every 5 rounds, one seed, a round's 8 "
                      "clients batched (so without augmentation and the authors' dropout, which the batched path "
                      "does not draw).")


def work(s: NewClientSettings, *, batched: bool = True) -> dict:
    """:func:`replearn.book.scales.launch_estimate` of :func:`run_new_clients` with ``s``: FedRep (head
    epochs + body epochs) and FedAvg on the training classes, then three heads per new client
    (the new clients batched like the training clients)."""
    cfg = s.train
    classes = 10 if s.dataset == "cifar10" else 100
    used = (classes - s.n_new) / classes
    fedrep, m = scales.federated_steps(s.dataset, s.full_data, s.clients, s.train_per_client, cfg,
                                       cfg.head_epochs + cfg.local_epochs, classes_used=used)
    fedavg, _ = scales.federated_steps(s.dataset, s.full_data, s.clients, s.train_per_client, cfg,
                                       cfg.local_epochs, classes_used=used)
    heads = 3 * s.new_clients * s.head_epochs_new * -(-s.new_train // cfg.batch_size)
    evals = 2 * s.clients * -(-cfg.rounds // cfg.eval_every) + 3 * s.new_clients * s.head_epochs_new
    return scales.combine(scales.launch_estimate(fedrep + fedavg, evals,
                                                 batched_clients=scales.batching(cfg, m, batched)),
                          scales.launch_estimate(heads, 0, batched_clients=scales.batching(cfg, s.new_clients, batched)))


@dataclass(frozen=True)
class NewClientResult:
    """``accuracy[method][e]``: new clients' mean test accuracy after ``e + 1`` head epochs;
    ``client_accuracy[method]``: per new client after the last epoch; ``trained[method]``:
    the personalised accuracy of the federated run on the training clients; ``bodies[method]``:
    the parameters whose body the new clients' heads were fitted on (FedRep's and FedAvg's
    trained server models, the random initial network)."""

    train_classes: tuple[int, ...]
    new_classes: tuple[int, ...]
    accuracy: dict
    client_accuracy: dict
    trained: dict
    bodies: dict
    data: str

    @property
    def epochs(self) -> torch.Tensor:
        return torch.arange(1, len(next(iter(self.accuracy.values()))) + 1)


def new_clients(s: NewClientSettings, cifar: D.CifarData, new_classes) -> tuple[torch.nn.Module, neural.ClientData, dict]:
    """The new clients of seed ``s.seed``, holding the classes ``new_classes`` (each client distinct
    ones, so chance is 1/S): the network they fit heads in, their data in its dtype, and the fresh
    head every one of them starts from (``{name: tensor}``, the head's parameters)."""
    new = make_federation(cifar, s.new_clients, s.new_classes_per_client,
                          train_per_client=s.new_train, test_per_client=s.new_test,
                          seed=derive_seed(s.seed, 21), classes=new_classes, split="disjoint")
    model = s.network(s.dataset, new.n_classes, derive_seed(s.seed, 22), new.clients.device)
    fresh = {n: p.detach() for n, p in model.named_parameters() if n in neural.split_body_head(model)[1]}
    return model, neural.check_inputs(model, new.clients), fresh


def head_config(s: NewClientSettings) -> neural.TrainConfig:
    """The SGD of the new clients' heads: ``s.train``'s step size, momentum and batch size, one
    epoch per round for ``head_epochs_new`` rounds, every client in every round, from its own seed."""
    t = s.train
    return neural.TrainConfig(rounds=s.head_epochs_new, lr=t.lr, momentum=t.momentum, batch_size=t.batch_size,
                              local_epochs=1, eval_every=1, last_rounds=1, seed=derive_seed(s.seed, 23),
                              vmap_clients=t.vmap_clients)


def run_new_clients(s: NewClientSettings, *, cifar: D.CifarData | None = None) -> NewClientResult:
    """New clients (see the module docstring)."""
    cifar = cifar if cifar is not None else D.load_cifar(s.dataset)
    require_data(cifar, s.full_data, "NewClientSettings")
    if not s.n_new < cifar.n_classes:
        raise ValueError(f"need 0 < n_new < {cifar.n_classes}, got {s.n_new}")
    train_cls, new_cls = D.class_split(cifar.n_classes, s.n_new, seed=derive_seed(s.seed, 20))
    fed = make_federation(cifar, s.clients, s.classes_per_client, train_per_client=s.train_per_client,
                          test_per_client=s.test_per_client, seed=s.seed, classes=train_cls, split=s.split)
    init = s.network(s.dataset, fed.n_classes, derive_seed(s.seed, 3), fed.clients.device)
    cfg = s.config()
    runs = {name: algorithms.run(name, init, fed.clients, cfg) for name in ("FedRep", "FedAvg")}
    bodies = {m: r.state for m, r in runs.items()}
    bodies["random body"] = {n: p.detach() for n, p in init.named_parameters()}
    new_model, new, fresh_head = new_clients(s, cifar, new_cls)
    fit = head_config(s)
    acc, cacc = {}, {}
    for method in NEW_METHODS:
        state = {**{n: p for n, p in bodies[method].items() if n not in fresh_head}, **fresh_head}
        r = fit_heads(new_model, new, state, epochs=fit.rounds, lr=fit.lr, momentum=fit.momentum,
                      batch_size=fit.batch_size, seed=fit.seed, vmap_clients=fit.vmap_clients)
        acc[method], cacc[method] = r.test_accuracy, r.final.accuracy
    return NewClientResult(tuple(int(c) for c in train_cls), tuple(int(c) for c in new_cls), acc, cacc,
                           {m: r.accuracy for m, r in runs.items()}, bodies, cifar.describe())


# --------------------------------------------------------------------------- what the page shows

#: Each body's name in glue labels.
SLUG = {"FedRep": "fedrep", "FedAvg": "fedavg", "random body": "random"}
#: The pairs of bodies the page compares after the last head epoch: (first, second).
PAIRS = (("FedRep", "random body"), ("FedAvg", "random body"), ("FedRep", "FedAvg"))
#: The paper's claim that the page checks (Fig. 6).
PAPER_CLAIM = "Fig. 6: FedRep's body transfers best (heads on it beat those on the other methods' bodies)"
#: The paper claim the near-paper run's check on the training clients tests: Table 1's ordering, on a
#: partition that is none of Table 1's columns (80 of CIFAR-100's classes over 80 clients of 5).
TABLE1_ANALOGUE = ("Table 1's ordering (FedRep far above FedAvg on its training clients), on a partition "
                   "that is none of its columns")


@dataclass(frozen=True)
class Accuracies:
    """One value per seed: ``trained[m]``, the personalised accuracy of the federated run ``m``
    (FedRep, FedAvg) on its training clients; ``first[m]`` and ``last[m]``, the new clients' mean
    accuracy after the first and the last head epoch on body ``m`` (:data:`NEW_METHODS`)."""

    trained: dict
    first: dict
    last: dict


def accuracies(runs) -> Accuracies:
    """:class:`Accuracies` of ``runs`` (one :class:`NewClientResult` per seed)."""
    return Accuracies({m: [r.trained[m] for r in runs] for m in ("FedRep", "FedAvg")},
                      {m: [float(r.accuracy[m][0]) for r in runs] for m in NEW_METHODS},
                      {m: [float(r.accuracy[m][-1]) for r in runs] for m in NEW_METHODS})


def long_accuracies(long) -> Accuracies:
    """:class:`Accuracies` read from a committed results file."""
    return Accuracies({m: long.values("trained", m) for m in ("FedRep", "FedAvg")},
                      {m: long.values("accuracy", m, 0) for m in NEW_METHODS},
                      {m: long.values("accuracy", m, -1) for m in NEW_METHODS})


def glue_tables(a: Accuracies, prefix: str, *, last: str, epochs: int, chance: float,
                captions: tuple[str, str]) -> tuple:
    """Glue, in %: each federated run's accuracy on its training clients
    (``{prefix}-trained-<slug>``) and each body's new-client accuracy after the first and the last
    head epoch (``{prefix}-first-<slug>``, ``{prefix}-{last}<slug>``; mean ± sd); in points, the
    paired differences over seeds of :data:`PAIRS` after the last epoch
    (``{prefix}-diff-<slug>-<slug>``), of FedAvg's body over FedRep's after the first
    (``{prefix}-diff-first``), of the random body's heads over ``chance`` (a fraction: 1/S for
    new clients of S classes; ``{prefix}-diff-random-chance``) and of FedRep over FedAvg on the
    training clients (``{prefix}-diff-trained``). Returns ``(trained strings, comparisons, tables)``: the
    comparisons (``{"last": {pair: ...}, "first": ..., "chance": ..., "trained": ...}``) are those the checks
    judge by, and the two tables (the training clients' accuracy, the new clients' accuracy after
    the first and the last head epoch) carry ``captions``."""
    trained = {m: glue_pm(f"{prefix}-trained-{SLUG[m]}", v, scale=100) for m, v in a.trained.items()}
    rows = [[m, glue_pm(f"{prefix}-first-{SLUG[m]}", a.first[m], scale=100).text,
             glue_pm(f"{prefix}-{last}{SLUG[m]}", a.last[m], scale=100).text] for m in NEW_METHODS]

    def diff(name, x, y):
        return glue_diff(f"{prefix}-diff-{name}", x, y, scale=100, unit="points")

    comparisons = {"last": {(x, y): diff(f"{SLUG[x]}-{SLUG[y]}", a.last[x], a.last[y]) for x, y in PAIRS},
                   "first": diff("first", a.first["FedAvg"], a.first["FedRep"]),
                   "chance": diff("random-chance", a.last["random body"], [chance] * len(a.last["random body"])),
                   "trained": diff("trained", a.trained["FedRep"], a.trained["FedAvg"])}
    return trained, comparisons, (Table(["federated run", "accuracy on its training clients (%)"],
                                        [[m, s.text] for m, s in trained.items()], caption=captions[0]),
                                  Table(["body", "after head epoch 1 (%)", f"after head epoch {epochs} (%)"], rows,
                                        caption=captions[1]))


def checks(c: dict, *, prefix: str = "nc", scale: str = "CPU", require: bool = True,
           trained_claim: str | None = None) -> list[tuple[str, str, object, dict]]:
    """The verdicts of a run as ``(name, label, condition, options)`` for
    :func:`replearn.book.claims.verdict`, judged by the comparisons ``c`` of :func:`glue_tables`
    (paired over seeds, in points): heads on FedRep's body above heads on the random body (with
    ``require``, the notebook stops when it fails) and above those on FedAvg's (Fig. 6), heads on
    FedAvg's body above the random body's, heads on the random body above chance, FedAvg's body
    ahead after one head epoch, and FedRep
    above FedAvg on its own training clients (with ``require``; ``trained_claim``: the paper claim
    it tests, None for the book's own statement). ``prefix`` names the glue (``nc``: the page's
    run; ``nc-long``: the committed near-paper run, with ``scale="long"``)."""
    random = dict(holds="above the random body's by more than the spread over seeds",
                  fails="not separated from the random body's by the spread over seeds",
                  opposite="below the random body's by more than the spread over seeds")
    fedavg = dict(holds="is above FedAvg's by more than the spread over seeds",
                  fails="is not separated from FedAvg's by the spread over seeds",
                  opposite="is below FedAvg's by more than the spread over seeds")
    last = c["last"]
    return [(f"{prefix}-v-fedrep-random", "new clients: heads on FedRep's body above heads on the random body",
             last[("FedRep", "random body")], dict(require=require, scale=scale, **random)),
            (f"{prefix}-v-fedavg-random", "new clients: heads on FedAvg's body above heads on the random body",
             last[("FedAvg", "random body")], dict(scale=scale, **random)),
            (f"{prefix}-v-random-chance", "new clients: heads on the random body above chance", c["chance"],
             dict(scale=scale, holds="is above chance by more than the spread over seeds",
                  fails="is not separated from chance by the spread over seeds",
                  opposite="is below chance by more than the spread over seeds")),
            (f"{prefix}-v-fedrep-fedavg", "new clients: heads on FedRep's body above heads on FedAvg's body",
             last[("FedRep", "FedAvg")], dict(scale=scale, paper=PAPER_CLAIM, **fedavg)),
            (f"{prefix}-v-first", "new clients, after one head epoch: heads on FedAvg's body above heads on FedRep's",
             c["first"], dict(scale=scale, holds="is above FedRep's by more than the spread",
                              fails="is not separated from FedRep's by the spread",
                              opposite="is below FedRep's by more than the spread")),
            (f"{prefix}-v-trained", "training clients: FedRep (personal heads) above FedAvg (one global model)",
             c["trained"], dict(require=require, scale=scale, paper=trained_claim, **fedavg))]


def glue_long_settings(long) -> None:
    """Glue the committed run's settings that the prose quotes (``nc-long-<name>``: classes held
    out and trained on, clients, S, new clients and their S, head epochs, images, rounds, seeds;
    ``nc-long-chance``)."""
    ls, lt = long.settings, long.settings["train"]
    k = 100 if ls["dataset"] == "cifar100" else 10
    for name, value in (("n-new", ls["n_new"]), ("n-train", k - ls["n_new"]), ("clients", ls["clients"]),
                        ("S", ls["classes_per_client"]), ("new-clients", ls["new_clients"]),
                        ("new-S", ls["new_classes_per_client"]), ("epochs", ls["head_epochs_new"]),
                        ("new-train", ls["new_train"]), ("rounds", lt["rounds"]), ("seeds", len(long.seeds))):
        glue_text(f"nc-long-{name}", str(value))
    glue_text("nc-long-chance", f"1/{ls['new_classes_per_client']}")


def dataset_label(name: str) -> str:
    """``"cifar100"`` -> ``"CIFAR-100"``."""
    return name.upper().replace("CIFAR", "CIFAR-")


def _phase(steps, epochs) -> str:
    return f"{steps} steps" if steps is not None else f"{epochs} epoch{'s' if epochs != 1 else ''}"


def settings_rows(s: NewClientSettings) -> list[tuple[str, str]]:
    """The settings of a run of :func:`run_new_clients` in words, ``(setting, value)`` with no
    field names: the classes held out, the training clients and their rounds, the optimiser,
    FedRep's round, the new clients and their heads, the network, the seeds and when each accuracy
    is read."""
    t, k = s.train, 10 if s.dataset == "cifar10" else 100
    per_round = max(1, round(t.participation * s.clients))
    widths = s.network_spec(s.dataset).widths
    images = (f"{s.train_per_client} training images" if s.train_per_client is not None
              else "an equal share of the training images")
    rows = [["classes", f"{s.n_new} of {dataset_label(s.dataset)}'s {k} held out for the new clients, "
                        f"the other {k - s.n_new} for training"],
            ["training clients", f"{s.clients}, each holding {s.classes_per_client} training classes and {images}"],
            ["rounds", f"{t.rounds}, {per_round} of the {s.clients} clients sampled in each"],
            ["local SGD", f"step size {fmt(t.lr, 'g')}, momentum {fmt(t.momentum, 'g')}, batches of {t.batch_size}"
                          + (f", weight decay {fmt(t.weight_decay, 'g')}" if t.weight_decay else "")
                          + (", random crops and flips" if t.augment else "")],
            ["FedRep's round", f"{_phase(t.head_steps, t.head_epochs)} on the head, then "
                               f"{_phase(t.local_steps, t.local_epochs)} on the body"],
            ["FedAvg's round", f"{_phase(t.local_steps, t.local_epochs)} on the whole network"],
            ["new clients", f"{s.new_clients}, each holding {s.new_classes_per_client} held-out classes, "
                            f"{s.new_train} training and {s.new_test} test images"],
            ["a new client's head", f"{s.head_epochs_new} epochs of the same SGD (no weight decay), the body frozen"],
            ["network", f"the FedRep CNN with {widths[0]} and {widths[1]} channels, in "
                        f"{'double' if s.dtype == 'float64' else 'single'} precision"],
            ["seeds", f"{wording.seeds(s)}: each its own held-out classes, partition, network and batches"],
            ["accuracy read", "the new clients': after every head epoch; the training clients': "
                              + ("after the last round" if t.last_rounds == 1 else
                                 f"mean over the last {t.last_rounds} rounds")]]
    return [tuple(r) for r in rows]


def settings_table(s, caption: str):
    """:func:`settings_rows` of ``s`` as a table (setting | value)."""
    return wording.settings_table(settings_rows(s), caption)


def profiles_table(caption: str):
    """:func:`settings_rows` of the paper profile, the near-paper (``long``) run and the CPU default
    side by side (setting | paper profile | near-paper run | CPU default)."""
    cls = NewClientSettings
    rows = wording.side_by_side(*(settings_rows(cls.profile(p)) for p in ("paper", "long", "default")))
    return wording.settings_table(rows, caption, columns=("paper profile", "near-paper run", "CPU default"))


def per_seed_table(long, caption: str):
    """The committed run's accuracies (%) seed by seed: the new clients' after the last head epoch
    on each body (columns named by the body), and each federated run's on its own training clients."""
    a = long_accuracies(long)
    rows = [[str(seed)] + [f"{100 * a.last[m][k]:.2f}" for m in NEW_METHODS]
            + [f"{100 * a.trained[m][k]:.2f}" for m in ("FedRep", "FedAvg")] for k, seed in enumerate(long.seeds)]

    def body(m):
        return "random body (%)" if m == "random body" else f"{m}'s body (%)"

    return Table(["seed"] + [body(m) for m in NEW_METHODS]
                 + ["FedRep, own clients (%)", "FedAvg, own clients (%)"], rows, caption=caption)


def plot_curves(epochs, curves: dict, chance: float, title: str, *, long: bool = False):
    """New clients' test accuracy (%) against the head epochs, one curve per body (``curves[m]``:
    (seeds, epochs) array of fractions; mean ± sd over seeds), with the ``chance`` line (%), the
    legend below the axes. The long run's figure (``long``) has smaller markers and ticks every 5
    epochs. Returns the figure."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6.0, 4.4))
    for m in NEW_METHODS:
        c = 100 * np.asarray(curves[m])
        style = dict(fmt="o-", ms=3, capsize=2) if long else dict(fmt="o-", capsize=3)
        ax.errorbar(epochs, c.mean(0), yerr=c.std(0, ddof=1), **style, color=COLORS.get(m, "#7f7f7f"),
                    label=f"head on the {m}" if m == "random body" else f"head on {m}'s body")
    ax.axhline(chance, color="k", ls=":", lw=1, label="chance")
    ax.set(xlabel="head epochs on the new clients", ylabel="new clients' test accuracy (%)", title=title)
    if long:
        ax.set(xticks=range(0, len(epochs) + 1, 5))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    fig.tight_layout()
    return fig


def summarise(r: NewClientResult) -> dict:
    """One seed's result as its results file keeps it: the held-out classes, each body's
    accuracies on the new clients and the training accuracies."""
    return {"new_classes": list(r.new_classes), "accuracy": {m: floats(v) for m, v in r.accuracy.items()},
            "trained": dict(r.trained)}


#: What ``scripts/run_results.py`` runs of this section (:class:`replearn.book.results.Section`).
RESULTS = (Section("5.9", NewClientSettings, run_new_clients, summarise, work),)
