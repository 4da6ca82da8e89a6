"""Interactive explorers for the book's notebooks.

Each explorer is split into a pure function that computes the curves (unit-tested, and used
for the static figures of the book) and a thin ipywidgets front end that redraws them:

- :func:`arm_explorer` (book 1.3): ARM vs FedAvg on the adversarial instance of the lower bound;
- :func:`fedavg_explorer` (book 4.4): FedAvg vs D-GD as tau, alpha, diversity and participation vary;
- :func:`similarity_explorer` (book 4.7): the class cosine-similarity matrix of each trained model and
  the row of one class, against D-SGD's.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from .checks import (check_choice, check_fraction, check_int, check_nonnegative, check_number, check_positive,
                     check_seed)
from .experiments.fedavg_convergence import FedAvgConvergenceSettings, make_problem
from .experiments.lower_bound import make_instance
from .federated import dgd, fedavg
from .meta import arm
from .plotting import plot_curves, to_numpy


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
    check_number(delta, "delta", low=0.0, high=1.0, low_open=True, high_open=True)
    check_positive(beta, "beta")
    check_number(cond, "cond (a condition number)", low=1.0)
    check_int(T, "T (iterations)", 1)
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



def fedavg_explorer_curves(tau: int, alpha: float, cond: float, participation: float, *, d: int = 30,
                           k: int = 3, M: int = 20, rounds: int = 300, seed: int = 0) -> dict:
    """dist(B_t, B_*) of FedAvg with ``tau`` local steps and of D-GD (tau = 1), t = 0..rounds.

    One problem of :func:`replearn.experiments.fedavg_convergence.make_problem`: Haar-random
    B_* (d, k), M heads whose centred covariance has condition number ``cond``
    (``make_heads(exact=True)``), random B_0 with alpha B_0^T B_0 = I_k and w_0 = 0. Each round
    samples m = max(1, round(participation M)) clients; both methods use the same step
    ``alpha``, the same start and the same client samples, so with ``tau = 1`` the two curves
    are identical. Returns numpy arrays ``{"round", "FedAvg", "D-GD"}``, each (rounds + 1,).
    Raises ValueError on bad input and when the iterates diverge (step size too large).
    """
    check_int(tau, "tau (local steps)", 1)
    check_positive(alpha, "alpha")
    check_number(cond, "cond (a condition number)", low=1.0)
    check_fraction(participation, "participation (a fraction of clients)")
    check_int(rounds, "rounds", 1)
    check_int(k, "k", 1)
    check_int(d, "d (needs 1 <= k < d)", k + 1)
    check_int(M, "M (clients, at least k + 1)", k + 1)
    check_seed(seed)
    cfg = FedAvgConvergenceSettings(d=d, k=k, M=M, alpha=float(alpha), tau=tau, rounds=rounds)
    pb = make_problem(cfg, seed, cond=float(cond))
    m = max(1, round(participation * M))
    fed = fedavg(pb.B0, pb.w0, pb.tasks, alpha=float(alpha), tau=tau, rounds=rounds, clients_per_round=m,
                 seed=seed)
    gd = dgd(pb.B0, pb.w0, pb.tasks, alpha=float(alpha), rounds=rounds, clients_per_round=m, seed=seed)
    return {"round": np.arange(rounds + 1), "FedAvg": to_numpy(fed.dist(pb.Bstar)),
            "D-GD": to_numpy(gd.dist(pb.Bstar))}


def draw_fedavg_explorer(ax, curves: dict, title: str = "") -> None:
    """Plot the curves of :func:`fedavg_explorer_curves` on a log axis."""
    floor = 1e-12  # FedAvg can reach machine precision; keep the log axis finite
    shown = {name: np.maximum(curves[name], floor) for name in ("FedAvg", "D-GD")}
    plot_curves(ax, curves["round"], shown, logy=True, xlabel="round t", ylabel=r"dist$(B_t, B_*)$",
                title=title)
    ax.set_ylim(max(floor, 0.5 * float(shown["FedAvg"].min())), 1.5)


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


def arm_explorer(**defaults):
    """An ipywidgets panel: sliders for delta, beta, T and the head condition number, and a
    plot of :func:`arm_explorer_curves` (keyword ``defaults`` set the initial slider values)."""
    controls = {"delta": Slider(0.3, 0.05, 0.95, 0.05, "δ"), "beta": Slider(0.3, 0.05, 0.5, 0.05, "β"),
                "T": Slider(200, 10, 500, 10, "T", "int"), "cond": Slider(4.0, 0, 2, 0.1, "cond", "log")}
    return explorer(controls, lambda ax, v: draw_arm_explorer(ax, arm_explorer_curves(**v), v["delta"]),
                    defaults=defaults)


def fedavg_explorer(**defaults):
    """An ipywidgets panel: sliders for tau, alpha, the head condition number and the fraction
    of clients per round, and a plot of :func:`fedavg_explorer_curves` (keyword ``defaults``
    set the initial slider values)."""
    controls = {"tau": Slider(2, 1, 10, 1, "τ", "int"), "alpha": Slider(0.2, 0.05, 0.4, 0.05, "α"),
                "cond": Slider(1.0, 0, 1.5, 0.1, "cond", "log"), "participation": Slider(1.0, 0.1, 1.0, 0.05, "m / M")}

    def draw(ax, v):
        title = f"τ = {v['tau']}, α = {v['alpha']:.2f}, cond = {v['cond']:.1f}, m/M = {v['participation']:.2f}"
        draw_fedavg_explorer(ax, fedavg_explorer_curves(**v), title)

    return explorer(controls, draw, defaults=defaults, continuous_update=False)
