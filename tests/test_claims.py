import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from replearn.book.claims import ClaimFailed, claim, format_value

ROOT = Path(__file__).resolve().parent.parent


def test_claim_prints_values_when_it_holds(capsys):
    claim("FedAvg beats D-GD", True, fedavg=0.012345, dgd=torch.tensor(0.87123), n=3)
    assert capsys.readouterr().out == "FedAvg beats D-GD: holds (fedavg = 0.0123, dgd = 0.871, n = 3)\n"
    claim("the gap closes", True, largest_relative_gap=0.1549)   # keywords read as words on the page
    assert capsys.readouterr().out == "the gap closes: holds (largest relative gap = 0.155)\n"


def test_claim_raises_with_values_when_false(capsys):
    with pytest.raises(ClaimFailed, match=r"x below y: does NOT hold \(x = 2, y = 1\)"):
        claim("x below y", bool(2 < 1), x=2.0, y=1.0)
    assert capsys.readouterr().out == ""
    assert issubclass(ClaimFailed, AssertionError)


def test_claim_accepts_zero_dim_booleans_only():
    claim("numpy bool", np.bool_(True))
    claim("torch bool", torch.tensor(True))
    with pytest.raises(ValueError, match="must be a bool"):
        claim("array", np.array([True, False]))
    with pytest.raises(ValueError, match="must be a bool"):
        claim("number", 1)
    with pytest.raises(ValueError, match="non-empty label"):
        claim("", True)


def test_format_value():
    assert format_value(np.float64(0.123456), digits=2) == "0.12"
    assert format_value(np.int64(7)) == "7"
    assert format_value(True) == "True"
    assert format_value("1.0 ± 0.1") == "1.0 ± 0.1"
    assert format_value(float("nan")) == "nan"
    with pytest.raises(ValueError, match="must be numbers"):
        format_value([1, 2])


def test_round_significant():
    from replearn.book.claims import round_significant
    assert round_significant(5.132895215833068) == 5.13
    assert round_significant(0.053518619444278936, 2) == 0.054
    assert round_significant(np.float64(1234.5678), 2) == 1200.0
    assert round_significant(torch.tensor(-0.00123456)) == -0.00123
    assert round_significant(7) == 7 and round_significant(0.0) == 0.0
    with pytest.raises(ValueError, match="digits"):
        round_significant(1.0, 0)
    with pytest.raises(ValueError, match="real number"):
        round_significant("1.0")


def test_glue_number_stores_the_rounded_value(capsys):
    from IPython.core.interactiveshell import InteractiveShell

    from replearn.book.claims import glue_number
    InteractiveShell.instance()
    assert glue_number("x", 5.132895215833068) == 5.13


def test_claim_refuses_to_hold_on_nan(capsys):
    # issue 27: a claim whose condition is True must not print "holds" when a value it reports is NaN
    with pytest.raises(ClaimFailed, match=r"acc is NaN"):
        claim("accuracy above chance", True, acc=float("nan"))
    with pytest.raises(ClaimFailed, match=r"acc is NaN"):
        claim("accuracy above chance", True, acc=torch.tensor(float("nan")))
    with pytest.raises(ClaimFailed, match=r"acc is NaN"):
        claim("accuracy above chance", True, acc="nan ± 0.1")
    assert capsys.readouterr().out == ""
    claim("an infinite bound is a value", True, bound=float("inf"))   # inf is a number; NaN is not


@pytest.mark.parametrize("digits", [0, -1, 18, 2.0, True, "3", None])
def test_digits_are_validated(digits):
    from replearn.book.claims import glue_number, round_significant
    with pytest.raises(ValueError, match="digits"):
        claim("x", True, digits=digits, x=1.0)
    with pytest.raises(ValueError, match="digits"):
        format_value(1.0, digits)
    with pytest.raises(ValueError, match="digits"):
        round_significant(1.0, digits)
    with pytest.raises(ValueError, match="digits"):
        glue_number("x", 1.0, digits)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), np.float64("nan"), torch.tensor(float("inf"))])
