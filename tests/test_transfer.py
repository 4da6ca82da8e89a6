"""replearn.experiments.ch04_fedavg.cifar_transfer: matched FedAvg / D-SGD training, CIFAR-100 pre-training and new clients
(the library side of book 4.7-4.9; the section drivers are tested in tests/experiments/ch04_fedavg)."""

from dataclasses import replace

import pytest
import torch
from settings_checks import check_composes_train, check_fields_type_checked, settings_with_train

from replearn.neural import data as D
from replearn.experiments.ch04_fedavg import cifar_transfer as T
from replearn.experiments.ch04_fedavg import s07_feature_similarity as s07
from replearn.experiments.ch04_fedavg import s08_transfer as s08
from replearn.experiments.ch04_fedavg import s09_cka as s09
from replearn.neural import TrainConfig
from replearn.settings import differences


def test_method_names_and_dtypes():
    assert T.DSGD == 1
    assert T.method_name(1) == "D-SGD" and T.method_name(5) == "FedAvg, τ = 5"
    assert T.DTYPES == {"float32": torch.float32, "float64": torch.float64}


def test_float64_model_takes_float32_images():
    s = T.MatchedTraining()
    m = s.make(10, 0, "cpu")
    assert m.head.weight.dtype == torch.float64 and m.body.conv1.out_channels == 16
    out = m(torch.zeros(2, 3, 32, 32))
    assert out.dtype == torch.float64 and out.shape == (2, 10)
    with pytest.raises(ValueError, match="dtype"):
        T.MatchedTraining(dtype="half")


def test_config_of_tau_matches_the_local_updates():
    train = TrainConfig(lr=0.02, momentum=0.5, batch_size=5, participation=0.1)
    s = T.MatchedTraining(total_steps=12, train=train, seed=3)
    for tau in (1, 2, 4, 12):
        cfg = s.config(tau)
        assert cfg.rounds == s.total_steps // tau and cfg.rounds * tau == s.total_steps
        assert (cfg.local_steps, cfg.eval_every, cfg.last_rounds, cfg.seed) == (tau, cfg.rounds, 1, 3)
        assert (cfg.lr, cfg.momentum, cfg.batch_size, cfg.participation) == (0.02, 0.5, 5, 0.1)
    assert s.train == train                     # config() leaves the composed TrainConfig alone
    s.check_taus((1, 3, 4))
    with pytest.raises(ValueError, match="multiple of every tau"):
        s.check_taus((1, 5))
    with pytest.raises(ValueError, match="tau"):
        s.check_taus((0,))


def test_matched_training_validates_at_construction():
    with pytest.raises(ValueError, match="train must be a replearn.neural.TrainConfig"):
        T.MatchedTraining(train=dict(lr=0.02))
    with pytest.raises(ValueError, match="participation"):
        T.MatchedTraining(train=replace(T.MatchedTraining().train, participation=0.0))
    with pytest.raises(ValueError, match="total_steps"):
        T.MatchedTraining(total_steps=0)
    with pytest.raises(ValueError, match="clients"):
        T.MatchedTraining(clients=0)
    with pytest.raises(ValueError, match="seeds"):
        T.MatchedTraining(seeds=())


def test_pretrain_settings_cpu_and_paper_profiles():
    d, p = T.PretrainSettings(), T.PretrainSettings.profile("paper")
    assert d.tau == 10 and p.tau == 50
    assert d.dtype == "float64" and len(d.seeds) >= 3 and d.total_steps % d.tau == 0
    assert p == T.PretrainSettings(**T.PAPER_PRETRAIN, **{k: v for k, (v, _) in T.PRETRAIN_STATED.items()})
    assert (p.model, p.channels, p.hidden, p.clients, p.n_pretrain, p.classes_per_client) == \
        ("fedavg_cnn", (32, 64, 128), (256, 128), 80, None, 5)
    assert (p.train.lr, p.train.momentum, p.train.batch_size, p.train.participation) == (0.01, 0.5, 10, 0.1)
    assert (p.total_steps, p.dtype, p.ft_lr, p.ft_batch_size) == (125_000, "float32", 0.01, 10)
    assert p.total_steps % p.tau == 0
    long = T.PretrainSettings.profile("long")
    # near-paper: the paper's network, clients and optimiser; fewer local updates, subset data, 2 seeds
    assert long.total_steps > d.total_steps and len(long.seeds) >= 2 and not long.full_data
    assert long.total_steps < p.total_steps
    assert (long.model, long.channels, long.hidden, long.clients, long.train, long.dtype) == \
        (p.model, p.channels, p.hidden, p.clients, p.train, p.dtype)


