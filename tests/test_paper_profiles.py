"""Every CIFAR section's the paper profile profile runs end to end as a tiny slice on the CPU.

A slice is the paper profile with only its sizes shrunk (clients, rounds or local updates,
epochs, trials, probe and test images); everything else (the network family and widths,
float32, the optimiser, participation, the partition scheme, the number of methods and of
tau or E values) is the paper's, and the run goes through the section's driver. The data are
synthetic images labelled as the full official datasets (``source = "full"``), with enough
images per class for the slice, so the data requirements of the paper profiles are exercised
too; that the same profiles stop on the offline subsets is tested below.
"""

from dataclasses import replace

import pytest
import torch
from cifar_fixtures import fake_cifar

from replearn.neural import data as D
from replearn.book import scales
from replearn.neural import algorithms
from replearn.experiments.ch04_fedavg import s07_feature_similarity as s47
from replearn.experiments.ch04_fedavg import s08_transfer as s48
from replearn.experiments.ch04_fedavg import s09_cka as s49
from replearn.experiments.ch05_fedrep import s07_cifar_personalisation as s57
from replearn.experiments.ch05_fedrep import s08_local_epochs as s58
from replearn.experiments.ch05_fedrep import s09_new_clients_cifar as s59

pytestmark = pytest.mark.usefixtures("one_thread")


def fake(name: str, n_classes: int, train: int, test: int, source: str = "full", seed: int = 0) -> D.CifarData:
    """Synthetic images labelled as ``name`` from ``source`` (:func:`cifar_fixtures.fake_cifar`)."""
    return fake_cifar(n_classes, train, test, seed, name=name, source=source)


@pytest.fixture(scope="module")
def c10():
    return fake("cifar10", 10, 30, 12)


@pytest.fixture(scope="module")
def c100():
    return fake("cifar100", 100, 10, 6, seed=1)


def shrink_train(s, **train):
    return replace(s, train=replace(s.train, **train))


def slice_47():
    s = s47.SimilaritySettings.profile("paper")
    # D-SGD and the paper's largest tau (the others run the same code)
    return replace(s, clients=10, total_steps=50, taus=(1, 50), probe_per_class=5, test_per_client=5, seeds=(0,))


def slice_pretrain(cls):
    # 16 clients x 5 classes = 80 shards: one per pre-training class (the paper: 80 x 5, five per class)
    return replace(cls.profile("paper"), clients=16, total_steps=50, ft_epochs=1, seeds=(0,))


def slice_48():
    return replace(slice_pretrain(s48.TransferSettings), samples=(5, 10), cifar10_samples=(10,), trials=1,
                   new_clients=2, test_per_client=5)


def slice_49():
    return replace(slice_pretrain(s49.CKASettings), ft_clients=2, ft_samples=10, probe_per_class=3)


def slice_57():
    s = s57.TableSettings.profile("paper")
    # one column of Table 1 with fewer clients (the paper: 100; CIFAR-100's network runs in 5.9's slice)
    parts = (("cifar10", 5, 2),)
    return shrink_train(replace(s, partitions=parts, ft_epochs=1, seeds=(0,)), rounds=1, head_epochs=1)


def slice_58():
    s = s58.EpochSettings.profile("paper")
    return shrink_train(replace(s, clients=10, epochs=s.epochs[:2], seeds=(0,)), rounds=2)


def slice_59():
    s = s59.NewClientSettings.profile("paper")
    return shrink_train(replace(s, clients=16, new_clients=4, new_train=20, new_test=5, head_epochs_new=2,
                                seeds=(0,)), rounds=2, head_epochs=1)


