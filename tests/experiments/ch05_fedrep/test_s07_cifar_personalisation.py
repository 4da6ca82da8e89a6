"""Book 5.7 driver (replearn.experiments.ch05_fedrep.s07_cifar_personalisation): Table 1 on the
synthetic stand-in of :func:`cifar_fixtures.fake_cifar` (seconds); the default partition on the real
CIFAR-10 subset (skipped without it)."""

from dataclasses import replace

import pytest
import torch

from cifar_fixtures import RESULTS, fake_cifar

from replearn.book import results
from replearn.experiments.ch05_fedrep import s07_cifar_personalisation as s07, table1, table1_pages as pages
from replearn.neural import TrainConfig
from replearn.neural import algorithms
from replearn.experiments.ch05_fedrep.cifar_federation import FederationSettings, make_federation

TINY_TRAIN = TrainConfig(rounds=2, participation=0.4, lr=0.05, momentum=0.5, batch_size=10, local_epochs=1,
                         head_epochs=1, local_steps=None, head_steps=None, eval_every=2, last_rounds=1)
TINY = dict(partitions=(("cifar10", 5, 2),), ft_epochs=1, train_per_client=20, test_per_client=10,
            train=TINY_TRAIN)


def test_default_partition_on_the_real_subset(cifar10):
    s = s07.TableSettings()
    (name, n, S), = s.partitions
    assert name == "cifar10"
    fed = make_federation(cifar10, n, S, train_per_client=s.train_per_client,
                          test_per_client=s.test_per_client, seed=s.seed)
    assert fed.clients.train_sizes.tolist() == [s.train_per_client] * n
    assert all(len(y.unique()) == S for y in fed.clients.y_train)


def test_run_table_tiny():
    s = s07.TableSettings(**TINY)
    r = s07.run_table(s, cifar={"cifar10": fake_cifar()})
    p = s.partitions[0]
    assert r.partitions == s.partitions
    assert set(r.accuracy[p]) == set(s07.TABLE_METHODS)
    for m in s07.TABLE_METHODS:
        assert 0 <= r.accuracy[p][m] <= 1
        assert r.client_accuracy[p][m].shape == (5,)
    assert r.curves[p]["FedRep"].shape == (s.train.rounds,)
    assert bool(torch.isnan(r.curves[p]["FedAvg+FT"]).all())      # fine-tuned once, after training
    assert r.train_sizes[p].tolist() == [20] * 5 and r.test_sizes[p].tolist() == [10] * 5
    # the paper's numbers cover every method and every paper partition
    assert set(s07.TableSettings.profile("paper").partitions) == set(s07.PAPER_TABLE1)
    assert all(tuple(v) == algorithms.table1() for v in s07.PAPER_TABLE1.values())  # every method, in order
    assert set(s07.TABLE_METHODS) <= set(algorithms.table1())
    assert s07.PAPER_TABLE1[("cifar10", 100, 2)]["FedRep"] == 87.70
    assert s07.PAPER_TABLE1[("cifar100", 100, 20)]["Ditto"] == 56.34
    assert s07.TableSettings.profile("paper").methods == algorithms.table1()


def test_run_table_is_deterministic():
    s = s07.TableSettings(**TINY)
    cifar = {"cifar10": fake_cifar()}
    a = s07.run_table(s, cifar=cifar)
    b = s07.run_table(s, cifar=cifar)
    assert a.accuracy == b.accuracy
    p = s.partitions[0]
    assert all(torch.equal(a.client_accuracy[p][m], b.client_accuracy[p][m]) for m in s07.TABLE_METHODS)