def test_glue_number_rejects_non_finite(bad):
    from replearn.book.claims import glue_number
    with pytest.raises(ValueError, match="not a finite number"):
        glue_number("x", bad)


def test_fmt_formats_once_without_negative_zero():
    from replearn.book.claims import fmt, mean_pm
    assert fmt(-0.001, ".2f") == "0.00" and fmt(-0.4, ".0f") == "0" and fmt(-0.006, ".2f") == "-0.01"
    assert fmt(0.105, ".2f") == format(0.105, ".2f")
    with pytest.raises(ValueError, match="not a finite number"):
        fmt(float("nan"))
    s = mean_pm([-0.001, 0.002, -0.0035])
    assert (s.mean, s.sd, s.text) == ("-0.001", "0.003", "-0.001 ± 0.003")
    assert mean_pm([0.004, -0.004, -0.0041], digits=2).mean == "0.00"   # not "-0.00"
    assert mean_pm([0.5, 0.7], scale=100).text == "60 ± 14"
    from replearn.book.seeds import pm
    for v in ([0.81, 0.83, 0.79], [0.1234, 0.1238, 0.1229], [12.0, 19.0, 15.0]):
        assert mean_pm(v).text == pm(v)                                  # the same numbers as seeds.pm
    with pytest.raises(ValueError, match="finite"):
        mean_pm([0.1, float("nan")])


def _glued(monkeypatch):
    import myst_nb
    calls = {}
    monkeypatch.setattr(myst_nb, "glue", lambda name, value, display=True: calls.__setitem__(name, value))
    return calls


def test_glue_text_and_glue_pm(monkeypatch):
    from replearn.book.claims import glue_pm, glue_text
    calls = _glued(monkeypatch)
    assert glue_text("a", "0.11 ± 0.01") == "0.11 ± 0.01"
    s = glue_pm("gap", [0.10, 0.12, 0.11])
    assert calls == {"a": "0.11 ± 0.01", "gap": s.text, "gap-mean": s.mean, "gap-sd": s.sd}
    for bad in ("", "nan ± 0.1", 0.5):
        with pytest.raises(ValueError):
            glue_text("b", bad)
    with pytest.raises(ValueError, match="glue names"):
        glue_text("a:b", "1")


def test_verdict_glues_the_phrase_of_its_outcome(monkeypatch, capsys):
    from replearn.book.claims import verdict
    calls = _glued(monkeypatch)
    assert verdict("v-sep", "tau = 5 above D-SGD beyond the spread", False, holds="separates", fails="does not separate",
                   paper="Fig. 4", diff=0.006) is False
    assert capsys.readouterr().out == ""   # verdicts are shown as one table per cell (verdict_table)
    assert calls["v-sep"] == "does not separate"
    assert calls["v-sep-outcome"] == {"claim": "tau = 5 above D-SGD beyond the spread", "holds": False,
                                      "outcome": "not separated", "n": None,
                                      "paper": "Fig. 4", "scale": "CPU", "kind": "direction", "size": None}
    assert verdict("v2", "x", True, holds="is above", fails="is not above", scale="long") is True
    assert calls["v2"] == "is above" and calls["v2-outcome"]["scale"] == "long"
    with pytest.raises(ClaimFailed, match="must hold: not separated"):
        verdict("v3", "must hold", False, holds="a", fails="b", require=True)
    with pytest.raises(ClaimFailed, match="NaN"):
        verdict("v4", "y", True, holds="a", fails="b", y=float("nan"))
    with pytest.raises(ValueError, match="must differ"):
        verdict("v5", "y", True, holds="a", fails="a")
    with pytest.raises(ValueError, match="scale"):
        verdict("v6", "y", True, holds="a", fails="b", scale="gpu")


