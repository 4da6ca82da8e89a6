"""The book's federated algorithms on Flower (``flwr``; Beutel et al., 2020).

FedAvg, D-SGD, FedRep, FedPer and LG-FedAvg -- the algorithms of :mod:`replearn.neural` that
share parameters -- with Flower doing the orchestration: the server's round loop, message
passing and the weighted average are Flower's (``flwr.serverapp.strategy.FedAvg``). What
each algorithm shares, keeps local and trains, the client sampling, the minibatch plans and
the local SGD are the engine's public pieces (:func:`replearn.neural.algorithm_spec`,
:func:`replearn.neural.plan_round`, :class:`replearn.neural.LocalSGD`), the code behind
:func:`replearn.neural.run_spec`, so a Flower run reproduces the in-process one.

- :func:`client_app`: a Flower ``ClientApp``. ``train`` runs the algorithm's local phases
  on the node's data; local parameters (FedRep's and FedPer's heads, Collins et al., 2021,
  Alg. 1; LG-FedAvg's bodies) stay on the node, in its ``Context.state``, and only the
  shared ones are sent back. ``evaluate`` tests the server's shared
  parameters with the node's own local ones; ``query`` reports the node's partition id and
  training- and test-set sizes (and, when asked with ``send-local``, its local parameters).
- :class:`ReplayFedAvg`: Flower's FedAvg (McMahan et al., 2017): the n_i-weighted average of
  the returned parameters. It draws each round's clients and minibatch orders with
  ``plan_round`` from one generator seeded with ``cfg.seed``, as ``run_spec`` does, and sends
  the batch indices with the round's configuration. It screens every reply first (the
  contract below).
- :func:`server_app`: a Flower ``ServerApp`` that waits for the nodes, asks each for its
  partition id and data sizes (:func:`discover`), then runs :class:`ReplayFedAvg` for
  ``cfg.rounds`` rounds.
- :func:`run_inprocess`: runs the two apps in this process through :class:`InProcessGrid`,
  a ``Grid`` that hands each message to the ``ClientApp`` (no Ray, no network).
- :func:`run_simulation`: runs the same two apps on Flower's simulation engine
  (``flwr.simulation.run_simulation``, Ray backend): the ``ClientApp`` in Ray actors, one
  virtual SuperNode per client. Needs the ``simulation`` extra (Ray).

**Fault contract.** One faulty node (crashing, hanging, slow, returning NaN, blown-up,
mis-shaped or duplicated replies) can neither corrupt the global model nor stop the run. A
*hostile* node is only partly defended against; precisely (see *What is not defended*):

- *Sizes.* The weights of both averages are the sizes each node reported at discovery,
  before training (n_i for the parameters and the training loss, the test-set size for
  the evaluation metrics); the ``num-examples`` a reply claims is ignored (a mismatch is
  logged). Discovery itself is trusted: a node missing or malformed there is an error, and
  so is a size above ``max_size_ratio`` (default :data:`MAX_SIZE_RATIO`) times the median
  of the other nodes' sizes, so one over-report cannot take nearly all the weight.
- *Screening.* A training reply enters the average only if it carries no error, exactly
  one ``ArrayRecord`` with the global parameters' names and, for each, the global dtype and
  shape both in its metadata and in its decoded payload, only finite values, a plausible
  magnitude, and a finite ``train_loss``. An evaluation reply enters the average only if it
  carries no error and a finite ``loss >= 0`` and an ``accuracy`` in [0, 1]. Other metric
  keys are ignored, so replies never disagree on keys inside Flower's aggregation.
- *Plausible magnitude.* For every shared tensor, the client's value theta_i and the
  global value theta sent that round must satisfy
  ``||theta_i - theta||_2 <= max_update_ratio * max(||theta||_2, 1)``
  (default :data:`MAX_UPDATE_RATIO`; ``math.inf`` turns the rule off). Local SGD with the
  book's step sizes moves each tensor by less than its norm; a blown-up update (1e30) is
  far outside. This rule is a sanity bound, not a defence against a client that crafts
  plausible updates: see *Robust aggregation*.
- *Replies bound to their messages.* A reply counts for node N only if it answers the
  message the server sent to N (its ``reply_to_message_id``); a reply forged with N's id
  that answers another message is dropped (recorded with client None) and cannot take N's
  slot, so N's genuine reply still counts. At discovery such a reply is an error.
- *Dropping.* Every reply that fails the screening, raises in ``train`` or ``evaluate``,
  comes from a node that was not asked, or does not arrive within ``round_timeout`` is left
  out of that round's average and recorded in ``strategy.dropped[round]`` as a
  :class:`Dropped` (client, stage, reason), with a warning in the ``flwr`` log. The
  round's average is then the size-weighted average over the kept replies; a round that
  keeps no training reply leaves the global model unchanged.
- *Robust aggregation.* ``aggregator`` (of :func:`server_app`, :func:`run_inprocess`,
  :func:`run_simulation`) replaces the weighted mean of the screened training replies by
  one of Flower's own robust strategies: ``FedMedian()`` (coordinate-wise median),
  ``FedTrimmedAvg(beta=...)`` (coordinate-wise trimmed mean) or
  ``Krum(num_malicious_nodes=f)`` (the reply closest to its neighbours). With one attacker
  among at least four replies (Krum: n >= 2f + 3), a sign-flipped or crafted update that
  passes the magnitude rule then cannot move any coordinate of the global model outside
  the range of the honest replies (median, trimmed mean with ``beta >= 1/n``), or is never
  chosen (Krum); ``tests/test_flower.py`` checks the three against both attacks. These
  aggregates ignore the sizes, so they do not reproduce the in-process engine's runs.
- *Timeouts.* The server waits at most ``connect_timeout`` seconds (default
  :data:`CONNECT_TIMEOUT`) for the nodes to connect and ``round_timeout`` seconds (default
  :data:`ROUND_TIMEOUT`) for each exchange of messages. Too few nodes, or a node silent at
  discovery, is a ``TimeoutError`` that says what to change; a training or evaluation reply
  that misses the round's deadline is dropped as above. Training and evaluation messages
  go to the nodes found at discovery (evaluation only to those with test data), without
  Flower's waiting for nodes to be connected. On the node side every call of
  :func:`client_app` is bounded too (``call_timeout``; :func:`run_inprocess` and
  :func:`run_simulation` pass ``round_timeout``): a call that hangs is abandoned and
  answered with an error, so it cannot pin a worker (a Ray actor) and the run finishes with
  the other nodes; :class:`InProcessGrid` bounds every call of any ``ClientApp`` the same way.
- *What is not defended.* With the default weighted mean, a hostile node's crafted update
  inside the magnitude rule, or a sign flip, moves the global model by up to its weight
  share times ``max_update_ratio`` times the global norm each round: pass an ``aggregator``.
  Reply authenticity rests on the transport (Flower's node authentication): a node that
  learns another node's message id can answer in its name. Sizes at discovery are trusted
  within ``max_size_ratio``. Evaluation metrics are screened for range only: a node can
  report any accuracy in [0, 1] for itself. Nodes see the global model (no privacy).

Client data augmentation (``cfg.augment``) is not supported: in ``run_spec`` it draws from
the engine's one generator in the middle of training, which nodes cannot replay.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple
from uuid import uuid4

import numpy as np
import torch
from flwr.app import (Array, ArrayRecord, ConfigRecord, Context, Error, Message, MessageType,
                      MetricRecord, RecordDict)
from flwr.clientapp import ClientApp
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg, Result
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity
from torch import nn

from replearn import neural
from replearn.backend import make_generator
from replearn.neural import AlgorithmSpec, ClientData, LocalSGD, Params, TrainConfig, plan_round

ALGORITHMS = ("fedavg", "dsgd", "fedrep", "fedper", "lg_fedavg")
"""The engine's algorithms that share parameters, which is what a Flower server averages."""
CONNECT_TIMEOUT = 600.0
"""Default seconds the server waits for the nodes to connect."""
ROUND_TIMEOUT = 600.0
"""Default seconds the server waits for one round's replies (Flower's own default is 3600)."""
MAX_UPDATE_RATIO = 10.0
"""Default bound of the plausible-magnitude rule (module docstring)."""
CALL_TIMEOUT = ROUND_TIMEOUT
"""Default seconds one call of a node's ``ClientApp`` may take (:func:`client_app`,
:class:`InProcessGrid`): a call still running then is abandoned and answered with an error."""
MAX_SIZE_RATIO = 100.0
"""Default bound on the sizes reported at discovery: a node's training-set size may be at most
this many times the median size reported by the other nodes (module docstring)."""
_log = logging.getLogger("flwr")


