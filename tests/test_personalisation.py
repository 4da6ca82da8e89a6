"""replearn.experiments.ch05_fedrep.cifar_federation: CIFAR federations, their settings and new clients' heads (the library
side of book 5.7-5.9; the section drivers are tested in tests/experiments/ch05_fedrep).

Most tests run on the small synthetic stand-in of :func:`cifar_fixtures.fake_cifar`; the partition
of the default settings is checked on the real CIFAR-10 subset (skipped without it)."""

from dataclasses import replace

import pytest
import torch
from cifar_fixtures import fake_cifar
from settings_checks import check_composes_train, check_fields_type_checked, settings_with_train

from replearn.experiments.ch05_fedrep import cifar_federation as P
from replearn.backend import derive_seed
from replearn.experiments.ch05_fedrep import s07_cifar_personalisation as s57
from replearn.experiments.ch05_fedrep import s08_local_epochs as s58
from replearn.experiments.ch05_fedrep import s09_new_clients_cifar as s59
from replearn.settings import differences
from replearn.experiments.ch04_fedavg.cifar_transfer import MatchedTraining
from engine_calls import finetune


def test_make_federation_gives_S_classes_and_matching_test_sets():
    cifar = fake_cifar()
    fed = P.make_federation(cifar, 5, 2, train_per_client=20, test_per_client=10, seed=0)
    cl = fed.clients
    assert cl.n_clients == 5 and fed.n_classes == 10 and fed.classes == tuple(range(10))
    assert cl.train_sizes.tolist() == [20] * 5 and cl.test_sizes.tolist() == [10] * 5
    for ytr, yte in zip(cl.y_train, cl.y_test):  # the authors' split: two shards, of one or two classes
        assert len(ytr.unique()) in (1, 2) and set(yte.tolist()) <= set(ytr.tolist())
    sub = P.make_federation(cifar, 4, 2, train_per_client=10, test_per_client=6, seed=0, classes=[7, 2],
                            split="disjoint")
    assert sub.n_classes == 2 and sub.classes == (7, 2)
    assert all(set(y.tolist()) == {0, 1} for y in sub.clients.y_train)
    with pytest.raises(ValueError, match="multiple"):
        P.make_federation(cifar, 3, 2, train_per_client=3, test_per_client=5, seed=0)
    with pytest.raises(ValueError, match="classes_per_client"):
        P.make_federation(cifar, 4, 3, train_per_client=10, test_per_client=5, seed=0, classes=[1, 2])
    with pytest.raises(ValueError, match="training images, need"):
        P.make_federation(cifar, 10, 2, train_per_client=50, test_per_client=5, seed=0)


def test_default_partition_on_the_real_subset(cifar10):
    s = P.FederationSettings()
    fed = P.make_federation(cifar10, s.clients, s.classes_per_client, train_per_client=s.train_per_client,
                            test_per_client=s.test_per_client, seed=s.seed)
    assert fed.clients.train_sizes.tolist() == [s.train_per_client] * s.clients
    assert fed.clients.test_sizes.tolist() == [s.test_per_client] * s.clients
    assert all(len(y.unique()) == s.classes_per_client for y in fed.clients.y_train)


def test_fit_heads_one_epoch_equals_finetune():
    cifar = fake_cifar()
    fed = P.make_federation(cifar, 5, 2, train_per_client=20, test_per_client=10, seed=1)
    model = P.FederationSettings().network("cifar10", 10, 0, "cpu")
    state = {n: p.detach() for n, p in model.named_parameters()}
    a = P.fit_heads(model, fed.clients, state, epochs=1, lr=0.05, momentum=0.5, batch_size=10, seed=3)
    b = finetune(model, fed.clients, state=state, epochs=1, part="head", lr=0.05, momentum=0.5,
                        batch_size=10, seed=3)
    for n in b.local:
        assert torch.equal(a.local[n], b.local[n])
    assert a.final.average == b.final.average
    # the body is never touched
    c = P.fit_heads(model, fed.clients, state, epochs=3, lr=0.05, momentum=0.5, batch_size=10, seed=3)
    assert c.test_accuracy.shape == (3,) and not torch.isnan(c.test_accuracy).any()
    assert set(c.local) == {"head.weight", "head.bias"}
    with pytest.raises(ValueError, match="epochs"):
        P.fit_heads(model, fed.clients, state, epochs=0, lr=0.05, momentum=0.5, batch_size=10, seed=3)


