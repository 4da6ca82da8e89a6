"""Appendix B.5.7's helpers (replearn.experiments.ch05_fedrep.s07_reproduction): reading the committed
near-paper results of Table 1, and the tables and verdicts the reproduction page shows."""

from types import SimpleNamespace

import pytest

from cifar_fixtures import RESULTS

from replearn.book import results
from replearn.experiments.ch05_fedrep import s07_cifar_personalisation as s07
from replearn.experiments.ch05_fedrep import s07_reproduction as R

def test_names_ranks_and_words():
    assert [s07.slug(m) for m in ("FedAvg+FT", "LG-FedAvg", "Local only")] == ["fedavgft", "lgfedavg", "localonly"]
    assert s07.method_color("FedAvg+FT") == s07.method_color("FedAvg") and s07.method_color("Ditto") == "#8c564b"
    assert R.rank({"a": 3.0, "b": 1.0, "c": 3.0}) == {"a": 1, "b": 3, "c": 1}
    assert [R.ordinal(k) for k in (1, 2, 3, 7)] == ["first", "second", "third", "7th"]
    assert R.paper_word({"a": 80.0, "b": 82.09}, "a", "b") == "lower (-2.09)"
    assert "FedAvg" not in s07.PERSONAL and "FedRep" not in s07.PERSONAL


def test_the_committed_runs_are_read_and_shown(glued):
    own = R.read_long(results.load("5.7-defaults", "long", root=RESULTS))
    assert own.part == ("cifar10", 100, 2) and len(own.client["FedRep"]) == 100
    more = results.load("5.7-seeds", "long", root=RESULTS)
    sacc = R.seed_accuracies(more, own)
    assert list(sacc) == list(s07.TABLE_METHODS) and all(len(v) == 3 for v in sacc.values())
    per_seed, claims = R.seed_tables(sacc, own, (own.seed,) + more.seeds, rounds=100)
    assert [c[0] for c in R.seed_checks(sacc, own.paper)][-1] == "t1-seeds-v-fedrep-local"
    gaps, beyond = R.paper_gaps(own)
    assert set(beyond) <= set(own.methods) and glued["t1-long-n-gaps"].endswith(f"of {len(own.methods)}")
    small, big = R.read_data_gap(*(results.load(f"5.7-m{m}", "long", root=RESULTS) for m in (200, 500)))
    assert R.data_gap_table(small, big, own).rows
    R.fedavg_local(results.load("5.7-fedavg-local", "long", root=RESULTS), results.load("5.7-defaults", "long",
                                                                                       root=RESULTS), own)
    ten, hundred = (R.read_long(results.load(s, "long", root=RESULTS)) for s in ("5.7-m500", "5.7-m500-local100"))
    table = R.local_budget(ten, hundred)
    assert glued["t1-local-gain"] == table.rows[2][1] and table.rows[2][2] in ("holds", "opposite") or \
        table.rows[2][2].startswith("not separated")


def test_columns_are_read_as_far_as_they_are_committed():
    runs = R.read_columns(RESULTS)
    assert set(runs) <= set(s07.PAPER_TABLE1)
    assert len(R.missing_columns(runs)) == len(s07.PAPER_TABLE1) - len(runs)
    own = R.read_long(results.load("5.7-defaults", "long", root=RESULTS))
    table, summary = R.columns_table({own.part: own}), R.columns_summary({own.part: own})
    assert [row[0] for row in table.rows] == own.methods and summary.rows[0][0] == s07.column_label(own.part)
    names = [v[0] for v in R.column_verdicts(own)]
    assert names == ["t1a-c10-100-2-best", "t1a-c10-100-2-head", "t1a-c10-100-2-personal"]


def test_authors_values_against_own_defaults_are_paired_over_the_same_clients(glued):
    own = _long_table({"FedAvg": 30.0, "FedRep": 80.0}, {"FedAvg": [30.0, 31, 29, 30], "FedRep": [80.0, 79, 81, 80]})
    authors = _long_table({"FedAvg": 30.0, "FedRep": 85.0},
                          {"FedAvg": [30.0, 31, 29, 30], "FedRep": [85.0, 84, 86, 85]})
    table = R.authors_against_defaults(authors, own)
    assert [row[4] for row in table.rows] == ["not separated (n = 4)", "holds"]
    assert glued["t1-ad-fedrep"].startswith("+5")
    with pytest.raises(ValueError, match="same column"):
        R.authors_against_defaults(_long_table({"FedRep": 1.0}, {"FedRep": [1.0, 1.0]}, n=100), own)


def test_the_authors_table_names_every_value_and_its_source():
    table = R.authors_table()
    assert len(table.rows) == len(s07.AUTHORS_OPTIONS) + len(s07.AUTHORS_TRAIN) + 1
    fedprox = next(row for row in table.rows if row[:2] == ["FedProx", "mu"])
    assert fedprox[2:4] == ["0.01", "0.1"] and "options.py" in fedprox[4]


def _long_table(acc: dict, client: dict, n=40):
    part = ("cifar10", n, 2)
    key, paper = s07.paper_reference(part)
    return R.LongTable(part, s07.column_key(part), key, paper, list(acc), 0, acc, client)


def test_the_data_gap_table_pairs_the_clients_and_glues_what_the_page_says(glued):
    small = _long_table({"FedAvg": 30.0, "FedRep": 80.0},
                        {"FedAvg": [30.0, 31, 29, 30], "FedRep": [80.0, 79, 81, 80]})
    big = _long_table({"FedAvg": 31.0, "FedRep": 85.0},
                      {"FedAvg": [31.0, 29, 31, 30], "FedRep": [85.0, 84, 86, 85]})
    near = _long_table({"FedAvg": 29.0, "FedRep": 81.0, "Local only": 75.0}, {}, n=100)
    table = R.data_gap_table(small, big, near)
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
    small, big = R.read_data_gap(file(200), file(None))
    assert small.acc["FedRep"] == big.acc["FedRep"] == 80.0
    with pytest.raises(ValueError, match="rounds"):
        R.read_data_gap(file(200, rounds=50), file(None, rounds=100))


def test_paper_gaps_count_a_gap_beyond_the_spread_over_clients(glued):
    paper = s07.PAPER_TABLE1[("cifar10", 100, 2)]
    near = _long_table({"FedAvg": paper["FedAvg"] - 20, "FedRep": paper["FedRep"] - 0.5},
                       {"FedAvg": [paper["FedAvg"] - 20 + d for d in (-1, 0, 1, 0)],
                        "FedRep": [paper["FedRep"] - 0.5 + d for d in (-5, 5, -5, 5)]}, n=100)
    table, beyond = R.paper_gaps(near)
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
    lv = R.read_long(long)
    text = R.fedavg_local(file("local", [0.6, 0.7, 0.65, 0.66]), long, lv)
    assert glued["t1-fedavg-local"] == "65.2" and text.startswith("higher beyond the spread (+40")
    with pytest.raises(ValueError, match="rounds"):
        R.fedavg_local(file("local", [0.6] * 4, rounds=50), long, lv)
    with pytest.raises(ValueError, match="FedAvg options"):
        R.fedavg_local(file("global", [0.6] * 4), long, lv)