def algorithm_spec(algorithm: str, model: nn.Module, cfg: TrainConfig) -> AlgorithmSpec:
    """The engine's :func:`replearn.neural.algorithm_spec` for an algorithm Flower can run
    (one of :data:`ALGORITHMS`: those that share parameters), without augmentation."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS} on Flower, got {algorithm!r} (local-only "
                         "training and fine-tuning share nothing: run them with replearn.neural)")
    if cfg.augment:
        raise ValueError("augment=True is not supported on Flower: the in-process engine draws the "
                         "augmentation from its shared generator during training")
    return neural.algorithm_spec(algorithm, model, cfg)


def to_record(params: Params, names: Sequence[str]) -> ArrayRecord:
    """The named tensors as a Flower ``ArrayRecord`` of NumPy arrays."""
    return ArrayRecord({n: Array(params[n].detach().cpu().numpy()) for n in names})


def from_record(record: ArrayRecord, device: torch.device) -> Params:
    """A Flower ``ArrayRecord`` as tensors on ``device``."""
    return {n: torch.tensor(np.asarray(a.numpy()), device=device) for n, a in record.items()}


def _check_seconds(**values: float) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")


def _bounded(call: Callable[[], object], seconds: float, what: str):
    """``call()`` run in a daemon thread and awaited at most ``seconds``; a call still running
    then raises ``TimeoutError`` naming ``what`` (the thread is abandoned: Python cannot stop
    it, but nothing waits for it any more). Exceptions of ``call`` are raised again."""
    box: dict = {}

    def target():
        try:
            box["value"] = call()
        except BaseException as ex:  # noqa: BLE001 -- handed to the waiting thread
            box["error"] = ex

    thread = threading.Thread(target=target, name=f"replearn-flower {what}", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        err = TimeoutError(f"{what} did not finish within {seconds:g} s; it was abandoned")
        err.thread = thread
        raise err
    if "error" in box:
        raise box["error"]
    return box["value"]


# --------------------------------------------------------------------------------------------
# Client side


def _data_fn_error(pid: int, ex: ValueError) -> str:
    """The message of a node whose ``data_fn(pid)`` raised ``ex``: it names the partition, since
    the client indices of ClientData's own checks count the clients of the ClientData that
    ``data_fn`` built (0 for the one client of a node), not the federation's clients."""
    reason = str(ex)
    note = ("; a client index there counts the clients of the ClientData that data_fn built, not the "
            "partitions" if re.search(r"\bclient \d", reason) else "")
    return f"partition {pid} (client {pid}): data_fn({pid}) gave invalid data: {reason}{note}"


