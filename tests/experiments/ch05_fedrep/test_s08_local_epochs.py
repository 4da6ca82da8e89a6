"""Book 5.8 driver (replearn.experiments.ch05_fedrep.s08_local_epochs) on the synthetic stand-in of
:func:`cifar_fixtures.fake_cifar`."""

from dataclasses import replace

import pytest
import torch
from cifar_fixtures import RESULTS, fake_cifar

from replearn.experiments.ch05_fedrep import s08_local_epochs as s08
from replearn.neural import TrainConfig

TINY_TRAIN = TrainConfig(rounds=2, participation=0.4, lr=0.05, momentum=0.5, batch_size=10, local_epochs=1,
                         head_epochs=1, local_steps=None, head_steps=None, eval_every=2, last_rounds=1)
TINY = dict(clients=5, classes_per_client=2, train_per_client=20, test_per_client=10, train=TINY_TRAIN)


def test_run_epochs_tiny():
    s = s08.EpochSettings(epochs=(1, 2), **TINY)
    r = s08.run_epochs(s, cifar=fake_cifar())
    assert r.epochs == (1, 2)
    assert r.accuracy["FedRep"].shape == (2,) and r.accuracy["FedAvg"].shape == (2,)
    assert r.curves["FedAvg"].shape == (2, s.train.rounds)
    assert r.train_sizes.tolist() == [20] * 5
    again = s08.run_epochs(s, cifar=fake_cifar())
    assert all(torch.equal(r.accuracy[m], again.accuracy[m]) for m in r.accuracy)
    # every run starts from the same network: E = 2 alone gives what it gave after the E = 1 runs
    alone = s08.run_epochs(replace(s, epochs=(2,)), cifar=fake_cifar())
    assert all(torch.equal(r.accuracy[m][1:], alone.accuracy[m]) for m in r.accuracy)


def test_federation_is_the_network_and_data_of_the_runs():
    s = s08.EpochSettings(epochs=(1,), **TINY)
    model, clients = s08.federation(s, fake_cifar())
    assert clients.n_clients == 5 and clients.x_train[0].dtype == next(model.parameters()).dtype
    again, _ = s08.federation(s, fake_cifar())
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), again.parameters()))


def test_a_round_by_hand_is_the_librarys():
    """The page's hand-written FedRep round (plan_round, LocalSGD.train on the head then the body,
    the size-weighted mean of the bodies) gives the body of algorithms.run's first round."""
    from replearn import neural
    from replearn.backend import make_generator
    from replearn.neural import algorithms

    s = s08.EpochSettings(epochs=(1, 2), **TINY)
    model, clients = s08.federation(s, fake_cifar())
    one = s.config(rounds=1, head_epochs=2)
    body, head = neural.split_body_head(model)
    phases = [neural.Phase(head, None, one.head_epochs), neural.Phase(body, None, one.local_epochs)]
    server = {n: p.detach() for n, p in model.named_parameters()}
    plan = neural.plan_round(clients.train_sizes.tolist(), phases, one, make_generator(one.seed))
    sgd, total, mean_body = neural.LocalSGD(model), 0, {n: 0 for n in body}
    for i in plan.clients:
        p, x, y = dict(server), clients.x_train[i], clients.y_train[i]
        for phase, batches in zip(phases, plan.batches[i]):
            p.update(sgd.train(p, phase.trainable, x, y, batches, one)[0])
        mean_body = {n: mean_body[n] + len(y) * p[n] for n in body}
        total += len(y)
    lib = algorithms.run("FedRep", model, clients, one)
    assert len(plan.clients) == 2    # participation 0.4 of 5 clients
    assert all(torch.allclose(mean_body[n] / total, lib.state[n], rtol=0, atol=1e-12) for n in body)
    assert not all(torch.allclose(mean_body[n] / total, server[n], atol=1e-6) for n in body)   # it moved


def test_bad_settings_raise_at_construction():
    s = s08.EpochSettings(epochs=(1, 2), **TINY)
    with pytest.raises(ValueError, match="distinct"):
        replace(s, epochs=(1, 1))
    with pytest.raises(ValueError, match="epochs"):
        replace(s, epochs=(0, 1))
    with pytest.raises(ValueError, match=r"dataset must be one of \('cifar10', 'cifar100'\), got 'mnist'"):
        replace(s, dataset="mnist")
    with pytest.raises(ValueError, match="participation"):
        replace(s, train=replace(s.train, participation=0.0))


def test_config_sets_the_epochs_of_one_run():
    cfg = s08.EpochSettings().config(head_epochs=4)
    assert cfg.local_steps is None and cfg.head_steps is None and cfg.head_epochs == 4
    cfg = s08.EpochSettings().config(local_epochs=3)
    assert cfg.local_epochs == 3 and cfg.local_steps is None


