"""Book 4.9 driver (replearn.experiments.ch04_fedavg.s09_cka) on tiny settings and the real CIFAR
subsets (skipped without them)."""

from dataclasses import replace

import pytest

from replearn.experiments.ch04_fedavg import s09_cka as s09
from replearn.neural.transfer import PAPER_PRETRAIN, PretrainSettings

# 16 clients x 5 classes: the 80 pre-training classes left after holding out 20
TINY = dict(total_steps=4, n_pretrain=None, clients=16, classes_per_client=5,
            train=replace(PretrainSettings().train, batch_size=5, participation=0.1))


def test_paper_profile_follows_the_paper():
    d, p = s09.CKASettings(), s09.CKASettings.paper()
    assert (p.model, p.classes_per_client, p.tau) == ("fedavg_cnn", 5, 50)
    assert (p.train.lr, p.train.momentum, p.train.batch_size, p.dtype) == (0.01, 0.5, 10, "float32")
    assert p.train == PAPER_PRETRAIN["train"] and p.total_steps % p.tau == 0
    assert d.dtype == "float64" and len(d.seeds) >= 3


def test_bad_settings_raise_at_construction():
    with pytest.raises(ValueError, match="ft_clients"):
        s09.CKASettings(ft_clients=0)
    with pytest.raises(ValueError, match="probe_per_class"):
        s09.CKASettings(probe_per_class=1)
    with pytest.raises(ValueError, match="tau must be >= 2"):
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