def client_app(model_fn: Callable[[], nn.Module], data_fn: Callable[[int], ClientData],
               cfg: TrainConfig, algorithm: str, *, call_timeout: float = CALL_TIMEOUT) -> ClientApp:
    """A Flower ``ClientApp`` for ``algorithm`` ("fedavg", "dsgd" or "fedrep").

    ``model_fn()`` must build the same initial model on every node (seed it): it gives the
    architecture and the initial local parameters (FedRep's heads). ``data_fn(partition_id)``
    returns the node's data as a one-client :class:`~replearn.neural.ClientData`; the
    partition id is ``context.node_config["partition-id"]``, as in Flower's simulation.

    Every call (query, train, evaluate) runs in a helper thread and is awaited at most
    ``call_timeout`` seconds (default :data:`CALL_TIMEOUT`): a call that hangs (a stalled data
    source, a deadlock) is answered with a ``TimeoutError`` error reply instead of pinning the
    worker that runs the app (on Flower's simulation engine, a Ray actor) for ever. The node's
    ``Context.state`` is updated only by calls that finished in time, and while an abandoned
    call of a node still runs, that node answers every new message at once with an error.
    """
    _check_seconds(call_timeout=call_timeout)
    app = ClientApp()
    running: dict[int, threading.Thread] = {}  # node id -> its abandoned, still running call

    def bounded(stage: str, context: Context, work: Callable[[], tuple[Message, ArrayRecord | None]]) -> Message:
        node = context.node_id
        earlier = running.get(node)
        if earlier is not None and earlier.is_alive():
            raise TimeoutError(f"node {node} is still running an earlier call that exceeded call_timeout = "
                               f"{call_timeout:g} s; not starting its {stage}")
        running.pop(node, None)
        try:
            reply, local = _bounded(work, call_timeout, f"the {stage} call of node {node}")
        except TimeoutError as err:
            if not hasattr(err, "thread"):
                raise
            running[node] = err.thread
            raise TimeoutError(f"{err} (call_timeout = {call_timeout:g} s)") from None
        if local is not None:
            context.state["local"] = local
        return reply

    def setup(context: Context) -> tuple[nn.Module, ClientData, AlgorithmSpec, int]:
        pid = int(context.node_config["partition-id"])
        try:
            data = data_fn(pid)
        except ValueError as ex:  # e.g. ClientData's checks (a NaN pixel): say whose data they are
            raise ValueError(_data_fn_error(pid, ex)) from ex
        if data.n_clients != 1:
            raise ValueError(f"data_fn({pid}) must return one client, got {data.n_clients}")
        model = model_fn()
        return model, data, algorithm_spec(algorithm, model, cfg), pid

    def parameters(model: nn.Module, spec: AlgorithmSpec, msg: Message, context: Context, device) -> Params:
        """Initial parameters, overwritten by the server's shared ones and the node's local ones."""
        params = {n: p.detach().to(device) for n, p in model.named_parameters()}
        params.update(from_record(msg.content["arrays"], device))
        if "local" in context.state:
            params.update(from_record(context.state["local"], device))
        return params

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        return bounded("query", context, lambda: (_query(msg, context), None))

    def _query(msg: Message, context: Context) -> Message:
        _, data, _, pid = setup(context)
        info = MetricRecord({"partition-id": pid, "num-examples": int(data.train_sizes[0]),
                             "num-test-examples": int(data.test_sizes[0])})
        content = RecordDict({"info": info})
        config = msg.content.config_records.get("config")
        if config is not None and config.get("send-local") and "local" in context.state:
            content["local"] = context.state["local"]
        return Message(content, reply_to=msg)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        return bounded("train", context, lambda: _train(msg, context))

    def _train(msg: Message, context: Context) -> tuple[Message, ArrayRecord | None]:
        model, data, spec, _ = setup(context)
        params = parameters(model, spec, msg, context, data.device)
        config = msg.content["config"]
        worker = LocalSGD(model)
        loss, steps = 0.0, 0
        for k, phase in enumerate(spec.phases):
            batches = list(torch.tensor(config[f"batch-indices-{k}"], dtype=torch.int64)
                           .split(list(config[f"batch-sizes-{k}"])))
            new, loss_sum = worker.train(params, phase.trainable, data.x_train[0], data.y_train[0], batches,
                                         spec.cfg)
            params = {**params, **new}
            loss += float(loss_sum)
            steps += len(batches)
        local = to_record(params, spec.local) if spec.local else None
        metrics = MetricRecord({"train_loss": loss / steps, "num-examples": int(data.train_sizes[0])})
        return Message(RecordDict({"arrays": to_record(params, spec.shared), "metrics": metrics}),
                       reply_to=msg), local

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        return bounded("evaluate", context, lambda: (_evaluate(msg, context), None))

    def _evaluate(msg: Message, context: Context) -> Message:
        model, data, spec, _ = setup(context)
        result = neural.evaluate(model, data, parameters(model, spec, msg, context, data.device))
        metrics = MetricRecord({"accuracy": float(result.accuracy[0]), "loss": float(result.loss[0]),
                                "num-examples": int(data.test_sizes[0])})
        return Message(RecordDict({"metrics": metrics}), reply_to=msg)

    return app


# --------------------------------------------------------------------------------------------
# Server side


class Dropped(NamedTuple):
    """A reply left out of a round's average: the client (None if the sender is unknown),
    the stage ("train" or "evaluate") and why."""

    client: int | None
    stage: str
    reason: str


def _check_aggregator(aggregator) -> None:
    if aggregator is not None and (not isinstance(aggregator, FedAvg) or type(aggregator) is ReplayFedAvg
                                   or aggregator.weighted_by_key != "num-examples"
                                   or aggregator.arrayrecord_key != "arrays"):
        raise ValueError(f"aggregator must be None (the n_i-weighted mean) or one of Flower's FedAvg-family "
                         f"strategies with the default record keys, e.g. flwr.serverapp.strategy.FedMedian(), "
                         f"FedTrimmedAvg(beta=0.25) or Krum(num_malicious_nodes=1); got {aggregator!r}")