def test_slices_keep_the_paper_profiles_structure():
    """A slice changes sizes only: the network, dtype, optimiser and participation stay the paper's."""
    for s, paper in ((slice_47(), s47.SimilaritySettings.profile("paper")), (slice_48(), s48.TransferSettings.profile("paper")),
                     (slice_49(), s49.CKASettings.profile("paper"))):
        assert (s.model, s.channels, s.hidden, s.dtype, s.full_data) == \
            (paper.model, paper.channels, paper.hidden, paper.dtype, True)
        assert (s.train.lr, s.train.momentum, s.train.batch_size, s.train.participation) == \
            (paper.train.lr, paper.train.momentum, paper.train.batch_size, paper.train.participation)
    for s, paper in ((slice_57(), s57.TableSettings.profile("paper")), (slice_58(), s58.EpochSettings.profile("paper")),
                     (slice_59(), s59.NewClientSettings.profile("paper"))):
        assert (s.variant, s.dtype, s.full_data, s.train_per_client, s.test_per_client) == \
            (paper.variant, paper.dtype, True, None, None)
        assert (s.train.lr, s.train.participation, s.train.local_epochs) == \
            (paper.train.lr, paper.train.participation, paper.train.local_epochs)
    assert set(slice_57().partitions[0][1:]) <= {2, 5}


def test_paper_47_slice_runs(c10):
    r = s47.run_similarity(slice_47(), cifar=c10)
    assert set(r.taus) == {1, 50} and set(s47.SimilaritySettings.profile("paper").taus) == {1, 5, 10, 50}
    assert all(torch.isfinite(r.matrices[t]).all() and r.matrices[t].shape == (10, 10) for t in r.taus)


def test_paper_48_slice_runs(c10, c100):
    r = s48.run_transfer(slice_48(), cifar10=c10, cifar100=c100)
    assert r.tau == 50 and set(r.accuracy) == {(t, tau) for t in ("cifar100-new", "cifar10") for tau in (1, 50)}
    assert all(torch.isfinite(v).all() for v in r.accuracy.values())


def test_paper_49_slice_runs_and_shares_the_pretraining_of_48(c10, c100):
    s = slice_49()
    r = s49.run_cka(s, cifar10=c10, cifar100=c100)
    assert torch.isfinite(r.between).all() and all(torch.isfinite(v).all() for v in r.before_after.values())
    from replearn.experiments.ch04_fedavg import cifar_transfer as transfer
    assert transfer.pretrain_key(s) == transfer.pretrain_key(slice_48())
    assert transfer.pretrain(slice_48(), c100) is transfer.pretrain(s, c100)  # computed once


def test_paper_57_slice_runs(c10, c100):
    s = slice_57()
    r = s57.run_table(s, cifar={"cifar10": c10, "cifar100": c100})
    assert r.partitions == s.partitions
    for part in s.partitions:
        assert tuple(r.accuracy[part]) == s.methods == algorithms.table1()  # every method of Table 1
        assert all(0 <= v <= 1 for v in r.accuracy[part].values())


def test_paper_58_slice_runs(c10):
    r = s58.run_epochs(slice_58(), cifar=c10)
    assert r.accuracy["FedRep"].shape == (2,) and torch.isfinite(r.accuracy["FedAvg"]).all()


def test_paper_59_slice_runs(c100):
    r = s59.run_new_clients(slice_59(), cifar=c100)
    assert set(r.accuracy) == set(s59.NEW_METHODS)
    assert all(len(v) == 2 for v in r.accuracy.values())


@pytest.mark.parametrize("run", [
    lambda c10, c100: s47.run_similarity(slice_47(), cifar=c10),
    lambda c10, c100: s48.run_transfer(slice_48(), cifar10=c10, cifar100=c100),
    lambda c10, c100: s49.run_cka(slice_49(), cifar10=c10, cifar100=c100),
    lambda c10, c100: s57.run_table(slice_57(), cifar={"cifar10": c10, "cifar100": c100}),
    lambda c10, c100: s58.run_epochs(slice_58(), cifar=c10),
    lambda c10, c100: s59.run_new_clients(slice_59(), cifar=c100),
])
def test_paper_profiles_stop_on_a_subset_before_training(run):
    """On the offline subsets (``source = "subset"``) a paper profile stops at once, naming the data."""
    sub10, sub100 = fake("cifar10", 10, 30, 12, source="subset"), fake("cifar100", 100, 20, 6, source="subset")
    with pytest.raises(ValueError, match="full official"):
        run(sub10, sub100)


