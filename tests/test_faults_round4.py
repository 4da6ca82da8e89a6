"""Issue 45 (round 4 of "nothing silently wrong"): a setting that cannot take effect is
refused, and a message names what the user set (the option, not a field the library derived
from it, and ``ClientData`` for data of the wrong type)."""

import re

import pytest
import torch

from replearn import neural
from replearn.neural import algorithms
from tiny_net import Tiny


def tiny_model():
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return Tiny().to(torch.float64)


def tiny_clients(sizes=(12, 20, 8)):
    g = torch.Generator().manual_seed(0)
    xs = tuple(torch.randn(n, 3, 8, 8, generator=g, dtype=torch.float64) for n in sizes)
    ys = tuple(torch.randint(0, 3, (n,), generator=g) for n in sizes)
    return neural.ClientData(xs, ys, xs, ys)


CFG = neural.TrainConfig(rounds=1, lr=0.05, batch_size=4, local_steps=1, eval_every=1, last_rounds=1)


# ------------------------------------------------------------------ class 5: settings silently ignored

def test_keeping_more_training_images_than_a_client_holds_is_refused():
    clients = tiny_clients()
    with pytest.raises(ValueError, match=r"kept_per_client = 13 .*client 2 holds 8 training images"):
        clients.take_train(13, seed=0, option="kept_per_client")
    with pytest.raises(ValueError, match=r"^n = 9 .*client 2 holds 8 .*at most 8"):
        clients.take_train(9, seed=0)
    with pytest.raises(ValueError, match="kept_per_client must be an integer"):
        clients.take_train(0, seed=0, option="kept_per_client")
    kept = clients.take_train(8, seed=0)  # as many as the smallest client holds: every client keeps 8
    assert kept.train_sizes.tolist() == [8, 8, 8] and torch.equal(kept.x_train[2].sort(0)[0],
                                                                  clients.x_train[2].sort(0)[0])


# ------------------------------------------------------------------ class 7: messages name what was set

@pytest.mark.parametrize("name, options, option", [
    ("Local only", lambda alg: alg.Options(epochs=10**7), "LocalOnlyOptions.epochs"),
    ("Local only", lambda alg: alg.Options(epochs=300_000), "LocalOnlyOptions.epochs"),
    ("FedAvg+FT", lambda alg: alg.Options(epochs=10**7), "FineTuneOptions.epochs"),
    ("SCAFFOLD+FT", lambda alg: alg.Options(epochs=300_000), "FineTuneOptions.epochs"),
    ("Fine-tuning", lambda alg: alg.Options(epochs=10**7), "FineTuningOptions.epochs"),
])
def test_too_many_epochs_name_the_methods_option_before_any_training(name, options, option, monkeypatch):
    from replearn.neural.engine import rounds
    alg = algorithms.get(name)
    trained = []
    monkeypatch.setattr(rounds, "_run", lambda *a, **k: trained.append(a[0].name))
    with pytest.raises(ValueError, match=re.escape(f"{name}: {option} = ") + r"\d+ epochs") as err:
        alg.run(tiny_model(), tiny_clients(), CFG, options(alg))
    assert "local_epochs" not in str(err.value) and "local_steps" not in str(err.value)
    assert not trained  # +FT: refused before its base run trains


def test_a_fine_tuning_of_a_finished_run_names_its_option():
    plus_ft = algorithms.get("FedAvg+FT")
    base = algorithms.run("FedAvg", tiny_model(), tiny_clients(), CFG)
    with pytest.raises(ValueError, match=r"FineTuneOptions.epochs = 10000000 epochs"):
        plus_ft.fine_tune(base, tiny_model(), tiny_clients(), plus_ft.Options(epochs=10**7))


@pytest.mark.parametrize("name", ["FedAvg", "Local only", "FedAvg+FT", "SCAFFOLD", "Ditto", "Fine-tuning"])
def test_a_list_instead_of_client_data_names_client_data(name):
    clients = tiny_clients()
    as_list = [clients.x_train, clients.y_train, clients.x_test, clients.y_test]
    with pytest.raises(ValueError, match=r"clients must be a neural\.ClientData.*got a list"):
        algorithms.run(name, tiny_model(), as_list, CFG)


# ------------------------------------------------------------------ class 6: the benchmark's sanity check