def _number(metrics: MetricRecord, key: str) -> float:
    """``metrics[key]`` as a finite float (ValueError naming the key otherwise)."""
    value = metrics.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"metric {key!r} must be a finite number, got {value!r}")
    return float(value)


class ReplayFedAvg(FedAvg):
    """Flower's FedAvg with the client sampling and minibatch orders of the in-process
    engine, and the screening of the module docstring's fault contract.

    ``nodes[i]`` is the Flower node id of client i, ``train_sizes[i]`` its n_i and
    ``test_sizes[i]`` its test-set size, as reported at discovery; they are the weights of
    the averages. ``spec`` is the algorithm's :class:`replearn.neural.AlgorithmSpec`. Each
    round draws the sampled clients and their batches for every phase with
    :func:`replearn.neural.plan_round` from one generator seeded with ``spec.cfg.seed``, as
    :func:`replearn.neural.run_spec` does, and sends each client its batches in its
    ConfigRecord. Flower's ``FedAvg.aggregate_train`` averages the kept replies.
    ``participants[t]`` lists round t's sampled clients; ``dropped[t]`` the :class:`Dropped`
    replies of round t. ``round_timeout``: seconds to wait for a round's replies (pass it
    to ``start``, as :func:`server_app` does); ``max_update_ratio``: the plausible-magnitude
    bound.
    """

    def __init__(self, nodes: Sequence[int], train_sizes: Sequence[int], test_sizes: Sequence[int],
                 spec: AlgorithmSpec, *, round_timeout: float = ROUND_TIMEOUT,
                 max_update_ratio: float = MAX_UPDATE_RATIO, aggregator: FedAvg | None = None):
        if len(nodes) != len(train_sizes) or len(nodes) != len(test_sizes) or not nodes:
            raise ValueError(f"need one train size and one test size per node, got {len(nodes)} nodes, "
                             f"{len(train_sizes)} train sizes and {len(test_sizes)} test sizes")
        _check_seconds(round_timeout=round_timeout)
        if isinstance(max_update_ratio, bool) or not isinstance(max_update_ratio, (int, float)) \
                or not max_update_ratio > 0:
            raise ValueError(f"max_update_ratio must be positive (math.inf turns the magnitude rule "
                             f"off), got {max_update_ratio!r}")
        _check_aggregator(aggregator)
        M = len(nodes)
        super().__init__(fraction_train=spec.cfg.participation, min_train_nodes=1, min_evaluate_nodes=M,
                         min_available_nodes=M)
        self.nodes = list(nodes)
        self.client_of = {node: i for i, node in enumerate(self.nodes)}
        self.train_sizes = [int(n) for n in train_sizes]
        self.test_sizes = [int(n) for n in test_sizes]
        self.spec = spec
        self.round_timeout = float(round_timeout)
        self.max_update_ratio = float(max_update_ratio)
        self.generator = make_generator(spec.cfg.seed)
        self.aggregator = aggregator
        self.participants: list[tuple[int, ...]] = []
        self.dropped: dict[int, list[Dropped]] = {}
        self._global: dict[str, np.ndarray] = {}
        self._asked: dict[str, list[int]] = {"train": [], "evaluate": []}
        self._sent: dict[str, dict[int, Message]] = {"train": {}, "evaluate": {}}

    def start(self, grid: Grid, initial_arrays: ArrayRecord, num_rounds: int = 3,
              timeout: float | None = None, **kwargs) -> Result:
        """Flower's ``Strategy.start`` with ``timeout`` defaulting to ``round_timeout``."""
        return super().start(grid, initial_arrays, num_rounds,
                             self.round_timeout if timeout is None else timeout, **kwargs)

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        plan = plan_round(self.train_sizes, self.spec.phases, self.spec.cfg, self.generator)
        self.participants.append(plan.clients)
        self._global = {n: a.numpy() for n, a in arrays.items()}
        self._asked["train"] = list(plan.clients)
        messages = []
        for i in plan.clients:
            client_config = ConfigRecord({**config, "server-round": server_round})
            for k, batches in enumerate(plan.batches[i]):
                client_config[f"batch-indices-{k}"] = torch.cat(batches).tolist()
                client_config[f"batch-sizes-{k}"] = [len(b) for b in batches]
            content = RecordDict({self.arrayrecord_key: arrays, self.configrecord_key: client_config})
            messages.append(Message(content, dst_node_id=self.nodes[i], message_type=MessageType.TRAIN))
        self._sent["train"] = dict(zip(plan.clients, messages))
        return messages

    def _screen_train(self, client: int, msg: Message) -> RecordDict:
        """The reply's content re-weighted by the discovered n_i (ValueError if it must be dropped)."""
        arrays, metrics = msg.content.array_records, msg.content.metric_records
        if len(arrays) != 1 or len(metrics) != 1:
            raise ValueError(f"expected one ArrayRecord and one MetricRecord, got {len(arrays)} and "
                             f"{len(metrics)}")
        record = next(iter(arrays.values()))
        if set(record) != set(self._global):
            raise ValueError(f"parameters {sorted(record)} do not match the global ones "
                             f"{sorted(self._global)}")
        for name, array in record.items():
            glob = self._global[name]
            if (tuple(array.shape), array.dtype) != (glob.shape, str(glob.dtype)):
                raise ValueError(f"{name}: metadata {array.dtype} {tuple(array.shape)} does not match the "
                                 f"global parameter ({glob.dtype} {glob.shape})")
            try:
                value = array.numpy()
            except Exception as ex:  # noqa: BLE001 -- whatever the bytes are, they are not the array
                raise ValueError(f"{name}: the payload cannot be decoded ({type(ex).__name__}: {ex})") from ex
            if value.shape != glob.shape or value.dtype != glob.dtype:
                raise ValueError(f"{name}: the payload holds {value.dtype} {value.shape}, its metadata says "
                                 f"{array.dtype} {tuple(array.shape)}")
            if not np.isfinite(value).all():
                raise ValueError(f"{name}: non-finite values (NaN or inf)")
            glob64 = glob.astype(np.float64)
            change = float(np.linalg.norm(value.astype(np.float64) - glob64))
            bound = self.max_update_ratio * max(float(np.linalg.norm(glob64)), 1.0)
            if not change <= bound:
                raise ValueError(f"{name}: implausible magnitude: the update moves it by {change:.3g}, more "
                                 f"than max_update_ratio * max(|global|, 1) = {bound:.3g}")
        reported = next(iter(metrics.values()))
        loss = _number(reported, "train_loss")
        claimed = reported.get(self.weighted_by_key)
        if claimed != self.train_sizes[client]:
            _log.warning("client %d claims %s = %r, discovery reported %d: weighting by %d", client,
                         self.weighted_by_key, claimed, self.train_sizes[client], self.train_sizes[client])
        return RecordDict({self.arrayrecord_key: record, "metrics": MetricRecord(
            {"train_loss": loss, self.weighted_by_key: self.train_sizes[client]})})

    def _screen_evaluate(self, client: int, msg: Message) -> RecordDict:
        """The reply's metrics re-weighted by the discovered test size (ValueError if dropped)."""
        metrics = msg.content.metric_records
        if len(metrics) != 1:
            raise ValueError(f"expected one MetricRecord, got {len(metrics)}")
        reported = next(iter(metrics.values()))
        accuracy, loss = _number(reported, "accuracy"), _number(reported, "loss")
        if not (0 <= accuracy <= 1 and loss >= 0):
            raise ValueError(f"accuracy {accuracy} must lie in [0, 1] and loss {loss} be >= 0")
        return RecordDict({"metrics": MetricRecord(
            {"accuracy": accuracy, "loss": loss, self.weighted_by_key: self.test_sizes[client]})})

    def _kept(self, server_round: int, stage: str, replies: Iterable[Message]) -> list[Message]:
        """The screened replies of one stage; the others are recorded in ``dropped``."""
        screen = self._screen_train if stage == "train" else self._screen_evaluate
        waiting = set(self._asked[stage])
        kept = []
        for msg in replies:
            client = self.client_of.get(msg.metadata.src_node_id)
            sent = self._sent[stage].get(client)
            answers = msg.metadata.reply_to_message_id
            if sent is not None and sent.metadata.message_id and answers != sent.metadata.message_id:
                # a reply under node N's id that answers another message than the one sent to N:
                # forged (or misrouted); it must not take N's slot, so N's genuine reply still counts
                self._drop(server_round, None, stage,
                           f"a reply claiming to come from node {msg.metadata.src_node_id} (client {client}) "
                           f"answers message {answers!r}, not the message sent to that node: forged or "
                           f"misrouted")
                continue
            try:
                if client not in waiting:
                    raise ValueError(f"node {msg.metadata.src_node_id} was not asked or replied twice")
                waiting.discard(client)
                if msg.has_error():
                    raise ValueError(f"the client failed: {msg.error.reason}")
                content = screen(client, msg)
            except Exception as ex:  # noqa: BLE001 -- any fault in one reply drops that reply only
                reason = (str(ex) if isinstance(ex, ValueError)
                          else f"malformed reply ({type(ex).__name__}: {ex})")
                self._drop(server_round, client, stage, reason)
                continue
            kept.append(Message(content=content, metadata=msg.metadata))
        for client in sorted(waiting):
            self._drop(server_round, client, stage,
                       f"no reply within round_timeout = {self.round_timeout:g} s")
        return kept

    def _drop(self, server_round: int, client: int | None, stage: str, reason: str) -> None:
        self.dropped.setdefault(server_round, []).append(Dropped(client, stage, reason))
        _log.warning("round %d: dropped the %s reply of client %s: %s", server_round, stage, client, reason)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        kept = self._kept(server_round, "train", replies)
        if self.aggregator is not None:
            return self.aggregator.aggregate_train(server_round, kept)
        return super().aggregate_train(server_round, kept)

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        """Evaluate on the rounds ``run_spec`` evaluates, on every node found at discovery
        that has test data (without Flower's waiting for nodes to be connected)."""
        cfg = self.spec.cfg
        evaluated = not server_round % cfg.eval_every or server_round == cfg.rounds
        self._asked["evaluate"] = [i for i, n in enumerate(self.test_sizes) if n > 0 and evaluated]
        content = RecordDict({self.arrayrecord_key: arrays,
                              self.configrecord_key: ConfigRecord({**config, "server-round": server_round})})
        messages = [Message(content, dst_node_id=self.nodes[i], message_type=MessageType.EVALUATE)
                    for i in self._asked["evaluate"]]
        self._sent["evaluate"] = dict(zip(self._asked["evaluate"], messages))
        return messages

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return super().aggregate_evaluate(server_round, self._kept(server_round, "evaluate", replies))


