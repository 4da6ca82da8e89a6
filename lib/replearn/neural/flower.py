"""The book's federated algorithms on Flower (``flwr``; Beutel et al., 2020).

Every algorithm of the registry :mod:`replearn.neural.algorithms` -- every name of
``algorithms.names()``, and a method a reader adds with ``algorithms.register(obj)`` -- runs
with Flower doing the orchestration: the server's round loop and the message passing are
Flower's (a ``ServerApp`` running a ``Strategy``), the algorithm's client step runs on the node
that holds the data (a ``ClientApp``), and its server step in the strategy. The steps are the
algorithm's own hooks, the ones the in-process engine's round loop calls
(:class:`replearn.neural.ClientRound`, :class:`replearn.neural.ClientUpdate`), so a Flower
run reproduces the in-process one:

- on the **node** (:func:`client_app`): ``client_update`` (its local training: FedAvg's SGD,
  FedProx's proximal steps, SCAFFOLD's corrected ones, Ditto's two models, ...) and
  ``eval_params`` (what the client is tested with); the client's own state (SCAFFOLD's control
  variate, Ditto's personal model, FedRep's head, ...) stays on the node between rounds, in its
  ``Context.state`` (Flower's "Design stateful ClientApps"): only the algorithm's upload
  leaves the node;
- on the **server** (:class:`ReplayStrategy`): ``plan_round`` (the sampled clients and their
  minibatches, drawn from one generator seeded with ``cfg.seed`` as in process), the
  algorithm's ``draw``, ``init_server``, ``broadcast`` and ``server_update`` (applied to the
  n_i-weighted mean of the uploads, summed in client order as in process).

A round: the strategy plans it, makes the algorithm's draws and broadcast, and sends every
sampled node the server's parameters and state, the broadcast, its draw and its batch
indices (tensors in ``ArrayRecord`` s, the rest in a ``ConfigRecord``; any nested dicts, lists
and tuples of tensors and numbers, :func:`pack`). The node rebuilds the round's
:class:`~replearn.neural.ClientRound` from these and its own data and state, runs
``client_update`` and replies with the upload and its loss; it keeps its new state as
*pending*. The strategy screens the replies (the fault contract below), averages the kept
uploads with weights n_i and calls ``server_update``. The next message to the node says which
of its rounds the server kept (``commit-round``), and the node commits its pending state only
if that round's upload was kept, so a dropped update leaves the node's state as if it had not
trained. On evaluated rounds every node with test data evaluates ``eval_params`` with its
state. After the last round each node sends the parameters it is evaluated with for the
algorithm's ``personal_names`` (``FedResult.local``; ``fetch_personal=False`` keeps them on
the nodes) and, if asked (``fetch_states=True``), its state (``FedResult.extras["clients"]``).
A client's state leaves its node during training only if the algorithm's ``broadcast`` reads
it (Fed-MTL's regulariser needs the round's models): the strategy hands ``broadcast`` a mapping
that fetches the sampled nodes' states on first access.

Runs return a :class:`replearn.neural.FedResult`, as the in-process engine does:

- :func:`run_inprocess` (``algorithm``, ``model``, ``clients``, ``cfg``, ``options``): the
  two apps in this process through :class:`InProcessGrid`, a ``Grid`` that hands each message
  to the ``ClientApp`` (no Ray, no network); :func:`run_simulation`: the same apps on
  Flower's simulation engine (``flwr.simulation.run_simulation``, Ray backend), one virtual
  SuperNode per client. Both resolve a registered name (or take an algorithm object) and call
  its ``run`` with a Flower *runner* (:func:`inprocess_runner`, :func:`simulation_runner`):
  ``runner(algorithm, model, clients, cfg, options, *, state, callback, workers) ->
  FedResult`` runs one algorithm's rounds on Flower, so a method built from stages (Local
  only's one long round, the +FT methods' base run then fine-tuning) runs every stage on
  Flower.
- :func:`client_app`, :func:`server_app`: the apps themselves, for ``flwr run`` and a
  deployment (the book's appendix page "Running the algorithms on Flower"). They run one
  algorithm's rounds; a method built from stages is run as its stages.

The nodes' ``model_fn`` gives the architecture; the starting parameters (the server's
``model_fn()``'s, or ``state``) are sent by the server with its first message to each node.
Each run of rounds' ``FedResult.extras["flower"]`` is a :class:`FlowerRun`: Flower's
``Result`` (per-round aggregated metrics) and the strategy (participants, dropped replies);
a method built from stages keeps its stages' results as in process. The iterates,
``train_loss``, ``test_accuracy``, ``participants``, ``final``, ``local`` and the server
state are the in-process run's bit for bit when the nodes compute as the engine does (one
intra-op thread on a CPU, which :func:`run_inprocess` sets; ``cfg.vmap_clients = 1``);
otherwise to float rounding.

**Fault contract.** One faulty node (crashing, hanging, slow, returning NaN, blown-up,
mis-shaped or duplicated replies) can neither corrupt the server's model nor stop the run. A
*hostile* node is only partly defended against; precisely (see *What is not defended*):

- *Sizes.* The weights of both averages are the sizes each node reported at discovery,
  before training (n_i for the uploads and the training loss, the test-set size for the
  evaluation metrics); the ``num-examples`` a reply claims is ignored (a mismatch is
  logged). Discovery itself is trusted: a node missing or malformed there is an error, and
  so is a size above ``max_size_ratio`` (default :data:`MAX_SIZE_RATIO`) times the median
  of the other nodes' sizes, so one over-report cannot take nearly all the weight.
- *Screening.* A training reply enters the average only if it carries no error, exactly
  one ``ArrayRecord`` (the upload) whose arrays' metadata and decoded payloads agree, only
  finite values, an upload named like a model parameter with that parameter's dtype and
  shape, the algorithm's upload (its names, dtypes and shapes, the same every round as for
  every registered method: learned from the replies, the one most replies of a round carry,
  fixed for the run once a majority of at least two replies agrees on it; while it is not
  fixed, a round whose replies disagree with no majority keeps none of them, and a server
  step that fails on the kept uploads drops them), a plausible magnitude, and finite
  ``train_loss`` and ``loss-sum`` and an ``n-steps`` count. An evaluation reply enters the
  average only if it carries no error, a finite ``loss >= 0`` and an ``accuracy`` in [0, 1].
  Other metric keys are ignored. A client state a ``broadcast`` reads must be finite and have
  the form (nesting, dtypes, shapes) of the algorithm's ``init_client`` or the one most of the
  round's states have; a node whose state is missing or fails is left out of that round's
  training. The parameters fetched after the last round must be the personal names with the
  global dtypes and shapes, finite (else that client's ``local`` entry is NaN), and fetched
  states obey the rule of the broadcast's.
- *Plausible magnitude.* For an upload tensor named like a parameter, the client's value
  theta_i and the global value theta sent that round must satisfy
  ``||theta_i - theta||_2 <= max_update_ratio * max(||theta||_2, 1)`` (default
  :data:`MAX_UPDATE_RATIO`; ``math.inf`` turns the rule off). For any other upload tensor
  (SCAFFOLD's control variates), with at least three replies, its distance to the replies'
  coordinate-wise median m must be at most ``max_update_ratio * max(||m||_2, median
  distance, 1)``. Local SGD with the book's step sizes moves each tensor by less than its
  norm; a blown-up update (1e30) is far outside. A sanity bound, not a defence against a
  client that crafts plausible updates: see *Robust aggregation*.
- *Replies bound to their messages.* A reply counts for node N only if it answers the
  message the server sent to N (its ``reply_to_message_id``); a reply forged with N's id
  that answers another message is dropped (recorded with client None) and cannot take N's
  slot, so N's genuine reply still counts. At discovery such a reply is an error.
- *Dropping.* Every reply that fails the screening, raises in the ``ClientApp`` (a client
  whose local training gives a non-finite loss, upload or state raises
  ``FloatingPointError`` there, where the in-process engine stops the run), comes from a node
  that was not asked, or does not arrive within ``round_timeout`` is left out and recorded in
  ``strategy.dropped[round]`` as a :class:`Dropped` (client, stage, reason), with a warning
  in the ``flwr`` log. The round's mean upload is the size-weighted mean over the kept
  replies, and ``server_update`` gets the kept clients as the round's ``selected``; a round
  that keeps no training reply leaves the server's parameters and state unchanged. The
  dropped node's pending state is discarded.
- *Robust aggregation.* ``aggregator`` (of :func:`server_app`, :func:`run_inprocess`,
  :func:`run_simulation`) replaces the weighted mean of the screened uploads by one of
  Flower's own robust strategies: ``FedMedian()`` (coordinate-wise median),
  ``FedTrimmedAvg(beta=...)`` (coordinate-wise trimmed mean) or
  ``Krum(num_malicious_nodes=f)`` (the reply closest to its neighbours). With one attacker
  among at least four replies (Krum: n >= 2f + 3), a sign-flipped or crafted update that
  passes the magnitude rule then cannot move any coordinate of the global model outside
  the range of the honest replies (median, trimmed mean with ``beta >= 1/n``), or is never
  chosen (Krum); ``tests/test_flower.py`` checks the three against both attacks. Only for
  algorithms whose server step is the average (the base class's ``server_update``, see
  :func:`averages`): a method with its own server step (SCAFFOLD's) is refused with a
  ``ValueError``. These aggregates ignore the sizes, so they do not reproduce the in-process
  engine's runs.
- *Timeouts.* The server waits at most ``connect_timeout`` seconds (default
  :data:`CONNECT_TIMEOUT`) for the nodes to connect and ``round_timeout`` seconds (default
  :data:`ROUND_TIMEOUT`) for each exchange of messages. Too few nodes, or a node silent at
  discovery, is a ``TimeoutError`` that says what to change; a reply that misses the
  round's deadline is dropped as above. Messages go to the nodes found at discovery
  (evaluation only to those with test data), without Flower's waiting for nodes to be
  connected. On the node side every call of :func:`client_app` is bounded too
  (``call_timeout``; the runners pass ``round_timeout``): a call that hangs is abandoned and
  answered with an error, so it cannot pin a worker (a Ray actor) and the run finishes with
  the other nodes; :class:`InProcessGrid` bounds every call of any ``ClientApp`` the same way.
- *What is not defended.* With the default weighted mean, a hostile node's crafted update
  inside the magnitude rule, or a sign flip, moves the mean upload by up to its weight share
  times ``max_update_ratio`` times the global norm each round: pass an ``aggregator`` (for
  averaging methods). Reply authenticity rests on the transport (Flower's node
  authentication): a node that learns another node's message id can answer in its name.
  Sizes at discovery are trusted within ``max_size_ratio``. Evaluation metrics are screened
  for range only: a node can report any accuracy in [0, 1] for itself. Nodes see the
  server's parameters, state and broadcast (no privacy). The in-process engine's divergence
  check (a loss far above the run's first) is not made: a diverging node's finite updates
  are averaged until they fail the screening.

Client data augmentation (``cfg.augment``) is not supported: in process it draws from the
engine's one generator in the middle of training, which nodes cannot replay. Each node
trains alone, so ``cfg.vmap_clients`` (the engine's batching of clients) does not apply; a
run with ``vmap_clients > 1`` in process agrees with the Flower one to float rounding.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
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
from replearn.neural import ClientData, LocalSGD, Params, TrainConfig, plan_round

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

#: The hooks an algorithm needs to run on Flower (those of the engine's round loop).
HOOKS = ("check_options", "phases", "check", "init_server", "init_client", "draw", "broadcast", "client_update",
         "server_update", "personal_names", "shared_names", "eval_params")


# --------------------------------------------------------------------------------------------
# Algorithms


def resolve(algorithm):
    """The algorithm object for ``algorithm``: a registered name (``algorithms.names()``,
    including a method added with ``algorithms.register``) or an
    :class:`~replearn.neural.algorithms.base.Algorithm` itself (``ValueError`` otherwise)."""
    from replearn.neural import algorithms
    from replearn.neural.algorithms.base import Algorithm
    if isinstance(algorithm, str):
        return algorithms.get(algorithm)
    if isinstance(algorithm, Algorithm):
        return algorithm
    raise ValueError(f"algorithm must be a registered name (one of {algorithms.names()}) or a "
                     f"replearn.neural.algorithms.base.Algorithm, got {algorithm!r}")


def has_hooks(algorithm) -> bool:
    """Whether ``algorithm`` has every hook of :data:`HOOKS`, so that its rounds can run on
    Flower (:func:`inprocess_runner`)."""
    return all(callable(getattr(algorithm, h, None)) for h in HOOKS)


def _runnable(algorithm):
    alg = resolve(algorithm)
    if not has_hooks(alg):
        missing = [h for h in HOOKS if not callable(getattr(alg, h, None))]
        raise ValueError(f"{alg.name}: Flower runs an algorithm's rounds through its hooks (client_update, "
                         f"server_update, ...), and this one lacks {missing}: subclass "
                         f"replearn.neural.algorithms.base.Algorithm")
    return alg


def averages(algorithm) -> bool:
    """Whether ``algorithm``'s server step is the average: its ``server_update`` is the base
    class's (:mod:`replearn.neural.algorithms.base`), which sets each parameter to the mean
    upload of its name. Only such algorithms take a robust ``aggregator``."""
    from replearn.neural.algorithms import base
    step = getattr(type(resolve(algorithm)), "server_update", None)
    return step is not None and getattr(step, "__module__", None) == base.__name__


def _check_cfg(cfg: TrainConfig) -> None:
    if not isinstance(cfg, TrainConfig):
        raise ValueError(f"cfg must be a neural.TrainConfig, got {type(cfg).__name__}")
    if cfg.augment:
        raise ValueError("augment=True is not supported on Flower: the in-process engine draws the "
                         "augmentation from its shared generator during training")


# --------------------------------------------------------------------------------------------
# Records


def to_record(params: Params, names: Sequence[str] | None = None) -> ArrayRecord:
    """The named tensors (default: all of ``params``) as a Flower ``ArrayRecord`` of NumPy arrays."""
    names = list(params) if names is None else names
    return ArrayRecord({n: Array(params[n].detach().cpu().numpy()) for n in names})


def from_record(record: ArrayRecord, device: torch.device) -> Params:
    """A Flower ``ArrayRecord`` as tensors on ``device``."""
    return {n: torch.tensor(np.asarray(a.numpy()), device=device) for n, a in record.items()}


def pack(obj) -> tuple[ArrayRecord, str]:
    """``obj`` (nested dicts, lists and tuples of tensors, NumPy arrays, numbers, strings,
    booleans and None: an algorithm's draw, broadcast, server or client state) for a Flower
    message: its tensors in an ``ArrayRecord`` and its structure as a JSON string (for a
    ``ConfigRecord``). :func:`unpack` inverts it exactly (the tensors bit for bit)."""
    arrays: dict[str, Array] = {}

    def enc(o):
        if isinstance(o, torch.Tensor):
            arrays[str(len(arrays))] = Array(o.detach().cpu().numpy())
            return {"tensor": str(len(arrays) - 1)}
        if isinstance(o, np.ndarray):
            arrays[str(len(arrays))] = Array(o)
            return {"ndarray": str(len(arrays) - 1)}
        if isinstance(o, Mapping):
            return {"dict": [[enc(k), enc(v)] for k, v in o.items()]}
        if isinstance(o, tuple):
            return {"tuple": [enc(v) for v in o]}
        if isinstance(o, list):
            return {"list": [enc(v) for v in o]}
        if isinstance(o, np.generic):
            o = o.item()
        if o is None or isinstance(o, (bool, int, float, str)):
            return {"value": o}
        raise TypeError(f"cannot send a {type(o).__name__} in a Flower message: an algorithm's draws, "
                        f"broadcast and states must be nested dicts, lists and tuples of tensors, arrays, "
                        f"numbers, strings and None")

    tree = json.dumps(enc(obj))  # first: it fills arrays
    return ArrayRecord(arrays), tree


def unpack(record: ArrayRecord | None, tree: str, device: torch.device):
    """The object :func:`pack` made ``record`` and ``tree`` from, its tensors on ``device``."""

    def dec(node):
        (kind, v), = node.items()
        if kind == "tensor":
            return torch.tensor(np.asarray(record[v].numpy()), device=device)
        if kind == "ndarray":
            return np.asarray(record[v].numpy())
        if kind == "dict":
            return {dec(k): dec(x) for k, x in v}
        if kind == "tuple":
            return tuple(dec(x) for x in v)
        if kind == "list":
            return [dec(x) for x in v]
        if kind == "value":
            return v
        raise ValueError(f"unknown kind {kind!r} in a packed object")

    return dec(json.loads(tree))


def _structure(obj):
    """``obj``'s nesting, with each tensor as its dtype and shape (to compare two states)."""
    if isinstance(obj, torch.Tensor):
        return ("tensor", str(obj.dtype), tuple(obj.shape))
    if isinstance(obj, Mapping):
        return ("dict", tuple((k, _structure(v)) for k, v in obj.items()))
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, tuple(_structure(v) for v in obj))
    return (type(obj).__name__,)


