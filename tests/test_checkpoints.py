"""replearn.neural.checkpoints: finished engine runs are stored and reused inside resumable()."""

import pytest
import torch

from replearn.neural.engine import rounds
from replearn.neural import algorithms, checkpoints
from replearn import neural
from tiny_net import Tiny


def tiny_model():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return Tiny().to(torch.float64)


def tiny_clients(sizes=(12, 20, 8), seed=0):
    g = torch.Generator().manual_seed(seed)
    xs, ys, xt, yt = [], [], [], []
    for n in sizes:
        xs.append(torch.randn(n, 3, 8, 8, generator=g, dtype=torch.float64))
        ys.append(torch.randint(0, 3, (n,), generator=g))
        xt.append(torch.randn(6, 3, 8, 8, generator=g, dtype=torch.float64))
        yt.append(torch.randint(0, 3, (6,), generator=g))
    return neural.ClientData(tuple(xs), tuple(ys), tuple(xt), tuple(yt))


def equal_results(a: neural.FedResult, b: neural.FedResult) -> bool:
    return (all(torch.equal(a.state[n], b.state[n]) for n in a.state)
            and torch.equal(a.final.accuracy, b.final.accuracy) and a.participants == b.participants)


def counting(monkeypatch, name):
    calls = []
    original = getattr(rounds, name)
    monkeypatch.setattr(rounds, name, lambda *a, **k: calls.append(1) or original(*a, **k))
    return calls


def test_a_stored_run_comes_back_bit_for_bit_without_training(tmp_path, monkeypatch):
    model, clients = tiny_model(), tiny_clients()
    cfg = neural.TrainConfig(rounds=2, lr=0.05, batch_size=4, local_steps=2, eval_every=1, last_rounds=1)
    plain = algorithms.run("FedAvg", model, clients, cfg)
    calls = counting(monkeypatch, "_run")
    with checkpoints.resumable(tmp_path):
        first = algorithms.run("FedAvg", model, clients, cfg)
        again = algorithms.run("FedAvg", model, clients, cfg)
        other = algorithms.run("FedAvg", model, clients, neural.TrainConfig(**{**cfg.__dict__, "lr": 0.04}))
    assert len(calls) == 2  # the repeat was loaded; a changed lr trained again
    assert equal_results(plain, first) and equal_results(first, again)
    assert not all(torch.equal(first.state[n], other.state[n]) for n in first.state)
    assert len(list(tmp_path.glob("*.pt"))) == 2


def test_protocol_runs_are_stored_and_options_are_part_of_the_key(tmp_path, monkeypatch):
    model, clients = tiny_model(), tiny_clients()
    cfg = neural.TrainConfig(rounds=2, lr=0.05, batch_size=4, local_steps=2, eval_every=1, last_rounds=1)
    calls = counting(monkeypatch, "_run")
    opts = algorithms.get("FedProx").Options
    with checkpoints.resumable(tmp_path):
        a = algorithms.run("FedProx", model, clients, cfg, opts(mu=0.1))
        b = algorithms.run("FedProx", model, clients, cfg, opts(mu=0.1))
        algorithms.run("FedProx", model, clients, cfg, opts(mu=0.2))
    assert len(calls) == 2 and equal_results(a, b)


def test_nothing_is_stored_outside_resumable_or_with_a_callback(tmp_path, monkeypatch):
    model, clients = tiny_model(), tiny_clients()
    cfg = neural.TrainConfig(rounds=1, lr=0.05, batch_size=4, local_steps=1, eval_every=1, last_rounds=1)
    calls = counting(monkeypatch, "_run")
    algorithms.run("FedAvg", model, clients, cfg)
    with checkpoints.resumable(tmp_path):
        algorithms.run("FedAvg", model, clients, cfg, callback=lambda t, m: None)
        algorithms.run("FedAvg", model, clients, cfg, callback=lambda t, m: None)
    assert len(calls) == 3 and not list(tmp_path.glob("*.pt"))
    assert checkpoints.active() is None


