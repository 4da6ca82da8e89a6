"""The algorithm protocol: what a federated algorithm of :mod:`replearn.neural.algorithms` is.

An algorithm is an :class:`Algorithm` with a ``name`` (its name in Table 1 of Collins et al.,
2021), an ``Options`` dataclass of its hyper-parameters (documented defaults, validated at
construction, real ones stored as Python floats by :func:`set_real`; its class attribute
``step_scales`` names the fields that scale a training step besides the learning rate, e.g.
FedProx's ``mu``, which a divergence error lists with their values,
:func:`replearn.neural.check_divergence`) and ``run(model, clients, cfg, options) ->
neural.FedResult``. Three kinds:

- :class:`SpecAlgorithm`: an algorithm that :func:`replearn.neural.algorithm_spec` describes
  (what is shared, kept local and trained in which phases: FedAvg, FedPer, LG-FedAvg, FedRep,
  local-only); it runs on :func:`replearn.neural.run_spec`, the engine's original code path;
- :class:`ProtocolAlgorithm`: an algorithm given by its steps, run by
  :func:`replearn.neural.run_protocol`: the local phases whose minibatches the engine plans,
  a client step (``client_update``: local objectives with extra gradient terms, custom local
  steps), per-client state kept across rounds (``init_client`` and the returned state), server
  state and a server step other than a weighted average (``init_server``, ``server_update``),
  extra random draws made in the calling thread (``draw``), what every sampled client is sent
  besides the model (``broadcast``) and what a client is evaluated with (``eval_params``);
- wrappers such as :class:`replearn.neural.algorithms.fine_tuning.FineTuned` (+FT).

Helpers for the client steps: :class:`Momentum` (``torch.optim.SGD``'s update on any list of
tensors; :class:`replearn.neural.Momentum`, re-exported here) and :func:`joint_phase`.

Every algorithm also carries a :class:`Summary` (``summary``): in a few words, what the server
shares, what each client keeps personal, what its local objective adds to the client's own loss,
and the bibliography key (``references.bib``) of the paper it comes from; a row of
:func:`replearn.neural.algorithms.methods_table`.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Callable, ClassVar, Sequence

import numpy as np
import torch
from torch import nn

from replearn import neural
from replearn.neural import Momentum

Params = dict[str, torch.Tensor]

__all__ = ["TABLE1_COLUMNS", "Algorithm", "table1_accuracy", "Momentum", "NoOptions", "ProtocolAlgorithm", "SpecAlgorithm", "Summary",
           "check_real", "joint_names", "joint_phase", "set_real"]


#: The CIFAR columns of Table 1 of Collins et al. (2021): (dataset, n clients, S classes per client).
TABLE1_COLUMNS = (("cifar10", 100, 2), ("cifar10", 100, 5), ("cifar10", 1000, 2), ("cifar100", 100, 5),
                  ("cifar100", 100, 20))


def table1_accuracy(*percent: float) -> dict[tuple[str, int, int], float]:
    """A method's row of Table 1 of Collins et al. (2021) (average test accuracy in %, r = 0.1),
    one number per column of :data:`TABLE1_COLUMNS` in order, as ``{column: accuracy}``."""
    if len(percent) != len(TABLE1_COLUMNS):
        raise ValueError(f"Table 1 has {len(TABLE1_COLUMNS)} CIFAR columns {TABLE1_COLUMNS}, got {len(percent)} numbers")
    return dict(zip(TABLE1_COLUMNS, percent))


@dataclass(frozen=True)
class Summary:
    """What an algorithm is, in one row of a table (plain text, no markup): ``shares``: what
    the server aggregates or sends; ``personal``: what each client keeps for itself across
    rounds (and is evaluated with); ``local_objective``: what a client's local training adds to
    plain SGD on its own loss; ``cite``: the key of its paper in the book's ``references.bib``."""

    shares: str
    personal: str
    local_objective: str
    cite: str

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"Summary.{f.name} must be a non-empty string, got {value!r}")


@dataclass(frozen=True)
class NoOptions:
    """An algorithm without hyper-parameters of its own (those of ``TrainConfig`` only)."""

    step_scales: ClassVar[tuple[str, ...]] = ()


