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
    assert torch.allclose(r.error("FedRep"), 1 - r.accuracy["FedRep"])
    assert r.train_sizes.tolist() == [20] * 5
    again = s08.run_epochs(s, cifar=fake_cifar())
    assert all(torch.equal(r.accuracy[m], again.accuracy[m]) for m in r.accuracy)


def test_bad_settings_raise_at_construction():
    s = s08.EpochSettings(epochs=(1, 2), **TINY)
    with pytest.raises(ValueError, match="distinct"):
        replace(s, epochs=(1, 1))
    with pytest.raises(ValueError, match="epochs"):
        replace(s, epochs=(0, 1))
    with pytest.raises(ValueError, match="unknown dataset"):
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
    long = s08.EpochSettings.long()  # near-paper: the paper profile with fewer rounds, values of E and seeds
    p = s08.EpochSettings.paper()
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


def test_accuracies_glue_and_checks(glued):
    acc = s08.accuracies(_runs())
    assert list(acc) == ["FedRep", "FedAvg"] and len(acc["FedRep"]) == 2 and len(acc["FedRep"][0]) == 3
    shown, change = s08.glue_accuracies(acc, (1, 5), "ep")
    assert glued["ep-fedrep-5"] == shown["FedRep"][1].text and glued["ep-fedavg-change"] == change["FedAvg"].text
    table = s08.accuracy_table(shown, (1, 5), "caption")
    assert table.rows[0][0] == "1" and table.header == ["E", "FedRep %", "FedAvg %"]
    assert s08.describe_change(change, (1, 5)).startswith("FedRep: E = 5 minus E = 1, paired over seeds: ")
    checks = s08.checks(acc, (1, 5))
    assert [c[0] for c in checks] == ["ep-v-every", "ep-v-nohurt", "ep-v-help", "ep-v-fedavg"]
    assert checks[0][3]["require"] and checks[1][3]["absence"] and bool(checks[0][2])


def test_long_run_helpers_and_figure(glued):
    import matplotlib.pyplot as plt

    long = results.load("5.8", "long", root=RESULTS)
    lacc = s08.long_accuracies(long)
    lep = list(long.settings["epochs"])
    assert len(lacc["FedAvg"]) == len(lep) and lacc["FedRep"][0] == long.values("accuracy", "FedRep", 0)
    assert [c[0] for c in s08.long_checks(lacc, lep)] == ["ep-long-v-every", "ep-long-v-nohurt", "ep-long-v-help",
                                                          "ep-long-v-fedavg"]
    acc = s08.accuracies(_runs())
    table = s08.paper_table(acc, lacc, (1, 5), lep)
    assert len(table.rows) == 4 and table.header[2] == "CPU default (3 seeds, E in (1, 5))"
    fig = s08.plot_epochs(acc, s08.EpochSettings())
    assert fig.axes[0].get_ylabel() == "local test error (%)"
    plt.close(fig)
