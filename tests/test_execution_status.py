"""Tests of the notebooks' execution records (``book/_ext/execution_status.py``), written by
``scripts/execute_notebooks.py`` and read back by the book's "Execution status" page and the run
times of its introduction: the record's fields, the data a notebook ran on, the table's rows and
statistics, a real execution, and a Sphinx build of a small book with the page and the role."""

import datetime as dt
import importlib.util
import json
import sys
from pathlib import Path

import nbformat
import pytest
from cifar_fixtures import fake_cifar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import execution_status as es  # noqa: E402

DAY = dt.date(2026, 12, 1)


def _execute_script():
    path = ROOT / "scripts" / "execute_notebooks.py"
    spec = importlib.util.spec_from_file_location("execute_notebooks", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _notebook(code="x = 1", outputs=(), title="9.9 A section"):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {title}"),
                nbformat.v4.new_code_cell(code, outputs=list(outputs),
                                          execution_count=1 if outputs else None)]
    return nb


def _stdout(text):
    return nbformat.v4.new_output("stream", name="stdout", text=text)


def _record(nb, seconds, **kw):
    kw = {"profile": "default", "threads": 2, "cpu": "Test CPU", "today": DAY, **kw}
    return es.record_execution(nb, seconds, **kw)


# --------------------------------------------------------------------------- the record


def test_record_has_every_field_and_lands_under_replearn_execution():
    nb = _notebook()
    nb.metadata["replearn"] = {"other": 1}
    record = _record(nb, 41.6)
    assert record == {"wall_time_s": 42, "profile": "default", "data": "none", "date": "2026-12-01",
                      "cpu": "Test CPU", "threads": 2, "status": "ok"}
    assert nb.metadata["replearn"] == {"other": 1, "execution": record}
    nbformat.validate(nb)                                  # still a valid notebook
    assert es.read_record(nb.metadata) == record
    again = _record(nb, 3.2, profile="paper")              # a later run replaces the record
    assert nb.metadata["replearn"]["execution"] == again and again["wall_time_s"] == 3


def test_record_defaults_today_utc_and_this_cpu():
    nb = _notebook()
    record = es.record_execution(nb, 0.4, profile="default", threads=1)
    assert record["wall_time_s"] == 0 and record["threads"] == 1
    assert record["date"] == dt.datetime.now(dt.timezone.utc).date().isoformat()
    assert record["cpu"] == es.cpu_name() and record["cpu"]


@pytest.mark.parametrize("seconds", [-1, float("nan"), float("inf")])
def test_record_rejects_bad_times(seconds):
    with pytest.raises(ValueError, match="seconds"):
        _record(_notebook(), seconds)


def test_record_rejects_a_missing_profile():
    with pytest.raises(ValueError, match="profile"):
        _record(_notebook(), 1, profile="")


@pytest.mark.parametrize("metadata", [{}, None, {"replearn": {}}, {"replearn": "x"},
                                      {"replearn": {"execution": 3}},
                                      {"replearn": {"execution": {"wall_time_s": "12"}}},
                                      {"replearn": {"execution": {"wall_time_s": True}}},
                                      {"replearn": {"execution": {"wall_time_s": -1}}},
                                      {"replearn": {"execution": {"profile": "default"}}}])
def test_no_record_reads_as_none(metadata):
    assert es.read_record(metadata) is None


# --------------------------------------------------------------------------- the data


def test_data_kind_from_the_code_and_what_describe_printed():
    subset, full = fake_cifar(source="subset").describe(), fake_cifar(source="full").describe()
    assert es.data_kind(_notebook("print(1)", [_stdout("1\n")])) == "none"
    # "cifar" in the text is not enough: the notebook must call load_cifar
    assert es.data_kind(_notebook("# CIFAR-10 results files, read back", [_stdout(subset)])) == "none"
    load = "data = load_cifar('cifar10')\nprint(data.describe())"
    assert es.data_kind(_notebook(load, [_stdout(subset + "\n")])) == "offline subsets"
    assert es.data_kind(_notebook(load, [_stdout(full + "\n")])) == "full datasets"
    both = [_stdout(subset + "\n"), nbformat.v4.new_output("execute_result", data={"text/plain": repr(full)},
                                                           execution_count=1)]
    assert es.data_kind(_notebook(load, both)) == "full datasets + offline subsets"
    assert es.data_kind(_notebook(load, [_stdout("trained\n")])) == es.UNREPORTED_DATA
    assert _record(_notebook(load, [_stdout(subset)]), 5)["data"] == "offline subsets"


