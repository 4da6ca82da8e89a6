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


def test_committed_results_match_their_profiles():
    assert rr.stale_files() == [], "re-run `make results PROFILE=...` for these sections (settings changed)"


def test_run_section_writes_provenance_and_resumes(tmp_path, monkeypatch):
    calls = []

    class Fake:
        def __init__(self, seed):
            self.seed = seed

    cls = rr.SECTIONS["5.8"][0]
    tiny = replace(cls.profile("long"), seeds=(3, 4))
    monkeypatch.setitem(rr.SECTIONS, "5.8", (cls, lambda s: calls.append(s.seed) or Fake(s.seed),
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
    cls = rr.SECTIONS["5.8"][0]
    long = cls.profile("long")

    class Fake:
        def __init__(self, seed):
            self.seed = seed

    value = {"acc": [0.25, 0.5], "name": "x"}
    monkeypatch.setitem(rr.SECTIONS, "5.8", (cls, lambda s: Fake(s.seed), lambda r: {**value, "seed": r.seed}))
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
    for section, (cls, _, _) in rr.SECTIONS.items():
        d, l = cls.default(), rr.section_settings(section, "long")
        assert l != d and l.dtype == "float32" and not l.full_data, section
        if section in ("5.7", "5.7-m200", "5.7-m500", "5.7-fedavg-local"):  # one seed, spread over 40 or 100 clients
            assert l.seeds == (0,) and all(n >= 40 for _, n, _ in l.partitions)
        else:
            assert len(l.seeds) >= 2, section


def test_more_seeds_of_5_7_are_its_long_run_for_the_main_methods_on_other_seeds():
    """``5.7-seeds``: the long profile of 5.7 but for the CPU default's six methods and on seeds
    other than 5.7's, so that the two files together give three seeds; it runs only when named."""
    main, more = rr.section_settings("5.7", "long"), rr.section_settings("5.7-seeds", "long")
    assert replace(more, methods=main.methods, seeds=main.seeds) == main
    assert set(more.methods) < set(main.methods) and len(more.methods) == 6
    assert not set(more.seeds) & set(main.seeds) and len(main.seeds + more.seeds) == 3
    assert "5.7-seeds" not in rr.DEFAULT_SECTIONS and "5.7" in rr.DEFAULT_SECTIONS


def test_the_data_per_client_sections_run_only_when_named():
    small, big = rr.section_settings("5.7-m200", "long"), rr.section_settings("5.7-m500", "long")
    assert (small.kept_per_client, big.kept_per_client, big.train_per_client) == (200, None, 500)
    assert not {"5.7-m200", "5.7-m500"} & set(rr.DEFAULT_SECTIONS)
    assert rr.section_settings("5.7-m500", "paper").full_data  # the paper profile's: 500 of the full dataset


def test_fedavg_with_local_copies_is_5_7s_fedavg_run_tested_otherwise():
    main, local = rr.section_settings("5.7", "long"), rr.section_settings("5.7-fedavg-local", "long")
    assert replace(local, methods=main.methods, fedavg_evaluate=main.fedavg_evaluate) == main
    assert local.methods == ("FedAvg",) and local.options("FedAvg").evaluate == "local"
    assert main.options("FedAvg").evaluate == "global" and "5.7-fedavg-local" not in rr.DEFAULT_SECTIONS


def test_the_table_summary_keeps_per_client_accuracies():
    import torch

    part = ("cifar10", 3, 2)
    from replearn.experiments.ch05_fedrep.s07_cifar_personalisation import TableResult
    res = TableResult((part,), {part: {"FedRep": 0.75}}, {part: {"FedRep": torch.tensor([0.5, 0.75, 1.0])}},
                      {}, {}, {}, {})
    out = rr._table(res)
    assert out == {"accuracy": {"cifar10/3/2": {"FedRep": 0.75}},
                   "client_accuracy": {"cifar10/3/2": {"FedRep": [0.5, 0.75, 1.0]}}}


def _fake_58(monkeypatch, value):
    cls = rr.SECTIONS["5.8"][0]

    class Fake:
        def __init__(self, seed):
            self.seed = seed

    monkeypatch.setitem(rr.SECTIONS, "5.8", (cls, lambda s: Fake(s.seed), lambda r: {"acc": value(r.seed)}))
    return replace(cls.profile("long"), seeds=(3, 4))


def test_checkpoints_holding_nan_or_corrupt_are_refused_naming_them(tmp_path, monkeypatch):
    tiny = _fake_58(monkeypatch, lambda seed: 0.5)
    rr.run_section("5.8", "long", tmp_path, settings=tiny)
    ckpt = tmp_path / "long" / ".checkpoints" / "5.8-seed4.json"
    saved = json.loads(ckpt.read_text())
    for text, match in [(json.dumps({**saved, "result": {"acc": float("nan")}}), r"NaN or infinite .*/acc"),
                        (ckpt.read_text()[:20], "not a readable checkpoint"),
                        (json.dumps({"result": {"acc": 0.5}}), "need settings, result and wall_s"),
                        (json.dumps([saved]), "holds a JSON list"),
                        (json.dumps({**saved, "wall_s": -1.0}), "wall_s must be")]:
        ckpt.write_text(text)
        with pytest.raises(ValueError, match=match) as info:
            rr.run_section("5.8", "long", tmp_path, settings=tiny)
        assert "5.8-seed4.json" in str(info.value) and "delete it to re-run seed 4" in str(info.value)


def test_a_run_returning_nan_writes_nothing_for_that_seed(tmp_path, monkeypatch):
    tiny = _fake_58(monkeypatch, lambda seed: float("nan") if seed == 4 else 0.5)
    with pytest.raises(ValueError, match="section 5.8, seed 4: the result holds NaN"):
        rr.run_section("5.8", "long", tmp_path, settings=tiny)
    assert not (tmp_path / "long" / ".checkpoints" / "5.8-seed4.json").exists()
    assert not (tmp_path / "long" / "5.8.json").exists()


def test_duplicate_seeds_are_refused(tmp_path, monkeypatch):
    tiny = _fake_58(monkeypatch, lambda seed: 0.5)
    with pytest.raises(ValueError, match="seeds"):
        rr.run_section("5.8", "long", tmp_path, settings=replace(tiny, seeds=(3, 3)))


def test_stale_files_names_corrupt_mislabelled_and_unknown_files(tmp_path, monkeypatch):
    tiny = _fake_58(monkeypatch, lambda seed: 0.5)
    path = rr.run_section("5.8", "long", tmp_path, settings=tiny)
    record = json.loads(path.read_text())
    (tmp_path / "long" / "3.1.json").write_text(json.dumps({**record, "section": "3.1"}))
    with pytest.raises(ValueError, match=r"3.1.json is a results file of an unknown section '3.1'"):
        rr.stale_files(tmp_path)
    (tmp_path / "long" / "3.1.json").unlink()
    (tmp_path / "long" / "5.7.json").write_text(json.dumps(record))  # a copy of 5.8's file
    with pytest.raises(ValueError, match=r"5.7.json holds the results of section '5.8'"):
        rr.stale_files(tmp_path)
    (tmp_path / "long" / "5.7.json").write_text(path.read_text()[:-30])
    with pytest.raises(ValueError, match=r"5.7.json is not a results file"):
        rr.stale_files(tmp_path)
    with pytest.raises(ValueError, match=r"5.7.json is not a results file"):
        rr.check_section("5.7", "long", tmp_path)


def test_command_line_refuses_seed_without_check_and_unknown_sections(capsys):
    with pytest.raises(SystemExit):
        rr.main(["--profile", "long", "--seed", "3", "5.8"])
    assert "--seed only chooses the seed that --check re-runs" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        rr.main(["--profile", "long", "--check", "3.1"])
    assert "unknown section(s) ['3.1']" in capsys.readouterr().err


def test_a_seed_cut_short_resumes_from_its_finished_engine_runs(tmp_path, monkeypatch):
    """Within a seed, every finished engine run is stored (replearn.neural.checkpoints): after an
    interruption the driver starts again and the finished runs load instead of training."""
    from replearn import neural
    from replearn.neural import algorithms
    from replearn.neural.engine import rounds
    from test_checkpoints import tiny_clients, tiny_model

    model, clients = tiny_model(), tiny_clients()
    cfgs = [neural.TrainConfig(rounds=1, lr=lr, batch_size=4, local_steps=1, eval_every=1, last_rounds=1)
            for lr in (0.05, 0.04)]
    trained, stop = [], [True]
    real = rounds._run
    monkeypatch.setattr(rounds, "_run", lambda *a, **k: trained.append(1) or real(*a, **k))

    def driver(s):
        first = algorithms.run("FedAvg", model, clients, cfgs[0])
        if stop[0]:
            raise KeyboardInterrupt  # the session ends here
        second = algorithms.run("FedAvg", model, clients, cfgs[1])
        return float(first.final.average + second.final.average)

    cls = rr.SECTIONS["5.8"][0]
    tiny = replace(cls.profile("long"), seeds=(3,))
    monkeypatch.setitem(rr.SECTIONS, "5.8", (cls, driver, lambda r: {"acc": r}))
    with pytest.raises(KeyboardInterrupt):
        rr.run_section("5.8", "long", tmp_path, settings=tiny)
    assert len(trained) == 1 and list((tmp_path / "long" / ".checkpoints" / "5.8-seed3-runs").glob("*.pt"))
    stop[0] = False
    path = rr.run_section("5.8", "long", tmp_path, settings=tiny)
    assert len(trained) == 2  # the first run came back from disk, only the second trained
    assert not (tmp_path / "long" / ".checkpoints" / "5.8-seed3-runs").exists()
    expected = sum(algorithms.run("FedAvg", model, clients, c).final.average for c in cfgs)
    assert json.loads(path.read_text())["results"]["3"]["acc"] == pytest.approx(float(expected), abs=0)


FP = {"cpu": "AMD EPYC", "cpu_flags": ["avx", "avx2", "fma", "avx512f"], "cpu_capability": "AVX512",
      "torch": "2.13.0+cpu", "blas": "mkl", "lapack": "mkl", "mkl": True, "mkldnn": True, "openmp": True,
      "threads": 1, "device": "cpu", "dtype": "float32"}


def test_the_arithmetic_fingerprint_names_what_decides_the_bits():
    fp = rr.arithmetic_fingerprint("float32")
    assert set(fp) >= {"cpu", "cpu_flags", "cpu_capability", "torch", "blas", "mkl", "mkldnn", "threads", "dtype"}
    assert fp["dtype"] == "float32" and set(fp["cpu_flags"]) <= set(rr.KERNEL_FLAGS)
    assert json.loads(json.dumps(fp)) == fp  # JSON as it is, so that a file's equals a fresh one
    digest = rr.fingerprint_digest(fp)
    assert len(digest) == 12 and digest == rr.fingerprint_digest(dict(reversed(list(fp.items()))))
    assert rr.fingerprint_digest({**fp, "threads": 99}) != digest and rr.fingerprint_digest(None) is None
    assert rr.fingerprint_changes(FP, {**FP, "cpu_capability": "AVX2"}) == ["cpu_capability AVX512 vs AVX2"]


def _committed_58(tmp_path, monkeypatch, values, fp=FP):
    """A committed long-profile 5.8 file whose seed s holds ``values[s]``, written under ``fp``;
    the driver then returns ``current[seed]`` (a dict the test changes)."""
    cls = rr.SECTIONS["5.8"][0]
    long = cls.profile("long")
    current = {seed: dict(values[seed]) for seed in long.seeds}
    monkeypatch.setattr(rr, "arithmetic_fingerprint", lambda dtype: {**fp, "dtype": dtype})
    monkeypatch.setitem(rr.SECTIONS, "5.8", (cls, lambda s: s.seed, lambda seed: current[seed]))
    path = rr.run_section("5.8", "long", tmp_path, settings=long)
    current.update({seed: dict(values[seed]) for seed in long.seeds})
    return path, current, long


def test_run_section_records_the_fingerprint_and_its_digest(tmp_path, monkeypatch):
    path, _, long = _committed_58(tmp_path, monkeypatch, {0: {"acc": 0.5}, 1: {"acc": 0.6}})
    prov = json.loads(path.read_text())["provenance"]
    assert prov["arithmetic"] == FP and prov["arithmetic_digest"] == rr.fingerprint_digest(FP)
    assert "arithmetic_by_seed" not in prov
    saved = json.loads((tmp_path / "long" / ".checkpoints" / "5.8-seed1.json").read_text())
    assert saved["arithmetic"] == FP
    # seed 1 re-runs on another machine (a resumed run): the seeds' fingerprints differ, and say so
    (tmp_path / "long" / ".checkpoints" / "5.8-seed1.json").unlink()
    monkeypatch.setattr(rr, "arithmetic_fingerprint", lambda dtype: {**FP, "cpu_capability": "AVX2"})
    prov = json.loads(rr.run_section("5.8", "long", tmp_path, settings=long).read_text())["provenance"]
    assert prov["arithmetic"] is None and prov["arithmetic_digest"] is None
    assert prov["arithmetic_by_seed"] == {"0": FP, "1": {**FP, "cpu_capability": "AVX2"}}


def test_check_is_bit_for_bit_where_the_fingerprint_matches(tmp_path, monkeypatch, capsys):
    _, current, _ = _committed_58(tmp_path, monkeypatch, {0: {"acc": [0.5, 0.6]}, 1: {"acc": [0.6, 0.7]}})
    ok = rr.check_section("5.8", "long", tmp_path)
    assert ok["mode"] == "exact" and ok["differences"] == ok["failures"] == []
    assert ok["reason"] == f"fingerprint matches ({rr.fingerprint_digest(FP)}) -> bit-for-bit check"
    current[0]["acc"] = [0.5, 0.6 + 1e-7]  # within any tolerance, but the same arithmetic should give the same bits
    bad = rr.check_section("5.8", "long", tmp_path)
    assert bad["mode"] == "exact" and bad["failures"] == [("/acc[1]", 0.6, 0.6 + 1e-7, None)]
    assert rr.main(["--profile", "long", "--check", "--out", str(tmp_path), "5.8"]) == 1
    out = capsys.readouterr().out
    assert "-> bit-for-bit check" in out and "1 values differ (the fingerprint matches, so none should)" in out


def test_check_on_another_machine_is_a_stated_tolerance_from_the_seed_spread(tmp_path, monkeypatch, capsys):
    values = {0: {"acc": [0.50, 0.60], "n": 50, "client_accuracy": {"a": [0.25, 0.75, 1.0]}},
              1: {"acc": [0.56, 0.62], "n": 50, "client_accuracy": {"a": [0.5, 0.5, 1.0]}}}
    _, current, _ = _committed_58(tmp_path, monkeypatch, values)
    monkeypatch.setattr(rr, "arithmetic_fingerprint", lambda dtype: {**FP, "cpu_capability": "AVX2", "dtype": dtype})
    # sds over the seeds: acc[0] 0.0424, acc[1] 0.0141, the client mean 0; pooled sqrt(0.002 / 3) = 0.0258;
    # tolerances: acc[0] 3 x 0.0424 = 0.127, acc[1] 3 x 0.0258 = 0.0775
    current[0].update(acc=[0.60, 0.67], client_accuracy={"a": [0.0, 1.0, 1.0]})  # per-client: mean unchanged
    c = rr.check_section("5.8", "long", tmp_path)
    assert c["mode"] == "tolerance" and c["failures"] == []
    assert c["reason"] == "fingerprint differs: cpu_capability AVX512 vs AVX2 -> tolerance check"
    assert "3 x its sd over the file's 2 seeds, 3 x their pooled sd 0.0258, 0.01" in c["tolerance"]
    assert len(c["differences"]) == 4 and c["largest"][0] == "/acc[1]"
    assert rr.main(["--profile", "long", "--check", "--out", str(tmp_path), "5.8"]) == 0
    out = capsys.readouterr().out
    assert "fingerprint differs: cpu_capability AVX512 vs AVX2 -> tolerance check" in out
    assert "4 values differ, all within the tolerance" in out and "tolerance: each float within" in out
    current[0].update(acc=[0.50, 0.70], n=49)  # beyond 0.0775; an integer differs
    c = rr.check_section("5.8", "long", tmp_path)
    assert [f[0] for f in c["failures"]] == ["/acc[1]", "/n"] and c["failures"][1][3] is None
    assert c["failures"][0][3] == pytest.approx(3 * (0.002 / 3) ** 0.5)
    assert rr.main(["--profile", "long", "--check", "--out", str(tmp_path), "5.8"]) == 1
    assert "2 beyond the tolerance" in capsys.readouterr().out


def test_a_file_without_a_fingerprint_is_checked_within_the_tolerance_said_unknown(tmp_path, monkeypatch, capsys):
    path, current, long = _committed_58(tmp_path, monkeypatch, {0: {"acc": 0.5}, 1: {"acc": 0.6}})
    record = json.loads(path.read_text())
    for key in ("arithmetic", "arithmetic_digest"):
        del record["provenance"][key]  # as every file committed before fingerprints
    path.write_text(json.dumps(record))
    current[0]["acc"] = 0.51
    c = rr.check_section("5.8", "long", tmp_path)
    assert c["mode"] == "tolerance" and c["failures"] == [] and c["reason"].startswith("fingerprint unknown")
    assert rr.main(["--profile", "long", "--check", "--out", str(tmp_path), "5.8"]) == 0
    assert "fingerprint unknown (the file records none for this seed) -> tolerance check" in capsys.readouterr().out
    # one seed: no spread over seeds, a fixed absolute tolerance
    record.update(seeds=[0], results={"0": record["results"]["0"]})
    record["settings"]["seeds"] = [0]
    path.write_text(json.dumps(record))
    monkeypatch.setattr(rr, "section_settings", lambda section, profile: replace(long, seeds=(0,)))
    c = rr.check_section("5.8", "long", tmp_path)
    assert c["failures"] == [] and f"each float within {rr.ONE_SEED_TOLERANCE:g} (the file has one seed" in c["tolerance"]
    current[0]["acc"] = 0.5 + rr.ONE_SEED_TOLERANCE + 0.001
    assert rr.check_section("5.8", "long", tmp_path)["failures"][0][0] == "/acc"


def test_a_seed_rerun_on_another_machine_is_checked_against_its_own_fingerprint(tmp_path, monkeypatch):
    path, current, _ = _committed_58(tmp_path, monkeypatch, {0: {"acc": 0.5}, 1: {"acc": 0.6}})
    record = json.loads(path.read_text())
    other = {**FP, "cpu_capability": "AVX2"}
    record["provenance"].update(arithmetic=None, arithmetic_digest=None, arithmetic_by_seed={"0": FP, "1": other})
    path.write_text(json.dumps(record))
    assert rr.check_section("5.8", "long", tmp_path, seed=0)["mode"] == "exact"
    c = rr.check_section("5.8", "long", tmp_path, seed=1)
    assert c["mode"] == "tolerance" and "cpu_capability AVX2 vs AVX512" in c["reason"]


def test_the_commit_is_dirty_for_changed_code_but_not_for_rewritten_results_files(tmp_path, monkeypatch):
    import subprocess
    git = lambda *a: subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *a], cwd=tmp_path,
                                    check=True, capture_output=True)
    (tmp_path / "book" / "results" / "long").mkdir(parents=True)
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "book" / "results" / "long" / "5.8.json").write_text("{}\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "start")
    monkeypatch.setattr(rr, "ROOT", tmp_path)
    monkeypatch.setattr(rr, "RESULTS", tmp_path / "book" / "results")
    head = rr.commit()
    assert len(head) == 40
    (tmp_path / "book" / "results" / "long" / "5.8.json").write_text('{"a": 1}\n')  # an earlier section's output
    assert rr.commit() == head
    (tmp_path / "code.py").write_text("x = 2\n")
    assert rr.commit() == head + "-dirty"


def test_the_launch_estimate_counts_the_images_each_client_keeps():
    small, big = (rr.WORK[s](rr.section_settings(s, "long")) for s in ("5.7-m200", "5.7-m500"))
    assert small["steps"] * 5 == big["steps"] * 2   # 200 vs 500 images: 20 vs 50 batches per epoch


def test_the_launch_estimate_counts_local_only_once_per_client():
    s = rr.section_settings("5.7-m500", "long")
    local = rr.WORK["5.7-m500"](replace(s, methods=("Local only",)))
    assert local["steps"] == 40 * s.local_only_epochs * 50   # 40 clients x 10 epochs x 50 batches, sampled or not
    fewer = rr.WORK["5.7-m500"](replace(s, methods=("Local only",), train=replace(s.train, rounds=10)))
    assert fewer["steps"] == local["steps"]


def test_check_section_refuses_what_stale_files_calls_stale_the_recorded_network_too(tmp_path, monkeypatch):
    cls = rr.SECTIONS["5.8"][0]
    long = cls.profile("long")
    monkeypatch.setitem(rr.SECTIONS, "5.8", (cls, lambda s: s, lambda r: {"acc": 0.5}))
    path = rr.run_section("5.8", "long", tmp_path, settings=long)
    assert rr.stale_files(tmp_path) == [] and rr.check_section("5.8", "long", tmp_path)["failures"] == []
    record = json.loads(path.read_text())
    record["network"] = {dataset: {**net, "widths": "another network"} for dataset, net in record["network"].items()}
    path.write_text(json.dumps(record))
    assert rr.stale_files(tmp_path) == [str(path)]
    with pytest.raises(ValueError, match=r"stale \(its network differs"):
        rr.check_section("5.8", "long", tmp_path)
