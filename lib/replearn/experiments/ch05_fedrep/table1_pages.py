"""What the pages of Table 1 show: book 5.7's tables, checks and figure of one run, and Appendix
B.5.7's audit of the near-paper runs (seeds, data per client, the authors' values, Table 1's five
columns), read from :mod:`replearn.experiments.ch05_fedrep.s07_cifar_personalisation`'s results."""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
from scipy.stats import spearmanr

from replearn.neural import algorithms
from replearn.book import results, seeds
from replearn.book.claims import compared, fmt, glue_diff, glue_pm, glue_text
from replearn.book.plotting import COLORS, Table
from replearn.book.seeds import compare, mean_sd
from replearn.experiments.ch05_fedrep.cifar_federation import FederationSettings
from replearn.experiments.ch05_fedrep.table1 import (AUTHORS_OPTIONS, AUTHORS_TRAIN, AUTHORS_VARIANTS, PAPER_TABLE1,
                                                     TABLE_METHODS, column_key, column_label, column_slug,
                                                     paper_reference)


# --------------------------------------------------------------------------- 5.7: one run

#: The methods of the CPU default with a personal part (all but FedAvg), FedRep aside.
PERSONAL = tuple(m for m in TABLE_METHODS if m not in ("FedAvg", "FedRep"))
#: The global models of Table 1 (no personal part) that the near-paper run compares with.
GLOBAL = ("FedAvg", "FedProx", "SCAFFOLD")
#: The paper's pairwise claims the page puts beside our runs: (first method, second method).
PAIRS = (("FedRep", "FedAvg"), ("FedAvg+FT", "FedAvg"), ("FedRep", "FedAvg+FT"), ("FedRep", "FedPer"),
         ("FedRep", "LG-FedAvg"), ("FedRep", "Local only"), ("FedRep", "Ditto"), ("FedRep", "APFL"))


def slug(method: str) -> str:
    """A method's name in glue labels, its letters and digits: ``"FedAvg+FT"`` -> ``"fedavgft"``,
    ``"LG-FedAvg"`` -> ``"lgfedavg"``, ``"Per-FedAvg (authors' code)"`` -> ``"perfedavgauthorscode"``."""
    return "".join(c for c in method.lower() if c.isascii() and c.isalnum())


def method_color(method: str) -> str:
    """The book's colour of a method (a +FT method takes its base method's; brown if none)."""
    return COLORS.get(method.split("+")[0], "#8c564b")


def accuracies(runs, part) -> dict[str, list[float]]:
    """``{method: [personalised accuracy (fraction), one per run]}`` on partition ``part``, for
    the methods of :data:`TABLE_METHODS`."""
    return {m: [r.accuracy[part][m] for r in runs] for m in TABLE_METHODS}


def glue_tables(acc: dict, part, key, paper: dict) -> tuple[dict, tuple]:
    """Glue every method's accuracy in % (``t1-<slug>``: mean ± sd over seeds) and FedRep's lead
    over each personalised method (``t1-diff-<slug>``: paired difference in points); returns the
    shown strings ``{method: MeanPm}`` and two tables: ours beside the paper's column ``key``
    (``paper``: its accuracies) and FedRep's leads."""
    n = len(acc["FedRep"])
    shown = {m: glue_pm(f"t1-{slug(m)}", acc[m], scale=100) for m in acc}
    diffs = {m: glue_diff(f"t1-diff-{slug(m)}", acc["FedRep"], acc[m], scale=100) for m in PERSONAL}
    return shown, (Table(["method", "ours %", "paper %"], [[m, shown[m].text, fmt(paper[m], ".2f")] for m in acc],
                         caption=f"{column_label(part)} (the paper: n = {key[1]}); ours: mean ± sd over {n} seeds"),
                   Table(["FedRep minus", "points, paired over seeds [95% interval]"],
                         [[m, diffs[m].text] for m in PERSONAL]))


