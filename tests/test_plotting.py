"""replearn.book.plotting: a figure style a phone can read, log ticks that do not overlap, legends
off the data, and the figures of chapters 1-3 sized and labelled by it."""

import json
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from replearn.book import plotting  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def test_every_font_is_at_least_9_points():
    plotting.use_style()
    fig, ax = plt.subplots()
    ax.plot([1, 2], [1, 2], label="a")
    ax.set(xlabel="x", ylabel="y", title="t")
    legend = ax.legend()
    fig.canvas.draw()
    sizes = [t.get_fontsize() for t in [*ax.get_xticklabels(), *ax.get_yticklabels(), *legend.get_texts(),
                                       ax.xaxis.label, ax.yaxis.label, ax.title]]
    assert min(sizes) >= plotting.MIN_FONT == 9
    assert legend.get_frame_on() and matplotlib.rcParams["legend.loc"] == "best"
    plt.close(fig)


def test_log_ticks_label_only_the_given_values():
    fig, ax = plt.subplots()
    ax.loglog([0.025, 0.4], [1, 2])
    plotting.log_ticks(ax, "x", (0.025, 0.05, 0.1, 0.2, 0.4))
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert labels == ["0.025", "0.05", "0.1", "0.2", "0.4"]
    assert all(not t.get_text() for t in ax.get_xminorticklabels())
    with pytest.raises(ValueError, match="positive"):
        plotting.log_ticks(ax, "y", (0.0, 1.0))
    with pytest.raises(ValueError, match="axis"):
        plotting.log_ticks(ax, "z", (1.0,))
    plt.close(fig)


def test_a_legend_outside_sits_off_the_axes():
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1], label="a")
    for below in (False, True):
        legend = plotting.legend_outside(ax, below=below)
        fig.canvas.draw()
        box, axes = legend.get_window_extent(), ax.get_window_extent()
        assert (box.y1 < axes.y0) if below else (box.x0 > axes.x1)
    plt.close(fig)


FIGURE_SOURCES = sorted([*(ROOT / "book").glob("0[1-3]_*/*.ipynb"),
                         *(ROOT / "lib" / "replearn" / "experiments").glob("ch0[1-3]_*/*.py")])


def _code(path: Path) -> str:
    if path.suffix == ".py":
        return path.read_text()
    return "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code")


@pytest.mark.parametrize("path", FIGURE_SOURCES, ids=lambda p: p.name)
def test_figures_of_chapters_1_to_3_keep_fonts_readable(path):
    # an explicit font size below the style's minimum would undo it (issue 44: legends of ~6 px)
    small = [m.group(0) for m in re.finditer(r"fontsize\s*=\s*([\d.]+|['\"](?:x-|xx-)?small['\"])", _code(path))
             if not m.group(1)[0].isdigit() or float(m.group(1)) < plotting.MIN_FONT]
    assert not small, f"{path.relative_to(ROOT)}: font sizes below {plotting.MIN_FONT} pt: {small}"
