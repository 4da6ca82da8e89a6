"""The book's FedAvg, D-SGD and FedRep on Flower (``flwr``; Beutel et al., 2020).

The same algorithms as :mod:`replearn.neural`, with Flower doing the orchestration: the
server's round loop, message passing, failure handling and the weighted average are Flower's
(``flwr.serverapp.strategy.FedAvg``); the local updates are the library's own
(``neural._Worker.sgd``, the code behind :func:`replearn.neural.run_rounds`).

- :func:`client_app`: a Flower ``ClientApp``. ``train`` runs the algorithm's local phases
  on the node's data; FedRep's head (Collins et al., 2021, Alg. 1) stays on the node, in its
  ``Context.state``, and only the body is sent back. ``evaluate`` tests the server's shared
  parameters with the node's own local ones; ``query`` reports the node's partition id and
  training-set size (and, when asked with ``send-local``, its local parameters).
- :class:`ReplayFedAvg`: Flower's FedAvg (McMahan et al., 2017): the n_i-weighted average of
  the returned parameters. It samples clients and draws each client's minibatch order with
  one generator seeded with ``cfg.seed``, in the same order as ``run_rounds``, and sends the
  batch indices with the round's configuration, so that a Flower run reproduces the
  in-process run. Replies that carry an error (the client raised) or parameters with other
  names, shapes or dtypes than the global ones are dropped, as Flower drops failures.
- :func:`server_app`: a Flower ``ServerApp`` that asks every node for its partition id and
  data size, then runs :class:`ReplayFedAvg` for ``cfg.rounds`` rounds.
- :func:`run_inprocess`: runs the two apps in this process through :class:`InProcessGrid`,
  a ``Grid`` that hands each message to the ``ClientApp`` (no Ray, no network).
- :func:`run_simulation`: runs the same two apps on Flower's simulation engine
  (``flwr.simulation.run_simulation``, Ray backend): the ``ClientApp`` in Ray actors, one
  virtual SuperNode per client. Needs the ``simulation`` extra (Ray).

Client data augmentation (``cfg.augment``) is not supported: in ``run_rounds`` it draws from
the engine's one generator in the middle of training, which nodes cannot replay.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from uuid import uuid4

import numpy as np
import torch
from flwr.app import (Array, ArrayRecord, ConfigRecord, Context, Error, Message, MessageType,
                      MetricRecord, RecordDict)
from flwr.clientapp import ClientApp
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg, Result
from flwr.serverapp.strategy.strategy_utils import sample_nodes
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity
from torch import nn

from . import neural
from .backend import make_generator
from .neural import ClientData, Params, Phase, TrainConfig

ALGORITHMS = ("fedavg", "dsgd", "fedrep")
_log = logging.getLogger("flwr")


@dataclass(frozen=True)
class Spec:
    """What an algorithm shares, keeps local and trains (as in :mod:`replearn.neural`)."""

    cfg: TrainConfig
    shared: tuple[str, ...]
    local: tuple[str, ...]
    phases: tuple[Phase, ...]


def algorithm_spec(algorithm: str, model: nn.Module, cfg: TrainConfig) -> Spec:
    """The parameter split and local phases of ``neural.fedavg``, ``neural.dsgd`` (FedAvg
    with tau = 1) and ``neural.fedrep`` (head phase, then body phase; bodies averaged)."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    if cfg.augment:
        raise ValueError("augment=True is not supported on Flower: the in-process engine draws the "
                         "augmentation from its shared generator during training")
    body, head = neural._split(model)
    if algorithm == "dsgd":
        cfg = replace(cfg, local_steps=1)
    if algorithm == "fedrep":
        if cfg.head_steps is None and cfg.head_epochs < 1:
            raise ValueError("FedRep needs head_epochs >= 1 or head_steps")
        return Spec(cfg, body, head, ((head, cfg.head_steps, cfg.head_epochs),
                                      (body, cfg.local_steps, cfg.local_epochs)))
    return Spec(cfg, body + head, (), ((body + head, cfg.local_steps, cfg.local_epochs),))


