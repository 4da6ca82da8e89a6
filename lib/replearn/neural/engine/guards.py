"""What a run checks so that nothing goes silently wrong: the starting parameters, and local
training that diverges (a non-finite or blown-up loss)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import nn

Params = dict[str, torch.Tensor]

MAX_PARAMETER = 1e6
"""Largest absolute entry of a starting state (or a model to evaluate) the engine accepts."""

DIVERGENCE_FACTOR = 1e3
"""Local training has diverged when a minibatch loss exceeds ``DIVERGENCE_FACTOR`` times
``max(L0, 1)``, where ``L0`` is the run's starting loss (the first minibatch loss of the first
client trained in round 0): cross-entropy starts near ``log C`` and a finite loss a thousand
times that is a blow-up, not noise. The engine then raises ``FloatingPointError`` naming the
learning rate (and the algorithm's options that scale its steps, :func:`divergence_advice`),
like it does for a non-finite loss or parameter."""



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

