"""The Flower adapter (replearn.neural.flower) against the in-process engine (replearn.neural), and
its fault contract: bad replies are dropped, sizes come from discovery, nothing hangs."""

import math
import os
import threading
import time

import numpy as np
import pytest
import torch

# Offline and quiet: no usage reports from Flower (read when flwr is imported) or Ray.
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
pytest.importorskip("flwr", reason="Flower is optional: pip install -r requirements-flower.txt")

from flwr.app import Array, ArrayRecord, Message, MessageType, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.serverapp.strategy import FedMedian, FedTrimmedAvg, Krum  # noqa: E402

from replearn.neural import flower
from replearn import neural  # noqa: E402
from tiny_net import Tiny  # noqa: E402

SIZES = (12, 20, 8, 16)
TEST_SIZES = tuple(5 + i for i in range(len(SIZES)))
CPU = torch.device("cpu")


def model_fn():
    """The same initial model on every node, as a seeded model builder gives in a deployment."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return Tiny()


def make_clients(sizes=SIZES):
    g = torch.Generator().manual_seed(1)
    parts = [[], [], [], []]
    for i, n in enumerate(sizes):
        shift = torch.randn(3, 1, 1, generator=g)
        for k, m in enumerate((n, TEST_SIZES[i])):
            parts[2 * k].append(torch.randn(m, 3, 8, 8, generator=g) + shift)
            parts[2 * k + 1].append(torch.randint(0, 3, (m,), generator=g))
    return neural.ClientData(*(tuple(p) for p in parts))


CLIENTS = make_clients()


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models gain nothing from intra-op threads, and on a busy shared CPU the thread
    pool's waiting makes them ten times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


IN_PROCESS = {"fedavg": neural.fedavg, "dsgd": neural.dsgd, "fedrep": neural.fedrep, "fedper": neural.fedper,
              "lg_fedavg": neural.lg_fedavg}


def assert_close(a, b, atol=1e-5):
    assert a.keys() == b.keys()
    for n in a:
        assert torch.allclose(a[n], b[n], atol=atol, rtol=0), (n, float((a[n] - b[n]).abs().max()))


def assert_finite(params):
    for n, p in params.items():
        assert torch.isfinite(p).all(), n


@pytest.mark.parametrize("algorithm, cfg", [
    ("fedavg", neural.TrainConfig(rounds=3, local_steps=3, batch_size=5, participation=0.5, seed=3)),
    ("dsgd", neural.TrainConfig(rounds=3, batch_size=5, participation=0.75, seed=4)),
    ("fedrep", neural.TrainConfig(rounds=3, local_steps=2, head_steps=2, batch_size=5,
                                  participation=0.5, seed=5)),
    ("fedrep", neural.TrainConfig(rounds=2, local_epochs=1, head_epochs=1, batch_size=7,
                                  weight_decay=1e-3, eval_every=2, seed=6)),
    ("fedper", neural.TrainConfig(rounds=2, local_steps=3, batch_size=5, participation=0.75, seed=10)),
    ("lg_fedavg", neural.TrainConfig(rounds=4, local_epochs=1, batch_size=6, momentum=0.9, eval_every=2,
                                     seed=11)),
])
def test_flower_matches_inprocess(algorithm, cfg):
    ref = IN_PROCESS[algorithm](model_fn(), CLIENTS, cfg)
    run = flower.run_inprocess(model_fn, CLIENTS, cfg, algorithm)
    assert_same_run(run, ref, cfg, algorithm)


def assert_same_run(run, ref, cfg, algorithm):
    """The Flower run ``run`` has the participants, global parameters, local parameters
    (FedRep's heads), per-round training losses and test accuracies of the in-process ``ref``."""
    assert tuple(run.strategy.participants) == ref.participants
    assert run.strategy.dropped == {}
    assert_close(run.state, ref.state)
    assert run.local.keys() == ref.local.keys()
    assert_close(run.local, ref.local)
    if ref.local:  # the local parameters stayed on the nodes and differ between clients
        n = next(iter(ref.local))
        assert not torch.allclose(run.local[n][0], run.local[n][1])
    for t in range(cfg.rounds):
        loss = run.result.train_metrics_clientapp[t + 1]["train_loss"]
        assert math.isclose(loss, float(ref.train_loss[t]), rel_tol=1e-5)
        if not math.isnan(float(ref.test_accuracy[t])):
            acc = run.result.evaluate_metrics_clientapp[t + 1]["accuracy"]
            assert math.isclose(acc, float(ref.test_accuracy[t]), abs_tol=1e-6)
        else:
            assert t + 1 not in run.result.evaluate_metrics_clientapp


@pytest.mark.filterwarnings("ignore:Tip. In future versions of Ray:FutureWarning")
def test_simulation_engine_matches_inprocess():
    """FedRep with partial participation on Flower's simulation engine (Ray actors, one node
    per client, data from data_fn(partition-id)) gives the in-process run: the same sampled
    clients, averaged bodies, heads kept on the nodes, losses and accuracies. One run only:
    starting and stopping Ray takes most of its 15-25 s on a small CPU machine."""
    pytest.importorskip("ray", reason="Flower's simulation engine needs Ray: "
                                      "pip install -r requirements-flower.txt")
    cfg = neural.TrainConfig(rounds=3, local_steps=2, head_steps=2, batch_size=5, participation=0.5,
                             weight_decay=1e-3, seed=7)
    ref = neural.fedrep(model_fn(), CLIENTS, cfg)
    run = flower.run_simulation(model_fn, lambda i: CLIENTS.subset([i]), CLIENTS.n_clients, cfg, "fedrep")
    assert len(set(run.strategy.participants)) > 1  # the sampled clients changed between rounds
    assert_same_run(run, ref, cfg, "fedrep")


# --------------------------------------------------------------------------------------------
# Fault injection: one bad client (BAD) among honest ones, through the in-process Grid

BAD = 2


def faulty_app(cfg, algorithm, *, train=None, evaluate=None):
    """The library's ClientApp, with client BAD's replies passed through ``train(reply, round)``
    or ``evaluate(reply, round)`` (which may change or replace them, raise or sleep). Returns
    the app and a log: ``sent[t]`` the global shared parameters the clients received in round
    t, ``returned[t][i]`` the parameters honest client i (and BAD before its fault) returned."""
    inner = flower.client_app(model_fn, lambda i: CLIENTS.subset([i]), cfg, algorithm)
    app, log = ClientApp(), {"sent": {}, "returned": {}}

    @app.query()
    def query(msg, context):
        return inner(msg, context)

    @app.train()
    def train_(msg, context):
        t, pid = msg.content["config"]["server-round"], context.node_config["partition-id"]
        log["sent"][t] = flower.from_record(msg.content["arrays"], CPU)
        reply = inner(msg, context)
        log["returned"].setdefault(t, {})[pid] = flower.from_record(reply.content["arrays"], CPU)
        return train(reply, t) if train is not None and pid == BAD else reply

    @app.evaluate()
    def evaluate_(msg, context):
        reply = inner(msg, context)
        t = msg.content["config"]["server-round"]
        return evaluate(reply, t) if evaluate is not None and context.node_config["partition-id"] == BAD \
            else reply

    return app, log


def expected_average(returned, kept):
    """The n_i-weighted average (true sizes) of the parameters the kept clients returned."""
    w = {i: float(SIZES[i]) for i in kept}
    return {n: sum(w[i] * returned[i][n] for i in kept) / sum(w.values()) for n in returned[kept[0]]}


def replace_arrays(reply, make):
    """Client BAD's reply with every array replaced by ``make(name, honest_array)``."""
    arrays = reply.content["arrays"]
    reply.content["arrays"] = ArrayRecord({n: make(n, a) for n, a in arrays.items()})
    return reply


def poison_first(value):
    """One entry of the first array set to ``value``, the others honest."""
    def make(n, a):
        x = a.numpy().copy()
        if n == "body.0.weight":
            x.flat[0] = value
        return Array(x)
    return lambda reply, t: replace_arrays(reply, make)


def raise_(reply, t):
    raise RuntimeError("disk full")


def set_metric(key, value):
    def fault(reply, t):
        reply.content["metrics"][key] = value
        return reply
    return fault


def wrong_payload(n, a):
    """Metadata of the honest array, payload of a three-element one."""
    return Array(dtype=a.dtype, shape=tuple(a.shape), stype=a.stype, data=Array(np.zeros(3, np.float32)).data)


def garbage_payload(n, a):
    """Metadata of the honest array, bytes that are no NumPy array at all."""
    return Array(dtype=a.dtype, shape=tuple(a.shape), stype=a.stype, data=b"\x93NUMPY garbage")


TRAIN_FAULTS = {
    "nan": (poison_first(np.nan), "non-finite"),
    "inf": (poison_first(np.inf), "non-finite"),
    "huge": (lambda reply, t: replace_arrays(reply, lambda n, a: Array(a.numpy() * np.float32(1e30))),
             "implausible magnitude"),
    "payload": (lambda reply, t: replace_arrays(reply, wrong_payload), "the payload holds"),
    "garbage": (lambda reply, t: replace_arrays(reply, garbage_payload), "the payload cannot be decoded"),
    "metadata": (lambda reply, t: replace_arrays(reply, lambda n, a: Array(np.zeros(3, np.float32))),
                 "metadata"),
    "renamed": (lambda reply, t: rename_arrays(reply), "do not match the global ones"),
    "raises": (raise_, "disk full"),
    "loss": (set_metric("train_loss", math.nan), "'train_loss' must be a finite number"),
}


def rename_arrays(reply):
    """Client BAD's honest arrays under other names."""
    arrays = reply.content["arrays"]
    reply.content["arrays"] = ArrayRecord({f"x.{n}": a for n, a in arrays.items()})
    return reply


@pytest.mark.parametrize("fault, algorithm", [(f, "fedavg") for f in TRAIN_FAULTS] + [("nan", "fedrep")])
def test_bad_training_reply_is_dropped(fault, algorithm):
    """A NaN, inf, blown-up, mis-shaped (payload or metadata), renamed, failing or NaN-loss
    update of client BAD is dropped from every round's average and recorded; the global model
    after each round is the n_i-weighted average of the honest clients' updates, and finite."""
    make, reason = TRAIN_FAULTS[fault]
    cfg = neural.TrainConfig(rounds=2, local_steps=2, head_steps=1, batch_size=5, seed=0)
    app, log = faulty_app(cfg, algorithm, train=make)
    run = flower.run_inprocess(model_fn, CLIENTS, cfg, algorithm, app=app)
    assert set(run.strategy.dropped) == {1, 2}
    for t, drops in run.strategy.dropped.items():
        assert [(d.client, d.stage) for d in drops] == [(BAD, "train")]
        assert reason in drops[0].reason, drops[0].reason
    honest = [i for i in range(CLIENTS.n_clients) if i != BAD]
    assert_close(log["sent"][2], expected_average(log["returned"][1], honest), atol=1e-6)
    final = {n: run.state[n] for n in log["sent"][2]}
    assert_finite(final)
    assert_close(final, expected_average(log["returned"][2], honest), atol=1e-6)
    for t in (1, 2):
        assert math.isfinite(run.result.train_metrics_clientapp[t]["train_loss"])
        assert 0 <= run.result.evaluate_metrics_clientapp[t]["accuracy"] <= 1


def test_claimed_sizes_are_ignored():
    """A client claiming num-examples = 10**15 for training and evaluation takes nothing over:
    the weights are the sizes discovery reported, and the run is the in-process one."""
    cfg = neural.TrainConfig(rounds=2, local_steps=2, batch_size=5, participation=0.75, seed=8)
    lie = set_metric("num-examples", 10**15)
    app, _ = faulty_app(cfg, "fedavg", train=lie, evaluate=lie)
    run = flower.run_inprocess(model_fn, CLIENTS, cfg, "fedavg", app=app)
    assert BAD in {i for p in run.strategy.participants for i in p}
    assert_same_run(run, neural.fedavg(model_fn(), CLIENTS, cfg), cfg, "fedavg")


@pytest.mark.parametrize("fault, reason", [
    (raise_, "disk full"),
    (set_metric("accuracy", math.nan), "'accuracy' must be a finite number"),
    (set_metric("accuracy", 1.5), "must lie in [0, 1]"),
])
def test_bad_evaluation_reply_is_dropped(fault, reason):
    """Client BAD fails or lies in evaluation: it is recorded in ``dropped`` at stage
    "evaluate", training is the in-process run's, and the reported accuracy is the
    test-size-weighted mean of the other clients' accuracies (not silently another number)."""
    cfg = neural.TrainConfig(rounds=2, local_steps=2, batch_size=5, seed=9)
    ref = neural.fedavg(model_fn(), CLIENTS, cfg)
    app, _ = faulty_app(cfg, "fedavg", evaluate=fault)
    run = flower.run_inprocess(model_fn, CLIENTS, cfg, "fedavg", app=app)
    assert {t: [(d.client, d.stage) for d in ds] for t, ds in run.strategy.dropped.items()} == \
        {1: [(BAD, "evaluate")], 2: [(BAD, "evaluate")]}
    assert all(reason in d.reason for ds in run.strategy.dropped.values() for d in ds)
    assert_close(run.state, ref.state)
    assert math.isclose(run.result.train_metrics_clientapp[2]["train_loss"], float(ref.train_loss[1]),
                        rel_tol=1e-5)
    honest = [i for i in range(CLIENTS.n_clients) if i != BAD]
    expected = (sum(TEST_SIZES[i] * float(ref.final.accuracy[i]) for i in honest)
                / sum(TEST_SIZES[i] for i in honest))
    assert math.isclose(run.result.evaluate_metrics_clientapp[2]["accuracy"], expected, abs_tol=1e-6)
    assert not math.isclose(expected, float(ref.test_accuracy[1]), abs_tol=1e-6)  # the case can fail


def test_missing_node_times_out():
    """The server waits for n_clients = 5 nodes; only 4 connect: a TimeoutError after
    connect_timeout, saying what to change, instead of waiting forever."""
    cfg = neural.TrainConfig(rounds=1, local_steps=1)
    grid = flower.InProcessGrid(flower.client_app(model_fn, lambda i: CLIENTS.subset([i]), cfg, "fedavg"),
                                CLIENTS.n_clients)
    server = flower.server_app(model_fn, cfg, "fedavg", n_clients=5, connect_timeout=0.5)
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"only 4 of the n_clients = 5 nodes connected .* n_clients=4"):
        grid.run_server(server)
    assert time.monotonic() - start < 30


