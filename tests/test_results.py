"""replearn.results: reading committed results files back."""

import json

import pytest

from replearn import results


def write(tmp_path, **over):
    record = {"section": "5.8", "profile": "long", "settings": {"rounds": 3}, "seeds": [0, 2],
              "results": {"0": {"accuracy": {"FedRep": 0.5}, "curve": [0.1, 0.2]},
                          "2": {"accuracy": {"FedRep": 0.7}, "curve": [0.3, 0.4]}},
              "provenance": {"commit": "0123456789abcdef", "device": "cpu", "cpu": "Some CPU", "threads": 1,
                             "torch": "2.13.0", "date": "2026-11-24T15:00:00+00:00", "wall_s": 610.0}}
    record.update(over)
    (tmp_path / "long").mkdir(exist_ok=True)
    (tmp_path / "long" / "5.8.json").write_text(json.dumps(record))


def test_load_values_and_describe(tmp_path):
    write(tmp_path)
    rf = results.load("5.8", "long", tmp_path)
    assert rf.seeds == (0, 2) and rf.values("accuracy", "FedRep") == [0.5, 0.7]
    text = rf.describe()
    assert text.startswith("long profile, 2 seeds (0, 2); CPU Some CPU, 1 thread;")
    assert "commit 0123456789ab;" in text and "2026-11-24" in text and "10 min in all" in text
    with pytest.raises(KeyError, match="available: \\['FedRep'\\]"):
        rf.values("accuracy", "FedAvg")
    assert rf.values("curve", 1) == [0.2, 0.4] and rf.values("curve", -1) == [0.2, 0.4]
    with pytest.raises(KeyError, match="a list of 2"):
        rf.values("curve", 2)


def test_missing_and_corrupt_files(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="make results PROFILE=long"):
        results.load("4.7", "long", tmp_path)
    write(tmp_path, seeds=None)
    with pytest.raises(ValueError, match="not a results file"):
        results.load("5.8", "long", tmp_path)
    monkeypatch.setenv("REPLEARN_RESULTS", str(tmp_path))
    assert results.default_root() == tmp_path


def test_default_root_finds_book_results_from_a_chapter_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("REPLEARN_RESULTS", raising=False)
    (tmp_path / "book" / "results").mkdir(parents=True)
    (tmp_path / "book" / "05_fedrep").mkdir()
    monkeypatch.chdir(tmp_path / "book" / "05_fedrep")
    assert results.default_root() == tmp_path / "book" / "results"
    monkeypatch.chdir(tmp_path)
    assert results.default_root() == tmp_path / "book" / "results"