def test_bad_settings_raise_at_construction():
    s = s07.TableSettings(**TINY)
    with pytest.raises(ValueError, match="'cifar10' or 'cifar100'"):
        replace(s, partitions=(("mnist", 5, 2),))
    with pytest.raises(ValueError, match="participation"):
        s07.TableSettings(train=replace(s07.TableSettings().train, participation=0.0))
    with pytest.raises(ValueError, match="partitions"):
        replace(s, partitions=())
    with pytest.raises(ValueError, match="S \\(classes per client"):
        replace(s, partitions=(("cifar10", 5, 0),))
    with pytest.raises(ValueError, match="ft_epochs"):
        replace(s, ft_epochs=0)
    with pytest.raises(ValueError, match="dtype"):
        replace(s, dtype="float16")
    with pytest.raises(ValueError, match="seeds"):
        replace(s, seeds=())


def test_paper_reference():
    assert table1.paper_reference(("cifar10", 10, 2))[0] == ("cifar10", 100, 2)
    assert table1.paper_reference(("cifar10", 1000, 2))[0] == ("cifar10", 1000, 2)
    assert table1.paper_reference(("cifar100", 20, 20))[1]["FedRep"] == 56.10
    with pytest.raises(ValueError, match="no column"):
        table1.paper_reference(("cifar10", 10, 3))


def test_cpu_default_and_paper_profile():
    t, p = s07.TableSettings(), s07.TableSettings.profile("paper")
    assert t.train_per_client >= 200 and t.train.rounds * t.train.participation >= 16  # 16 rounds per client
    assert len(t.seeds) >= 3 and t.dtype == "float64" and t.variant == "narrow"
    m = t.network("cifar10", 10, 0, "cpu")
    assert m.head.weight.dtype == torch.float64 and m.body.conv1.out_channels == 16
    mp = p.network("cifar10", 10, 0, "cpu")
    assert mp.head.weight.dtype == torch.float32 and mp.body.conv1.out_channels == 64
    assert p.train == replace(FederationSettings.profile("paper").train, first_visit="average")   # the authors' shared memory
    assert (p.train.batch_size, p.train.lr, p.train.local_steps, p.train.head_steps, p.train.head_epochs) == \
        (10, 0.01, None, None, 10)
    assert (p.train_per_client, p.test_per_client, p.ft_epochs) == (None, None, 10)
    long = s07.TableSettings.profile("long")  # near-paper: the authors' values on the first column, one seed
    # the authors' protocol (their split, weight decay and augmentation), as in the paper profile
    assert p.split == "authors" and p.train.weight_decay == 1e-4 and p.train.augment
    assert long.split == p.split and long.train.weight_decay == p.train.weight_decay and long.train.augment
    assert long.options_for("Local only").epochs == p.options_for("Local only").epochs == 100
    assert long.options_for("LG-FedAvg") is None and long.train.first_visit == p.train.first_visit == "average"
    # the paper's rounds and evaluation schedule (T = 100, every round, the last 10 averaged)
    assert (long.train.rounds, long.train.eval_every, long.train.last_rounds) == (100, 1, 10)
    assert long.partitions == (("cifar10", 100, 2),) and long.seeds == (0,) and not long.full_data
    assert long.methods == (*algorithms.table1(), *s07.AUTHORS_VARIANTS)
    assert s07.TableSettings.column(("cifar10", 100, 2), "paper") == replace(long, seeds=p.seeds, full_data=True)


def test_options_are_validated_per_row():
    s = s07.TableSettings(**TINY)
    assert s.options_for("FedRep") is None and s.config_for("FedRep", s.partitions[0]) == s.config()
    with pytest.raises(ValueError, match="FedProxOptions"):
        replace(s, methods=("FedProx",), options={"FedProx": algorithms.get("Ditto").Options()})
    with pytest.raises(ValueError, match="neither a registered method"):
        replace(s, options={"FedProxx": algorithms.get("FedProx").Options()})
    with pytest.raises(ValueError, match="not a TrainConfig field"):
        replace(s, train_overrides=(("FedRep", "*", "mu", 0.1),))
    with pytest.raises(ValueError, match="column"):
        replace(s, train_overrides=(("FedRep", "cifar10/100/3", "local_epochs", 5),))
    with pytest.raises(ValueError, match="local_epochs"):
        replace(s, train_overrides=(("FedRep", "*", "local_epochs", 0),))
    with pytest.raises(ValueError, match="variants"):
        replace(s, variants={"FedRep": "FedRep"})
    over = replace(s, train_overrides=(("*", "*", "local_epochs", 2), ("FedRep", "*", "local_epochs", 3)))
    assert over.config_for("FedRep", s.partitions[0]).local_epochs == 3
    assert over.config_for("FedAvg+FT", s.partitions[0]).local_epochs == 2   # +FT rows train as their base