def test_slow_node_is_dropped_after_round_timeout():
    """Client BAD answers round 1 after round_timeout: its update is dropped as missing (the
    other nodes' replies, which came in time, are averaged); round 2 is complete."""
    cfg = neural.TrainConfig(rounds=2, local_steps=2, batch_size=5, seed=0)

    def slow(reply, t):
        if t == 1:
            time.sleep(3.0)  # the grid abandons the call at 2 s; its next message waits for it
        return reply

    app, log = faulty_app(cfg, "fedavg", train=slow)
    run = flower.run_inprocess(model_fn, CLIENTS, cfg, "fedavg", app=app, round_timeout=2.0)
    assert run.strategy.dropped == {1: [flower.Dropped(BAD, "train", "no reply within round_timeout = 2 s")]}
    honest = [i for i in range(CLIENTS.n_clients) if i != BAD]
    assert_close(log["sent"][2], expected_average(log["returned"][1], honest), atol=1e-6)
    assert_close({n: run.state[n] for n in log["sent"][2]},
                 expected_average(log["returned"][2], range(CLIENTS.n_clients)), atol=1e-6)


def test_a_nan_pixel_is_reported_for_the_client_that_has_it():
    """A NaN pixel in client BAD's data (here: its partition) is reported as client BAD's, not as
    "client 0" (each node's one-client ClientData, where the check ran)."""
    cfg = neural.TrainConfig(rounds=1, local_steps=1, batch_size=5)
    clients = make_clients()
    clients.x_train[BAD][1, 0, 2, 3] = float("nan")  # changed in place, after ClientData's checks
    with pytest.raises(ValueError, match=rf"^client {BAD} train images contain NaN or infinite values"):
        flower.run_inprocess(model_fn, clients, cfg, "fedavg")

    def data_fn(i):  # a node that builds its own data, as in a deployment or the simulation engine
        x_test = CLIENTS.x_test[i].clone()
        if i == BAD:
            x_test[0, 1, 0, 0] = float("nan")
        return neural.ClientData((CLIENTS.x_train[i],), (CLIENTS.y_train[i],), (x_test,),
                                 (CLIENTS.y_test[i],))

    grid = flower.InProcessGrid(flower.client_app(model_fn, data_fn, cfg, "fedavg"), CLIENTS.n_clients)
    with pytest.raises(ValueError, match=rf"partition {BAD} \(client {BAD}\): data_fn\({BAD}\) gave invalid "
                                         rf"data: client 0 test images contain NaN .*not the partitions"):
        grid.run_server(flower.server_app(model_fn, cfg, "fedavg", n_clients=CLIENTS.n_clients))


