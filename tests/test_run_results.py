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


def test_long_profiles_are_larger_than_the_cpu_defaults():
    for section, (cls, _, _) in rr.SECTIONS.items():
        d, l = cls.default(), cls.profile("long")
        assert l != d and len(l.seeds) >= len(d.seeds), section