def _tensors(obj) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, Mapping):
        return [t for v in obj.values() for t in _tensors(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in _tensors(v)]
    return []


def _finite(tensors: Iterable[torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors if t.is_floating_point() or t.is_complex())


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
    :class:`~replearn.neural.ClientData`; the partition id is
    ``context.node_config["partition-id"]``, as in Flower's simulation.

    - ``train``: rebuilds the round's :class:`~replearn.neural.ClientRound` (the node's data,
      the batches, draw, broadcast, server parameters and state the message carries, the
      node's own state) and runs ``client_update``; replies with the upload (``"arrays"``) and
      ``train_loss``, ``loss-sum``, ``n-steps`` and ``num-examples``; the new state is kept as
      pending until the server says whether it kept the upload (``commit-round``).
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
    alg = _runnable(algorithm)
    options = alg.check_options(options)
    _check_cfg(cfg)
    _check_seconds(call_timeout=call_timeout)
    app = ClientApp()
    running: dict[int, threading.Thread] = {}  # node id -> its abandoned, still running call

    def bounded(stage: str, context: Context, work: Callable[[], tuple[Message, dict]]) -> Message:
        node = context.node_id
        earlier = running.get(node)
        if earlier is not None and earlier.is_alive():
            raise TimeoutError(f"node {node} is still running an earlier call that exceeded call_timeout = "
                               f"{call_timeout:g} s; not starting its {stage}")
        running.pop(node, None)
        try:
            reply, updates = _bounded(work, call_timeout, f"the {stage} call of node {node}")
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

    def open_(msg: Message, context: Context) -> _Node:
        """The node for this message: data, initial parameters and the committed state, after
        the server's decision on a pending state (``commit-round``)."""
        pid, model, data = data_of(context)
        device = data.device
        updates: dict = {}
        records = msg.content.array_records
        config = msg.content.config_records.get("config", ConfigRecord())
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
        p_i = alg.eval_params(round_of(node, msg, LocalSGD(node.model), training=False))
        return {n: p_i[n] for n in names}

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        return bounded("query", context, lambda: _query(msg, context))

    def _query(msg: Message, context: Context) -> tuple[Message, dict]:
        config = msg.content.config_records.get("config", ConfigRecord())
        action = config.get("action")
        if action is None:  # discovery
            pid, _, data = data_of(context)
            info = MetricRecord({"partition-id": pid, "num-examples": int(data.train_sizes[0]),
                                 "num-test-examples": int(data.test_sizes[0])})
            return Message(RecordDict({"info": info}), reply_to=msg), {}
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
        return Message(content, reply_to=msg), node.updates

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        return bounded("train", context, lambda: _train(msg, context))

    def _train(msg: Message, context: Context) -> tuple[Message, dict]:
        node = open_(msg, context)
        worker = LocalSGD(node.model)
        ctx = round_of(node, msg, worker, training=True)
        worker.watch()
        update = alg.client_update(ctx)
        if not isinstance(update, neural.ClientUpdate):
            raise TypeError(f"{alg.name}: client_update must return a neural.ClientUpdate")
        loss_sum = torch.as_tensor(update.loss_sum)
        if not _finite([loss_sum, *update.upload.values(), *_tensors(update.state)]):
            raise FloatingPointError(f"client {node.pid}'s local training diverged (non-finite loss, upload or "
                                     f"state) {neural.divergence_advice(cfg.lr, alg.name, options)}")
        round_ = int(msg.content["config"]["server-round"])
        arrays, tree = pack(update.state)
        updates = {**node.updates, "pending": arrays,
                   "pending-info": ConfigRecord({"tree": tree, "round": round_})}
        steps = int(update.n_steps)
        metrics = MetricRecord({"train_loss": float(loss_sum) / max(steps, 1), "loss-sum": float(loss_sum),
                                "n-steps": steps, "num-examples": int(node.data.train_sizes[0])})
        reply = Message(RecordDict({"arrays": to_record(update.upload), "metrics": metrics}), reply_to=msg)
        return reply, updates

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        return bounded("evaluate", context, lambda: _evaluate(msg, context))

    def _evaluate(msg: Message, context: Context) -> tuple[Message, dict]:
        node = open_(msg, context)
        result = neural.evaluate(node.model, node.data, evaluated_params(node, msg))
        metrics = MetricRecord({"accuracy": float(result.accuracy[0]), "loss": float(result.loss[0]),
                                "num-examples": int(node.data.test_sizes[0])})
        return Message(RecordDict({"metrics": metrics}), reply_to=msg), node.updates

    return app


# --------------------------------------------------------------------------------------------
# Server side


class Dropped(NamedTuple):
    """A reply left out: the client (None if the sender is unknown), the stage ("train",
    "evaluate", "state": a state a broadcast reads, "fetch": the parameters and state fetched
    after the last round) and why."""

    client: int | None
    stage: str
    reason: str


def _check_aggregator(aggregator, algorithm=None) -> None:
    if aggregator is not None and (not isinstance(aggregator, FedAvg) or isinstance(aggregator, ReplayStrategy)
                                   or aggregator.weighted_by_key != "num-examples"
                                   or aggregator.arrayrecord_key != "arrays"):
        raise ValueError(f"aggregator must be None (the n_i-weighted mean) or one of Flower's FedAvg-family "
                         f"strategies with the default record keys, e.g. flwr.serverapp.strategy.FedMedian(), "
                         f"FedTrimmedAvg(beta=0.25) or Krum(num_malicious_nodes=1); got {aggregator!r}")
    if aggregator is not None and algorithm is not None and not averages(algorithm):
        name = resolve(algorithm).name
        raise ValueError(f"{name} has its own server step (server_update), not the average a robust aggregator "
                         f"replaces: run it with aggregator=None (robust aggregation is for the methods whose "
                         f"server step is the average, flower.averages(algorithm))")


def _number(metrics: MetricRecord, key: str) -> float:
    """``metrics[key]`` as a finite float (ValueError naming the key otherwise)."""
    value = metrics.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"metric {key!r} must be a finite number, got {value!r}")
    return float(value)


class _Upload(NamedTuple):
    """A training reply that passed the per-reply screening."""

    client: int
    msg: Message
    record: ArrayRecord
    arrays: dict[str, np.ndarray]
    train_loss: float
    loss_sum: float
    n_steps: int

    @property
    def signature(self) -> tuple:
        return tuple(sorted((n, str(a.dtype), a.shape) for n, a in self.arrays.items()))


class _StateUnavailable(Exception):
    """A client state a broadcast read could not be fetched from its node."""


class _NodeStates(Mapping):
    """The round's sampled clients' states as a mapping for the algorithm's ``broadcast``: on
    the first access of a state, the states of all of ``clients`` are fetched from their nodes
    in one exchange (so a broadcast that reads none fetches none)."""

    def __init__(self, fetch: Callable[[list[int]], dict], clients: Sequence[int], cache: dict | None = None):
        self._fetch, self._clients, self._cache = fetch, list(clients), cache

    def __getitem__(self, i):
        if i not in self._clients:
            raise KeyError(i)
        if self._cache is None:
            self._cache = self._fetch(self._clients)
        if i not in self._cache:
            raise _StateUnavailable(i)
        return self._cache[i]

    def __iter__(self):
        return iter(self._clients)

    def __len__(self):
        return len(self._clients)

    @property
    def fetched(self) -> dict:
        """The states fetched so far (client -> state)."""
        return self._cache or {}

    def restricted(self, clients: Sequence[int]) -> "_NodeStates":
        return _NodeStates(self._fetch, clients, self._cache)


def _prepare(alg, model: nn.Module, cfg: TrainConfig, options) -> tuple:
    """The algorithm's phases after its checks against the model and configuration."""
    alg.check(model, cfg, options)
    phases = tuple(alg.phases(model, cfg, options))
    neural.check_phases(alg.name, model, phases)
    return phases


class ReplayStrategy(FedAvg):
    """A Flower strategy running any algorithm's server side as the in-process engine's round
    loop does, with the screening of the module docstring's fault contract.

    ``nodes[i]`` is the Flower node id of client i, ``train_sizes[i]`` its n_i and
    ``test_sizes[i]`` its test-set size, as reported at discovery; they are the weights of
    the averages. ``algorithm`` (a name or an object with the hooks), ``model``, ``cfg`` and
    ``options`` are the run's; ``state``: the starting parameters (default the model's).
    Each round draws the sampled clients and their batches for every phase with
    :func:`replearn.neural.plan_round` from one generator seeded with ``cfg.seed``, then the
    algorithm's ``draw`` from it and its ``broadcast``; sends each sampled client the
    server's parameters and state, the broadcast, its draw and batches; screens the replies,
    averages the kept uploads (weights n_i, in client order) and applies ``server_update``.
    ``params`` and ``server`` are the server's parameters and state; ``participants[t]`` lists
    round t's sampled clients; ``dropped[t]`` the :class:`Dropped` replies of round t (round
    ``cfg.rounds`` also those of the final fetch); ``upload_signature`` the algorithm's upload
    once fixed (names, dtypes, shapes). ``callback(t, metrics)`` is called after each round,
    as in process. ``round_timeout``: seconds to wait for a round's replies (pass it to
    ``start``, as :func:`server_app` does); ``max_update_ratio``: the plausible-magnitude
    bound; ``aggregator``: a robust aggregate of Flower's in place of the weighted mean (for
    averaging algorithms); ``fetch_personal``, ``fetch_states``: what :meth:`finish` fetches.
    """

    def __init__(self, nodes: Sequence[int], train_sizes: Sequence[int], test_sizes: Sequence[int], algorithm,
                 model: nn.Module, cfg: TrainConfig, options=None, *, state: Params | None = None,
                 callback: Callable[[int, dict], None] | None = None, round_timeout: float = ROUND_TIMEOUT,
                 max_update_ratio: float = MAX_UPDATE_RATIO, aggregator: FedAvg | None = None,
                 fetch_personal: bool = True, fetch_states: bool = False):
        if len(nodes) != len(train_sizes) or len(nodes) != len(test_sizes) or not nodes:
            raise ValueError(f"need one train size and one test size per node, got {len(nodes)} nodes, "
                             f"{len(train_sizes)} train sizes and {len(test_sizes)} test sizes")
        _check_seconds(round_timeout=round_timeout)
        if isinstance(max_update_ratio, bool) or not isinstance(max_update_ratio, (int, float)) \
                or not max_update_ratio > 0:
            raise ValueError(f"max_update_ratio must be positive (math.inf turns the magnitude rule "
                             f"off), got {max_update_ratio!r}")
        alg = _runnable(algorithm)
        _check_aggregator(aggregator, alg)
        _check_cfg(cfg)
        options = alg.check_options(options)
        M = len(nodes)
        super().__init__(fraction_train=cfg.participation, min_train_nodes=1, min_evaluate_nodes=M,
                         min_available_nodes=M)
        self.algorithm, self.cfg, self.options = alg, cfg, options
        self.phases = _prepare(alg, model, cfg, options)
        self.nodes = list(nodes)
        self.client_of = {node: i for i, node in enumerate(self.nodes)}
        self.train_sizes = [int(n) for n in train_sizes]
        self.test_sizes = [int(n) for n in test_sizes]
        neural.check_work(self.phases, self.train_sizes, cfg)
        self.names = [n for n, _ in model.named_parameters()]
        self.device = next(model.parameters()).device
        self.params = neural.starting_state(model, state, self.device, neural.model_dtype(model))
        self.initial = {n: p.clone() for n, p in self.params.items()}
        self.server = alg.init_server(self.params, options)
        self.personal = tuple(alg.personal_names(model, options))
        self.shared = tuple(alg.shared_names(model, options))
        self.callback = callback
        self.round_timeout = float(round_timeout)
        self.max_update_ratio = float(max_update_ratio)
        self.aggregator = aggregator
        self.fetch_personal, self.fetch_states = bool(fetch_personal), bool(fetch_states)
        self.generator = make_generator(cfg.seed)
        self.participants: list[tuple[int, ...]] = []
        self.dropped: dict[int, list[Dropped]] = {}
        self.upload_signature: tuple | None = None
        self.train_loss = torch.full((cfg.rounds,), float("nan"))
        self.test_accuracy = torch.full((cfg.rounds,), float("nan"))
        self.evaluation: neural.Evaluation | None = None
        self.local: Params = {}
        self.client_states: dict[int, dict] = {}
        self._initial_record = to_record(self.initial, self.names)
        self._state_template = None
        self._kept_round: dict[int, int] = {}  # client -> the last round whose upload was kept
        self._primed: set[int] = set()  # clients known to hold the initial parameters
        self._params_record: ArrayRecord | None = None  # the server's parameters as sent
        self._global: dict[str, np.ndarray] = {}
        self._asked: dict[str, list[int]] = {}
        self._sent: dict[str, dict[int, Message]] = {}

    def start(self, grid: Grid, initial_arrays: ArrayRecord | None = None, num_rounds: int | None = None,
              timeout: float | None = None, **kwargs) -> Result:
        """Flower's ``Strategy.start`` from the server's parameters for ``cfg.rounds`` rounds,
        with ``timeout`` defaulting to ``round_timeout``."""
        if initial_arrays is None:
            initial_arrays = to_record(self.params, self.names)
        return super().start(grid, initial_arrays, self.cfg.rounds if num_rounds is None else num_rounds,
                             self.round_timeout if timeout is None else timeout, **kwargs)

    # messages --------------------------------------------------------------------------------

    def _content(self, client: int, config: dict, server: tuple[ArrayRecord, str] | None = None,
                 **records: ArrayRecord) -> RecordDict:
        """A message's content for ``client``: the server's parameters, the records given, the
        initial parameters if the node may lack them, and ``config`` with its commit round."""
        if self._params_record is None:
            self._params_record = to_record(self.params, self.names)
        content = RecordDict({self.arrayrecord_key: self._params_record})
        config = {**config, "commit-round": self._kept_round.get(client, -1)}
        if server is not None:
            content["server"], config["server-tree"] = server
        for key, record in records.items():
            content[key] = record
        if client not in self._primed:
            content["initial"] = self._initial_record
        content[self.configrecord_key] = ConfigRecord(config)
        return content

    def _exchange(self, grid: Grid, stage: str, messages: dict[int, Message], server_round: int,
                  screen: Callable[[int, Message], object]) -> list:
        """Send ``messages`` (client -> message), wait ``round_timeout``, and return the screened
        replies (``screen(client, msg)``) of the clients asked; the others are recorded."""
        self._asked[stage] = list(messages)
        self._sent[stage] = dict(messages)
        replies = grid.send_and_receive(list(messages.values()), timeout=self.round_timeout)
        return self._kept(server_round, stage, replies, screen)

    def _kept(self, server_round: int, stage: str, replies: Iterable[Message],
              screen: Callable[[int, Message], object]) -> list:
        """The screened replies of one stage; the others are recorded in ``dropped``."""
        waiting = set(self._asked.get(stage, ()))
        kept = []
        for msg in replies:
            client = self.client_of.get(msg.metadata.src_node_id)
            sent = self._sent.get(stage, {}).get(client)
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
                self._primed.add(client)  # the call finished: the node stored what it was sent
                kept.append(screen(client, msg))
            except Exception as ex:  # noqa: BLE001 -- any fault in one reply drops that reply only
                reason = (str(ex) if isinstance(ex, ValueError)
                          else f"malformed reply ({type(ex).__name__}: {ex})")
                self._drop(server_round, client, stage, reason)
        for client in sorted(waiting):
            self._drop(server_round, client, stage,
                       f"no reply within round_timeout = {self.round_timeout:g} s")
        return kept

    def _drop(self, server_round: int, client: int | None, stage: str, reason: str) -> None:
        self.dropped.setdefault(server_round, []).append(Dropped(client, stage, reason))
        _log.warning("round %d: dropped the %s reply of client %s: %s", server_round, stage, client, reason)

    # client states a broadcast reads ---------------------------------------------------------

    def _screen_state(self, client: int, msg: Message) -> tuple[int, dict]:
        """The reply's state, decoded and finite (ValueError otherwise); its form is checked by
        :meth:`_formed`."""
        records, configs = msg.content.array_records, msg.content.config_records
        if "state-info" not in configs:
            raise ValueError("the reply carries no state")
        state = unpack(records.get("state", ArrayRecord()), configs["state-info"]["tree"], self.device)
        if not _finite(_tensors(state)):
            raise ValueError("the state has non-finite values (NaN or inf)")
        return client, state

    def _formed(self, server_round: int, stage: str, states: dict[int, dict]) -> dict[int, dict]:
        """The states of ``states`` whose form (nesting, dtypes, shapes) is that of the
        algorithm's ``init_client`` or the one most of them share; the others are dropped."""
        if self._state_template is None:
            self._state_template = _structure(self.algorithm.init_client(self.initial, self.options))
        forms = {i: _structure(state) for i, state in states.items()}
        allowed = {self._state_template}
        ranked = Counter(forms.values()).most_common()
        if ranked and (len(ranked) == 1 or ranked[1][1] < ranked[0][1]):
            allowed.add(ranked[0][0])
        for i in [i for i, form in forms.items() if form not in allowed]:
            self._drop(server_round, i, stage, "the state's structure, dtypes or shapes are neither those the "
                       "algorithm's init_client makes nor those most states have")
            del states[i]
        return states

    def _fetch_states(self, grid: Grid, server_round: int, clients: list[int]) -> dict[int, dict]:
        messages = {i: Message(self._content(i, {"action": "state", "server-round": server_round}),
                               dst_node_id=self.nodes[i], message_type=MessageType.QUERY) for i in clients}
        return self._formed(server_round, "state",
                            dict(self._exchange(grid, "state", messages, server_round, self._screen_state)))

    # training --------------------------------------------------------------------------------

    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                        grid: Grid) -> Iterable[Message]:
        alg, cfg, options = self.algorithm, self.cfg, self.options
        plan = plan_round(self.train_sizes, self.phases, cfg, self.generator)
        self.participants.append(plan.clients)
        draws = alg.draw(plan, cfg, options, self.generator) or {}
        selected = list(plan.clients)
        states = _NodeStates(lambda clients: self._fetch_states(grid, server_round, clients), selected)
        while True:
            try:
                broadcast = alg.broadcast(self.params, self.server, states, selected, options)
                break
            except _StateUnavailable:  # recorded at stage "state": train without those clients
                selected = [i for i in selected if i in states.fetched]
                states = states.restricted(selected)
        self._global = {n: p.detach().cpu().numpy() for n, p in self.params.items()}
        server = pack(self.server)
        broadcast_arrays, broadcast_tree = pack(broadcast)
        messages = {}
        for i in selected:
            draw_arrays, draw_tree = pack(draws.get(i))
            client_config = {**config, "server-round": server_round, "phases": len(self.phases),
                             "broadcast-tree": broadcast_tree, "draw-tree": draw_tree}
            for k, batches in enumerate(plan.batches[i]):
                client_config[f"batch-indices-{k}"] = torch.cat(batches).tolist()
                client_config[f"batch-sizes-{k}"] = [len(b) for b in batches]
            content = self._content(i, client_config, server, broadcast=broadcast_arrays, draw=draw_arrays)
            messages[i] = Message(content, dst_node_id=self.nodes[i], message_type=MessageType.TRAIN)
        self._asked["train"] = list(messages)
        self._sent["train"] = messages
        return list(messages.values())

    def _screen_train(self, client: int, msg: Message) -> _Upload:
        """The reply's upload and loss (ValueError if it must be dropped)."""
        arrays, metrics = msg.content.array_records, msg.content.metric_records
        if len(arrays) != 1 or len(metrics) != 1:
            raise ValueError(f"expected one ArrayRecord and one MetricRecord, got {len(arrays)} and "
                             f"{len(metrics)}")
        record = next(iter(arrays.values()))
        values = {}
        for name, array in record.items():
            glob = self._global.get(name)
            if glob is not None and (tuple(array.shape), array.dtype) != (glob.shape, str(glob.dtype)):
                raise ValueError(f"{name}: metadata {array.dtype} {tuple(array.shape)} does not match the "
                                 f"global parameter ({glob.dtype} {glob.shape})")
            try:
                value = array.numpy()
            except Exception as ex:  # noqa: BLE001 -- whatever the bytes are, they are not the array
                raise ValueError(f"{name}: the payload cannot be decoded ({type(ex).__name__}: {ex})") from ex
            if value.shape != tuple(array.shape) or str(value.dtype) != array.dtype:
                raise ValueError(f"{name}: the payload holds {value.dtype} {value.shape}, its metadata says "
                                 f"{array.dtype} {tuple(array.shape)}")
            if value.dtype.kind not in "biuf":
                raise ValueError(f"{name}: unsupported dtype {value.dtype}")
            if value.dtype.kind == "f" and not np.isfinite(value).all():
                raise ValueError(f"{name}: non-finite values (NaN or inf)")
            values[name] = value
        reported = next(iter(metrics.values()))
        loss = _number(reported, "train_loss")
        loss_sum = _number(reported, "loss-sum")
        steps = reported.get("n-steps")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"metric 'n-steps' must be an integer >= 0, got {steps!r}")
        claimed = reported.get(self.weighted_by_key)
        if claimed != self.train_sizes[client]:
            _log.warning("client %d claims %s = %r, discovery reported %d: weighting by %d", client,
                         self.weighted_by_key, claimed, self.train_sizes[client], self.train_sizes[client])
        return _Upload(client, msg, record, values, loss, loss_sum, steps)

    def _agreed(self, server_round: int, uploads: list[_Upload]) -> list[_Upload]:
        """The uploads with the algorithm's names, dtypes and shapes (the fixed signature, else
        the round's majority; see the module docstring); the others are dropped."""
        expected = self.upload_signature
        if expected is None and uploads:
            ranked = Counter(u.signature for u in uploads).most_common()
            if len(ranked) == 1 or ranked[1][1] < ranked[0][1]:
                expected, count = ranked[0]
                if count >= 2 and 2 * count > len(uploads):
                    self.upload_signature = expected
        kept = []
        for u in uploads:
            if expected is None:
                self._drop(server_round, u.client, "train", "the replies disagree on the upload's names, "
                           "dtypes or shapes, and no majority tells which is the algorithm's")
            elif u.signature != expected:
                names = sorted(u.arrays)
                self._drop(server_round, u.client, "train",
                           f"the upload {names} (names, dtypes, shapes) does not match the algorithm's, which "
                           f"names {sorted(n for n, _, _ in expected)}")
            else:
                kept.append(u)
        return kept

    def _plausible(self, server_round: int, uploads: list[_Upload]) -> list[_Upload]:
        """The uploads that pass the plausible-magnitude rule; the others are dropped."""
        ratio = self.max_update_ratio
        if not uploads or ratio == math.inf:
            return uploads
        bad: dict[int, str] = {}
        for name in uploads[0].arrays:
            values = [u.arrays[name].astype(np.float64) for u in uploads]
            if name in self._global:
                glob = self._global[name].astype(np.float64)
                bound = ratio * max(float(np.linalg.norm(glob)), 1.0)
                for u, v in zip(uploads, values):
                    change = float(np.linalg.norm(v - glob))
                    if not change <= bound and u.client not in bad:
                        bad[u.client] = (f"{name}: implausible magnitude: the update moves it by {change:.3g}, "
                                         f"more than max_update_ratio * max(|global|, 1) = {bound:.3g}")
            elif len(uploads) >= 3:
                center = np.median(np.stack(values), axis=0)
                distances = [float(np.linalg.norm(v - center)) for v in values]
                bound = ratio * max(float(np.linalg.norm(center)), float(np.median(distances)), 1.0)
                for u, d in zip(uploads, distances):
                    if not d <= bound and u.client not in bad:
                        bad[u.client] = (f"{name}: implausible magnitude: {d:.3g} from the replies' "
                                         f"coordinate-wise median, more than max_update_ratio * max(|median|, "
                                         f"median distance, 1) = {bound:.3g}")
        for client, reason in bad.items():
            self._drop(server_round, client, "train", reason)
        return [u for u in uploads if u.client not in bad]

    def _mean_upload(self, server_round: int, uploads: list[_Upload]) -> Params:
        """The n_i-weighted mean of the uploads, summed in client order as in process (or the
        robust ``aggregator``'s aggregate)."""
        if self.aggregator is not None and uploads[0].arrays:
            messages = [Message(content=RecordDict({self.arrayrecord_key: u.record, "metrics": MetricRecord(
                {"train_loss": u.train_loss, self.weighted_by_key: self.train_sizes[u.client]})}),
                metadata=u.msg.metadata) for u in uploads]
            aggregate, _ = self.aggregator.aggregate_train(server_round, messages)
            return {n: t.to(self.device) for n, t in from_record(aggregate, self.device).items()}
        acc: Params = {}
        for u in uploads:
            n_i = float(self.train_sizes[u.client])
            for k, v in u.arrays.items():
                weighted = torch.tensor(v, device=self.device) * n_i
                if k not in acc:
                    acc[k] = torch.zeros_like(weighted)
                acc[k] += weighted
        total = float(sum(self.train_sizes[u.client] for u in uploads))
        return {k: v / total for k, v in acc.items()}

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        uploads = self._kept(server_round, "train", replies, self._screen_train)
        uploads = self._plausible(server_round, self._agreed(server_round, uploads))
        uploads.sort(key=lambda u: u.client)  # in client order: the in-process sums
        if not uploads:
            return None, None
        kept = [u.client for u in uploads]
        mean = self._mean_upload(server_round, uploads)
        try:
            params, server = self.algorithm.server_update(self.params, self.server, mean, kept, len(self.nodes),
                                                          self.options)
        except Exception as ex:
            if self.upload_signature is not None:
                raise
            # the upload's form is not fixed yet (one reply, or no majority): a faulty reply may
            # have passed; it must not stop the run
            for client in kept:
                self._drop(server_round, client, "train", f"the server step failed on the round's uploads "
                           f"({type(ex).__name__}: {ex}); the upload's form is not fixed yet")
            return None, None
        self.params, self.server = {n: params[n] for n in self.names}, server
        self._params_record = None
        for client in kept:
            self._kept_round[client] = server_round
        total = float(sum(self.train_sizes[c] for c in kept))
        loss = 0.0
        for u in uploads:  # as in process: n_i * loss_sum / steps, summed in client order
            loss += float(self.train_sizes[u.client]) * u.loss_sum / max(u.n_steps, 1)
        self.train_loss[server_round - 1] = loss / total
        return (to_record(self.params, self.names),
                MetricRecord({"train_loss": float(self.train_loss[server_round - 1])}))

    # evaluation ------------------------------------------------------------------------------

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord,
                           grid: Grid) -> Iterable[Message]:
        """Evaluate on the rounds the in-process engine evaluates, on every node found at
        discovery that has test data (without Flower's waiting for nodes to be connected)."""
        cfg = self.cfg
        evaluated = not server_round % cfg.eval_every or server_round == cfg.rounds
        asked = [i for i, n in enumerate(self.test_sizes) if n > 0 and evaluated]
        server = pack(self.server)
        messages = {i: Message(self._content(i, {**config, "server-round": server_round}, server),
                               dst_node_id=self.nodes[i], message_type=MessageType.EVALUATE) for i in asked}
        self._asked["evaluate"] = asked
        self._sent["evaluate"] = messages
        return list(messages.values())

    def _screen_evaluate(self, client: int, msg: Message) -> tuple[int, float, float, Message]:
        """The reply's accuracy and loss (ValueError if it must be dropped)."""
        metrics = msg.content.metric_records
        if len(metrics) != 1:
            raise ValueError(f"expected one MetricRecord, got {len(metrics)}")
        reported = next(iter(metrics.values()))
        accuracy, loss = _number(reported, "accuracy"), _number(reported, "loss")
        if not (0 <= accuracy <= 1 and loss >= 0):
            raise ValueError(f"accuracy {accuracy} must lie in [0, 1] and loss {loss} be >= 0")
        content = RecordDict({"metrics": MetricRecord(
            {"accuracy": accuracy, "loss": loss, self.weighted_by_key: self.test_sizes[client]})})
        return client, accuracy, loss, Message(content=content, metadata=msg.metadata)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        kept = self._kept(server_round, "evaluate", replies, self._screen_evaluate)
        t = server_round - 1
        metrics = {"train_loss": float(self.train_loss[t])}
        if self._asked.get("evaluate"):
            M = len(self.nodes)
            acc, loss, sizes = [math.nan] * M, [math.nan] * M, [0] * M
            for client, a, l_, _ in kept:
                acc[client], loss[client], sizes[client] = a, l_, self.test_sizes[client]
            self.evaluation = neural.Evaluation(torch.tensor(acc), torch.tensor(loss), torch.tensor(sizes))
            self.test_accuracy[t] = metrics["test_accuracy"] = self.evaluation.average
        if self.callback is not None:
            self.callback(t, metrics)
        return super().aggregate_evaluate(server_round, [m for *_, m in kept])

    # after the last round --------------------------------------------------------------------

    def _screen_fetch(self, client: int, msg: Message) -> tuple[int, Params | None, dict | None]:
        records, configs = msg.content.array_records, msg.content.config_records
        personal = None
        if self.fetch_personal and self.personal:
            record = records.get("personal")
            if record is None or set(record) != set(self.personal):
                raise ValueError(f"expected the personal parameters {list(self.personal)}, got "
                                 f"{None if record is None else list(record)}")
            personal = {}
            for n in self.personal:
                array, glob = record[n], self.params[n]
                value = array.numpy()
                expected = str(glob.dtype).removeprefix("torch.")
                if value.shape != tuple(glob.shape) or str(value.dtype) != expected:
                    raise ValueError(f"{n}: {value.dtype} {value.shape} does not match the parameter "
                                     f"({glob.dtype} {tuple(glob.shape)})")
                if not np.isfinite(value).all():
                    raise ValueError(f"{n}: non-finite values (NaN or inf)")
                personal[n] = torch.tensor(value, device=self.device)
        state = None
        if self.fetch_states and "state-info" in configs:
            state = self._screen_state(client, msg)[1]
        return client, personal, state

    def finish(self, grid: Grid) -> None:
        """After the last round: fetch from every node the parameters it is evaluated with for
        the personal names (``local``; a client whose node fails gets NaN, recorded at stage
        "fetch") and, with ``fetch_states``, its state (``client_states``)."""
        want_personal = self.fetch_personal and bool(self.personal)
        if not (want_personal or self.fetch_states):
            return
        t = self.cfg.rounds
        server = pack(self.server)
        config = {"action": "fetch", "server-round": t, "send-personal": want_personal,
                  "send-state": self.fetch_states}
        messages = {i: Message(self._content(i, config, server), dst_node_id=self.nodes[i],
                               message_type=MessageType.QUERY) for i in range(len(self.nodes))}
        fetched = {client: (personal, state)
                   for client, personal, state in self._exchange(grid, "fetch", messages, t, self._screen_fetch)}
        if want_personal:
            missing = {n: torch.full_like(self.params[n], float("nan")) for n in self.personal}
            per_client = [fetched[i][0] if i in fetched else missing for i in range(len(self.nodes))]
            self.local = {n: torch.stack([p[n] for p in per_client]) for n in self.personal}
        if self.fetch_states:
            states = self._formed(t, "fetch", {i: f[1] for i, f in fetched.items() if f[1] is not None})
            order = dict.fromkeys(i for clients in self.participants for i in clients)  # by first sampling
            self.client_states = {i: states[i] for i in order if i in states}

    def fed_result(self, result: Result) -> neural.FedResult:
        """The run as the in-process engine's :class:`~replearn.neural.FedResult` (after
        :meth:`finish`); ``extras``: ``"server"`` (the server state), ``"clients"`` (with
        ``fetch_states``) and ``"flower"`` (a :class:`FlowerRun`)."""
        M = len(self.nodes)
        final = self.evaluation if self.evaluation is not None else neural.Evaluation(
            torch.full((M,), float("nan")), torch.full((M,), float("nan")), torch.zeros(M, dtype=torch.int64))
        extras = {"server": self.server}
        if self.fetch_states:
            extras["clients"] = self.client_states
        extras["flower"] = FlowerRun(result, self)
        return neural.FedResult(self.algorithm.name, dict(self.params), dict(self.local), self.shared, self.personal,
                                self.train_loss, self.test_accuracy, tuple(self.participants), final, self.cfg,
                                extras)