def test_bad_inputs():
    cfg = neural.TrainConfig(rounds=1, local_steps=1)
    spec = neural.algorithm_spec("fedavg", model_fn(), cfg)
    with pytest.raises(ValueError, match="algorithm must be one of"):
        flower.run_inprocess(model_fn, CLIENTS, cfg, "fedprox")
    with pytest.raises(ValueError, match="augment"):
        flower.run_inprocess(model_fn, CLIENTS, neural.TrainConfig(augment=True), "fedavg")
    two = flower.client_app(model_fn, lambda i: CLIENTS.subset([i, i]), cfg, "fedavg")
    with pytest.raises(ValueError, match="must return one client"):
        flower.run_inprocess(model_fn, CLIENTS, cfg, "fedavg", app=two)
    with pytest.raises(ValueError, match="one train size and one test size per node"):
        flower.ReplayFedAvg([1, 2], [5, 6], [5], spec)
    with pytest.raises(ValueError, match="max_update_ratio must be positive"):
        flower.ReplayFedAvg([1], [5], [5], spec, max_update_ratio=0)
    with pytest.raises(ValueError, match="share nothing"):
        flower.run_inprocess(model_fn, CLIENTS, cfg, "local_only")
    for bad in (0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="round_timeout must be a positive number of seconds"):
            flower.server_app(model_fn, cfg, "fedavg", round_timeout=bad)
    with pytest.raises(ValueError, match="connect_timeout must be a positive number of seconds"):
        flower.run_inprocess(model_fn, CLIENTS, cfg, "fedavg", connect_timeout=0)
    with pytest.raises(ValueError, match="n_clients must be a positive int"):
        flower.server_app(model_fn, cfg, "fedavg", n_clients=0)
    with pytest.raises(ValueError, match="n_clients must be positive"):
        flower.run_simulation(model_fn, lambda i: CLIENTS.subset([i]), 0, cfg, "fedavg")
    with pytest.raises(ValueError, match="augment"):
        flower.run_simulation(model_fn, lambda i: CLIENTS.subset([i]), 4, neural.TrainConfig(augment=True),
                              "fedavg")


