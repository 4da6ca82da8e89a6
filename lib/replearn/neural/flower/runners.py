"""Runners: one algorithm's rounds on Flower, for ``Algorithm.run(..., runner=...)``, and the
entry points :func:`run_inprocess` and :func:`run_simulation`."""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Callable
from typing import NamedTuple

import torch
from flwr.app import Context
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from torch import nn

from replearn import neural
from replearn.neural import ClientData, Params, TrainConfig
from replearn.neural.flower.client import client_app
from replearn.neural.flower.common import (CONNECT_TIMEOUT, MAX_SIZE_RATIO, MAX_UPDATE_RATIO, ROUND_TIMEOUT,
                                           check_cfg, check_seconds, log, runnable)
from replearn.neural.flower.grid import InProcessGrid
from replearn.neural.flower.server import server_app
from replearn.neural.flower.strategy import check_aggregator

__all__ = ["Runner", "inprocess_runner", "run_inprocess", "run_simulation", "run_with", "simulation_runner"]


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
    max_empty_rounds: int


def _settings(connect_timeout, round_timeout, max_update_ratio, max_size_ratio, aggregator, fetch_personal,
              fetch_states, max_empty_rounds) -> _FlowerSettings:
    check_seconds(connect_timeout=connect_timeout, round_timeout=round_timeout)
    check_aggregator(aggregator)
    if isinstance(max_size_ratio, bool) or not isinstance(max_size_ratio, (int, float)) \
            or not max_size_ratio >= 1:
        raise ValueError(f"max_size_ratio must be a number >= 1 (math.inf turns the size rule off), got "
                         f"{max_size_ratio!r}")
    if isinstance(max_update_ratio, bool) or not isinstance(max_update_ratio, (int, float)) \
            or not max_update_ratio > 0:
        raise ValueError(f"max_update_ratio must be positive (math.inf turns the magnitude rule off), got "
                         f"{max_update_ratio!r}")
    if isinstance(max_empty_rounds, bool) or not isinstance(max_empty_rounds, int) or max_empty_rounds < 0:
        raise ValueError(f"max_empty_rounds must be an int >= 0, got {max_empty_rounds!r}")
    return _FlowerSettings(connect_timeout, round_timeout, max_update_ratio, max_size_ratio, aggregator,
                           fetch_personal, fetch_states, max_empty_rounds)


def _server(settings: _FlowerSettings, model: nn.Module, cfg, alg, options, n_clients: int, state, callback,
            finished: dict) -> ServerApp:
    return server_app(lambda: model, cfg, alg, options, n_clients=n_clients, state=state, callback=callback,
                      connect_timeout=settings.connect_timeout, round_timeout=settings.round_timeout,
                      max_update_ratio=settings.max_update_ratio, max_size_ratio=settings.max_size_ratio,
                      aggregator=settings.aggregator, fetch_personal=settings.fetch_personal,
                      fetch_states=settings.fetch_states, max_empty_rounds=settings.max_empty_rounds,
                      on_result=lambda r: finished.update(result=r))


def _checked_clients(model: nn.Module, clients: ClientData) -> ClientData:
    if not isinstance(clients, ClientData):
        raise ValueError(f"clients must be a neural.ClientData, got {type(clients).__name__}")
    # ClientData's checks again, with the federation's client indices: a tensor changed in place
    # since (a NaN pixel) would otherwise be reported by its node as the one "client 0"
    return neural.check_inputs(model, clients.subset(range(clients.n_clients)))