def to_record(params: Params, names: Sequence[str]) -> ArrayRecord:
    """The named tensors as a Flower ``ArrayRecord`` of NumPy arrays."""
    return ArrayRecord({n: Array(params[n].detach().cpu().numpy()) for n in names})


def from_record(record: ArrayRecord, device: torch.device) -> Params:
    """A Flower ``ArrayRecord`` as tensors on ``device``."""
    return {n: torch.tensor(np.asarray(a.numpy()), device=device) for n, a in record.items()}


# --------------------------------------------------------------------------------------------
# Client side


def client_app(model_fn: Callable[[], nn.Module], data_fn: Callable[[int], ClientData],
               cfg: TrainConfig, algorithm: str) -> ClientApp:
    """A Flower ``ClientApp`` for ``algorithm`` ("fedavg", "dsgd" or "fedrep").

    ``model_fn()`` must build the same initial model on every node (seed it): it gives the
    architecture and the initial local parameters (FedRep's heads). ``data_fn(partition_id)``
    returns the node's data as a one-client :class:`~replearn.neural.ClientData`; the
    partition id is ``context.node_config["partition-id"]``, as in Flower's simulation.
    """
    app = ClientApp()

    def setup(context: Context) -> tuple[nn.Module, ClientData, Spec, int]:
        pid = int(context.node_config["partition-id"])
        data = data_fn(pid)
        if data.n_clients != 1:
            raise ValueError(f"data_fn({pid}) must return one client, got {data.n_clients}")
        model = model_fn()
        return model, data, algorithm_spec(algorithm, model, cfg), pid

    def parameters(model: nn.Module, spec: Spec, msg: Message, context: Context, device) -> Params:
        """Initial parameters, overwritten by the server's shared ones and the node's local ones."""
        params = {n: p.detach().to(device) for n, p in model.named_parameters()}
        params.update(from_record(msg.content["arrays"], device))
        if "local" in context.state:
            params.update(from_record(context.state["local"], device))
        return params

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        _, data, _, pid = setup(context)
        info = MetricRecord({"partition-id": pid, "num-examples": int(data.train_sizes[0])})
        content = RecordDict({"info": info})
        config = msg.content.config_records.get("config")
        if config is not None and config.get("send-local") and "local" in context.state:
            content["local"] = context.state["local"]
        return Message(content, reply_to=msg)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        model, data, spec, _ = setup(context)
        params = parameters(model, spec, msg, context, data.device)
        config = msg.content["config"]
        worker = neural._Worker(model)
        unused = torch.Generator()  # the SGD only draws for augmentation, which is off
        loss, steps = 0.0, 0
        for k, (trainable, _, _) in enumerate(spec.phases):
            batches = list(torch.tensor(config[f"batch-indices-{k}"], dtype=torch.int64)
                           .split(list(config[f"batch-sizes-{k}"])))
            new, loss_sum = worker.sgd(params, trainable, data.x_train[0], data.y_train[0], batches,
                                       spec.cfg, unused)
            params = {**params, **new}
            loss += float(loss_sum)
            steps += len(batches)
        if spec.local:
            context.state["local"] = to_record(params, spec.local)
        metrics = MetricRecord({"train_loss": loss / steps, "num-examples": int(data.train_sizes[0])})
        return Message(RecordDict({"arrays": to_record(params, spec.shared), "metrics": metrics}),
                       reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        model, data, spec, _ = setup(context)
        result = neural.evaluate(model, data, parameters(model, spec, msg, context, data.device))
        metrics = MetricRecord({"accuracy": float(result.accuracy[0]), "loss": float(result.loss[0]),
                                "num-examples": int(data.test_sizes[0])})
        return Message(RecordDict({"metrics": metrics}), reply_to=msg)

    return app


# --------------------------------------------------------------------------------------------
# Server side


class ReplayFedAvg(FedAvg):
    """Flower's FedAvg with the client sampling and minibatch orders of ``run_rounds``.

    ``nodes[i]`` is the Flower node id of client i and ``train_sizes[i]`` its n_i. Each round
    samples ``max(1, round(r M))`` clients (all if that is M) with the generator seeded with
    ``cfg.seed``, then draws each sampled client's batches for every phase in ``phases``,
    exactly as ``run_rounds`` does, and sends them in the client's ConfigRecord. Flower's
    ``FedAvg.aggregate_train`` averages the kept replies weighted by ``num-examples``.
    ``participants[t]`` lists round t's clients; ``dropped[t]`` the (client, reason) pairs
    of the replies left out of round t's average.
    """

    def __init__(self, nodes: Sequence[int], train_sizes: Sequence[int], cfg: TrainConfig,
                 phases: Sequence[Phase]):
        if len(nodes) != len(train_sizes) or not nodes:
            raise ValueError(f"need one train size per node, got {len(nodes)} nodes and "
                             f"{len(train_sizes)} sizes")
        M = len(nodes)
        super().__init__(fraction_train=cfg.participation, min_train_nodes=1, min_evaluate_nodes=M,
                         min_available_nodes=M)
        self.nodes = list(nodes)
        self.client_of = {node: i for i, node in enumerate(self.nodes)}
        self.train_sizes = [int(n) for n in train_sizes]
        self.cfg = cfg
        self.phases = tuple(phases)
        self.generator = make_generator(cfg.seed)
        self.participants: list[tuple[int, ...]] = []
        self.dropped: dict[int, list[tuple[int | None, str]]] = {}
        self._expected: dict[str, tuple[tuple[int, ...], str]] = {}

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        M = len(self.nodes)
        m = max(1, round(self.cfg.participation * M))
        selected = (sorted(torch.randperm(M, generator=self.generator)[:m].tolist()) if m < M
                    else list(range(M)))
        self.participants.append(tuple(selected))
        self._expected = {n: (tuple(a.shape), a.dtype) for n, a in arrays.items()}
        messages = []
        for i in selected:
            client_config = ConfigRecord({**config, "server-round": server_round})
            for k, (_, steps, epochs) in enumerate(self.phases):
                batches = neural._batches(self.train_sizes[i], self.cfg.batch_size, steps=steps,
                                          epochs=epochs, generator=self.generator)
                client_config[f"batch-indices-{k}"] = torch.cat(batches).tolist()
                client_config[f"batch-sizes-{k}"] = [len(b) for b in batches]
            content = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: client_config})
            messages.append(Message(content, dst_node_id=self.nodes[i], message_type=MessageType.TRAIN))
        return messages

    def _problem(self, msg: Message) -> str | None:
        """Why a reply cannot enter the average (None if it can)."""
        if msg.has_error():
            return f"client failed: {msg.error.reason}"
        arrays, metrics = msg.content.array_records, msg.content.metric_records
        if len(arrays) != 1 or len(metrics) != 1:
            return "expected one ArrayRecord and one MetricRecord"
        got = {n: (tuple(a.shape), a.dtype) for n, a in next(iter(arrays.values())).items()}
        if got != self._expected:
            return f"parameters {got} do not match the global ones {self._expected}"
        weight = next(iter(metrics.values())).get(self.weighted_by_key)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
            return f"{self.weighted_by_key!r} must be a positive number, got {weight!r}"
        return None

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        kept = []
        for msg in replies:
            problem = self._problem(msg)
            if problem is None:
                kept.append(msg)
                continue
            client = self.client_of.get(msg.metadata.src_node_id)
            self.dropped.setdefault(server_round, []).append((client, problem))
            _log.warning("round %d: dropped the update of client %s: %s", server_round, client, problem)
        return super().aggregate_train(server_round, kept)

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        """Evaluate on every node on the rounds ``run_rounds`` evaluates."""
        if server_round % self.cfg.eval_every and server_round != self.cfg.rounds:
            return []
        return super().configure_evaluate(server_round, arrays, config, grid)


