"""The explorer builder (the section explorers themselves are tested with their drivers, e.g.
tests/experiments/ch01_arm/test_s03_lower_bound.py)."""

import pytest

from replearn.book.widgets import Menu, Slider, explorer

CONTROLS = {"height": Slider(0.3, 0.05, 0.95, 0.05, "h"), "n": Slider(20, 10, 50, 10, "n", "int"),
            "scale": Slider(1.0, 0, 2, 0.1, "scale", "log"), "style": Menu("-", ("-", "--"), "style")}


def draw(ax, values):
    if values["height"] > 0.8:
        raise ValueError("the iterates diverged by round 3")
    ax.plot([0, values["n"]], [0, values["height"] * values["scale"]], ls=values["style"])


def test_explorer_builds_and_rejects_unknown_settings():
    import ipywidgets

    panel = explorer(CONTROLS, draw, defaults={"height": 0.2, "n": 30})
    assert isinstance(panel, ipywidgets.VBox)
    assert [c.value for c in panel.children[0].children] == [0.2, 30]
    shown = panel._repr_mimebundle_()["text/plain"]  # what a notebook stores (nbval compares it)
    assert "VBox" in shown and " at 0x" not in shown
    with pytest.raises(ValueError, match="unknown"):
        explorer(CONTROLS, draw, defaults={"alpha": 0.1})


def test_explorer_redraws_into_its_output_and_shows_errors_as_text():
    panel = explorer(CONTROLS, draw)
    out, height = panel.children[-1], panel.children[0].children[0]
    assert len(out.outputs) == 1 and "image/png" in out.outputs[0]["data"]
    first = out.outputs[0]["data"]["image/png"]
    height.value = 0.6
    assert len(out.outputs) == 1 and out.outputs[0]["data"]["image/png"] != first
    height.value = 0.9
    assert len(out.outputs) == 1 and "diverged by round 3" in out.outputs[0]["text"]
