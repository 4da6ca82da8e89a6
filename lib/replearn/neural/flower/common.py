"""What both sides of a Flower run share: the defaults of the fault contract, the algorithm
(resolved, with its hooks), the checks of a configuration, the fingerprint of what a node
runs, and bounded calls."""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Callable
from typing import NamedTuple

from replearn.neural import TrainConfig, algorithms
from replearn.neural.algorithms.base import Algorithm
from replearn.neural.engine.guards import HOOKS, check_hooks

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
log = logging.getLogger("flwr")
"""Flower's logger, where the runs warn of dropped replies."""

__all__ = ["CALL_TIMEOUT", "CONNECT_TIMEOUT", "HOOKS", "MAX_SIZE_RATIO", "MAX_UPDATE_RATIO", "ROUND_TIMEOUT", "log",
           "Fingerprint", "averages", "bounded", "check_cfg", "check_fingerprint", "check_seconds", "fingerprint", "has_hooks",
           "resolve", "runnable"]


def resolve(algorithm):
    """The algorithm object for ``algorithm``: a registered name (``algorithms.names()``,
    including a method added with ``algorithms.register``) or an
    :class:`~replearn.neural.algorithms.base.Algorithm` itself (``ValueError`` otherwise)."""
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



def runnable(algorithm):
    """The algorithm object for ``algorithm`` (:func:`resolve`), with every hook of
    :data:`HOOKS` callable (``ValueError`` naming the others,
    :func:`replearn.neural.engine.guards.check_hooks`)."""
    alg = resolve(algorithm)
    check_hooks(alg)
    return alg


def averages(algorithm) -> bool:
    """Whether ``algorithm``'s server step is the average: its ``server_update`` is the base
    class's (:mod:`replearn.neural.algorithms.base`), which sets each parameter to the mean
    upload of its name. Only such algorithms take a robust ``aggregator``."""
    step = getattr(type(resolve(algorithm)), "server_update", None)
    return step is not None and getattr(step, "__module__", None) == Algorithm.__module__



def check_cfg(cfg: TrainConfig) -> None:
    if not isinstance(cfg, TrainConfig):
        raise ValueError(f"cfg must be a neural.TrainConfig, got {type(cfg).__name__}")
    if cfg.augment:
        raise ValueError("augment=True is not supported on Flower: the in-process engine draws the "
                         "augmentation from its shared generator during training")



class Fingerprint(NamedTuple):
    """What a node or the server runs: the algorithm's name and the ``repr`` of its options and
    of the ``TrainConfig`` (memory addresses left out). The server sends its own with every
    message, a node echoes its own in every reply, and the server refuses a reply whose
    fingerprint differs (:meth:`differences` names what)."""

    algorithm: str
    options: str
    config: str

    def entries(self, prefix: str = "") -> dict[str, str]:
        """The fingerprint as entries of a Flower ``ConfigRecord``: ``{prefix + field: value}``."""
        return {prefix + k: v for k, v in zip(("algorithm", "options", "config"), self)}

    @classmethod
    def of_entries(cls, record, prefix: str = "") -> "Fingerprint":
        """The fingerprint that :meth:`entries` wrote into ``record`` (missing fields None)."""
        return cls(*(record.get(prefix + k) for k in ("algorithm", "options", "config")))

    def differences(self, other: "Fingerprint") -> str:
        """What differs from ``other`` (the server's), e.g. ``"options: the node runs
        FedProxOptions(mu=0.5), the server FedProxOptions(mu=0.01)"``; empty if nothing."""
        whats = ("algorithm", "options", "training settings (TrainConfig)")
        return "; ".join(f"{what}: the node runs {mine}, the server {theirs}"
                         for what, mine, theirs in zip(whats, self, other) if mine != theirs)


def fingerprint(algorithm, options, cfg: TrainConfig) -> Fingerprint:
    """The :class:`Fingerprint` of ``algorithm`` (an algorithm object) run with ``options`` and
    ``cfg``."""
    return Fingerprint(algorithm.name, _address_free(repr(options)), _address_free(repr(cfg)))


def check_fingerprint(reply, expected: Fingerprint) -> None:
    """``ValueError`` unless the Flower message ``reply`` echoes the fingerprint ``expected`` (in
    its ``ConfigRecord`` ``"fingerprint"``, as :func:`~replearn.neural.flower.client_app`'s
    replies do), naming what differs."""
    record = reply.content.config_records.get("fingerprint")
    if record is None:
        raise ValueError("the reply carries no fingerprint of what the node runs (its algorithm, options and "
                         "TrainConfig): build the nodes with flower.client_app")
    differences = Fingerprint.of_entries(record).differences(expected)
    if differences:
        raise ValueError(f"the node was built for another run than the server's: {differences}; build its "
                         f"client_app with the server's algorithm, options and TrainConfig")


def _address_free(text: str) -> str:
    """``text`` without the memory addresses a ``repr`` may hold (`` at 0x7f...``), which differ
    between the server's process and a node's."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", text)


def check_seconds(**values: float) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
            raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")



def bounded(call: Callable[[], object], seconds: float, what: str):
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

