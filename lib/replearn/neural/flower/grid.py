"""Running a Flower ``ServerApp`` and ``ClientApp`` in this process: :class:`InProcessGrid`."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from uuid import uuid4

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode
from flwr.serverapp import Grid, ServerApp
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

from replearn.neural.flower.common import CALL_TIMEOUT, bounded, check_seconds

__all__ = ["InProcessGrid"]


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
        check_seconds(call_timeout=call_timeout)
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
                reply = bounded(lambda m=msg, c=self.contexts[node]: self.app(m, c), seconds,
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
