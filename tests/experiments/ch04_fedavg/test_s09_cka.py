"""Book 4.9 driver (replearn.experiments.ch04_fedavg.s09_cka) on tiny settings and the real CIFAR
subsets (skipped without them)."""

from dataclasses import replace

import pytest

from replearn.book import wording as words
from replearn.experiments.ch04_fedavg import s09_cka as s09
from replearn.experiments.ch04_fedavg.cifar_transfer import PAPER_PRETRAIN, PretrainSettings

# 16 clients x 5 classes: the 80 pre-training classes left after holding out 20
TINY = dict(total_steps=4, n_pretrain=None, clients=16, classes_per_client=5,
            train=replace(PretrainSettings().train, batch_size=5, participation=0.1))


def test_paper_profile_follows_the_paper():
    d, p = s09.CKASettings(), s09.CKASettings.profile("paper")
    assert (p.model, p.classes_per_client, p.tau) == ("fedavg_cnn", 5, 50)
    assert (p.train.lr, p.train.momentum, p.train.batch_size, p.dtype) == (0.01, 0.5, 10, "float32")
    assert p.train == PAPER_PRETRAIN["train"] and p.total_steps % p.tau == 0
    assert d.dtype == "float64" and len(d.seeds) >= 3


def test_bad_settings_raise_at_construction():
    with pytest.raises(ValueError, match="ft_clients"):
        s09.CKASettings(ft_clients=0)
    with pytest.raises(ValueError, match="probe_per_class"):
        s09.CKASettings(probe_per_class=1)
    with pytest.raises(ValueError, match=r"tau \(.*tau = 1 is D-SGD\) must be an integer >= 2"):
        s09.CKASettings(tau=1)
    with pytest.raises(ValueError, match="participation"):
        s09.CKASettings(train=replace(s09.CKASettings().train, participation=0.0))


def test_cka_tiny(cifar10, cifar100):
    s = s09.CKASettings(**TINY, tau=2, ft_clients=2, ft_samples=10, ft_epochs=1, probe_per_class=5)
    r = s09.run_cka(s, cifar10=cifar10, cifar100=cifar100)
    assert r.layers == ("body.relu1", "body.relu2", "body.relu_fc1", "body.relu_fc2")
    for tau in (1, 2):
        assert r.before_after[tau].shape == (2, 4)
        assert bool((r.before_after[tau] <= 1 + 1e-6).all()) and bool((r.before_after[tau] > 0).all())
        assert r.mean(tau).shape == (4,)
    assert r.between.shape == (4,)
    assert set(r.ft_accuracy) == set(r.pretrain_accuracy) == {1, 2}


# --------------------------------------------------------------------------- what the page shows

from types import SimpleNamespace

import torch

from cifar_fixtures import RESULTS
from replearn.book import results

LAYERS = ("body.relu1", "body.relu2", "body.relu_fc1")


def _runs(n=3):
    runs = []
    for seed in range(n):
        ba = {10: torch.tensor([[0.9, 0.7, 0.5]]) + 0.01 * seed, 1: torch.tensor([[0.8, 0.6, 0.4]]) - 0.01 * seed}
        runs.append(SimpleNamespace(layers=LAYERS, between=torch.tensor([0.95, 0.8, 0.6]),
                                    ft_accuracy={10: 0.5, 1: 0.45 + 0.01 * seed},
                                    pretrain_accuracy={10: 0.3, 1: 0.35 + 0.01 * seed},
                                    mean=lambda t, ba=ba: ba[t].mean(0)))
    return runs


def test_demo_representations_show_the_invariances():
    X, Y, maps = s09.demo_representations(seed=0)
    assert X.shape == (200, 30) and Y.shape == (200, 20) and list(maps)[0] == "X"
    assert torch.equal(maps["X"], X) and torch.allclose(maps["3.7 X (scaling)"], 3.7 * X)
    again = s09.demo_representations(seed=0)
    assert torch.equal(again[1], Y)


