"""scripts/run_results.py: results files with provenance, per-seed checkpoints, stale-file check."""

import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("run_results", ROOT / "scripts" / "run_results.py")
rr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rr)


def section_with(run, summary):
    """5.8's declared section with a stand-in run and summary."""
    return replace(rr.SECTIONS["5.8"], run=run, summary=summary)


def test_sections_are_the_drivers_declarations():
    """run_results keeps no list of its own: every section, its variants and its run group come
    from the drivers' ``RESULTS``."""
    assert list(rr.DEFAULT_SECTIONS) == ["4.7", "4.8", "4.9", "5.7", "5.8", "5.9"]
    assert {"5.7-seeds", "5.7-m500-local100", "5.7-defaults", "5.7-c100-100-20"} <= set(rr.VARIANTS)
    assert rr.SECTIONS["4.9"].group == ("4.8", "4.9") and rr.SECTIONS["5.8"].group == ("5.8",)
    column = rr.section_settings("5.7-c10-1000-2", "long")
    assert column.partitions == (("cifar10", 1000, 2),)


def test_committed_results_match_their_profiles():
    assert rr.stale_files() == [], "re-run `make results PROFILE=...` for these sections (settings changed)"


def test_run_section_writes_provenance_and_resumes(tmp_path, monkeypatch):
    calls = []

    class Fake:
        def __init__(self, seed):
            self.seed = seed

    cls = rr.SECTIONS["5.8"].settings
    tiny = replace(cls.profile("long"), seeds=(3, 4))
    monkeypatch.setitem(rr.SECTIONS, "5.8", section_with(lambda s: calls.append(s.seed) or Fake(s.seed),
                                                         lambda r: {"acc": 0.5 + r.seed}))
    path = rr.run_section("5.8", "long", tmp_path, settings=tiny)
    record = json.loads(path.read_text())
    assert path == tmp_path / "long" / "5.8.json" and calls == [3, 4]
    assert record["results"] == {"3": {"acc": 3.5}, "4": {"acc": 4.5}} and record["seeds"] == [3, 4]
    assert set(record["provenance"]) >= {"commit", "device", "torch", "date", "wall_s"}
    assert record["settings"] == rr.settings_json(tiny)
    rr.run_section("5.8", "long", tmp_path, settings=tiny)       # both seeds checkpointed: nothing re-runs
    assert calls == [3, 4]
    (tmp_path / "long" / ".checkpoints" / "5.8-seed4.json").unlink()
    rr.run_section("5.8", "long", tmp_path, settings=tiny)
    assert calls == [3, 4, 4]
    # the file's settings differ from the long profile's (seeds): it is stale
    assert rr.stale_files(tmp_path) == [str(path)]
    record["settings"] = rr.settings_json(cls.profile("long"))
    path.write_text(json.dumps(record))
    assert rr.stale_files(tmp_path) == []


def test_check_section_reruns_one_seed_and_lists_differences(tmp_path, monkeypatch):
    cls = rr.SECTIONS["5.8"].settings
    long = cls.profile("long")

    class Fake:
        def __init__(self, seed):
            self.seed = seed

    value = {"acc": [0.25, 0.5], "name": "x"}
    monkeypatch.setitem(rr.SECTIONS, "5.8", section_with(lambda s: Fake(s.seed), lambda r: {**value, "seed": r.seed}))
    rr.run_section("5.8", "long", tmp_path, settings=replace(long, seeds=long.seeds[:2]))
    record = json.loads((tmp_path / "long" / "5.8.json").read_text())
    record["settings"] = rr.settings_json(long)
    (tmp_path / "long" / "5.8.json").write_text(json.dumps(record))
    ok = rr.check_section("5.8", "long", tmp_path)
    assert ok["seed"] == long.seeds[0] and ok["differences"] == []
    value["acc"] = [0.25, 0.75]  # the code now computes something else
    bad = rr.check_section("5.8", "long", tmp_path, seed=long.seeds[1])
    assert bad["differences"] == [("/acc[1]", 0.5, 0.75)]
    with pytest.raises(ValueError, match="seed 99"):
        rr.check_section("5.8", "long", tmp_path, seed=99)
    with pytest.raises(FileNotFoundError, match="make results"):
        rr.check_section("5.9", "long", tmp_path)
    record["settings"] = rr.settings_json(replace(long, seeds=(7,)))
    (tmp_path / "long" / "5.8.json").write_text(json.dumps(record))
    with pytest.raises(ValueError, match="stale"):
        rr.check_section("5.8", "long", tmp_path)


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown section"):
        rr.run_section("3.1", "long")
    with pytest.raises(ValueError, match="unknown profile"):
        rr.run_section("4.7", "default")