def test_a_variant_row_runs_its_method_with_its_options():
    row = "Per-FedAvg (authors' code)"
    s = s07.TableSettings(**dict(TINY, methods=("FedAvg", row), variants={row: "Per-FedAvg"},
                                 options={row: algorithms.get("Per-FedAvg").Options(variant="authors")}))
    r = s07.run_table(s, cifar={"cifar10": fake_cifar()})
    assert set(r.accuracy[s.partitions[0]]) == {"FedAvg", row}


def test_the_authors_values_are_stated_once_with_their_source():
    rows = {(row, option) for row, option, _, _ in table1.AUTHORS_OPTIONS}
    assert len(rows) == len(table1.AUTHORS_OPTIONS) and all(where for *_, where in table1.AUTHORS_OPTIONS)
    built = s07.authors_options((*algorithms.table1(), *s07.AUTHORS_VARIANTS))
    for row, option, value, _ in table1.AUTHORS_OPTIONS:
        assert getattr(built[row], option) == value
    assert ("FedProx", "mu") in rows and ("Ditto", "lam") in rows and ("SCAFFOLD", "global_lr") in rows


# --------------------------------------------------------------------------- what the page shows

from types import SimpleNamespace

PART = ("cifar10", 5, 2)


def _runs(n=3):
    level = {"Local only": 0.7, "FedAvg": 0.3, "FedAvg+FT": 0.85, "FedPer": 0.8, "LG-FedAvg": 0.75, "FedRep": 0.86}
    return [SimpleNamespace(accuracy={PART: {m: v + 0.01 * ((seed * (i + 1)) % 3) for i, (m, v) in
                                             enumerate(level.items())}}) for seed in range(n)]


def test_cpu_tables_and_checks(glued):
    runs = _runs()
    acc = s07.accuracies(runs, PART)
    assert list(acc) == list(s07.TABLE_METHODS) and len(acc["FedRep"]) == 3
    key, paper = table1.paper_reference(PART)
    shown, (ours, leads) = s07.glue_tables(acc, PART, key, paper)
    assert glued["t1-fedrep"] == shown["FedRep"].text and f"t1-diff-{pages.slug('FedPer')}" in glued
    assert [row[0] for row in ours.rows] == list(s07.TABLE_METHODS) and len(leads.rows) == len(pages.PERSONAL)
    checks = s07.checks(acc, shown, S=2)
    assert [c[0] for c in checks] == ["t1-v-fedrep-fedavg", "t1-v-ft", "t1-v-fedavg-floor", "t1-v-floor", "t1-v-rank"]
    assert checks[0][3]["require"] and checks[0][3]["fedrep"] == shown["FedRep"].text
    assert checks[2][2] is True and checks[3][2] is True   # FedAvg below 1/S, the others above
    assert checks[0][2].unit == "points"   # verdicts in the unit of the table beside them


def test_figures_count_the_methods_from_the_run():
    import matplotlib.pyplot as plt

    acc = s07.accuracies(_runs(), PART)
    key, paper = table1.paper_reference(PART)
    fig = s07.plot_table(acc, paper, PART, key, rounds=20)
    assert len(fig.axes) == 2 and "3 seeds" in fig.axes[0].get_title()
    plt.close(fig)