def wait_for_nodes(grid: Grid, n_nodes: int, *, timeout: float = CONNECT_TIMEOUT) -> list[int]:
    """The ids of the ``n_nodes`` nodes connected to ``grid``, waiting up to ``timeout``
    seconds for them to connect (``TimeoutError`` then; ``ValueError`` if more are connected)."""
    _check_seconds(connect_timeout=timeout)
    deadline = time.monotonic() + timeout
    while len(nodes := list(grid.get_node_ids())) < n_nodes:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"only {len(nodes)} of the n_clients = {n_nodes} nodes connected within "
                               f"connect_timeout = {timeout:g} s: start the missing SuperNodes, pass "
                               f"n_clients={len(nodes)}, or wait longer with a larger connect_timeout")
        _log.info("waiting for nodes to connect: %d of %d", len(nodes), n_nodes)
        time.sleep(min(1.0, left))
    if len(nodes) > n_nodes:
        raise ValueError(f"{len(nodes)} nodes are connected but n_clients = {n_nodes}: pass "
                         f"n_clients={len(nodes)} or stop the extra SuperNodes")
    return nodes


def discover(grid: Grid, n_clients: int | None = None, *, connect_timeout: float = CONNECT_TIMEOUT,
             timeout: float = ROUND_TIMEOUT,
             max_size_ratio: float = MAX_SIZE_RATIO) -> tuple[list[int], list[int], list[int]]:
    """Ask every node for its partition id, training-set and test-set size; returns the node
    ids and both sizes ordered by partition id, which must be 0, ..., M-1. With
    ``n_clients``, first wait (up to ``connect_timeout`` seconds) until that many nodes are
    connected; each node must reply within ``timeout`` seconds. The sizes become the weights
    of the averages, so a node that does not reply or replies malformed is an error here, and
    so is a node whose training-set (or test-set) size exceeds ``max_size_ratio`` (default
    :data:`MAX_SIZE_RATIO`; ``math.inf`` turns the rule off) times the median of the other
    nodes' sizes (an over-report would take nearly all the weight)."""
    _check_seconds(timeout=timeout)
    if isinstance(max_size_ratio, bool) or not isinstance(max_size_ratio, (int, float)) \
            or not max_size_ratio >= 1:
        raise ValueError(f"max_size_ratio must be a number >= 1 (math.inf turns the size rule off), got "
                         f"{max_size_ratio!r}")
    node_ids = (list(grid.get_node_ids()) if n_clients is None
                else wait_for_nodes(grid, n_clients, timeout=connect_timeout))
    if not node_ids:
        raise ValueError("no node is connected to the grid")
    queries = [Message(RecordDict(), dst_node_id=n, message_type=MessageType.QUERY) for n in node_ids]
    replies = grid.send_and_receive(queries, timeout=timeout)
    sent = {q.metadata.dst_node_id: q.metadata.message_id for q in queries}
    found: dict[int, tuple[int, int, int]] = {}
    for msg in replies:
        node = msg.metadata.src_node_id
        if node not in node_ids or any(node == f[0] for f in found.values()):
            raise ValueError(f"unexpected discovery reply from node {node}")
        if sent.get(node) and msg.metadata.reply_to_message_id != sent[node]:
            raise ValueError(f"a discovery reply claiming to come from node {node} answers another message "
                             f"than the one sent to it: forged or misrouted; check the nodes' authentication")
        if msg.has_error():
            raise ValueError(f"node {node} did not report its partition: {msg.error.reason}")
        info = msg.content.metric_records.get("info")
        values = [info.get(k) if info is not None else None
                  for k in ("partition-id", "num-examples", "num-test-examples")]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in values) \
                or values[1] < 1 or values[2] < 0:
            raise ValueError(f"node {node} must report integers partition-id, num-examples >= 1 and "
                             f"num-test-examples >= 0, got {dict(info) if info is not None else None}")
        pid, n_train, n_test = values
        if pid in found:
            raise ValueError(f"nodes {found[pid][0]} and {node} both report partition {pid}")
        found[pid] = (node, n_train, n_test)
    missing = sorted(set(node_ids) - {f[0] for f in found.values()})
    if missing:
        raise TimeoutError(f"nodes {missing} did not answer the discovery query within {timeout:g} s")
    if sorted(found) != list(range(len(node_ids))):
        raise ValueError(f"{len(node_ids)} nodes must report partitions 0..{len(node_ids) - 1}, "
                         f"got {sorted(found)}")
    ordered = [found[i] for i in range(len(found))]
    for column, what in ((1, "num-examples"), (2, "num-test-examples")):
        for i, f in enumerate(ordered):
            others = [g[column] for j, g in enumerate(ordered) if j != i]
            if others and f[column] > max_size_ratio * max(float(np.median(others)), 1.0):
                raise ValueError(f"node {f[0]} (partition {i}) reports {what} = {f[column]}, more than "
                                 f"max_size_ratio = {max_size_ratio:g} times the median {np.median(others):g} of "
                                 f"the other nodes: an over-report would take nearly all the weight of the "
                                 f"average; check that node, or pass a larger max_size_ratio if the partition "
                                 f"is really that unbalanced")
    return [f[0] for f in ordered], [f[1] for f in ordered], [f[2] for f in ordered]


