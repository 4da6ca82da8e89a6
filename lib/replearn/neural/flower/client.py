"""The node's side of a Flower run: :func:`client_app`, a ``ClientApp`` running an algorithm's
client step (``client_update``, ``eval_params``) with the node's data and state."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

import torch
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from torch import nn

from replearn import neural
from replearn.neural import ClientData, LocalSGD, Params, TrainConfig
from replearn.neural.engine.guards import check_finite, check_params, client_stats, mean_loss, update_tensors
from replearn.neural.engine.rounds import screened
from replearn.neural.flower.common import (CALL_TIMEOUT, Fingerprint, bounded, check_cfg, check_seconds, fingerprint,
                                           runnable)
from replearn.neural.flower.records import from_record, pack, to_record, unpack

__all__ = ["NO_INITIAL", "client_app"]

NO_INITIAL = "the node has no initial parameters (the server sends them with its first messages)"


def _data_fn_error(pid: int, ex: ValueError) -> str:
    """The message of a node whose ``data_fn(pid)`` raised ``ex``: it names the partition, since
    the client indices of ClientData's own checks count the clients of the ClientData that
    ``data_fn`` built (0 for the one client of a node), not the federation's clients."""
    reason = str(ex)
    note = ("; a client index there counts the clients of the ClientData that data_fn built, not the "
            "partitions" if re.search(r"\bclient \d", reason) else "")
    return f"partition {pid} (client {pid}): data_fn({pid}) gave invalid data: {reason}{note}"


@dataclass
class _Node:
    """What one call of the ``ClientApp`` works with: the node's partition ``pid``, ``model``
    (architecture), ``data`` (one client, in the model's dtype), the run's ``initial``
    parameters, the node's committed ``state`` (None before its first kept round) and the
    ``updates`` to its ``Context.state`` the call makes if it finishes (None deletes)."""

    pid: int
    model: nn.Module
    data: ClientData
    initial: Params | None
    state: dict | None
    updates: dict