def checks(acc: dict, shown: dict, S: int) -> list[tuple[str, str, object, dict]]:
    """The CPU run's verdicts as ``(name, label, condition, options)`` for
    :func:`replearn.book.claims.verdict`, every ordering paired over seeds in percentage points
    (the unit of the table beside them): FedRep and FedAvg+FT above FedAvg (Table 1; required),
    FedAvg below the floor 1/``S`` of a personal head on every seed, every personalised method
    above it, and FedRep ahead of at least one other personalised method."""
    floor, (_, paper) = 100 / S, paper_reference(("cifar10", 100, S))
    above = dict(holds="is above FedAvg's beyond the spread over seeds", fails="is not separated from FedAvg's",
                 opposite="is below FedAvg's beyond the spread over seeds")
    return [("t1-v-fedrep-fedavg", "FedRep above FedAvg without a personal head (paper Table 1)",
             seeds.points(acc["FedRep"], acc["FedAvg"]),
             dict(require=True, **above, paper="Table 1: FedRep far above FedAvg without fine-tuning",
                  paper_difference=paper["FedRep"] - paper["FedAvg"],
                  fedrep=shown["FedRep"].text, fedavg=shown["FedAvg"].text)),
            ("t1-v-ft", "a personal head rescues FedAvg's model: FedAvg+FT above FedAvg",
             seeds.points(acc["FedAvg+FT"], acc["FedAvg"]),
             dict(require=True, **above, paper="Table 1: fine-tuning a head (FedAvg+FT) closes FedAvg's gap",
                  fedavg_ft=shown["FedAvg+FT"].text)),
            ("t1-v-fedavg-floor", f"FedAvg below the floor 1/S = {floor:.0f}% of a personal head on every seed",
             100 * max(acc["FedAvg"]) < floor, dict(holds="is below it on every seed",
                                                     fails="is not below it on every seed")),
            ("t1-v-floor", f"every personalised method's mean accuracy above the floor 1/S = {floor:.0f}%",
             all(100 * seeds.mean_sd(acc[m])[0] > floor for m in [*PERSONAL, "FedRep"]),
             dict(holds="are all above", fails="are not all above")),
            ("t1-v-rank", "FedRep ahead of at least one other personalised method",
             seeds.some(seeds.points(acc["FedRep"], acc[m]) for m in PERSONAL),
             dict(holds="FedRep is ahead of at least one of them beyond the spread over seeds",
                  fails="FedRep is not separated from them", opposite="FedRep is below all of them",
                  paper="Table 1: FedRep ahead of (or close to the best of) FedPer, LG-FedAvg and Local only"))]


def plot_table(acc: dict, paper: dict, part, key, rounds: int):
    """Left: our personalised accuracy per method (bars: mean ± sd; dots: seeds) with the floor
    1/S of a personal head; right: the paper's Table 1 column ``key``. Returns the figure."""
    methods = list(acc)
    x = np.arange(len(methods))
    colors = [method_color(m) for m in methods]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10.0, 3.6), sharey=True)
    ax1.set_ylim(0, 112)
    ax1.bar(x, [100 * mean_sd(acc[m])[0] for m in methods], yerr=[100 * mean_sd(acc[m])[1] for m in methods],
            capsize=3, color=colors)
    for j, m in enumerate(methods):
        ys = 100 * np.array(acc[m])
        ax1.plot(np.full(len(ys), x[j]) + np.linspace(-0.2, 0.2, len(ys)), ys, "k.", ms=4)
    ax1.axhline(100 / part[2], color="k", ls=":", lw=1, label="floor 1/S of a personal head")
    ax1.set(xticks=x, ylabel="personalised test accuracy (%)",
            title=f"ours: {column_label(part)}, T = {rounds}; {len(acc[methods[0]])} seeds")
    ax1.set_xticklabels(methods, rotation=30, ha="right")
    ax1.legend(fontsize=8, loc="upper right", frameon=False)   # above the bars
    ax2.bar(x, [paper[m] for m in methods], color=colors)
    ax2.axhline(100 / part[2], color="k", ls=":", lw=1)
    ax2.set(xticks=x, title=f"paper's Table 1: n = {key[1]}, S = {key[2]}, T = 100")
    ax2.set_xticklabels(methods, rotation=30, ha="right")
    plt.tight_layout()
    return fig


# --------------------------------------------------------------------------- Appendix B.5.7: the near-paper runs
# (read from the committed results files, book/results/long/5.7*.json; nothing here trains)

def rank(values: dict) -> dict:
    """``{method: its rank}`` by decreasing value (1 = best; ties share the better rank)."""
    return {m: 1 + sum(v > values[m] for v in values.values()) for m in values}


def ordinal(k: int) -> str:
    """``1`` -> ``"first"``, ``2`` -> ``"second"``, ``3`` -> ``"third"``, else ``"<k>th"``."""
    return {1: "first", 2: "second", 3: "third"}.get(k, f"{k}th")


@dataclass(frozen=True)
class LongTable:
    """The committed near-paper run (one seed): its partition ``part`` (and as the results
    file's key, ``label``), the paper's column ``key`` with its accuracies ``paper``, the
    ``methods`` run, ``acc`` (``{method: accuracy %}``) and ``client`` (``{method: final
    accuracy % per client}``)."""

    part: tuple
    label: str
    key: tuple
    paper: dict
    methods: list
    seed: int
    acc: dict
    client: dict