def server_app(model_fn: Callable[[], nn.Module], cfg: TrainConfig, algorithm: str, *,
               n_clients: int | None = None, connect_timeout: float = CONNECT_TIMEOUT,
               round_timeout: float = ROUND_TIMEOUT, max_update_ratio: float = MAX_UPDATE_RATIO,
               max_size_ratio: float = MAX_SIZE_RATIO, aggregator: FedAvg | None = None,
               on_result: Callable[[Result, ReplayFedAvg], None] | None = None) -> ServerApp:
    """A Flower ``ServerApp`` running ``algorithm`` for ``cfg.rounds`` rounds from the
    parameters of ``model_fn()`` on ``n_clients`` nodes (waits up to ``connect_timeout``
    seconds for them to connect; default: the nodes connected at the start), waiting up to
    ``round_timeout`` seconds for each round's replies, with the fault contract of the module
    docstring (``max_size_ratio``: the discovery size rule; ``aggregator``: a robust
    aggregate of Flower's in place of the weighted mean). The final shared parameters are
    stored in ``context.state["arrays"]``; ``on_result(result, strategy)`` is called at the end."""
    _check_seconds(connect_timeout=connect_timeout, round_timeout=round_timeout)
    _check_aggregator(aggregator)
    if n_clients is not None and (isinstance(n_clients, bool) or not isinstance(n_clients, int)
                                  or n_clients < 1):
        raise ValueError(f"n_clients must be a positive int or None, got {n_clients!r}")
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        model = model_fn()
        spec = algorithm_spec(algorithm, model, cfg)
        nodes, train_sizes, test_sizes = discover(grid, n_clients, connect_timeout=connect_timeout,
                                                  timeout=round_timeout, max_size_ratio=max_size_ratio)
        strategy = ReplayFedAvg(nodes, train_sizes, test_sizes, spec, round_timeout=round_timeout,
                                max_update_ratio=max_update_ratio, aggregator=aggregator)
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
    Flower's simulation runtime, an exception in the ``ClientApp`` becomes an error reply.

    Every call is bounded: ``send_and_receive(..., timeout=s)`` treats the nodes as if they ran
    in parallel, each call awaited at most ``s`` seconds (``call_timeout``, default
    :data:`CALL_TIMEOUT`, for messages pushed without a timeout); a call still running then
    is abandoned in its daemon thread and gets no reply, as a late reply is lost on a real
    grid. While a node's abandoned call still runs, a new message to that node first waits
    for it (at most the same time) and otherwise gets no reply either, so a node that never
    returns costs each exchange at most twice the timeout and the run finishes with the others."""

    def __init__(self, app: ClientApp, n_nodes: int, *, run_id: int = 1, call_timeout: float = CALL_TIMEOUT):
        _check_seconds(call_timeout=call_timeout)
        self.call_timeout = float(call_timeout)
        self._busy: dict[int, threading.Thread] = {}
        self.app = app
        self._run = Run.create_empty(run_id)
        self.contexts = {}
        for i in range(n_nodes):
            node = (uuid4().int >> 65) + 1
            self.contexts[node] = Context(run_id=run_id, node_id=node, state=RecordDict(),
                                          node_config={"partition-id": i, "num-partitions": n_nodes},
                                          run_config={})
        self._replies: dict[str, tuple[Message, float]] = {}

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

    def push_messages(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[str]:
        """Deliver each message to its node's ``ClientApp`` (a call of at most ``timeout``
        seconds, default ``call_timeout``); returns the message ids."""
        seconds = self.call_timeout if timeout is None else timeout
        ids = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = str(uuid4())  # as Flower's InMemoryGrid does
            ids.append(msg.metadata.message_id)
            node = msg.metadata.dst_node_id
            earlier = self._busy.get(node)
            if earlier is not None:
                earlier.join(seconds)
                if earlier.is_alive():
                    continue  # the node is still stuck in an earlier call: no reply
                del self._busy[node]
            try:
                reply = _bounded(lambda m=msg, c=self.contexts[node]: self.app(m, c), seconds,
                                 f"node {node}'s {msg.metadata.message_type} call")
            except TimeoutError as ex:
                if hasattr(ex, "thread"):
                    self._busy[node] = ex.thread
                    continue  # abandoned: no reply, as a late reply on a real grid
                reply = ex
            except Exception as ex:  # noqa: BLE001 -- reported to the strategy, as Flower does
                reply = ex
            if isinstance(reply, Exception):
                reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION,
                                      reason=f"{type(reply).__name__}: {reply}"), reply_to=msg)
            self._replies[msg.metadata.message_id] = reply
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        return [self._replies.pop(i) for i in message_ids if i in self._replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        return self.pull_messages(self.push_messages(messages, timeout=timeout))

    def set_server_identity(self) -> None:
        """Set the process's task identity as Flower's runtime does for a ``ServerApp``
        (``flwr.server.compat.app``): this grid's run, the SuperLink's node. Flower's
        ``Message`` reads it, so a message made outside :meth:`run_server` needs it first."""
        TaskIdentity.task_id, TaskIdentity.run_id = 1, self.run.run_id
        TaskIdentity.node_id = SUPERLINK_NODE_ID

    def run_server(self, app: ServerApp) -> Context:
        """Run the ``ServerApp`` on this grid, with the task identity Flower's runtime sets
        (:meth:`set_server_identity`); returns the server's ``Context``."""
        self.set_server_identity()
        context = Context(run_id=self.run.run_id, node_id=SUPERLINK_NODE_ID, node_config={},
                          state=RecordDict(), run_config={})
        app(self, context)
        return context


