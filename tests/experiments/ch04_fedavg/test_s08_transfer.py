"""Book 4.8 driver (replearn.experiments.ch04_fedavg.s08_transfer) on tiny settings and the real CIFAR
subsets (skipped without them)."""

from dataclasses import replace

import pytest

from replearn.experiments.ch04_fedavg import s08_transfer as s08
from replearn.neural.transfer import PAPER_PRETRAIN, PretrainSettings

# 16 clients x 5 classes: the 80 pre-training classes left after holding out 20
TINY = dict(total_steps=4, n_pretrain=None, clients=16, classes_per_client=5,
            train=replace(PretrainSettings().train, batch_size=5, participation=0.1))


def test_paper_profile_follows_the_paper():
    d, p = s08.TransferSettings(), s08.TransferSettings.paper()
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
    with pytest.raises(ValueError, match="tau must be >= 2"):
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