@dataclass(frozen=True)
class FlowerRun:
    """Flower's side of a run (``FedResult.extras["flower"]``): ``result``, Flower's ``Result``
    (per-round aggregated metrics: ``train_metrics_clientapp[t]``,
    ``evaluate_metrics_clientapp[t]``), and the ``strategy`` (:class:`ReplayStrategy`:
    ``participants``, ``dropped``)."""

    result: Result
    strategy: ReplayStrategy


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


def server_app(model_fn: Callable[[], nn.Module], cfg: TrainConfig, algorithm, options=None, *,
               n_clients: int | None = None, state: Params | None = None,
               callback: Callable[[int, dict], None] | None = None, connect_timeout: float = CONNECT_TIMEOUT,
               round_timeout: float = ROUND_TIMEOUT, max_update_ratio: float = MAX_UPDATE_RATIO,
               max_size_ratio: float = MAX_SIZE_RATIO, aggregator: FedAvg | None = None,
               fetch_personal: bool = True, fetch_states: bool = False,
               on_result: Callable[[neural.FedResult], None] | None = None) -> ServerApp:
    """A Flower ``ServerApp`` running ``algorithm`` (a registered name or an algorithm object;
    ``options``: its options) for ``cfg.rounds`` rounds from ``state`` (default the parameters
    of ``model_fn()``) on ``n_clients`` nodes (waits up to ``connect_timeout`` seconds for them
    to connect; default: the nodes connected at the start): :func:`discover`, then
    :class:`ReplayStrategy` (``round_timeout`` for each exchange, ``callback``,
    ``max_update_ratio``, ``aggregator``, ``fetch_personal``, ``fetch_states``), with the
    fault contract of the module docstring (``max_size_ratio``: the discovery size rule). The
    final server parameters are stored in ``context.state["arrays"]``; ``on_result(result)``
    is called at the end with the run's :class:`~replearn.neural.FedResult`."""
    alg = _runnable(algorithm)
    options = alg.check_options(options)
    _check_cfg(cfg)
    _check_seconds(connect_timeout=connect_timeout, round_timeout=round_timeout)
    _check_aggregator(aggregator, alg)
    if n_clients is not None and (isinstance(n_clients, bool) or not isinstance(n_clients, int)
                                  or n_clients < 1):
        raise ValueError(f"n_clients must be a positive int or None, got {n_clients!r}")
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        model = model_fn()
        _prepare(alg, model, cfg, options)  # the algorithm's checks, before waiting for nodes
        nodes, train_sizes, test_sizes = discover(grid, n_clients, connect_timeout=connect_timeout,
                                                  timeout=round_timeout, max_size_ratio=max_size_ratio)
        strategy = ReplayStrategy(nodes, train_sizes, test_sizes, alg, model, cfg, options, state=state,
                                  callback=callback, round_timeout=round_timeout,
                                  max_update_ratio=max_update_ratio, aggregator=aggregator,
                                  fetch_personal=fetch_personal, fetch_states=fetch_states)
        result = strategy.start(grid)
        strategy.finish(grid)
        context.state["arrays"] = to_record(strategy.params, strategy.names)
        if on_result is not None:
            on_result(strategy.fed_result(result))

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