# --------------------------------------------------------------------------- data per client

def test_the_data_per_client_runs_differ_only_in_the_images_each_client_keeps():
    small, big = (s07.TableSettings.per_client_images(m) for m in (200, 500))
    long = s07.TableSettings.earlier_protocol()
    assert replace(small, kept_per_client=None) == big and small.kept_per_client == 200
    assert big.partitions == (("cifar10", s07.DATA_CLIENTS, 2),) and big.train_per_client == 500
    assert big.methods == s07.DATA_METHODS and set(s07.DATA_METHODS) <= set(long.methods)
    assert replace(big, partitions=long.partitions, methods=long.methods, train_per_client=long.train_per_client) == long
    # 40 clients of 500: the whole offline subset (2,000 images of each CIFAR-10 class)
    assert s07.DATA_CLIENTS * 500 == 20_000 and s07.DATA_CLIENTS * big.train.participation * big.train.rounds == 400
    with pytest.raises(ValueError, match="images"):
        s07.TableSettings.per_client_images(0)
    with pytest.raises(ValueError, match="kept_per_client"):
        replace(big, kept_per_client=0)


def test_kept_per_client_keeps_the_label_sets_and_test_sets():
    s = s07.TableSettings(**dict(TINY, methods=("Local only", "FedRep")))
    cifar = {"cifar10": fake_cifar()}
    full, kept = (s07.run_table(replace(s, kept_per_client=k), cifar=cifar) for k in (None, 12))
    p = s.partitions[0]
    assert full.train_sizes[p].tolist() == [20] * 5 and kept.train_sizes[p].tolist() == [12] * 5
    assert torch.equal(full.test_sizes[p], kept.test_sizes[p])
    fed = make_federation(cifar["cifar10"], 5, 2, train_per_client=20, test_per_client=10, seed=s.seed)
    cl = fed.clients.take_train(12, seed=0)
    assert all(set(a.tolist()) >= set(b.tolist()) for a, b in zip(fed.clients.y_train, cl.y_train))
    assert full.accuracy[p] != kept.accuracy[p]


# --------------------------------------------------------------------------- Appendix B.5.7

def test_names_ranks_and_words():
    assert [pages.slug(m) for m in ("FedAvg+FT", "LG-FedAvg", "Local only", "Per-FedAvg (authors' code)")] == \
        ["fedavgft", "lgfedavg", "localonly", "perfedavgauthorscode"]
    assert pages.method_color("FedAvg+FT") == pages.method_color("FedAvg") and pages.method_color("Ditto") == "#8c564b"
    assert pages.rank({"a": 3.0, "b": 1.0, "c": 3.0}) == {"a": 1, "b": 3, "c": 1}
    assert [pages.ordinal(k) for k in (1, 2, 3, 7)] == ["first", "second", "third", "7th"]
    assert pages.paper_word({"a": 80.0, "b": 82.09}, "a", "b") == "lower (-2.09)"
    assert "FedAvg" not in pages.PERSONAL and "FedRep" not in pages.PERSONAL


def test_the_committed_runs_are_read_and_shown(glued):
    own = pages.read_long(results.load("5.7-defaults", "long", root=RESULTS))
    assert own.part == ("cifar10", 100, 2) and len(own.client["FedRep"]) == 100
    more = results.load("5.7-seeds", "long", root=RESULTS)
    sacc = pages.seed_accuracies(more, own)
    assert list(sacc) == list(s07.TABLE_METHODS) and all(len(v) == 3 for v in sacc.values())
    per_seed, claims = pages.seed_tables(sacc, own, (own.seed,) + more.seeds, rounds=100)
    assert [c[0] for c in pages.seed_checks(sacc, own.paper)][-1] == "t1-seeds-v-fedrep-local"
    gaps, beyond = pages.paper_gaps(own)
    assert set(beyond) <= set(own.methods) and glued["t1-long-n-gaps"].endswith(f"of {len(own.methods)}")
    small, big = pages.read_data_gap(*(results.load(f"5.7-m{m}", "long", root=RESULTS) for m in (200, 500)))
    assert pages.data_gap_table(small, big, own).rows
    pages.fedavg_local(results.load("5.7-fedavg-local", "long", root=RESULTS), results.load("5.7-defaults", "long",
                                                                                       root=RESULTS), own)
    ten, hundred = (pages.read_long(results.load(s, "long", root=RESULTS)) for s in ("5.7-m500", "5.7-m500-local100"))
    table = pages.local_budget(ten, hundred)
    assert glued["t1-local-gain"] == table.rows[2][1] and table.rows[2][2] in ("holds", "opposite") or \
        table.rows[2][2].startswith("not separated")


