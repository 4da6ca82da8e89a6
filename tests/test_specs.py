"""replearn.specs: one network description and builder for every CIFAR section."""

import json
import sys
from pathlib import Path

import pytest
import torch

from replearn import models
from replearn.experiments.ch04_fedavg import s07_feature_similarity as s47
from replearn.experiments.ch05_fedrep import s07_cifar_personalisation as s57
from replearn.specs import NetworkSpec

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
    assert spec.widths == models.FEDREP_WIDTHS["narrow"]
    assert same_parameters(spec.build(20, 1, "cpu"),
                           models.make_model("fedrep_cnn", 20, 1, device="cpu", variant="narrow", dtype=torch.float32))


def test_settings_resolve_their_network():
    cpu, paper = s47.SimilaritySettings(), s47.SimilaritySettings.paper()
    assert cpu.network_spec() == NetworkSpec.fedrep_cnn("narrow", "float64")
    assert paper.network_spec().record() == {"family": "fedavg_cnn", "dtype": "float32", "widths": {
        "conv1": 32, "conv2": 64, "conv3": 128, "fc1": 256, "fc2": 128}}
    nets = s57.TableSettings.paper().networks()
    assert set(nets) == {"cifar10", "cifar100"}
    assert nets["cifar100"].widths == models.FEDREP_WIDTHS["cifar100"]


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
    assert json.loads(src.read_text())["network"]["cifar10"]["widths"]["conv1"] == models.FEDREP_WIDTHS["narrow"][0]
    monkeypatch.setitem(models.FEDREP_WIDTHS, "narrow", (16, 48, 120, 64))
    assert run_results.stale_files(tmp_path) == [str(tmp_path / "long" / "5.9.json")]