def discover(grid: Grid, n_clients: int | None = None, *, timeout: float = 600
             ) -> tuple[list[int], list[int]]:
    """Ask every node for its partition id and training-set size; returns the node ids and
    sizes ordered by partition id, which must be 0, ..., M-1. With ``n_clients``, first wait
    (with Flower's ``sample_nodes``) until that many nodes are connected."""
    node_ids = (list(grid.get_node_ids()) if n_clients is None
                else sample_nodes(grid, n_clients, n_clients)[1])
    replies = grid.send_and_receive(
        [Message(RecordDict(), dst_node_id=n, message_type=MessageType.QUERY) for n in node_ids],
        timeout=timeout)
    found: dict[int, tuple[int, int]] = {}
    for msg in replies:
        node = msg.metadata.src_node_id
        if msg.has_error():
            raise ValueError(f"node {node} did not report its partition: {msg.error.reason}")
        info = msg.content["info"]
        pid = int(info["partition-id"])
        if pid in found:
            raise ValueError(f"nodes {found[pid][0]} and {node} both report partition {pid}")
        found[pid] = (node, int(info["num-examples"]))
    if sorted(found) != list(range(len(node_ids))):
        raise ValueError(f"{len(node_ids)} nodes must report partitions 0..{len(node_ids) - 1}, "
                         f"got {sorted(found)}")
    return [found[i][0] for i in range(len(found))], [found[i][1] for i in range(len(found))]