# --------------------------------------------------------------------------------------------
# Runners: one algorithm's rounds on Flower, for ``Algorithm.run(..., runner=...)``


Runner = Callable[..., neural.FedResult]
"""``runner(algorithm, model, clients, cfg, options=None, *, state=None, callback=None,
workers=None) -> FedResult``: runs ``algorithm``'s ``cfg.rounds`` rounds from ``state``
(default the model's parameters) through its hooks, as the engine's own round loop does in
process; an algorithm's ``run`` calls it for each of its runs of rounds."""


class _FlowerSettings(NamedTuple):
    connect_timeout: float
    round_timeout: float
    max_update_ratio: float
    max_size_ratio: float
    aggregator: FedAvg | None
    fetch_personal: bool
    fetch_states: bool


def _settings(connect_timeout, round_timeout, max_update_ratio, max_size_ratio, aggregator, fetch_personal,
              fetch_states) -> _FlowerSettings:
    _check_seconds(connect_timeout=connect_timeout, round_timeout=round_timeout)
    _check_aggregator(aggregator)
    if isinstance(max_size_ratio, bool) or not isinstance(max_size_ratio, (int, float)) \
            or not max_size_ratio >= 1:
        raise ValueError(f"max_size_ratio must be a number >= 1 (math.inf turns the size rule off), got "
                         f"{max_size_ratio!r}")
    if isinstance(max_update_ratio, bool) or not isinstance(max_update_ratio, (int, float)) \
            or not max_update_ratio > 0:
        raise ValueError(f"max_update_ratio must be positive (math.inf turns the magnitude rule off), got "
                         f"{max_update_ratio!r}")
    return _FlowerSettings(connect_timeout, round_timeout, max_update_ratio, max_size_ratio, aggregator,
                           fetch_personal, fetch_states)