def test_verdicts_show_as_one_table_with_the_interval_they_used(monkeypatch):
    from replearn.book import seeds
    from replearn.book.claims import verdict, verdict_table
    _glued(monkeypatch)
    verdict_table.__globals__["_PENDING"].clear()
    c = seeds.separated([0.5, 0.6, 0.8], [0.1, 0.2, 0.3])
    assert verdict("a", "first above second", c, holds="h", fails="f", paper="Fig. 5", first="0.63 ± 0.15") is True
    verdict("b", "no claim of the paper", False, holds="h", fails="f")
    table = verdict_table(caption="checks")
    assert table.header == ["claim", "the paper", "our run"] and table.caption == "checks"
    assert table.rows[0] == ["first above second", "Fig. 5",
                             f"holds: first = 0.63 ± 0.15; paired difference {c.full}"]
    assert table.rows[1] == ["no claim of the paper", "(the book's own statement)", "not separated"]
    with pytest.raises(ValueError, match="no verdict"):
        verdict_table()   # emptied by the previous call


def test_verdict_records_absence_claims_and_whether_the_papers_size_is_inside(monkeypatch):
    from replearn.book import seeds
    from replearn.book.claims import verdict, verdict_table
    calls = _glued(monkeypatch)
    c = seeds.compare([0.5, 0.6, 0.8], [0.1, 0.2, 0.3])          # +0.43 [+0.29, +0.58]
    verdict("s1", "x above y", c, holds="h", fails="f", paper="T1", paper_difference=0.4)
    verdict("s2", "x above y", c, holds="h", fails="f", paper="T1", paper_difference=0.05)
    verdict("s3", "more epochs do not hurt", True, holds="h", fails="f", paper="T1", absence=True)
    assert calls["s1-outcome"]["size"] is True and calls["s2-outcome"]["size"] is False
    assert calls["s3-outcome"]["kind"] == "absence" and calls["s1-outcome"]["kind"] == "direction"
    rows = verdict_table().rows
    # the paper's difference is printed as the interval is (with its decimals)
    assert "the paper's +0.4 is inside" in rows[0][2] and "the paper's +0.1 is outside" in rows[1][2]
    assert rows[2][2] == "holds"
    with pytest.raises(ValueError, match="Comparison"):
        verdict("s4", "z", True, holds="h", fails="f", paper_difference=0.1)


def test_the_criterion_is_the_paired_t_interval():
    from scipy.stats import ttest_rel
    from replearn.book import seeds
    a, b = [0.5, 0.6, 0.8, 0.7], [0.1, 0.25, 0.3, 0.5]
    c = seeds.compare(a, b)
    d = [x - y for x, y in zip(a, b)]
    half = 3.182446305284263 * (sum((x - sum(d) / 4) ** 2 for x in d) / 3) ** 0.5 / 2   # t_{0.975, 3} s / sqrt(4)
    assert c.n == 4 and abs(c.mean - sum(d) / 4) < 1e-12 and abs(c.hi - c.lo - 2 * half) < 1e-9
    # excluding zero from the 95% interval is the two-sided paired t-test at the 5% level
    for x, y in ((a, b), ([0.1, 0.2, 0.3], [0.2, 0.2, 0.35]), ([1.0, 1.1], [0.0, 0.2])):
        assert (seeds.compare(x, y).lo > 0 or seeds.compare(x, y).hi < 0) == (ttest_rel(x, y).pvalue < 0.05)
    assert not seeds.compare([0.9], [0.1]) and "no interval" in seeds.compare([0.9], [0.1]).text
    assert bool(seeds.separated(a, b)) == (c.lo > 0)
    with pytest.raises(ValueError, match="same number"):
        seeds.compare([0.1, 0.2], [0.1])


def test_recorded_outcomes_reads_stored_glue(tmp_path):
    import nbformat
    from replearn.book.claims import recorded_outcomes
    record = {"claim": "c", "holds": True, "paper": "Fig. 5", "scale": "long"}
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell("", outputs=[
        nbformat.v4.new_output("display_data", data={"text/plain": repr(record)},
                               metadata={"scrapbook": {"name": "v-x-outcome", "mime_prefix": ""}}),
        nbformat.v4.new_output("display_data", data={"text/plain": "'separates'"},
                               metadata={"scrapbook": {"name": "v-x", "mime_prefix": ""}})]))
    path = tmp_path / "n.ipynb"
    nbformat.write(nb, path)
    # defaults of older records
    assert recorded_outcomes(path) == [{"name": "v-x", "kind": "direction", "size": None, "n": None, "outcome": "holds",
                                        **record}]