def read_long(long) -> LongTable:
    """:class:`LongTable` of a results file with one seed (:func:`replearn.book.results.load`); a
    row of the authors' variants (``variants``) is set beside its method's paper number."""
    (seed,) = long.seeds
    part = tuple(long.settings["partitions"][0])
    label = column_key(part)
    key, paper = paper_reference(part)
    paper = {**paper, **{row: paper[m] for row, m in long.settings.get("variants", {}).items()}}
    methods = list(long.settings["methods"])
    acc = {m: 100 * long.values("accuracy", label, m)[0] for m in methods}
    client = {m: [100 * a for a in long.results[str(seed)]["client_accuracy"][label][m]] for m in methods}
    return LongTable(part, label, key, paper, methods, seed, acc, client)


def paper_word(paper: dict, a: str, b: str) -> str:
    """How the paper's column ``paper`` orders ``a`` and ``b``: ``"higher (+2.09)"``."""

    d = paper[a] - paper[b]
    return f"{'higher' if d > 0 else 'lower'} ({fmt(d, '+.2f')})"


def seed_accuracies(more, lv: LongTable) -> dict[str, list[float]]:
    """``{method: [accuracy %, seed by seed]}`` of the methods of the extra seeds' results file
    ``more``, the near-paper run's seed first."""
    return {m: [lv.acc[m]] + [100 * v for v in more.values("accuracy", lv.label, m)] for m in more.settings["methods"]}


def seed_tables(sacc: dict, lv: LongTable, seeds_run: tuple, rounds: int) -> tuple:
    """Glue each method's mean ± sd over the seeds (``t1-seeds-<slug>``) and return two tables:
    accuracy per seed beside the paper's, and the paper's pairwise claims paired over seeds."""

    shown = {m: glue_pm(f"t1-seeds-{slug(m)}", v) for m, v in sacc.items()}
    k = len(seeds_run)
    rows = [[m, fmt(lv.paper[m], ".2f")] + [fmt(v, ".1f") for v in sacc[m]] + [shown[m].text] for m in sacc]
    return (Table(["method", "paper %"] + [f"seed {s} %" for s in seeds_run] + ["mean ± sd"], rows,
                  align="l" + "r" * (k + 2),
                  caption=f"the near-paper run ({column_label(lv.part)}, T = {rounds}) of the six main methods on "
                          f"{k} seeds"),
            Table(["claim", f"paper (Table 1, {column_label(lv.key)})", f"near-paper ({k} seeds, paired over seeds)"],
                  [[f"{a} vs {b}", paper_word(lv.paper, a, b), compared(sacc[a], sacc[b])]
                   for a, b in PAIRS if a in sacc and b in sacc],
                  align="lll", caption="first minus second method, in points: the paired mean difference over seeds "
                                       "and its 95% interval"))


def seed_checks(sacc: dict, paper: dict) -> list[tuple[str, str, object, dict]]:
    """The verdicts of the near-paper run over its seeds (paired over seeds): FedRep above
    FedAvg, FedPer and LG-FedAvg, and FedRep and Local only in the paper's order (Local only
    above), each with the paper's own difference."""

    def diff(a, b):
        return dict(paper_difference=paper[a] - paper[b], scale="long")

    label = "near-paper run, three seeds: FedRep above {} beyond the spread over seeds"
    near = dict(holds="is above it beyond the spread over seeds", fails="is not separated from it by the spread over seeds")
    reverse = seeds.separated(sacc["FedRep"], sacc["Local only"], unit="points")
    return [("t1-seeds-v-fedrep-fedavg", label.format("FedAvg"), seeds.separated(sacc["FedRep"], sacc["FedAvg"], unit="points"),
             dict(holds="is above FedAvg's beyond the spread over seeds",
                  fails="is not above FedAvg's beyond the spread over seeds",
                  paper="Table 1: FedRep far above FedAvg without fine-tuning", **diff("FedRep", "FedAvg"))),
            ("t1-seeds-v-fedrep-fedper", label.format("FedPer"), seeds.separated(sacc["FedRep"], sacc["FedPer"], unit="points"),
             dict(**near, paper="Table 1: FedRep above FedPer (+0.57 points)", **diff("FedRep", "FedPer"))),
            ("t1-seeds-v-fedrep-lg", label.format("LG-FedAvg"), seeds.separated(sacc["FedRep"], sacc["LG-FedAvg"], unit="points"),
             dict(**near, paper="Table 1: FedRep above LG-FedAvg (+3.56 points)", **diff("FedRep", "LG-FedAvg"))),
            ("t1-seeds-v-fedrep-local", "near-paper run, three seeds: FedRep and Local only ordered as in the paper "
                                        "(Local only above) beyond the spread over seeds",
             seeds.separated(sacc["Local only"], sacc["FedRep"], unit="points"),
             dict(holds="is below it beyond the spread over seeds, as in the paper",
                  fails=("is above it beyond the spread over seeds, the reverse of the paper's order" if reverse
                         else "is not separated from it by the spread over seeds, unlike the paper"),
                  paper="Table 1: Local only above FedRep (+2.09 points) at (100, 2)",
                  **diff("Local only", "FedRep")))]


