"""The server's side of a Flower run: :class:`ReplayStrategy`, a Flower strategy running an
algorithm's server step (the engine's :mod:`~replearn.neural.engine.server`: plan, draws,
broadcast, the ordered n_i-weighted mean, ``server_update``, the round's loss) with the
screening of the fault contract (:mod:`replearn.neural.flower`)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAvg, Result
from torch import nn

from replearn import neural
from replearn.backend import make_generator
from replearn.neural import Params, TrainConfig
from replearn.neural.engine.guards import check_steps, check_upload
from replearn.neural.engine.server import Kept, StateUnavailable, finish_round, first_visit_params, start_round
from replearn.neural.flower.common import (MAX_UPDATE_RATIO, ROUND_TIMEOUT, averages, check_cfg,
                                           check_fingerprint, check_seconds, fingerprint, log, resolve, runnable)
from replearn.neural.flower.records import finite, from_record, pack, structure, tensors, to_record, unpack
from replearn.neural.flower.screening import Dropped, Upload, decoded, implausible, number

__all__ = ["FlowerRun", "ReplayStrategy", "check_aggregator", "prepare"]


def check_aggregator(aggregator, algorithm=None) -> None:
    """``aggregator`` must be None or a Flower FedAvg-family strategy with the default record
    keys, and with ``algorithm`` given, that algorithm's server step the average (``ValueError``
    naming what to pass otherwise)."""
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


class _NodeStates(Mapping):
    """The round's sampled clients' states as a mapping for the algorithm's ``broadcast``: on
    the first access of a state, the states of all of ``clients`` are fetched from their nodes
    in one exchange (so a broadcast that reads none fetches none) and kept in ``cache`` (shared
    by the round's mappings); a state its node did not send raises
    :class:`~replearn.neural.engine.server.StateUnavailable`."""

    def __init__(self, fetch: Callable[[list[int]], dict], clients: Sequence[int], cache: dict):
        self._fetch, self._clients, self._cache = fetch, list(clients), cache

    def __getitem__(self, i):
        if i not in self._clients:
            raise KeyError(i)
        if "states" not in self._cache:
            self._cache["states"] = self._fetch(self._clients)
        states = self._cache["states"]
        if i not in states:
            raise StateUnavailable(i, [c for c in self._clients if c in states])
        return states[i]

    def __iter__(self):
        return iter(self._clients)

    def __len__(self):
        return len(self._clients)


def prepare(alg, model: nn.Module, cfg: TrainConfig, options) -> tuple:
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
    averaging algorithms); ``fetch_personal``, ``fetch_states``: what :meth:`finish` fetches;
    ``max_empty_rounds``: how many rounds may keep no training update (every reply dropped)
    before the run raises ``RuntimeError`` naming the nodes' errors (``empty_rounds`` lists
    them). Every message carries the run's ``fingerprint``
    (:func:`~replearn.neural.flower.common.fingerprint`), and a reply whose echoed fingerprint
    differs (a node built for another algorithm, other options or other training settings) is
    dropped with the difference as its reason.
    """

    def __init__(self, nodes: Sequence[int], train_sizes: Sequence[int], test_sizes: Sequence[int], algorithm,
                 model: nn.Module, cfg: TrainConfig, options=None, *, state: Params | None = None,
                 callback: Callable[[int, dict], None] | None = None, round_timeout: float = ROUND_TIMEOUT,
                 max_update_ratio: float = MAX_UPDATE_RATIO, aggregator: FedAvg | None = None,
                 fetch_personal: bool = True, fetch_states: bool = False, max_empty_rounds: int = 0):
        if len(nodes) != len(train_sizes) or len(nodes) != len(test_sizes) or not nodes:
            raise ValueError(f"need one train size and one test size per node, got {len(nodes)} nodes, "
                             f"{len(train_sizes)} train sizes and {len(test_sizes)} test sizes")
        check_seconds(round_timeout=round_timeout)
        if isinstance(max_update_ratio, bool) or not isinstance(max_update_ratio, (int, float)) \
                or not max_update_ratio > 0:
            raise ValueError(f"max_update_ratio must be positive (math.inf turns the magnitude rule "
                             f"off), got {max_update_ratio!r}")
        if isinstance(max_empty_rounds, bool) or not isinstance(max_empty_rounds, int) or max_empty_rounds < 0:
            raise ValueError(f"max_empty_rounds must be an int >= 0, got {max_empty_rounds!r}")
        alg = runnable(algorithm)
        check_aggregator(aggregator, alg)
        check_cfg(cfg)
        options = alg.check_options(options)
        if not any(test_sizes):
            raise ValueError("no node has test data; every run evaluates on the clients' test sets")
        M = len(nodes)
        super().__init__(fraction_train=cfg.participation, min_train_nodes=1, min_evaluate_nodes=M,
                         min_available_nodes=M)
        self.algorithm, self.cfg, self.options = alg, cfg, options
        self.phases = prepare(alg, model, cfg, options)
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
        self.max_empty_rounds = max_empty_rounds
        self.empty_rounds: list[int] = []
        self.fingerprint = fingerprint(alg, options, cfg)
        self.generator = make_generator(cfg.seed)
        self.participants: list[tuple[int, ...]] = []
        self.dropped: dict[int, list[Dropped]] = {}
        self.upload_signature: tuple | None = None
        self.train_loss = torch.full((cfg.rounds,), float("nan"))
        self.test_accuracy = torch.full((cfg.rounds,), float("nan"))
        self.evaluation: neural.Evaluation | None = None
        self.local: Params = {}
        self.client_states: dict[int, dict] = {}
        self.unvisited = self.initial  # what a client not yet sampled starts from (cfg.first_visit)
        self._initial_record = to_record(self.unvisited, self.names)
        self._grid: Grid | None = None
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
        config = {**config, "commit-round": self._kept_round.get(client, -1),
                  **self.fingerprint.entries("fingerprint-")}
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
                check_fingerprint(msg, self.fingerprint)
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
        log.warning("round %d: dropped the %s reply of client %s: %s", server_round, stage, client, reason)

    # client states a broadcast reads ---------------------------------------------------------

    def _screen_state(self, client: int, msg: Message) -> tuple[int, dict]:
        """The reply's state, decoded and finite (ValueError otherwise); its form is checked by
        :meth:`_formed`."""
        records, configs = msg.content.array_records, msg.content.config_records
        if "state-info" not in configs:
            raise ValueError("the reply carries no state")
        state = unpack(records.get("state", ArrayRecord()), configs["state-info"]["tree"], self.device)
        if not finite(tensors(state)):
            raise ValueError("the state has non-finite values (NaN or inf)")
        return client, state

    def _formed(self, server_round: int, stage: str, states: dict[int, dict]) -> dict[int, dict]:
        """The states of ``states`` whose form (nesting, dtypes, shapes) is that of the
        algorithm's ``init_client`` or the one most of them share; the others are dropped."""
        if self._state_template is None:
            self._state_template = structure(self.algorithm.init_client(self.initial, self.options))
        forms = {i: structure(state) for i, state in states.items()}
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
        self._grid = grid
        cache: dict = {}  # a state the broadcast reads is fetched once; a failed one is recorded at stage "state"
        start = start_round(self.algorithm, self.train_sizes, self.phases, self.cfg, self.options, self.generator,
                            self.params, self.server, lambda selected: _NodeStates(
                                lambda clients: self._fetch_states(grid, server_round, clients), selected, cache))
        plan, selected, draws, broadcast = start.plan, start.selected, start.draws, start.broadcast
        self.participants.append(plan.clients)
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

    def _screen_train(self, client: int, msg: Message) -> Upload:
        """The reply's upload and loss (ValueError if it must be dropped)."""
        arrays, metrics = msg.content.array_records, msg.content.metric_records
        if len(arrays) != 1 or len(metrics) != 1:
            raise ValueError(f"expected one ArrayRecord and one MetricRecord, got {len(arrays)} and "
                             f"{len(metrics)}")
        record = next(iter(arrays.values()))
        values = decoded(record, self._global)
        check_upload(self.algorithm.name, {n: torch.from_numpy(v) for n, v in values.items()}, self.params)
        reported = next(iter(metrics.values()))
        loss_sum = number(reported, "loss-sum")
        try:
            steps = check_steps(self.algorithm.name, reported.get("n-steps"))
        except ValueError:
            raise ValueError(f"metric 'n-steps' must be an integer >= 0, got {reported.get('n-steps')!r}") from None
        loss = number(reported, "train_loss") if steps else math.nan  # no step: no loss was measured
        claimed = reported.get(self.weighted_by_key)
        if claimed != self.train_sizes[client]:
            log.warning("client %d claims %s = %r, discovery reported %d: weighting by %d", client,
                         self.weighted_by_key, claimed, self.train_sizes[client], self.train_sizes[client])
        return Upload(client, msg, record, values, loss, loss_sum, steps)

    def _agreed(self, server_round: int, uploads: list[Upload]) -> list[Upload]:
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

    def _plausible(self, server_round: int, uploads: list[Upload]) -> list[Upload]:
        """The uploads that pass the plausible-magnitude rule; the others are dropped."""
        ratio = self.max_update_ratio
        if not uploads or ratio == math.inf:
            return uploads
        bad = implausible(uploads, self._global, ratio)
        for client, reason in bad.items():
            self._drop(server_round, client, "train", reason)
        return [u for u in uploads if u.client not in bad]

    def _robust_mean(self, server_round: int, uploads: list[Upload]) -> Params | None:
        """The robust ``aggregator``'s aggregate of the uploads (None without one: the n_i-weighted
        mean, :func:`~replearn.neural.engine.server.mean_upload`)."""
        if self.aggregator is None or not uploads[0].arrays:
            return None
        messages = [Message(content=RecordDict({self.arrayrecord_key: u.record, "metrics": MetricRecord(
            {"train_loss": u.train_loss, self.weighted_by_key: self.train_sizes[u.client]})}),
            metadata=u.msg.metadata) for u in uploads]
        aggregate, _ = self.aggregator.aggregate_train(server_round, messages)
        return {n: t.to(self.device) for n, t in from_record(aggregate, self.device).items()}

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The round's end (:func:`~replearn.neural.engine.server.finish_round`) on the screened
        uploads, in client order; a round that keeps none leaves the server as it was, and
        raises once more than ``max_empty_rounds`` rounds kept none."""
        uploads = self._kept(server_round, "train", replies, self._screen_train)
        uploads = self._plausible(server_round, self._agreed(server_round, uploads))
        uploads.sort(key=lambda u: u.client)  # in client order: the in-process sums
        if not uploads:
            return self._empty(server_round)
        kept = [Kept(u.client, {n: torch.tensor(v, device=self.device) for n, v in u.arrays.items()}, u.loss_sum,
                     u.n_steps) for u in uploads]
        try:
            params, server, loss = finish_round(self.algorithm, self.params, self.server, kept, self.train_sizes,
                                                self.options, mean=self._robust_mean(server_round, uploads))
        except Exception as ex:
            names = sorted(uploads[0].arrays)
            if self.upload_signature is not None:
                raise ValueError(f"round {server_round}: {self.algorithm.name}'s server step failed on the mean of "
                                 f"the uploads {names} ({type(ex).__name__}: {ex}); the nodes' uploads are not "
                                 f"what its server_update reads: are the nodes built for {self.algorithm.name}?"
                                 ) from ex
            # the upload's form is not fixed yet (one reply, or no majority): a faulty reply may
            # have passed; it must not stop the run
            for k in kept:
                self._drop(server_round, k.client, "train", f"the server step failed on the round's uploads "
                           f"({type(ex).__name__}: {ex}); the upload's form is not fixed yet")
            return self._empty(server_round)
        self.params, self.server = params, server
        self._params_record = None
        for k in kept:
            self._kept_round[k.client] = server_round
        self._first_visit(server_round, [k.client for k in kept])
        self.train_loss[server_round - 1] = loss
        return (to_record(self.params, self.names),
                MetricRecord({"train_loss": float(self.train_loss[server_round - 1])}))

    def _first_visit(self, server_round: int, kept: list[int]) -> None:
        """After a round that kept the updates of ``kept``: what a client not yet sampled starts
        from (``cfg.first_visit``, :func:`~replearn.neural.engine.server.first_visit_params`; for
        ``"average"`` from the kept clients' new states, fetched from their nodes), sent to every
        node with its next message as the run's ``initial`` parameters."""
        rule = self.cfg.first_visit
        if rule == "initial":
            return
        states: dict[int, dict] = {}
        if rule == "average" and self.personal:
            fetched = self._fetch_states(self._grid, server_round, kept)
            states = {i: fetched[i] for i in kept if i in fetched}
        self.unvisited = first_visit_params(rule if states else "global", self.params, self.personal, states,
                                            self.train_sizes)
        self._initial_record = to_record(self.unvisited, self.names)
        self._primed.clear()  # every node is sent the new starting point

    def _empty(self, server_round: int) -> tuple[None, None]:
        """A round that kept no update: recorded in ``empty_rounds``; ``RuntimeError`` naming the
        dropped replies once there are more than ``max_empty_rounds``."""
        self.empty_rounds.append(server_round)
        if len(self.empty_rounds) > self.max_empty_rounds:
            drops = [d for d in self.dropped.get(server_round, []) if d.stage in ("train", "state")]
            reasons = "; ".join(f"client {d.client} ({d.stage}): {d.reason}" for d in drops[:5])
            more = f"; and {len(drops) - 5} more" if len(drops) > 5 else ""
            raise RuntimeError(f"round {server_round} of {self.algorithm.name} on Flower kept no client's update "
                               f"({len(self.empty_rounds)} such rounds, max_empty_rounds = {self.max_empty_rounds}): "
                               f"{reasons or 'no client was asked'}{more} (strategy.dropped lists every reply "
                               f"left out)")
        return None, None

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
        accuracy, loss = number(reported, "accuracy"), number(reported, "loss")
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