def server_app(model_fn: Callable[[], nn.Module], cfg: TrainConfig, algorithm: str, *,
               n_clients: int | None = None,
               on_result: Callable[[Result, ReplayFedAvg], None] | None = None) -> ServerApp:
    """A Flower ``ServerApp`` running ``algorithm`` for ``cfg.rounds`` rounds from the
    parameters of ``model_fn()`` on ``n_clients`` nodes (waits for them to connect; default:
    the nodes connected at the start). The final shared parameters are stored in
    ``context.state["arrays"]``; ``on_result(result, strategy)`` is called at the end."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        model = model_fn()
        spec = algorithm_spec(algorithm, model, cfg)
        nodes, sizes = discover(grid, n_clients)
        strategy = ReplayFedAvg(nodes, sizes, spec.cfg, spec.phases)
        initial = to_record(dict(model.named_parameters()), spec.shared)
        result = strategy.start(grid, initial, num_rounds=spec.cfg.rounds)
        context.state["arrays"] = result.arrays if result.arrays is not None else initial
        if on_result is not None:
            on_result(result, strategy)

    return app


# --------------------------------------------------------------------------------------------
# Running both in this process


class InProcessGrid(Grid):
    """A Flower ``Grid`` whose nodes are ``ClientApp`` calls in this process, one message
    after another, each node with its own persistent ``Context`` (``partition-id`` i). As in
    Flower's simulation runtime, an exception in the ``ClientApp`` becomes an error reply."""

    def __init__(self, app: ClientApp, n_nodes: int, *, run_id: int = 1):
        self.app = app
        self._run = Run.create_empty(run_id)
        self.contexts = {}
        for i in range(n_nodes):
            node = (uuid4().int >> 65) + 1
            self.contexts[node] = Context(run_id=run_id, node_id=node, state=RecordDict(),
                                          node_config={"partition-id": i, "num-partitions": n_nodes},
                                          run_config={})
        self._replies: dict[str, Message] = {}

    def set_run(self, run: Run) -> None:
        self._run = run

    @property
    def run(self) -> Run:
        return self._run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str,
                       ttl: float | None = None) -> Message:
        return Message(content, dst_node_id, message_type, ttl=ttl, group_id=group_id)

    def get_node_ids(self) -> list[int]:
        return list(self.contexts)

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        ids = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = str(uuid4())  # as Flower's InMemoryGrid does
            try:
                reply = self.app(msg, self.contexts[msg.metadata.dst_node_id])
            except Exception as ex:  # noqa: BLE001 -- reported to the strategy, as Flower does
                reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION,
                                      reason=f"{type(ex).__name__}: {ex}"), reply_to=msg)
            self._replies[msg.metadata.message_id] = reply
            ids.append(msg.metadata.message_id)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        return [self._replies.pop(i) for i in message_ids if i in self._replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        return self.pull_messages(self.push_messages(messages))


@dataclass(frozen=True)
class FlowerRun:
    """Outcome of :func:`run_inprocess` and :func:`run_simulation`, laid out like
    :class:`replearn.neural.FedResult`: ``state`` the server's parameters (initial values for
    local names), ``local`` the nodes' local parameters stacked along a first client axis,
    ``result`` Flower's ``Result`` (per-round metrics) and ``strategy`` (participants,
    dropped updates)."""

    state: Params
    local: Params
    result: Result
    strategy: ReplayFedAvg


def run_inprocess(model_fn: Callable[[], nn.Module], clients: ClientData, cfg: TrainConfig,
                  algorithm: str, *, app: ClientApp | None = None) -> FlowerRun:
    """Run ``algorithm`` on Flower with one node per client of ``clients`` in this process:
    :func:`server_app` drives :func:`client_app` (or ``app``) through :class:`InProcessGrid`."""
    model = model_fn()
    spec = algorithm_spec(algorithm, model, cfg)
    app = app or client_app(model_fn, lambda i: clients.subset([i]), cfg, algorithm)
    grid = InProcessGrid(app, clients.n_clients)
    finished = {}
    server = server_app(model_fn, cfg, algorithm, n_clients=clients.n_clients,
                        on_result=lambda result, strategy: finished.update(result=result,
                                                                          strategy=strategy))
    # The identity Flower's runtime sets before it runs a ServerApp (flwr.server.compat.app)
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, grid.run.run_id, SUPERLINK_NODE_ID
    context = Context(run_id=grid.run.run_id, node_id=SUPERLINK_NODE_ID, node_config={}, state=RecordDict(),
                      run_config={})
    server(grid, context)
    device = clients.device
    state = {n: p.detach().to(device).clone() for n, p in model.named_parameters()}
    state.update(from_record(context.state["arrays"], device))
    local = {}
    if spec.local:
        per_client = [{**state, **(from_record(c.state["local"], device) if "local" in c.state else {})}
                      for c in grid.contexts.values()]
        local = {n: torch.stack([p[n] for p in per_client]) for n in spec.local}
    return FlowerRun(state, local, finished["result"], finished["strategy"])


# --------------------------------------------------------------------------------------------
# Running on Flower's simulation engine (Ray)


def fetch_local(grid: Grid, nodes: Sequence[int], *, timeout: float = 600) -> list[ArrayRecord | None]:
    """Ask each node in ``nodes`` for the local parameters it keeps (FedRep's head) with a
    ``query`` message; returns one ``ArrayRecord`` per node, in order (None for a node that
    has none or replied with an error)."""
    config = ConfigRecord({"send-local": True})
    replies = grid.send_and_receive(
        [Message(RecordDict({"config": config}), dst_node_id=n, message_type=MessageType.QUERY)
         for n in nodes], timeout=timeout)
    local = {msg.metadata.src_node_id: msg.content.array_records.get("local")
             for msg in replies if not msg.has_error()}
    return [local.get(n) for n in nodes]


def _ray_defaults(n_clients: int) -> dict:
    """A small local Ray instance: no dashboard, one CPU per client (at most the machine's),
    quiet logs, and a new local cluster even if ``RAY_ADDRESS`` points elsewhere."""
    cpus = max(1, min(n_clients, os.cpu_count() or 1))
    return {"init_args": {"address": "local", "include_dashboard": False, "num_cpus": cpus,
                          "logging_level": "ERROR", "log_to_driver": True},
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0}}


