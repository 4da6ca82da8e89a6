"""The round loop: :func:`run` trains any algorithm of :mod:`replearn.neural.algorithms` (an
object with the hooks of :class:`replearn.neural.algorithms.base.Algorithm`) for
``cfg.rounds`` rounds. It is the engine's only loop: FedAvg, D-SGD, FedRep, FedPer, LG-FedAvg,
Local only, fine-tuning, FedProx, SCAFFOLD, Ditto, APFL, L2GD, Per-FedAvg, Fed-MTL and a
reader's own method all run through it.

Each round, in the calling thread, the server's half of the round that Flower's strategy runs
too (:mod:`~replearn.neural.engine.server`): :func:`~replearn.neural.engine.server.start_round`
(clients and batches, the algorithm's extra draws and broadcast); every sampled client runs
``client_update`` (:class:`ClientRound` in, :class:`ClientUpdate` out), on the client threads
of :mod:`~replearn.neural.engine.threads` or, with ``cfg.vmap_clients > 1``, in groups under
``torch.func.vmap``, and its update is screened (:func:`screened`, finiteness read with its
loss); :func:`~replearn.neural.engine.server.finish_round` sums the uploads with weights n_i in
client order, divides by the round's total, and ``server_update`` makes the new server
parameters and state. On evaluated rounds every client is tested with ``eval_params``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import nn
from torch.func import vmap

from replearn.backend import make_generator
from replearn.neural import checkpoints
from replearn.neural.engine.clients import ClientData, check_inputs
from replearn.neural.engine.config import TrainConfig
from replearn.neural.engine.evaluation import evaluation_of, test_all, test_client
from replearn.neural.engine.fed_result import FedResult
from replearn.neural.engine.guards import (ClientStats, check_divergence, check_finite, check_hooks, check_params,
                                           check_steps, check_upload, client_stats, divergence_advice, starting_state,
                                           update_tensors)
from replearn.neural.engine.planning import Phase, RoundPlan, check_phases, check_work
from replearn.neural.engine.server import Kept, finish_round, first_visit_params, start_round
from replearn.neural.engine.threads import ClientThreads, OneIntraOpThread, client_workers
from replearn.neural.engine.workers import FunctionalSGD, LocalSGD, in_work_layout
from replearn.neural.models import dropout_layers

Params = dict[str, torch.Tensor]


@dataclass
class ClientRound:
    """What one sampled client sees in one round of :func:`run` (built on the client's thread):
    its index ``client``, a :class:`~replearn.neural.engine.workers.LocalSGD` ``worker`` to
    train or take gradients with, its training images ``x`` (in the working layout) and labels
    ``y``, its size ``n``, ``batches[k]``: the index batches planned for phase k, the run's
    ``cfg`` and the algorithm's ``options``, ``generator`` (for augmentation only; None when
    clients train on threads, which needs ``cfg.augment = False``), the server's parameters
    ``global_params`` and ``server`` state at the start of the round, the round's ``broadcast``
    (the same for every client), the client's own ``state`` (its dict from the last round it
    took part in, or the algorithm's initial client state) and ``draw``: the algorithm's extra
    random draws for this client, made in the calling thread before training. ``initial``: what a
    client not yet sampled starts from (``cfg.first_visit``: by default the run's starting
    parameters; see :func:`first_visit_params`); ``shared`` and ``personal``: the names the algorithm shares and
    keeps per client (its ``shared_names`` and ``personal_names``); ``phases``: its local phases
    (``batches[k]`` is phase k's). Nothing here may be modified
    in place: a client's new state is returned in its :class:`ClientUpdate`. At evaluation,
    ``batches`` and ``broadcast`` are empty and ``draw`` is None. On the batched path
    (``cfg.vmap_clients > 1``) ``worker`` is a
    :class:`~replearn.neural.engine.workers.FunctionalSGD`, ``x``, ``y``, ``batches`` and
    ``state`` are one client's slices of the group's stacked tensors under ``torch.func.vmap``,
    and ``client`` and ``n`` are those of the group's first client."""

    client: int
    worker: LocalSGD
    x: torch.Tensor
    y: torch.Tensor
    n: int
    batches: tuple
    cfg: TrainConfig
    options: object
    generator: torch.Generator | None
    global_params: Params
    server: dict
    broadcast: dict
    state: dict
    draw: object
    initial: Params
    shared: tuple[str, ...]
    personal: tuple[str, ...]
    phases: tuple[Phase, ...]


@dataclass
class ClientUpdate:
    """A client's answer in :func:`run`: ``upload``: tensors the server averages with weights n_i
    over the round's clients (any names); ``state``: the client's state kept for its next round
    (and for its evaluation); ``loss_sum`` (a 0-d tensor) and ``n_steps``: the summed minibatch
    loss of its steps and how many (for ``train_loss``)."""

    upload: Params
    state: dict
    loss_sum: torch.Tensor
    n_steps: int


def run(algorithm, model: nn.Module, clients: ClientData, cfg: TrainConfig, options=None, *,
        state: Params | None = None, callback: Callable[[int, dict], None] | None = None,
        workers: int | None = None) -> FedResult:
    """Run ``cfg.rounds`` rounds of ``algorithm`` (an :class:`~replearn.neural.algorithms.base.
    Algorithm`, or its name in the registry :mod:`replearn.neural.algorithms`) with ``options``
    (default: its ``Options()``) from ``model``'s parameters (or ``state``) on ``clients``.

    Each round, in the calling thread: :func:`plan_round` draws the clients and their batches
    for the algorithm's ``phases``, then ``draw`` its extra random numbers and ``broadcast``
    what every sampled client is sent. A client's state is made by ``init_client`` from the
    starting parameters when it is first sampled (or evaluated). Every sampled client runs
    ``client_update``; the uploads are summed with weights n_i in client order and divided by
    the round's total, and ``server_update`` makes the new server parameters and state. So the
    iterates are the same bit for bit for every number of ``workers`` (on a CPU, how many
    clients train at the same time, each on its own thread running one intra-op thread;
    default ``torch.get_num_threads()``; used only without augmentation, which draws from the
    shared generator during training, and with ``vmap_clients = 1``). On evaluated rounds
    (every ``cfg.eval_every``, and the last) every client is tested with ``eval_params`` (what
    it would use: the server's model with its personal parameters, a personal, mixed or
    adapted model); the result's ``local`` holds these parameters for the names of
    ``personal_names``, ``extras["server"]`` the server state and, for an algorithm with its own
    ``client_update``, ``extras["clients"]`` the clients' states. ``callback(t, metrics)`` is
    called after every round with ``train_loss`` and, on evaluated rounds, ``test_accuracy``.

    A non-finite loss, or a loss above
    :data:`~replearn.neural.engine.guards.DIVERGENCE_FACTOR` times the starting loss, raises
    ``FloatingPointError`` naming ``lr`` and the options that scale the algorithm's steps; a
    non-finite upload or client state beside a finite loss raises it naming the method's
    ``client_update`` and the tensor. The hooks and what they return are screened as on Flower
    (:mod:`~replearn.neural.engine.guards`: every hook callable; uploads named and shaped like
    the model's parameters, other floating uploads in the model's dtype; ``start_params``,
    ``eval_params`` and ``server_update`` returning every parameter with its shape and dtype;
    a step count): a ``ValueError`` names the method, the hook and the tensor. A client that
    takes no step has a NaN loss, and so has its round.

    With ``cfg.vmap_clients > 1`` and an algorithm whose ``batched`` is true (the batched path,
    for GPUs), the sampled clients with the same batch sizes, data size, draw and state layout
    train in groups of up to ``vmap_clients`` as one computation: ``client_update`` runs once
    per group under ``torch.func.vmap`` with a :class:`FunctionalSGD` worker, on the group's
    stacked images, index batches and client states (the server's parameters, state and
    broadcast shared); a client without a partner trains alone. The uploads are still summed
    per client in client order, so the iterates are the per-client ones to float rounding. The
    evaluation then tests the clients in groups with test sets of equal size. Needs
    ``cfg.augment = False``.

    Inside :func:`replearn.neural.checkpoints.resumable`, a finished run is stored and an
    identical call (same algorithm and its code, options, settings, network, starting
    parameters and data; no ``callback``) loads it instead.
    """
    if isinstance(algorithm, str):
        raise ValueError(f"neural.run takes an algorithm, not its name {algorithm!r}: the registry sits above the "
                         f"engine; use replearn.neural.algorithms.run({algorithm!r}, ...) or pass "
                         f"replearn.neural.algorithms.get({algorithm!r})")
    options = algorithm.check_options(options)
    if not isinstance(cfg, TrainConfig):
        raise ValueError(f"cfg must be a neural.TrainConfig, got {type(cfg).__name__}")
    if checkpoints.active() is None or callback is not None:
        return _run(algorithm, model, clients, cfg, options, state, callback, workers)
    run_info = {"kind": "run", "algorithm": algorithm.name,
                "algorithm_code": checkpoints.algorithm_code(algorithm),
                "config": repr(cfg), "options": repr(options)}
    start = state if state is not None else {n: p.detach() for n, p in model.named_parameters()}
    return checkpoints.cached(checkpoints.record(run_info, model, start, clients),
                              lambda: _run(algorithm, model, clients, cfg, options, state, None, workers))


def _run(algorithm, model: nn.Module, clients: ClientData, cfg: TrainConfig, options, state: Params | None,
         callback: Callable[[int, dict], None] | None, workers: int | None) -> FedResult:
    """The run of :func:`run` (without the store)."""
    check_hooks(algorithm)
    batched = cfg.vmap_clients > 1 and algorithm.batched
    if cfg.vmap_clients > 1 and cfg.augment:
        raise ValueError(f"{algorithm.name}: the batched path (cfg.vmap_clients > 1) does not augment (its crops and "
                         f"flips would be drawn in another order than one client after another); use "
                         f"cfg.vmap_clients = 1 with cfg.augment = True")
    clients = check_inputs(model, clients)
    if not any(n for n in clients.test_sizes.tolist()):
        raise ValueError("no client has test data; every run evaluates on the clients' test sets")
    algorithm.check(model, cfg, options)
    phases = tuple(algorithm.phases(model, cfg, options))
    check_phases(algorithm.name, model, phases)
    sizes = [int(n) for n in clients.train_sizes.tolist()]  # Python ints: no scalar reads in the loop
    check_work(phases, sizes, cfg)
    device, M = clients.device, clients.n_clients
    names = [n for n, _ in model.named_parameters()]
    personal = tuple(algorithm.personal_names(model, options))
    shared = tuple(algorithm.shared_names(model, options))
    params = starting_state(model, state, device, clients.dtype)
    initial = {n: p.clone() for n, p in params.items()}
    unvisited = initial  # what a client not yet sampled starts from (cfg.first_visit)
    server = algorithm.init_server(params, options)
    states: dict[int, dict] = {}
    x_train: dict[int, torch.Tensor] = {}  # training images in the working layout, made by the thread that first needs them
    gen = make_generator(cfg.seed)
    losses = torch.full((cfg.rounds,), float("nan"))
    accs = torch.full((cfg.rounds,), float("nan"))
    participants, evaluation, final_params = [], None, []
    n_workers = client_workers(workers, device, cfg, M, dropout=bool(dropout_layers(model)))
    pool = ClientThreads(model, n_workers) if n_workers > 1 else None
    worker = LocalSGD(model) if pool is None else None
    reference = None  # the run's starting loss (check_divergence)

    def images(i: int) -> torch.Tensor:
        if i not in x_train:
            x_train[i] = in_work_layout(clients.x_train[i])
        return x_train[i]

    def context(w: LocalSGD, i: int, batches, broadcast, draw, own: dict) -> ClientRound:
        return ClientRound(i, w, images(i), clients.y_train[i], sizes[i], batches, cfg, options,
                           gen if pool is None else None, params, server, broadcast, own, draw, unvisited, shared,
                           personal, phases)

    def own_state(i: int) -> dict:
        return states[i] if i in states else algorithm.init_client(unvisited, options)

    def round_states(selected: list[int]) -> dict[int, dict]:
        for i in selected:
            states[i] = own_state(i)
        return {i: states[i] for i in selected}

    with OneIntraOpThread(pool is None and device.type == "cpu"):
        try:
            for t in range(cfg.rounds):
                start = start_round(algorithm, sizes, phases, cfg, options, gen, params, server, round_states)
                plan, selected, draws, broadcast = start.plan, start.selected, start.draws, start.broadcast
                participants.append(plan.clients)

                def train_client(w: LocalSGD, i: int):
                    w.watch()
                    update = screened(algorithm, algorithm.client_update(
                        context(w, i, plan.batches[i], broadcast, draws.get(i), states[i])), params)
                    named = update_tensors(update.upload, update.state)
                    return update, [n for n, _ in named], client_stats(update.loss_sum, w.first_loss, w.peak_loss,
                                                                       [x for _, x in named])

                if batched:
                    keys = {i: (tuple(tuple(len(b) for b in bs) for bs in plan.batches[i]), sizes[i],
                                _hashable(draws.get(i)), _layout(states[i])) for i in selected}
                    done: dict[int, tuple] = {}
                    for group in groups_of(selected, keys, cfg.vmap_clients):
                        if len(group) == 1:
                            done[group[0]] = train_client(worker, group[0])
                        else:
                            done.update(_train_group(algorithm, model, clients, group, plan, draws.get(group[0]),
                                                     broadcast, states, images, context))
                    trained = (done[i] for i in selected)
                else:
                    trained = pool.map(train_client, selected) if pool is not None else (
                        train_client(worker, i) for i in selected)
                kept = []
                for i, (update, tensor_names, stats) in zip(selected, trained):  # in client order
                    check_finite(t, i, stats, tensor_names, cfg.lr, algorithm.name, options)
                    reference = check_divergence(t, i, stats.first, stats.peak, reference, cfg.lr,
                                                 algorithm=algorithm.name, options=options)
                    states[i] = update.state
                    kept.append(Kept(i, update.upload, stats.loss_sum, update.n_steps))
                params, server, losses[t] = finish_round(algorithm, params, server, kept, sizes, options)
                if cfg.first_visit != "initial":
                    unvisited = first_visit_params(cfg.first_visit, params, personal,
                                                   {i: states[i] for i in selected}, sizes)
                metrics = {"train_loss": float(losses[t])}
                if (t + 1) % cfg.eval_every == 0 or t == cfg.rounds - 1:
                    evaluation, final_params = _evaluate(algorithm, model, clients, cfg, options, t, names,
                                                         personal, own_state, context, pool, worker)
                    accs[t] = metrics["test_accuracy"] = evaluation.average
                if callback is not None:
                    callback(t, metrics)
        finally:
            if pool is not None:
                pool.close()
    local = {n: torch.stack([p[n] for p in final_params]) for n in personal}
    extras = {"server": server}
    if not algorithm.client_state_is_personal:
        extras["clients"] = states  # a default client's state is its personal parameters: ``local`` holds them
    return FedResult(algorithm.name, params, local, shared, personal, losses, accs, tuple(participants),
                     evaluation, cfg, extras)


def screened(algorithm, update, params: Params) -> ClientUpdate:
    """``update``, what ``algorithm``'s ``client_update`` returned, after the screening the loop
    and Flower's nodes share (no host sync): a :class:`ClientUpdate` (else ``TypeError``), an
    upload that fits the server's ``params``
    (:func:`~replearn.neural.engine.guards.check_upload`) and a step count
    (:func:`~replearn.neural.engine.guards.check_steps`); each ``ValueError`` names the method,
    the hook and the tensor."""
    if not isinstance(update, ClientUpdate):
        raise TypeError(f"{algorithm.name}: client_update must return a neural.ClientUpdate, got "
                        f"{type(update).__name__}")
    check_upload(algorithm.name, update.upload, params)
    check_steps(algorithm.name, update.n_steps)
    return update


def _evaluate(algorithm, model, clients, cfg, options, t, names, personal, own_state, context, pool, worker):
    """Every client tested with its ``eval_params``: the :class:`Evaluation` and, per client, the
    parameters of ``personal`` it was tested with."""
    M = clients.n_clients

    def refuse(i: int, n: str):
        raise FloatingPointError(f"round {t}: client {i}'s evaluated parameter {n!r} is not finite, "
                                 f"{divergence_advice(cfg.lr, algorithm.name, options)}")

    def test(w: LocalSGD, i: int):
        ctx = context(w, i, (), {}, None, own_state(i))
        p_i = algorithm.eval_params(ctx)
        check_params(algorithm.name, "eval_params", p_i, ctx.global_params)
        with torch.no_grad():
            kept = {n: p_i[n].detach().clone() for n in personal}
        if cfg.vmap_clients > 1:
            return p_i, kept  # checked and tested below, in groups
        finite = finite_by_name(p_i, names).tolist()  # one sync
        if not all(finite):
            refuse(i, names[finite.index(False)])
        return test_client(w.model, clients, p_i, {}, i, batch_size=1000), kept

    tested = list(pool.map(test, range(M)) if pool is not None else (test(worker, i) for i in range(M)))
    if cfg.vmap_clients > 1:
        own = {n: torch.stack([p_i[n] for p_i, _ in tested]) for n in names}
        finite = torch.stack([torch.isfinite(own[n]).flatten(1).all(1) for n in names]).tolist()  # one sync
        for k, n in enumerate(names):
            if not all(finite[k]):
                refuse(finite[k].index(False), n)
        tested = list(zip(test_all(model, clients, {}, own, cfg.vmap_clients), [k for _, k in tested]))
    return evaluation_of(clients, [r for r, _ in tested]), [p for _, p in tested]


def finite_by_name(params: Params, names: Sequence[str]) -> torch.Tensor:
    """Whether each of ``params[n]`` for ``n`` in ``names`` is finite (a bool tensor in ``names``'
    order; their norms by one foreach kernel per dtype, no host sync)."""
    out = [None] * len(names)
    by_dtype: dict[torch.dtype, list[int]] = {}
    for k, n in enumerate(names):
        by_dtype.setdefault(params[n].dtype, []).append(k)
    for ks in by_dtype.values():
        norms = torch._foreach_norm([params[names[k]].detach() for k in ks])
        for k, v in zip(ks, torch.isfinite(torch.stack(norms)).unbind()):
            out[k] = v
    return torch.stack(out)


def _train_group(algorithm, model: nn.Module, clients: ClientData, group: Sequence[int], plan: RoundPlan, draw,
                 broadcast: dict, states: dict, images: Callable[[int], torch.Tensor],
                 context: Callable) -> dict[int, tuple]:
    """One round of ``client_update`` for a group of clients with the same batch sizes, data size,
    draw and state layout, as one batched computation: the algorithm's per-client code runs once
    under ``torch.func.vmap`` with a :class:`FunctionalSGD` worker, on the clients' stacked
    images, index batches and states (the server's parameters, state and broadcast are shared).
    Returns, per client, what :func:`run`'s per-client step returns (its screened
    :class:`ClientUpdate`, the names of its upload and state tensors and its
    :class:`~replearn.neural.engine.guards.ClientStats`, read with one host sync for the group)."""
    lead = group[0]
    xs = torch.stack([images(i) for i in group])
    ys = torch.stack([clients.y_train[i] for i in group])
    batches = tuple(tuple(torch.stack(step) for step in zip(*(plan.batches[i][k] for i in group)))
                    for k in range(len(plan.batches[lead])))
    worker = FunctionalSGD(model)
    n_steps = []
    zero = torch.zeros((), device=clients.device, dtype=clients.dtype)

    def one(state, x, y, idx):
        worker.watch()
        ctx = context(worker, lead, idx, broadcast, draw, state)
        ctx.x, ctx.y = x, y
        update = screened(algorithm, algorithm.client_update(ctx), ctx.global_params)
        n_steps.append(update.n_steps)
        first = zero if worker.first_loss is None else worker.first_loss
        peak = zero if worker.peak_loss is None else worker.peak_loss
        return update.upload, update.state, update.loss_sum + zero, first, peak

    try:
        upload, state, loss_sum, first, peak = vmap(one)(_stack_states([states[i] for i in group]), xs, ys, batches)
    except RuntimeError as err:
        if not str(err).startswith("vmap"):
            raise
        raise ValueError(
            f"{algorithm.name}: its client_update (or a hook it calls) cannot run batched, under torch.func.vmap, "
            f"for clients {list(group)}: {err} A Python decision on a tensor's value (float(), .item(), bool(), "
            f"'if' on a tensor) has no batched form; compute with tensor operations (torch.where, torch.clamp), "
            f"or declare the method batched = False, or run with TrainConfig.vmap_clients = 1") from err
    named = update_tensors(upload, state)  # stacked along the group
    norms = [x.reshape(len(group), -1).norm(dim=1) if x.is_floating_point() else loss_sum.new_zeros(len(group))
             for _, x in named]
    finite = torch.isfinite(torch.stack([loss_sum] + norms)).double()  # the loss's, then each tensor's
    stats = torch.cat([torch.stack([loss_sum.double(), first.double(), peak.double()]), finite]).T.tolist()  # one sync
    out = {}
    for g, i in enumerate(group):
        own = ClientUpdate({k: v[g] for k, v in upload.items()}, _client_slice(state, g), loss_sum[g], n_steps[0])
        row = stats[g]
        out[i] = (own, [n for n, _ in named], ClientStats(row[0], row[1], row[2], bool(row[3]),
                                                          [bool(v) for v in row[4:]]))
    return out


def groups_of(selected: Sequence[int], keys: dict[int, tuple], size: int) -> list[list[int]]:
    """The clients of ``selected`` with equal ``keys`` (what must agree for one batched
    computation), in chunks of at most ``size``, in client order within each group."""
    by_key: dict[tuple, list[int]] = {}
    for i in selected:
        by_key.setdefault(keys[i], []).append(i)
    return [g[k:k + size] for g in by_key.values() for k in range(0, len(g), size)]


def _hashable(obj):
    """``obj`` (an algorithm's draw for a client) as a hashable value, equal for equal draws."""
    if isinstance(obj, torch.Tensor):
        return ("tensor", tuple(obj.shape), tuple(obj.flatten().tolist()))
    if isinstance(obj, (list, tuple)):
        return tuple(_hashable(o) for o in obj)
    if isinstance(obj, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in obj.items()))
    return obj