def test_long_profiles_differ_from_the_cpu_defaults_and_have_a_spread():
    # the near-paper long runs trade seeds (2) for the paper's network and clients; 5.7's single
    # seed takes its spread over the 100 clients of its partition (client_accuracy is recorded)
    for section, cls in ((name, sec.settings) for name, sec in rr.SECTIONS.items()):
        d, l = cls.profile("default"), rr.section_settings(section, "long")
        assert l != d and l.dtype == "float32" and not l.full_data, section
        if section.startswith("5.7") and section != "5.7-seeds":  # one seed, spread over 40 to 1,000 clients
            assert l.seeds == (0,) and all(n >= 40 for _, n, _ in l.partitions)
        else:
            assert len(l.seeds) >= 2, section


def test_more_seeds_of_5_7_are_its_earlier_run_for_the_main_methods_on_other_seeds():
    """``5.7-seeds``: the first column at every method's defaults (``5.7-defaults``) but for the CPU
    default's six methods and on other seeds, so that the two files together give three seeds; it
    runs only when named."""
    main, more = rr.section_settings("5.7-defaults", "long"), rr.section_settings("5.7-seeds", "long")
    assert replace(more, methods=main.methods, seeds=main.seeds) == main
    assert set(more.methods) < set(main.methods) and len(more.methods) == 6
    assert not set(more.seeds) & set(main.seeds) and len(main.seeds + more.seeds) == 3
    assert "5.7-seeds" not in rr.DEFAULT_SECTIONS and "5.7" in rr.DEFAULT_SECTIONS


def test_5_7_runs_the_authors_values_and_5_7_defaults_the_same_column_at_each_methods_own():
    authors, own = rr.section_settings("5.7", "long"), rr.section_settings("5.7-defaults", "long")
    assert authors.partitions == own.partitions and authors.seeds == own.seeds and own.options == {}
    assert authors.train.first_visit == "average" and own.train.first_visit == "initial"
    assert set(own.methods) | set(authors.variants) == set(authors.methods)
    assert authors.options_for("FedProx").mu == 0.1 and authors.options_for("Local only").epochs == 100
    assert authors.config_for("Local only", authors.partitions[0]).weight_decay == 0.0
    assert authors.config_for("FedRep", authors.partitions[0]).weight_decay == 1e-4


def test_the_four_other_columns_run_each_columns_epochs():
    for col, fedrep, others in ((("cifar10", 100, 5), 5, 1), (("cifar10", 1000, 2), 5, 5),
                                (("cifar100", 100, 5), 5, 1), (("cifar100", 100, 20), 5, 1)):
        s = rr.section_settings(f"5.7-c{col[0][5:]}-{col[1]}-{col[2]}", "long")
        assert s.partitions == (col,) and not s.full_data and s.seeds == (0,)
        assert s.config_for("FedRep", col).local_epochs == fedrep and s.config_for("FedAvg", col).local_epochs == others
        assert s.config_for("FedAvg+FT", col).head_epochs == 10 and "5.7-c10-100-5" not in rr.DEFAULT_SECTIONS


def test_the_data_per_client_sections_run_only_when_named():
    small, big = rr.section_settings("5.7-m200", "long"), rr.section_settings("5.7-m500", "long")
    assert (small.kept_per_client, big.kept_per_client, big.train_per_client) == (200, None, 500)
    assert not {"5.7-m200", "5.7-m500"} & set(rr.DEFAULT_SECTIONS)
    assert rr.section_settings("5.7-m500", "paper").full_data  # the paper profile's: 500 of the full dataset


def test_fedavg_with_local_copies_is_the_earlier_fedavg_run_tested_otherwise():
    main, local = rr.section_settings("5.7-defaults", "long"), rr.section_settings("5.7-fedavg-local", "long")
    assert replace(local, methods=main.methods, options=main.options) == main
    assert local.methods == ("FedAvg",) and local.options_for("FedAvg").evaluate == "local"
    assert main.options_for("FedAvg") is None and "5.7-fedavg-local" not in rr.DEFAULT_SECTIONS


def test_the_launch_estimate_counts_the_images_each_client_keeps():
    small, big = (rr.SECTIONS[s].work(rr.section_settings(s, "long")) for s in ("5.7-m200", "5.7-m500"))
    assert small["steps"] * 5 == big["steps"] * 2   # 200 vs 500 images: 20 vs 50 batches per epoch