def _server(settings: _FlowerSettings, model: nn.Module, cfg, alg, options, n_clients: int, state, callback,
            finished: dict) -> ServerApp:
    return server_app(lambda: model, cfg, alg, options, n_clients=n_clients, state=state, callback=callback,
                      connect_timeout=settings.connect_timeout, round_timeout=settings.round_timeout,
                      max_update_ratio=settings.max_update_ratio, max_size_ratio=settings.max_size_ratio,
                      aggregator=settings.aggregator, fetch_personal=settings.fetch_personal,
                      fetch_states=settings.fetch_states, on_result=lambda r: finished.update(result=r))


def _checked_clients(model: nn.Module, clients: ClientData) -> ClientData:
    if not isinstance(clients, ClientData):
        raise ValueError(f"clients must be a neural.ClientData, got {type(clients).__name__}")
    # ClientData's checks again, with the federation's client indices: a tensor changed in place
    # since (a NaN pixel) would otherwise be reported by its node as the one "client 0"
    return neural.check_inputs(model, clients.subset(range(clients.n_clients)))


def inprocess_runner(*, app: ClientApp | None = None, connect_timeout: float = CONNECT_TIMEOUT,
                     round_timeout: float = ROUND_TIMEOUT, max_update_ratio: float = MAX_UPDATE_RATIO,
                     max_size_ratio: float = MAX_SIZE_RATIO, aggregator: FedAvg | None = None,
                     fetch_personal: bool = True, fetch_states: bool = False) -> Runner:
    """A :data:`Runner` that runs an algorithm's rounds on Flower in this process: its
    :func:`server_app` (with these settings) drives :func:`client_app` (or ``app``, which must
    run the same algorithm, configuration and options) through :class:`InProcessGrid`, one node
    per client of ``clients`` (node i's data ``clients.subset([i])``); every call of a node is
    bounded by ``round_timeout``. On a CPU the nodes train on one intra-op thread, as the
    engine's clients do (so the runs agree bit for bit). ``workers`` is ignored."""
    settings = _settings(connect_timeout, round_timeout, max_update_ratio, max_size_ratio, aggregator,
                         fetch_personal, fetch_states)

    def runner(algorithm, model: nn.Module, clients: ClientData, cfg: TrainConfig, options=None, *,
               state: Params | None = None, callback: Callable | None = None,
               workers: int | None = None) -> neural.FedResult:
        alg, options, clients = _start(algorithm, model, clients, cfg, options)
        node_app = app or client_app(lambda: model, lambda i: clients.subset([i]), cfg, alg, options,
                                     call_timeout=settings.round_timeout)
        grid = InProcessGrid(node_app, clients.n_clients, call_timeout=settings.round_timeout)
        finished: dict = {}
        server = _server(settings, model, cfg, alg, options, clients.n_clients, state, callback, finished)
        threads = torch.get_num_threads()
        one_thread = clients.device.type == "cpu"
        if one_thread:
            torch.set_num_threads(1)
        try:
            grid.run_server(server)
        finally:
            if one_thread:
                torch.set_num_threads(threads)
        return finished["result"]

    return runner