class EchoGrid(flower.InProcessGrid):
    """A grid that delivers client BAD's training replies twice."""

    def send_and_receive(self, messages, *, timeout=None):
        replies = super().send_and_receive(messages, timeout=timeout)
        bad = list(self.contexts)[BAD]
        return replies + [r for r in replies if r.metadata.src_node_id == bad
                          and r.metadata.message_type == "train"]


def test_duplicate_reply_is_dropped():
    """A reply delivered twice counts once: the copy is dropped, the run is the in-process one."""
    cfg = neural.TrainConfig(rounds=2, local_steps=2, batch_size=5, seed=12)
    app = flower.client_app(model_fn, lambda i: CLIENTS.subset([i]), cfg, "fedavg")
    grid = EchoGrid(app, CLIENTS.n_clients)
    done = {}
    server = flower.server_app(model_fn, cfg, "fedavg", n_clients=CLIENTS.n_clients,
                               on_result=lambda result, strategy: done.update(strategy=strategy))
    context = grid.run_server(server)
    ref = neural.fedavg(model_fn(), CLIENTS, cfg)
    assert_close(flower.from_record(context.state["arrays"], CPU), ref.state)
    assert done["strategy"].dropped == {t: [flower.Dropped(BAD, "train", f"node {list(grid.contexts)[BAD]} "
                                                           "was not asked or replied twice")] for t in (1, 2)}