def run_simulation(model_fn: Callable[[], nn.Module], data_fn: Callable[[int], ClientData],
                   n_clients: int, cfg: TrainConfig, algorithm: str, *,
                   backend_config: dict | None = None, verbose: bool = False) -> FlowerRun:
    """Run ``algorithm`` on Flower's simulation engine with ``n_clients`` virtual SuperNodes.

    The apps are :func:`server_app` and :func:`client_app`, run by
    ``flwr.simulation.run_simulation`` with its Ray backend: the ``ServerApp`` runs in a
    thread of this process, the ``ClientApp`` in a pool of Ray actors (one per CPU given to
    Ray), and node i's data is ``data_fn(i)`` (``context.node_config["partition-id"]``),
    called in the actor. ``model_fn``, ``data_fn`` and ``cfg`` are pickled to the actors
    (with cloudpickle, for every message: let ``data_fn`` load from disk rather than close
    over large tensors). FedRep's heads, which stay on the nodes, are fetched after training
    with one ``query`` message per node (:func:`fetch_local`).

    ``backend_config`` updates the defaults key by key (``init_args``, ``client_resources``,
    ``actor``): by default Ray starts a new local instance without dashboard on
    ``min(n_clients, cpu_count)`` CPUs (raise ``init_args["num_cpus"]`` with
    ``client_resources["num_cpus"]``), each client takes one CPU (Ray then runs its torch on
    one thread), and Ray's usage statistics are off (``RAY_USAGE_STATS_ENABLED=0`` unless
    set). Flower's own telemetry is governed by ``FLWR_TELEMETRY_ENABLED``, read when
    ``flwr`` is imported. Flower's INFO log lines are hidden unless ``verbose``. Returns a
    :class:`FlowerRun` as :func:`run_inprocess` does. Flower 1.41 marks its
    ``run_simulation`` deprecated (in favour of ``flwr run``) and logs a warning.
    """
    model = model_fn()
    spec = algorithm_spec(algorithm, model, cfg)
    if n_clients < 1:
        raise ValueError(f"n_clients must be positive, got {n_clients}")
    if importlib.util.find_spec("ray") is None:  # else Flower exits the interpreter
        raise ImportError("Flower's simulation engine needs Ray: pip install -r requirements-flower.txt "
                          '(or pip install "flwr[simulation]==1.41.0")')
    from flwr.simulation import run_simulation as flwr_run_simulation
    config = _ray_defaults(n_clients)
    for key, value in (backend_config or {}).items():
        config[key] = {**config.get(key, {}), **value}
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

    finished: dict = {}
    inner = server_app(model_fn, cfg, algorithm, n_clients=n_clients,
                       on_result=lambda result, strategy: finished.update(result=result,
                                                                          strategy=strategy))
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        inner(grid, context)
        finished["arrays"] = context.state["arrays"]
        if spec.local:
            finished["local"] = fetch_local(grid, finished["strategy"].nodes)

    level = _log.level
    if not verbose:
        _log.setLevel(logging.WARNING)
    try:
        flwr_run_simulation(server, client_app(model_fn, data_fn, cfg, algorithm), n_clients,
                            backend_config=config)
    finally:
        _log.setLevel(level)
    if "arrays" not in finished:
        raise RuntimeError("the simulation ended before the ServerApp finished")
    device = next(model.parameters()).device
    state = {n: p.detach().clone() for n, p in model.named_parameters()}
    state.update(from_record(finished["arrays"], device))
    local = {}
    if spec.local:
        per_client = [{**state, **(from_record(r, device) if r is not None else {})}
                      for r in finished["local"]]
        local = {n: torch.stack([p[n] for p in per_client]) for n in spec.local}
    return FlowerRun(state, local, finished["result"], finished["strategy"])