def test_every_source_of_the_data_module_is_recognised():
    """The phrases searched for are those CifarData.describe prints, for both of its sources."""
    for source, kind in (("subset", "offline subsets"), ("full", "full datasets")):
        printed = fake_cifar(source=source).describe()
        assert [name for phrase, name in es.DESCRIBED_SOURCES.items() if phrase in printed] == [kind]


# --------------------------------------------------------------------------- table and statistics


@pytest.mark.parametrize("seconds,text", [(None, "not recorded"), (0, "0 s"), (8.4, "8 s"),
                                          (59.6, "1 min 00 s"),
                                          (125, "2 min 05 s"), (3599, "59 min 59 s"), (3780, "1 h 03 min")])
def test_format_duration(seconds, text):
    assert es.format_duration(seconds) == text


def _book(tmp_path):
    """Four fake notebooks: two default-profile records, one paper-profile record, one without."""
    paths = {}
    for name, seconds, profile in (("a", 10, "default"), ("b", None, None), ("c", 130, "default"),
                                   ("d", 500, "paper")):
        nb = _notebook()
        if seconds is not None:
            _record(nb, seconds, profile=profile, threads=1 if name == "d" else 2)
        paths[name] = tmp_path / f"{name}.ipynb"
        nbformat.write(nb, paths[name])
    (tmp_path / "broken.ipynb").write_text("{not json")
    return [(f"book/{n}", p) for n, p in paths.items()] + [("book/broken", tmp_path / "broken.ipynb")]


def test_rows_show_not_recorded_without_a_record(tmp_path):
    rows = es.status_rows(_book(tmp_path))
    assert [r.docname for r in rows] == ["book/a", "book/b", "book/c", "book/d", "book/broken"]
    assert rows[0].cells() == ("10 s", "default", "none", "2026-12-01", "ok")
    assert rows[2].cells() == ("2 min 10 s", "default", "none", "2026-12-01", "ok")
    for r in (rows[1], rows[4]):
        assert r.record is None and r.machine is None
        assert r.cells()[0] == r.cells()[-1] == "not recorded"
    assert rows[0].machine == "Test CPU, 2 threads" and rows[3].machine == "Test CPU, 1 thread"


def test_summary_of_the_default_profile_and_of_all(tmp_path):
    rows = es.status_rows(_book(tmp_path))
    default = es.summary(rows)
    assert default == {"count": 2, "notebooks": 5, "total": 140, "median": 70, "max": 130,
                       "slowest": "book/c",
                       "machines": {"Test CPU, 2 threads": 2}}
    every = es.summary(rows, profile=None)
    assert (every["count"], every["total"], every["max"], every["slowest"]) == (3, 640, 500, "book/d")
    assert every["machines"] == {"Test CPU, 2 threads": 2, "Test CPU, 1 thread": 1}
    assert es.statistic("machine", every) == ("Test CPU, 2 threads (2 sections) and "
                                              "Test CPU, 1 thread (1 section)")
    assert es.statistic("median", default) == "1 min 10 s"
    assert es.statistic("max", default) == "2 min 10 s"
    assert es.statistic("total", default) == "2 min 20 s (2 of 5 sections recorded)"
    assert es.statistic("count", default) == "2 of 5"
    assert es.statistic("machine", default) == "Test CPU, 2 threads"
    assert es.statistic("slowest", default) == "book/c"
    with pytest.raises(ValueError, match="unknown statistic"):
        es.statistic("mean", default)


