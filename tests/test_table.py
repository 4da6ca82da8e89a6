"""replearn.table.Table: one HTML table on the page, aligned text elsewhere, optionally in parts."""

import pytest

from replearn.table import Table


def test_a_table_as_text_and_html_with_its_parts():
    t = Table(["method", "gap"], [["FedRep", "+1.0"], ["FedAvg", "-2.5"], ["mine", "0.3"]], caption="gaps",
              parts={0: "Table 1", 2: "beside it"})
    assert repr(t).splitlines() == ["gaps", "method |  gap", "-------+-----", "[Table 1]", "FedRep | +1.0",
                                    "FedAvg | -2.5", "[beside it]", "mine   |  0.3"]
    html = t._repr_html_()
    assert html.count('colspan="2"') == 2 and html.index("beside it") < html.index("mine")
    assert "<caption" in html and "white-space: nowrap" in html   # numbers stay on one line
    assert "[" not in repr(Table(["a"], [["x"]]))                   # no parts: no title rows


def test_bad_tables_are_refused():
    with pytest.raises(ValueError, match="every row needs 2 cells"):
        Table(["a", "b"], [["x"]])
    with pytest.raises(ValueError, match="align must hold"):
        Table(["a", "b"], [["x", "y"]], align="lx")
    with pytest.raises(ValueError, match=r"parts must name rows 0..0, got \[1\]"):
        Table(["a"], [["x"]], parts={1: "late"})