# --------------------------------------------------------------------------- data per client

#: What a paired difference of these tables compares: the results files keep each client's accuracy
#: after the last round, while their % columns are the last 10 rounds' average, so a paired
#: difference and the difference of two % columns need not agree.
PAIRED_NOTE = ("paired differences: each client's accuracy after the last round; % columns: the average of "
               "the last 10 rounds")

def read_data_gap(m200, m500) -> tuple[LongTable, LongTable]:
    """The runs of sections ``5.7-m200`` and ``5.7-m500`` (results files, :func:`replearn.book.results.load`)
    as two :class:`LongTable`, checked to differ only in the data per client
    (:meth:`TableSettings.per_client_images`): the same settings but ``kept_per_client``."""
    same = [k for k in set(m200.settings) | set(m500.settings)
            if k != "kept_per_client" and m200.settings.get(k) != m500.settings.get(k)]
    if same or m200.seeds != m500.seeds:
        raise ValueError(f"5.7-m200 and 5.7-m500 must differ only in kept_per_client; they also differ in "
                         f"{sorted(same) or 'their seeds'}: re-run both with the same code")
    return read_long(m200), read_long(m500)


def data_gap_table(small: LongTable, big: LongTable, near: LongTable):
    """What the paper's 500 training images per client are worth, for each method of both runs:
    the paper's accuracy, the near-paper run's (``near``: 100 clients of 200 images), the 40-client
    runs with 200 (``small``) and 500 (``big``) images each, the gain from 500 images paired over
    the 40 clients (the same label sets and test sets; :func:`replearn.book.claims.compared`) and
    the gap to the paper left with 500. Glues ``t1-m200-<slug>`` and ``t1-m500-<slug>`` (%),
    ``t1-mgain-<slug>`` (the paired comparison, in words), ``t1-mdiff-<slug>`` (its difference and
    interval, ``"+5 [+2, +8]"``) and ``t1-mleft-<slug>`` (the paper minus the
    500-image run, in points)."""

    rows = []
    for m in small.methods:
        gain = compared(big.client[m], small.client[m])
        left = fmt(big.paper[m] - big.acc[m], "+.1f")
        glue_text(f"t1-m200-{slug(m)}", fmt(small.acc[m], ".1f"))
        glue_text(f"t1-m500-{slug(m)}", fmt(big.acc[m], ".1f"))
        glue_text(f"t1-mgain-{slug(m)}", gain)
        glue_text(f"t1-mdiff-{slug(m)}", compare(big.client[m], small.client[m]).text)
        glue_text(f"t1-mleft-{slug(m)}", left)
        rows.append([m, fmt(big.paper[m], ".2f"), fmt(near.acc[m], ".1f") if m in near.acc else "not run",
                     fmt(small.acc[m], ".1f"), fmt(big.acc[m], ".1f"), gain, left])
    n = len(small.client[small.methods[0]])
    return Table(["method", "paper %", f"near-paper % ({near.part[1]} x 200)", f"{n} x 200 %", f"{n} x 500 %",
                  "500 minus 200, paired over clients", "paper minus 500, points"], rows, align="lrrrrlr",
                 caption=f"the near-paper protocol on {n} CIFAR-10 clients of S = {small.part[2]} classes with 200 "
                         f"and with 500 training images each (the same clients, label sets and test sets; one seed; "
                         f"{PAIRED_NOTE})")


def paper_gaps(lv: LongTable):
    """How far each method of the near-paper run is from the paper's number, by the book's rule
    (:mod:`replearn.book.seeds`): the gap (ours minus the paper's, in points) counts when it exceeds
    the half-width of the 95% t-interval of the mean over the clients (of their final accuracies).
    Glues ``t1-long-gap-<slug>`` (the gap, points), ``t1-long-n-gaps`` (``"<k> of <all>"``) and
    ``t1-long-gaps-largest`` (the three largest beyond the spread, with their gaps); returns the table and the methods beyond the spread, largest gap first."""

    rows, beyond = [], []
    for m in lv.methods:
        half, gap = spread(lv, m), lv.acc[m] - lv.paper[m]
        glue_text(f"t1-long-gap-{slug(m)}", fmt(gap, "+.1f"))
        if abs(gap) > half:
            beyond.append(m)
        rows.append([m, fmt(lv.paper[m], ".2f"), fmt(lv.acc[m], ".1f"), fmt(gap, "+.1f"), f"± {fmt(half, '.1f')}",
                     "beyond the spread" if abs(gap) > half else "within the spread"])
    glue_text("t1-long-n-gaps", f"{len(beyond)} of {len(lv.methods)}")
    beyond.sort(key=lambda m: -abs(lv.acc[m] - lv.paper[m]))
    glue_text("t1-long-gaps-largest", ", ".join(f"{m} ({fmt(lv.acc[m] - lv.paper[m], '+.1f')})" for m in beyond[:3])
              or "none")
    return (Table(["method", "paper %", "near-paper %", "gap, points", "spread (95%, over clients)", ""], rows,
                  align="lrrrrl", caption=f"each method of the near-paper run ({column_label(lv.part)}, one seed) "
                                          f"against the paper's Table 1 ({column_label(lv.key)})"), beyond)


