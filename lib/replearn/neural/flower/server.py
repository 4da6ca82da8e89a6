"""The server's Flower app: :func:`server_app` (discovery of the nodes, then
:class:`~replearn.neural.flower.strategy.ReplayStrategy`), :func:`discover` and
:func:`wait_for_nodes`."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
from flwr.app import Context, Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from torch import nn

from replearn import neural
from replearn.neural import Params, TrainConfig
from replearn.neural.flower.common import (CONNECT_TIMEOUT, MAX_SIZE_RATIO, MAX_UPDATE_RATIO, ROUND_TIMEOUT,
                                           Fingerprint, check_cfg, check_fingerprint, check_seconds, fingerprint,
                                           log, runnable)
from replearn.neural.flower.records import to_record
from replearn.neural.flower.strategy import ReplayStrategy, check_aggregator, prepare

__all__ = ["discover", "server_app", "wait_for_nodes"]


def wait_for_nodes(grid: Grid, n_nodes: int, *, timeout: float = CONNECT_TIMEOUT) -> list[int]:
    """The ids of the ``n_nodes`` nodes connected to ``grid``, waiting up to ``timeout``
    seconds for them to connect (``TimeoutError`` then; ``ValueError`` if more are connected)."""
    check_seconds(connect_timeout=timeout)
    deadline = time.monotonic() + timeout
    while len(nodes := list(grid.get_node_ids())) < n_nodes:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"only {len(nodes)} of the n_clients = {n_nodes} nodes connected within "
                               f"connect_timeout = {timeout:g} s: start the missing SuperNodes, pass "
                               f"n_clients={len(nodes)}, or wait longer with a larger connect_timeout")
        log.info("waiting for nodes to connect: %d of %d", len(nodes), n_nodes)
        time.sleep(min(1.0, left))
    if len(nodes) > n_nodes:
        raise ValueError(f"{len(nodes)} nodes are connected but n_clients = {n_nodes}: pass "
                         f"n_clients={len(nodes)} or stop the extra SuperNodes")
    return nodes


def discover(grid: Grid, n_clients: int | None = None, *, connect_timeout: float = CONNECT_TIMEOUT,
             timeout: float = ROUND_TIMEOUT, max_size_ratio: float = MAX_SIZE_RATIO,
             fingerprint: Fingerprint | None = None) -> tuple[list[int], list[int], list[int]]:
    """Ask every node for its partition id, training-set and test-set size; returns the node
    ids and both sizes ordered by partition id, which must be 0, ..., M-1. With
    ``n_clients``, first wait (up to ``connect_timeout`` seconds) until that many nodes are
    connected; each node must reply within ``timeout`` seconds. The sizes become the weights
    of the averages, so a node that does not reply or replies malformed is an error here, and
    so is a node whose training-set (or test-set) size exceeds ``max_size_ratio`` (default
    :data:`MAX_SIZE_RATIO`; ``math.inf`` turns the rule off) times the median of the other
    nodes' sizes (an over-report would take nearly all the weight). With ``fingerprint`` (the
    server's, :func:`~replearn.neural.flower.common.fingerprint`), a node built for another
    algorithm, other options or other training settings is an error naming what differs."""
    check_seconds(timeout=timeout)
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
        if fingerprint is not None:
            try:
                check_fingerprint(msg, fingerprint)
            except ValueError as ex:
                raise ValueError(f"node {node}: {ex}") from None
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
               fetch_personal: bool = True, fetch_states: bool = False, max_empty_rounds: int = 0,
               on_result: Callable[[neural.FedResult], None] | None = None) -> ServerApp:
    """A Flower ``ServerApp`` running ``algorithm`` (a registered name or an algorithm object;
    ``options``: its options) for ``cfg.rounds`` rounds from ``state`` (default the parameters
    of ``model_fn()``) on ``n_clients`` nodes (waits up to ``connect_timeout`` seconds for them
    to connect; default: the nodes connected at the start): :func:`discover` (which refuses
    nodes built for another run: the fingerprint), then :class:`ReplayStrategy`
    (``round_timeout`` for each exchange, ``callback``, ``max_update_ratio``, ``aggregator``,
    ``fetch_personal``, ``fetch_states``, ``max_empty_rounds``), with the fault contract of the
    module docstring (``max_size_ratio``: the discovery size rule). The
    final server parameters are stored in ``context.state["arrays"]``; ``on_result(result)``
    is called at the end with the run's :class:`~replearn.neural.FedResult`."""
    alg = runnable(algorithm)
    options = alg.check_options(options)
    check_cfg(cfg)
    check_seconds(connect_timeout=connect_timeout, round_timeout=round_timeout)
    check_aggregator(aggregator, alg)
    if n_clients is not None and (isinstance(n_clients, bool) or not isinstance(n_clients, int)
                                  or n_clients < 1):
        raise ValueError(f"n_clients must be a positive int or None, got {n_clients!r}")
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        model = model_fn()
        prepare(alg, model, cfg, options)  # the algorithm's checks, before waiting for nodes
        nodes, train_sizes, test_sizes = discover(grid, n_clients, connect_timeout=connect_timeout,
                                                  timeout=round_timeout, max_size_ratio=max_size_ratio,
                                                  fingerprint=fingerprint(alg, options, cfg))
        strategy = ReplayStrategy(nodes, train_sizes, test_sizes, alg, model, cfg, options, state=state,
                                  callback=callback, round_timeout=round_timeout,
                                  max_update_ratio=max_update_ratio, aggregator=aggregator,
                                  fetch_personal=fetch_personal, fetch_states=fetch_states,
                                  max_empty_rounds=max_empty_rounds)
        result = strategy.start(grid)
        strategy.finish(grid)
        context.state["arrays"] = to_record(strategy.params, strategy.names)
        if on_result is not None:
            on_result(strategy.fed_result(result))

    return app