def test_pretrain_settings_validate_at_construction():
    with pytest.raises(ValueError, match=r"tau \(.*tau = 1 is D-SGD\) must be an integer >= 2"):
        T.PretrainSettings(tau=1)
    with pytest.raises(ValueError, match="multiple of every tau"):
        T.PretrainSettings(total_steps=15, tau=10)
    with pytest.raises(ValueError, match="n_pretrain"):
        T.PretrainSettings(n_pretrain=1)
    with pytest.raises(ValueError, match="ft_lr"):
        T.PretrainSettings(ft_lr=0.0)
    with pytest.raises(ValueError, match="ft_epochs"):
        T.PretrainSettings(ft_epochs=0)


def test_probe_set_takes_the_first_images_of_each_class():
    y = torch.tensor([2, 0, 1, 0, 2, 1, 1, 0, 2])
    idx, py = T.probe_set(torch.zeros(len(y)), y, 2, 3)
    assert idx.tolist() == [1, 3, 2, 5, 0, 4] and py.tolist() == [0, 0, 1, 1, 2, 2]
    with pytest.raises(ValueError, match="fewer than 4 test images"):
        T.probe_set(torch.zeros(len(y)), y, 4, 3)


def test_n_pretrain_limits_the_pretraining_classes(cifar100):
    s = T.PretrainSettings(total_steps=2, tau=2, clients=10, classes_per_client=2, n_pretrain=10,
                           train=replace(T.PretrainSettings().train, batch_size=5, participation=0.1))
    pre = T.pretrain(s, cifar100)
    assert len(pre.train_classes) == 10 and len(pre.new_classes) == s.n_new
    assert not set(pre.train_classes.tolist()) & set(pre.new_classes.tolist())
    assert set(pre.states) == {T.DSGD, s.tau} and set(pre.client_accuracy) == {T.DSGD, s.tau}
    assert pre.states[1]["head.weight"].shape[0] == 10
    # n_pretrain is checked against the data (80 classes are left after holding out 20)
    with pytest.raises(ValueError, match="n_pretrain"):
        T.pretrain(T.PretrainSettings(n_pretrain=81), cifar100)


def test_pretraining_is_shared_by_data_content_not_object(cifar100):
    # 4.8 and 4.9 load their data separately (scripts/run_results.py): a copy of the same images shares
    # the pre-training, other images or other settings do not
    from dataclasses import fields

    s = T.PretrainSettings(total_steps=2, tau=2, clients=10, classes_per_client=2, n_pretrain=10,
                           train=replace(T.PretrainSettings().train, batch_size=5, participation=0.1))
    first = T.pretrain(s, cifar100)
    as_48 = s08.TransferSettings(**{f.name: getattr(s, f.name) for f in fields(T.PretrainSettings)})
    assert T.pretrain(as_48, replace(cifar100, x_train=cifar100.x_train.clone())) is first
    other = replace(cifar100, x_train=cifar100.x_train.flip(0))
    assert T.pretrain(s, other) is not first
    assert T.pretrain(replace(s, seed=1), cifar100) is not first
    assert T.pretrain(s, cifar100) is first


def test_new_clients_pool_any_count(cifar100):
    # 5 clients x 5 classes of 20 new classes: not a multiple of 20, still 5 clients of 5 classes each
    _, new = D.class_split(100, 20, seed=0)
    cl = T.new_clients(cifar100, new, 5, 5, 10, seed=1)
    assert cl.n_clients == 5  # the authors' split: 5 shards each, a class possibly twice
    assert all(1 <= len(torch.unique(y)) <= 5 and int(y.max()) < 20 for y in cl.y_train)
    cl = T.new_clients(cifar100, new, 5, 5, 10, seed=1, split="disjoint")
    assert all(len(torch.unique(y)) == 5 and int(y.max()) < 20 for y in cl.y_train)


def test_new_model_keeps_the_body_and_draws_a_fresh_head():
    s = T.MatchedTraining()
    state = {n: p.detach() for n, p in s.make(10, 0, "cpu").named_parameters()}
    model, full = T.new_model(s, state, 4, 1, "cpu")
    assert full["head.weight"].shape[0] == 4
    assert all(torch.equal(full[n], state[n]) for n in full if not n.startswith("head."))
    assert set(full) == {n for n, _ in model.named_parameters()}



# --------------------------------------------------------------------------- the settings classes

MATCHED = (T.MatchedTraining, T.PretrainSettings, s07.SimilaritySettings, s08.TransferSettings,
           s09.CKASettings)


def test_every_matched_training_settings_class_is_listed():
    found = {cls for cls in settings_with_train() if issubclass(cls, T.MatchedTraining)}
    assert found == set(MATCHED)


@pytest.mark.parametrize("cls", MATCHED, ids=lambda c: c.__name__)
def test_settings_hold_a_TrainConfig_and_check_every_field(cls):
    check_composes_train(cls)
    check_fields_type_checked(cls)
    if cls is not T.MatchedTraining:                    # the base has no paper profile of its own
        assert differences(cls), f"{cls.__name__}: the paper profile equals the CPU default"