def client_app(model_fn: Callable[[], nn.Module], data_fn: Callable[[int], ClientData], cfg: TrainConfig,
               algorithm, options=None, *, call_timeout: float = CALL_TIMEOUT) -> ClientApp:
    """A Flower ``ClientApp`` running ``algorithm``'s client step (a registered name or an
    algorithm object; ``options`` its options, default its ``Options()``).

    ``model_fn()`` builds the model (its architecture: the parameters come from the server);
    ``data_fn(partition_id)`` returns the node's data as a one-client
    :class:`~replearn.neural.ClientData` (which may hold no test data: the node is then not
    evaluated); the partition id is ``context.node_config["partition-id"]``, as in Flower's
    simulation.

    Every reply carries the node's :func:`~replearn.neural.flower.common.fingerprint` (the
    algorithm's name, its options and ``cfg``) in a ``ConfigRecord`` ``"fingerprint"``, which
    the server compares with its own; a message whose fingerprint (``config["fingerprint-*"]``)
    differs from the node's is refused with a ``ValueError`` naming what differs, before any
    training.

    - ``train``: rebuilds the round's :class:`~replearn.neural.ClientRound` (the node's data,
      the batches, draw, broadcast, server parameters and state the message carries, the
      node's own state) and runs ``client_update``; screens its update as the in-process loop
      does (:func:`replearn.neural.engine.rounds.screened`, a finite loss, upload and state); replies with the upload (``"arrays"``) and ``train_loss`` (NaN after no step),
      ``loss-sum``, ``n-steps`` and ``num-examples``; the new state is kept as pending until the
      server says whether it kept the upload (``commit-round``).
    - ``evaluate``: tests ``eval_params`` (with the node's state and the server's parameters
      and state) on the node's test data: ``accuracy``, ``loss``, ``num-examples``.
    - ``query``: without an ``action``, the node's partition id and training- and test-set
      sizes (discovery); ``action = "state"``: its state (for a ``broadcast`` that reads it);
      ``action = "fetch"``: the parameters it is evaluated with for the personal names
      (``send-personal``) and its state (``send-state``).

    The node keeps in its ``Context.state`` the run's initial parameters (sent with the first
    messages), its committed state and a pending one. Every call runs in a helper thread and is
    awaited at most ``call_timeout`` seconds (default :data:`CALL_TIMEOUT`): a call that hangs
    (a stalled data source, a deadlock) is answered with a ``TimeoutError`` error reply instead
    of pinning the worker that runs the app (on Flower's simulation engine, a Ray actor) for
    ever. The ``Context.state`` is updated only by calls that finished in time, and while an
    abandoned call of a node still runs, that node answers every new message at once with an
    error.
    """
    alg = runnable(algorithm)
    options = alg.check_options(options)
    check_cfg(cfg)
    check_seconds(call_timeout=call_timeout)
    app = ClientApp()
    mine = fingerprint(alg, options, cfg)
    running: dict[int, threading.Thread] = {}  # node id -> its abandoned, still running call

    def guarded(stage: str, context: Context, work: Callable[[], tuple[Message, dict]]) -> Message:
        node = context.node_id
        earlier = running.get(node)
        if earlier is not None and earlier.is_alive():
            raise TimeoutError(f"node {node} is still running an earlier call that exceeded call_timeout = "
                               f"{call_timeout:g} s; not starting its {stage}")
        running.pop(node, None)
        try:
            reply, updates = bounded(work, call_timeout, f"the {stage} call of node {node}")
        except TimeoutError as err:
            if not hasattr(err, "thread"):
                raise
            running[node] = err.thread
            raise TimeoutError(f"{err} (call_timeout = {call_timeout:g} s)") from None
        for key, value in updates.items():
            if value is None:
                if key in context.state:
                    del context.state[key]
            else:
                context.state[key] = value
        return reply

    def data_of(context: Context) -> tuple[int, nn.Module, ClientData]:
        pid = int(context.node_config["partition-id"])
        try:
            data = data_fn(pid)
        except ValueError as ex:  # e.g. ClientData's checks (a NaN pixel): say whose data they are
            raise ValueError(_data_fn_error(pid, ex)) from ex
        if data.n_clients != 1:
            raise ValueError(f"data_fn({pid}) must return one client, got {data.n_clients}")
        model = model_fn()
        try:
            data = neural.check_inputs(model, data)  # in the model's dtype, as in process
        except ValueError as ex:
            raise ValueError(_data_fn_error(pid, ex)) from ex
        return pid, model, data

    def reply(content: RecordDict, msg: Message) -> Message:
        content["fingerprint"] = ConfigRecord(mine.entries())
        return Message(content, reply_to=msg)

    def check_fingerprint(pid: int, config: ConfigRecord) -> None:
        if "fingerprint-algorithm" not in config:
            return
        server = Fingerprint.of_entries(config, "fingerprint-")
        differences = mine.differences(server)
        if differences:
            raise ValueError(f"partition {pid}: this node was built for another run than the server's: "
                             f"{differences}; build client_app with the server's algorithm, options and "
                             f"TrainConfig")

    def open_(msg: Message, context: Context) -> _Node:
        """The node for this message: data, initial parameters and the committed state, after
        the server's decision on a pending state (``commit-round``)."""
        pid, model, data = data_of(context)
        device = data.device
        updates: dict = {}
        records = msg.content.array_records
        config = msg.content.config_records.get("config", ConfigRecord())
        check_fingerprint(pid, config)
        if "initial" in records:
            updates["initial"] = records["initial"]
            initial = from_record(records["initial"], device)
        elif "initial" in context.state:
            initial = from_record(context.state["initial"], device)
        else:
            initial = None
        state_arrays = context.state.get("state")
        state_tree = context.state["state-info"]["tree"] if "state-info" in context.state else None
        commit = config.get("commit-round")
        if "pending-info" in context.state and commit is not None:
            if context.state["pending-info"]["round"] == commit:  # the server kept that round's upload
                state_arrays = context.state["pending"]
                state_tree = context.state["pending-info"]["tree"]
                updates["state"] = state_arrays
                updates["state-info"] = ConfigRecord({"tree": state_tree})
            updates["pending"] = updates["pending-info"] = None
        state = None if state_tree is None else unpack(state_arrays, state_tree, device)
        return _Node(pid, model, data, initial, state, updates)

    def round_of(node: _Node, msg: Message, worker: LocalSGD, *, training: bool) -> neural.ClientRound:
        if node.initial is None:
            raise ValueError(NO_INITIAL)
        device = node.data.device
        content, config = msg.content, msg.content["config"]
        records = content.array_records

        def unpacked(key: str, default):
            tree = config.get(f"{key}-tree")
            return default if tree is None else unpack(records.get(key), tree, device)

        batches: tuple = ()
        if training:
            batches = tuple(tuple(torch.tensor(config[f"batch-indices-{k}"], dtype=torch.int64)
                                  .split(list(config[f"batch-sizes-{k}"])))
                            for k in range(int(config["phases"])))
        x = node.data.x_train[0]
        x = x.contiguous(memory_format=neural.work_layout(x.dtype)) if x.ndim == 4 else x
        state = node.state if node.state is not None else alg.init_client(node.initial, options)
        return neural.ClientRound(
            client=node.pid, worker=worker, x=x, y=node.data.y_train[0], n=int(node.data.train_sizes[0]),
            batches=batches, cfg=cfg, options=options, generator=None,
            global_params=from_record(content["arrays"], device), server=unpacked("server", {}),
            broadcast=unpacked("broadcast", {}) if training else {}, state=state,
            draw=unpacked("draw", None) if training else None, initial=node.initial,
            shared=tuple(alg.shared_names(node.model, options)), personal=tuple(alg.personal_names(node.model, options)),
            phases=tuple(alg.phases(node.model, cfg, options)))

    def evaluated_params(node: _Node, msg: Message) -> Params:
        names = [n for n, _ in node.model.named_parameters()]
        ctx = round_of(node, msg, LocalSGD(node.model), training=False)
        p_i = alg.eval_params(ctx)
        check_params(alg.name, "eval_params", p_i, ctx.global_params)
        return {n: p_i[n] for n in names}

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        return guarded("query", context, lambda: _query(msg, context))

    def _query(msg: Message, context: Context) -> tuple[Message, dict]:
        config = msg.content.config_records.get("config", ConfigRecord())
        action = config.get("action")
        if action is None:  # discovery
            pid, _, data = data_of(context)
            info = MetricRecord({"partition-id": pid, "num-examples": int(data.train_sizes[0]),
                                 "num-test-examples": int(data.test_sizes[0])})
            return reply(RecordDict({"info": info}), msg), {}
        node = open_(msg, context)
        content = RecordDict()
        if action == "state":
            if node.initial is None and node.state is None:
                raise ValueError(NO_INITIAL)
            state = node.state if node.state is not None else alg.init_client(node.initial, options)
            content["state"], tree = pack(state)
            content["state-info"] = ConfigRecord({"tree": tree})
        elif action == "fetch":
            if config.get("send-personal"):
                personal = tuple(alg.personal_names(node.model, options))
                content["personal"] = to_record(evaluated_params(node, msg), personal)
            if config.get("send-state") and node.state is not None:
                content["state"], tree = pack(node.state)
                content["state-info"] = ConfigRecord({"tree": tree})
        else:
            raise ValueError(f"unknown query action {action!r}")
        return reply(content, msg), node.updates

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        return guarded("train", context, lambda: _train(msg, context))

    def _train(msg: Message, context: Context) -> tuple[Message, dict]:
        node = open_(msg, context)
        worker = LocalSGD(node.model)
        ctx = round_of(node, msg, worker, training=True)
        worker.watch()
        update = screened(alg, alg.client_update(ctx), ctx.global_params)  # the in-process loop's screening
        steps = update.n_steps
        round_ = int(msg.content["config"]["server-round"])
        named = update_tensors(update.upload, update.state)
        stats = client_stats(update.loss_sum, worker.first_loss, worker.peak_loss, [t for _, t in named])
        check_finite(round_ - 1, node.pid, stats, [n for n, _ in named], cfg.lr, alg.name, options)
        arrays, tree = pack(update.state)
        updates = {**node.updates, "pending": arrays,
                   "pending-info": ConfigRecord({"tree": tree, "round": round_})}
        metrics = MetricRecord({"train_loss": mean_loss(stats.loss_sum, steps), "loss-sum": stats.loss_sum,
                                "n-steps": steps, "num-examples": int(node.data.train_sizes[0])})
        return reply(RecordDict({"arrays": to_record(update.upload), "metrics": metrics}), msg), updates

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        return guarded("evaluate", context, lambda: _evaluate(msg, context))

    def _evaluate(msg: Message, context: Context) -> tuple[Message, dict]:
        node = open_(msg, context)
        result = neural.evaluate(node.model, node.data, evaluated_params(node, msg))
        metrics = MetricRecord({"accuracy": float(result.accuracy[0]), "loss": float(result.loss[0]),
                                "num-examples": int(node.data.test_sizes[0])})
        return reply(RecordDict({"metrics": metrics}), msg), node.updates

    return app
