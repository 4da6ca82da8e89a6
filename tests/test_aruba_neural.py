import math

import pytest
import torch

from replearn.experiments import aruba_neural as an

TINY = an.ArubaNeuralSettings(hidden=16, meta_iterations=60, meta_batch=4, eval_tasks=40,
                              rate_grid=(0.003, 0.01))


def test_sinusoids_are_seeded_and_in_range():
    a = an.sample_sinusoids(5, 10, 20, seed=3)
    b = an.sample_sinusoids(5, 10, 20, seed=3)
    assert torch.equal(a.y_query, b.y_query)
    assert a.x_support.shape == (5, 10, 1) and a.y_query.shape == (5, 20, 1)
    assert float(a.amplitude.min()) >= 0.1 and float(a.amplitude.max()) <= 5.0
    assert torch.allclose(a.y_support, a.amplitude[:, None, None] * torch.sin(a.x_support - a.phase[:, None, None]))


def test_adapt_matches_a_plain_module_step():
    phi = an.init_params(8, seed=1)
    tasks = an.sample_sinusoids(1, 10, 5, seed=2)
    theta, grad_sq, _ = an.adapt(phi, tasks, 0.01, 1)
    net = torch.nn.Sequential(torch.nn.Linear(1, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8), torch.nn.ReLU(),
                              torch.nn.Linear(8, 1)).double()
    with torch.no_grad():
        for layer, (w, b) in zip(net[::2], (("W1", "b1"), ("W2", "b2"), ("W3", "b3"))):
            layer.weight.copy_(phi[w].T)
            layer.bias.copy_(phi[b])
    loss = (net(tasks.x_support[0]) - tasks.y_support[0]).pow(2).mean()
    loss.backward()
    expected = net[0].weight.detach().T - 0.01 * net[0].weight.grad.T
    assert torch.allclose(theta["W1"][0], expected, atol=1e-12)
    assert torch.allclose(grad_sq["W1"], net[0].weight.grad.pow(2).sum().reshape(1), atol=1e-12)


def test_divergent_rate_raises():
    with pytest.raises(ValueError, match="diverged"):
        an.adapt(an.init_params(8, seed=0), an.sample_sinusoids(2, 10, 5, seed=0), 50.0, 30)


def test_run_is_deterministic_and_meta_learning_helps():
    r1, r2 = an.run(TINY), an.run(TINY)
    assert r1.final_loss() == r2.final_loss()
    loss = r1.final_loss()
    assert loss["meta init + ARUBA rates"] < loss["random init + single tuned rate"]
    assert set(r1.layer_rates) == {"layer 1", "layer 2", "head"}
    assert r1.aruba.rates.shape == (TINY.meta_iterations, 6)
    assert torch.allclose(r1.aruba.rates[0], torch.full((6,), TINY.eta0, dtype=torch.float64))
    assert all(math.isfinite(v) and v > 0 for v in r1.aruba.eta.values())


@pytest.mark.parametrize("bad", [dict(hidden=0), dict(eta0=-1.0), dict(power=1.0), dict(rate_grid=())])
def test_bad_settings_raise(bad):
    with pytest.raises(ValueError):
        an.run(an.ArubaNeuralSettings(**bad))