def test_compared_says_which_side_is_higher_beyond_the_spread():
    from replearn.book.claims import compared

    # paired differences 0.4, 0.4, 0.5: mean 0.433, sd 0.0577, 95% half-width 4.303 * 0.0577 / sqrt(3) = 0.143
    assert compared([0.5, 0.6, 0.8], [0.1, 0.2, 0.3]) == \
        "higher beyond the spread (+0.4 [+0.3, +0.6], 95% interval, n = 3)"
    assert compared([0.1, 0.2, 0.3], [0.5, 0.6, 0.8]) == \
        "lower beyond the spread (-0.4 [-0.6, -0.3], 95% interval, n = 3)"
    # differences -0.1, 0, -0.05: the interval [-0.17, +0.07] contains 0; the mean -0.05 shows its sign
    assert compared([0.1, 0.2, 0.3], [0.2, 0.2, 0.35]) == "not separated (-0.05 [-0.17, +0.07], 95% interval, n = 3)"
    assert compared([0.5, 0.6, 0.8], [0.1, 0.2, 0.3], scale=100, unit="points") == \
        "higher beyond the spread (+43 [+29, +58] points, 95% interval, n = 3)"
    assert compared([0.9], [0.1]) == "not separated (+0.800 (one pair: no interval))"
    with pytest.raises(ValueError, match="same number"):
        compared([0.1, 0.2], [0.1])


def test_appendix_b_separates_direction_size_and_non_contradiction(tmp_path):
    import nbformat
    from replearn.book.outcomes import paper_claims, summary_word

    d = dict(holds=True, kind="direction", size=None)
    assert summary_word(None) == "—"
    assert summary_word([d]) == "holds"
    assert summary_word([{**d, "size": True}]) == "holds, size too"
    assert summary_word([{**d, "size": False}]) == "holds, size not"
    assert summary_word([{**d, "kind": "absence"}]) == "holds (no difference, as claimed)"
    assert summary_word([d, {**d, "kind": "absence"}]) == "holds; no difference where none is claimed"
    assert summary_word([d, {**d, "holds": False}]) == "holds in 1 of 2 checks"
    assert summary_word([{**d, "holds": False}]) == "not separated"     # an old record: no outcome, no n
    assert summary_word([{**d, "holds": False, "outcome": "not separated", "n": 3}] * 2) == "not separated (n = 3)"
    assert summary_word([{**d, "holds": False, "outcome": "not separated", "n": 3},
                         {**d, "holds": False, "outcome": "opposite", "n": 3}]) == "opposite"
    # two fake sections: one with recorded checks, one asserting with claim()
    for folder, name, outputs in (("05_x", "07_a.ipynb", [({"claim": "c", "holds": True, "paper": "Fig. 5",
                                                             "scale": "long", "kind": "absence", "size": None}, "v")]),
                                  ("03_y", "05_b.ipynb", [])):
        nb = nbformat.v4.new_notebook()
        outs = [nbformat.v4.new_output("display_data", data={"text/plain": repr(rec)},
                                       metadata={"scrapbook": {"name": f"{n}-outcome", "mime_prefix": ""}})
                for rec, n in outputs]
        outs.append(nbformat.v4.new_output("stream", name="stdout", text="x above y: holds\n"))
        nb.cells.append(nbformat.v4.new_code_cell("", outputs=outs))
        (tmp_path / folder).mkdir()
        nbformat.write(nb, tmp_path / folder / name)
    claims_table, checks_table, holds, not_reproduced = paper_claims(tmp_path, ["3.5", "5.7"])
    assert [r[:4] for r in claims_table.rows][-1] == ["5.7", "Fig. 5", "—", "holds (no difference, as claimed)"]
    assert checks_table.rows[-1][-1] == "holds (no difference, as claimed)" and not_reproduced == "none"
    # 3.5 asserts the reverse of the blog's ordering, so the blog's claim reads "opposite"
    assert [r for r in checks_table.rows if r[0] == "3.5"][0][-1] == "not separated"
    with pytest.raises(FileNotFoundError, match="4.1"):
        paper_claims(tmp_path, ["4.1"])
    # a section's reproduction page (appendix/reproduction/5_7.ipynb) adds its near-paper checks to 5.7
    nb = nbformat.v4.new_notebook()
    rec = {"claim": "d", "holds": False, "outcome": "not separated", "n": 2, "paper": "Fig. 6", "scale": "long",
           "kind": "direction", "size": None}
    nb.cells.append(nbformat.v4.new_code_cell("", outputs=[nbformat.v4.new_output(
        "display_data", data={"text/plain": repr(rec)}, metadata={"scrapbook": {"name": "w-outcome", "mime_prefix": ""}})]))
    (tmp_path / "appendix" / "reproduction").mkdir(parents=True)
    nbformat.write(nb, tmp_path / "appendix" / "reproduction" / "5_7.ipynb")
    claims_table, *_ = paper_claims(tmp_path, ["3.5", "5.7"])
    assert ["5.7", "Fig. 6", "—", "not separated (n = 2)"] in [r[:4] for r in claims_table.rows]


