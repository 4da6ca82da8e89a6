"""Book 5.7 driver (replearn.experiments.ch05_fedrep.s07_cifar_personalisation): Table 1 on the
synthetic stand-in of :func:`cifar_fixtures.fake_cifar` (seconds); the default partition on the real
CIFAR-10 subset (skipped without it)."""

from dataclasses import replace

import pytest
import torch

from cifar_fixtures import RESULTS, fake_cifar

from replearn.experiments.ch05_fedrep import s07_cifar_personalisation as s07
from replearn.neural import TrainConfig
from replearn.neural import algorithms
from replearn.neural.personalisation import PAPER_OPTIM, make_federation

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
    assert set(s07.TableSettings.paper().partitions) == set(s07.PAPER_TABLE1)
    assert all(tuple(v) == algorithms.table1() for v in s07.PAPER_TABLE1.values())  # every method, in order
    assert set(s07.TABLE_METHODS) <= set(algorithms.table1())
    assert s07.PAPER_TABLE1[("cifar10", 100, 2)]["FedRep"] == 87.70
    assert s07.PAPER_TABLE1[("cifar100", 100, 20)]["Ditto"] == 56.34
    assert s07.TableSettings.paper().methods == algorithms.table1()


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
    assert s07.paper_reference(("cifar10", 10, 2))[0] == ("cifar10", 100, 2)
    assert s07.paper_reference(("cifar10", 1000, 2))[0] == ("cifar10", 1000, 2)
    assert s07.paper_reference(("cifar100", 20, 20))[1]["FedRep"] == 56.10
    with pytest.raises(ValueError, match="no column"):
        s07.paper_reference(("cifar10", 10, 3))


def test_cpu_default_and_paper_profile():
    t, p = s07.TableSettings(), s07.TableSettings.paper()
    assert t.train_per_client >= 200 and t.train.rounds * t.train.participation >= 16  # 16 rounds per client
    assert len(t.seeds) >= 3 and t.dtype == "float64" and t.variant == "narrow"
    m = t.network("cifar10", 10, 0, "cpu")
    assert m.head.weight.dtype == torch.float64 and m.body.conv1.out_channels == 16
    mp = p.network("cifar10", 10, 0, "cpu")
    assert mp.head.weight.dtype == torch.float32 and mp.body.conv1.out_channels == 64
    assert p.train == PAPER_OPTIM["train"]
    assert (p.train.batch_size, p.train.lr, p.train.local_steps, p.train.head_steps, p.train.head_epochs) == \
        (10, 0.01, None, None, 10)
    assert (p.train_per_client, p.test_per_client, p.ft_epochs) == (None, None, 10)
    long = s07.TableSettings.long()  # near-paper: the paper profile with fewer rounds, one partition and seed
    # the authors' protocol (their split, weight decay and augmentation), as in the paper profile
    assert p.split == "authors" and p.train.weight_decay == 1e-4 and p.train.augment
    assert long.split == p.split and long.train.weight_decay == p.train.weight_decay and long.train.augment
    assert long.local_only_epochs == p.local_only_epochs == 10 and long.lg_shared_layers == p.lg_shared_layers == 2
    # the paper's rounds and evaluation schedule (T = 100, every round, the last 10 averaged)
    assert replace(long, partitions=p.partitions, seeds=p.seeds, full_data=True) == p
    assert long.partitions == (("cifar10", 100, 2),) and long.methods == algorithms.table1() and long.seeds == (0,)
    assert (long.train.rounds, long.train.eval_every, long.train.last_rounds) == (100, 1, 10)


# --------------------------------------------------------------------------- what the page shows

from types import SimpleNamespace

from replearn.book import results

PART = ("cifar10", 5, 2)


def _runs(n=3):
    level = {"Local only": 0.7, "FedAvg": 0.3, "FedAvg+FT": 0.85, "FedPer": 0.8, "LG-FedAvg": 0.75, "FedRep": 0.86}
    return [SimpleNamespace(accuracy={PART: {m: v + 0.01 * ((seed * (i + 1)) % 3) for i, (m, v) in
                                             enumerate(level.items())}}) for seed in range(n)]


def test_names_ranks_and_words():
    assert [s07.slug(m) for m in ("FedAvg+FT", "LG-FedAvg", "Local only")] == ["fedavgft", "lgfedavg", "localonly"]
    assert s07.method_color("FedAvg+FT") == s07.method_color("FedAvg") and s07.method_color("Ditto") == "#8c564b"
    assert s07.rank({"a": 3.0, "b": 1.0, "c": 3.0}) == {"a": 1, "b": 3, "c": 1}
    assert [s07.ordinal(k) for k in (1, 2, 3, 7)] == ["first", "second", "third", "7th"]
    assert s07.paper_word({"a": 80.0, "b": 82.09}, "a", "b") == "lower (-2.09)"
    assert "FedAvg" not in s07.PERSONAL and "FedRep" not in s07.PERSONAL