def own_gaps(own: LongTable) -> None:
    """Glue ``t1-own-gap-<slug>``: each row of ``own`` (the run at each method's own defaults,
    ``5.7-defaults``) minus the paper's number, in points, for the page's list of gaps."""
    for m in own.methods:
        glue_text(f"t1-own-gap-{slug(m)}", fmt(own.acc[m] - own.paper[m], "+.1f"))


def fedavg_local(local, long, lv: LongTable) -> str:
    """The near-paper FedAvg run tested with the clients' locally updated copies (the results
    file ``local`` of section ``5.7-fedavg-local``), checked to be the run of ``long`` (the
    ``5.7-defaults`` file, read as ``lv``) but for what is tested, against its global model, paired over the clients.
    Glues ``t1-fedavg-local`` (%) and ``t1-fedavg-local-vs`` (:func:`replearn.book.claims.compared`,
    the copies minus the global model) and returns the latter."""

    differ = [k for k in set(local.settings) | set(long.settings) if k not in ("methods", "options")
              and local.settings.get(k) != long.settings.get(k)]
    evaluate = local.settings.get("options", {}).get("FedAvg", {}).get("evaluate")
    if differ or local.seeds != long.seeds or evaluate != "local":
        raise ValueError(f"5.7-fedavg-local must be the run of {long.section} with FedAvg's evaluate='local'; it "
                         f"differs in {sorted(differ) or 'its seeds or FedAvg options'}: re-run it with the same code")
    copies = read_long(local)
    glue_text("t1-fedavg-local", fmt(copies.acc["FedAvg"], ".1f"))
    return glue_text("t1-fedavg-local-vs", compared(copies.client["FedAvg"], lv.client["FedAvg"]))


# --------------------------------------------------------------------------- Table 1 as the authors ran it

