import pytest
import torch

from replearn.neural import models
from replearn.neural.specs import FEDREP_WIDTHS, NetworkSpec


def conv(c_in, c_out, k):
    return c_in * c_out * k * k + c_out


def linear(n_in, n_out):
    return n_in * n_out + n_out


#: The widths make_model needs for each family (the FedAvg CNN has defaults).
WIDTHS = {"fedrep_cnn": dict(widths=FEDREP_WIDTHS["cifar10"]), "fedavg_cnn": {}}


def n_params(module):
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("name, n_classes, expected", [
    ("fedrep_cnn", 10, conv(3, 64, 5) + conv(64, 64, 5) + linear(64 * 25, 120) + linear(120, 64)
     + linear(64, 10)),
    ("fedrep_cnn", 100, conv(3, 64, 5) + conv(64, 128, 5) + linear(128 * 25, 256) + linear(256, 128)
     + linear(128, 100)),
    ("fedavg_cnn", 10, conv(3, 32, 3) + conv(32, 32, 3) + conv(32, 64, 3) + conv(64, 64, 3) + conv(64, 128, 3)
     + conv(128, 128, 3) + linear(128 * 16, 256) + linear(256, 128) + linear(128, 10)),
])
def test_shapes_and_parameter_counts(name, n_classes, expected):
    model = NetworkSpec.fedrep_cnn(None, "float32", dataset="cifar10" if n_classes == 10 else "cifar100").build(
        n_classes, 0, "cpu") if name == "fedrep_cnn" else models.make_model(name, n_classes, seed=0, device="cpu")
    x = torch.randn(4, 3, 32, 32)
    assert model(x).shape == (4, n_classes)
    assert model.features(x).shape == (4, model.feature_dim)
    assert n_params(model) == expected
    assert n_params(model.head) == linear(model.feature_dim, n_classes)
    assert torch.equal(model(x), model.head(model.features(x)))


@pytest.mark.parametrize("name", models.MODEL_NAMES)
def test_body_head_split_covers_every_parameter_once(name):
    model = models.make_model(name, 10, seed=0, device="cpu", **WIDTHS[name])
    names = [n for n, _ in model.named_parameters()]
    body, head = model.body_parameter_names(), models.head_parameter_names(model)
    assert head == ("head.weight", "head.bias") == model.head_parameter_names()
    assert sorted(body + head) == sorted(names) and not set(body) & set(head)
    assert isinstance(model.head, torch.nn.Linear)


@pytest.mark.parametrize("name", models.MODEL_NAMES)
def test_layer_names_capture_activations_in_order(name):
    model = models.make_model(name, 10, seed=0, device="cpu", **WIDTHS[name])
    seen = []
    hooks = [model.get_submodule(n).register_forward_hook(lambda m, i, o, n=n: seen.append((n, o.shape)))
             for n in model.layer_names()]
    model(torch.randn(2, 3, 32, 32))
    for h in hooks:
        h.remove()
    assert [n for n, _ in seen] == list(model.layer_names())
    assert seen[-1] == ("head", (2, 10))
    assert seen[-2][1] == (2, model.feature_dim)
    assert len(set(model.layer_names())) == len(model.layer_names())


def test_seeded_construction_is_deterministic_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a = models.make_model("fedrep_cnn", 10, seed=5, device="cpu", widths=FEDREP_WIDTHS["cifar10"])
    assert torch.equal(torch.get_rng_state(), before)
    b = models.make_model("fedrep_cnn", 10, seed=5, device="cpu", widths=FEDREP_WIDTHS["cifar10"])
    c = models.make_model("fedrep_cnn", 10, seed=6, device="cpu", widths=FEDREP_WIDTHS["cifar10"])
    for (n, p), (_, q), (_, r) in zip(a.named_parameters(), b.named_parameters(), c.named_parameters()):
        assert p.dtype == torch.float32
        assert torch.equal(p, q), n
        assert not torch.equal(p, r), n


def test_bad_inputs():
    with pytest.raises(ValueError, match="unknown model"):
        models.make_model("resnet", 10, seed=0)
    with pytest.raises(ValueError, match="seed"):
        models.make_model("fedrep_cnn", 10, seed=-1, widths=FEDREP_WIDTHS["cifar10"])
    with pytest.raises(ValueError, match="variant must be one of"):
        NetworkSpec.fedrep_cnn("imagenet", "float32")
    with pytest.raises(ValueError, match="name the dataset"):
        NetworkSpec.fedrep_cnn(None, "float32")
    with pytest.raises(ValueError, match="widths must be a tuple"):
        models.FedRepCNN(10, [64, 64, 120, 64])
    with pytest.raises(ValueError, match="widths must be positive ints"):
        models.FedRepCNN(10, (64, 0, 120, 64))
    with pytest.raises(ValueError, match="n_classes"):
        models.FedAvgCNN(0)
    assert models.FedRepCNN(10, FEDREP_WIDTHS["cifar100"]).widths == (64, 128, 256, 128)


def test_fedavg_cnn_starts_with_logits_that_depend_on_the_input():
    # PyTorch's default initialisation leaves the nine-layer FedAvgCNN with logits whose spread across
    # images is about 0.3% of their size (SGD then sits at chance); He initialisation gives about 18%
    model = models.FedAvgCNN(10)
    with torch.no_grad():
        out = model(torch.randn(50, 3, 32, 32, generator=torch.Generator().manual_seed(0)))
    assert float(out.std(0).mean() / out.abs().mean()) > 0.05
    assert all(float(m.bias.abs().max()) == 0.0 for m in model.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)))