def test_a_corrupt_stored_run_is_named(tmp_path):
    model, clients = tiny_model(), tiny_clients()
    cfg = neural.TrainConfig(rounds=1, lr=0.05, batch_size=4, local_steps=1, eval_every=1, last_rounds=1)
    with checkpoints.resumable(tmp_path):
        algorithms.run("FedAvg", model, clients, cfg)
    (stored,) = tmp_path.glob("*.pt")
    stored.write_bytes(b"not a run")
    with checkpoints.resumable(tmp_path), pytest.raises(ValueError, match="delete it to re-run"):
        algorithms.run("FedAvg", model, clients, cfg)


def test_digest_sees_data_and_dtype():
    x = torch.zeros(3)
    assert checkpoints.digest(x) == checkpoints.digest(torch.zeros(3))
    assert checkpoints.digest(x) != checkpoints.digest(torch.zeros(3, dtype=torch.float64))
    assert checkpoints.digest(x) != checkpoints.digest(torch.tensor([0.0, 0.0, 1e-30]))
    assert checkpoints.digest({"a": 1}, (2,)) != checkpoints.digest({"a": 1}, (3,))


def one_round():
    return neural.TrainConfig(rounds=1, lr=0.05, batch_size=4, local_steps=1, eval_every=1, last_rounds=1)


def stored_file(folder, run):
    """The one file ``run()`` stores in the empty ``folder``."""
    with checkpoints.resumable(folder):
        run()
    (path,) = folder.glob("*.pt")
    return path