def setting_words(value) -> str:
    """A setting's value as the page writes it: ``True`` -> ``"yes"``, ``0.0001`` -> ``"0.0001"``,
    ``None`` (an option left off, e.g. no clipping) -> ``"none"``."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return fmt(value, "g") if isinstance(value, float) else str(value)


def authors_table():
    """Every option and training setting the near-paper profiles take from the FedRep authors'
    code (:data:`AUTHORS_OPTIONS`, :data:`AUTHORS_TRAIN`) beside the value the method's own
    paper runs (the library's default, whose docstring names its source): ``method | setting |
    the method's paper (ours by default) | the authors' code | where``."""
    rows = []
    for row, option, value, where in AUTHORS_OPTIONS:
        default = getattr(algorithms.get(AUTHORS_VARIANTS.get(row, row)).Options(), option)
        rows.append([row, option, setting_words(default), setting_words(value), where])
    train = FederationSettings.profile("paper").train
    for row, col, name, value, where in AUTHORS_TRAIN:
        who = "every method" if row == "*" else row
        rows.append([who + ("" if col == "*" else f", column {col.replace('/', ' ')}"), name,
                     setting_words(getattr(train, name)), setting_words(value), where])
    rows.append(["every method with a personal part", "first_visit", "initial", "average",
                 "main_fedrep.py, main_ditto.py, main_apfl.py (w_locals: views of net_glob's tensors)"])
    return Table(["method", "setting", "its paper (ours by default)", "the authors' code", "where"], rows,
                 align="lllll", caption="what the near-paper profiles take from the FedRep authors' code")


#: The results section of each column of Table 1 run near-paper with the authors' values.
COLUMN_SECTIONS = {col: "5.7" if col == ("cifar10", 100, 2) else f"5.7-{column_slug(col)}" for col in PAPER_TABLE1}


def read_columns(root=None) -> dict:
    """``{column: LongTable}`` of the columns of Table 1 whose near-paper run with the authors'
    values is committed (:data:`COLUMN_SECTIONS`), in Table 1's order; a column not yet run is
    left out (:func:`missing_columns` names it)."""
    out = {}
    for col, section in COLUMN_SECTIONS.items():
        try:
            out[col] = read_long(results.load(section, "long", root=root))
        except FileNotFoundError:
            continue
    return out


def missing_columns(runs: dict) -> list[str]:
    """The columns of Table 1 without a committed near-paper run, in words."""
    return [column_label(col) for col in PAPER_TABLE1 if col not in runs]


def columns_table(runs: dict):
    """Every row of the near-paper runs (``runs``: :func:`read_columns`) beside the paper's Table 1,
    one pair of columns (ours, the paper's) per column run, in %."""
    rows_order = list(dict.fromkeys(m for lv in runs.values() for m in lv.methods))
    header, rows = ["method"], []
    for col in runs:
        header += [f"{column_label(col)}: ours", "paper"]
    for m in rows_order:
        row = [m]
        for lv in runs.values():
            row += [fmt(lv.acc[m], ".1f") if m in lv.acc else "not run", fmt(lv.paper[m], ".2f") if m in lv.paper
                    else "—"]
        rows.append(row)
    return Table(header, rows, align="l" + "r" * (len(header) - 1),
                 caption="Table 1 as the FedRep authors ran it, near-paper on the offline subsets (one seed each; "
                         "a row '(authors' code)' runs what their code runs for that method, beside the paper's number "
                         "for the method)")


#: What :func:`gap_causes` may find accounts for a gap, in the order it asks, with the glue key
#: that lists the rows each accounts for.
GAP_CAUSES = (("data per client", "t1-gc-data"), ("the authors' values", "t1-gc-authors"),
              ("the authors' loop, 500 images", "t1-gc-loop"), ("own defaults, 500 images", "t1-gc-both"))


def gap_causes(first: LongTable, *with_500: LongTable, own: LongTable | None = None,
               own_500: LongTable | None = None):
    """Issue 43's "every gap named": each row of ``first`` (the first column with the authors' values)
    whose gap to the paper exceeds the spread over its clients (:func:`spread_gaps`), beside its
    accuracy on the 40 clients with the paper's 500 images each (the first run of ``with_500`` that
    holds the row: the runs with the authors' values first, then the earlier ones), and what accounts
    for the gap (:data:`GAP_CAUSES`), asked in turn, the first that puts the paper's number within
    its run's spread over the clients deciding:

    1. "data per client": that 500-image run (the 200 images per client of the offline subset
       account for the gap);
    2. "the authors' values": ``own``, the same column with every method at its own defaults
       (``5.7-defaults``);
    3. "the authors' loop, 500 images": for a method whose paper the authors' code does not run
       (:data:`~replearn.experiments.ch05_fedrep.table1.AUTHORS_VARIANTS`), the authors' loop on the
       500-image clients (a run of ``with_500`` holding that row): the paper's number is what their
       loop gives with the paper's data;
    4. "own defaults, 500 images": ``own_500``, the method at its own defaults on the 500-image
       clients (``5.7-m500-defaults``: both changes at once);

    else "not accounted for", or "not measured" where no 500-image run holds the row. Glues
    ``t1-gc-unexplained`` (``"<k> of <m>"``: Table 1's methods with a gap no cause accounts for, of
    the ``m`` in ``first``), ``t1-gc-list`` (those methods), ``t1-gc-loops-open`` (the rows of the
    authors' own loops left open; "none") and, per cause, the rows it accounts for
    (:data:`GAP_CAUSES`' keys; "none"). Returns the table and the rows left open (loops included)."""
    loops = {method: row for row, method in AUTHORS_VARIANTS.items()}

    def within(run, row) -> bool:
        return run is not None and row in run.acc and abs(run.acc[row] - run.paper[row]) <= spread(run, row)

    rows, open_rows, by = [], [], {cause: [] for cause, _ in GAP_CAUSES}
    for m in spread_gaps(first):
        run = next((r for r in with_500 if m in r.acc), None)
        loop = next((r for r in with_500 if loops.get(m) in r.acc), None)
        cells = ["—", "—", "—"]
        if run is not None:
            cells = [fmt(run.acc[m], ".1f"), fmt(run.acc[m] - run.paper[m], "+.1f"), f"± {fmt(spread(run, m), '.1f')}"]
        asked = (within(run, m), within(own, m), within(loop, loops.get(m)), within(own_500, m))
        cause = next((c for (c, _), yes in zip(GAP_CAUSES, asked) if yes),
                     "not accounted for" if run is not None else "not measured")
        if cause in by:
            by[cause].append(m)
        else:
            open_rows.append(m)
        rows.append([m, fmt(first.acc[m] - first.paper[m], "+.1f"), *cells, cause])
    open_methods = [m for m in open_rows if m not in AUTHORS_VARIANTS]
    methods = [m for m in first.methods if m not in AUTHORS_VARIANTS]
    glue_text("t1-gc-unexplained", f"{len(open_methods)} of {len(methods)}")
    glue_text("t1-gc-list", ", ".join(open_methods) or "none")
    glue_text("t1-gc-loops-open", ", ".join(m for m in open_rows if m in AUTHORS_VARIANTS) or "none")
    for cause, key in GAP_CAUSES:
        glue_text(key, ", ".join(by[cause]) or "none")
    n = len(next(iter(with_500[0].client.values()))) if with_500 else 0
    caption = (f"each row of {column_label(first.part)} beyond the spread from the paper, beside the same method on "
               f"{n} clients with the paper's 500 images each and, where those leave the gap open, the runs that "
               f"account for it (in this order: the method at its own defaults on the same column; the authors' "
               f"own loop on the 500-image clients; the method at its own defaults on the 500-image clients)")
    return (Table(["method", "gap, points (100 x 200)", f"{n} x 500 %", "gap with 500, points",
                   f"spread (95%, over {n} clients)", "the gap is accounted for by"], rows, align="lrrrrl",
                  caption=caption), open_rows)


def spread_gaps(lv: LongTable) -> list[str]:
    """The rows whose accuracy is further from the paper's than the half-width of the 95% interval
    of the mean over the clients, largest gap first."""
    beyond = [m for m in lv.methods if abs(lv.acc[m] - lv.paper[m]) > spread(lv, m)]
    return sorted(beyond, key=lambda m: -abs(lv.acc[m] - lv.paper[m]))


def spread(lv: LongTable, m: str) -> float:
    """The half-width of the 95% t-interval of row ``m``'s mean accuracy over the clients (points)."""
    c = compare(lv.client[m], [lv.paper[m]] * len(lv.client[m]))
    return (c.hi - c.lo) / 2


def column_claims(lv: LongTable) -> dict:
    """The paper's three claims on one column, paired over its clients (:mod:`replearn.book.seeds`):
    ``best``: FedRep above, or not separated from, the best other row of Table 1 (the paper: best or
    close to the best); ``head``: FedAvg+FT above FedAvg (a personal head rescues a global model);
    ``personal``: every row with a personal part above each global model (:data:`GLOBAL`), judged by
    the weakest pair (the smallest lower bound: all pairs hold when it does). Each is a
    :class:`replearn.book.seeds.Comparison` in points, with the pair or the best row it concerns."""
    c = {m: [x / 100 for x in v] for m, v in lv.client.items()}
    others = [m for m in lv.methods if m != "FedRep" and m not in AUTHORS_VARIANTS]
    best = max(others, key=lambda m: lv.acc[m])
    personal = [m for m in lv.methods if m not in GLOBAL and m not in AUTHORS_VARIANTS]
    pairs = {(m, g): seeds.points(c[m], c[g]) for m in personal for g in GLOBAL}
    weakest = min(pairs, key=lambda pair: pairs[pair].lo)   # every pair holds when this one does
    return {"best": (best, seeds.points(c["FedRep"], c[best])),
            "head": seeds.points(c["FedAvg+FT"], c["FedAvg"]),
            "personal": (weakest, pairs[weakest])}


def best_word(comparison) -> str:
    """FedRep against the best other row, in the book's vocabulary: above it ("holds"), not
    separated from it (also what the paper claims: close to the best), or below it ("opposite")."""
    return {"holds": "holds (FedRep best)", "opposite": "opposite (FedRep below it)"}.get(
        comparison.outcome, f"holds (FedRep not separated from the best, n = {comparison.n})")


def columns_summary(runs: dict):
    """Per column run: FedRep's rank here and in the paper, the Spearman correlation of the rows
    with the paper's, how many rows are further from the paper than the spread over clients, and
    the paper's three claims (:func:`column_claims`) with their paired differences in points."""
    rows = []
    for col, lv in runs.items():
        table_rows = [m for m in lv.methods if m not in AUTHORS_VARIANTS]
        ours, paper = rank({m: lv.acc[m] for m in table_rows}), rank({m: lv.paper[m] for m in table_rows})
        rho = spearmanr([lv.acc[m] for m in table_rows], [lv.paper[m] for m in table_rows]).statistic
        claims = column_claims(lv)
        best, vs_best = claims["best"]
        rows.append([column_label(col), f"{ordinal(ours['FedRep'])} (paper: {ordinal(paper['FedRep'])})", fmt(rho, ".2f"),
                     f"{len([m for m in spread_gaps(lv) if m in table_rows])} of {len(table_rows)}",
                     f"{best_word(vs_best)}: FedRep minus {best} {vs_best.text}",
                     f"{claims['head'].word}: {claims['head'].text}",
                     f"{claims['personal'][1].word}: weakest pair {' minus '.join(claims['personal'][0])} "
                     f"{claims['personal'][1].text}"])
    return Table(["column", "FedRep's rank", "Spearman with the paper", "rows beyond the spread from the paper",
                  "FedRep best or close to the best", "FedAvg+FT minus FedAvg", "every personal row above every global one"],
                 rows, align="lllllll",
                 caption="per column run near-paper: paired over its clients (one seed), the book's rule; rank and "
                         f"correlation over Table 1's rows ({PAIRED_NOTE})")


def authors_against_defaults(authors: LongTable, own: LongTable):
    """Each row of Table 1 run with the authors' values (``authors``: section 5.7) against the same
    column, seed, clients and initial network with every method at its own defaults (``own``:
    ``5.7-defaults``), paired over the clients, in points; glues ``t1-ad-<slug>`` (the comparison)."""
    if authors.part != own.part or authors.seed != own.seed:
        raise ValueError(f"5.7 and 5.7-defaults must run the same column and seed, got {authors.part} seed "
                         f"{authors.seed} and {own.part} seed {own.seed}")
    rows = []
    for m in own.methods:
        c = compare(authors.client[m], own.client[m], unit="points")
        glue_text(f"t1-ad-{slug(m)}", c.text)
        rows.append([m, fmt(own.acc[m], ".1f"), fmt(authors.acc[m], ".1f"), c.text, c.word,
                     fmt(authors.paper[m], ".2f")])
    for row, m in AUTHORS_VARIANTS.items():
        if row in authors.acc:
            c = compare(authors.client[row], own.client[m], unit="points")
            glue_text(f"t1-ad-{slug(row)}", c.text)
            rows.append([row, fmt(own.acc[m], ".1f") + f" ({m})", fmt(authors.acc[row], ".1f"), c.text, c.word,
                         fmt(authors.paper[row], ".2f")])
    return Table(["method", "its own defaults %", "the authors' values %", "difference, paired over clients",
                  "outcome", "paper %"], rows, align="lrrllr",
                 caption=f"{column_label(own.part)}: each method at its own defaults (5.7-defaults) and with the "
                         f"FedRep authors' values (5.7), the same clients and initial network, one seed ({PAIRED_NOTE})")


def local_budget(ten: LongTable, hundred: LongTable):
    """Local only after 10 epochs (``ten``: section 5.7-m500, with weight decay) and after the
    authors' 100 epochs (``hundred``: 5.7-m500-local100, without), on the same clients of 500
    images, paired over them, in points; glues ``t1-local-10``, ``t1-local-100`` (%) and
    ``t1-local-gain`` (the comparison)."""
    if ten.part != hundred.part or ten.seed != hundred.seed:
        raise ValueError("5.7-m500 and 5.7-m500-local100 must run the same clients and seed")
    c = compare(hundred.client["Local only"], ten.client["Local only"], unit="points")
    glue_text("t1-local-10", fmt(ten.acc["Local only"], ".1f"))
    glue_text("t1-local-100", fmt(hundred.acc["Local only"], ".1f"))
    glue_text("t1-local-gain", c.text)
    return Table(["Local only", "accuracy %", "paper %"],
                 [["10 epochs (the library's default; weight decay 1e-4)", fmt(ten.acc["Local only"], ".1f"),
                   fmt(ten.paper["Local only"], ".2f")],
                  ["100 epochs (the authors' scripts; no weight decay)", fmt(hundred.acc["Local only"], ".1f"),
                   fmt(hundred.paper["Local only"], ".2f")],
                  ["100 minus 10 epochs, paired over clients", c.text, c.word]], align="lrr",
                 caption=f"Local only on {column_label(ten.part)} clients of 500 training images each, one seed "
                         f"({PAIRED_NOTE})")


def column_verdicts(lv: LongTable) -> list[tuple[str, str, object, dict]]:
    """The paper's three claims on the column of ``lv`` (:func:`column_claims`) as ``(name, label,
    condition, options)`` for :func:`replearn.book.claims.verdict`, at scale ``"long"``; names
    ``t1a-<column slug>-best``, ``-head`` and ``-personal``."""
    claims, key = column_claims(lv), f"t1a-{column_slug(lv.part)}"
    best, vs_best = claims["best"]
    where = column_label(lv.part)
    return [(f"{key}-best", f"{where}: FedRep not below the best other method ({best}) beyond the spread",
             vs_best.hi >= 0, dict(holds="is not below it", fails="is below it", absence=True,
                                   paper="Table 1: FedRep the best method or close to it", scale="long",
                                   FedRep_minus_the_best=vs_best.full)),
            (f"{key}-head", f"{where}: FedAvg+FT above FedAvg", claims["head"],
             dict(holds="is above it", fails="is not separated from it", opposite="is below it",
                  paper="Table 1: a personal head rescues a global model", scale="long",
                  paper_difference=lv.paper["FedAvg+FT"] - lv.paper["FedAvg"])),
            (f"{key}-personal", f"{where}: every method with a personal part above each global model "
                                f"(the weakest pair, {' vs '.join(claims['personal'][0])}, decides)",
             claims["personal"][1], dict(holds="all are above", fails="not all are separated from them",
                                      opposite="one is below a global model",
                                      paper="Table 1: every personalised method above FedAvg, FedProx and SCAFFOLD",
                                      scale="long"))]
