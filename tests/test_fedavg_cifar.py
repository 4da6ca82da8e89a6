import pytest
import torch

from replearn import data as D
from replearn.experiments import fedavg_cifar as fc


def _load(name):
    try:
        return D.load_cifar(name)
    except FileNotFoundError:
        pytest.skip(f"{name} data not found (set REPLEARN_DATA to the folder holding the CIFAR subsets)")


@pytest.fixture(scope="module")
def cifar10():
    return _load("cifar10")


@pytest.fixture(scope="module")
def cifar100():
    return _load("cifar100")


TINY = dict(total_steps=4, batch_size=5, participation=0.1)
PRE = dict(TINY, n_pretrain=None, clients=16, classes_per_client=5)   # 80 pre-training classes


def test_paper_profiles_follow_the_paper():
    s = fc.SimilaritySettings.paper()
    assert (s.clients, s.alpha, s.taus, s.model) == (100, 0.6, (1, 5, 10, 50), "fedavg_cnn")
    t = fc.TransferSettings.paper()
    assert (t.clients, t.n_new, t.tau, t.ft_epochs, t.trials, t.new_clients) == (80, 20, 50, 10, 5, 5)
    assert t.total_steps % t.tau == 0
    assert fc.PretrainSettings.paper().tau == 50 and fc.PretrainSettings().tau == 10
    for cls in (fc.SimilaritySettings, fc.TransferSettings, fc.CKASettings):
        p = cls.paper()
        assert (p.lr, p.momentum, p.batch_size, p.dtype) == (0.01, 0.5, 10, "float32")
        assert cls().dtype == "float64" and len(cls().seeds) >= 3
    c = fc.CKASettings.paper()
    assert (c.model, c.classes_per_client, c.tau) == ("fedavg_cnn", 5, 50)
    assert fc.method_name(1) == "D-SGD" and fc.method_name(5) == "FedAvg, τ = 5"


def test_bad_settings_raise():
    with pytest.raises(ValueError, match="multiple of every tau"):
        fc.SimilaritySettings(total_steps=10, taus=(1, 3))._check_common((1, 3))
    with pytest.raises(ValueError, match="participation"):
        fc.SimilaritySettings(participation=0.0)._check_common((1,))
    with pytest.raises(ValueError, match="tau must be >= 2"):
        fc.PretrainSettings(tau=1)._check_pretrain()
    with pytest.raises(ValueError, match="samples"):
        fc.run_transfer(fc.TransferSettings(samples=()))
    with pytest.raises(ValueError, match="taus must be distinct"):
        fc.run_similarity(fc.SimilaritySettings(taus=(1, 1)))


def test_seed_statistics():
    m, sd = fc.mean_sd([0.5, 0.6, 0.7])
    assert m == pytest.approx(0.6) and sd == pytest.approx(0.1)
    assert fc.mean_sd([0.3]) == (0.3, 0.0)
    assert fc.decimals(0.023) == 2 and fc.decimals(0.004) == 3 and fc.decimals(0.3) == 1 and fc.decimals(2.6) == 0
    assert fc.decimals(0.0) == 3 and fc.decimals(1e-6) == 3
    assert fc.pm([0.5, 0.6, 0.7]) == "0.6 ± 0.1"
    assert fc.pm([0.51, 0.52, 0.56], scale=100) == "53 ± 3"
    assert fc.separated([0.8, 0.81, 0.82], [0.5, 0.52, 0.51])
    assert not fc.separated([0.8, 0.6, 0.7], [0.65, 0.55, 0.6])
    with pytest.raises(ValueError, match="finite"):
        fc.mean_sd([float("nan")])
    with pytest.raises(ValueError, match="seeds"):
        fc.over_seeds(lambda s: s, fc.SimilaritySettings(seeds=(1, 1)))
    seen = fc.over_seeds(lambda s, x: (s.seed, x), fc.SimilaritySettings(seeds=(4, 7)), x=1)
    assert seen == [(4, 1), (7, 1)]