def _start(algorithm, model: nn.Module, clients: ClientData, cfg: TrainConfig, options):
    """What a runner checks before a Flower run: the algorithm (a registered name or object with
    the hooks), its options, ``cfg`` and the clients against the model."""
    alg = _runnable(algorithm)
    options = alg.check_options(options)
    _check_cfg(cfg)
    return alg, options, _checked_clients(model, clients)


def _ray_defaults(n_clients: int) -> dict:
    """A small local Ray instance: no dashboard, one CPU per client (at most the machine's),
    quiet logs, and a new local cluster even if ``RAY_ADDRESS`` points elsewhere."""
    cpus = max(1, min(n_clients, os.cpu_count() or 1))
    return {"init_args": {"address": "local", "include_dashboard": False, "num_cpus": cpus,
                          "logging_level": "ERROR", "log_to_driver": True},
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0}}


def simulation_runner(*, data_fn: Callable[[int], ClientData] | None = None, backend_config: dict | None = None,
                      verbose: bool = False, connect_timeout: float = CONNECT_TIMEOUT,
                      round_timeout: float = ROUND_TIMEOUT, max_update_ratio: float = MAX_UPDATE_RATIO,
                      max_size_ratio: float = MAX_SIZE_RATIO, aggregator: FedAvg | None = None,
                      fetch_personal: bool = True, fetch_states: bool = False) -> Runner:
    """A :data:`Runner` that runs an algorithm's rounds on Flower's simulation engine with one
    virtual SuperNode per client of ``clients``.

    The apps are :func:`server_app` (with these settings) and :func:`client_app` (each call
    bounded by ``round_timeout``, so a node that hangs frees its Ray actor and the run
    finishes), run by ``flwr.simulation.run_simulation`` with its Ray backend: the
    ``ServerApp`` runs in a thread of this process, the ``ClientApp`` in a pool of Ray actors
    (one per CPU given to Ray), and node i's data is ``data_fn(i)`` (default
    ``clients.subset([i])``), called in the actor. The model (its architecture), ``data_fn``,
    the algorithm and ``cfg`` are pickled to the actors (with cloudpickle, for every message:
    let ``data_fn`` load from disk rather than close over large tensors; by default the whole
    ``clients`` is pickled, fine for tiny data only).

    ``backend_config`` updates the defaults key by key (``init_args``, ``client_resources``,
    ``actor``): by default Ray starts a new local instance without dashboard on
    ``min(n_clients, cpu_count)`` CPUs (raise ``init_args["num_cpus"]`` with
    ``client_resources["num_cpus"]``), each client takes one CPU (Ray then runs its torch on
    one thread), and Ray's usage statistics are off (``RAY_USAGE_STATS_ENABLED=0`` unless
    set). Flower's own telemetry is governed by ``FLWR_TELEMETRY_ENABLED``, read when
    ``flwr`` is imported. Flower's INFO log lines are hidden unless ``verbose``. An exception
    in the ``ServerApp`` (e.g. the ``TimeoutError`` of :func:`discover`) is raised again as a
    ``RuntimeError`` from it. Each call starts and stops Ray (a method with two stages, +FT,
    does so twice). Flower 1.41 marks its ``run_simulation`` deprecated (in favour of ``flwr
    run``) and logs a warning. ``workers`` is ignored."""
    settings = _settings(connect_timeout, round_timeout, max_update_ratio, max_size_ratio, aggregator,
                         fetch_personal, fetch_states)

    def runner(algorithm, model: nn.Module, clients: ClientData, cfg: TrainConfig, options=None, *,
               state: Params | None = None, callback: Callable | None = None,
               workers: int | None = None) -> neural.FedResult:
        alg, options, clients = _start(algorithm, model, clients, cfg, options)
        n_clients = clients.n_clients
        if importlib.util.find_spec("ray") is None:  # else Flower exits the interpreter
            raise ImportError("Flower's simulation engine needs Ray: pip install -r requirements-flower.txt "
                              '(or pip install "flwr[simulation]==1.41.0")')
        from flwr.simulation import run_simulation as flwr_run_simulation
        config = _ray_defaults(n_clients)
        for key, value in (backend_config or {}).items():
            config[key] = {**config.get(key, {}), **value}
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        node_data = data_fn if data_fn is not None else (lambda i, c=clients: c.subset([i]))
        finished: dict = {}
        inner = _server(settings, model, cfg, alg, options, n_clients, state, callback, finished)
        server = ServerApp()

        @server.main()
        def main(grid: Grid, context: Context) -> None:
            try:
                inner(grid, context)
            except Exception as ex:
                finished["error"] = ex
                raise

        level = _log.level
        if not verbose:
            _log.setLevel(logging.WARNING)
        try:
            flwr_run_simulation(server, client_app(lambda: model, node_data, cfg, alg, options,
                                                   call_timeout=settings.round_timeout),
                                n_clients, backend_config=config)
        finally:
            _log.setLevel(level)
        if "error" in finished:
            raise RuntimeError(f"the ServerApp failed: {finished['error']}") from finished["error"]
        if "result" not in finished:
            raise RuntimeError("the simulation ended before the ServerApp finished")
        return finished["result"]

    return runner