def _layout(state) -> tuple:
    """A client state's structure (keys, tensor shapes and dtypes): the clients of one batched
    group must agree on it (e.g. a client sampled for the first time, whose state is still the
    initial one, does not join a group of returning clients)."""
    if isinstance(state, dict):
        return tuple(sorted((k, _layout(v)) for k, v in state.items()))
    if isinstance(state, torch.Tensor):
        return ("tensor", tuple(state.shape), str(state.dtype))
    return (type(state).__name__,)


def _stack_states(states: Sequence[dict]) -> dict:
    """Client states (nested dicts of tensors) stacked along a new first (client) axis."""
    out = {}
    for k, v in states[0].items():
        if isinstance(v, dict):
            out[k] = _stack_states([s[k] for s in states])
        elif isinstance(v, torch.Tensor):
            out[k] = torch.stack([s[k] for s in states])
        else:
            raise TypeError(f"the batched path (cfg.vmap_clients > 1) needs client states made of tensors; "
                            f"state {k!r} is a {type(v).__name__}: use cfg.vmap_clients = 1")
    return out


def _client_slice(state: dict, g: int) -> dict:
    """Client ``g``'s part of a stacked state (copies, so that one client keeps no group alive)."""
    return {k: _client_slice(v, g) if isinstance(v, dict) else v[g].clone() for k, v in state.items()}