def test_float64_model_takes_float32_images():
    s = fc.SimilaritySettings()
    m = s.make(10, 0, "cpu")
    assert m.head.weight.dtype == torch.float64 and m.body.conv1.out_channels == 16
    out = m(torch.zeros(2, 3, 32, 32))
    assert out.dtype == torch.float64 and out.shape == (2, 10)
    with pytest.raises(ValueError, match="dtype"):
        fc.SimilaritySettings(dtype="half")._check_common((1,))


def test_n_pretrain_limits_the_pretraining_classes(cifar100):
    s = fc.PretrainSettings(total_steps=2, tau=2, batch_size=5, participation=0.1, clients=10,
                            classes_per_client=2, n_pretrain=10)
    pre = fc.pretrain(s, cifar100)
    assert len(pre.train_classes) == 10 and len(pre.new_classes) == s.n_new
    assert not set(pre.train_classes.tolist()) & set(pre.new_classes.tolist())
    assert pre.states[1]["head.weight"].shape[0] == 10
    with pytest.raises(ValueError, match="n_pretrain"):
        fc.pretrain(fc.PretrainSettings(n_pretrain=81), cifar100)


def test_similarity_tiny(cifar10):
    s = fc.SimilaritySettings(**TINY, taus=(1, 2), probe_per_class=5, test_per_client=5)
    r = fc.run_similarity(s, cifar=cifar10)
    assert r.taus == (1, 2) and "CIFAR-10" in r.data
    for tau in r.taus:
        M = r.matrices[tau]
        assert M.shape == (10, 10) and torch.allclose(M, M.T)
        assert -1 <= float(M.min()) and float(M.max()) <= 1 + 1e-9
        assert r.gap[tau] == pytest.approx(r.intra(tau) - r.inter(tau))
        assert 0 <= r.probe_accuracy[tau] <= 1
    assert int(r.client_sizes.sum()) == len(cifar10.y_train)
    again = fc.run_similarity(s, cifar=cifar10)
    assert all(torch.equal(r.matrices[t], again.matrices[t]) for t in r.taus)


def test_transfer_tiny(cifar10, cifar100):
    s = fc.TransferSettings(**PRE, tau=2, samples=(5, 10), cifar10_samples=(10,), ft_epochs=1,
                            new_clients=2, test_per_client=10)
    r = fc.run_transfer(s, cifar10=cifar10, cifar100=cifar100)
    assert r.accuracy[("cifar100-new", 1)].shape == (2, 2)
    assert r.accuracy[("cifar10", 2)].shape == (1, 2)
    assert set(r.pretrain_accuracy) == {1, 2}
    for v in r.accuracy.values():
        assert bool(((v >= 0) & (v <= 1)).all())


def test_new_clients_pool_any_count(cifar100):
    # 5 clients x 5 classes of 20 new classes: not a multiple of 20, still 5 clients of 5 classes each
    _, new = D.class_split(100, 20, seed=0)
    cl = fc.new_clients(cifar100, new, 5, 5, 10, seed=1)
    assert cl.n_clients == 5
    assert all(len(torch.unique(y)) == 5 and int(y.max()) < 20 for y in cl.y_train)


def test_cka_tiny(cifar10, cifar100):
    s = fc.CKASettings(**PRE, tau=2, ft_clients=2, ft_samples=10, ft_epochs=1, probe_per_class=5)
    r = fc.run_cka(s, cifar10=cifar10, cifar100=cifar100)
    assert r.layers == ("body.relu1", "body.relu2", "body.relu_fc1", "body.relu_fc2")
    for tau in (1, 2):
        assert r.before_after[tau].shape == (2, 4)
        assert bool((r.before_after[tau] <= 1 + 1e-6).all()) and bool((r.before_after[tau] > 0).all())
    assert r.between.shape == (4,)
