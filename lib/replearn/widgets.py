"""Interactive explorers for the book's notebooks.

Each explorer is split into a pure function that computes the curves (unit-tested, and used
for the static figures of the book) and a thin ipywidgets front end that redraws them.
"""

from __future__ import annotations

import io

import numpy as np

from .experiments.lower_bound import make_instance
from .federated import fedavg
from .meta import arm
from .plotting import plot_curves, to_numpy

_ARM_EXPLORER_DEFAULTS = {"delta": 0.3, "beta": 0.3, "T": 200, "cond": 4.0}


def arm_explorer_curves(delta: float, beta: float, T: int, cond: float, *, d: int = 20, k: int = 3,
                        n: int = 20, tau: int = 2, seed: int = 0) -> dict:
    """dist(B_t, B_*) for ARM and for FedAvg with ``tau`` local steps on one adversarial instance.

    The instance is :func:`replearn.experiments.lower_bound.make_instance` (Gaussian B_0 with
    N(0, 1/d) entries, w_0 = 0, heads with condition number ``cond`` and a unit-norm mean,
    B_* from the construction of book 1.3, Theorem ``arm-lb-thm``). Both methods use the
    step size ``beta`` for ``T`` iterations (rounds). ARM's curve is constant at ``delta``.
    Returns numpy arrays ``{"iteration": (T + 1,), "ARM": (T + 1,), "FedAvg": (T + 1,)}``.
    Raises ValueError on bad input, and FedAvg's ValueError when its iterates diverge.
    """
    if not 0 < delta < 1:
        raise ValueError(f"delta must lie in (0, 1), got {delta}")
    if not (isinstance(T, int) and not isinstance(T, bool) and T >= 1):
        raise ValueError(f"T (iterations) must be an integer >= 1, got {T!r}")
    inst = make_instance(d, k, n, delta, cond=cond, seed=seed)
    tasks = inst.tasks
    dist_arm = arm(inst.B0, inst.w0, tasks, beta=beta, iterations=T).dist(inst.Bstar)
    dist_fed = fedavg(inst.B0, inst.w0, tasks, alpha=beta, tau=tau, rounds=T).dist(inst.Bstar)
    return {"iteration": np.arange(T + 1), "ARM": to_numpy(dist_arm), "FedAvg": to_numpy(dist_fed)}


def draw_arm_explorer(ax, curves: dict, delta: float) -> None:
    """Plot the curves of :func:`arm_explorer_curves` on a log axis with the level delta."""
    floor = 1e-12  # FedAvg reaches machine precision; keep the log axis finite
    shown = {name: np.maximum(curves[name], floor) for name in ("ARM", "FedAvg")}
    plot_curves(ax, curves["iteration"], shown, logy=True, xlabel="iteration t",
                ylabel=r"dist$(B_t, B_*)$")
    ax.axhline(delta, color="k", lw=0.8, ls="--")
    ax.set_ylim(max(floor, 0.5 * float(shown["FedAvg"].min())), 1.5)


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def arm_explorer(**defaults):
    """An ipywidgets panel: sliders for delta, beta, T and the head condition number, and a
    plot of :func:`arm_explorer_curves` (keyword ``defaults`` set the initial slider values).

    The plot is rendered to PNG and stored in the ``Output`` widget's state directly, so the
    cell that displays the panel gets no extra outputs and a saved notebook keeps the figure.
    Divergent FedAvg settings show the error message in the plot area instead of a figure.
    """
    import ipywidgets as widgets
    from IPython.display import Image
    from matplotlib.figure import Figure

    unknown = set(defaults) - set(_ARM_EXPLORER_DEFAULTS)
    if unknown:
        raise ValueError(f"unknown explorer settings {sorted(unknown)}; use {sorted(_ARM_EXPLORER_DEFAULTS)}")
    start = {**_ARM_EXPLORER_DEFAULTS, **defaults}
    controls = {
        "delta": widgets.FloatSlider(value=start["delta"], min=0.05, max=0.95, step=0.05, description="δ"),
        "beta": widgets.FloatSlider(value=start["beta"], min=0.05, max=0.5, step=0.05, description="β"),
        "T": widgets.IntSlider(value=start["T"], min=10, max=500, step=10, description="T"),
        "cond": widgets.FloatLogSlider(value=start["cond"], base=10, min=0, max=2, step=0.1,
                                       description="cond"),
    }
    out = widgets.Output()

    def redraw(_change=None):
        values = {name: control.value for name, control in controls.items()}
        out.outputs = ()
        try:
            curves = arm_explorer_curves(**values)
        except ValueError as err:
            out.append_stdout(f"FedAvg diverged: {err}\n")
            return
        fig = Figure(figsize=(6.0, 3.4))
        draw_arm_explorer(fig.add_subplot(), curves, values["delta"])
        fig.tight_layout()
        out.append_display_data(Image(data=_png(fig), format="png"))

    for control in controls.values():
        control.observe(redraw, names="value")
    redraw()
    sliders = list(controls.values())
    return widgets.VBox([widgets.HBox(sliders[:2]), widgets.HBox(sliders[2:]), out])