def test_summary_without_any_record_says_not_recorded():
    stats = es.summary([es.Row("book/a", None)])
    assert stats["count"] == 0 and stats["slowest"] is None
    assert {w: es.statistic(w, stats) for w in es.STATISTICS if w != "count"} == dict.fromkeys(
        ("median", "max", "total", "machine", "slowest"), "not recorded")


def test_summary_when_every_notebook_is_recorded_has_no_note():
    rows = [es.Row("x", {"wall_time_s": 3, "profile": "default"}),
            es.Row("y", {"wall_time_s": 5, "profile": "default"})]
    assert es.statistic("total", es.summary(rows)) == "8 s"


# --------------------------------------------------------------------------- a real execution


def test_execute_script_records_the_run_and_keeps_a_failed_notebook(tmp_path):
    script = _execute_script()
    good = tmp_path / "good.ipynb"
    nbformat.write(_notebook("print(1 + 1)"), good)
    bad = tmp_path / "bad.ipynb"
    before = _notebook("import sys; print('oops', file=sys.stderr)")
    nbformat.write(before, bad)
    env = {"profile": "default", "threads": 1}
    assert script.execute(good, env) == []
    nb = nbformat.read(good, as_version=4)
    assert nb.cells[1].outputs[0]["text"] == "2\n" and nb.cells[1].execution_count == 1
    record = es.read_record(nb.metadata)
    assert record["status"] == "ok" and record["profile"] == "default" and record["data"] == "none"
    assert 0 <= record["wall_time_s"] < 120 and record["threads"] == 1
    assert "execution" not in nb.cells[1].metadata          # per-cell timings still dropped
    assert script.execute(bad, env) != []
    assert nbformat.read(bad, as_version=4) == before        # a failed run writes nothing


def test_run_environment_reads_the_profile(monkeypatch):
    script = _execute_script()
    monkeypatch.setenv("REPLEARN_PROFILE", "paper")
    env = script.run_environment()
    assert env["profile"] == "paper" and env["threads"] >= 1
    monkeypatch.delenv("REPLEARN_PROFILE")
    assert script.run_environment()["profile"] == "default"


# --------------------------------------------------------------------------- the page, built


def test_sphinx_builds_the_table_and_the_statistics(tmp_path):
    """A small book (two notebooks, one without a record) with the directive and the roles builds
    without a warning; the table links each section by its title and the role names the slowest."""
    from sphinx.application import Sphinx
    from sphinx.util.docutils import docutils_namespace

    src = tmp_path / "src"
    src.mkdir()
    fast, slow = _notebook("x = 1", title="1.1 Fast one"), _notebook("y = 2", title="1.2 Slow $B_*$ one")
    _record(fast, 4)
    _record(slow, 75)
    nbformat.write(fast, src / "fast.ipynb")
    nbformat.write(slow, src / "slow.ipynb")
    nbformat.write(_notebook("z = 3", title="1.3 Never run"), src / "never.ipynb")
    (src / "conf.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT / 'book' / '_ext')!r})\n"
        "extensions = ['myst_nb', 'execution_status']\n"
        "nb_execution_mode = 'off'\n"
        "myst_enable_extensions = ['dollarmath']\n"
        "exclude_patterns = ['_build']\n")
    (src / "index.md").write_text(
        "# Book\n\nThe median section ran in {execution}`median`, the slowest ({execution}`slowest`) in "
        "{execution}`max`; all in {execution}`total` on {execution}`machine`.\n\n"
        "```{toctree}\nfast\nslow\nnever\nstatus\n```\n")
    (src / "status.md").write_text("# Status\n\n```{execution-status}\n```\n")
    out = tmp_path / "html"
    with docutils_namespace():                                  # each build registers its nodes afresh
        Sphinx(str(src), str(src), str(out), str(tmp_path / "doctrees"), "html", status=None,
               warning=None, freshenv=True, warningiserror=True).build()
    page = (out / "status.html").read_text()
    table = page[page.index("<table"):page.index("</table>")]
    slow_title = '1.2 Slow <span class="math notranslate nohighlight">\\(B_*\\)</span> one'
    assert table.index("1.1 Fast one") < table.index(slow_title) < table.index("1.3 Never run")
    assert "tex-mml-chtml.js" in page                            # MathJax loaded for the titles' math
    assert 'href="fast.html"' in table and "1 min 15 s" in table and "4 s" in table
    assert table.count("not recorded") == 2                      # wall time and status of "never"
    assert "Total (2 of 3 sections recorded)" in table and "1 min 19 s" in table
    assert "Executed on: Test CPU, 2 threads (2 sections)." in page
    index = (out / "index.html").read_text()
    assert "The median section ran in 40 s, the slowest (" in index
    assert f'<a class="reference internal" href="slow.html">{slow_title}</a>) in 1 min 15 s' in index
    assert "in 1 min 15 s; all in 1 min 19 s (2 of 3 sections recorded) on Test CPU, 2 threads." in index
    assert "wall_time_s" not in (out / "fast.html").read_text()  # the record is not shown on the page


