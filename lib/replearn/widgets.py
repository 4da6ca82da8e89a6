"""Interactive explorers for the book's notebooks.

Each explorer is split into a pure function that computes the curves (unit-tested, and used
for the static figures of the book) and a thin ipywidgets front end that redraws them:

- :func:`arm_explorer` (book 1.3): ARM vs FedAvg on the adversarial instance of the lower bound;
- :func:`fedavg_explorer` (book 4.4): FedAvg vs D-GD as tau, alpha, diversity and participation vary.
"""

from __future__ import annotations

import io
import math

import numpy as np

from .experiments.fedavg_convergence import FedAvgConvergenceSettings, make_problem
from .experiments.lower_bound import make_instance
from .federated import dgd, fedavg
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


_FEDAVG_EXPLORER_DEFAULTS = {"tau": 2, "alpha": 0.2, "cond": 1.0, "participation": 1.0}


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


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
    if not (_is_int(tau) and tau >= 1):
        raise ValueError(f"tau (local steps) must be an integer >= 1, got {tau!r}")
    if not (isinstance(alpha, (int, float)) and 0 < alpha < math.inf):
        raise ValueError(f"alpha must be a positive finite step size, got {alpha!r}")
    if not (isinstance(cond, (int, float)) and 1 <= cond < math.inf):
        raise ValueError(f"cond is a condition number and must be a finite value >= 1, got {cond!r}")
    if not (isinstance(participation, (int, float)) and 0 < participation <= 1):
        raise ValueError(f"participation is a fraction of clients and must lie in (0, 1], got {participation!r}")
    if not (_is_int(rounds) and rounds >= 1):
        raise ValueError(f"rounds must be an integer >= 1, got {rounds!r}")
    if not (_is_int(d) and _is_int(k) and _is_int(M) and 1 <= k < d and M >= k + 1):
        raise ValueError(f"need integers 1 <= k < d and M >= k + 1, got d={d!r}, k={k!r}, M={M!r}")
    if not (_is_int(seed) and seed >= 0):
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
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


def _start_values(defaults: dict, known: dict) -> dict:
    unknown = set(defaults) - set(known)
    if unknown:
        raise ValueError(f"unknown explorer settings {sorted(unknown)}; use {sorted(known)}")
    return {**known, **defaults}


def _panel(controls: dict, figure):
    """Sliders ``controls`` above an ``Output`` that shows ``figure(values)`` (a matplotlib
    Figure) as PNG, redrawn whenever a slider moves.

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
    sliders = list(controls.values())
    return widgets.VBox([widgets.HBox(sliders[:2]), widgets.HBox(sliders[2:]), out])


def arm_explorer(**defaults):
    """An ipywidgets panel: sliders for delta, beta, T and the head condition number, and a
    plot of :func:`arm_explorer_curves` (keyword ``defaults`` set the initial slider values)."""
    import ipywidgets as widgets
    from matplotlib.figure import Figure

    start = _start_values(defaults, _ARM_EXPLORER_DEFAULTS)
    controls = {
        "delta": widgets.FloatSlider(value=start["delta"], min=0.05, max=0.95, step=0.05, description="δ"),
        "beta": widgets.FloatSlider(value=start["beta"], min=0.05, max=0.5, step=0.05, description="β"),
        "T": widgets.IntSlider(value=start["T"], min=10, max=500, step=10, description="T"),
        "cond": widgets.FloatLogSlider(value=start["cond"], base=10, min=0, max=2, step=0.1,
                                       description="cond"),
    }

    def figure(values):
        curves = arm_explorer_curves(**values)
        fig = Figure(figsize=(6.0, 3.4))
        draw_arm_explorer(fig.add_subplot(), curves, values["delta"])
        fig.tight_layout()
        return fig

    return _panel(controls, figure)


def fedavg_explorer(**defaults):
    """An ipywidgets panel: sliders for tau, alpha, the head condition number and the fraction
    of clients per round, and a plot of :func:`fedavg_explorer_curves` (keyword ``defaults``
    set the initial slider values)."""
    import ipywidgets as widgets
    from matplotlib.figure import Figure

    start = _start_values(defaults, _FEDAVG_EXPLORER_DEFAULTS)
    common = {"continuous_update": False}
    controls = {
        "tau": widgets.IntSlider(value=start["tau"], min=1, max=10, step=1, description="τ", **common),
        "alpha": widgets.FloatSlider(value=start["alpha"], min=0.05, max=0.4, step=0.05, description="α", **common),
        "cond": widgets.FloatLogSlider(value=start["cond"], base=10, min=0, max=1.5, step=0.1,
                                       description="cond", **common),
        "participation": widgets.FloatSlider(value=start["participation"], min=0.1, max=1.0, step=0.05,
                                             description="m / M", **common),
    }

    def figure(values):
        curves = fedavg_explorer_curves(**values)
        fig = Figure(figsize=(6.0, 3.4))
        title = (f"τ = {values['tau']}, α = {values['alpha']:.2f}, cond = {values['cond']:.1f}, "
                 f"m/M = {values['participation']:.2f}")
        draw_fedavg_explorer(fig.add_subplot(), curves, title)
        fig.tight_layout()
        return fig

    return _panel(controls, figure)
