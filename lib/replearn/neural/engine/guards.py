"""What a run checks so that nothing goes silently wrong: the starting parameters, the
algorithm's hooks and what they return (the screening shared by the in-process loop and
Flower's server), and local training that diverges (a non-finite or blown-up loss)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import torch
from torch import nn

Params = dict[str, torch.Tensor]

HOOKS = ("check_options", "phases", "check", "init_server", "init_client", "draw", "broadcast", "client_update",
         "server_update", "personal_names", "shared_names", "eval_params")
"""The hooks of an algorithm the round loop calls, in process and on Flower."""

MAX_PARAMETER = 1e6
"""Largest absolute entry of a starting state (or a model to evaluate) the engine accepts."""

DIVERGENCE_FACTOR = 1e3
"""Local training has diverged when a minibatch loss exceeds ``DIVERGENCE_FACTOR`` times
``max(L0, 1)``, where ``L0`` is the run's starting loss (the first minibatch loss of the first
client trained in round 0): cross-entropy starts near ``log C`` and a finite loss a thousand
times that is a blow-up, not noise. The engine then raises ``FloatingPointError`` naming the
learning rate (and the algorithm's options that scale its steps, :func:`divergence_advice`),
like it does for a non-finite loss or parameter."""


def check_hooks(algorithm) -> None:
    """``ValueError`` naming the algorithm and those of its :data:`HOOKS` that are not callable
    (set to None or missing), before any round runs."""
    missing = [h for h in HOOKS if not callable(getattr(algorithm, h, None))]
    if missing:
        name = getattr(algorithm, "name", type(algorithm).__name__)
        raise ValueError(f"{name}: the round loop calls the algorithm's hooks {list(HOOKS)}, and {missing} "
                         f"{'is' if len(missing) == 1 else 'are'} not callable (None or missing): subclass "
                         f"replearn.neural.algorithms.base.Algorithm and keep its default or define a method")


def check_params(method: str, hook: str, got, params: Params) -> None:
    """``got``, the parameters a hook returned (``start_params``, ``eval_params``,
    ``server_update``), must be a dict naming every parameter of ``params`` (the model's) with
    its shape and dtype; else ``ValueError`` naming the method, the hook and the parameter.
    Metadata only: no host sync."""
    if not isinstance(got, Mapping):
        raise ValueError(f"{method}: {hook} must return a dict of parameter name -> tensor, got "
                         f"{type(got).__name__}")
    for n, ref in params.items():
        if n not in got:
            raise ValueError(f"{method}: {hook} dropped the parameter {n!r} (it returned {list(got)}); it must "
                             f"return every parameter of the model")
        _check_like(method, hook, n, got[n], ref, "parameter")


def check_upload(method: str, upload, params: Params, hook: str = "client_update") -> None:
    """The screening of an upload (a client update's tensors for the server's mean), shared by
    the in-process loop and Flower's server: a dict of string names to tensors; a name of a
    parameter of ``params`` (the server's) has that parameter's shape and dtype; every other
    floating tensor has the model's dtype (a float64 upload would turn a float32 server
    float64); no complex tensors. ``ValueError`` naming the method, the hook and the tensor.
    Metadata only: no host sync (finiteness is read with the client's statistics)."""
    if not isinstance(upload, Mapping):
        raise ValueError(f"{method}: {hook}'s upload must be a dict of name -> tensor, got {type(upload).__name__}")
    dtype = next(iter(params.values())).dtype
    for n, t in upload.items():
        if not isinstance(n, str):
            raise ValueError(f"{method}: {hook}'s upload names must be strings, got {n!r}")
        if n in params:
            _check_like(method, hook, n, t, params[n], "upload")
        elif not isinstance(t, torch.Tensor):
            raise ValueError(f"{method}: {hook}'s upload {n!r} must be a torch.Tensor, got {type(t).__name__}")
        elif t.is_complex() or (t.is_floating_point() and t.dtype != dtype):
            raise ValueError(f"{method}: {hook}'s upload {n!r} is {t.dtype}, but the model is {dtype}: the "
                             f"server's mean and state would change dtype; return it in the model's dtype")


def _check_like(method: str, hook: str, name: str, t, ref: torch.Tensor, what: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{method}: {hook}'s {what} {name!r} must be a torch.Tensor, got {type(t).__name__}")
    if tuple(t.shape) != tuple(ref.shape) or t.dtype != ref.dtype:
        raise ValueError(f"{method}: {hook}'s {what} {name!r} is {t.dtype} of shape {tuple(t.shape)}, but the "
                         f"model's parameter is {ref.dtype} of shape {tuple(ref.shape)}")


def check_steps(method: str, n_steps, hook: str = "client_update") -> int:
    """A client update's step count: an int >= 0 (else ``ValueError`` naming the method)."""
    if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps < 0:
        raise ValueError(f"{method}: {hook} must report n_steps as an int >= 0, got {n_steps!r}")
    return n_steps


def mean_loss(loss_sum: float, n_steps: int) -> float:
    """A client's mean minibatch loss over its ``n_steps`` steps; NaN when it took none (a loss
    that was not measured, never a 0 standing for it)."""
    return loss_sum / n_steps if n_steps else math.nan


class ClientStats(NamedTuple):
    """What the loop reads of a trained client with one host sync (:func:`client_stats`): its
    summed loss, first and peak minibatch loss (0 when it took no step), whether the loss is
    finite and, per tensor checked, whether it is."""

    loss_sum: float
    first: float
    peak: float
    loss_finite: bool
    finite: list[bool]


def client_stats(loss_sum: torch.Tensor, first: torch.Tensor | None, peak: torch.Tensor | None,
                 tensors: Sequence[torch.Tensor]) -> ClientStats:
    """A trained client's :class:`ClientStats`, read with one host sync: the norms of the
    floating tensors of ``tensors`` by one foreach kernel per dtype, their finiteness in one
    vector with the losses."""
    loss_sum = torch.as_tensor(loss_sum).reshape(()).detach()
    zero = torch.zeros((), dtype=torch.float64, device=loss_sum.device)
    head = [loss_sum, zero if first is None else first, zero if peak is None else peak, torch.isfinite(loss_sum)]
    pieces = [torch.stack([x.reshape(()).to(torch.float64) for x in head])]
    by_dtype: dict[torch.dtype, list[int]] = {}
    for k, t in enumerate(tensors):
        if t.is_floating_point() and t.numel():
            by_dtype.setdefault(t.dtype, []).append(k)
    order = []
    for ks in by_dtype.values():
        norms = torch.stack(torch._foreach_norm([tensors[k].detach() for k in ks]))
        pieces.append(torch.isfinite(norms).to(torch.float64))
        order.extend(ks)
    values = torch.cat(pieces).tolist()  # the one sync
    finite = [True] * len(tensors)
    for k, v in zip(order, values[4:]):
        finite[k] = bool(v)
    return ClientStats(values[0], values[1], values[2], bool(values[3]), finite)


def named_tensors(obj, prefix: str) -> list[tuple[str, torch.Tensor]]:
    """Every tensor of ``obj`` (a tensor, or nested dicts, lists and tuples of them: an upload
    or a client state) with its path, e.g. ``("state['head']['w']", t)``."""
    if isinstance(obj, torch.Tensor):
        return [(prefix, obj)]
    if isinstance(obj, Mapping):
        return [x for k, v in obj.items() for x in named_tensors(v, f"{prefix}[{k!r}]")]
    if isinstance(obj, (list, tuple)):
        return [x for k, v in enumerate(obj) for x in named_tensors(v, f"{prefix}[{k}]")]
    return []


def update_tensors(upload, state) -> list[tuple[str, torch.Tensor]]:
    """The named tensors of a client update whose finiteness the loop checks: its upload's,
    then its state's."""
    return named_tensors(upload, "upload") + named_tensors(state, "state")


def check_finite(t: int, client: int, stats: ClientStats, names: Sequence[str], lr: float, algorithm: str,
                 options=None) -> None:
    """Raise :func:`nonfinite_error` unless the loss and every tensor of ``stats`` (named by
    ``names``, :func:`update_tensors`) are finite."""
    if stats.loss_finite and all(stats.finite):
        return
    bad = next((n for n, ok in zip(names, stats.finite) if not ok), None)
    raise nonfinite_error(t, client, stats.loss_finite, bad, lr, algorithm, options)


def nonfinite_error(t: int, client: int, loss_finite: bool, bad: str | None, lr: float, algorithm: str,
                    options=None) -> FloatingPointError:
    """The error for client ``client``'s non-finite round ``t``: when its loss stayed finite but
    the tensor ``bad`` (an upload or state entry) is not, the method's code is blamed (naming
    the hook and the tensor; the step size only as the other possibility); otherwise local
    training diverged (:func:`divergence_advice`)."""
    if loss_finite and bad is not None:
        return FloatingPointError(
            f"round {t}: client {client}: {algorithm}'s client_update returned {bad} with NaN or infinite values "
            f"although its training loss stayed finite: a fault of the method's code (client_update, "
            f"start_params), not of its losses; only if its last local step diverged, "
            f"{divergence_advice(lr, algorithm, options)}")
    return FloatingPointError(f"round {t}: client {client}'s local training diverged (non-finite loss, parameters "
                              f"or state) {divergence_advice(lr, algorithm, options)}")



def starting_state(model: nn.Module, state: Params | None, device: torch.device, dtype: torch.dtype) -> Params:
    """The parameters a run starts from (``state``, default the model's), as copies on
    ``device`` in ``dtype``; ``ValueError`` naming the parameter if one is missing, not finite
    or larger than :data:`MAX_PARAMETER` in absolute value (checked before any training, so a
    bad start is never blamed on the learning rate). A given ``state`` must be a dict naming
    exactly the model's parameters, each a tensor of the model's shape: else ``ValueError``
    naming the parameter with the expected and the given shape (a state made for another
    architecture), not a torch shape error from inside training."""
    names = [n for n, _ in model.named_parameters()]
    origin = "starting state" if state is not None else "model"
    if state is None:
        state = {n: p.detach() for n, p in model.named_parameters()}
    else:
        if not isinstance(state, Mapping):
            raise ValueError(f"state must be a dict of parameter name -> tensor (e.g. a FedResult's state), "
                             f"got {type(state).__name__}")
        missing = [n for n in names if n not in state]
        if missing:
            raise ValueError(f"state lacks the model's parameters {missing}")
        extra = [n for n in state if n not in names]
        if extra:
            raise ValueError(f"state has entries {extra} that are not parameters of the model (whose "
                             f"parameters are {names}); it was made for another model: pass the state of "
                             f"this architecture")
        for n, p in model.named_parameters():
            t = state[n]
            if not isinstance(t, torch.Tensor):
                raise ValueError(f"the starting state's parameter {n!r} must be a torch.Tensor, got "
                                 f"{type(t).__name__}")
            if tuple(t.shape) != tuple(p.shape):
                raise ValueError(f"the starting state's parameter {n!r} has shape {tuple(t.shape)}, but the "
                                 f"model's has shape {tuple(p.shape)}; the state was made for another "
                                 f"architecture (other widths or number of classes): pass a state of this "
                                 f"model")
    out = {}
    for n in names:
        t = state[n].detach()
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"the {origin}'s parameter {n!r} contains NaN or infinite values; start from finite "
                             f"parameters (e.g. a freshly built model)")
        big = float(t.abs().max()) if t.numel() else 0.0
        if big > MAX_PARAMETER:
            raise ValueError(f"the {origin}'s parameter {n!r} has an entry of magnitude {big:.3g}, more than "
                             f"MAX_PARAMETER = {MAX_PARAMETER:.0e}; start from a sensible model")
        out[n] = t.to(device=device, dtype=dtype).clone()
    return out


def divergence_advice(lr: float, algorithm: str | None = None, options=None) -> str:
    """The end of a divergence message: ``"with lr = 0.1; lower the learning rate"``, or, when
    ``options`` (an algorithm's options dataclass) declares ``step_scales`` (the names of its
    fields that scale a step besides the learning rate: FedProx's ``mu``, Ditto's ``lam``,
    SCAFFOLD's ``global_lr``, ...), these with their values too, e.g. ``"with lr = 0.01 and
    FedProx's mu = 1e+06; lower mu or the learning rate"`` (fields set to None are left out)."""
    scales = [(n, getattr(options, n)) for n in getattr(options, "step_scales", ())]
    scales = [(n, v) for n, v in scales if v is not None]
    if not scales:
        return f"with lr = {lr:g}; lower the learning rate"
    values = ", ".join(f"{n} = {v:g}" if isinstance(v, (int, float)) else f"{n} = {v!r}" for n, v in scales)
    who = f"{algorithm}'s " if algorithm else ""
    names = ", ".join(n for n, _ in scales)
    return f"with lr = {lr:g} and {who}{values}; lower {names} or the learning rate (each scales the steps)"


def check_divergence(t: int, client: int, first: float, peak: float, reference: float | None, lr: float, *,
                     algorithm: str | None = None, options=None) -> float:
    """Raise ``FloatingPointError`` naming ``lr`` (and the step-scaling ``options`` of
    ``algorithm``, :func:`divergence_advice`) if client ``client``'s largest minibatch loss
    ``peak`` in round ``t`` exceeds :data:`DIVERGENCE_FACTOR` times ``max(reference, 1)``;
    ``reference`` is the run's starting loss (None in the first check: ``first`` becomes it).
    Returns the reference."""
    ref = first if reference is None else reference
    if not math.isfinite(peak) or peak > DIVERGENCE_FACTOR * max(ref, 1.0):
        raise FloatingPointError(
            f"round {t}: client {client}'s local training diverged: its minibatch loss reached {peak:.3g}, more "
            f"than DIVERGENCE_FACTOR = {DIVERGENCE_FACTOR:g} times the starting loss {ref:.3g} (or 1), "
            f"{divergence_advice(lr, algorithm, options)}")
    return ref

