"""Book 4.8 driver (replearn.experiments.ch04_fedavg.s08_transfer) on tiny settings and the real CIFAR
subsets (skipped without them)."""

from dataclasses import replace

import pytest

from replearn.book import wording as words
from replearn.experiments.ch04_fedavg import s08_transfer as s08
from replearn.experiments.ch04_fedavg.cifar_transfer import PAPER_PRETRAIN, PretrainSettings

# 16 clients x 5 classes: the 80 pre-training classes left after holding out 20
TINY = dict(total_steps=4, n_pretrain=None, clients=16, classes_per_client=5,
            train=replace(PretrainSettings().train, batch_size=5, participation=0.1))


def test_paper_profile_follows_the_paper():
    d, p = s08.TransferSettings(), s08.TransferSettings.profile("paper")
    assert (p.clients, p.n_new, p.tau, p.ft_epochs, p.trials, p.new_clients) == (80, 20, 50, 10, 5, 5)
    assert p.total_steps % p.tau == 0
    assert (p.train.lr, p.train.momentum, p.train.batch_size, p.dtype) == (0.01, 0.5, 10, "float32")
    assert p.train == PAPER_PRETRAIN["train"] and p.n_pretrain is None and p.new_classes_per_client == 5
    assert d.dtype == "float64" and len(d.seeds) >= 3


def test_bad_settings_raise_at_construction():
    with pytest.raises(ValueError, match="samples"):
        s08.TransferSettings(samples=())
    with pytest.raises(ValueError, match="cifar10_samples"):
        s08.TransferSettings(cifar10_samples=(0,))
    with pytest.raises(ValueError, match="trials"):
        s08.TransferSettings(trials=0)
    with pytest.raises(ValueError, match=r"tau \(.*tau = 1 is D-SGD\) must be an integer >= 2"):
        s08.TransferSettings(tau=1)
    with pytest.raises(ValueError, match="participation"):
        s08.TransferSettings(train=replace(s08.TransferSettings().train, participation=0.0))


def test_transfer_tiny(cifar10, cifar100):
    s = s08.TransferSettings(**TINY, tau=2, samples=(5, 10), cifar10_samples=(10,), ft_epochs=1,
                             new_clients=2, test_per_client=10)
    r = s08.run_transfer(s, cifar10=cifar10, cifar100=cifar100)
    assert r.accuracy[("cifar100-new", 1)].shape == (2, 2)
    assert r.accuracy[("cifar10", 2)].shape == (1, 2)
    assert set(r.accuracy) == {(t, tau) for t in ("cifar100-new", "cifar10") for tau in (1, 2)}
    assert set(r.pretrain_accuracy) == {1, 2}
    assert r.samples == {"cifar100-new": (5, 10), "cifar10": (10,)}
    for v in r.accuracy.values():
        assert bool(((v >= 0) & (v <= 1)).all())
    assert r.mean("cifar10", 2).shape == (1,) and r.std("cifar100-new", 1).shape == (2,)


# --------------------------------------------------------------------------- what the page shows

from types import SimpleNamespace

import torch

from cifar_fixtures import RESULTS
from replearn.book import results



def _runs(n=3):
    samples = {"cifar100-new": (20, 100), "cifar10": (100,)}
    runs = []
    for seed in range(n):
        acc = {}
        for target, sizes in samples.items():
            for tau, base in ((10, 0.7), (1, 0.6)):
                acc[(target, tau)] = torch.full((len(sizes), 4), base + 0.01 * seed)
        runs.append(SimpleNamespace(samples=samples, accuracy=acc, pretrain_accuracy={10: 0.3 + 0.01 * seed, 1: 0.4},
                                    mean=lambda target, tau, acc=acc: acc[(target, tau)].mean(1)))
    return runs


def test_accuracies_glue_tables_and_checks(glued):
    runs = _runs()
    cfg = s08.TransferSettings(tau=10, total_steps=20)
    assert s08.method_names(10) == {1: "D-SGD", 10: "FedAvg, τ = 10"}
    assert s08.pretrain_classes(cfg) == (cfg.n_pretrain or 100 - cfg.n_new)
    assert s08.pretrain_classes({"n_pretrain": None, "n_new": 20}) == 80
    pre = s08.pretrain_accuracies(runs, 10)
    assert list(pre) == [10, 1] and pre[1] == [0.4] * 3
    acc = s08.accuracies(runs, 10)
    assert list(acc) == [("cifar100-new", 20), ("cifar100-new", 100), ("cifar10", 100)]
    assert acc[("cifar10", 100)][0] == pytest.approx([0.7, 0.71, 0.72])
    table = s08.glue_tables(pre, acc, cfg)   # one table, in % and percentage points
    assert glued["tr-chance-pre"] == f"{100 / s08.pretrain_classes(cfg):.1f}" and "tr-pre-fedavg-sd" in glued
    assert table.rows[0][0].startswith("pre-training clients") and glued["tr-pre-diff"] == table.rows[0][4]
    assert glued["tr-cifar10-100-diff"] == table.rows[3][4] and table.rows[3][4].endswith("points")
    assert table.rows[1][:2] == ["CIFAR-100, unseen classes", "20"] and table.rows[3][0] == "CIFAR-10"
    assert glued["tr-cifar10-100-fedavg"] == table.rows[3][2] and table.rows[3][2].startswith("71")   # percent
    assert s08.lowest(acc) == {"cifar100-new": pytest.approx(0.6), "cifar10": pytest.approx(0.6)}
    assert s08.chance(2) == {"cifar100-new": 0.5, "cifar10": 0.1}
    checks = s08.checks(pre, acc)
    assert [c[0] for c in checks] == ["tr-v-pre", "tr-v-cifar100-new-20", "tr-v-cifar100-new-100", "tr-v-cifar10-100"]
    # FedAvg minus D-SGD throughout, as in the table: FedAvg pre-trains worse (opposite), transfers better
    assert checks[0][2].outcome == "opposite" and all(bool(c[2]) for c in checks[1:])
    assert checks[1][2].unit == "points" and checks[1][1] == "CIFAR-100, unseen classes, 20 images: FedAvg above D-SGD"
    assert checks[0][3]["fails"] == "not separated (n = 3)" and checks[0][3]["opposite"] == "opposite"
    long = s08.checks(pre, acc, scale="long")
    assert long[1][3]["scale"] == "long" and long[1][0] == "tr-long-v-cifar100-new-20"


