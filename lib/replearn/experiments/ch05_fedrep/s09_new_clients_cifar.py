"""Book 5.9: FedRep's body serves new clients with unseen classes (in the spirit of Collins,
Hassani, Mokhtari, Shakkottai 2021, Fig. 6, which uses FEMNIST).

FedRep and FedAvg are trained on the classes left after holding out ``n_new`` classes
(:func:`replearn.neural.data.class_split`); new clients holding held-out classes keep the trained body
fixed and fit only a fresh head (:func:`replearn.neural.personalisation.fit_heads`); the same for the
untrained (random) body as a baseline; accuracy after every head epoch.
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
from replearn.neural.personalisation import AUTHORS_PIPELINE, PAPER_OPTIM, FederationSettings, fit_heads, make_federation

NEW_METHODS = ("FedRep", "FedAvg", "random body")


#: What the FedRep paper's text states of Fig. 6's setting that carries over to our CIFAR analogue,
#: by settings field: (value, where). Fig. 6 itself uses FEMNIST letters -> digits.
PAPER_SETTINGS = {"new_train": (500, "FedRep paper, Sec. 5.2 (500 samples at the new client)"),
                  "train.participation": (0.1, "FedRep paper, Sec. 5.2 (r = 0.1)")}

#: What the FedRep authors' code (lgcollins/FedRep) does, by settings field: (value, where): its
#: optimiser, data pipeline and fine-tuning cap (it has no CIFAR script for Fig. 6).
AUTHORS_CODE = {"new_train": (500, "utils/options.py (--m_ft 500: samples per user for fine-tuning)"), **AUTHORS_PIPELINE}


@dataclass(frozen=True)
class NewClientSettings(FederationSettings):
    """Hold out ``n_new`` of the dataset's classes; train FedRep and FedAvg on ``clients``
    clients with ``classes_per_client`` of the other classes; then ``new_clients`` new clients
    with ``new_classes_per_client`` held-out classes, ``new_train`` training and ``new_test``
    test images each, fit a fresh head on each body for ``head_epochs_new`` epochs (accuracy
    after every epoch; optimiser: ``train``'s lr, momentum and batch size). CPU default: 4
    CIFAR-10 classes held out, so the new clients hold different pairs of unseen classes; 6
    training clients on the other 6 classes."""

    dataset: str = "cifar10"
    n_new: int = 4
    clients: int = 6
    train: neural.TrainConfig = replace(FederationSettings.train, rounds=25, eval_every=25, participation=0.67)
    new_clients: int = 4
    new_classes_per_client: int = 2
    new_train: int = 50
    new_test: int = 100
    head_epochs_new: int = 10

    def validate(self) -> None:
        super().validate()
        for name in ("n_new", "new_clients", "new_classes_per_client", "new_train", "new_test", "head_epochs_new"):
            check_int(getattr(self, name), name, 1)
        if self.dataset not in ("cifar10", "cifar100"):
            raise ValueError(f"unknown dataset {self.dataset!r}; use 'cifar10' or 'cifar100'")
        if self.new_classes_per_client > self.n_new:
            raise ValueError(f"new_classes_per_client = {self.new_classes_per_client} exceeds n_new = {self.n_new}")

    @classmethod
    def long(cls):
        """Near-paper on a CPU: the paper profile (CIFAR-100, 80/20 classes, 80 training clients
        with S = 5, r = 0.1, the authors' CNN and optimiser, float32; 20 new clients with 5
        held-out classes, 20 head epochs) on the offline subset (250 training images per
        CIFAR-100 class, so 250 per training client and 250 per new client; the paper: 500),
        T = 50 rounds (the paper: 100), evaluated every round and reported as the mean of the last
        10, 2 seeds (a seed takes about 10 minutes of one core here)."""
        p = cls.paper()
        return replace(p, new_train=250, seeds=(0, 1), full_data=False,
                       train=replace(p.train, rounds=50))

    @classmethod
    def paper(cls):
        """Our CIFAR-100 analogue of Fig. 6 (which trains a 2-layer MLP on FEMNIST): 80/20
        classes; n = 80 training clients with S = 5 (the paper's n = 100 cannot cut 80 classes
        into equally many shards: 100 x 5 shards over 80 classes; 80 x 5 gives 5 shards per
        class), Sec. 5.2's optimiser and T = 100; 20 new clients with 5 held-out classes and 500
        training images each (all 500 training images of each held-out class are used), 20 head
        epochs (our choice)."""
        return cls(dataset="cifar100", n_new=20, clients=80, classes_per_client=5, new_clients=20,
                   new_classes_per_client=5, new_train=500, new_test=100, head_epochs_new=20, **PAPER_OPTIM)

    @classmethod
    def gpu(cls):
        """The paper profile on the offline subset (250 images per CIFAR-100 class, so new
        clients get 250 training images, not 500), T = 100, evaluated every 5 rounds, one seed,
        a round's 8 clients batched."""
        p = cls.paper()
        return replace(p, new_train=250, seeds=(0,), full_data=False,
                       train=replace(p.train, eval_every=5, vmap_clients=8, augment=False))


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
    the personalised accuracy of the federated run on the training clients."""

    train_classes: tuple[int, ...]
    new_classes: tuple[int, ...]
    accuracy: dict
    client_accuracy: dict
    trained: dict
    data: str

    @property
    def epochs(self) -> torch.Tensor:
        return torch.arange(1, len(next(iter(self.accuracy.values()))) + 1)


def run_new_clients(s: NewClientSettings, *, cifar: D.CifarData | None = None) -> NewClientResult:
    """New clients (see the module docstring)."""
    cifar = cifar if cifar is not None else D.load_cifar(s.dataset)
    require_data(cifar, s.full_data, "NewClientSettings")
    if not s.n_new < cifar.n_classes:
        raise ValueError(f"need 0 < n_new < {cifar.n_classes}, got {s.n_new}")
    train_cls, new_cls = D.class_split(cifar.n_classes, s.n_new, seed=derive_seed(s.seed, 20))
    fed = make_federation(cifar, s.clients, s.classes_per_client, train_per_client=s.train_per_client,
                          test_per_client=s.test_per_client, seed=s.seed, classes=train_cls, split=s.split)
    new = make_federation(cifar, s.new_clients, s.new_classes_per_client,
                          train_per_client=s.new_train, test_per_client=s.new_test,
                          seed=derive_seed(s.seed, 21), classes=new_cls,
                          split="disjoint")  # each new client holds distinct held-out classes (chance 1/S)
    device = fed.clients.device
    init = s.network(s.dataset, fed.n_classes, derive_seed(s.seed, 3), device)
    cfg = s.config()
    runs = {name: algorithms.run(name, init, fed.clients, cfg) for name in ("FedRep", "FedAvg")}
    bodies = {m: r.state for m, r in runs.items()}
    bodies["random body"] = {n: p.detach() for n, p in init.named_parameters()}
    new_model = s.network(s.dataset, new.n_classes, derive_seed(s.seed, 22), device)
    fresh_head = {n: p.detach() for n, p in new_model.named_parameters() if n.startswith("head.")}
    acc, cacc = {}, {}
    for method in NEW_METHODS:
        state = {**{n: p for n, p in bodies[method].items() if not n.startswith("head.")}, **fresh_head}
        r = fit_heads(new_model, new.clients, state, epochs=s.head_epochs_new, lr=cfg.lr, momentum=cfg.momentum,
                      batch_size=cfg.batch_size, seed=derive_seed(s.seed, 23), vmap_clients=cfg.vmap_clients)
        acc[method], cacc[method] = r.test_accuracy, r.final.accuracy
    return NewClientResult(tuple(int(c) for c in train_cls), tuple(int(c) for c in new_cls), acc, cacc,
                           {m: r.accuracy for m, r in runs.items()}, cifar.describe())


# --------------------------------------------------------------------------- what the page shows

#: Each body's name in glue labels.
SLUG = {"FedRep": "fedrep", "FedAvg": "fedavg", "random body": "random"}
#: The pairs of bodies the page compares after the last head epoch: (first, second).
PAIRS = (("FedRep", "random body"), ("FedAvg", "random body"), ("FedRep", "FedAvg"))
#: The paper's claim that the page checks (Fig. 6).
PAPER_CLAIM = "Fig. 6: FedRep's body transfers best (heads on it beat those on the other methods' bodies)"


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


def glue_tables(a: Accuracies, prefix: str, *, last: str, epochs: int, captions: tuple[str, str]) -> tuple:
    """Glue, in %: each federated run's accuracy on its training clients
    (``{prefix}-trained-<slug>``), each body's new-client accuracy after the first and the last
    head epoch (``{prefix}-first-<slug>``, ``{prefix}-{last}<slug>``; mean ± sd) and the paired
    differences of :data:`PAIRS` after the last epoch (``{prefix}-diff-<slug>-<slug>``, in
    points); returns ``(trained strings, three tables)``, the first two with ``captions``."""
    from replearn.book.claims import glue_diff, glue_pm
    from replearn.book.plotting import Table

    trained = {m: glue_pm(f"{prefix}-trained-{SLUG[m]}", v, scale=100) for m, v in a.trained.items()}
    rows = [[m, glue_pm(f"{prefix}-first-{SLUG[m]}", a.first[m], scale=100).text,
             glue_pm(f"{prefix}-{last}{SLUG[m]}", a.last[m], scale=100).text] for m in NEW_METHODS]
    drows = [[f"{x} − {y}", glue_diff(f"{prefix}-diff-{SLUG[x]}-{SLUG[y]}", a.last[x], a.last[y], scale=100).text]
             for x, y in PAIRS]
    return trained, (Table(["federated run", "accuracy on its training clients %"],
                           [[m, s.text] for m, s in trained.items()], caption=captions[0]),
                     Table(["body", "after head epoch 1 %", f"after head epoch {epochs} %"], rows, caption=captions[1]),
                     Table(["after the last head epoch", "points, paired over seeds [95% interval]"], drows))


def checks(a: Accuracies, trained: dict) -> list[tuple[str, str, object, dict]]:
    """The CPU run's verdicts as ``(name, label, condition, options)`` for
    :func:`replearn.book.claims.verdict`, each beyond the spread over seeds: heads on FedRep's
    body beat heads on the random body (required) and on FedAvg's (Fig. 6), heads on FedAvg's
    beat the random body's, FedAvg's lead after one head epoch, and FedRep above FedAvg on its
    training clients (required; ``trained``: the strings of :func:`glue_tables`)."""
    from replearn.book import seeds

    random = dict(holds="above the random body's by more than the spread over seeds",
                  fails="not separated from the random body's by the spread over seeds")
    fedavg = dict(holds="is above FedAvg's by more than the spread over seeds",
                  fails="is not separated from FedAvg's by the spread over seeds")
    last = a.last
    return [("nc-v-fedrep-random", "FedRep's body transfers to unseen classes: heads on it beat heads on the random "
                                   "body beyond the spread",
             seeds.separated(last["FedRep"], last["random body"]), dict(require=True, **random, paper=None)),
            ("nc-v-fedavg-random", "heads on FedAvg's body beat heads on the random body beyond the spread",
             seeds.separated(last["FedAvg"], last["random body"]), random),
            ("nc-v-fedrep-fedavg", "heads on FedRep's body beat heads on FedAvg's body beyond the spread",
             seeds.separated(last["FedRep"], last["FedAvg"]), dict(**fedavg, paper=PAPER_CLAIM)),
            ("nc-v-first", "after one head epoch, heads on FedAvg's body beat heads on FedRep's beyond the spread",
             seeds.separated(a.first["FedAvg"], a.first["FedRep"]),
             dict(holds="is above FedRep's by more than the spread", fails="is not separated from FedRep's by the spread")),
            ("nc-v-trained", "on its training clients FedRep (personal heads) beats FedAvg (one global model) by more "
                             "than the spread",
             seeds.separated(a.trained["FedRep"], a.trained["FedAvg"]),
             dict(require=True, **fedavg, fedrep=trained["FedRep"].text, fedavg=trained["FedAvg"].text))]


def long_checks(a: Accuracies) -> list[tuple[str, str, object, dict]]:
    """The committed near-paper run's verdicts (as :func:`checks`, none required): the bodies of
    :data:`PAIRS` after the last head epoch, and FedRep above FedAvg on its training clients."""
    from replearn.book import seeds

    out = []
    for x, y in PAIRS:
        random = y == "random body"
        out.append((f"nc-long-v-{SLUG[x]}-{SLUG[y]}",
                    f"near-paper run: heads on {x}'s body beat heads on the {y.replace(' body', '')} body beyond the "
                    f"spread", seeds.separated(a.last[x], a.last[y]),
                    dict(holds=("above the random body's by more than the spread over seeds" if random
                                else "is above FedAvg's by more than the spread over seeds"),
                         fails=("not separated from the random body's by the spread over seeds" if random
                                else "is not above FedAvg's by more than the spread over seeds"),
                         paper=None if random else PAPER_CLAIM, scale="long")))
    out.append(("nc-long-v-trained", "near-paper run: FedRep above FedAvg on its own training clients beyond the spread",
                seeds.separated(a.trained["FedRep"], a.trained["FedAvg"]),
                dict(holds="is above FedAvg's by more than the spread over seeds",
                     fails="is not above FedAvg's by more than the spread over seeds",
                     paper="Table 1: FedRep far above FedAvg without fine-tuning", scale="long")))
    return out


def glue_long_settings(long) -> None:
    """Glue the committed run's settings that the prose quotes (``nc-long-<name>``: classes held
    out and trained on, clients, S, new clients and their S, head epochs, images, rounds, seeds;
    ``nc-long-chance``)."""
    from replearn.book.claims import glue_text

    ls, lt = long.settings, long.settings["train"]
    k = 100 if ls["dataset"] == "cifar100" else 10
    for name, value in (("n-new", ls["n_new"]), ("n-train", k - ls["n_new"]), ("clients", ls["clients"]),
                        ("S", ls["classes_per_client"]), ("new-clients", ls["new_clients"]),
                        ("new-S", ls["new_classes_per_client"]), ("epochs", ls["head_epochs_new"]),
                        ("new-train", ls["new_train"]), ("rounds", lt["rounds"]), ("seeds", len(long.seeds))):
        glue_text(f"nc-long-{name}", str(value))
    glue_text("nc-long-chance", f"1/{ls['new_classes_per_client']}")


def describe_long(ls: dict, cfg: NewClientSettings) -> str:
    """What the committed long run trained, beside the CPU run of the page (``cfg``)."""
    lt = ls["train"]
    return (f"{ls['dataset']}: {ls['n_new']} classes held out; {ls['clients']} training clients with S = "
            f"{ls['classes_per_client']}, T = {lt['rounds']} rounds, r = {lt['participation']}, {ls['dtype']}; "
            f"{ls['new_clients']} new clients with {ls['new_classes_per_client']} held-out classes and {ls['new_train']} "
            f"training images each, {ls['head_epochs_new']} head epochs (the CPU run above: {cfg.dataset}, "
            f"{cfg.clients} training clients, T = {cfg.train.rounds})")


def dataset_label(name: str) -> str:
    """``"cifar100"`` -> ``"CIFAR-100"``."""
    return name.upper().replace("CIFAR", "CIFAR-")


def paper_table(a: Accuracies, la: Accuracies, dataset: str):
    """The paper's claims beside the CPU run (``a``, CIFAR-10) and the near-paper run (``la``, on
    ``dataset``), in points, paired over seeds (Fig. 6 is on FEMNIST)."""
    from replearn.book.claims import compared
    from replearn.book.plotting import Table

    def pts(v):
        return [100 * x for x in v]

    def both(field, x, y):
        return [compared(pts(getattr(r, field)[x]), pts(getattr(r, field)[y])) for r in (a, la)]

    rows = [["new clients: FedRep's body vs FedAvg's", "higher (FedRep significantly better than the baselines)",
             *both("last", "FedRep", "FedAvg")],
            ["new clients: FedRep's body vs the random body", "higher (implied: Fig. 6 has no untrained body)",
             *both("last", "FedRep", "random body")],
            ["new clients: FedAvg's body vs the random body", "not shown (our baseline)",
             *both("last", "FedAvg", "random body")],
            ["training clients: FedRep vs FedAvg", "higher (Table 1, CIFAR)", *both("trained", "FedRep", "FedAvg")]]
    return Table(["claim", "paper (Fig. 6 on FEMNIST; Table 1)", f"CPU default ({len(a.last['FedRep'])} seeds, CIFAR-10)",
                  f"near-paper ({len(la.last['FedRep'])} seeds, {dataset_label(dataset)})"], rows, align="llll",
                 caption="first minus second, in points, after the last head epoch: the paired mean difference over "
                         "seeds with its 95% interval; 'beyond the spread': the 95% interval of the paired difference "
                         "excludes 0")


def plot_curves(epochs, curves: dict, chance: float, title: str, *, long: bool = False):
    """New clients' test accuracy (%) against the head epochs, one curve per body (``curves[m]``:
    (seeds, epochs) array of fractions; mean ± sd over seeds), with the ``chance`` line (%). The
    long run's figure (``long``) has smaller markers, ticks every 5 epochs and a line called
    "chance" (the CPU one: "majority-class head"). Returns the figure."""
    import matplotlib.pyplot as plt
    import numpy as np

    from replearn.book.plotting import COLORS

    fig, ax = plt.subplots(figsize=(8.0, 3.8))
    for m in NEW_METHODS:
        c = 100 * np.asarray(curves[m])
        style = dict(fmt="o-", ms=3, capsize=2) if long else dict(fmt="o-", capsize=3)
        ax.errorbar(epochs, c.mean(0), yerr=c.std(0, ddof=1), **style, color=COLORS.get(m, "#7f7f7f"),
                    label=f"head on {m}" if m == "random body" else f"head on {m}'s body")
    ax.axhline(chance, color="k", ls=":", lw=1, label="chance" if long else "majority-class head")
    ax.set(xlabel="head epochs on the new clients", ylabel="new clients' test accuracy (%)", title=title)
    if long:
        ax.set(xticks=range(0, len(epochs) + 1, 5))
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)   # beside the axes
    plt.tight_layout()
    return fig