def test_unknown_statistic_is_an_error(tmp_path):
    from sphinx.application import Sphinx
    from sphinx.errors import SphinxWarning
    from sphinx.util.docutils import docutils_namespace

    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text(f"import sys\nsys.path.insert(0, {str(ROOT / 'book' / '_ext')!r})\n"
                                 "extensions = ['execution_status']\n")
    (src / "index.rst").write_text("Book\n====\n\nIt ran in :execution:`mean`.\n")
    with docutils_namespace(), pytest.raises(SphinxWarning, match="unknown statistic 'mean'"):
        Sphinx(str(src), str(src), str(tmp_path / "html"), str(tmp_path / "doctrees"), "html",
               status=None, warning=None, freshenv=True, warningiserror=True).build()


def test_consecutive_prints_are_merged_but_not_across_a_figure_or_another_stream():
    script = _execute_script()
    out = nbformat.v4.new_output
    outputs = [out("stream", name="stdout", text="a\n"), out("stream", name="stdout", text="b\n"),
               out("stream", name="stderr", text="w\n"), out("stream", name="stdout", text="c\n"),
               out("display_data", data={"text/plain": "<Figure>"}), out("stream", name="stdout", text="d\n"),
               out("stream", name="stdout", text="e\n")]
    merged = script.merge_streams(outputs)
    assert [(o["output_type"], o.get("name"), o.get("text")) for o in merged] == [
        ("stream", "stdout", "a\nb\n"), ("stream", "stderr", "w\n"), ("stream", "stdout", "c\n"),
        ("display_data", None, None), ("stream", "stdout", "d\ne\n")]
    nb = _notebook("print(1)", outputs[:2])
    script.normalise(nb)
    assert nb.cells[1].outputs == [out("stream", name="stdout", text="a\nb\n")]


def test_results_rows_read_each_files_provenance(tmp_path):
    folder = tmp_path / "long"
    folder.mkdir()
    prov = {"commit": "0123456789abcdef", "device": "cpu", "cpu": "AMD EPYC", "threads": 1,
            "date": "2026-12-06T01:54:18+00:00", "wall_s": 3027.1}
    (folder / "5.7.json").write_text(json.dumps({"seeds": [0, 1], "provenance": prov}))
    (folder / "4.7.json").write_text(json.dumps({"seeds": [2], "provenance": {**prov, "device": "cuda:0",
                                                                              "wall_s": 30}}))
    assert es.results_rows(tmp_path) == [
        ("long", "4.7", "0123456789ab", "2026-12-06", "cuda:0", "2", "30 s"),
        ("long", "5.7", "0123456789ab", "2026-12-06", "AMD EPYC, 1 thread", "0, 1", "50 min 27 s")]
    (folder / "5.8.json").write_text('{"seeds": [0]')
    with pytest.raises(ValueError, match="5.8.json: not a results file"):
        es.results_rows(tmp_path)


def test_the_committed_results_files_all_have_rows():
    assert {(r[0], r[1]) for r in es.results_rows()} == {
        (p.parent.name, p.stem) for p in es.RESULTS.glob("*/*.json")}
    assert all(len(r[2]) == 12 for r in es.results_rows())  # every file names its commit