def test_columns_are_read_as_far_as_they_are_committed():
    runs = pages.read_columns(RESULTS)
    assert set(runs) <= set(s07.PAPER_TABLE1)
    assert len(pages.missing_columns(runs)) == len(s07.PAPER_TABLE1) - len(runs)
    own = pages.read_long(results.load("5.7-defaults", "long", root=RESULTS))
    table, summary = pages.columns_table({own.part: own}), pages.columns_summary({own.part: own})
    assert [row[0] for row in table.rows] == own.methods and summary.rows[0][0] == table1.column_label(own.part)
    names = [v[0] for v in pages.column_verdicts(own)]
    assert names == ["t1a-c10-100-2-best", "t1a-c10-100-2-head", "t1a-c10-100-2-personal"]


def test_authors_values_against_own_defaults_are_paired_over_the_same_clients(glued):
    own = _long_table({"FedAvg": 30.0, "FedRep": 80.0}, {"FedAvg": [30.0, 31, 29, 30], "FedRep": [80.0, 79, 81, 80]})
    authors = _long_table({"FedAvg": 30.0, "FedRep": 85.0},
                          {"FedAvg": [30.0, 31, 29, 30], "FedRep": [85.0, 84, 86, 85]})
    table = pages.authors_against_defaults(authors, own)
    assert [row[4] for row in table.rows] == ["not separated (n = 4)", "holds"]
    assert glued["t1-ad-fedrep"].startswith("+5")
    with pytest.raises(ValueError, match="same column"):
        pages.authors_against_defaults(_long_table({"FedRep": 1.0}, {"FedRep": [1.0, 1.0]}, n=100), own)


def test_the_authors_table_names_every_value_and_its_source():
    table = pages.authors_table()
    assert len(table.rows) == len(table1.AUTHORS_OPTIONS) + len(table1.AUTHORS_TRAIN) + 1
    fedprox = next(row for row in table.rows if row[:2] == ["FedProx", "mu"])
    assert fedprox[2:4] == ["0.01", "0.1"] and "options.py" in fedprox[4]


def _long_table(acc: dict, client: dict, n=40):
    part = ("cifar10", n, 2)
    key, paper = table1.paper_reference(part)
    paper = {**paper, **{row: paper[m] for row, m in table1.AUTHORS_VARIANTS.items()}}   # as read_long sets them
    return pages.LongTable(part, s07.column_key(part), key, paper, list(acc), 0, acc, client)


