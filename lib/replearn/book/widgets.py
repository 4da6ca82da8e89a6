"""Interactive explorer panels: sliders and menus that redraw a figure (ipywidgets).

Each explorer lives with its section's driver (``explorer_curves``: the tested curve function;
``draw_explorer``: the plot; ``explorer``: the panel, e.g.
``replearn.experiments.ch04_fedavg.s04_convergence.explorer``); this module only builds
panels: :class:`Slider` and :class:`Menu` describe the controls, :func:`explorer` turns them
and a draw function into a panel, :func:`panel` does the same for ready-made controls.
"""

from __future__ import annotations

import io
from dataclasses import dataclass


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


@dataclass(frozen=True)
class Slider:
    """A slider control: ``kind`` ``"float"``, ``"int"`` or ``"log"`` (``low``/``high`` are
    then powers of ten, ``value`` the value itself); ``label`` is shown beside it."""

    value: float
    low: float
    high: float
    step: float
    label: str
    kind: str = "float"


@dataclass(frozen=True)
class Menu:
    """A drop-down control over ``options``: values, or ``(label, value)`` pairs."""

    value: object
    options: tuple
    label: str


def _control(spec, value, continuous: bool):
    import ipywidgets as widgets

    if isinstance(spec, Menu):
        return widgets.Dropdown(options=list(spec.options), value=value, description=spec.label)
    common = dict(value=value, min=spec.low, max=spec.high, step=spec.step, description=spec.label,
                  continuous_update=continuous)
    if spec.kind == "int":
        return widgets.IntSlider(**common)
    if spec.kind == "log":
        return widgets.FloatLogSlider(base=10, **common)
    if spec.kind == "float":
        return widgets.FloatSlider(**common)
    raise ValueError(f"unknown slider kind {spec.kind!r}; use 'float', 'int' or 'log'")


def panel(controls: dict, figure):
    """Controls (ipywidgets, by name) above an ``Output`` that shows ``figure(values)`` (a
    matplotlib Figure) as PNG, redrawn whenever a control changes.

    The PNG is stored in the ``Output`` widget's state directly, so the cell that displays the
    panel gets no extra outputs and a saved notebook keeps the figure. A ValueError (e.g. a
    step size that diverges) is shown as text in place of the figure.
    """
    import ipywidgets as widgets
    from IPython.display import Image

    out = widgets.Output()

    def redraw(_change=None):
        values = {name: control.value for name, control in controls.items()}
        out.outputs = ()
        try:
            fig = figure(values)
        except ValueError as err:
            out.append_stdout(f"{err}\n")
            return
        out.append_display_data(Image(data=_png(fig), format="png"))

    for control in controls.values():
        control.observe(redraw, names="value")
    redraw()
    shown = list(controls.values())
    return widgets.VBox([widgets.HBox(shown[:2]), widgets.HBox(shown[2:]), out])


def explorer(controls: dict, draw, *, defaults: dict | None = None, figsize=(6.0, 3.4), axes: int = 1,
             continuous_update: bool = True):
    """An explorer panel: one control per entry of ``controls`` (name -> :class:`Slider` or
    :class:`Menu`), starting at the control's ``value`` unless ``defaults`` names another, and a
    figure of ``axes`` side-by-side axes redrawn by ``draw(ax_or_axes, values)`` whenever a control
    moves (``values``: name -> current value). Unknown names in ``defaults`` raise ``ValueError``."""
    from matplotlib.figure import Figure

    defaults = dict(defaults or {})
    unknown = set(defaults) - set(controls)
    if unknown:
        raise ValueError(f"unknown explorer settings {sorted(unknown)}; use {sorted(controls)}")
    built = {name: _control(spec, defaults.get(name, spec.value), continuous_update)
             for name, spec in controls.items()}

    def figure(values):
        fig = Figure(figsize=figsize)
        draw(fig.subplots(1, axes) if axes > 1 else fig.add_subplot(), values)
        fig.tight_layout()
        return fig

    return panel(built, figure)