class SilentGrid(flower.InProcessGrid):
    """A grid on which client BAD's replies never arrive."""

    def send_and_receive(self, messages, *, timeout=None):
        bad = list(self.contexts)[BAD]
        replies = super().send_and_receive(messages, timeout=timeout)
        return [r for r in replies if r.metadata.src_node_id != bad]


def test_discovery_faults_stop_the_run_with_a_clear_error():
    """Discovery is trusted (its sizes become the weights): a node that fails or stays silent
    there stops the run before training, with an error naming the node."""
    cfg = neural.TrainConfig(rounds=1, local_steps=1)
    inner = flower.client_app(model_fn, lambda i: CLIENTS.subset([i]), cfg, "fedavg")
    app = ClientApp()

    @app.query()
    def query(msg, context):
        if context.node_config["partition-id"] == BAD:
            raise RuntimeError("no data mounted")
        return inner(msg, context)

    with pytest.raises(ValueError, match=r"node \d+ did not report its partition: RuntimeError: no data"):
        flower.run_inprocess(model_fn, CLIENTS, cfg, "fedavg", app=app)
    grid = SilentGrid(inner, CLIENTS.n_clients)
    silent = list(grid.contexts)[BAD]
    with pytest.raises(TimeoutError, match=rf"nodes \[{silent}\] did not answer the discovery"):
        grid.run_server(flower.server_app(model_fn, cfg, "fedavg", n_clients=CLIENTS.n_clients))


