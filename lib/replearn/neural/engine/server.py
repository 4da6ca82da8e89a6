"""The server's half of a round, written once for the engine's loop (:func:`replearn.neural.run`)
and Flower's strategy (:class:`replearn.neural.flower.ReplayStrategy`): :func:`start_round`
(the round's plan, the algorithm's draws and broadcast), :func:`finish_round` (the
n_i-weighted mean of the kept uploads in client order, ``server_update`` and the round's
training loss) and :func:`first_visit_params` (what a client not yet sampled starts from,
``TrainConfig.first_visit``). The two callers differ only in how the clients are reached: threads or
batched groups in process, messages to the nodes on Flower."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from replearn.neural.engine.config import TrainConfig
from replearn.neural.engine.guards import check_params
from replearn.neural.engine.planning import Phase, RoundPlan, plan_round

Params = dict[str, torch.Tensor]


class StateUnavailable(Exception):
    """Raised by the mapping of client states that :func:`start_round` hands to ``broadcast``
    when a client's state cannot be had (on Flower: its node failed to send it); ``available``:
    the clients whose states can. :func:`start_round` then leaves the client out of the round."""

    def __init__(self, client: int, available: Sequence[int]):
        super().__init__(client)
        self.client, self.available = client, list(available)


@dataclass(frozen=True)
class RoundStart:
    """A round as the server starts it: ``plan`` (the sampled clients and their batches),
    ``selected`` (the sampled clients that train: all of them, less those whose state a
    ``broadcast`` could not read), the algorithm's ``draws`` (client -> draw) and
    ``broadcast``."""

    plan: RoundPlan
    selected: list[int]
    draws: dict
    broadcast: object


@dataclass(frozen=True)
class Kept:
    """A client's update the server keeps: its ``upload`` (tensors on the server's device) and
    its summed minibatch loss over ``n_steps`` steps."""

    client: int
    upload: Params
    loss_sum: float
    n_steps: int


def start_round(algorithm, sizes: Sequence[int], phases: Sequence[Phase], cfg: TrainConfig, options,
                generator: torch.Generator, params: Params, server: dict,
                states: Callable[[list[int]], Mapping[int, dict]]) -> RoundStart:
    """Start a round: :func:`~replearn.neural.engine.planning.plan_round` draws the clients and
    their batches (``sizes``: every client's n_i) from ``generator``, then the algorithm's
    ``draw`` its extra random numbers from it and its ``broadcast`` (from the server's
    ``params`` and ``server`` state and ``states(selected)``, the selected clients' states)
    what every sampled client is sent. A state that raises :class:`StateUnavailable` leaves its
    client out of the round, and the broadcast is made again for the others."""
    plan = plan_round(sizes, phases, cfg, generator)
    draws = algorithm.draw(plan, cfg, options, generator) or {}
    selected = list(plan.clients)
    while True:
        try:
            broadcast = algorithm.broadcast(params, server, states(selected), selected, options)
            return RoundStart(plan, selected, draws, broadcast)
        except StateUnavailable as ex:
            selected = [i for i in selected if i in ex.available]


def mean_upload(kept: Sequence[Kept], sizes: Sequence[int]) -> Params:
    """``sum_i n_i u_i / sum_i n_i`` over the kept clients' uploads ``u_i``, summed in the order
    given (client order: the same sums bit for bit in process and on Flower)."""
    acc: Params = {}
    for k in kept:
        n_i = float(sizes[k.client])
        for name, v in k.upload.items():
            weighted = v * n_i
            if name not in acc:
                acc[name] = torch.zeros_like(weighted)
            acc[name] += weighted
    total = float(sum(sizes[k.client] for k in kept))
    return {name: v / total for name, v in acc.items()}


def finish_round(algorithm, params: Params, server: dict, kept: Sequence[Kept], sizes: Sequence[int], options, *,
                 mean: Params | None = None) -> tuple[Params, dict, float]:
    """End a round on the kept updates (in client order): the algorithm's ``server_update`` on
    their :func:`mean_upload` (or on ``mean``, a robust aggregate of Flower's) with the kept
    clients as the round's ``selected``; returns the new parameters (in ``params``' order,
    checked against them: :func:`~replearn.neural.engine.guards.check_params`), the new server
    state and the round's training loss, ``sum_i n_i L_i / sum_i n_i`` with ``L_i`` a client's
    mean minibatch loss (NaN for a client that took no step:
    :func:`~replearn.neural.engine.guards.mean_loss`)."""
    if not kept:
        raise ValueError(f"{algorithm.name}: a round must keep at least one update")
    mean = mean_upload(kept, sizes) if mean is None else mean
    result = algorithm.server_update(params, server, mean, [k.client for k in kept], len(sizes), options)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise ValueError(f"{algorithm.name}: server_update must return (parameters, server state), got "
                         f"{type(result).__name__}")
    new, server = result
    check_params(algorithm.name, "server_update", new, params)
    loss = 0.0
    for k in kept:  # n_i * loss_sum / steps, summed in client order; NaN for a client without steps
        loss += float(sizes[k.client]) * k.loss_sum / k.n_steps if k.n_steps else math.nan
    return {n: new[n] for n in params}, server, loss / float(sum(sizes[k.client] for k in kept))


def first_visit_params(rule: str, params: Params, personal: Sequence[str], kept: dict[int, dict],
                       sizes: Sequence[int]) -> Params:
    """What a client not yet sampled holds after a round (``TrainConfig.first_visit``): for
    ``"global"`` the server's new parameters ``params``; for ``"average"`` the same with each
    name of ``personal`` that every one of the round's clients keeps as a tensor of its state
    (``kept``: client -> its new state) replaced by their n_i-weighted mean (``sizes[i]``), summed
    in client order, as the FedRep authors' server averages every parameter, heads included."""
    out = dict(params)
    if rule == "average":
        total = float(sum(sizes[i] for i in kept))
        for n in personal:
            if all(isinstance(state.get(n), torch.Tensor) for state in kept.values()):
                acc = None
                for i, state in kept.items():
                    term = state[n] * float(sizes[i])
                    acc = term if acc is None else acc + term
                out[n] = acc / total
    return out