@dataclass(frozen=True)
class FlowerRun:
    """Outcome of :func:`run_inprocess` and :func:`run_simulation`, laid out like
    :class:`replearn.neural.FedResult`: ``state`` the server's parameters (initial values for
    local names), ``local`` the nodes' local parameters stacked along a first client axis,
    ``result`` Flower's ``Result`` (per-round metrics) and ``strategy`` (participants,
    dropped replies)."""

    state: Params
    local: Params
    result: Result
    strategy: ReplayFedAvg


def run_inprocess(model_fn: Callable[[], nn.Module], clients: ClientData, cfg: TrainConfig,
                  algorithm: str, *, app: ClientApp | None = None, connect_timeout: float = CONNECT_TIMEOUT,
                  round_timeout: float = ROUND_TIMEOUT, max_update_ratio: float = MAX_UPDATE_RATIO,
                  max_size_ratio: float = MAX_SIZE_RATIO, aggregator: FedAvg | None = None) -> FlowerRun:
    """Run ``algorithm`` on Flower with one node per client of ``clients`` in this process:
    :func:`server_app` (with the given timeouts, ``max_update_ratio``, ``max_size_ratio`` and
    ``aggregator``) drives :func:`client_app` (or ``app``) through :class:`InProcessGrid`;
    every call of a node is bounded by ``round_timeout``."""
    model = model_fn()
    spec = algorithm_spec(algorithm, model, cfg)
    _check_seconds(round_timeout=round_timeout)
    # ClientData's checks again, here, with the federation's client indices: a tensor changed in
    # place since (a NaN pixel) would otherwise be reported by its node as the one "client 0"
    clients = clients.subset(range(clients.n_clients))
    app = app or client_app(model_fn, lambda i: clients.subset([i]), cfg, algorithm, call_timeout=round_timeout)
    grid = InProcessGrid(app, clients.n_clients, call_timeout=round_timeout)
    finished = {}
    server = server_app(model_fn, cfg, algorithm, n_clients=clients.n_clients,
                        connect_timeout=connect_timeout, round_timeout=round_timeout,
                        max_update_ratio=max_update_ratio, max_size_ratio=max_size_ratio, aggregator=aggregator,
                        on_result=lambda result, strategy: finished.update(result=result,
                                                                          strategy=strategy))
    context = grid.run_server(server)
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