def test_the_data_gap_table_pairs_the_clients_and_glues_what_the_page_says(glued):
    small = _long_table({"FedAvg": 30.0, "FedRep": 80.0},
                        {"FedAvg": [30.0, 31, 29, 30], "FedRep": [80.0, 79, 81, 80]})
    big = _long_table({"FedAvg": 31.0, "FedRep": 85.0},
                      {"FedAvg": [31.0, 29, 31, 30], "FedRep": [85.0, 84, 86, 85]})
    near = _long_table({"FedAvg": 29.0, "FedRep": 81.0, "Local only": 75.0}, {}, n=100)
    table = pages.data_gap_table(small, big, near)
    assert [row[0] for row in table.rows] == ["FedAvg", "FedRep"] and table.rows[1][2] == "81.0"
    assert glued["t1-m500-fedrep"] == "85.0" and glued["t1-m200-fedrep"] == "80.0"
    assert glued["t1-mgain-fedrep"].startswith("higher beyond the spread (+5")       # paired over the clients
    assert glued["t1-mgain-fedavg"].startswith("not separated")
    assert glued["t1-mdiff-fedrep"].startswith("+5") and " [+5" in glued["t1-mdiff-fedrep"]
    assert glued["t1-mleft-fedrep"] == f"{s07.PAPER_TABLE1[('cifar10', 100, 2)]['FedRep'] - 85:+.1f}"


def test_read_data_gap_refuses_runs_that_differ_in_more_than_the_data():
    def file(kept, **extra):
        settings = {"partitions": [["cifar10", 40, 2]], "methods": ["FedRep"], "kept_per_client": kept, **extra}
        return SimpleNamespace(settings=settings, seeds=(0,), values=lambda *a: [0.8],
                               results={"0": {"client_accuracy": {"cifar10/40/2": {"FedRep": [0.8, 0.9]}}}})
    small, big = pages.read_data_gap(file(200), file(None))
    assert small.acc["FedRep"] == big.acc["FedRep"] == 80.0
    with pytest.raises(ValueError, match="rounds"):
        pages.read_data_gap(file(200, rounds=50), file(None, rounds=100))


def test_paper_gaps_count_a_gap_beyond_the_spread_over_clients(glued):
    paper = s07.PAPER_TABLE1[("cifar10", 100, 2)]
    near = _long_table({"FedAvg": paper["FedAvg"] - 20, "FedRep": paper["FedRep"] - 0.5},
                       {"FedAvg": [paper["FedAvg"] - 20 + d for d in (-1, 0, 1, 0)],
                        "FedRep": [paper["FedRep"] - 0.5 + d for d in (-5, 5, -5, 5)]}, n=100)
    table, beyond = pages.paper_gaps(near)
    assert beyond == ["FedAvg"] and glued["t1-long-n-gaps"] == "1 of 2"
    assert glued["t1-long-gap-fedavg"] == "-20.0" and [row[-1] for row in table.rows] == \
        ["beyond the spread", "within the spread"]


def test_fedavg_local_is_checked_against_5_7s_run_and_paired_over_clients(glued):
    def file(evaluate, accs, **extra):
        settings = {"partitions": [["cifar10", 4, 2]], "methods": ["FedAvg"], "rounds": 100,
                    "options": {"FedAvg": {"evaluate": evaluate}} if evaluate == "local" else {}, **extra}
        return SimpleNamespace(section="5.7-defaults", settings=settings, seeds=(0,), values=lambda *a: [sum(accs) / len(accs)],
                               results={"0": {"client_accuracy": {"cifar10/4/2": {"FedAvg": accs}}}})
    long = file("global", [0.2, 0.3, 0.25, 0.25])
    lv = pages.read_long(long)
    text = pages.fedavg_local(file("local", [0.6, 0.7, 0.65, 0.66]), long, lv)
    assert glued["t1-fedavg-local"] == "65.2" and text.startswith("higher beyond the spread (+40")
    with pytest.raises(ValueError, match="rounds"):
        pages.fedavg_local(file("local", [0.6] * 4, rounds=50), long, lv)
    with pytest.raises(ValueError, match="FedAvg options"):
        pages.fedavg_local(file("global", [0.6] * 4), long, lv)


