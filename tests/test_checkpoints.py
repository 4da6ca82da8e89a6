"""replearn.checkpoints: finished engine runs are stored and reused inside resumable()."""

import pytest
import torch

from replearn import algorithms, checkpoints, neural
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
    original = getattr(neural, name)
    monkeypatch.setattr(neural, name, lambda *a, **k: calls.append(1) or original(*a, **k))
    return calls


def test_a_stored_run_comes_back_bit_for_bit_without_training(tmp_path, monkeypatch):
    model, clients = tiny_model(), tiny_clients()
    cfg = neural.TrainConfig(rounds=2, lr=0.05, batch_size=4, local_steps=2, eval_every=1, last_rounds=1)
    plain = neural.fedavg(model, clients, cfg)
    calls = counting(monkeypatch, "_run_spec")
    with checkpoints.resumable(tmp_path):
        first = neural.fedavg(model, clients, cfg)
        again = neural.fedavg(model, clients, cfg)
        other = neural.fedavg(model, clients, neural.TrainConfig(**{**cfg.__dict__, "lr": 0.04}))
    assert len(calls) == 2  # the repeat was loaded; a changed lr trained again
    assert equal_results(plain, first) and equal_results(first, again)
    assert not all(torch.equal(first.state[n], other.state[n]) for n in first.state)
    assert len(list(tmp_path.glob("*.pt"))) == 2


def test_protocol_runs_are_stored_and_options_are_part_of_the_key(tmp_path, monkeypatch):
    model, clients = tiny_model(), tiny_clients()
    cfg = neural.TrainConfig(rounds=2, lr=0.05, batch_size=4, local_steps=2, eval_every=1, last_rounds=1)
    calls = counting(monkeypatch, "_run_protocol")
    opts = algorithms.get("FedProx").Options
    with checkpoints.resumable(tmp_path):
        a = algorithms.run("FedProx", model, clients, cfg, opts(mu=0.1))
        b = algorithms.run("FedProx", model, clients, cfg, opts(mu=0.1))
        algorithms.run("FedProx", model, clients, cfg, opts(mu=0.2))
    assert len(calls) == 2 and equal_results(a, b)


def test_nothing_is_stored_outside_resumable_or_with_a_callback(tmp_path, monkeypatch):
    model, clients = tiny_model(), tiny_clients()
    cfg = neural.TrainConfig(rounds=1, lr=0.05, batch_size=4, local_steps=1, eval_every=1, last_rounds=1)
    calls = counting(monkeypatch, "_run_spec")
    neural.fedavg(model, clients, cfg)
    with checkpoints.resumable(tmp_path):
        neural.fedavg(model, clients, cfg, callback=lambda t, m: None)
        neural.fedavg(model, clients, cfg, callback=lambda t, m: None)
    assert len(calls) == 3 and not list(tmp_path.glob("*.pt"))
    assert checkpoints.active() is None


def test_a_corrupt_stored_run_is_named(tmp_path):
    model, clients = tiny_model(), tiny_clients()
    cfg = neural.TrainConfig(rounds=1, lr=0.05, batch_size=4, local_steps=1, eval_every=1, last_rounds=1)
    with checkpoints.resumable(tmp_path):
        neural.fedavg(model, clients, cfg)
    (stored,) = tmp_path.glob("*.pt")
    stored.write_bytes(b"not a run")
    with checkpoints.resumable(tmp_path), pytest.raises(ValueError, match="delete it to re-run"):
        neural.fedavg(model, clients, cfg)


def test_digest_sees_data_and_dtype():
    x = torch.zeros(3)
    assert checkpoints.digest(x) == checkpoints.digest(torch.zeros(3))
    assert checkpoints.digest(x) != checkpoints.digest(torch.zeros(3, dtype=torch.float64))
    assert checkpoints.digest(x) != checkpoints.digest(torch.tensor([0.0, 0.0, 1e-30]))
    assert checkpoints.digest({"a": 1}, (2,)) != checkpoints.digest({"a": 1}, (3,))