# --------------------------------------------------------------------------------------------
# Issue 27: hanging nodes, forged replies, over-reported sizes, robust aggregation


@pytest.fixture
def release():
    """An event the hanging fault injections wait on, set when the test ends (so the abandoned
    daemon threads finish)."""
    event = threading.Event()
    yield event
    event.set()


def test_node_that_hangs_in_training_is_dropped_and_the_run_finishes(release):
    """Client BAD answers discovery, then never returns from train: every call is bounded by
    round_timeout, BAD is dropped and recorded in every round (train, and evaluate while its
    abandoned call still runs), the others are averaged, and the run returns."""
    cfg = neural.TrainConfig(rounds=2, local_steps=2, batch_size=5, seed=0)

    def hang(reply, t):
        release.wait()
        return reply

    app, log = faulty_app(cfg, "fedavg", train=hang)
    start = time.monotonic()
    run = flower.run_inprocess(model_fn, CLIENTS, cfg, "fedavg", app=app, round_timeout=1.0)
    assert time.monotonic() - start < 60
    assert {t: sorted({(d.client, d.stage) for d in ds}) for t, ds in run.strategy.dropped.items()} == \
        {1: [(BAD, "evaluate"), (BAD, "train")], 2: [(BAD, "evaluate"), (BAD, "train")]}
    assert all("round_timeout = 1 s" in d.reason for ds in run.strategy.dropped.values() for d in ds)
    honest = [i for i in range(CLIENTS.n_clients) if i != BAD]
    assert_close(log["sent"][2], expected_average(log["returned"][1], honest), atol=1e-6)
    assert_finite(run.state)
    assert 0 <= run.result.evaluate_metrics_clientapp[2]["accuracy"] <= 1


