"""The book's figure style and small plotting helpers (matplotlib, PNG output)."""

from __future__ import annotations

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np

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


def use_style() -> None:
    """Apply the book's matplotlib style (small PNG figures, light grid, no top/right spines)."""
    mpl.rcParams.update({
        "figure.figsize": (6.0, 3.6),
        "figure.dpi": 100,
        "savefig.dpi": 100,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.titlesize": 11,
        "axes.labelsize": 10,
        "legend.fontsize": 9,
        "legend.frameon": False,
        "svg.hashsalt": "replearn",
    })
    try:  # inside IPython: inline PNG figures only (SVG embeds a timestamp)
        from matplotlib_inline.backend_inline import set_matplotlib_formats
        set_matplotlib_formats("png")
    except ImportError:  # pragma: no cover - outside a notebook
        pass


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