def test_cpu_tables_and_checks(glued):
    runs = _runs()
    acc = s07.accuracies(runs, PART)
    assert list(acc) == list(s07.TABLE_METHODS) and len(acc["FedRep"]) == 3
    key, paper = s07.paper_reference(PART)
    shown, (ours, leads) = s07.glue_tables(acc, PART, key, paper)
    assert glued["t1-fedrep"] == shown["FedRep"].text and f"t1-diff-{s07.slug('FedPer')}" in glued
    assert [row[0] for row in ours.rows] == list(s07.TABLE_METHODS) and len(leads.rows) == len(s07.PERSONAL)
    checks = s07.checks(acc, shown, S=2)
    assert [c[0] for c in checks] == ["t1-v-fedrep-fedavg", "t1-v-ft", "t1-v-fedavg-floor", "t1-v-floor", "t1-v-rank"]
    assert checks[0][3]["require"] and checks[0][3]["fedrep"] == shown["FedRep"].text
    assert checks[2][2] is True and checks[3][2] is True   # FedAvg below 1/S, the others above


def test_long_run_helpers_read_the_committed_files(glued):
    long = results.load("5.7", "long", root=RESULTS)
    lv = s07.read_long(long)
    assert lv.methods == list(long.settings["methods"]) and lv.label == "/".join(map(str, lv.part))
    assert lv.acc["FedRep"] == 100 * long.values("accuracy", lv.label, "FedRep")[0]
    ranks = s07.glue_long_accuracies(lv)
    assert glued["t1-long-rank-fedrep"] == s07.ordinal(ranks[0]["FedRep"]) and "t1-long-spearman" in glued
    runs = _runs()
    acc = s07.accuracies(runs, PART)
    shown, _ = s07.glue_tables(acc, PART, *s07.paper_reference(PART))
    table = s07.long_table(lv, ranks, shown, PART, len(runs))
    assert len(table.rows) == len(lv.methods) and "not run" in {row[3] for row in table.rows}
    assert [c[0] for c in s07.long_checks(lv)] == ["t1-long-v-fedrep-fedavg", "t1-long-v-ft"]
    above = s07.above_all_global(lv)
    assert glued["t1-long-n-personal"] == f"{len(above)} of {len(lv.methods) - 3}"
    pairs = s07.pairs_table(acc, lv)
    assert [row[0] for row in pairs.rows] == [f"{a} vs {b}" for a, b in s07.PAIRS]
    more = results.load("5.7-seeds", "long", root=RESULTS)
    sacc = s07.seed_accuracies(more, lv)
    assert list(sacc) == list(more.settings["methods"]) and sacc["FedRep"][0] == lv.acc["FedRep"]
    per_seed, claims = s07.seed_tables(sacc, lv, (lv.seed,) + more.seeds, rounds=10)
    assert "t1-seeds-fedrep-sd" in glued and len(per_seed.rows) == len(sacc)
    assert [c[0] for c in s07.seed_checks(sacc, lv.paper)][-1] == "t1-seeds-v-fedrep-local"
    gaps, beyond = s07.paper_gaps(lv)
    assert len(gaps.rows) == len(lv.methods) and glued["t1-long-n-gaps"] == f"{len(beyond)} of {len(lv.methods)}"
    small, big = s07.read_data_gap(*(results.load(f"5.7-m{m}", "long", root=RESULTS) for m in (200, 500)))
    assert small.part == big.part == ("cifar10", s07.DATA_CLIENTS, 2) and small.methods == list(s07.DATA_METHODS)
    table = s07.data_gap_table(small, big, lv)
    assert len(table.rows) == len(s07.DATA_METHODS) and "t1-mgain-fedrep" in glued
    s07.fedavg_local(results.load("5.7-fedavg-local", "long", root=RESULTS), long, lv)
    assert "t1-fedavg-local" in glued