_WORD = re.compile(r"(holds|opposite|not separated(?: \(n = \d+\))?)(?:: |$)")
_INTERVAL = re.compile(r"paired differences? (?P<all>.*)")
_ONE = re.compile(r"(?P<mean>\S+) \[(?P<lo>\S+), (?P<hi>\S+)\](?P<unit> points)?")
_VALUE = re.compile(r"= (-?\d+(?:\.\d+)?) (?:±|\()")


def verdict_row_problems(row: str) -> list[str]:
    """What is wrong with one verdict row's outcome cell: a word outside the book's vocabulary, an
    interval bound printed as a signless zero with decimals ("0.0", "-0.00"), a word that disagrees
    with the sign of the printed interval, or an interval whose unit disagrees with the values
    beside it (a fraction beside accuracies in %, or points beside fractions)."""
    word = _WORD.match(row)
    if not word:
        return [f"outcome word not one of holds / not separated (n = k) / opposite: {row!r}"]
    problems = []
    found = _INTERVAL.search(row)
    intervals = [m.groupdict() for m in _ONE.finditer(found["all"])] if found else []
    for iv in intervals:
        for key in ("mean", "lo", "hi"):
            if re.fullmatch(r"[+-]?0\.0+", iv[key]):
                problems.append(f"{key} printed as {iv[key]!r}, which hides its sign: {row!r}")
            elif iv[key] != "0" and iv[key][0] not in "+-":
                problems.append(f"{key} printed without a sign ({iv[key]!r}): {row!r}")
    if len(intervals) == 1 and not found["all"].startswith("s"):
        lo, hi = float(intervals[0]["lo"]), float(intervals[0]["hi"])
        expected = "holds" if lo > 0 else "opposite" if hi < 0 else "not separated"
        if not word[1].startswith(expected):
            problems.append(f"says {word[1]!r} but the printed interval [{lo}, {hi}] means {expected!r}: {row!r}")
    values = [float(v) for v in _VALUE.findall(row)]
    for iv in intervals:
        in_points = bool(iv["unit"])
        if in_points and any(abs(v) < 1 for v in values if v):
            problems.append(f"interval in points beside values that are fractions: {row!r}")
        if not in_points and values and any(abs(v) > 1.5 for v in values) and \
                max(abs(float(iv["lo"])), abs(float(iv["hi"]))) <= 1:
            problems.append(f"interval without a unit (a fraction?) beside values in %: {row!r}")
    return problems