def inprocess_runner(*, app: ClientApp | None = None, connect_timeout: float = CONNECT_TIMEOUT,
                     round_timeout: float = ROUND_TIMEOUT, max_update_ratio: float = MAX_UPDATE_RATIO,
                     max_size_ratio: float = MAX_SIZE_RATIO, aggregator: FedAvg | None = None,
                     fetch_personal: bool = True, fetch_states: bool = False,
                     max_empty_rounds: int = 0) -> Runner:
    """A :data:`Runner` that runs an algorithm's rounds on Flower in this process: its
    :func:`server_app` (with these settings) drives :func:`client_app` (or ``app``, which must
    run the same algorithm, configuration and options) through :class:`InProcessGrid`, one node
    per client of ``clients`` (node i's data ``clients.subset([i])``); every call of a node is
    bounded by ``round_timeout``. On a CPU the nodes train on one intra-op thread, as the
    engine's clients do (so the runs agree bit for bit). ``workers`` is ignored."""
    settings = _settings(connect_timeout, round_timeout, max_update_ratio, max_size_ratio, aggregator,
                         fetch_personal, fetch_states, max_empty_rounds)

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
    alg = runnable(algorithm)
    options = alg.check_options(options)
    check_cfg(cfg)
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
                      fetch_personal: bool = True, fetch_states: bool = False,
                      max_empty_rounds: int = 0) -> Runner:
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
                         fetch_personal, fetch_states, max_empty_rounds)

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

        level = log.level
        if not verbose:
            log.setLevel(logging.WARNING)
        try:
            flwr_run_simulation(server, client_app(lambda: model, node_data, cfg, alg, options,
                                                   call_timeout=settings.round_timeout),
                                n_clients, backend_config=config)
        finally:
            log.setLevel(level)
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
    return runnable(algorithm).run(model, clients, cfg, options, state=state, callback=callback, runner=runner)


def run_inprocess(algorithm, model: nn.Module, clients: ClientData, cfg: TrainConfig, options=None, *,
                  state: Params | None = None, callback: Callable | None = None, app: ClientApp | None = None,
                  connect_timeout: float = CONNECT_TIMEOUT, round_timeout: float = ROUND_TIMEOUT,
                  max_update_ratio: float = MAX_UPDATE_RATIO, max_size_ratio: float = MAX_SIZE_RATIO,
                  aggregator: FedAvg | None = None, fetch_personal: bool = True,
                  fetch_states: bool = False, max_empty_rounds: int = 0) -> neural.FedResult:
    """Run ``algorithm`` (a registered name, as for ``algorithms.run``, or an algorithm object)
    on Flower with one node per client of ``clients``, in this process:
    ``algorithms.run(algorithm, model, clients, cfg, options)`` with every run of rounds on
    Flower (:func:`run_with` and :func:`inprocess_runner`, which take the other arguments).
    Returns the run's :class:`~replearn.neural.FedResult` (``extras["flower"]``: Flower's
    ``Result`` and the strategy, of the last stage)."""
    runner = inprocess_runner(app=app, connect_timeout=connect_timeout, round_timeout=round_timeout,
                              max_update_ratio=max_update_ratio, max_size_ratio=max_size_ratio,
                              aggregator=aggregator, fetch_personal=fetch_personal, fetch_states=fetch_states,
                              max_empty_rounds=max_empty_rounds)
    return run_with(runner, algorithm, model, clients, cfg, options, state=state, callback=callback)


def run_simulation(algorithm, model: nn.Module, clients: ClientData, cfg: TrainConfig, options=None, *,
                   state: Params | None = None, callback: Callable | None = None,
                   data_fn: Callable[[int], ClientData] | None = None, backend_config: dict | None = None,
                   verbose: bool = False, connect_timeout: float = CONNECT_TIMEOUT,
                   round_timeout: float = ROUND_TIMEOUT, max_update_ratio: float = MAX_UPDATE_RATIO,
                   max_size_ratio: float = MAX_SIZE_RATIO, aggregator: FedAvg | None = None,
                   fetch_personal: bool = True, fetch_states: bool = False,
                   max_empty_rounds: int = 0) -> neural.FedResult:
    """Run ``algorithm`` on Flower's simulation engine (Ray) with one virtual SuperNode per
    client of ``clients``: :func:`run_with` and :func:`simulation_runner` (``data_fn``: node
    i's data, loaded in its Ray actor; default ``clients.subset([i])``). Needs the
    ``simulation`` extra (Ray)."""
    runner = simulation_runner(data_fn=data_fn, backend_config=backend_config, verbose=verbose,
                               connect_timeout=connect_timeout, round_timeout=round_timeout,
                               max_update_ratio=max_update_ratio, max_size_ratio=max_size_ratio,
                               aggregator=aggregator, fetch_personal=fetch_personal, fetch_states=fetch_states,
                              max_empty_rounds=max_empty_rounds)
    return run_with(runner, algorithm, model, clients, cfg, options, state=state, callback=callback)