def test_a_method_of_ones_own_runs_in_the_table_by_settings_and_shows_in_its_own_part():
    """Issue 42, item 5: a method registered from one file (outside Table 1) is a row of the table
    by settings alone (``methods``), trains there like Table 1's rows, and the methods table of
    5.7 lists it in its own part, after Table 1's. Unregistered afterwards."""
    from replearn import neural
    from replearn.neural.algorithms.base import Algorithm, Summary

    class HeadOnly(Algorithm):
        name = "Head-only FedPer (one-file test)"
        summary = Summary("the body", "the head", "nothing: only the head trains", "arivazhagan2019fedper")

        def personal_names(self, model, options):
            return neural.split_body_head(model)[1]

        def phases(self, model, cfg, options):
            return (neural.Phase(neural.split_body_head(model)[1], cfg.local_steps, cfg.local_epochs),)

    name = algorithms.register(HeadOnly()).name
    try:
        s = s07.TableSettings(**dict(TINY, methods=("FedAvg", name)))
        r = s07.run_table(s, cifar={"cifar10": fake_cifar()})
        part = s.partitions[0]
        assert set(r.accuracy[part]) == {"FedAvg", name} and 0 <= r.accuracy[part][name] <= 1
        table = algorithms.methods_table().table()
        assert table.rows[-1][0] == name and table.parts[len(algorithms.table1())] == "registered beside Table 1"
        assert "[registered beside Table 1]" in repr(table) and "colspan" in table._repr_html_()
    finally:
        algorithms.unregister(name)
    with pytest.raises(ValueError, match="registered methods"):
        s07.TableSettings(**dict(TINY, methods=("FedAvg", name)))


def test_gap_causes_name_each_gap_by_the_run_with_the_papers_data(glued):
    """A row whose gap closes with 500 images per client is 'data per client'; one whose gap stays
    is 'not accounted for'; one no 500-image run holds is 'not measured'; rows within the spread
    are left out."""
    paper = s07.PAPER_TABLE1[("cifar10", 100, 2)]
    wobble = (-1, 1, -1, 1)
    first = _long_table({m: paper[m] + g for m, g in (("FedRep", -3), ("FedAvg", -10), ("Ditto", -6), ("FedPer", 0))},
                        {m: [paper[m] + g + d for d in wobble]
                         for m, g in (("FedRep", -3), ("FedAvg", -10), ("Ditto", -6), ("FedPer", 0))}, n=100)
    big = _long_table({"FedRep": paper["FedRep"], "FedAvg": paper["FedAvg"] - 9},
                      {"FedRep": [paper["FedRep"] + d for d in wobble],
                       "FedAvg": [paper["FedAvg"] - 9 + d for d in wobble]})
    table, open_rows = pages.gap_causes(first, big)
    assert [r[0] for r in table.rows] == ["FedAvg", "Ditto", "FedRep"]       # largest gap first, FedPer within
    assert {r[0]: r[-1] for r in table.rows} == {"FedRep": "data per client", "FedAvg": "not accounted for",
                                                 "Ditto": "not measured"}
    assert open_rows == ["FedAvg", "Ditto"] and glued["t1-gc-unexplained"] == "2 of 4"
    assert glued["t1-gc-list"] == "FedAvg, Ditto"
    assert glued["t1-gc-data"] == "FedRep" and glued["t1-gc-authors"] == "none"
    # at its own defaults FedAvg sits on the paper's number: the authors' values account for its gap;
    # Ditto, not run with 500 images and far from the paper at its defaults, stays open; FedRep keeps its first cause
    own = _long_table({"FedRep": paper["FedRep"] - 3, "FedAvg": paper["FedAvg"], "Ditto": paper["Ditto"] + 20},
                      {"FedRep": [paper["FedRep"] - 3 + d for d in wobble],
                       "FedAvg": [paper["FedAvg"] + d for d in wobble],
                       "Ditto": [paper["Ditto"] + 20 + d for d in wobble]})
    table, open_rows = pages.gap_causes(first, big, own=own)
    assert {r[0]: r[-1] for r in table.rows} == {"FedRep": "data per client", "FedAvg": "the authors' values",
                                                 "Ditto": "not measured"}
    assert open_rows == ["Ditto"] and glued["t1-gc-unexplained"] == "1 of 4" and glued["t1-gc-authors"] == "FedAvg"