def _bench():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    try:
        import algorithm_rounds
    finally:
        sys.path.pop(0)
    return algorithm_rounds


SMALL = ["--dtypes", "float64", "--clients", "2", "--per-client", "10", "--test-per-client", "5", "--steps", "1",
         "--repeats", "1"]


def test_the_lg_fedavg_reference_loop_shares_the_methods_layers():
    """Ours and the PFLlib-style loop compute the same iterates: LG-FedAvg's loop averages the
    layers the method shares (the top two by default), not the head alone."""
    bench = _bench()
    from replearn.neural import models
    from replearn.neural.specs import FEDREP_WIDTHS
    model = models.make_model("fedrep_cnn", 10, seed=0, device="cpu", dtype=torch.float64,
                              widths=FEDREP_WIDTHS["narrow"])
    clients = bench.synthetic_clients(3, 20, 10, torch.float64)
    pairs = [(list(zip(x, y)), list(zip(xt, yt)))
             for x, y, xt, yt in zip(clients.x_train, clients.y_train, clients.x_test, clients.y_test)]
    cfg = neural.TrainConfig(rounds=2, lr=0.05, momentum=0.5, batch_size=10, local_steps=2, participation=1.0,
                             eval_every=2, last_rounds=1)
    for opts in (algorithms.get("LG-FedAvg").Options(), algorithms.get("LG-FedAvg").Options(shared_layers=1)):
        acc_o, flat_o = bench.run_ours("LG-FedAvg", model, clients, cfg, opts)
        acc_r, flat_r = bench.run_reference("LG-FedAvg", model, pairs, cfg, opts)
        assert float((flat_o - flat_r).norm() / flat_r.norm()) < bench.TOLERANCE[torch.float64]
        assert abs(acc_o - acc_r) < 1e-6  # ours averages in float32


def test_a_failed_sanity_check_fails_the_bench(monkeypatch, capsys):
    bench = _bench()
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # the bench's one thread: not this process's
    assert bench.main(["--methods", "FedAvg", *SMALL]) == 0
    out = capsys.readouterr().out
    assert "agree" in out and ("MET" in out or "MISSED" in out) and "FAILED" not in out  # MET: the machine's load
    monkeypatch.setitem(bench.REFERENCES, "FedAvg", bench._with_kind("local_only"))  # computes something else
    assert bench.main(["--methods", "FedAvg", *SMALL]) == 1
    out = capsys.readouterr().out
    assert "DIFFER" in out and "FAILED" in out and "MET" not in out and "MISSED" not in out
    assert "0/1 met; sanity check failed (not timed): FedAvg" in out and "sanity check failed: FedAvg (float64)" in out


def test_a_table1_row_without_its_numbers_is_refused_at_registration():
    from replearn.neural import algorithms
    from replearn.neural.algorithms.base import Algorithm

    class Half(Algorithm):
        name, table1_row = "Half a row", 3

    with pytest.raises(ValueError, match="Half a row: table1_row = 3 .* lacks the columns"):
        algorithms.register(Half())
    assert "Half a row" not in algorithms.names()


# ------------------------------------------------------------------ class 4: a user's method at its hooks

def test_a_python_decision_on_a_tensor_on_the_batched_path_names_the_method_and_the_way_out():
    """A ``client_update`` that calls ``float()`` on a tensor cannot run under ``vmap``: the error
    names the method and the hook and says what to do, instead of functorch's bare message."""

    class Fussy(type(algorithms.get("FedAvg"))):
        name, table1_row, paper_accuracy, batched = "Fussy", None, None, True

        def client_update(self, ctx):
            update = super().client_update(ctx)
            if float(update.loss_sum) > 1e9:  # a Python decision on a tensor's value
                raise AssertionError("unreachable")
            return update

    clients = tiny_clients(sizes=(12, 12, 12))
    cfg = neural.TrainConfig(rounds=1, lr=0.05, batch_size=4, local_steps=2, participation=1.0, last_rounds=1,
                             vmap_clients=3)
    with pytest.raises(ValueError, match=r"^Fussy: its client_update .* batched = False, or run with "
                                         r"TrainConfig.vmap_clients = 1"):
        Fussy().run(tiny_model(), clients, cfg)
    Fussy().run(tiny_model(), clients, neural.TrainConfig(**{**cfg.__dict__, "vmap_clients": 1}))  # one at a time: runs