def test_requests_beyond_the_data_are_refused():
    with pytest.raises(ValueError, match="needs 10,000 images but the data hold 5,000"):
        scales.require_images(10_000, 5_000, "test_per_client x clients", "lower test_per_client")
    s = replace(slice_47(), clients=10, test_per_client=50)  # 500 test images of 120
    with pytest.raises(ValueError, match="test_per_client x clients"):
        s47.run_similarity(s, cifar=fake("cifar10", 10, 30, 12))


SECTIONS = {"4.7": (s47, s47.SimilaritySettings), "4.8": (s48, s48.TransferSettings), "4.9": (s49, s49.CKASettings),
            "5.7": (s57, s57.TableSettings), "5.8": (s58, s58.EpochSettings), "5.9": (s59, s59.NewClientSettings)}


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_paper_profile_matches_every_setting_the_sources_state(section):
    """Appendix B's table (:func:`replearn.book.scales.settings_table`): the paper profile equals every value
    the paper's text states and every value the authors' code sets (where comparable), every
    stated setting is a real field, and a section without public code says so on every row."""
    module, cls = SECTIONS[section]
    departures = getattr(module, "DEPARTURES", {})
    rows = scales.settings_table(cls, module.PAPER_SETTINGS, code_values=module.AUTHORS_CODE, departures=departures)
    stated = [r for r in rows if r["source"] != "not stated"]
    assert len(stated) == len(module.PAPER_SETTINGS)
    # the paper profile departs from the sources only where the driver says so, with a reason (5.9: FEMNIST's analogue)
    assert {r["setting"] for r in rows if r["deviation"] or r["code_deviation"]} == set(departures)
    assert all(r["departure"] for r in rows if r["setting"] in departures)
    if module.AUTHORS_CODE is None:
        assert {r["code_source"] for r in rows} == {scales.NO_PUBLIC_CODE}
    else:
        assert len([r for r in rows if r["code"] != "—"]) == len(module.AUTHORS_CODE)


def test_settings_table_flags_a_deviation_and_an_unknown_field():
    rows = scales.settings_table(s58.EpochSettings, {"train.rounds": (50, "a made-up source")},
                                 code_values={"train.lr": (0.5, "a made-up file"), "split": ("the noniid split", "x")})
    row = next(r for r in rows if r["setting"] == "train.rounds")
    assert row["deviation"] and row["stated"] == 50 and row["paper()"] == 100 and not row["code_deviation"]
    lr = next(r for r in rows if r["setting"] == "train.lr")
    assert lr["code_deviation"] and not lr["deviation"] and lr["code"] == 0.5 and lr["source"] == "not stated"
    split = next(r for r in rows if r["setting"] == "split")
    assert not split["code_deviation"]  # a description, not compared
    with pytest.raises(ValueError, match="no settings"):
        scales.settings_table(s58.EpochSettings, {"train.nonsense": (1, "x")})
    with pytest.raises(ValueError, match="code_values must name its fields"):
        scales.settings_table(s58.EpochSettings, {}, code_values={"train.nonsense": (1, "x")})
    table = scales.settings_display(s58.EpochSettings, s58.PAPER_SETTINGS, "5.8", code_values=s58.AUTHORS_CODE)
    html = table._repr_html_()
    assert "authors&#x27; code" in html and "models/Update.py" in html and "≠" not in html


