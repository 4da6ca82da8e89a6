"""The algorithm protocol: what a federated algorithm of :mod:`replearn.neural.algorithms` is.

An algorithm is an :class:`Algorithm`: a ``name`` (its name in Table 1 of Collins et al.,
2021), an ``Options`` dataclass of its hyper-parameters (documented defaults, validated at
construction, real ones stored as Python floats by :func:`set_real`; its class attribute
``step_scales`` names the fields that scale a training step besides the learning rate, e.g.
FedProx's ``mu``, which a divergence error lists with their values,
:func:`replearn.neural.check_divergence`), its Table 1 data and the hooks the engine's one
round loop (:func:`replearn.neural.run`) calls. A method that only chooses what is shared, kept
per client and trained in which phases (FedAvg, D-SGD, FedPer, LG-FedAvg, FedRep, Local only,
fine-tuning) declares that and inherits the default client update; the others (FedProx,
SCAFFOLD, Ditto, APFL, L2GD, Per-FedAvg, Fed-MTL) override the client update and what else
differs; wrappers such as :class:`replearn.neural.algorithms.fine_tuning.FineTuned` (+FT)
override ``run`` to chain runs.

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
from replearn.neural.engine.clients import check_client_data
from replearn.neural.engine.guards import check_params

Params = dict[str, torch.Tensor]

__all__ = ["TABLE1_COLUMNS", "Algorithm", "table1_accuracy", "Momentum", "NoOptions", "Summary",
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


def check_epochs(algorithm: str, epochs: int, option: str, clients: neural.ClientData, batch_size: int) -> None:
    """For a method that trains every client ``epochs`` epochs in one round, its ``option``
    (e.g. ``"LocalOnlyOptions.epochs"``): ``ValueError`` naming ``algorithm`` and ``option``, before
    any training, where that round exceeds :data:`~replearn.neural.MAX_PHASE_BATCHES` minibatches
    per client (the largest client in batches of ``batch_size``) or
    :data:`~replearn.neural.MAX_RUN_STEPS` for all clients, the limits the run would otherwise
    report against the ``TrainConfig`` fields the method derives from ``option``."""
    sizes = check_client_data(clients).train_sizes.tolist()
    per_epoch = -(-max(sizes) // batch_size)
    batches, total = epochs * per_epoch, epochs * per_epoch * len(sizes)
    work = f"{option} = {epochs} epochs x {per_epoch} minibatches (the largest client's {max(sizes)} images in " \
           f"batches of {batch_size})"
    if batches > neural.MAX_PHASE_BATCHES:
        raise ValueError(f"{algorithm}: {work} = {batches:.3g} minibatches per client, more than "
                         f"MAX_PHASE_BATCHES = {neural.MAX_PHASE_BATCHES:.0e}; lower {option}")
    if total > neural.MAX_RUN_STEPS:
        raise ValueError(f"{algorithm}: {work} x {len(sizes)} clients = {total:.3g} SGD steps, more than "
                         f"MAX_RUN_STEPS = {neural.MAX_RUN_STEPS:.0e} (days of work); lower {option}")


class Algorithm:
    """A federated algorithm, run by the engine's one round loop :func:`replearn.neural.run`.

    What it is: ``name`` (Table 1's), ``table1_row`` (its row in Table 1 of Collins et al.
    (2021), counted from 0, which orders the registry; None for a method outside Table 1),
    ``paper_accuracy`` (its Table 1 numbers, :func:`table1_accuracy`; empty outside Table 1),
    ``models`` (how many models a client trains in a round, for cost estimates: 2 for Ditto,
    APFL and Per-FedAvg), ``Options`` (its hyper-parameters), ``summary`` (a :class:`Summary`)
    and ``batched``: whether its ``client_update`` also runs for a group of clients at once
    under ``torch.func.vmap`` when ``cfg.vmap_clients > 1`` (else its clients train one after
    another whatever ``cfg.vmap_clients`` says).

    What it does, as hooks the loop calls (see :func:`replearn.neural.run` for when). The
    defaults make the methods that only choose what is shared, kept and trained a declaration:

    - ``personal_names(model, options)``: what each client keeps across rounds and is evaluated
      with (default: nothing); ``shared_names(model, options)``: what the server averages
      (default: every other parameter); ``phases(model, cfg, options)``: the local phases
      (default: one joint phase of ``local_steps`` or ``local_epochs``);
    - ``client_update(ctx)`` (default: the phases in order from ``start_params(ctx)``, by
      default the server's shared parameters and the client's personal ones, each phase with a
      fresh momentum buffer; uploads the shared names, keeps the personal ones as its state),
      ``server_update`` (default: the server's parameters become the weighted mean of the
      uploads named like parameters),
      ``eval_params(ctx)`` (default: the server's parameters with the client's personal ones);
    - for methods with more: ``check``, ``init_server``, ``init_client``, ``draw`` (extra random
      numbers drawn in the calling thread), ``broadcast`` (what every sampled client is sent
      besides the model).

    FedAvg, D-SGD, FedPer, LG-FedAvg, FedRep, Local only and fine-tuning only declare; FedProx,
    SCAFFOLD, Ditto, APFL, L2GD, Per-FedAvg and Fed-MTL override ``client_update`` and what else
    differs. A subclass that overrides ``client_update`` runs batched only if it says so
    (``batched = True``): its update must then use only ``ctx.worker``'s methods and
    out-of-place tensor arithmetic (the ``foreach_*`` helpers of :mod:`replearn.neural`, not
    ``torch._foreach_*`` or in-place updates of tensors it did not create), take no Python
    decision on a tensor's value (no ``float()``, ``.item()``, ``if tensor``), and not depend
    on ``ctx.client`` or ``ctx.n`` (there they are those of the group's first client).

    ``run(model, clients, cfg, options, *, runner=None)`` trains it with ``runner`` (default
    :func:`replearn.neural.run`, the in-process loop; :mod:`replearn.neural.flower` passes one
    that runs the same hooks on Flower); wrappers (Local only's one-off training, the +FT
    methods) override ``run`` to call ``runner`` for each of their stages.
    """

    name: str = ""
    table1_row: int | None = None
    paper_accuracy: dict = {}
    models: int = 1
    Options: type = NoOptions
    batched: bool = True
    summary: Summary | None = None  # what it shares, keeps personal, adds locally; its paper

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "client_update" in cls.__dict__ and "batched" not in cls.__dict__:
            cls.batched = False  # an own client update opts in to the batched path

    def check_options(self, options):
        """``options`` (default ``Options()``), which must be an instance of ``Options``."""
        if options is None:
            return self.Options()
        if not isinstance(options, self.Options):
            raise ValueError(f"{self.name}: options must be a {self.Options.__name__} (see "
                             f"replearn.neural.algorithms.get({self.name!r}).Options), got {type(options).__name__}")
        return options

    def run(self, model: nn.Module, clients: neural.ClientData, cfg: neural.TrainConfig, options=None, *,
            state: Params | None = None, callback: Callable | None = None, workers: int | None = None,
            runner: Callable | None = None) -> neural.FedResult:
        """Train from ``model``'s parameters (or ``state``) on ``clients`` with ``cfg`` and
        ``options``: ``runner(self, model, clients, cfg, options, state=, callback=, workers=)``,
        by default the engine's loop :func:`replearn.neural.run`."""
        return (runner or neural.run)(self, model, clients, cfg, self.check_options(options), state=state,
                                      callback=callback, workers=workers)

    def personal_names(self, model: nn.Module, options) -> tuple[str, ...]:
        return ()

    def shared_names(self, model: nn.Module, options) -> tuple[str, ...]:
        personal = set(self.personal_names(model, options))
        return tuple(n for n, _ in model.named_parameters() if n not in personal)

    def phases(self, model: nn.Module, cfg: neural.TrainConfig, options) -> tuple[neural.Phase, ...]:
        return (joint_phase(model, cfg),)

    def check(self, model: nn.Module, cfg: neural.TrainConfig, options) -> None:
        """Checks that need the model and configuration (raise ``ValueError``)."""

    def init_server(self, params: Params, options) -> dict:
        return {}

    def init_client(self, initial: Params, options) -> dict:
        return {}

    def draw(self, plan: neural.RoundPlan, cfg: neural.TrainConfig, options, generator: torch.Generator) -> dict:
        return {}

    def broadcast(self, params: Params, server: dict, states: dict, selected: Sequence[int], options) -> dict:
        return {}

    def start_params(self, ctx: neural.ClientRound) -> Params:
        """What the default client update trains from: the server's parameters with the client's
        personal ones (its state, or the starting parameters before its first round)."""
        return {**ctx.global_params, **{n: ctx.state[n] if n in ctx.state else ctx.initial[n] for n in ctx.personal}}

    def cost(self, cfg: neural.TrainConfig, options) -> tuple[neural.TrainConfig, float, bool]:
        """What a run with ``cfg`` and ``options`` trains, for launch estimates
        (:func:`replearn.book.scales.federated_steps`): the training settings whose rounds,
        participation and evaluations the run follows, the epochs a participating client trains
        in a round (all its ``models`` together) and whether its clients can run batched. The
        default: ``cfg`` itself, ``local_epochs`` per model, :attr:`batched`. A method that trains
        more per round or follows other rounds says so here (FedRep's head epochs, Local only's
        one-off training), so that no estimate needs to know methods by name. It counts epochs: a
        run whose phases ``local_steps`` cut short is estimated at its epochs."""
        return cfg, cfg.local_epochs * self.models, self.batched

    @property
    def client_state_is_personal(self) -> bool:
        """Whether a client's state is only its personal parameters (the default
        :meth:`client_update`), which a result's ``local`` already holds; otherwise the engine
        also returns every client's state (``FedResult.extras["clients"]``)."""
        return type(self).client_update is Algorithm.client_update

    def client_update(self, ctx: neural.ClientRound) -> neural.ClientUpdate:
        """The phases of ``ctx.phases`` in order, each on its ``ctx.batches[k]`` with a fresh
        momentum buffer, from :meth:`start_params` (which must return every parameter with its
        shape and dtype: ``ValueError`` naming the parameter otherwise); uploads ``ctx.shared``
        and keeps ``ctx.personal`` as its state."""
        params = self.start_params(ctx)
        check_params(self.name, "start_params", params, ctx.global_params)
        loss_sum, n_steps = None, 0
        for phase, batches in zip(ctx.phases, ctx.batches):
            new, loss = ctx.worker.train(params, phase.trainable, ctx.x, ctx.y, batches, ctx.cfg, ctx.generator)
            params = {**params, **new}
            loss_sum = loss if loss_sum is None else loss_sum + loss
            n_steps += len(batches)
        return neural.ClientUpdate({n: params[n] for n in ctx.shared}, {n: params[n] for n in ctx.personal},
                                   loss_sum, n_steps)

    def server_update(self, params: Params, server: dict, mean_upload: Params, selected: Sequence[int],
                      n_clients: int, options) -> tuple[Params, dict]:
        return {n: mean_upload.get(n, p) for n, p in params.items()}, server

    def eval_params(self, ctx: neural.ClientRound) -> Params:
        return {**ctx.global_params, **{n: ctx.state[n] if n in ctx.state else ctx.initial[n] for n in ctx.personal}}

    def __repr__(self) -> str:
        return f"<algorithm {self.name!r}>"


def options_doc(options_type: type) -> str:
    """``name = default`` for each field of an options dataclass (for messages)."""
    return ", ".join(f"{f.name} = {f.default!r}" for f in dataclasses.fields(options_type))