def test_network_cpu_profile_is_the_narrow_net_in_float64_and_paper_profile_the_authors():
    s, p = P.FederationSettings(), P.FederationSettings.profile("paper")
    m = s.network("cifar10", 10, 0, "cpu")
    assert m.head.weight.dtype == torch.float64 and m.body.conv1.out_channels == 16
    assert m.body.conv2.out_channels == 32
    assert s.network("cifar100", 20, 0, "cpu").body.conv1.out_channels == 16     # narrow for both datasets
    assert len(s.seeds) >= 3
    mp = p.network("cifar10", 10, 0, "cpu")
    assert mp.head.weight.dtype == torch.float32 and mp.body.conv1.out_channels == 64
    assert mp.body.conv2.out_channels == 64
    # the authors' widths follow the dataset's name, not the number of classes of a restricted label space
    assert p.network("cifar100", 5, 0, "cpu").body.conv2.out_channels == 128
    assert p.network("cifar10", 2, 0, "cpu").body.conv2.out_channels == 64
    # the network is drawn from its seed
    again = s.network("cifar10", 10, 0, "cpu")
    assert all(torch.equal(a, b) for a, b in zip(m.parameters(), again.parameters()))


def test_paper_optimiser():
    p = P.FederationSettings.profile("paper")
    t = p.train
    assert (t.rounds, t.participation, t.lr, t.momentum, t.batch_size) == (100, 0.1, 0.01, 0.5, 10)
    assert (t.local_epochs, t.head_epochs, t.local_steps, t.head_steps) == (1, 10, None, None)
    assert (t.eval_every, t.last_rounds) == (1, 10)
    assert (p.train_per_client, p.test_per_client, p.variant, p.dtype) == (None, None, None, "float32")


def test_config_overrides_and_derived_seed():
    s = P.FederationSettings(seed=5)
    cfg = s.config()
    assert cfg == replace(s.train, seed=derive_seed(5, 4))
    steps = P.FederationSettings(train=replace(P.FederationSettings().train, local_steps=3, head_steps=7))
    cfg = steps.config()
    assert (cfg.local_steps, cfg.head_steps) == (3, 7)
    cfg = s.config(head_epochs=4, local_steps=None)
    assert cfg.head_epochs == 4 and cfg.local_steps is None and cfg.seed == derive_seed(5, 4)
    assert s.train.head_epochs == P.FederationSettings().train.head_epochs     # train is left alone
    with pytest.raises(ValueError, match="participation"):
        s.config(participation=0.0)


def test_federation_settings_validate_at_construction():
    with pytest.raises(ValueError, match="participation"):
        P.FederationSettings(train=replace(P.FederationSettings().train, participation=0.0))
    with pytest.raises(ValueError, match="train must be a replearn.neural.TrainConfig"):
        P.FederationSettings(train=None)
    with pytest.raises(ValueError, match="dtype"):
        P.FederationSettings(dtype="float16")
    with pytest.raises(ValueError, match="seeds"):
        P.FederationSettings(seeds=())
    with pytest.raises(ValueError, match="train_per_client"):
        P.FederationSettings(train_per_client=0)
    with pytest.raises(ValueError, match="clients"):
        P.FederationSettings(clients=0)


# --------------------------------------------------------------------------- the settings classes

FEDERATION = (P.FederationSettings, s57.TableSettings, s58.EpochSettings, s59.NewClientSettings)


def test_every_federation_settings_class_is_listed():
    found = {cls for cls in settings_with_train() if issubclass(cls, P.FederationSettings)}
    assert found == set(FEDERATION)


def test_every_settings_class_holding_a_TrainConfig_is_a_cifar_one():
    assert all(issubclass(cls, (P.FederationSettings, MatchedTraining)) for cls in settings_with_train())


@pytest.mark.parametrize("cls", FEDERATION, ids=lambda c: c.__name__)
def test_settings_hold_a_TrainConfig_and_check_every_field(cls):
    check_composes_train(cls)
    check_fields_type_checked(cls)
    if cls is not P.FederationSettings:                 # the base has no paper profile of its own
        assert differences(cls), f"{cls.__name__}: the paper profile equals the CPU default"
