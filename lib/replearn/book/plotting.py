"""The book's figure style and small plotting helpers (matplotlib, PNG output).

Figures are made to be read on a phone: :func:`use_style` sets every font to at least
:data:`MIN_FONT` pt at the figure's natural size, legends are framed and placed off the data
(``loc="best"``, or :func:`legend_outside`), log axes that span less than a decade are labelled
with :func:`log_ticks`, and a figure is at most :data:`MAX_WIDTH` inches wide (stack panels in
rows rather than widen it), so that the text column shows it at its natural size."""

from __future__ import annotations

import matplotlib as mpl
import numpy as np

from replearn.table import Table  # noqa: F401  (the notebooks' tables: one import with the figures' helpers)

#: One colour per method, used in every chapter so a method looks the same everywhere.
COLORS = {
    "ARM": "#d62728",
    "D-GD": "#d62728",
    "FedAvg": "#1f77b4",
    "MAML": "#2ca02c",
    "FO-MAML": "#98df8a",
    "ANIL": "#9467bd",
    "FO-ANIL": "#c5b0d5",
    "FedRep": "#ff7f0e",
    "true representation": "#2ca02c",
    "local only": "#7f7f7f",
    "Local only": "#7f7f7f",
    "FedPer": "#17becf",
    "LG-FedAvg": "#bcbd22",
}

#: The colours and line styles of the meta-learners and ARM in the figures of book 2.4 and 2.5
#: (a palette of their own, unlike :data:`COLORS`; FO-ANIL dashed, ARM dotted).
MAML_COLORS = {"MAML": "#1f77b4", "FO-MAML": "#d62728", "ANIL": "#2ca02c", "FO-ANIL": "#ff7f0e", "ARM": "#7f7f7f"}
MAML_STYLES = {"MAML": "-", "FO-MAML": "-", "ANIL": "-", "FO-ANIL": "--", "ARM": ":"}


#: The widest figure, in inches at :data:`DPI` dots per inch, that the text column shows at its natural
#: size at 1400 px (wider ones are scaled down, and their text with them); on a phone a figure keeps
#: this natural size and scrolls in its own box (``book/_static/layout.css``).
MAX_WIDTH = 7.5
DPI = 100
#: The smallest font, in points, of any text in a figure (ticks, legends): 9 pt at 100 dpi is 12.5 px.
MIN_FONT = 9


def use_style() -> None:
    """Apply the book's matplotlib style: small PNG figures at :data:`DPI` dots per inch, every font
    at least :data:`MIN_FONT` pt at the figure's natural size, a light grid, no top/right spines,
    legends framed and placed where they cover the least data (``loc="best"``)."""
    mpl.rcParams.update({
        "figure.figsize": (6.0, 3.6),
        "figure.dpi": DPI,
        "savefig.dpi": DPI,
        "font.size": 10,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.titlesize": 11,
        "axes.labelsize": 10,
        "xtick.labelsize": MIN_FONT,
        "ytick.labelsize": MIN_FONT,
        "legend.fontsize": MIN_FONT,
        "legend.title_fontsize": MIN_FONT,
        "legend.loc": "best",
        "legend.frameon": True,
        "legend.framealpha": 0.9,
        "legend.edgecolor": "0.8",
        "svg.hashsalt": "replearn",
    })
    try:  # inside IPython: inline PNG figures only (SVG embeds a timestamp)
        from matplotlib_inline.backend_inline import set_matplotlib_formats
        set_matplotlib_formats("png")
    except ImportError:  # pragma: no cover - outside a notebook
        pass


def log_ticks(ax, axis: str, ticks) -> None:
    """Label a log-scaled ``axis`` ("x" or "y") of ``ax`` at the values ``ticks`` only, written
    plainly ("0.05", "20"), with no labels on the minor ticks: a log axis spanning less than about
    a decade otherwise labels its minor ticks too ("3x10^-2 4x10^-2 ..."), which overlap."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    if axis not in ("x", "y"):
        raise ValueError(f"log_ticks: axis must be 'x' or 'y', got {axis!r}")
    values = [float(v) for v in ticks]
    if not values or any(not v > 0 for v in values):
        raise ValueError(f"log_ticks: ticks must be positive numbers on a log axis, got {list(ticks)!r}")
    which = ax.xaxis if axis == "x" else ax.yaxis
    which.set_major_locator(FixedLocator(values))
    which.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    which.set_minor_formatter(NullFormatter())


def legend_outside(ax, *, below: bool = False, ncol: int = 1, **kwargs):
    """The legend of ``ax`` outside its axes, off the data: to the right of the axes, top-aligned
    (or centred below them with ``below=True``, in ``ncol`` columns); the figure grows to hold it
    when saved (the notebook's inline figures are saved with a tight bounding box)."""
    if below:
        return ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=ncol, **kwargs)
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), ncol=ncol, borderaxespad=0.0, **kwargs)


def to_numpy(x) -> np.ndarray:
    """A CPU NumPy copy of a tensor or array-like."""
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def plot_curves(ax, x, curves: dict, *, logy: bool = False, band: dict | None = None,
                xlabel: str = "", ylabel: str = "", title: str = "") -> None:
    """Plot named curves ``{label: y}`` against ``x`` with the method colours.

    ``band`` optionally maps a label to ``(low, high)`` arrays drawn as a shaded region
    (e.g. the spread over seeds).
    """
    x = to_numpy(x)
    for label, y in curves.items():
        color = COLORS.get(label)
        ax.plot(x, to_numpy(y), label=label, color=color)
        if band and label in band:
            lo, hi = band[label]
            ax.fill_between(x, to_numpy(lo), to_numpy(hi), color=color, alpha=0.2, linewidth=0)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.legend()


def wrap_repr(obj, width: int = 100) -> str:
    """``repr(obj)`` broken into lines of at most about ``width`` characters, at the commas that
    separate its top-level fields (a settings dataclass prints one long line otherwise, several
    thousand pixels wide on the page); continuation lines are indented by four spaces."""
    if isinstance(width, bool) or not isinstance(width, int) or width < 20:
        raise ValueError(f"width must be an int of at least 20, got {width!r}")
    text = repr(obj)

    def split(chunk: str, level: int) -> list[str]:
        # cut ``chunk`` after the commas at bracket depth ``level``
        parts, depth, start, quote = [], 0, 0, None
        for i, ch in enumerate(chunk):
            if quote:
                quote = None if ch == quote else quote
            elif ch in "'\"":
                quote = ch
            elif ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
            elif ch == "," and depth == level:
                parts.append(chunk[start:i + 1])
                start = i + 1
        parts.append(chunk[start:])
        return parts

    parts = []
    for part in split(text, 1):     # a field too long for a line is cut at its own fields' commas
        parts.extend(split(part, 1) if len(part) > width - 4 else [part])
    lines, line = [], ""
    for part in parts:
        piece = part if not line else part.lstrip()
        if line and len(line) + 1 + len(piece) > width:
            lines.append(line)
            line = "    " + piece
        else:
            line = f"{line} {piece}" if line else piece
    lines.append(line)
    return "\n".join(lines)
