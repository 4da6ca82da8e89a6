"""Tests of replearn.experiments.fedrep_cifar (book 5.7-5.9) on tiny settings.

The drivers run on a small synthetic stand-in for CIFAR-10 (random uint8 images with class-
dependent mean colours, same layout as :class:`replearn.data.CifarData`) so that they take
seconds; one test checks the partition on the real subsets and is skipped without them."""

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from replearn import data as D
from replearn import neural
from replearn.experiments import fedrep_cifar as fc

HAVE_SUBSETS = (D.data_root() / "cifar10_subset.npz").is_file()


def fake_cifar(n_classes=10, train=40, test=20, seed=0):
    gen = torch.Generator().manual_seed(seed)
    colours = torch.randint(0, 256, (n_classes, 3, 1, 1), generator=gen)

    def images(per_class):
        y = torch.arange(n_classes).repeat_interleave(per_class)
        noise = torch.randint(-40, 41, (len(y), 3, 32, 32), generator=gen)
        return (colours[y] + noise).clamp(0, 255).to(torch.uint8), y

    xtr, ytr = images(train)
    xte, yte = images(test)
    return D.CifarData("cifar10", xtr, ytr, xte, yte, tuple(f"c{i}" for i in range(n_classes)), "subset",
                       Path("/fake"))


COMMON = dict(clients=5, classes_per_client=2, train_per_client=20, test_per_client=10, rounds=2,
              participation=0.4, head_epochs=1, lr=0.05, batch_size=10, local_steps=None, head_steps=None)


def test_make_federation_gives_S_classes_and_matching_test_sets():
    cifar = fake_cifar()
    fed = fc.make_federation(cifar, 5, 2, train_per_client=20, test_per_client=10, seed=0)
    cl = fed.clients
    assert cl.n_clients == 5 and fed.n_classes == 10
    assert cl.train_sizes.tolist() == [20] * 5 and cl.test_sizes.tolist() == [10] * 5
    for ytr, yte in zip(cl.y_train, cl.y_test):
        assert len(ytr.unique()) == 2 and set(yte.tolist()) <= set(ytr.tolist())
    sub = fc.make_federation(cifar, 4, 2, train_per_client=10, test_per_client=6, seed=0, classes=[7, 2])
    assert sub.n_classes == 2 and sub.classes == (7, 2)
    assert all(set(y.tolist()) == {0, 1} for y in sub.clients.y_train)
    with pytest.raises(ValueError, match="multiple"):
        fc.make_federation(cifar, 3, 2, train_per_client=3, test_per_client=5, seed=0)
    with pytest.raises(ValueError, match="classes_per_client"):
        fc.make_federation(cifar, 4, 3, train_per_client=10, test_per_client=5, seed=0, classes=[1, 2])


@pytest.mark.skipif(not HAVE_SUBSETS, reason=f"CIFAR-10 subset not found in {D.data_root()}; "
                                             "set REPLEARN_DATA to the folder holding cifar10_subset.npz")
def test_default_partition_on_the_real_subset():
    s = fc.TableSettings()
    cifar = D.load_cifar("cifar10")
    (name, n, S), = s.partitions
    fed = fc.make_federation(cifar, n, S, train_per_client=s.train_per_client, test_per_client=s.test_per_client,
                             seed=s.seed)
    assert fed.clients.train_sizes.tolist() == [s.train_per_client] * n
    assert all(len(y.unique()) == S for y in fed.clients.y_train)


def test_run_table_tiny():
    s = fc.TableSettings(partitions=(("cifar10", 5, 2),), ft_epochs=1, **COMMON)
    r = fc.run_table(s, cifar={"cifar10": fake_cifar()})
    p = s.partitions[0]
    assert set(r.accuracy[p]) == set(fc.TABLE_METHODS)
    for m in fc.TABLE_METHODS:
        assert 0 <= r.accuracy[p][m] <= 1
        assert r.client_accuracy[p][m].shape == (5,)
    assert r.curves[p]["FedRep"].shape == (s.rounds,)
    assert r.train_sizes[p].tolist() == [20] * 5
    # the paper's numbers cover every method and every paper partition
    assert set(fc.TableSettings.paper().partitions) == set(fc.PAPER_TABLE1)
    assert all(set(v) == set(fc.TABLE_METHODS) for v in fc.PAPER_TABLE1.values())


def test_run_table_is_deterministic_and_validates():
    s = fc.TableSettings(partitions=(("cifar10", 5, 2),), ft_epochs=1, **COMMON)
    cifar = {"cifar10": fake_cifar()}
    a = fc.run_table(s, cifar=cifar).accuracy
    b = fc.run_table(s, cifar=cifar).accuracy
    assert a == b
    with pytest.raises(ValueError, match="unknown dataset"):
        fc.run_table(replace(s, partitions=(("mnist", 5, 2),)), cifar=cifar)
    with pytest.raises(ValueError, match="participation"):
        fc.run_table(replace(s, participation=0.0), cifar=cifar)
    with pytest.raises(ValueError, match="partitions"):
        fc.run_table(replace(s, partitions=()), cifar=cifar)