class _Crafted:
    """Pickles to a call of ``open(marker, "w")``: loading it without weights_only makes the marker."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_crafted_stored_run_runs_no_code(tmp_path):
    model, clients, cfg = tiny_model(), tiny_clients(), one_round()
    path = stored_file(tmp_path / "runs", lambda: algorithms.run("FedAvg", model, clients, cfg))
    marker = tmp_path / "marker"
    torch.save({"format": checkpoints.FORMAT, "record": {}, "result": _Crafted(marker)}, path)
    with checkpoints.resumable(path.parent), pytest.raises(ValueError, match="delete it to re-run") as err:
        algorithms.run("FedAvg", model, clients, cfg)
    assert str(path) in str(err.value) and not marker.exists()


def test_a_foreign_torch_file_is_refused(tmp_path):
    model, clients, cfg = tiny_model(), tiny_clients(), one_round()
    path = stored_file(tmp_path, lambda: algorithms.run("FedAvg", model, clients, cfg))
    torch.save({"state": dict(model.state_dict())}, path)
    with checkpoints.resumable(tmp_path), pytest.raises(ValueError, match="not a stored run") as err:
        algorithms.run("FedAvg", model, clients, cfg)
    assert str(path) in str(err.value) and "delete it to re-run" in str(err.value)


def test_another_runs_result_under_this_key_is_refused(tmp_path):
    model, clients, cfg = tiny_model(), tiny_clients(), one_round()
    ditto = lambda: algorithms.run("Ditto", model, clients, cfg)  # noqa: E731
    target = stored_file(tmp_path / "ditto", ditto)
    other = stored_file(tmp_path / "fedavg", lambda: algorithms.run("FedAvg", model, clients,
                                                                     neural.TrainConfig(**{**cfg.__dict__, "lr": 0.04})))
    target.write_bytes(other.read_bytes())
    with checkpoints.resumable(target.parent), pytest.raises(ValueError, match="another call") as err:
        ditto()
    assert str(target) in str(err.value) and "delete it to re-run" in str(err.value)


def _relu_net():
    class Net(Tiny):
        def forward(self, x):
            return self.head(torch.relu(self.body(x)))
    return Net


def _tanh_net():
    class Net(Tiny):
        def forward(self, x):
            return self.head(torch.tanh(self.body(x)))
    return Net


def _exec_net(activation):
    """A class ``Net`` made by ``exec`` (no source to read, as in some notebooks)."""
    scope = {"Tiny": Tiny, "torch": torch}
    exec(f"class Net(Tiny):\n    def forward(self, x):\n        return self.head(torch.{activation}(self.body(x)))",
         scope)
    return scope["Net"]


def built(cls):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return cls().to(torch.float64)


def test_a_network_with_other_code_misses_the_store(tmp_path, monkeypatch):
    clients, cfg = tiny_clients(), one_round()
    relu, tanh = built(_relu_net()), built(_tanh_net())
    assert repr(relu) == repr(tanh) and all(torch.equal(a, b) for a, b in zip(relu.parameters(), tanh.parameters()))
    assert checkpoints.code_digest(relu) != checkpoints.code_digest(tanh)
    plain = algorithms.run("FedAvg", tanh, clients, cfg)
    calls = counting(monkeypatch, "_run")
    with checkpoints.resumable(tmp_path):
        a = algorithms.run("FedAvg", relu, clients, cfg)
        b = algorithms.run("FedAvg", tanh, clients, cfg)
    assert len(calls) == 2 and len(list(tmp_path.glob("*.pt"))) == 2
    assert equal_results(b, plain) and not equal_results(a, b)


def test_a_stored_run_round_trips_every_field(tmp_path, monkeypatch):
    model, clients, cfg = tiny_model(), tiny_clients(), one_round()
    calls = counting(monkeypatch, "_run")
    with checkpoints.resumable(tmp_path):
        first = algorithms.run("SCAFFOLD", model, clients, cfg)
        again = algorithms.run("SCAFFOLD", model, clients, cfg)
    assert len(calls) == 1 and type(again) is neural.FedResult and again.config == first.config
    assert checkpoints.digest(checkpoints._encode(first)) == checkpoints.digest(checkpoints._encode(again))
    assert again.participants == first.participants and again.extras.keys() == first.extras.keys()
    assert torch.equal(first.final.loss, again.final.loss) and equal_results(first, again)


def test_network_code_without_source_is_seen():
    relu, tanh = built(_exec_net("relu")), built(_exec_net("tanh"))
    assert repr(relu) == repr(tanh) and type(relu).__qualname__ == type(tanh).__qualname__
    assert checkpoints.code_digest(relu) != checkpoints.code_digest(tanh)
    assert checkpoints.code_digest(relu) == checkpoints.code_digest(built(_exec_net("relu")))


def _exec_method(factor):
    """A method ``Damped`` made by ``exec`` (no source, as a notebook cell's class on Python
    3.11): FedAvg whose server moves ``factor`` of the way to the clients' mean."""
    scope = {"FedAvg": type(algorithms.get("FedAvg"))}
    exec("class Damped(FedAvg):\n"
         "    name, table1_row = 'Damped (test)', None\n"
         "    def server_update(self, params, server, mean_upload, selected, n_clients, options):\n"
         f"        return {{n: p + {factor} * (mean_upload[n] - p) for n, p in params.items()}}, server\n",
         scope)
    return scope["Damped"]()


def test_a_method_without_source_edited_misses_the_store(tmp_path, monkeypatch):
    model, clients, cfg = tiny_model(), tiny_clients(), one_round()
    whole, half = _exec_method(1.0), _exec_method(0.5)
    assert checkpoints.algorithm_code(whole) != checkpoints.algorithm_code(half)
    assert checkpoints.algorithm_code(whole) == checkpoints.algorithm_code(_exec_method(1.0))
    calls = counting(monkeypatch, "_run")
    with checkpoints.resumable(tmp_path):
        a = whole.run(model, clients, cfg)
        b = half.run(model, clients, cfg)
    assert len(calls) == 2 and not equal_results(a, b)


