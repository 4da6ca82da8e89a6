"""The Flower adapter (replearn.neural.flower) against the in-process engine (replearn.neural):
every registered method, and one a test registers, gives the in-process run on Flower; and its
fault contract: bad replies are dropped, sizes come from discovery, nothing hangs."""

import dataclasses
import math
import os
import threading
import time
from pathlib import Path

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

from replearn import neural  # noqa: E402
from replearn.neural import algorithms, flower  # noqa: E402
from replearn.neural.algorithms import base  # noqa: E402
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
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models gain nothing from intra-op threads, and on a busy shared CPU the thread
    pool's waiting makes them ten times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def assert_same(a, b, path="result"):
    """``a`` and ``b`` equal bit for bit (NaN where the other has NaN): tensors, nested dicts,
    lists, tuples and numbers."""
    if isinstance(b, torch.Tensor):
        assert isinstance(a, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, (path, a, b)
        same = torch.equal(a, b) or (a.is_floating_point() and bool(
            (torch.isnan(a) == torch.isnan(b)).all()) and torch.equal(a.nan_to_num(), b.nan_to_num()))
        assert same, (path, float((a - b).abs().nan_to_num().max()) if a.is_floating_point() else (a, b))
    elif isinstance(b, dict):
        assert list(a) == list(b), (path, list(a), list(b))
        for k in b:
            assert_same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(b, (list, tuple)):
        assert len(a) == len(b), (path, a, b)
        for k, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{path}[{k}]")
    else:
        assert a == b or (a != a and b != b), (path, a, b)


def assert_same_run(run, ref):
    """The Flower run ``run`` is the in-process ``ref``: participants, server parameters and
    state, per-round losses and accuracies, the final evaluation, the clients' evaluated
    personal parameters (and their states, when fetched), all bit for bit."""
    assert run.algorithm == ref.algorithm
    assert run.participants == ref.participants
    for field in ("state", "local", "shared_names", "local_names", "train_loss", "test_accuracy"):
        assert_same(getattr(run, field), getattr(ref, field), field)
    assert_same(run.final.accuracy, ref.final.accuracy, "final.accuracy")
    assert_same(run.final.loss, ref.final.loss, "final.loss")
    for key in ("server", "clients"):
        if key in ref.extras and key in run.extras:
            assert_same(run.extras[key], ref.extras[key], f"extras[{key!r}]")


def strategy_of(run) -> flower.ReplayStrategy:
    return run.extras["flower"].strategy


# --------------------------------------------------------------------------------------------
# Every registered method, on Flower as in process

CONFIGS = [neural.TrainConfig(rounds=3, local_steps=2, head_steps=1, batch_size=5, participation=0.75,
                              eval_every=2, seed=3),
           neural.TrainConfig(rounds=2, local_epochs=1, head_epochs=1, batch_size=7, momentum=0.9,
                              weight_decay=1e-3, seed=6)]


@pytest.mark.parametrize("cfg", CONFIGS, ids=["steps-partial", "epochs-full"])
@pytest.mark.parametrize("name", algorithms.names())
def test_every_registered_method_matches_inprocess(name, cfg):
    """Each method of the registry, run on Flower through the in-process grid, is its
    in-process run bit for bit (its client step on the nodes, their states kept there, its
    server step in the strategy)."""
    alg = algorithms.get(name)
    ref = alg.run(model_fn(), CLIENTS, cfg)
    run = flower.run_inprocess(name, model_fn(), CLIENTS, cfg, fetch_states=True)
    assert_same_run(run, ref)
    if "flower" in run.extras:  # a wrapper's result keeps its stages' instead
        assert strategy_of(run).dropped == {}


@pytest.mark.parametrize("rule", ["global", "average"])
@pytest.mark.parametrize("name", algorithms.names())
def test_every_registered_method_matches_inprocess_for_every_first_visit(name, rule):
    """With TrainConfig.first_visit "global" or "average" (a client not yet sampled starts from
    the server's model, or from it with the previous round's clients' mean personal part,
    fetched from their nodes), each method on Flower is its in-process run bit for bit
    ("initial" is the default of the test above)."""
    cfg = dataclasses.replace(CONFIGS[0], first_visit=rule)
    ref = algorithms.get(name).run(model_fn(), CLIENTS, cfg)
    run = flower.run_inprocess(name, model_fn(), CLIENTS, cfg, fetch_states=True)
    assert_same_run(run, ref)
    if "flower" in run.extras:
        assert strategy_of(run).dropped == {}


def test_dsgd_is_fedavg_with_one_local_step():
    """D-SGD (the registry's "D-SGD") runs on Flower as FedAvg with local_steps = 1 does."""
    cfg = neural.TrainConfig(rounds=3, batch_size=5, participation=0.75, seed=4)
    run = flower.run_inprocess("FedAvg", model_fn(), CLIENTS, dataclasses.replace(cfg, local_steps=1))
    ref = algorithms.run("D-SGD", model_fn(), CLIENTS, cfg)
    for field in ("state", "train_loss", "test_accuracy", "participants"):
        assert_same(getattr(run, field), getattr(ref, field), field)


@pytest.mark.parametrize("name", ["FedProx+FT", "SCAFFOLD+FT"])
def test_stages_of_a_wrapper_run_on_flower(name):
    """A +FT method runs its base and its fine-tuning each through the Flower runner it is
    given, and equals its in-process run."""
    alg = algorithms.get(name)
    cfg = CONFIGS[0]
    stages = []
    inner = flower.inprocess_runner()

    def counting(algorithm, *args, **kwargs):
        stages.append(algorithm.name)
        return inner(algorithm, *args, **kwargs)

    run = flower.run_with(counting, name, model_fn(), CLIENTS, cfg)
    assert len(stages) == 2, stages
    ref = alg.run(model_fn(), CLIENTS, cfg)
    assert_same_run(run, ref)


@dataclasses.dataclass(frozen=True)
class ToyOptions:
    pull: float = 0.5


class Toy(base.Algorithm):
    """A method outside the package, with every hook: a personal head kept in the client's
    state (FedRep's two phases), the body and a non-parameter tensor uploaded, server state
    (a momentum and a round count), a broadcast, a draw per client (a tensor and a list), its
    own server step and evaluation."""

    name, Options = "Toy (test)", ToyOptions
    summary = base.Summary("the body", "the head", "nothing", "collins2021fedrep")

    def phases(self, model, cfg, options):
        body, head = neural.split_body_head(model)
        return (neural.Phase(head, cfg.head_steps, cfg.head_epochs), neural.Phase(body, cfg.local_steps,
                                                                                  cfg.local_epochs))

    def init_server(self, params, options):
        return {"momentum": {n: torch.zeros_like(p) for n, p in params.items()}, "rounds": 0}

    def init_client(self, initial, options):
        return {"head": {n: initial[n].clone() for n in initial if n.startswith("head.")},
                "seen": torch.zeros((), dtype=torch.int64)}

    def draw(self, plan, cfg, options, generator):
        return {i: {"scale": torch.rand((), generator=generator), "tags": [i, "x", None]} for i in plan.clients}

    def broadcast(self, params, server, states, selected, options):
        return {"shrink": 1.0 / (1 + server["rounds"]), "m": torch.tensor(len(selected))}

    def client_update(self, ctx):
        body, head = neural.split_body_head(ctx.worker.model)
        start = {**ctx.global_params, **ctx.state["head"]}
        scale = float(ctx.draw["scale"]) * ctx.broadcast["shrink"]
        heads, loss = ctx.worker.train(start, head, ctx.x, ctx.y, ctx.batches[0], ctx.cfg, ctx.generator)
        bodies, loss2 = ctx.worker.train({**start, **heads}, body, ctx.x, ctx.y, ctx.batches[1], ctx.cfg,
                                         ctx.generator, extra_grad=lambda theta: [scale * t for t in theta])
        upload = {n: bodies[n] for n in body}
        upload["spread"] = torch.stack([(bodies[n] - ctx.global_params[n]).norm() for n in body])
        return neural.ClientUpdate(upload, {"head": {n: heads[n] for n in head}, "seen": ctx.state["seen"] + 1},
                                   loss + loss2, len(ctx.batches[0]) + len(ctx.batches[1]))

    def server_update(self, params, server, mean_upload, selected, n_clients, options):
        momentum = {n: options.pull * server["momentum"][n] + (mean_upload[n] - params[n]) if n in mean_upload
                    else server["momentum"][n] for n in params}
        new = {n: params[n] + momentum[n] for n in params}
        return new, {"momentum": momentum, "rounds": server["rounds"] + 1, "spread": mean_upload["spread"]}

    def personal_names(self, model, options):
        return neural.split_body_head(model)[1]

    def eval_params(self, ctx):
        return {**ctx.global_params, **ctx.state["head"]}


def test_a_method_registered_from_outside_runs_on_flower():
    """A reader's method, registered with algorithms.register, runs on Flower by its name and
    equals its in-process run; its personal head never leaves the nodes during training (no
    upload carries it, no state is fetched)."""
    toy = algorithms.register(Toy())
    try:
        cfg = dataclasses.replace(CONFIGS[0], head_steps=2)
        options = ToyOptions(pull=0.25)
        ref = toy.run(model_fn(), CLIENTS, cfg, options)
        inner = flower.client_app(model_fn, lambda i: CLIENTS.subset([i]), cfg, "Toy (test)", options)
        app, uploads, queries = ClientApp(), [], []

        @app.query()
        def query(msg, context):
            queries.append(msg.content.config_records["config"]["action"] if "config" in msg.content else None)
            return inner(msg, context)

        @app.train()
        def train(msg, context):
            reply = inner(msg, context)
            uploads.append(set(reply.content["arrays"]))
            return reply

        @app.evaluate()
        def evaluate(msg, context):
            return inner(msg, context)

        run = flower.run_inprocess("Toy (test)", model_fn(), CLIENTS, cfg, options, app=app)
        assert_same_run(run, ref)
        body, head = neural.split_body_head(model_fn())
        assert uploads and all(u == {*body, "spread"} for u in uploads)
        assert set(queries) == {None, "fetch"}  # discovery, then the evaluated heads after the last round
        assert strategy_of(run).upload_signature is not None
    finally:
        algorithms.unregister("Toy (test)")
    assert "Toy (test)" not in algorithms.names()


def test_starting_state_and_callback_as_in_process():
    """A run from a given starting state reports each round to its callback as in process."""
    cfg = neural.TrainConfig(rounds=3, local_steps=2, batch_size=5, participation=0.5, eval_every=2, seed=4)
    start = {n: p.detach() * 0.5 for n, p in model_fn().named_parameters()}
    seen = {"ref": [], "flower": []}
    scaffold = algorithms.get("SCAFFOLD")
    ref = scaffold.run(model_fn(), CLIENTS, cfg, state=start, callback=lambda t, m: seen["ref"].append((t, m)))
    run = flower.run_inprocess("SCAFFOLD", model_fn(), CLIENTS, cfg, state=start,
                               callback=lambda t, m: seen["flower"].append((t, m)))
    assert_same_run(run, ref)
    assert seen["flower"] == seen["ref"] and len(seen["ref"]) == 3


#: The methods ``make test`` runs on Flower's simulation engine: one that averages, one with server
#: state and one with client state. ``REPLEARN_FLOWER_SIMULATION=all`` (``make flower-simulation``)
#: runs every registered method there (a Ray start each, about 10-25 s on a small CPU machine);
#: every method runs on the in-process grid in ``make test`` (the same ClientApp and ServerApp).
SIMULATED = {"SCAFFOLD": neural.TrainConfig(rounds=3, local_steps=2, batch_size=5, participation=0.5,
                                             weight_decay=1e-3, seed=7),
             "Ditto": neural.TrainConfig(rounds=2, local_steps=2, batch_size=5, participation=0.75, eval_every=2,
                                         seed=8),
             "FedAvg": neural.TrainConfig(rounds=2, local_steps=2, batch_size=5, participation=0.5, seed=9)}
if os.environ.get("REPLEARN_FLOWER_SIMULATION") == "all":
    SIMULATED = {name: SIMULATED.get(name, dataclasses.replace(CONFIGS[0], rounds=2)) for name in algorithms.names()}


@pytest.mark.filterwarnings("ignore:Tip. In future versions of Ray:FutureWarning")
@pytest.mark.parametrize("name, cfg", list(SIMULATED.items()), ids=list(SIMULATED))
def test_simulation_engine_matches_inprocess(name, cfg):
    """On Flower's simulation engine (Ray actors, one virtual SuperNode per client, data from
    data_fn(partition-id)) a method gives its in-process run: the same sampled clients,
    server parameters and state, personal models kept on the nodes, losses and accuracies.
    Each run starts and stops Ray, most of its 10-25 s on a small CPU machine."""
    pytest.importorskip("ray", reason="Flower's simulation engine needs Ray: "
                                      "pip install -r requirements-flower.txt")
    alg = algorithms.get(name)
    ref = alg.run(model_fn(), CLIENTS, cfg)
    run = flower.run_simulation(name, model_fn(), CLIENTS, cfg, data_fn=lambda i: CLIENTS.subset([i]),
                                fetch_states=True)
    assert len(set(run.participants)) > 1 or run.config.participation == 1 or run.participants[0] == ()
    assert_same_run(run, ref)


# --------------------------------------------------------------------------------------------
# Records and the robust-aggregation rule


def test_pack_round_trips_nested_objects_exactly():
    obj = {"a": torch.randn(2, 3, dtype=torch.float64), 3: [torch.tensor(True), None, 1.5, "s"],
           ("t", 1): (torch.tensor(7), np.arange(3, dtype=np.int32), {"e": {}}), "nan": math.inf}
    arrays, tree = flower.pack(obj)
    back = flower.unpack(arrays, tree, CPU)
    assert list(back) == list(obj)
    assert_same(back["a"], obj["a"]) and back["a"].dtype == torch.float64
    assert back[3][0].dtype == torch.bool and back[3][1:] == [None, 1.5, "s"]
    assert isinstance(back[("t", 1)], tuple) and back[("t", 1)][2] == {"e": {}}
    assert np.array_equal(back[("t", 1)][1], obj[("t", 1)][1]) and back["nan"] == math.inf
    with pytest.raises(TypeError, match="cannot send a set"):
        flower.pack({"x": {1, 2}})


def test_robust_aggregators_only_for_averaging_methods():
    assert flower.averages("FedProx") and flower.averages("Ditto")
    assert not flower.averages("SCAFFOLD")
    with pytest.raises(ValueError, match="SCAFFOLD has its own server step"):
        flower.run_inprocess("SCAFFOLD", model_fn(), CLIENTS, neural.TrainConfig(rounds=1, local_steps=1),
                             aggregator=FedMedian())


# --------------------------------------------------------------------------------------------
# Fault injection: one bad client (BAD) among honest ones, through the in-process Grid

BAD = 2


def faulty_app(cfg, algorithm, *, train=None, evaluate=None, query=None):
    """The library's ClientApp, with client BAD's replies passed through ``train(reply, round)``,
    ``evaluate(reply, round)`` or ``query(reply, action)`` (which may change or replace them,
    raise or sleep). Returns the app and a log: ``sent[t]`` the server's parameters the
    clients received in round t, ``returned[t][i]`` the upload honest client i (and BAD
    before its fault) returned."""
    inner = flower.client_app(model_fn, lambda i: CLIENTS.subset([i]), cfg, algorithm)
    app, log = ClientApp(), {"sent": {}, "returned": {}}

    @app.query()
    def query_(msg, context):
        reply = inner(msg, context)
        action = msg.content["config"]["action"] if "config" in msg.content else None
        return query(reply, action) if query is not None and context.node_config["partition-id"] == BAD else reply

    @app.train()
    def train_(msg, context):
        t, pid = msg.content["config"]["server-round"], context.node_config["partition-id"]
        log["sent"][t] = flower.from_record(msg.content["arrays"], CPU)
        reply = inner(msg, context)
        if not reply.has_error():
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
    """The n_i-weighted average (true sizes) of the uploads the kept clients returned."""
    w = {i: float(SIZES[i]) for i in kept}
    return {n: sum(w[i] * returned[i][n] for i in kept) / sum(w.values()) for n in returned[kept[0]]}


def assert_close(a, b, atol=1e-5):
    assert a.keys() == b.keys()
    for n in a:
        assert torch.allclose(a[n], b[n], atol=atol, rtol=0), (n, float((a[n] - b[n]).abs().max()))


def assert_finite(params):
    for n, p in params.items():
        assert torch.isfinite(p).all(), n


def replace_arrays(reply, make):
    """Client BAD's reply with every array replaced by ``make(name, honest_array)``."""
    arrays = reply.content["arrays"]
    reply.content["arrays"] = ArrayRecord({n: make(n, a) for n, a in arrays.items()})
    return reply


def poison_first(value):
    """One entry of the reply's first array set to ``value``, the others honest."""
    def fault(reply, t):
        first = next(iter(reply.content["arrays"]))

        def make(n, a):
            x = a.numpy().copy()
            if n == first:
                x.flat[0] = value
            return Array(x)
        return replace_arrays(reply, make)
    return fault


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


def rename_arrays(reply):
    """Client BAD's honest arrays under other names."""
    arrays = reply.content["arrays"]
    reply.content["arrays"] = ArrayRecord({f"x.{n}": a for n, a in arrays.items()})
    return reply


#: fault -> (client BAD's reply, the drop's reason for FedProx (uploads named like parameters),
#: for SCAFFOLD (uploads of other names: y:..., dc:...))
TRAIN_FAULTS = {
    "nan": (poison_first(np.nan), "non-finite", "non-finite"),
    "inf": (poison_first(np.inf), "non-finite", "non-finite"),
    "huge": (lambda reply, t: replace_arrays(reply, lambda n, a: Array(a.numpy() * np.float32(1e30))),
             "implausible magnitude: the update moves it", "implausible magnitude: "),
    "payload": (lambda reply, t: replace_arrays(reply, wrong_payload), "the payload holds", "the payload holds"),
    "garbage": (lambda reply, t: replace_arrays(reply, garbage_payload), "the payload cannot be decoded",
                "the payload cannot be decoded"),
    "metadata": (lambda reply, t: replace_arrays(reply, lambda n, a: Array(np.zeros(3, np.float32))),
                 "does not match the global parameter", "does not match the algorithm's"),
    "renamed": (lambda reply, t: rename_arrays(reply), "does not match the algorithm's",
                "does not match the algorithm's"),
    "raises": (raise_, "disk full", "disk full"),
    "loss": (set_metric("train_loss", math.nan), "'train_loss' must be a finite number",
             "'train_loss' must be a finite number"),
}
FAULT_CFG = neural.TrainConfig(rounds=2, local_steps=2, head_steps=1, batch_size=5, seed=0)


def faulty_run(algorithm, fault):
    app, log = faulty_app(FAULT_CFG, algorithm, train=fault)
    return flower.run_inprocess(algorithm, model_fn(), CLIENTS, FAULT_CFG, app=app, fetch_states=True), log


@pytest.mark.parametrize("algorithm", ["FedProx", "SCAFFOLD"])
@pytest.mark.parametrize("fault", list(TRAIN_FAULTS))
def test_bad_training_reply_is_dropped(fault, algorithm):
    """A NaN, inf, blown-up, mis-shaped (payload or metadata), renamed, failing or NaN-loss
    upload of client BAD is dropped from every round's average and recorded; the run is then
    the one in which BAD's training raised (its pending state discarded alike), and finite."""
    make, *reasons = TRAIN_FAULTS[fault]
    reason = reasons[algorithm == "SCAFFOLD"]
    run, _ = faulty_run(algorithm, make)
    drops = strategy_of(run).dropped
    assert set(drops) == {1, 2}
    for t, ds in drops.items():
        assert [(d.client, d.stage) for d in ds] == [(BAD, "train")]
        assert reason in ds[0].reason, ds[0].reason
    assert_finite(run.state)
    for t in range(2):
        assert math.isfinite(float(run.train_loss[t])) and 0 <= float(run.test_accuracy[t]) <= 1
    if fault != "raises":
        baseline, _ = faulty_run(algorithm, raise_)
        for field in ("state", "train_loss", "test_accuracy", "local"):
            assert_same(getattr(run, field), getattr(baseline, field), field)
        assert_same(run.extras["server"], baseline.extras["server"])
        assert_same(run.extras["clients"], baseline.extras["clients"])


def test_dropped_update_averages_the_others_exactly():
    """With BAD's training failing, the server's model after each round is the n_i-weighted
    average of the honest clients' uploads (FedProx's server step)."""
    run, log = faulty_run("FedProx", raise_)
    honest = [i for i in range(CLIENTS.n_clients) if i != BAD]
    assert_close(log["sent"][2], expected_average(log["returned"][1], honest), atol=1e-6)
    assert_close(run.state, expected_average(log["returned"][2], honest), atol=1e-6)


def test_a_dropped_update_leaves_the_nodes_state_untouched():
    """Ditto: BAD's round-1 update is dropped, so its new personal model is discarded on the
    node (it is evaluated with, and keeps, the initial model); the honest clients' personal
    models are the in-process ones."""
    cfg = neural.TrainConfig(rounds=1, local_steps=2, batch_size=5, seed=2)
    app, _ = faulty_app(cfg, "Ditto", train=poison_first(np.nan))
    run = flower.run_inprocess("Ditto", model_fn(), CLIENTS, cfg, app=app, fetch_states=True)
    ref = algorithms.get("Ditto").run(model_fn(), CLIENTS, cfg)
    assert [(d.client, d.stage) for d in strategy_of(run).dropped[1]] == [(BAD, "train")]
    assert BAD not in run.extras["clients"] and set(run.extras["clients"]) == {0, 1, 3}
    initial = dict(model_fn().named_parameters())
    for n, p in run.local.items():
        assert torch.equal(p[BAD], initial[n].detach())
        for i in (0, 1, 3):
            assert torch.equal(p[i], ref.local[n][i])


def test_claimed_sizes_are_ignored():
    """A client claiming num-examples = 10**15 for training and evaluation takes nothing over:
    the weights are the sizes discovery reported, and the run is the in-process one."""
    cfg = neural.TrainConfig(rounds=2, local_steps=2, batch_size=5, participation=0.75, seed=8)
    lie = set_metric("num-examples", 10**15)
    app, _ = faulty_app(cfg, "FedProx", train=lie, evaluate=lie)
    run = flower.run_inprocess("FedProx", model_fn(), CLIENTS, cfg, app=app)
    assert BAD in {i for p in run.participants for i in p}
    assert strategy_of(run).dropped == {}
    assert_same_run(run, algorithms.get("FedProx").run(model_fn(), CLIENTS, cfg))


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
    ref = algorithms.get("FedProx").run(model_fn(), CLIENTS, cfg)
    app, _ = faulty_app(cfg, "FedProx", evaluate=fault)
    run = flower.run_inprocess("FedProx", model_fn(), CLIENTS, cfg, app=app)
    dropped = strategy_of(run).dropped
    assert {t: [(d.client, d.stage) for d in ds] for t, ds in dropped.items()} == \
        {1: [(BAD, "evaluate")], 2: [(BAD, "evaluate")]}
    assert all(reason in d.reason for ds in dropped.values() for d in ds)
    assert_same(run.state, ref.state)
    assert_same(run.train_loss, ref.train_loss)
    honest = [i for i in range(CLIENTS.n_clients) if i != BAD]
    expected = (sum(TEST_SIZES[i] * float(ref.final.accuracy[i]) for i in honest)
                / sum(TEST_SIZES[i] for i in honest))
    assert math.isclose(float(run.test_accuracy[1]), expected, abs_tol=1e-6)
    assert math.isnan(float(run.final.accuracy[BAD])) and int(run.final.test_sizes[BAD]) == 0
    assert not math.isclose(expected, float(ref.test_accuracy[1]), abs_tol=1e-6)  # the case can fail


def test_missing_node_times_out():
    """The server waits for n_clients = 5 nodes; only 4 connect: a TimeoutError after
    connect_timeout, saying what to change, instead of waiting forever."""
    cfg = neural.TrainConfig(rounds=1, local_steps=1)
    grid = flower.InProcessGrid(flower.client_app(model_fn, lambda i: CLIENTS.subset([i]), cfg, "FedProx"),
                                CLIENTS.n_clients)
    server = flower.server_app(model_fn, cfg, "FedProx", n_clients=5, connect_timeout=0.5)
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

    app, log = faulty_app(cfg, "FedProx", train=slow)
    run = flower.run_inprocess("FedProx", model_fn(), CLIENTS, cfg, app=app, round_timeout=2.0)
    assert strategy_of(run).dropped == {1: [flower.Dropped(BAD, "train", "no reply within round_timeout = 2 s")]}
    honest = [i for i in range(CLIENTS.n_clients) if i != BAD]
    assert_close(log["sent"][2], expected_average(log["returned"][1], honest), atol=1e-6)
    assert_close(run.state, expected_average(log["returned"][2], range(CLIENTS.n_clients)), atol=1e-6)


def test_a_nan_pixel_is_reported_for_the_client_that_has_it():
    """A NaN pixel in client BAD's data (here: its partition) is reported as client BAD's, not as
    "client 0" (each node's one-client ClientData, where the check ran)."""
    cfg = neural.TrainConfig(rounds=1, local_steps=1, batch_size=5)
    clients = make_clients()
    clients.x_train[BAD][1, 0, 2, 3] = float("nan")  # changed in place, after ClientData's checks
    with pytest.raises(ValueError, match=rf"^client {BAD} train images contain NaN or infinite values"):
        flower.run_inprocess("FedProx", model_fn(), clients, cfg)

    def data_fn(i):  # a node that builds its own data, as in a deployment or the simulation engine
        x_test = CLIENTS.x_test[i].clone()
        if i == BAD:
            x_test[0, 1, 0, 0] = float("nan")
        return neural.ClientData((CLIENTS.x_train[i],), (CLIENTS.y_train[i],), (x_test,),
                                 (CLIENTS.y_test[i],))

    grid = flower.InProcessGrid(flower.client_app(model_fn, data_fn, cfg, "FedProx"), CLIENTS.n_clients)
    with pytest.raises(ValueError, match=rf"partition {BAD} \(client {BAD}\): data_fn\({BAD}\) gave invalid "
                                         rf"data: client 0 test images contain NaN .*not the partitions"):
        grid.run_server(flower.server_app(model_fn, cfg, "FedProx", n_clients=CLIENTS.n_clients))


def test_bad_inputs():
    cfg = neural.TrainConfig(rounds=1, local_steps=1)
    with pytest.raises(ValueError, match="unknown algorithm 'fedavg'; choose one of"):
        flower.run_inprocess("fedavg", model_fn(), CLIENTS, cfg)
    with pytest.raises(ValueError, match="algorithm must be a registered name"):
        flower.client_app(model_fn, lambda i: CLIENTS.subset([i]), cfg, object())
    with pytest.raises(ValueError, match="augment"):
        flower.run_inprocess("FedProx", model_fn(), CLIENTS, neural.TrainConfig(augment=True))
    with pytest.raises(ValueError, match="options must be a FedProxOptions"):
        flower.run_inprocess("FedProx", model_fn(), CLIENTS, cfg, algorithms.get("Ditto").Options())
    two = flower.client_app(model_fn, lambda i: CLIENTS.subset([i, i]), cfg, "FedProx")
    with pytest.raises(ValueError, match="must return one client"):
        flower.run_inprocess("FedProx", model_fn(), CLIENTS, cfg, app=two)
    with pytest.raises(ValueError, match="one train size and one test size per node"):
        flower.ReplayStrategy([1, 2], [5, 6], [5], "FedProx", model_fn(), cfg)
    with pytest.raises(ValueError, match="max_update_ratio must be positive"):
        flower.ReplayStrategy([1], [5], [5], "FedProx", model_fn(), cfg, max_update_ratio=0)
    with pytest.raises(ValueError, match="L2GD: an aggregation step"):
        flower.run_inprocess("L2GD", model_fn(), CLIENTS, dataclasses.replace(cfg, lr=0.5))
    for bad in (0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="round_timeout must be a positive number of seconds"):
            flower.server_app(model_fn, cfg, "FedProx", round_timeout=bad)
    with pytest.raises(ValueError, match="connect_timeout must be a positive number of seconds"):
        flower.run_inprocess("FedProx", model_fn(), CLIENTS, cfg, connect_timeout=0)
    with pytest.raises(ValueError, match="n_clients must be a positive int"):
        flower.server_app(model_fn, cfg, "FedProx", n_clients=0)
    with pytest.raises(ValueError, match="augment"):
        flower.run_simulation("FedProx", model_fn(), CLIENTS, neural.TrainConfig(augment=True))


class EchoGrid(flower.InProcessGrid):
    """A grid that delivers client BAD's training replies twice."""

    def send_and_receive(self, messages, *, timeout=None):
        replies = super().send_and_receive(messages, timeout=timeout)
        bad = list(self.contexts)[BAD]
        return replies + [r for r in replies if r.metadata.src_node_id == bad
                          and r.metadata.message_type == "train"]


def run_on(grid, cfg, algorithm="FedProx", **kwargs):
    done = {}
    grid.run_server(flower.server_app(model_fn, cfg, algorithm, n_clients=CLIENTS.n_clients,
                                      on_result=lambda result: done.update(result=result), **kwargs))
    return done["result"]


def test_duplicate_reply_is_dropped():
    """A reply delivered twice counts once: the copy is dropped, the run is the in-process one."""
    cfg = neural.TrainConfig(rounds=2, local_steps=2, batch_size=5, seed=12)
    grid = EchoGrid(flower.client_app(model_fn, lambda i: CLIENTS.subset([i]), cfg, "FedProx"), CLIENTS.n_clients)
    run = run_on(grid, cfg)
    assert_same_run(run, algorithms.get("FedProx").run(model_fn(), CLIENTS, cfg))
    assert strategy_of(run).dropped == {t: [flower.Dropped(BAD, "train", f"node {list(grid.contexts)[BAD]} "
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
    inner = flower.client_app(model_fn, lambda i: CLIENTS.subset([i]), cfg, "FedProx")
    app = ClientApp()

    @app.query()
    def query(msg, context):
        if context.node_config["partition-id"] == BAD:
            raise RuntimeError("no data mounted")
        return inner(msg, context)

    with pytest.raises(ValueError, match=r"node \d+ did not report its partition: RuntimeError: no data"):
        flower.run_inprocess("FedProx", model_fn(), CLIENTS, cfg, app=app)
    grid = SilentGrid(inner, CLIENTS.n_clients)
    silent = list(grid.contexts)[BAD]
    with pytest.raises(TimeoutError, match=rf"nodes \[{silent}\] did not answer the discovery"):
        run_on(grid, cfg)


def test_one_reply_of_an_unknown_form_cannot_stop_the_run():
    """SCAFFOLD with one client a round: in round 1 only BAD answers, under other names. While
    the upload's form is not fixed, the server step's failure on it drops the reply (the model
    and server state stay as they were) instead of stopping the run when one round may keep
    nothing (max_empty_rounds = 1); round 2 trains. By default such a round stops the run."""
    cfg = neural.TrainConfig(rounds=2, local_steps=2, batch_size=5, participation=0.25, seed=4)
    app, log = faulty_app(cfg, "SCAFFOLD", train=lambda reply, t: rename_arrays(reply))
    with pytest.raises(RuntimeError, match=r"round 1 of SCAFFOLD on Flower kept no client's update .*client 2 "
                                           r"\(train\): the server step failed .*KeyError"):
        flower.run_inprocess("SCAFFOLD", model_fn(), CLIENTS, cfg, app=faulty_app(
            cfg, "SCAFFOLD", train=lambda reply, t: rename_arrays(reply))[0])
    run = flower.run_inprocess("SCAFFOLD", model_fn(), CLIENTS, cfg, app=app, max_empty_rounds=1)
    assert run.participants == ((BAD,), (1,))
    drops = strategy_of(run).dropped
    assert list(drops) == [1] and [(d.client, d.stage) for d in drops[1]] == [(BAD, "train")]
    assert "the server step failed" in drops[1][0].reason
    assert_same(log["sent"][2], {n: p.detach() for n, p in model_fn().named_parameters()})
    assert not torch.equal(run.state["head.bias"], log["sent"][2]["head.bias"]) and math.isnan(run.train_loss[0])


@pytest.mark.parametrize("corruption, reason", [("nan", "non-finite"), ("shape", "structure, dtypes or shapes")])
def test_a_state_the_broadcast_needs_is_fetched_and_screened(corruption, reason):
    """Fed-MTL's broadcast reads the sampled clients' models: they are fetched from the nodes
    (and only for it). A node whose state reply is malformed (NaN, or of another shape) is
    recorded at stage "state" and left out of that round's training; the others train and the
    run finishes."""
    cfg = neural.TrainConfig(rounds=2, local_steps=2, batch_size=5, seed=5)

    def make(a):
        x = a.numpy()
        return np.full(x.shape, np.nan, x.dtype) if corruption == "nan" else np.zeros(3, x.dtype)

    def corrupt(reply, action):
        if action == "state":
            reply.content["state"] = ArrayRecord({n: Array(make(a)) for n, a in reply.content["state"].items()})
        return reply

    app, log = faulty_app(cfg, "Fed-MTL", query=corrupt)
    run = flower.run_inprocess("Fed-MTL", model_fn(), CLIENTS, cfg, app=app)
    dropped = strategy_of(run).dropped
    assert {t: [(d.client, d.stage) for d in ds] for t, ds in dropped.items()} == \
        {1: [(BAD, "state")], 2: [(BAD, "state")]}
    assert reason in dropped[1][0].reason
    assert all(set(r) == {0, 1, 3} for r in log["returned"].values())
    for p in run.local.values():
        assert torch.isfinite(p).all()


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

    app, log = faulty_app(cfg, "FedProx", train=hang)
    start = time.monotonic()
    run = flower.run_inprocess("FedProx", model_fn(), CLIENTS, cfg, app=app, round_timeout=1.0)
    assert time.monotonic() - start < 60
    dropped = strategy_of(run).dropped
    assert {t: sorted({(d.client, d.stage) for d in ds}) for t, ds in dropped.items()} == \
        {1: [(BAD, "evaluate"), (BAD, "train")], 2: [(BAD, "evaluate"), (BAD, "train")]}
    assert all("round_timeout = 1 s" in d.reason for ds in dropped.values() for d in ds)
    honest = [i for i in range(CLIENTS.n_clients) if i != BAD]
    assert_close(log["sent"][2], expected_average(log["returned"][1], honest), atol=1e-6)
    assert_finite(run.state)
    assert 0 <= float(run.test_accuracy[1]) <= 1


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

    grid = flower.InProcessGrid(flower.client_app(model_fn, data_fn, cfg, "FedProx", call_timeout=0.5),
                                CLIENTS.n_clients, call_timeout=30.0)
    bad = list(grid.contexts)[BAD]
    grid.set_server_identity()  # what Flower's Message reads (run_server sets it; this test makes messages itself)
    start = time.monotonic()
    for expected in ("did not finish within 0.5 s", "still running an earlier call"):
        reply, = grid.send_and_receive([Message(RecordDict(), dst_node_id=bad, message_type=MessageType.QUERY)])
        assert reply.has_error() and "TimeoutError" in reply.error.reason and expected in reply.error.reason
    assert time.monotonic() - start < 10 and calls == [BAD]
    with pytest.raises(ValueError, match="call_timeout must be a positive number of seconds"):
        flower.client_app(model_fn, data_fn, cfg, "FedProx", call_timeout=0)
    with pytest.raises(ValueError, match="call_timeout must be a positive number of seconds"):
        flower.InProcessGrid(flower.client_app(model_fn, data_fn, cfg, "FedProx"), 2, call_timeout=math.inf)


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
    app, log = faulty_app(cfg, "FedProx")
    run = run_on(ForgingGrid(app, CLIENTS.n_clients), cfg)
    for t in (1, 2):
        drops = strategy_of(run).dropped[t]
        assert sorted((d.client, d.stage) for d in drops if d.client is not None) == [(BAD, "train")]
        forged = [d for d in drops if d.client is None]
        assert len(forged) == 1 and "forged or misrouted" in forged[0].reason
    honest = [i for i in range(CLIENTS.n_clients) if i != BAD]
    assert_close(log["sent"][2], expected_average(log["returned"][1], honest), atol=1e-6)


def over_reporting_app(cfg, claim):
    def lie(reply, action):
        if action is None:
            reply.content["info"]["num-examples"] = claim
        return reply
    return faulty_app(cfg, "FedProx", query=lie)[0]


@pytest.mark.parametrize("claim", [10**15, 10**4])
def test_over_reported_size_at_discovery_is_refused(claim):
    """A node claiming far more training data than the others (here more than MAX_SIZE_RATIO
    times their median) would take nearly all the weight: the run stops at discovery, naming it."""
    cfg = neural.TrainConfig(rounds=1, local_steps=1, batch_size=5, seed=0)
    with pytest.raises(ValueError, match=rf"partition {BAD}\) reports num-examples = {claim}, more than "
                                         r"max_size_ratio = 100 times the median"):
        flower.run_inprocess("FedProx", model_fn(), CLIENTS, cfg, app=over_reporting_app(cfg, claim))
    # a plausible imbalance passes; the rule can be widened explicitly
    flower.run_inprocess("FedProx", model_fn(), CLIENTS, cfg, app=over_reporting_app(cfg, 200))
    with pytest.raises(ValueError, match="max_size_ratio must be a number >= 1"):
        flower.run_inprocess("FedProx", model_fn(), CLIENTS, cfg, max_size_ratio=0.5)


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
    app, log = faulty_app(cfg, "FedProx", train=lambda reply, t: attack(reply, box["log"]["sent"][t]))
    box["log"] = log
    make = {None: lambda: None, "median": FedMedian, "trimmed": lambda: FedTrimmedAvg(beta=0.25),
            "krum": lambda: Krum(num_malicious_nodes=1)}[aggregator]
    run = flower.run_inprocess("FedProx", model_fn(), CLIENTS, cfg, app=app, aggregator=make())
    assert strategy_of(run).dropped == {}  # the attack passes the screening
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
            flower.run_inprocess("FedProx", model_fn(), CLIENTS, cfg, aggregator=bad)


#: A whole method in one file outside the package: what a reader writes to add one (issue 35).
ONE_FILE_METHOD = '''
"""FedPer with the head trained first: the body shared, the head personal, two joint-free phases."""

from replearn import neural
from replearn.neural import algorithms
from replearn.neural.algorithms.base import Algorithm, Summary


class HeadFirstFedPer(Algorithm):
    name = "Head-first FedPer (one-file test)"
    summary = Summary("the body", "the head", "nothing: the head trained first, then the body",
                      "arivazhagan2019fedper")

    def personal_names(self, model, options):
        return neural.split_body_head(model)[1]

    def phases(self, model, cfg, options):
        body, head = neural.split_body_head(model)
        return (neural.Phase(head, cfg.local_steps, cfg.local_epochs),
                neural.Phase(body + head, cfg.local_steps, cfg.local_epochs))


ALGORITHM = algorithms.register(HeadFirstFedPer())
'''


def test_a_method_in_one_file_runs_in_the_engine_and_on_flower(tmp_path):
    """The claim "one file and its test": a method written in one module outside the package and
    registered there runs by its name in the engine (batched too), on Flower equal to it, is
    listed by the registry and its methods table, is left out of Table 1, and the benchmark skips
    it by name; nothing else was edited. Unregistered afterwards."""
    import importlib.util
    import sys
    path = tmp_path / "head_first_fedper.py"
    path.write_text(ONE_FILE_METHOD)
    spec = importlib.util.spec_from_file_location("head_first_fedper", path)
    module = importlib.util.module_from_spec(spec)
    table1 = algorithms.table1()
    spec.loader.exec_module(module)
    name = module.ALGORITHM.name
    try:
        assert name in algorithms.names() and algorithms.table1() == table1
        assert [r.method for r in algorithms.methods_table([name])] == [name]
        cfg = dataclasses.replace(CONFIGS[0], local_steps=2)
        ref = algorithms.run(name, model_fn(), CLIENTS, cfg)
        assert set(ref.local_names) == {"head.weight", "head.bias"} and ref.algorithm == name
        batched = algorithms.run(name, model_fn(), CLIENTS, dataclasses.replace(cfg, vmap_clients=2))
        assert all(torch.allclose(batched.state[n], ref.state[n], atol=1e-6) for n in ref.state)
        assert_same_run(flower.run_inprocess(name, model_fn(), CLIENTS, cfg), ref)
        sys.path.insert(0, str(ROOT / "bench"))
        try:
            import algorithm_rounds
        finally:
            sys.path.pop(0)
        assert algorithm_rounds.reference(name) is None  # no reference loop written: skipped by name
    finally:
        algorithms.unregister(name)
    assert name not in algorithms.names()


# --------------------------------------------------------------------------------------------
# A run that keeps nothing fails; the server and the nodes run the same thing (issue 45)


def all_raise(cfg, algorithm):
    """The library's ClientApp, with every node's training raising."""
    inner = flower.client_app(model_fn, lambda i: CLIENTS.subset([i]), cfg, algorithm)
    app = ClientApp()
    app.query()(inner)
    app.evaluate()(inner)

    @app.train()
    def train(msg, context):
        raise RuntimeError(f"disk full on node {context.node_config['partition-id']}")

    return app


def test_a_round_that_keeps_no_update_stops_the_run_naming_the_nodes_errors():
    """Nodes that all raise in every round: the run raises at round 1, naming each node's error,
    instead of returning the initial model with a NaN loss; max_empty_rounds allows that many
    such rounds, then raises all the same."""
    cfg = neural.TrainConfig(rounds=2, local_steps=1, batch_size=5, seed=1)
    for allowed in (0, 1):
        with pytest.raises(RuntimeError, match=rf"round {allowed + 1} of FedAvg on Flower kept no client's update "
                                               rf".*client 0 \(train\): the client failed: RuntimeError: disk full "
                                               rf"on node 0; client 1 .*disk full on node 1"):
            flower.run_inprocess("FedAvg", model_fn(), CLIENTS, cfg, app=all_raise(cfg, "FedAvg"),
                                 max_empty_rounds=allowed)
    with pytest.raises(ValueError, match="max_empty_rounds must be an int >= 0"):
        flower.run_inprocess("FedAvg", model_fn(), CLIENTS, cfg, max_empty_rounds=-1)


def test_nodes_built_for_another_run_are_refused_naming_what_differs():
    """A server asking for FedProx with mu = 0.01 over nodes built with mu = 0.5 (or for
    another algorithm, or another learning rate) stops at discovery with an error naming the
    difference, instead of training with the nodes' settings; a SCAFFOLD server over FedAvg
    nodes likewise, instead of a KeyError 'y:body.0.weight'."""
    cfg = neural.TrainConfig(rounds=1, local_steps=1, batch_size=5)
    fedprox = algorithms.get("FedProx")
    cases = [("FedProx", fedprox.Options(mu=0.5), cfg, fedprox.Options(mu=0.01), cfg, r"options: the node runs "
              r"FedProxOptions\(mu=0.5\), the server FedProxOptions\(mu=0.01\)"),
             ("FedAvg", None, cfg, None, cfg, "algorithm: the node runs FedAvg, the server SCAFFOLD"),
             ("FedProx", None, dataclasses.replace(cfg, lr=0.1), None, cfg,
              r"training settings \(TrainConfig\): the node runs TrainConfig\(rounds=1, lr=0.1")]
    for node_alg, node_opts, node_cfg, server_opts, server_cfg, reason in cases:
        app = flower.client_app(model_fn, lambda i: CLIENTS.subset([i]), node_cfg, node_alg, node_opts)
        server_alg = "SCAFFOLD" if node_alg == "FedAvg" else node_alg
        with pytest.raises(ValueError, match=rf"node \d+: the node was built for another run than the "
                                             rf"server's: {reason}"):
            flower.run_inprocess(server_alg, model_fn(), CLIENTS, server_cfg, server_opts, app=app)


def test_replies_without_the_servers_fingerprint_are_refused():
    """After discovery, a training reply must echo the server's fingerprint: a node that answers
    from another ClientApp (no fingerprint) or one built for other options (it refuses the
    server's message) is dropped with that reason, and a round of such replies stops the run."""
    cfg = neural.TrainConfig(rounds=1, local_steps=1, batch_size=5)
    data = lambda i: CLIENTS.subset([i])  # noqa: E731
    honest = flower.client_app(model_fn, data, cfg, "FedProx")
    other = flower.client_app(model_fn, data, cfg, "FedProx", algorithms.get("FedProx").Options(mu=0.5))
    for train, reason in [(lambda msg, c: strip(honest(msg, c)), "the reply carries no fingerprint"),
                          (other, r"the client failed: ValueError: partition \d: this node was built for another "
                                  r"run than the server's: options")]:
        app = ClientApp()
        app.query()(honest)
        app.evaluate()(honest)
        app.train()(train)
        with pytest.raises(RuntimeError, match=rf"kept no client's update .*client 0 \(train\): {reason}"):
            flower.run_inprocess("FedProx", model_fn(), CLIENTS, cfg, app=app)


def strip(reply):
    del reply.content["fingerprint"]
    return reply


def test_a_scaffold_server_step_on_fedavg_uploads_names_the_uploads():
    """Nodes that echo the server's fingerprint but run FedAvg: once the upload's form is fixed,
    SCAFFOLD's failing server step is an error naming the method and the uploads, not a bare
    KeyError."""
    cfg = neural.TrainConfig(rounds=1, local_steps=1, batch_size=5)
    inner = flower.client_app(model_fn, lambda i: CLIENTS.subset([i]), cfg, "FedAvg")
    claimed = flower.fingerprint(algorithms.get("SCAFFOLD"), algorithms.get("SCAFFOLD").Options(), cfg)

    def lie(msg, context):
        for key in ("algorithm", "options"):
            if "config" in msg.content:
                msg.content["config"][f"fingerprint-{key}"] = getattr(inner_print, key)
        reply = inner(msg, context)
        if not reply.has_error():
            reply.content["fingerprint"] = flower_record(claimed)
        return reply

    inner_print = flower.fingerprint(algorithms.get("FedAvg"), algorithms.get("FedAvg").Options(), cfg)
    app = ClientApp()
    for register in (app.query(), app.train(), app.evaluate()):
        register(lie)
    with pytest.raises(ValueError, match=r"round 1: SCAFFOLD's server step failed on the mean of the uploads "
                                         r"\['body.0.bias', .*KeyError.*are the nodes built for SCAFFOLD\?"):
        flower.run_inprocess("SCAFFOLD", model_fn(), CLIENTS, cfg, app=app)


def flower_record(fingerprint):
    from flwr.app import ConfigRecord
    return ConfigRecord(fingerprint.entries())


def test_a_node_without_test_data_joins_and_is_skipped_at_evaluation():
    """Client 1 has no test data: on Flower its node joins, trains and is not asked to evaluate,
    and the run is the in-process one bit for bit (NaN accuracy for it, left out of the
    averages); a federation without any test data is refused."""
    xt, yt = list(CLIENTS.x_test), list(CLIENTS.y_test)
    xt[1], yt[1] = xt[1][:0], yt[1][:0]
    clients = neural.ClientData(CLIENTS.x_train, CLIENTS.y_train, tuple(xt), tuple(yt))
    cfg = neural.TrainConfig(rounds=2, local_steps=2, batch_size=5, seed=3)
    for name in ("FedRep", "Ditto"):
        ref = algorithms.run(name, model_fn(), clients, cfg)
        run = flower.run_inprocess(name, model_fn(), clients, cfg, fetch_states=True)
        assert_same_run(run, ref)
        assert math.isnan(run.final.accuracy[1]) and strategy_of(run).dropped == {}
    none = neural.ClientData(CLIENTS.x_train, CLIENTS.y_train, tuple(x[:0] for x in xt), tuple(y[:0] for y in yt))
    with pytest.raises(ValueError, match="no node has test data"):
        flower.run_inprocess("FedAvg", model_fn(), none, cfg)