def run_with(runner: Runner, algorithm, model: nn.Module, clients: ClientData, cfg: TrainConfig, options=None, *,
             state: Params | None = None, callback: Callable | None = None) -> neural.FedResult:
    """Run ``algorithm`` (a registered name or an algorithm object) with ``runner`` doing each
    of its runs of rounds: ``algorithm.run(model, clients, cfg, options, state=, callback=,
    runner=runner)``, so a method built from stages (Local only, the +FT methods) runs every
    stage through ``runner``."""
    return _runnable(algorithm).run(model, clients, cfg, options, state=state, callback=callback, runner=runner)


def run_inprocess(algorithm, model: nn.Module, clients: ClientData, cfg: TrainConfig, options=None, *,
                  state: Params | None = None, callback: Callable | None = None, app: ClientApp | None = None,
                  connect_timeout: float = CONNECT_TIMEOUT, round_timeout: float = ROUND_TIMEOUT,
                  max_update_ratio: float = MAX_UPDATE_RATIO, max_size_ratio: float = MAX_SIZE_RATIO,
                  aggregator: FedAvg | None = None, fetch_personal: bool = True,
                  fetch_states: bool = False) -> neural.FedResult:
    """Run ``algorithm`` (a registered name, as for ``algorithms.run``, or an algorithm object)
    on Flower with one node per client of ``clients``, in this process:
    ``algorithms.run(algorithm, model, clients, cfg, options)`` with every run of rounds on
    Flower (:func:`run_with` and :func:`inprocess_runner`, which take the other arguments).
    Returns the run's :class:`~replearn.neural.FedResult` (``extras["flower"]``: Flower's
    ``Result`` and the strategy, of the last stage)."""
    runner = inprocess_runner(app=app, connect_timeout=connect_timeout, round_timeout=round_timeout,
                              max_update_ratio=max_update_ratio, max_size_ratio=max_size_ratio,
                              aggregator=aggregator, fetch_personal=fetch_personal, fetch_states=fetch_states)
    return run_with(runner, algorithm, model, clients, cfg, options, state=state, callback=callback)


