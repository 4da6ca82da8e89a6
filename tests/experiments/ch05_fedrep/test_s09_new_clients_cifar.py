"""Book 5.9 driver (replearn.experiments.ch05_fedrep.s09_new_clients_cifar) on the synthetic stand-in of
:func:`cifar_fixtures.fake_cifar`."""

from dataclasses import replace

import pytest
import torch
from cifar_fixtures import RESULTS, fake_cifar

from replearn.experiments.ch05_fedrep import s09_new_clients_cifar as s09
from replearn.neural import TrainConfig

TINY_TRAIN = TrainConfig(rounds=2, participation=0.4, lr=0.05, momentum=0.5, batch_size=10, local_epochs=1,
                         head_epochs=1, local_steps=None, head_steps=None, eval_every=2, last_rounds=1)
TINY = dict(clients=4, classes_per_client=2, train_per_client=20, test_per_client=10, train=TINY_TRAIN,
            n_new=2, new_clients=2, new_train=10, new_test=6, head_epochs_new=3)


def test_run_new_clients_tiny():
    s = s09.NewClientSettings(**TINY)
    r = s09.run_new_clients(s, cifar=fake_cifar())
    assert len(r.new_classes) == 2 and len(r.train_classes) == 8
    assert not set(r.new_classes) & set(r.train_classes)
    for m in s09.NEW_METHODS:
        assert r.accuracy[m].shape == (3,) and r.client_accuracy[m].shape == (2,)
    assert r.epochs.tolist() == [1, 2, 3]
    assert set(r.trained) == {"FedRep", "FedAvg"} and set(r.bodies) == set(s09.NEW_METHODS)
    again = s09.run_new_clients(s, cifar=fake_cifar())
    assert all(torch.equal(r.accuracy[m], again.accuracy[m]) for m in s09.NEW_METHODS)


def test_a_head_fitted_by_hand_is_the_drivers():
    """The page's hand-written head fit (plan_round and LocalSGD.train, one epoch per round) gives
    the accuracy run_new_clients reports for FedRep's body."""
    from replearn import neural
    from replearn.backend import make_generator

    s = s09.NewClientSettings(**TINY)
    r = s09.run_new_clients(s, cifar=fake_cifar())
    model, new, fresh = s09.new_clients(s, fake_cifar(), r.new_classes)
    assert new.n_clients == s.new_clients and set(fresh) == set(neural.split_body_head(model)[1])
    body = {n: p for n, p in r.bodies["FedRep"].items() if n not in fresh}
    one, head = s09.head_config(s), tuple(fresh)
    gen, sgd = make_generator(one.seed), neural.LocalSGD(model)
    own = [{**body, **fresh} for _ in range(new.n_clients)]
    for _ in range(one.rounds):
        plan = neural.plan_round(new.train_sizes.tolist(), [neural.Phase(head, None, 1)], one, gen)
        for i in plan.clients:
            own[i] = {**own[i], **sgd.train(own[i], head, new.x_train[i], new.y_train[i], plan.batches[i][0], one)[0]}
    heads = {n: torch.stack([p[n] for p in own]) for n in head}
    assert abs(neural.evaluate(model, new, body, heads).average - float(r.accuracy["FedRep"][-1])) < 1e-12


def test_bad_settings_raise():
    s = s09.NewClientSettings(**TINY)
    # n_new is checked against the data's classes when run
    with pytest.raises(ValueError, match="n_new"):
        s09.run_new_clients(replace(s, n_new=10), cifar=fake_cifar())
    # everything else when the settings are built
    with pytest.raises(ValueError, match="exceeds"):
        replace(s, new_classes_per_client=3)
    with pytest.raises(ValueError, match="head_epochs_new"):
        replace(s, head_epochs_new=0)
    with pytest.raises(ValueError, match=r"dataset must be one of \('cifar10', 'cifar100'\), got 'mnist'"):
        replace(s, dataset="mnist")
    with pytest.raises(ValueError, match="participation"):
        replace(s, train=replace(s.train, participation=0.0))


def test_cpu_default_long_and_paper_profiles():
    n = s09.NewClientSettings()
    assert n.train_per_client * n.clients % (10 - n.n_new) == 0 and n.new_train * n.new_clients % n.n_new == 0
    assert n.new_classes_per_client <= n.n_new and len(n.seeds) >= 3
    long = s09.NewClientSettings.profile("long")  # near-paper: the paper profile with fewer rounds and seeds, 250 new images
    p = s09.NewClientSettings.profile("paper")
    # the authors' protocol (their split, weight decay and augmentation), as in the paper profile
    assert p.split == "authors" and p.train.weight_decay == 1e-4 and p.train.augment
    assert long.split == p.split and long.train.weight_decay == p.train.weight_decay and long.train.augment
    assert replace(long, new_train=p.new_train, seeds=p.seeds, full_data=True,
                   train=replace(long.train, rounds=p.train.rounds)) == p
    assert long.train.eval_every == 1 and long.train.rounds >= 5 * long.train.last_rounds  # every round, last 10
    assert long.new_train == 250 and len(long.seeds) >= 2  # all the offline subset holds per CIFAR-100 class
    assert long.train.rounds > n.train.rounds and long.train.rounds % long.train.eval_every == 0
    assert (p.dataset, p.n_new, p.clients, p.classes_per_client) == ("cifar100", 20, 80, 5)  # 80 x 5 shards: 5 per class
    assert (p.new_classes_per_client, p.new_train, p.head_epochs_new) == (5, 500, 20)
    assert (p.train.rounds, p.train.participation, p.train.lr, p.dtype) == (100, 0.1, 0.01, "float32")