def test_the_launch_estimate_counts_local_only_once_per_client():
    s = rr.section_settings("5.7-m500", "long")
    local = rr.SECTIONS["5.7-m500"].work(replace(s, methods=("Local only",)))
    assert local["steps"] == 40 * 10 * 50   # 40 clients x 10 epochs x 50 batches, sampled or not
    budget = rr.SECTIONS["5.7-m500-local100"].work(rr.section_settings("5.7-m500-local100", "long"))
    assert budget["steps"] == 40 * 100 * 50   # the authors' 100 epochs
    fewer = rr.SECTIONS["5.7-m500"].work(replace(s, methods=("Local only",), train=replace(s.train, rounds=10)))
    assert fewer["steps"] == local["steps"]


def test_check_section_refuses_what_stale_files_calls_stale_the_recorded_network_too(tmp_path, monkeypatch):
    cls = rr.SECTIONS["5.8"].settings
    long = cls.profile("long")
    monkeypatch.setitem(rr.SECTIONS, "5.8", section_with(lambda s: s, lambda r: {"acc": 0.5}))
    path = rr.run_section("5.8", "long", tmp_path, settings=long)
    assert rr.stale_files(tmp_path) == [] and rr.check_section("5.8", "long", tmp_path)["failures"] == []
    record = json.loads(path.read_text())
    record["network"] = {dataset: {**net, "widths": "another network"} for dataset, net in record["network"].items()}
    path.write_text(json.dumps(record))
    assert rr.stale_files(tmp_path) == [str(path)]
    with pytest.raises(ValueError, match=r"stale \(its network differs"):
        rr.check_section("5.8", "long", tmp_path)


def test_a_helper_trains_the_rows_from_the_end_into_the_main_processes_store(tmp_path, monkeypatch):
    """``--helper``: the same seeds and rows in the reverse order, inside the engine-run store the
    main process uses, no results file; a seed already done is skipped; a section without rows refused."""
    seen = []

    def run(s):
        seen.append((s.seed, s.methods, rr.checkpoints.active()))

    sec = replace(rr.SECTIONS["5.7-c10-100-5"], run=run)
    monkeypatch.setitem(rr.SECTIONS, "5.7-c10-100-5", sec)
    s = rr.section_settings("5.7-c10-100-5", "long")
    assert rr.help_section("5.7-c10-100-5", "long", tmp_path) == len(s.seeds)
    store = tmp_path / "long" / ".checkpoints" / f"5.7-c10-100-5-seed{s.seeds[0]}-runs"
    assert seen == [(s.seeds[0], tuple(reversed(s.methods)), store)]
    assert not (tmp_path / "long" / "5.7-c10-100-5.json").exists()
    (tmp_path / "long" / ".checkpoints" / f"5.7-c10-100-5-seed{s.seeds[0]}.json").write_text("{}")
    assert rr.help_section("5.7-c10-100-5", "long", tmp_path) == 0 and len(seen) == 1
    with pytest.raises(ValueError, match="no rows"):
        rr.help_section("4.7", "long", tmp_path)
    with pytest.raises(SystemExit):
        rr.main(["--profile", "long", "--helper"])   # names no section


def test_a_check_trains_in_its_own_store_and_a_helper_can_train_its_rows_from_the_end(tmp_path, monkeypatch):
    """``--check`` re-runs inside its own engine-run store (not the one that wrote the file), deleted
    when done; ``--helper --check`` trains that seed's rows in the reverse order into the same store."""
    seen = []

    def run(s):
        seen.append((s.seed, s.methods, rr.checkpoints.active()))
        return s

    sec = replace(rr.SECTIONS["5.7-c10-100-5"], run=run, summary=lambda s: {"rows": list(s.methods)})
    monkeypatch.setitem(rr.SECTIONS, "5.7-c10-100-5", sec)
    s = rr.section_settings("5.7-c10-100-5", "long")
    rr.run_section("5.7-c10-100-5", "long", tmp_path)
    seen.clear()
    store = rr.check_store("5.7-c10-100-5", "long", tmp_path, s.seeds[0])
    assert store.name == f"5.7-c10-100-5-check-seed{s.seeds[0]}-runs"
    assert rr.help_section("5.7-c10-100-5", "long", tmp_path, check=True) == 1
    assert seen == [(s.seeds[0], tuple(reversed(s.methods)), store)]
    report = rr.check_section("5.7-c10-100-5", "long", tmp_path)
    assert seen[-1] == (s.seeds[0], s.methods, store) and report["differences"] == []
    assert not store.exists()   # removed once the check is done
    rr.main(["--profile", "long", "--out", str(tmp_path), "--helper", "--check", "5.7-c10-100-5"])
    assert seen[-1] == (s.seeds[0], tuple(reversed(s.methods)), store)