def test_run_epochs_tiny():
    s = fc.EpochSettings(epochs=(1, 2), **COMMON)
    r = fc.run_epochs(s, cifar=fake_cifar())
    assert r.accuracy["FedRep"].shape == (2,) and r.accuracy["FedAvg"].shape == (2,)
    assert r.curves["FedAvg"].shape == (2, s.rounds)
    assert torch.allclose(r.error("FedRep"), 1 - r.accuracy["FedRep"])
    with pytest.raises(ValueError, match="distinct"):
        fc.run_epochs(replace(s, epochs=(1, 1)), cifar=fake_cifar())
    assert fc.EpochSettings.paper().clients == 100 and fc.EpochSettings.paper().participation == 0.1


def test_fit_heads_one_epoch_equals_finetune():
    cifar = fake_cifar()
    fed = fc.make_federation(cifar, 5, 2, train_per_client=20, test_per_client=10, seed=1)
    model = fc._model(fc.TableSettings(), "cifar10", 10, 0, "cpu")
    state = {n: p.detach() for n, p in model.named_parameters()}
    a = fc.fit_heads(model, fed.clients, state, epochs=1, lr=0.05, momentum=0.5, batch_size=10, seed=3)
    b = neural.finetune(model, fed.clients, state=state, epochs=1, part="head", lr=0.05, momentum=0.5,
                        batch_size=10, seed=3)
    for n in b.local:
        assert torch.equal(a.local[n], b.local[n])
    assert a.final.average == b.final.average
    # the body is never touched
    c = fc.fit_heads(model, fed.clients, state, epochs=3, lr=0.05, momentum=0.5, batch_size=10, seed=3)
    assert c.test_accuracy.shape == (3,) and not torch.isnan(c.test_accuracy).any()
    assert set(c.local) == {"head.weight", "head.bias"}


def test_run_new_clients_tiny():
    s = fc.NewClientSettings(n_new=2, new_clients=2, new_train=10, new_test=6, head_epochs_new=3,
                             **{**COMMON, "clients": 4})
    r = fc.run_new_clients(s, cifar=fake_cifar())
    assert len(r.new_classes) == 2 and len(r.train_classes) == 8
    assert not set(r.new_classes) & set(r.train_classes)
    for m in fc.NEW_METHODS:
        assert r.accuracy[m].shape == (3,) and r.client_accuracy[m].shape == (2,)
    assert r.epochs.tolist() == [1, 2, 3]
    assert set(r.trained) == {"FedRep", "FedAvg"}
    with pytest.raises(ValueError, match="n_new"):
        fc.run_new_clients(replace(s, n_new=10), cifar=fake_cifar())
    with pytest.raises(ValueError, match="exceeds"):
        fc.run_new_clients(replace(s, new_classes_per_client=3), cifar=fake_cifar())


def test_paper_reference():
    assert fc.paper_reference(("cifar10", 10, 2))[0] == ("cifar10", 100, 2)
    assert fc.paper_reference(("cifar10", 1000, 2))[0] == ("cifar10", 1000, 2)
    assert fc.paper_reference(("cifar100", 20, 20))[1]["FedRep"] == 56.10
    with pytest.raises(ValueError, match="no column"):
        fc.paper_reference(("cifar10", 10, 3))


def test_cpu_defaults_of_the_sweeps_leave_the_table_alone():
    # 5.8 and 5.9 run at a larger CPU scale than Table 1 (5.7); their defaults must be valid
    e, n, t = fc.EpochSettings(), fc.NewClientSettings(), fc.TableSettings()
    assert t.train_per_client >= 200 and t.rounds * t.participation >= 16  # 16 rounds per client
    assert e.train_per_client * e.clients % 10 == 0 and len(set(e.epochs)) == len(e.epochs)
    assert n.train_per_client * n.clients % (10 - n.n_new) == 0 and n.new_train * n.new_clients % n.n_new == 0
    e._check_common(), n._check_common()


def test_cpu_profile_trains_the_narrow_net_in_float64_and_paper_profile_restores_the_paper():
    t, p = fc.TableSettings(), fc.TableSettings.paper()
    m = fc._model(t, "cifar10", 10, 0, "cpu")
    assert m.head.weight.dtype == torch.float64 and m.body.conv1.out_channels == 16
    assert len(t.seeds) >= 3
    mp = fc._model(p, "cifar10", 10, 0, "cpu")
    assert mp.head.weight.dtype == torch.float32 and mp.body.conv1.out_channels == 64
    assert (p.batch_size, p.lr, p.local_steps, p.head_steps, p.head_epochs) == (10, 0.01, None, None, 10)
    with pytest.raises(ValueError, match="dtype"):
        replace(t, dtype="float16")._check_common()
    with pytest.raises(ValueError, match="seeds"):
        replace(t, seeds=())._check_common()


def test_steps_settings_reach_the_train_config():
    cfg = fc.TableSettings(local_steps=3, head_steps=7).train_config()
    assert (cfg.local_steps, cfg.head_steps) == (3, 7)
    cfg = fc.EpochSettings().train_config(head_epochs=4)
    assert cfg.local_steps is None and cfg.head_epochs == 4