def test_an_algorithms_static_methods_and_settings_are_part_of_its_code():
    fedavg = type(algorithms.get("FedAvg"))

    def variant(body):
        scope = {"FedAvg": fedavg}
        exec(f"class Variant(FedAvg):\n{body}", scope)
        return checkpoints.algorithm_code(scope["Variant"]())

    assert (variant("    @staticmethod\n    def scale():\n        return 0.5\n")
            != variant("    @staticmethod\n    def scale():\n        return 1.0\n"))
    assert variant("    scale = 0.5\n") != variant("    scale = 1.0\n")
    made = {}
    for scale in (0.5, 1.0):
        alg = type(algorithms.get("FedAvg"))()
        alg.scale, alg.mix = scale, torch.tensor([scale])  # an instance's own settings count too
        made[scale] = checkpoints.algorithm_code(alg)
    assert made[0.5] != made[1.0]
    # constants that Python orders by hash (a frozenset) do not change the key between processes
    assert variant("    def f(self, x):\n        return x in {'a', 'b', 'c'}\n") == variant(
        "    def f(self, x):\n        return x in {'c', 'b', 'a'}\n")


def test_a_flipped_bit_in_a_stored_tensor_is_refused(tmp_path):
    model, clients, cfg = tiny_model(), tiny_clients(), one_round()
    run = lambda: algorithms.run("FedAvg", model, clients, cfg)  # noqa: E731
    path = stored_file(tmp_path, run)
    with checkpoints.resumable(tmp_path):
        stored = run()
    data = bytearray(path.read_bytes())
    where = data.find(stored.state["head.weight"].numpy().tobytes())
    assert where >= 0
    data[where] ^= 1  # the lowest mantissa bit of the first weight: torch.load does not check the zip's CRC
    path.write_bytes(bytes(data))
    with checkpoints.resumable(tmp_path), pytest.raises(ValueError, match="digest") as err:
        run()
    assert str(path) in str(err.value) and "delete it to re-run" in str(err.value)


def test_a_stored_run_with_non_finite_parameters_is_refused(tmp_path):
    model, clients, cfg = tiny_model(), tiny_clients(), one_round()
    good = algorithms.run("FedAvg", model, clients, cfg)
    bad = neural.FedResult(**{**{f: getattr(good, f) for f in good.__dataclass_fields__},
                              "state": {n: torch.full_like(p, float("nan")) for n, p in good.state.items()}})
    key = {"kind": "test", "what": "a run whose parameters are NaN"}
    with checkpoints.resumable(tmp_path):
        checkpoints.cached(key, lambda: bad)
        with pytest.raises(ValueError, match="non-finite") as err:
            checkpoints.cached(key, lambda: bad)
    assert "state" in str(err.value) and "delete it to re-run" in str(err.value)


def test_a_run_holding_zero_dimensional_tensors_is_stored_and_loaded(tmp_path):
    """APFL keeps each client's mixing weight as a 0-d tensor: the payload digest reads it as one
    element (a 0-d tensor cannot be viewed as bytes directly), and the digests of every other
    tensor are as before (a 1-d tensor's bytes, unchanged)."""
    assert checkpoints.digest(torch.tensor(0.5)) != checkpoints.digest(torch.tensor([0.5]))  # the shape counts
    h = __import__("hashlib").sha256()
    t = torch.arange(6, dtype=torch.float64).reshape(2, 3)
    h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
    h.update(t.numpy().tobytes())
    assert checkpoints.digest(t) == h.hexdigest()
    model, clients, cfg = tiny_model(), tiny_clients(), one_round()
    good = algorithms.run("FedAvg", model, clients, cfg)
    alphas = {"client_states": [{"alpha": torch.tensor(0.75, dtype=torch.float64)},
                                {"alpha": torch.tensor(0.5, dtype=torch.float64)}]}
    result = neural.FedResult(**{**{f: getattr(good, f) for f in good.__dataclass_fields__}, "extras": alphas})
    key = {"kind": "test", "what": "a run with 0-d tensors"}
    with checkpoints.resumable(tmp_path):
        first = checkpoints.cached(key, lambda: result)
        again = checkpoints.cached(key, lambda: pytest.fail("the stored run was not used"))
    assert [float(c["alpha"]) for c in again.extras["client_states"]] == [0.75, 0.5] and first is result