def test_settings_in_words():
    text = repr(words.settings_table(s08.settings_rows(s08.TransferSettings())))
    assert "20 CIFAR-100 classes, 20 others held out; 10 clients of 4 single-class shards" in text
    assert "on 20 or 100 CIFAR-100 images, 100 CIFAR-10 images" in text
    for python in ("fedrep_cnn", "cifar100-new", "(20, 100)", "None", "True"):
        assert python not in text, python


def test_round_written_out_is_the_engines_fine_tuning(cifar10, cifar100):
    """The page's cell that writes out a new client's fine-tuning gives the engine's (finetune_all)."""
    from replearn import neural
    from replearn.backend import derive_seed, make_generator
    from replearn.experiments.ch04_fedavg import cifar_transfer as transfer

    s = s08.TransferSettings(total_steps=4, tau=2, train=replace(s08.TransferSettings().train, batch_size=5),
                             samples=(5,), cifar10_samples=(5,), new_clients=2, test_per_client=10, ft_epochs=2)
    pre = transfer.pretrain(s, cifar100)
    clients, seed = s08.target_clients(s, cifar100, pre.new_classes, 0, n=5)
    assert clients.n_clients == 2 and int(clients.train_sizes[0]) == 5
    n_classes = len(pre.new_classes)
    tuning = neural.TrainConfig(lr=s.ft_lr, momentum=s.train.momentum, batch_size=s.ft_batch_size,
                                seed=derive_seed(seed, 6))
    model, w = transfer.new_model(s, pre.states[1], n_classes, derive_seed(seed, 5), clients.device)
    batches = neural.plan_batches(5, s.ft_batch_size, steps=None, epochs=s.ft_epochs, generator=make_generator(tuning.seed))
    tuned, _ = neural.LocalSGD(model).train(w, list(w), clients.x_train[0], clients.y_train[0], batches, tuning)
    _, engine = transfer.finetune_all(s, pre.states[1], clients, n_classes, seed)
    assert all(torch.allclose(tuned[n], engine.client_state(0)[n], rtol=0, atol=1e-12) for n in tuned)


def test_long_run_helpers_read_the_committed_file(glued):
    long = results.load("4.8", "long", root=RESULTS)
    lpre, lacc = s08.long_pretrain_accuracies(long), s08.long_accuracies(long)
    tau = int(long.settings["tau"])
    assert list(lpre) == [tau, 1] and len(lacc) == len(long.settings["samples"]) + len(long.settings["cifar10_samples"])
    table = s08.glue_tables(lpre, lacc, long.settings, prefix="tr-long")
    assert "tr-long-pre-fedavg" in glued and len(table.rows) == len(lacc) + 1
    assert "80 classes" in table.rows[0][0]
    rows = words.side_by_side(s08.settings_rows(long.settings), s08.settings_rows(s08.TransferSettings()))
    assert rows[0][0] == "pre-training" and rows[0][1].startswith("80 CIFAR-100 classes")
    table = s08.paper_table(lpre, lacc)
    assert table.rows[-1][0] == "pre-training clients" and all(r[2].endswith("points") for r in table.rows)


def test_figure_plots_only_what_varies():
    import matplotlib.pyplot as plt

    runs = _runs()
    fig = s08.plot_transfer(s08.accuracies(runs, 10), 10, 2)
    assert len(fig.axes) == 1   # CIFAR-10 has one sample size: a row of the table, not a panel
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert set(labels) == {"chance", "FedAvg, τ = 10", "D-SGD"}
    assert fig.axes[0].lines[-1].get_ydata()[0] == 50   # the chance line of pairs of classes, in %
    plt.close(fig)
    one = {k: v for k, v in s08.accuracies(runs, 10).items() if k == ("cifar10", 100)}
    with pytest.raises(ValueError, match="at least two sample sizes"):
        s08.plot_transfer(one, 10, 2)
