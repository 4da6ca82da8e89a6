"""The Flower adapter (replearn.flower) against the in-process engine (replearn.neural), and
its fault contract: bad replies are dropped, sizes come from discovery, nothing hangs."""

import math
import os
import time

import numpy as np
import pytest
import torch

# Offline and quiet: no usage reports from Flower (read when flwr is imported) or Ray.
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
pytest.importorskip("flwr", reason="Flower is optional: pip install -r requirements-flower.txt")

from flwr.app import Array, ArrayRecord  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402

from replearn import flower, neural  # noqa: E402
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
            time.sleep(4.0)
        return reply

    app, log = faulty_app(cfg, "fedavg", train=slow)
    run = flower.run_inprocess(model_fn, CLIENTS, cfg, "fedavg", app=app, round_timeout=2.0)
    assert run.strategy.dropped == {1: [flower.Dropped(BAD, "train", "no reply within round_timeout = 2 s")]}
    honest = [i for i in range(CLIENTS.n_clients) if i != BAD]
    assert_close(log["sent"][2], expected_average(log["returned"][1], honest), atol=1e-6)
    assert_close({n: run.state[n] for n in log["sent"][2]},
                 expected_average(log["returned"][2], range(CLIENTS.n_clients)), atol=1e-6)


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