def test_gap_causes_ask_the_authors_loop_and_the_defaults_with_the_papers_data(glued):
    """After the data per client and the authors' values: a method whose paper the authors' code
    does not run is accounted for by their loop on the 500-image clients when that loop lands on the
    paper's number; another by its own defaults on those clients; the causes are asked in order."""
    paper = s07.PAPER_TABLE1[("cifar10", 100, 2)]
    wobble = (-1, 1, -1, 1)

    def table_of(values):
        return _long_table({m: paper[m.removesuffix(" (authors' code)")] + g for m, g in values.items()},
                           {m: [paper[m.removesuffix(" (authors' code)")] + g + d for d in wobble]
                            for m, g in values.items()})

    first = table_of({"Per-FedAvg": -7, "L2GD": -27, "FedProx": -7})
    loops = table_of({"Per-FedAvg (authors' code)": 0, "Per-FedAvg": -8, "L2GD": -28, "FedProx": -9})
    own_500 = table_of({"Per-FedAvg": -9, "L2GD": 1, "FedProx": -8})
    table, open_rows = pages.gap_causes(first, loops, own_500=own_500)
    assert {r[0]: r[-1] for r in table.rows} == {"Per-FedAvg": "the authors' loop, 500 images",
                                                 "L2GD": "own defaults, 500 images", "FedProx": "not accounted for"}
    assert open_rows == ["FedProx"] and glued["t1-gc-loop"] == "Per-FedAvg" and glued["t1-gc-both"] == "L2GD"
    assert glued["t1-gc-unexplained"] == "1 of 3"


def test_gap_causes_count_table_1s_methods_apart_from_the_authors_loops(glued):
    """An open authors'-loop row is listed on its own, not counted among Table 1's methods."""
    paper = s07.PAPER_TABLE1[("cifar10", 100, 2)]
    wobble = (-1, 1, -1, 1)
    rows = {"L2GD": -27, "L2GD (authors' code)": -23, "FedRep": -3}
    first = _long_table({m: paper[m.removesuffix(" (authors' code)")] + g for m, g in rows.items()},
                        {m: [paper[m.removesuffix(" (authors' code)")] + g + d for d in wobble] for m, g in rows.items()})
    big = _long_table({"FedRep": paper["FedRep"]}, {"FedRep": [paper["FedRep"] + d for d in wobble]})
    _, open_rows = pages.gap_causes(first, big)
    assert open_rows == ["L2GD", "L2GD (authors' code)"]
    assert glued["t1-gc-unexplained"] == "1 of 2" and glued["t1-gc-list"] == "L2GD"
    assert glued["t1-gc-loops-open"] == "L2GD (authors' code)"


def test_every_near_paper_row_trains_with_the_authors_cifar100_dropout():
    """Every row of the near-paper columns (the authors' values and their own loops) trains on a
    CIFAR-100 partition with the dropout of the authors' CIFAR-100 network: the masks come from the
    run's generator wherever a step is taken (L2GD's rounds of aggregation steps only, frequent at
    p = 0.9, measure a loss without drawing), and the run is repeatable."""
    part = ("cifar100", 5, 2)
    s = replace(s07.TableSettings(**TINY), **table1.authors_rows(table1.AUTHORS_ROWS, (part,)), authors_dropout=True)
    assert s.network_spec("cifar100").dropout == 0.6
    data = {"cifar100": fake_cifar(name="cifar100")}
    r = s07.run_table(s, cifar=data)
    assert set(r.accuracy[part]) == set(table1.AUTHORS_ROWS)
    again = s07.run_table(replace(s, methods=("L2GD", "FedRep")), cifar=data)
    assert all(again.accuracy[part][m] == r.accuracy[part][m] for m in ("L2GD", "FedRep"))