def run_simulation(algorithm, model: nn.Module, clients: ClientData, cfg: TrainConfig, options=None, *,
                   state: Params | None = None, callback: Callable | None = None,
                   data_fn: Callable[[int], ClientData] | None = None, backend_config: dict | None = None,
                   verbose: bool = False, connect_timeout: float = CONNECT_TIMEOUT,
                   round_timeout: float = ROUND_TIMEOUT, max_update_ratio: float = MAX_UPDATE_RATIO,
                   max_size_ratio: float = MAX_SIZE_RATIO, aggregator: FedAvg | None = None,
                   fetch_personal: bool = True, fetch_states: bool = False) -> neural.FedResult:
    """Run ``algorithm`` on Flower's simulation engine (Ray) with one virtual SuperNode per
    client of ``clients``: :func:`run_with` and :func:`simulation_runner` (``data_fn``: node
    i's data, loaded in its Ray actor; default ``clients.subset([i])``). Needs the
    ``simulation`` extra (Ray)."""
    runner = simulation_runner(data_fn=data_fn, backend_config=backend_config, verbose=verbose,
                               connect_timeout=connect_timeout, round_timeout=round_timeout,
                               max_update_ratio=max_update_ratio, max_size_ratio=max_size_ratio,
                               aggregator=aggregator, fetch_personal=fetch_personal, fetch_states=fetch_states)
    return run_with(runner, algorithm, model, clients, cfg, options, state=state, callback=callback)