def test_client_app_bounds_its_own_calls(release):
    """The library's ClientApp answers a call that hangs (here its data source) with a
    TimeoutError error reply after call_timeout, and a node whose abandoned call still runs
    answers at once with an error instead of starting another call."""
    cfg = neural.TrainConfig(rounds=1, local_steps=1)
    calls = []

    def data_fn(i):
        calls.append(i)
        if i == BAD:
            release.wait()
        return CLIENTS.subset([i])

    grid = flower.InProcessGrid(flower.client_app(model_fn, data_fn, cfg, "fedavg", call_timeout=0.5),
                                CLIENTS.n_clients, call_timeout=30.0)
    bad = list(grid.contexts)[BAD]
    grid.set_server_identity()  # what Flower's Message reads (run_server sets it; this test makes messages itself)
    start = time.monotonic()
    for expected in ("did not finish within 0.5 s", "still running an earlier call"):
        reply, = grid.send_and_receive([Message(RecordDict(), dst_node_id=bad, message_type=MessageType.QUERY)])
        assert reply.has_error() and "TimeoutError" in reply.error.reason and expected in reply.error.reason
    assert time.monotonic() - start < 10 and calls == [BAD]
    with pytest.raises(ValueError, match="call_timeout must be a positive number of seconds"):
        flower.client_app(model_fn, data_fn, cfg, "fedavg", call_timeout=0)
    with pytest.raises(ValueError, match="call_timeout must be a positive number of seconds"):
        flower.InProcessGrid(flower.client_app(model_fn, data_fn, cfg, "fedavg"), 2, call_timeout=math.inf)


class ForgingGrid(flower.InProcessGrid):
    """A grid on which client BAD's training reply arrives under client FORGED's node id,
    before FORGED's genuine reply."""

    FORGED = 3

    def send_and_receive(self, messages, *, timeout=None):
        replies = super().send_and_receive(messages, timeout=timeout)
        nodes = list(self.contexts)
        for r in replies:
            if r.metadata.src_node_id == nodes[BAD] and r.metadata.message_type == "train":
                r.metadata.__dict__["_src_node_id"] = nodes[self.FORGED]
        return sorted(replies, key=lambda r: r.metadata.src_node_id != nodes[self.FORGED])


def test_forged_reply_cannot_take_another_nodes_slot():
    """BAD's update, sent under FORGED's node id, is dropped as forged; FORGED's genuine update
    is averaged; BAD itself gave no reply of its own and is recorded as missing."""
    cfg = neural.TrainConfig(rounds=2, local_steps=2, batch_size=5, seed=3)
    app, log = faulty_app(cfg, "fedavg")
    grid = ForgingGrid(app, CLIENTS.n_clients)
    done = {}
    server = flower.server_app(model_fn, cfg, "fedavg", n_clients=CLIENTS.n_clients,
                               on_result=lambda result, strategy: done.update(strategy=strategy))
    grid.run_server(server)
    for t in (1, 2):
        drops = done["strategy"].dropped[t]
        assert sorted((d.client, d.stage) for d in drops if d.client is not None) == [(BAD, "train")]
        forged = [d for d in drops if d.client is None]
        assert len(forged) == 1 and "forged or misrouted" in forged[0].reason
    honest = [i for i in range(CLIENTS.n_clients) if i != BAD]
    assert_close(log["sent"][2], expected_average(log["returned"][1], honest), atol=1e-6)


def over_reporting_app(cfg, claim):
    inner = flower.client_app(model_fn, lambda i: CLIENTS.subset([i]), cfg, "fedavg")
    app = ClientApp()

    @app.query()
    def query(msg, context):
        reply = inner(msg, context)
        if context.node_config["partition-id"] == BAD:
            reply.content["info"]["num-examples"] = claim
        return reply

    @app.train()
    def train(msg, context):
        return inner(msg, context)

    @app.evaluate()
    def evaluate(msg, context):
        return inner(msg, context)

    return app


