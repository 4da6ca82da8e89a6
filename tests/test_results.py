"""replearn.book.results: reading committed results files back."""

import dataclasses
import json

import pytest

from replearn.book import results


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
    assert text.startswith("long profile, 2 seeds (0 and 2); CPU Some CPU, 1 thread;")
    assert "commit 0123456789ab;" in text and "2026-11-24" in text and "10 min in all" in text
    one = dataclasses.replace(rf, seeds=(3,), results={"3": rf.results["0"]})
    assert one.describe().startswith("long profile, seed 3; CPU Some CPU, 1 thread;")
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


@pytest.mark.parametrize("over, match", [
    ({"section": "5.7"}, "section '5.7' at profile 'long', not of section '5.8'"),
    ({"profile": "paper"}, "at profile 'paper', not of section '5.8' at profile 'long'"),
    ({"seeds": [0, 0]}, "seeds must be distinct"),
    ({"seeds": [0, 2, 4]}, "one entry per seed"),
    ({"seeds": []}, "seeds must be distinct"),
    ({"results": {"0": {"accuracy": {"FedRep": float("nan")}}, "2": {"accuracy": {"FedRep": 0.7}}}},
     r"NaN or infinite values at \['/0/accuracy/FedRep'\]"),
    ({"results": {"0": {"curve": [0.1, float("inf")]}, "2": {"curve": [0.3, 0.4]}}}, r"/0/curve\[1\]"),
    ({"provenance": [1, 2]}, "settings and provenance must be JSON objects"),
])
def test_inconsistent_results_files_are_refused_naming_the_file(tmp_path, over, match):
    write(tmp_path, **over)
    with pytest.raises(ValueError, match=match) as info:
        results.load("5.8", "long", tmp_path)
    assert "5.8.json" in str(info.value) and "make results PROFILE=long" in str(info.value)


@pytest.mark.parametrize("text", ['{"section": "5.8", "profile": "lo', "", "[1, 2]", "\x00\xff"])
def test_truncated_or_corrupt_results_files_name_the_file(tmp_path, text):
    (tmp_path / "long").mkdir()
    (tmp_path / "long" / "5.8.json").write_text(text)
    with pytest.raises(ValueError, match="5.8.json is not a results file"):
        results.load("5.8", "long", tmp_path)


def test_values_that_are_not_numbers_are_named(tmp_path):
    write(tmp_path)
    with pytest.raises(ValueError, match=r"seed 0 holds dict at \['accuracy'\].*keys there: \['FedRep'\]"):
        results.load("5.8", "long", tmp_path).values("accuracy")


@pytest.mark.parametrize("wall", ["missing", None, float("nan"), float("inf"), -5.0, "610", True, [610]])
def test_an_unknown_wall_time_is_said_so_not_zero_or_nan_minutes(tmp_path, wall):
    record = {"commit": "0123456789abcdef", "device": "cpu", "cpu": "Some CPU", "threads": 1, "torch": "2.13.0",
              "date": "2026-11-24T15:00:00+00:00"}
    if wall != "missing":
        record["wall_s"] = wall
    write(tmp_path, provenance=record)
    text = results.load("5.8", "long", tmp_path).describe()
    assert text.endswith("; wall time unknown") and " min" not in text
    assert results.wall_time(0) == "0 min in all" and results.wall_time(610.0) == "10 min in all"


def test_a_null_wall_time_in_the_file_is_unknown_not_a_type_error(tmp_path):
    (tmp_path / "long").mkdir()
    write(tmp_path)
    path = tmp_path / "long" / "5.8.json"
    path.write_text(path.read_text().replace('"wall_s": 610.0', '"wall_s": null'))
    assert results.load("5.8", "long", tmp_path).describe().endswith("wall time unknown")


@pytest.mark.parametrize("section, profile, error, match", [
    (5.8, "long", TypeError, "section must be a string such as '4.7', got float 5.8"),
    (None, "long", TypeError, "section must be a string"),
    ("5.8", b"long", TypeError, "profile must be a string such as 'long', got bytes"),
    ("", "long", ValueError, "section must be a plain name"),
    ("5.8", " ", ValueError, "profile must be a plain name"),
    ("5.8", "long/../long", ValueError, r"profile must be a plain name .* got 'long/../long'"),
    ("5.8", "long/../x", ValueError, "profile must be a plain name"),
    ("../long/5.8", "long", ValueError, "section must be a plain name"),
    ("5.8", "..", ValueError, "profile must be a plain name"),
    ("5.8", "long\\x", ValueError, "profile must be a plain name"),
])
def test_load_blames_a_malformed_argument_not_the_file(tmp_path, section, profile, error, match):
    write(tmp_path)  # a good file at long/5.8.json, which "long/../long" would reach
    with pytest.raises(error, match=match) as info:
        results.load(section, profile, tmp_path)
    assert "results.load:" in str(info.value) and "copied or renamed" not in str(info.value)
    assert "5.8.json" not in str(info.value)