def fetch_local(grid: Grid, nodes: Sequence[int], *,
                timeout: float = ROUND_TIMEOUT) -> list[ArrayRecord | None]:
    """Ask each node in ``nodes`` for the local parameters it keeps (FedRep's head) with a
    ``query`` message; returns one ``ArrayRecord`` per node, in order (None for a node that
    has none, replied with an error or did not reply within ``timeout`` seconds)."""
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
                   backend_config: dict | None = None, verbose: bool = False,
                   connect_timeout: float = CONNECT_TIMEOUT, round_timeout: float = ROUND_TIMEOUT,
                   max_update_ratio: float = MAX_UPDATE_RATIO, max_size_ratio: float = MAX_SIZE_RATIO,
                   aggregator: FedAvg | None = None) -> FlowerRun:
    """Run ``algorithm`` on Flower's simulation engine with ``n_clients`` virtual SuperNodes.

    The apps are :func:`server_app` (with the given timeouts, ``max_update_ratio``,
    ``max_size_ratio`` and ``aggregator``) and :func:`client_app` (each call bounded by
    ``round_timeout``, so a node that hangs frees its Ray actor and the run finishes), run by
    ``flwr.simulation.run_simulation`` with its Ray backend: the
    ``ServerApp`` runs in a thread of this process, the ``ClientApp`` in a pool of Ray actors
    (one per CPU given to Ray), and node i's data is ``data_fn(i)``
    (``context.node_config["partition-id"]``), called in the actor. ``model_fn``, ``data_fn``
    and ``cfg`` are pickled to the actors (with cloudpickle, for every message: let
    ``data_fn`` load from disk rather than close over large tensors). FedRep's heads, which
    stay on the nodes, are fetched after training with one ``query`` message per node
    (:func:`fetch_local`).

    ``backend_config`` updates the defaults key by key (``init_args``, ``client_resources``,
    ``actor``): by default Ray starts a new local instance without dashboard on
    ``min(n_clients, cpu_count)`` CPUs (raise ``init_args["num_cpus"]`` with
    ``client_resources["num_cpus"]``), each client takes one CPU (Ray then runs its torch on
    one thread), and Ray's usage statistics are off (``RAY_USAGE_STATS_ENABLED=0`` unless
    set). Flower's own telemetry is governed by ``FLWR_TELEMETRY_ENABLED``, read when
    ``flwr`` is imported. Flower's INFO log lines are hidden unless ``verbose``. Returns a
    :class:`FlowerRun` as :func:`run_inprocess` does; an exception in the ``ServerApp``
    (e.g. the ``TimeoutError`` of :func:`discover`) is raised again here as a
    ``RuntimeError`` from it. Flower 1.41 marks its ``run_simulation`` deprecated (in favour
    of ``flwr run``) and logs a warning.
    """
    model = model_fn()
    spec = algorithm_spec(algorithm, model, cfg)
    if isinstance(n_clients, bool) or not isinstance(n_clients, int) or n_clients < 1:
        raise ValueError(f"n_clients must be positive, got {n_clients!r}")
    if importlib.util.find_spec("ray") is None:  # else Flower exits the interpreter
        raise ImportError("Flower's simulation engine needs Ray: pip install -r requirements-flower.txt "
                          '(or pip install "flwr[simulation]==1.41.0")')
    from flwr.simulation import run_simulation as flwr_run_simulation
    config = _ray_defaults(n_clients)
    for key, value in (backend_config or {}).items():
        config[key] = {**config.get(key, {}), **value}
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

    finished: dict = {}
    inner = server_app(model_fn, cfg, algorithm, n_clients=n_clients, connect_timeout=connect_timeout,
                       round_timeout=round_timeout, max_update_ratio=max_update_ratio,
                       max_size_ratio=max_size_ratio, aggregator=aggregator,
                       on_result=lambda result, strategy: finished.update(result=result,
                                                                          strategy=strategy))
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        try:
            inner(grid, context)
        except Exception as ex:
            finished["error"] = ex
            raise
        finished["arrays"] = context.state["arrays"]
        if spec.local:
            finished["local"] = fetch_local(grid, finished["strategy"].nodes, timeout=round_timeout)

    level = _log.level
    if not verbose:
        _log.setLevel(logging.WARNING)
    try:
        flwr_run_simulation(server, client_app(model_fn, data_fn, cfg, algorithm, call_timeout=round_timeout),
                            n_clients, backend_config=config)
    finally:
        _log.setLevel(level)
    if "error" in finished:
        raise RuntimeError(f"the ServerApp failed: {finished['error']}") from finished["error"]
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