def test_verdict_rows_agree_in_unit_and_sign(monkeypatch):
    # every outcome a Comparison, a Joint or a bool can have, printed and checked by the row rule
    from replearn.book import seeds
    from replearn.book.claims import verdict, verdict_table
    calls = _glued(monkeypatch)
    verdict_table.__globals__["_PENDING"].clear()
    pairs = [([0.5, 0.6, 0.8], [0.1, 0.2, 0.3]), ([0.1, 0.2, 0.3], [0.5, 0.6, 0.8]),
             ([0.11, 0.22, 0.33], [0.1, 0.2, 0.3]), ([0.3, 0.31, 0.2], [0.3, 0.3, 0.3])]
    for k, (a, b) in enumerate(pairs):
        shown = {"a": seeds.pm(a, scale=100), "b": seeds.pm(b, scale=100)}
        verdict(f"p{k}", "a above b", seeds.points(a, b), holds="is above", fails="is not separated",
                opposite="is below", **shown)
        verdict(f"f{k}", "a above b", seeds.compare(a, b), holds="is above", fails="is not separated",
                a=seeds.pm(a), b=seeds.pm(b))
    verdict("j", "both above", seeds.every(seeds.points(a, b) for a, b in pairs[:3]), holds="h", fails="f")
    verdict("bool", "below the floor", False, holds="h", fails="f")
    verdict("absent", "more epochs do not hurt", False, holds="h", fails="f", absence=True)
    rows = [r[2] for r in verdict_table().rows]
    assert [r.split(":")[0] for r in rows] == ["holds", "holds", "opposite", "opposite", "not separated (n = 3)",
                                              "not separated (n = 3)", "not separated (n = 3)",
                                              "not separated (n = 3)", "opposite", "not separated", "opposite"]
    assert rows[0] == ("holds: a = 63 ± 15, b = 20 ± 10; paired difference +43 [+29, +58] points "
                       "(95% interval, n = 3)")
    assert [calls[f"p{k}"] for k in range(4)] == ["is above", "is below", "is not separated", "is not separated"]
    assert calls["f1"] == "is not separated"          # no opposite phrase given: the fails phrase
    assert calls["j-outcome"]["outcome"] == "opposite" and calls["j-outcome"]["n"] == 3
    for row in rows:
        assert verdict_row_problems(row) == [], row
    # the rule catches what the issue found on the pages
    assert verdict_row_problems("does not hold (paired difference -0.1 [-0.2, +0.1])")
    assert verdict_row_problems("holds: paired difference +0.02 [0.00, +0.03] (95% interval, n = 3)")
    assert verdict_row_problems("holds: paired difference +7 [-7, +21] points (95% interval, n = 3)")
    assert verdict_row_problems("holds: fedrep = 61 ± 8, fedavg = 5 ± 1; paired difference +0.6 [+0.3, +0.8] "
                                "(95% interval, n = 3)")
    assert verdict_row_problems("holds: x = 0.61 ± 0.08; paired difference +56 [+35, +78] points")


def _stored_verdict_rows(path):
    """The outcome cells of the verdict tables (claim | the paper | our run) in a stored notebook."""
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            text = out.get("data", {}).get("text/plain", "")
            lines = ("".join(text) if isinstance(text, list) else text).splitlines()
            for i, line in enumerate(lines):
                if re.fullmatch(r"claim\s*\| the paper\s*\| our run", line.strip()):
                    for row in lines[i + 2:]:
                        yield row.split(" | ", 2)[-1].strip()


VERDICT_PAGES = sorted(p for p in (ROOT / "book").glob("*/*.ipynb") if "verdict(" in p.read_text())


@pytest.mark.parametrize("path", VERDICT_PAGES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_stored_verdicts_agree_in_unit_and_sign(path):
    # every verdict row the stored notebook shows; a notebook stored before the book's one vocabulary
    # ("does not hold", fractions beside %) fails here until it is re-executed
    rows = list(_stored_verdict_rows(path))
    assert rows, f"{path}: calls verdict() but shows no verdict table"
    problems = [p for row in rows for p in verdict_row_problems(row)]
    assert not problems, f"{path} (re-execute it if its code is already fixed):\n" + "\n".join(problems)