def test_cpu_default_long_and_paper_profiles():
    e = s08.EpochSettings()
    assert e.train_per_client * e.clients % 10 == 0 and len(set(e.epochs)) == len(e.epochs)
    assert e.train.local_steps is None and e.train.head_steps is None       # epochs, not steps
    assert e.train.eval_every == e.train.rounds and len(e.seeds) >= 3
    long = s08.EpochSettings.profile("long")  # near-paper: the paper profile with fewer rounds, values of E and seeds
    p = s08.EpochSettings.profile("paper")
    # the authors' protocol (their split, weight decay and augmentation), as in the paper profile
    assert p.split == "authors" and p.train.weight_decay == 1e-4 and p.train.augment
    assert long.split == p.split and long.train.weight_decay == p.train.weight_decay and long.train.augment
    assert replace(long, epochs=p.epochs, seeds=p.seeds, full_data=True,
                   train=replace(long.train, rounds=p.train.rounds)) == p
    assert long.train.eval_every == 1 and long.train.rounds >= 5 * long.train.last_rounds  # every round, last 10
    assert set(long.epochs) < set(p.epochs) and len(long.seeds) >= 2
    assert long.train.rounds > e.train.rounds and long.train.rounds % long.train.eval_every == 0
    assert p.clients == 100 and p.classes_per_client == 2 and p.train.participation == 0.1
    assert (p.train.rounds, p.train.lr, p.train.batch_size, p.dtype) == (100, 0.01, 10, "float32")


# --------------------------------------------------------------------------- what the page shows

from types import SimpleNamespace

from replearn.book import results



def _runs(n=3):
    return [SimpleNamespace(epochs=(1, 5), accuracy={"FedRep": torch.tensor([0.80 + 0.01 * s, 0.85 + 0.01 * s]),
                                                     "FedAvg": torch.tensor([0.30, 0.30 + 0.02 * s])})
            for s in range(n)]


def test_e_values_in_words():
    assert s08.e_values((3,)) == "E = 3"
    assert s08.e_values((1, 3)) == "E = 1 and E = 3"
    assert s08.e_values((1, 5, 10)) == "E = 1, 5 and 10"


def test_accuracies_glue_and_checks(glued):
    acc = s08.accuracies(_runs())
    assert list(acc) == ["FedRep", "FedAvg"] and len(acc["FedRep"]) == 2 and len(acc["FedRep"][0]) == 3
    shown, change = s08.glue_accuracies(acc, (1, 5), "ep")
    assert glued["ep-fedrep-5"] == shown["FedRep"][1].text and glued["ep-fedavg-change"] == change["FedAvg"].text
    # the change is E = 5 minus E = 1, in points: FedAvg gains 2 points per seed index, +2 on average
    assert change["FedAvg"].unit == "points" and change["FedAvg"].mean == pytest.approx(2.0)
    assert glued["ep-fedavg-change"].startswith("+2") and glued["ep-fedavg-change"].endswith(" points")
    table = s08.accuracy_table(shown, (1, 5), "caption")
    assert table.rows[0][0] == "1" and table.header == ["local epochs E", "FedRep (%)", "FedAvg (%)"]
    checks = s08.checks(acc, (1, 5), change)
    assert [c[0] for c in checks] == ["ep-v-every", "ep-v-nohurt", "ep-v-help", "ep-v-fedavg"]
    every, nohurt, help_, fedavg = checks
    assert every[3]["require"] and nohurt[3]["absence"] and every[2].outcome == "holds"
    assert "E = 1 and E = 5" in every[1] and "every E" not in every[1]
    # FedRep gains exactly 5 points at every seed: the interval has no width, so it separates
    assert help_[2] is change["FedRep"] and help_[2].outcome == "holds" and nohurt[2] is True
    # the verdict judges the very comparison the prose quotes: same number, same sign
    assert fedavg[2] is change["FedAvg"] and fedavg[3]["paper"] is None
    long = s08.checks(acc, (1, 5), change, prefix="ep-long", scale="long", require=False)
    assert long[0][0] == "ep-long-v-every" and not long[0][3]["require"] and long[3][3]["paper"].startswith("Fig. 5")
    assert all(c[3]["scale"] == "long" for c in long)


def test_a_drop_with_e_fails_the_no_drop_claim(glued):
    runs = [SimpleNamespace(epochs=(1, 5), accuracy={"FedRep": torch.tensor([0.80 + 0.01 * s, 0.70 + 0.01 * s]),
                                                     "FedAvg": torch.tensor([0.30, 0.30])}) for s in range(3)]
    acc = s08.accuracies(runs)
    _, change = s08.glue_accuracies(acc, (1, 5), "ep")
    checks = s08.checks(acc, (1, 5), change)
    assert checks[1][2] is False and checks[2][2].outcome == "opposite"


def test_long_run_helpers_and_figure(glued):
    import matplotlib.pyplot as plt

    long = results.load("5.8", "long", root=RESULTS)
    lacc = s08.long_accuracies(long)
    lep = list(long.settings["epochs"])
    assert len(lacc["FedAvg"]) == len(lep) and lacc["FedRep"][0] == long.values("accuracy", "FedRep", 0)
    table = s08.per_seed_table(long, "caption")
    assert len(table.rows) == len(long.seeds) and table.header[1] == f"FedRep, E = {lep[0]} (%)"
    assert table.rows[0][1] == f"{100 * long.values('accuracy', 'FedRep', 0)[0]:.2f}"
    fig = s08.plot_epochs(s08.accuracies(_runs()), (1, 5), 2, "title")
    ax = fig.axes[0]
    assert ax.get_ylabel() == "personalised test accuracy (%)" and ax.get_title() == "title"
    # accuracy, not error: FedRep's mean at E = 1 is 81%
    assert ax.lines[0].get_ydata()[0] == pytest.approx(81.0)
    # the legend sits below the axes, off the data
    legend = ax.get_legend()
    fig.canvas.draw()
    assert legend.get_window_extent().y1 < ax.get_window_extent().y0
    plt.close(fig)
