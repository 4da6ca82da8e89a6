"""replearn.neural.specs: one network description and builder for every CIFAR section."""

import json
import sys
from pathlib import Path

import pytest
import torch

from replearn.neural import models
from replearn.experiments.ch04_fedavg import s07_feature_similarity as s47
from replearn.experiments.ch05_fedrep import s07_cifar_personalisation as s57
from replearn.neural.specs import FederationSpec, NetworkSpec
from replearn.neural.specs import FEDREP_WIDTHS

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import run_results  # noqa: E402


def same_parameters(a, b) -> bool:
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    return pa.keys() == pb.keys() and all(torch.equal(pa[n], pb[n]) and pa[n].dtype == pb[n].dtype for n in pa)


def test_build_is_make_model_for_both_families():
    spec = NetworkSpec.fedavg_cnn((8, 16, 32), (64, 32), "float64")
    ref = models.make_model("fedavg_cnn", 10, 3, device="cpu", dtype=torch.float64, channels=(8, 16, 32),
                            hidden=(64, 32))
    assert same_parameters(spec.build(10, 3, "cpu"), ref)
    spec = NetworkSpec.fedrep_cnn("narrow", "float32")
    assert spec.widths == FEDREP_WIDTHS["narrow"]
    assert same_parameters(spec.build(20, 1, "cpu"),
                           models.make_model("fedrep_cnn", 20, 1, device="cpu", widths=FEDREP_WIDTHS["narrow"], dtype=torch.float32))


def test_settings_resolve_their_network():
    cpu, paper = s47.SimilaritySettings(), s47.SimilaritySettings.profile("paper")
    assert cpu.network_spec() == NetworkSpec.fedrep_cnn("narrow", "float64")
    assert paper.network_spec().record() == {"family": "fedavg_cnn", "dtype": "float32", "widths": {
        "conv1": 32, "conv2": 64, "conv3": 128, "fc1": 256, "fc2": 128}}
    nets = s57.TableSettings.profile("paper").networks()
    assert set(nets) == {"cifar10", "cifar100"}
    assert nets["cifar100"].widths == FEDREP_WIDTHS["cifar100"]


@pytest.mark.parametrize("bad", [dict(family="mlp", widths=(1,), dtype="float32"),
                                 dict(family="fedavg_cnn", widths=(1, 2), dtype="float32"),
                                 dict(family="fedavg_cnn", widths=(8, 16, 32, 64, 0), dtype="float32"),
                                 dict(family="fedavg_cnn", widths=(8, 16, 32, 64, 32), dtype="float16"),
                                 dict(family="fedrep_cnn", widths=(1, 2, 3, 4), dtype="float32", variant="narrow")])
def test_bad_specs_are_refused(bad):
    with pytest.raises(ValueError):
        NetworkSpec(**bad)


def test_a_changed_width_makes_committed_results_stale(monkeypatch, tmp_path):
    """Results files record the resolved widths: changing the narrow body's width is noticed."""
    src = Path(__file__).resolve().parent.parent / "book" / "results" / "long" / "5.9.json"
    (tmp_path / "long").mkdir()
    (tmp_path / "long" / "5.9.json").write_text(src.read_text())
    assert run_results.stale_files(tmp_path) == []
    s = run_results.SECTIONS["5.9"].settings.profile("long")
    variant = s.variant or s.dataset  # None: the authors' widths for the dataset
    widths = FEDREP_WIDTHS[variant]
    assert json.loads(src.read_text())["network"][s.dataset]["widths"]["conv1"] == widths[0]
    monkeypatch.setitem(FEDREP_WIDTHS, variant, (widths[0] + 16, *widths[1:]))
    assert run_results.stale_files(tmp_path) == [str(tmp_path / "long" / "5.9.json")]


def _fake10():
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_paper_profiles import fake
    return fake("cifar10", 10, 40, 20)


def test_federation_spec_is_the_data_functions_composed():
    """Shards and Dirichlet: the spec's clients are exactly those of the partition functions."""
    from replearn.neural import data as D
    from replearn import neural
    c = _fake10()
    for spec, part in ((FederationSpec(5, classes_per_client=2), lambda y: D.shard_partition(y, 5, 2, seed=3)),
                       (FederationSpec(6, alpha=0.5, test_per_client=4),
                        lambda y: D.dirichlet_partition(y, 6, 0.5, seed=3))):
        fed = spec.build(c, partition_seed=3, test_seed=4)
        parts = part(c.y_train)
        tests = D.client_test_split(parts, c.y_train, c.y_test, seed=4, n_per_client=spec.test_per_client)
        ref = neural.ClientData.from_partition(c.x_train, c.y_train, parts, c.x_test, c.y_test, tests, dataset="cifar10")
        assert fed.n_classes == 10 and fed.classes == tuple(range(10))
        for a, b in zip(fed.clients.x_train + fed.clients.y_test, ref.x_train + ref.y_test):
            assert torch.equal(a, b)


def test_federation_spec_restricts_pools_and_subsamples():
    c = _fake10()
    fed = FederationSpec(3, classes_per_client=2, classes=(7, 2, 5), shard_pool=True, test_per_client=3).build(
        c, partition_seed=0, test_seed=1)
    assert fed.classes == (7, 2, 5) and fed.n_classes == 3 and fed.clients.n_clients == 3
    assert all(set(y.tolist()) <= {0, 1, 2} for y in fed.clients.y_train)
    fed = FederationSpec(5, classes_per_client=2, train_per_client=20).build(c, partition_seed=0, test_seed=1,
                                                                              subset_seed=2)
    assert fed.clients.train_sizes.tolist() == [20] * 5


@pytest.mark.parametrize("bad", [dict(clients=5), dict(clients=5, classes_per_client=2, alpha=0.5),
                                 dict(clients=0, alpha=0.5), dict(clients=5, alpha=float("nan")),
                                 dict(clients=5, alpha=0.5, shard_pool=True),
                                 dict(clients=5, alpha=0.5, train_per_client=10)])
def test_bad_federation_specs_are_refused(bad):
    with pytest.raises(ValueError):
        FederationSpec(**bad)
