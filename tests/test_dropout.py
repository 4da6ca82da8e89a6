"""The FedRep authors' CIFAR-100 dropout (``CNNCifar100``: ``fc3(drop(relu(fc2(x))))``, p = 0.6):
:class:`replearn.neural.models.DropoutLinear`, drawn from the run's generator in the engine's
training steps only, against a hand-written step."""

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from replearn import neural
from replearn.neural import algorithms
from replearn.neural import models
from replearn.neural.specs import FEDREP_DROPOUT, NetworkSpec

WIDTHS = (2, 3, 8, 6)


def net(dropout, seed=0):
    return models.make_model("fedrep_cnn", 3, seed, device="cpu", dtype=torch.float64, widths=WIDTHS,
                             dropout=dropout)


def data(n=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, 32, 32, generator=g, dtype=torch.float64), torch.randint(0, 3, (n,), generator=g)


def params_of(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_a_head_with_dropout_has_the_plain_heads_parameters_and_is_plain_outside_training():
    plain, drop = net(0.0), net(0.6)
    assert type(plain.head) is torch.nn.Linear and isinstance(drop.head, models.DropoutLinear)
    assert {n: p.shape for n, p in plain.named_parameters()} == {n: p.shape for n, p in drop.named_parameters()}
    for (n, a), (_, b) in zip(plain.named_parameters(), drop.named_parameters()):
        assert torch.equal(a, b), n        # the same initial draws
    x, _ = data()
    drop.train()                           # model.training does not switch it on: only dropout_draws does
    assert torch.equal(plain(x), drop(x))
    assert models.dropout_layers(plain) == () and models.dropout_layers(drop) == (drop.head,)


def test_inside_dropout_draws_the_head_drops_with_masks_from_the_generator():
    drop = net(0.6)
    x = torch.randn(4000, WIDTHS[3], dtype=torch.float64)
    with models.dropout_draws(models.dropout_layers(drop), torch.Generator().manual_seed(3)):
        out = drop.head(x)
    keep = torch.rand(x.shape, generator=torch.Generator().manual_seed(3)) >= 0.6
    assert torch.equal(out, F.linear(x * (keep.double() / 0.4), drop.head.weight, drop.head.bias))
    assert keep.double().mean().item() == pytest.approx(0.4, abs=0.01)
    assert drop.head.generator is None     # released on exit
    with pytest.raises(ValueError, match="generator"):
        with models.dropout_draws(models.dropout_layers(drop), None):
            pass


@pytest.mark.parametrize("trainable", ["all", "head"])
def test_local_sgd_with_dropout_is_a_hand_written_step(trainable):
    """Two SGD steps (momentum 0.5, weight decay) of LocalSGD.train on a network with dropout equal
    the steps written by hand with masks drawn in the same order from the same seed; the head-only
    phase (cached body features) drops the features as the full forward pass would."""
    model = net(0.5)
    x, y = data()
    names = [n for n, _ in model.named_parameters() if trainable == "all" or n.startswith("head.")]
    cfg = neural.TrainConfig(lr=0.1, momentum=0.5, weight_decay=0.01, batch_size=6)
    batches = [torch.arange(0, 6), torch.arange(6, 12)]
    new, _ = neural.LocalSGD(model).train(params_of(model), names, x, y, batches, cfg,
                                          torch.Generator().manual_seed(7))
    ref = net(0.5)
    p = dict(ref.named_parameters())
    g, buf = torch.Generator().manual_seed(7), None
    for idx in batches:
        h = ref.features(x[idx])
        keep = torch.rand(h.shape, generator=g) >= 0.5
        loss = F.cross_entropy(F.linear(h * (keep.double() / 0.5), p["head.weight"], p["head.bias"]), y[idx])
        grads = torch.autograd.grad(loss, [p[n] for n in names])
        grads = [gr + 0.01 * p[n].detach() if p[n].ndim > 1 else gr for gr, n in zip(grads, names)]
        buf = grads if buf is None else [0.5 * b + gr for b, gr in zip(buf, grads)]
        with torch.no_grad():
            for n, b in zip(names, buf):
                p[n] -= 0.1 * b
    for n in names:
        assert torch.allclose(new[n], p[n].detach(), atol=1e-12, rtol=0), n
    plain, _ = neural.LocalSGD(net(0.0)).train(params_of(model), names, x, y, batches, cfg,
                                              torch.Generator().manual_seed(7))
    assert not torch.allclose(plain["head.weight"], new["head.weight"])   # the masks changed the steps
    with pytest.raises(ValueError, match="generator"):
        neural.LocalSGD(model).train(params_of(model), names, x, y, batches, cfg)


def test_a_gradient_drops_only_in_a_minibatch_step_given_the_generator():
    """A full-batch gradient (Per-FedAvg's evaluation step) and a minibatch gradient without a
    generator (a loss measured, as L2GD's round of aggregation steps only) do not drop; a minibatch
    gradient given the generator does."""
    model = net(0.6)
    x, y = data()
    names = tuple(n for n, _ in model.named_parameters())
    cfg, idx = neural.TrainConfig(), torch.arange(6)
    plain, drop = neural.LocalSGD(net(0.0)), neural.LocalSGD(model)
    for batch in (None, idx):
        _, g1 = drop.gradient(params_of(model), names, x, y, batch, cfg)
        _, g2 = plain.gradient(params_of(model), names, x, y, batch, cfg)
        assert all(torch.allclose(g1[n], g2[n], atol=1e-12, rtol=0) for n in names)
    _, g1 = drop.gradient(params_of(model), names, x, y, idx, cfg, torch.Generator().manual_seed(1))
    assert not torch.allclose(g1["head.weight"], g2["head.weight"])


def test_the_engine_trains_a_dropout_network_in_one_thread_reproducibly():
    xs, ys = zip(*(data(10, seed=s) for s in range(3)))
    clients = neural.ClientData(xs, ys, xs, ys)
    cfg = neural.TrainConfig(rounds=2, participation=1.0, lr=0.05, batch_size=5, local_epochs=1, seed=4)
    runs = [algorithms.run("FedAvg", net(p), clients, cfg) for p in (0.5, 0.5, 0.0)]
    assert all(torch.equal(runs[0].state[n], runs[1].state[n]) for n in runs[0].state)
    assert not torch.equal(runs[0].state["head.weight"], runs[2].state["head.weight"])
    with pytest.raises(ValueError, match="dropout"):
        algorithms.run("FedAvg", net(0.5), clients, cfg, workers=2)
    with pytest.raises(ValueError, match="dropout"):
        algorithms.run("FedAvg", net(0.5), clients, replace(cfg, vmap_clients=3))


def test_the_authors_dropout_is_resolved_by_dataset_and_recorded():
    c100 = NetworkSpec.fedrep_cnn(None, "float32", dataset="cifar100", authors_dropout=True)
    c10 = NetworkSpec.fedrep_cnn(None, "float32", dataset="cifar10", authors_dropout=True)
    assert c100.dropout == FEDREP_DROPOUT["cifar100"] == 0.6 and c10.dropout == 0.0
    assert c100.record()["dropout"] == 0.6 and "dropout" not in c10.record()
    assert "dropout" not in NetworkSpec.fedrep_cnn(None, "float32", dataset="cifar100").record()
    assert isinstance(c100.build(100, 0, "cpu").head, models.DropoutLinear)
    with pytest.raises(ValueError, match="dataset"):
        NetworkSpec.fedrep_cnn("narrow", "float32", authors_dropout=True)
    with pytest.raises(ValueError, match="dropout"):
        NetworkSpec("fedavg_cnn", (1, 1, 1, 1, 1), "float32", dropout=0.5)
    with pytest.raises(ValueError, match="dropout"):
        models.FedRepCNN(3, WIDTHS, dropout=1.0)