def test_tables_and_checks_of_the_cpu_run(glued):
    runs = _runs()
    cfg = s09.CKASettings(tau=10, total_steps=20)
    acc = s09.glue_accuracies(runs, cfg)
    assert list(acc["ft_accuracy"]) == [10, 1] and glued["cka-ft_accuracy-10"].startswith("50")   # in %
    assert glued["cka-chance-pre"] == "5" and glued["cka-chance-ft"] == "10"
    ba, between = s09.layer_cka(runs, 10)
    assert list(ba) == [10, 1] and len(ba[10]) == 3 and len(between[0]) == 3
    short = [name.replace("body.", "") for name in LAYERS]
    assert s09.layer_labels(LAYERS) == {"relu1": "conv 1", "relu2": "conv 2", "relu_fc1": "fc 1"}
    cka = s09.glue_cka_table(short, ba, between)
    assert [row[0] for row in cka.rows] == ["conv 1", "conv 2", "fc 1"] and glued["cka-between-relu2"] == cka.rows[1][4]
    assert glued["cka-diff-relu1"] == cka.rows[0][3] and cka.rows[0][3].startswith("+")   # FedAvg − D-SGD
    checks = s09.checks(short, ba)
    assert [c[0] for c in checks] == ["cka-v-relu1", "cka-v-relu2"]
    assert bool(checks[0][2]) and checks[0][1] == "conv 1: FedAvg's CKA above D-SGD's (changes less)"
    assert checks[0][3]["fails"] == "not separated (n = 3)" and checks[0][3]["paper"] == s09.PAPER_CLAIM
    assert s09.falls_with_depth(ba, between) == (True, True)
    assert s09.falls_with_depth({10: ba[10][::-1], 1: ba[1]}, between) == (False, True)
    assert s09.by_position(short) == {"first convolution": "relu1", "last convolution": "relu2",
                                      "first hidden linear": "relu_fc1", "last hidden linear": "relu_fc1"}


def test_settings_in_words():
    text = repr(words.settings_table(s09.settings_rows(s09.CKASettings())))
    assert "2 CIFAR-10 clients of 200 images" in text and "20 CIFAR-100 classes; 10 clients of 4" in text
    for python in ("fedrep_cnn", "None", "True", "relu"):
        assert python not in text, python


def test_measurement_written_out_is_the_runs(cifar10, cifar100):
    """The page's cell that writes out one client's fine-tuning and CKA gives the run's numbers."""
    from replearn import neural
    from replearn.backend import derive_seed, make_generator
    from replearn.experiments.ch04_fedavg import cifar_transfer as transfer
    from replearn.neural import similarity

    s = s09.CKASettings(total_steps=4, tau=2, train=replace(s09.CKASettings().train, batch_size=5), ft_clients=2,
                        ft_samples=10, probe_per_class=3, ft_epochs=2)
    r = s09.run_cka(s, cifar10=cifar10, cifar100=cifar100)
    pre = transfer.pretrain(s, cifar100)
    clients, probe = s09.cka_clients(s, cifar10)
    assert clients.n_clients == 2 and probe.shape[0] == 30
    tuning = s09.fine_tuning(s)
    model, w = transfer.new_model(s, pre.states[2], 10, derive_seed(s.seed, 32), clients.device)
    batches = neural.plan_batches(10, s.ft_batch_size, steps=None, epochs=s.ft_epochs,
                                  generator=make_generator(tuning.seed))
    tuned, _ = neural.LocalSGD(model).train(w, list(w), clients.x_train[0], clients.y_train[0], batches, tuning)
    before, after = (transfer.layer_activations(model, v, probe, r.layers) for v in (w, tuned))
    mine = [float(similarity.linear_cka(before[n], after[n])) for n in r.layers]
    assert mine == pytest.approx(r.before_after[2][0].tolist(), abs=1e-6)


def test_long_run_helpers_read_the_committed_file(glued):
    long = results.load("4.9", "long", root=RESULTS)
    lv = s09.read_long(long)
    assert lv.tau == int(long.settings["tau"]) and list(lv.pre) == [lv.tau, 1]
    assert not lv.layers[0].startswith("body.") and len(lv.ba) == len(lv.layers)
    acc_table, cka_table = s09.glue_long_tables(lv)
    assert len(cka_table.rows) == len(lv.layers) and "cka-long-first-diff" in glued
    assert cka_table.rows[0][0] == "conv 1" and acc_table.rows[0][3].endswith("points")
    less, more = s09.glue_long_ordering(lv)
    assert glued["cka-long-n-conv"] == str(sum(not layer.startswith("relu_fc") for layer in lv.layers))
    assert "relu" not in glued["cka-long-n-less"] + glued["cka-long-n-more"]
    checks = s09.long_checks(lv)
    assert [c[0] for c in checks] == ["cka-long-v-first", "cka-long-v-pre"] and checks[1][2].unit == "points"
    rows = words.side_by_side(s09.settings_rows(long.settings), s09.settings_rows(s09.CKASettings()))
    assert rows[0][1].startswith("80 CIFAR-100 classes")
    table = s09.paper_table(lv)
    assert table.rows[-1][0] == "fine-tuned CIFAR-10 accuracy" and len(table.rows) == 5
    assert table.rows[0][0] == "CKA, first convolution (conv 1)"


def test_figure():
    import matplotlib.pyplot as plt

    ba, between = s09.layer_cka(_runs(), 10)
    fig = s09.plot_cka(["relu1", "relu2", "relu_fc1"], ba, between)
    assert len(fig.axes) == 2 and "3 seeds" in fig.axes[1].get_title()
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["conv 1", "conv 2", "fc 1"]
    plt.close(fig)