# --------------------------------------------------------------------------- what the page shows

from types import SimpleNamespace

import numpy as np

from replearn.book import results



def _runs(n=3):
    curves = {"FedRep": [0.6, 0.8], "FedAvg": [0.7, 0.75], "random body": [0.5, 0.55]}
    return [SimpleNamespace(trained={"FedRep": 0.85 + 0.01 * s, "FedAvg": 0.3},
                            accuracy={m: torch.tensor(v) + 0.01 * s for m, v in curves.items()},
                            epochs=torch.arange(1, 3)) for s in range(n)]


def test_accuracies_tables_and_checks(glued):
    acc = s09.accuracies(_runs())
    assert list(acc.first) == list(s09.NEW_METHODS) and acc.last["FedRep"][0] == pytest.approx(0.8)
    trained, comps, tables = s09.glue_tables(acc, "nc", last="last-", epochs=2, chance=0.5, captions=("a", "b"))
    assert glued["nc-trained-fedrep"] == trained["FedRep"].text and "nc-last-random" in glued
    assert tables[1].header[2] == "after head epoch 2 (%)" and len(tables) == 2
    # the differences are in points, with the sign of "first minus second"
    assert glued["nc-diff-fedrep-fedavg"] == comps["last"][("FedRep", "FedAvg")].text
    assert glued["nc-diff-fedrep-fedavg"].startswith("+5") and glued["nc-diff-fedrep-fedavg"].endswith(" points")
    assert glued["nc-diff-first"].startswith("+10") and comps["trained"].mean == pytest.approx(56.0)
    assert comps["chance"].mean == pytest.approx(6.0) and glued["nc-diff-random-chance"] == comps["chance"].text
    checks = s09.checks(comps)
    assert [c[0] for c in checks] == ["nc-v-fedrep-random", "nc-v-fedavg-random", "nc-v-random-chance",
                                      "nc-v-fedrep-fedavg", "nc-v-first", "nc-v-trained"]
    # each verdict judges the very comparison the page glues
    assert checks[3][2] is comps["last"][("FedRep", "FedAvg")] and checks[4][2] is comps["first"]
    assert checks[2][2] is comps["chance"]
    assert checks[0][3]["require"] and checks[3][3]["paper"] == s09.PAPER_CLAIM and checks[5][3]["paper"] is None
    long = s09.checks(comps, prefix="nc-long", scale="long", require=False, trained_claim="Table 1's ordering")
    assert long[0][0] == "nc-long-v-fedrep-random" and not long[0][3]["require"] and long[5][3]["paper"] == "Table 1's ordering"
    assert s09.dataset_label("cifar100") == "CIFAR-100"


def test_settings_in_words():
    text = repr(s09.settings_table(s09.NewClientSettings(), "c"))
    assert "4 of CIFAR-10's 10 held out" in text and "10 steps on the head" in text
    assert "NewClientSettings" not in text and "None" not in text and "(0, 1, 2)" not in text
    long = repr(s09.settings_table(s09.NewClientSettings.profile("long"), "c"))
    assert "1 epoch on the body" in long and "weight decay" in long and "mean over the last 10 rounds" in long


def test_long_run_helpers_and_figure(glued):
    import matplotlib.pyplot as plt

    long = results.load("5.9", "long", root=RESULTS)
    lacc = s09.long_accuracies(long)
    assert lacc.last["FedRep"] == long.values("accuracy", "FedRep", -1)
    s09.glue_long_settings(long)
    assert glued["nc-long-seeds"] == str(len(long.seeds)) and glued["nc-long-chance"].startswith("1/")
    table = s09.per_seed_table(long, "c")
    assert len(table.rows) == len(long.seeds) and table.header[1] == "FedRep's body (%)"
    assert table.rows[0][1] == f"{100 * lacc.last['FedRep'][0]:.2f}"
    curves = {m: np.array([[0.5, 0.6], [0.55, 0.65]]) for m in s09.NEW_METHODS}
    fig = s09.plot_curves(np.arange(1, 3), curves, 50.0, "title")
    ax = fig.axes[0]
    assert ax.get_title() == "title" and ax.get_legend() is not None
    fig.canvas.draw()
    assert ax.get_legend().get_window_extent().y1 < ax.get_window_extent().y0   # below the axes, off the data
    plt.close(fig)
