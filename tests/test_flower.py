"""The Flower adapter (replearn.flower) against the in-process engine (replearn.neural)."""

import math
import os

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


def model_fn():
    """The same initial model on every node, as a seeded model builder gives in a deployment."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return Tiny()


def make_clients(sizes=SIZES, n_test=5):
    g = torch.Generator().manual_seed(1)
    parts = [[], [], [], []]
    for i, n in enumerate(sizes):
        shift = torch.randn(3, 1, 1, generator=g)
        for k, m in enumerate((n, n_test + i)):
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
IN_PROCESS = {"fedavg": neural.fedavg, "dsgd": neural.dsgd, "fedrep": neural.fedrep}


def assert_close(a, b, atol=1e-5):
    assert a.keys() == b.keys()
    for n in a:
        assert torch.allclose(a[n], b[n], atol=atol, rtol=0), (n, float((a[n] - b[n]).abs().max()))


@pytest.mark.parametrize("algorithm, cfg", [
    ("fedavg", neural.TrainConfig(rounds=3, local_steps=3, batch_size=5, participation=0.5, seed=3)),
    ("dsgd", neural.TrainConfig(rounds=3, batch_size=5, participation=0.75, seed=4)),
    ("fedrep", neural.TrainConfig(rounds=3, local_steps=2, head_steps=2, batch_size=5,
                                  participation=0.5, seed=5)),
    ("fedrep", neural.TrainConfig(rounds=2, local_epochs=1, head_epochs=1, batch_size=7,
                                  weight_decay=1e-3, eval_every=2, seed=6)),
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
    if algorithm == "fedrep":  # the heads stayed on the nodes and differ between clients
        assert set(ref.local) == {"head.weight", "head.bias"}
        assert not torch.allclose(run.local["head.bias"][0], run.local["head.bias"][1])
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


def test_failing_and_malformed_updates_are_dropped():
    """Client 1 raises in training, client 2 returns a wrongly shaped update: the global model
    is the n_i-weighted average of clients 0 and 3 only."""
    cfg = neural.TrainConfig(rounds=1, local_steps=2, batch_size=5, seed=0)
    inner = flower.client_app(model_fn, lambda i: CLIENTS.subset([i]), cfg, "fedavg")
    app, returned = ClientApp(), {}

    @app.query()
    def query(msg, context):
        return inner(msg, context)

    @app.evaluate()
    def evaluate(msg, context):
        return inner(msg, context)

    @app.train()
    def train(msg, context):
        pid = context.node_config["partition-id"]
        if pid == 1:
            raise RuntimeError("disk full")
        reply = inner(msg, context)
        arrays = reply.content["arrays"]
        if pid == 2:
            reply.content["arrays"] = ArrayRecord({n: Array(np.zeros(3, np.float32)) for n in arrays})
        else:
            returned[pid] = flower.from_record(arrays, torch.device("cpu"))
        return reply

    run = flower.run_inprocess(model_fn, CLIENTS, cfg, "fedavg", app=app)
    dropped = dict(run.strategy.dropped[1])
    assert dropped.keys() == {1, 2}
    assert "disk full" in dropped[1] and "do not match" in dropped[2]
    w = {i: float(SIZES[i]) for i in returned}
    expected = {n: sum(w[i] * returned[i][n] for i in returned) / sum(w.values()) for n in returned[0]}
    assert_close(run.state, expected, atol=1e-6)


def test_bad_inputs():
    cfg = neural.TrainConfig(rounds=1, local_steps=1)
    with pytest.raises(ValueError, match="algorithm must be one of"):
        flower.run_inprocess(model_fn, CLIENTS, cfg, "fedprox")
    with pytest.raises(ValueError, match="augment"):
        flower.run_inprocess(model_fn, CLIENTS, neural.TrainConfig(augment=True), "fedavg")
    two = flower.client_app(model_fn, lambda i: CLIENTS.subset([i, i]), cfg, "fedavg")
    with pytest.raises(ValueError, match="must return one client"):
        flower.run_inprocess(model_fn, CLIENTS, cfg, "fedavg", app=two)
    with pytest.raises(ValueError, match="one train size per node"):
        flower.ReplayFedAvg([1, 2], [5], cfg, [])
    with pytest.raises(ValueError, match="n_clients must be positive"):
        flower.run_simulation(model_fn, lambda i: CLIENTS.subset([i]), 0, cfg, "fedavg")
    with pytest.raises(ValueError, match="augment"):
        flower.run_simulation(model_fn, lambda i: CLIENTS.subset([i]), 4, neural.TrainConfig(augment=True),
                              "fedavg")
