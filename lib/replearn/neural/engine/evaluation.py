"""Testing every client: its test accuracy and loss with the parameters it would use."""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap

from replearn.checks import check_int
from replearn.neural.engine.clients import ClientData, check_inputs
from replearn.neural.engine.fed_result import Evaluation
from replearn.neural.engine.workers import fast_copy, forward_chunk, in_work_layout

Params = dict[str, torch.Tensor]


@torch.no_grad()
def evaluate(model: nn.Module, clients: ClientData, state: Params | None = None, local: Params | None = None,
             *, batch_size: int = 1000) -> Evaluation:
    """Per-client test accuracy and mean cross-entropy of ``model`` with parameters ``state``
    (default: the model's own), where client i uses ``local[name][i]`` for the names in
    ``local`` (personalised heads or bodies). The inputs are checked by :func:`check_inputs`;
    a client without test data gets NaN (left out of :attr:`Evaluation.average`). The
    forward passes run on a :func:`fast_copy` of the model, over at most ``batch_size`` images
    each (:func:`forward_chunk`)."""
    clients = check_inputs(model, clients)
    check_int(batch_size, "batch_size", 1)
    params = dict(state) if state is not None else {n: p.detach() for n, p in model.named_parameters()}
    for n, _ in model.named_parameters():  # a NaN model would report the accuracy of always guessing class 0
        own = local is not None and n in local
        if not own and n not in params:
            raise ValueError(f"state lacks the model's parameter {n!r}")
        for t, what in (((local[n], "local parameter"),) if own else ((params[n], "parameter"),)):
            if not bool(torch.isfinite(t).all()):
                raise ValueError(f"the model's {what} {n!r} contains NaN or infinite values; its predictions are "
                                 f"meaningless (a diverged run?), so it is not evaluated")
    work = fast_copy(model).requires_grad_(False)
    return evaluation_of(clients, [test_client(work, clients, params, local or {}, i, batch_size)
                                 for i in range(clients.n_clients)])


def test_client(work: nn.Module, clients: ClientData, params: Params, local: Params, i: int,
                 batch_size: int) -> tuple[float, float]:
    """Client ``i``'s test accuracy and mean loss with ``work`` (a :func:`fast_copy`) holding
    ``params``, and ``local[name][i]`` for the names in ``local``; NaN without test data."""
    x, y = clients.x_test[i], clients.y_test[i]
    if not x.shape[0]:
        return float("nan"), float("nan")
    with torch.no_grad():  # grad mode is per thread: set it here for the client threads
        for n, slot in work.named_parameters():
            slot.copy_(local[n][i] if n in local else params[n])
        correct, total = 0.0, 0.0
        chunk = forward_chunk(x, batch_size)
        for xb, yb in zip(x.split(chunk), y.split(chunk)):
            out = work(in_work_layout(xb))
            correct += float((out.argmax(1) == yb).sum())
            total += float(F.cross_entropy(out, yb, reduction="sum"))
    return correct / x.shape[0], total / x.shape[0]


def test_groups(clients: ClientData, size: int) -> list[list[int]]:
    """The clients with test data in groups of at most ``size`` with equal test-set sizes (for
    :func:`test_group`), in client order within each group."""
    by_size: dict[int, list[int]] = {}
    for i in range(clients.n_clients):
        if n := int(clients.x_test[i].shape[0]):
            by_size.setdefault(n, []).append(i)
    return [g[k:k + size] for g in by_size.values() for k in range(0, len(g), size)]


@torch.no_grad()
def test_group(model: nn.Module, clients: ClientData, shared: Params, own: Params,
                group: Sequence[int]) -> dict[int, tuple[float, float]]:
    """:func:`test_client` for a group of clients with equal test-set sizes as one batched
    computation (the batched path's evaluation): ``own[name]`` stacks the group's own values of
    the names it holds (first axis in ``group``'s order), ``shared`` gives the others; one
    ``torch.func.vmap`` forward pass over the stacked test images and one host sync for the
    group. The same numbers as :func:`test_client` to float rounding."""
    x = torch.stack([clients.x_test[i] for i in group])
    y = torch.stack([clients.y_test[i] for i in group])
    rest = {n: p for n, p in shared.items() if n not in own}

    def one(mine: Params, xb: torch.Tensor, yb: torch.Tensor):
        out = functional_call(model, {**rest, **mine}, (xb,))
        return (out.argmax(-1) == yb).sum().to(out.dtype), F.cross_entropy(out, yb, reduction="sum")

    correct, total = vmap(one)(own, x, y)
    n = x.shape[1]
    return {i: (c / n, t / n) for i, c, t in zip(group, correct.tolist(), total.tolist())}


def test_all(model: nn.Module, clients: ClientData, shared: Params, own: Params, size: int) -> list[tuple[float, float]]:
    """Every client tested on the batched path, ``size`` clients at a time (``own[name][i]``:
    client i's value of a name it holds); NaN for a client without test data."""
    out = {i: (float("nan"), float("nan")) for i in range(clients.n_clients)}
    for group in test_groups(clients, size):
        out.update(test_group(model, clients, shared, {n: v[group] for n, v in own.items()}, group))
    return [out[i] for i in range(clients.n_clients)]


def evaluation_of(clients: ClientData, results: Sequence[tuple[float, float]]) -> Evaluation:
    acc, loss = zip(*results)
    return Evaluation(torch.tensor(acc), torch.tensor(loss), clients.test_sizes)