def test_figures_count_the_methods_from_the_run():
    import matplotlib.pyplot as plt

    acc = s07.accuracies(_runs(), PART)
    key, paper = s07.paper_reference(PART)
    fig = s07.plot_table(acc, paper, PART, key, rounds=20)
    assert len(fig.axes) == 2 and "3 seeds" in fig.axes[0].get_title()
    plt.close(fig)
    lv = s07.read_long(results.load("5.7", "long", root=RESULTS))
    fig = s07.plot_long(lv, rounds=10)
    assert fig.axes[0].get_title().startswith(f"all {len(lv.methods)} methods")
    plt.close(fig)


# --------------------------------------------------------------------------- data per client

def test_the_data_per_client_runs_differ_only_in_the_images_each_client_keeps():
    small, big = (s07.TableSettings.per_client_images(m) for m in (200, 500))
    long = s07.TableSettings.long()
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


def _long_table(acc: dict, client: dict, n=40):
    part = ("cifar10", n, 2)
    key, paper = s07.paper_reference(part)
    return s07.LongTable(part, "/".join(map(str, part)), key, paper, list(acc), 0, acc, client)


def test_the_data_gap_table_pairs_the_clients_and_glues_what_the_page_says(glued):
    small = _long_table({"FedAvg": 30.0, "FedRep": 80.0},
                        {"FedAvg": [30.0, 31, 29, 30], "FedRep": [80.0, 79, 81, 80]})
    big = _long_table({"FedAvg": 31.0, "FedRep": 85.0},
                      {"FedAvg": [31.0, 29, 31, 30], "FedRep": [85.0, 84, 86, 85]})
    near = _long_table({"FedAvg": 29.0, "FedRep": 81.0, "Local only": 75.0}, {}, n=100)
    table = s07.data_gap_table(small, big, near)
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
    small, big = s07.read_data_gap(file(200), file(None))
    assert small.acc["FedRep"] == big.acc["FedRep"] == 80.0
    with pytest.raises(ValueError, match="rounds"):
        s07.read_data_gap(file(200, rounds=50), file(None, rounds=100))


def test_paper_gaps_count_a_gap_beyond_the_spread_over_clients(glued):
    paper = s07.PAPER_TABLE1[("cifar10", 100, 2)]
    near = _long_table({"FedAvg": paper["FedAvg"] - 20, "FedRep": paper["FedRep"] - 0.5},
                       {"FedAvg": [paper["FedAvg"] - 20 + d for d in (-1, 0, 1, 0)],
                        "FedRep": [paper["FedRep"] - 0.5 + d for d in (-5, 5, -5, 5)]}, n=100)
    table, beyond = s07.paper_gaps(near)
    assert beyond == ["FedAvg"] and glued["t1-long-n-gaps"] == "1 of 2"
    assert glued["t1-long-gap-fedavg"] == "-20.0" and [row[-1] for row in table.rows] == \
        ["beyond the spread", "within the spread"]


def test_glue_long_settings_quotes_the_results_file(glued):
    settings = {"train": {"rounds": 100, "participation": 0.1, "eval_every": 1}, "local_only_epochs": 10}
    s07.glue_long_settings(settings, fake_cifar(train=40, test=20), 4)   # 400 and 200 images over 4 clients
    assert (glued["t1-long-train"], glued["t1-long-test"], glued["t1-long-visits"]) == ("100", "50", "10")
    assert glued["t1-long-schedule"] == "after every round" and glued["t1-long-local-epochs"] == "10"
    s07.glue_long_settings({**settings, "train": {**settings["train"], "eval_every": 5}}, fake_cifar(), 4)
    assert glued["t1-long-schedule"] == "every 5 rounds"


def test_fedavg_local_is_checked_against_5_7s_run_and_paired_over_clients(glued):
    def file(evaluate, accs, **extra):
        settings = {"partitions": [["cifar10", 4, 2]], "methods": ["FedAvg"], "fedavg_evaluate": evaluate,
                    "rounds": 100, **extra}
        return SimpleNamespace(settings=settings, seeds=(0,), values=lambda *a: [sum(accs) / len(accs)],
                               results={"0": {"client_accuracy": {"cifar10/4/2": {"FedAvg": accs}}}})
    long = file("global", [0.2, 0.3, 0.25, 0.25])
    lv = s07.read_long(long)
    text = s07.fedavg_local(file("local", [0.6, 0.7, 0.65, 0.66]), long, lv)
    assert glued["t1-fedavg-local"] == "65.2" and text.startswith("higher beyond the spread (+40")
    with pytest.raises(ValueError, match="rounds"):
        s07.fedavg_local(file("local", [0.6] * 4, rounds=50), long, lv)
    with pytest.raises(ValueError, match="fedavg_evaluate"):
        s07.fedavg_local(file("global", [0.6] * 4), long, lv)