def test_launches_per_step_is_what_the_engine_dispatches():
    """The launch estimate's constant re-counted on the paper's CNN (float32, batch 10, momentum)."""
    from replearn import neural
    from replearn.neural.models import make_model
    model = make_model("fedavg_cnn", 10, 0, device="cpu", dtype=torch.float32, channels=(32, 64, 128),
                       hidden=(256, 128))
    worker = neural.LocalSGD(model)
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    x, y = torch.randn(40, 3, 32, 32), torch.randint(0, 10, (40,))
    cfg = neural.TrainConfig(lr=0.01, momentum=0.5, batch_size=10)
    counts = []
    for steps in (1, 4):
        with scales.OperatorCount() as c:
            worker.train(params, tuple(params), x, y, [torch.arange(10) + 10 * i for i in range(steps)], cfg)
        counts.append(c)
    per_step = (counts[1].launches - counts[0].launches) / 3
    assert abs(per_step - scales.LAUNCHES_PER_STEP) <= 0.15 * scales.LAUNCHES_PER_STEP, per_step
    assert counts[1].syncs == 0  # no host sync inside a client's local phase


def test_gpu_profiles_fit_eight_minutes_of_one_gpu():
    """The six ``gpu`` profiles' launch estimates (clients batched where the engine can, 4.9 sharing
    4.8's pre-training) add up to less than 8 minutes with a fifth left for the arithmetic; one
    client after another they would not."""
    estimates = {"4.7": s47.work(s47.SimilaritySettings.profile("gpu")), "4.8": s48.work(s48.TransferSettings.profile("gpu")),
                 "4.9": s49.work(s49.CKASettings.profile("gpu")), "5.7": s57.work(s57.TableSettings.profile("gpu")),
                 "5.8": s58.work(s58.EpochSettings.profile("gpu")), "5.9": s59.work(s59.NewClientSettings.profile("gpu"))}
    assert sum(e["seconds"] for e in estimates.values()) < 0.8 * 480
    from replearn.experiments.ch04_fedavg import cifar_transfer as transfer
    assert transfer.pretrain_key(s48.TransferSettings.profile("gpu")) == transfer.pretrain_key(s49.CKASettings.profile("gpu"))
    serial = sum(module.work(cls.profile("gpu"), batched=False)["seconds"] for module, cls in SECTIONS.values())
    assert serial > 480  # why the batched engine matters
    for _, cls in SECTIONS.values():
        s = cls.profile("gpu")
        assert s.seeds == (0,) and s.dtype == "float32" and not s.full_data and s.train.vmap_clients > 1


def test_gpu_profile_slices_run_batched_on_the_cpu(c10):
    """The gpu profiles as CPU slices: the batched engine (``vmap_clients``) for the spec methods
    and for the protocol methods (5.7's mix), FedRep's two phases batched (5.8), D-SGD and FedAvg
    batched (4.7); the same drivers the GPU run uses."""
    s = s47.SimilaritySettings.profile("gpu")
    s = replace(s, clients=20, total_steps=50, taus=(1, 50), probe_per_class=5, test_per_client=5)
    r = s47.run_similarity(s, cifar=fake("cifar10", 10, 100, 30))  # Dirichlet: 10+ images for each of 20 clients
    assert set(r.taus) == {1, 50} and all(torch.isfinite(r.matrices[t]).all() for t in r.taus)
    s = s57.TableSettings.profile("gpu")
    s = shrink_train(replace(s, partitions=(("cifar10", 20, 2),), ft_epochs=1,
                             methods=("FedAvg", "SCAFFOLD+FT", "FedRep")), rounds=1, head_epochs=1)
    r = s57.run_table(s, cifar={"cifar10": c10})
    assert tuple(r.accuracy[s.partitions[0]]) == s.methods
    s = s58.EpochSettings.profile("gpu")
    r = s58.run_epochs(shrink_train(replace(s, clients=20, epochs=(1, 2)), rounds=1), cifar=c10)
    assert torch.isfinite(r.accuracy["FedRep"]).all() and torch.isfinite(r.accuracy["FedAvg"]).all()


def test_gpu_table_batches_every_method():
    """5.7's gpu profile batches every method's clients (the protocol methods on
    the loop's batched path), so its estimate counts them batched."""
    s = s57.TableSettings.profile("gpu")
    assert s.train.vmap_clients == 10 and s.train.rounds == 100
    one = replace(s, partitions=s.partitions[:1], methods=("SCAFFOLD",))
    assert s57.work(one)["launches"] < 0.2 * s57.work(one, batched=False)["launches"]