@pytest.mark.parametrize("claim", [10**15, 10**4])
def test_over_reported_size_at_discovery_is_refused(claim):
    """A node claiming far more training data than the others (here more than MAX_SIZE_RATIO
    times their median) would take nearly all the weight: the run stops at discovery, naming it."""
    cfg = neural.TrainConfig(rounds=1, local_steps=1, batch_size=5, seed=0)
    with pytest.raises(ValueError, match=rf"partition {BAD}\) reports num-examples = {claim}, more than "
                                         r"max_size_ratio = 100 times the median"):
        flower.run_inprocess(model_fn, CLIENTS, cfg, "fedavg", app=over_reporting_app(cfg, claim))
    # a plausible imbalance passes; the rule can be widened explicitly
    flower.run_inprocess(model_fn, CLIENTS, cfg, "fedavg", app=over_reporting_app(cfg, 200))
    with pytest.raises(ValueError, match="max_size_ratio must be a number >= 1"):
        flower.run_inprocess(model_fn, CLIENTS, cfg, "fedavg", max_size_ratio=0.5)


def sign_flip(reply, sent):
    """BAD returns global - 5 x its honest update (inside the magnitude rule)."""
    return replace_arrays(reply, lambda n, a: Array((sent[n].numpy() - 5 * (a.numpy() - sent[n].numpy()))
                                                    .astype(a.numpy().dtype)))


def crafted(reply, sent):
    """BAD returns global + 9 max(|global|, 1) along the all-ones direction (inside the rule)."""
    def make(n, a):
        g = sent[n].numpy().astype(np.float64)
        step = 9.0 * max(float(np.linalg.norm(g)), 1.0) * np.ones_like(g) / math.sqrt(g.size)
        return Array((g + step).astype(a.numpy().dtype))
    return replace_arrays(reply, make)


@pytest.mark.parametrize("attack", [sign_flip, crafted])
@pytest.mark.parametrize("aggregator", [None, "median", "trimmed", "krum"])
def test_robust_aggregation_against_sign_flip_and_crafted_updates(attack, aggregator):
    """One attacker among four: with the default weighted mean its update moves the global model
    outside the range of the honest updates (the contract says so); with Flower's FedMedian or
    FedTrimmedAvg every coordinate stays within the honest range, and Krum picks an honest
    update."""
    cfg = neural.TrainConfig(rounds=2, local_steps=2, batch_size=5, seed=1)
    box = {}
    app, log = faulty_app(cfg, "fedavg", train=lambda reply, t: attack(reply, box["log"]["sent"][t]))
    box["log"] = log
    make = {None: lambda: None, "median": FedMedian, "trimmed": lambda: FedTrimmedAvg(beta=0.25),
            "krum": lambda: Krum(num_malicious_nodes=1)}[aggregator]
    run = flower.run_inprocess(model_fn, CLIENTS, cfg, "fedavg", app=app, aggregator=make())
    assert run.strategy.dropped == {}  # the attack passes the screening
    honest = [i for i in range(CLIENTS.n_clients) if i != BAD]
    after = log["sent"][2]
    inside = all(bool(((after[n] >= torch.stack([log["returned"][1][i][n] for i in honest]).amin(0) - 1e-6)
                       & (after[n] <= torch.stack([log["returned"][1][i][n] for i in honest]).amax(0) + 1e-6))
                      .all()) for n in after)
    if aggregator is None:
        assert not inside
    else:
        assert inside
    if aggregator == "krum":
        assert any(all(torch.allclose(after[n], log["returned"][1][i][n], atol=1e-6) for n in after)
                   for i in honest)


def test_bad_aggregator_is_refused():
    cfg = neural.TrainConfig(rounds=1, local_steps=1)
    for bad in ("median", FedMedian(weighted_by_key="n"), object()):
        with pytest.raises(ValueError, match="aggregator must be None"):
            flower.run_inprocess(model_fn, CLIENTS, cfg, "fedavg", aggregator=bad)