def check_real(value, name: str, *, low: float | None = None, high: float | None = None,
               low_open: bool = False) -> float:
    """``value`` as a Python float: a finite real number (an int, a float or a NumPy real scalar
    such as ``np.float32(0.1)``; not a bool, a string, NaN or an infinity) in [low, high]
    (``(low, ...`` when ``low_open``); else ``ValueError`` naming the option."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a finite real number, got {value!r}")
    try:
        x = float(value)
    except OverflowError:  # an int beyond float's range
        x = math.inf
    if not math.isfinite(x):
        raise ValueError(f"{name} must be a finite real number, got {value!r}")
    if low is not None and (x <= low if low_open else x < low):
        raise ValueError(f"{name} must be {'>' if low_open else '>='} {low}, got {value!r}")
    if high is not None and x > high:
        raise ValueError(f"{name} must be <= {high}, got {value!r}")
    return x


def set_real(options, name: str, **bounds) -> None:
    """Check the field ``name`` of a frozen options dataclass with :func:`check_real` (``bounds``:
    its ``low``, ``high``, ``low_open``) and store it back as a Python float (so that a NumPy
    scalar option is kept, printed and hashed as the float it stands for)."""
    object.__setattr__(options, name, check_real(getattr(options, name), name, **bounds))


def joint_names(model: nn.Module) -> tuple[str, ...]:
    """Every parameter name of ``model``, body then head (:func:`replearn.neural.split_body_head`)."""
    body, head = neural.split_body_head(model)
    return body + head


def joint_phase(model: nn.Module, cfg: neural.TrainConfig, *, factor: int = 1) -> neural.Phase:
    """One phase training everything for ``local_steps`` (times ``factor``) or ``local_epochs``."""
    steps = None if cfg.local_steps is None else cfg.local_steps * factor
    return neural.Phase(joint_names(model), steps, cfg.local_epochs)


class Algorithm:
    """A federated algorithm: ``name`` (Table 1's), ``table1_row`` (its row in Table 1 of
    Collins et al. (2021), counted from 0, which orders the registry; None for a method outside
    Table 1), ``paper_accuracy`` (its Table 1 numbers, :func:`table1_accuracy`; empty outside
    Table 1), ``models`` (how many models a client trains in a round, for cost estimates:
    2 for Ditto, APFL and Per-FedAvg), ``Options`` (its hyper-parameters), :meth:`run`,
    ``batched``: whether a round's clients train as one batched computation when
    ``cfg.vmap_clients > 1`` (else one after another whatever ``cfg.vmap_clients`` says), and
    ``summary`` (a :class:`Summary`)."""

    name: str = ""
    table1_row: int | None = None
    paper_accuracy: dict = {}
    models: int = 1
    Options: type = NoOptions
    batched: bool = False
    summary: Summary | None = None  # what it shares, keeps personal, adds locally; its paper

    def check_options(self, options):
        """``options`` (default ``Options()``), which must be an instance of ``Options``."""
        if options is None:
            return self.Options()
        if not isinstance(options, self.Options):
            raise ValueError(f"{self.name}: options must be a {self.Options.__name__} (see "
                             f"replearn.neural.algorithms.get({self.name!r}).Options), got {type(options).__name__}")
        return options

    def run(self, model: nn.Module, clients: neural.ClientData, cfg: neural.TrainConfig, options=None, *,
            state: Params | None = None, callback: Callable | None = None,
            workers: int | None = None) -> neural.FedResult:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<algorithm {self.name!r}>"


class SpecAlgorithm(Algorithm):
    """An algorithm of :func:`replearn.neural.algorithm_spec` (``key``), run by
    :func:`replearn.neural.run_spec`: exactly the engine's code path and iterates."""

    key: str = ""
    batched = True  # run_spec's vmap path

    def spec(self, model: nn.Module, cfg: neural.TrainConfig, options) -> neural.AlgorithmSpec:
        """What the algorithm shares, keeps local and trains (default: ``algorithm_spec(key)``)."""
        return neural.algorithm_spec(self.key, model, cfg)

    def run(self, model, clients, cfg, options=None, *, state=None, callback=None, workers=None):
        options = self.check_options(options)
        result = neural.run_spec(self.spec(model, cfg, options), model, clients, state=state,
                                 callback=callback, workers=workers)
        return dataclasses.replace(result, algorithm=self.name)


class ProtocolAlgorithm(Algorithm):
    """An algorithm given by its steps, run by :func:`replearn.neural.run_protocol` (see there
    for when each hook runs). The defaults: one joint phase (``local_steps`` or
    ``local_epochs``), no server or client state, no extra draws or broadcast, the server's
    parameters become the weighted mean of the uploads named like parameters, nothing
    personal, clients evaluated with the server's parameters. Subclasses override
    ``client_update`` and what differs.

    ``batched = True`` declares that ``client_update`` also runs for a group of clients at once
    under ``torch.func.vmap`` (:func:`replearn.neural.run_protocol` with ``cfg.vmap_clients >
    1``): it uses only ``ctx.worker``'s methods and out-of-place tensor arithmetic (the
    ``foreach_*`` helpers of :mod:`replearn.neural`, not ``torch._foreach_*`` or in-place
    updates of tensors it did not create), takes no Python decision on a tensor's value
    (no ``float()``, ``.item()``, ``if tensor``), and does not depend on ``ctx.client`` or
    ``ctx.n`` (there they are those of the group's first client). Otherwise (the default) the
    algorithm's clients train one at a time whatever ``cfg.vmap_clients`` says."""

    def phases(self, model, cfg, options) -> tuple[neural.Phase, ...]:
        return (joint_phase(model, cfg),)

    def check(self, model, cfg, options) -> None:
        """Checks that need the model and configuration (raise ``ValueError``)."""

    def init_server(self, params: Params, options) -> dict:
        return {}

    def init_client(self, initial: Params, options) -> dict:
        return {}

    def draw(self, plan: neural.RoundPlan, cfg, options, generator: torch.Generator) -> dict:
        return {}

    def broadcast(self, params: Params, server: dict, states: dict, selected: Sequence[int], options) -> dict:
        return {}

    def client_update(self, ctx: neural.ClientRound) -> neural.ClientUpdate:
        raise NotImplementedError

    def server_update(self, params: Params, server: dict, mean_upload: Params, selected: Sequence[int],
                      n_clients: int, options) -> tuple[Params, dict]:
        return {n: mean_upload.get(n, p) for n, p in params.items()}, server

    def personal_names(self, model: nn.Module, options) -> tuple[str, ...]:
        return ()

    def eval_params(self, ctx: neural.ClientRound) -> Params:
        return ctx.global_params

    def run(self, model, clients, cfg, options=None, *, state=None, callback=None, workers=None):
        return neural.run_protocol(self, model, clients, cfg, options, state=state, callback=callback,
                                   workers=workers)


def options_doc(options_type: type) -> str:
    """``name = default`` for each field of an options dataclass (for messages)."""
    return ", ".join(f"{f.name} = {f.default!r}" for f in dataclasses.fields(options_type))
