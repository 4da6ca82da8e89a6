import math

import pytest
import torch

from replearn.theory import maml, sinusoid
from replearn.theory.linear import SampledTasks


# --------------------------------------------------------------------------- tasks

def test_sinusoid_tasks_are_the_family_they_name():
    a = sinusoid.sinusoid_tasks(5, 10, 20, seed=3)
    assert torch.equal(a.y_query, sinusoid.sinusoid_tasks(5, 10, 20, seed=3).y_query)
    assert not torch.equal(a.y_query, sinusoid.sinusoid_tasks(5, 10, 20, seed=4).y_query)
    assert a.x_support.shape == (5, 10) and a.y_query.shape == (5, 20) and a.phase.shape == (5,)
    assert float(a.amplitude.min()) >= 0.1 and float(a.amplitude.max()) <= 5.0
    assert float(a.phase.min()) >= 0.0 and float(a.phase.max()) <= math.pi
    assert float(a.x_query.abs().max()) <= 5.0
    assert torch.allclose(a.y_support, a.amplitude[:, None] * torch.sin(a.x_support - a.phase[:, None]), atol=1e-15)


def test_ranges_are_drawn_in_order_from_one_generator():
    # the same numbers as drawing each range by hand: amplitudes, phases, support inputs, query inputs
    tasks = sinusoid.sinusoid_tasks(4, 3, 6, amplitude=(0.5, 2.0), phase=(0.0, -math.pi), seed=11)
    gen = torch.Generator().manual_seed(11)
    amp = 0.5 + 1.5 * torch.rand(4, 1, generator=gen, dtype=torch.float64)
    phi = math.pi * torch.rand(4, 1, generator=gen, dtype=torch.float64)
    xs = -5 + 10 * torch.rand(4, 3, generator=gen, dtype=torch.float64)
    xq = -5 + 10 * torch.rand(4, 6, generator=gen, dtype=torch.float64)
    assert torch.equal(tasks.x_support, xs) and torch.equal(tasks.x_query, xq)
    assert torch.equal(tasks.y_support, amp * torch.sin(xs + phi))  # phase ends (0, -pi): b = -phi
    assert torch.equal(tasks.y_query, amp * torch.sin(xq + phi))
    assert torch.equal(tasks.phase, -phi.flatten())


@pytest.mark.parametrize("kwargs, match", [(dict(n=0), "n"), (dict(support=0), "support"),
                                           (dict(amplitude=(0.1,)), "amplitude"),
                                           (dict(phase=(0.0, float("nan"))), "phase")])
def test_bad_task_settings(kwargs, match):
    args = dict(n=2, support=3, query=4)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        sinusoid.sinusoid_tasks(args.pop("n"), args.pop("support"), args.pop("query"), **args)


# --------------------------------------------------------------------------- a tanh MLP and exact MAML

def test_neural_maml_gradient_matches_autograd_and_descends():
    tasks = sinusoid.sinusoid_tasks(4, 5, 5, seed=1)
    theta = torch.randn(sinusoid.tanh_mlp_size(3), dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    t = theta.clone().requires_grad_(True)
    losses = []
    for i in range(4):
        inner = 0.5 * (sinusoid.tanh_mlp(t, tasks.x_support[i]) - tasks.y_support[i]).pow(2).mean()
        (g,) = torch.autograd.grad(inner, t, create_graph=True)
        losses.append(0.5 * (sinusoid.tanh_mlp(t - 0.1 * g, tasks.x_query[i]) - tasks.y_query[i]).pow(2).mean())
    (ref,) = torch.autograd.grad(torch.stack(losses).mean(), t)
    assert torch.allclose(sinusoid.maml_gradient(theta, tasks, 0.1), ref, atol=1e-12)
    run = sinusoid.train_neural_maml(3, tasks, eta=0.05, lr=0.05, steps=50)
    assert run.objective[-1] < run.objective[0] and len(run.grad_norm) == 51
    with pytest.raises(ValueError, match="width"):
        sinusoid.train_neural_maml(0, tasks, eta=0.05, lr=0.05, steps=5)
    with pytest.raises(ValueError, match="diverged"):
        sinusoid.train_neural_maml(3, tasks, eta=0.05, lr=1e6, steps=20)


def test_optimality_bound_holds():
    tasks = sinusoid.sinusoid_tasks(5, 6, 6, seed=2)
    a = sinusoid.train_neural_maml(3, tasks, eta=0.05, lr=0.05, steps=200, seed=0).theta
    b = sinusoid.train_neural_maml(3, tasks, eta=0.05, lr=0.05, steps=200, seed=1).theta
    omega, comp = (a, b) if float(sinusoid.maml_objective(a, tasks, 0.05)) > float(sinusoid.maml_objective(b, tasks, 0.05)) else (b, a)
    terms = sinusoid.optimality_terms(omega, comp, tasks, 0.05)
    assert terms.gap <= terms.first_order + 1e-12 <= terms.bound + 2e-12
    assert math.isclose(terms.eps, float(sinusoid.maml_gradient(omega, tasks, 0.05).norm()), rel_tol=1e-9)


def fixed_feature_problem(width=3, eta=0.05, seed=3):
    tasks = sinusoid.sinusoid_tasks(6, 8, 12, seed=seed)
    Phi_in, Phi_out = sinusoid.random_features(tasks.x_support, width, seed), sinusoid.random_features(tasks.x_query, width, seed)
    return tasks, Phi_in, Phi_out, sinusoid.linear_maml_quadratic(Phi_in, tasks.y_support, Phi_out, tasks.y_query, eta)


def test_random_features_are_the_frozen_hidden_layer():
    x = torch.linspace(-5, 5, 7, dtype=torch.float64)
    phi = sinusoid.random_features(x, 4, seed=2)
    ub = torch.randn(8, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    vc = torch.randn(5, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    assert phi.shape == (7, 5) and torch.allclose(phi @ vc, sinusoid.tanh_mlp(torch.cat([ub, vc]), x), atol=1e-13)
    with pytest.raises(ValueError, match="width"):
        sinusoid.random_features(x, 0)


@pytest.mark.parametrize("eta", [0.05, 0.8])  # 0.8: some inner steps are expansive, still convex
def test_linear_maml_quadratic_is_the_maml_objective(eta):
    tasks, Phi_in, Phi_out, q = fixed_feature_problem(eta=eta)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        theta = 2 * torch.randn(4, generator=gen, dtype=torch.float64)
        t = theta.clone().requires_grad_(True)
        ref = sinusoid.linear_maml_objective(t, Phi_in, tasks.y_support, Phi_out, tasks.y_query, eta)
        (g,) = torch.autograd.grad(ref, t)
        assert math.isclose(float(q.value(theta)), float(ref.detach()), rel_tol=1e-12, abs_tol=1e-12)
        assert torch.allclose(q.gradient(theta), g, atol=1e-11)
    assert float(q.eigenvalues()[0]) > -1e-12  # PSD
    assert torch.allclose(q.H, q.H.T)


def test_quadratic_gd_reaches_the_closed_form_minimiser():
    _, _, _, q = fixed_feature_problem()
    ev = q.eigenvalues()
    assert float(ev[0]) > 1e-4  # well conditioned enough for the test
    steps = int(30 * float(ev[-1] / ev[0]))
    path = sinusoid.quadratic_gd(q, steps)
    star = q.minimiser()
    assert path.shape == (steps + 1, 4) and torch.equal(path[0], torch.zeros(4, dtype=torch.float64))
    assert float((path[-1] - star).norm()) < 1e-8
    assert float(q.gradient(star).norm()) < 1e-10
    values = q.value(path)
    assert bool((values[1:] <= values[:-1] + 1e-12).all())  # monotone descent with step 1 / lambda_max


def test_linear_maml_bad_inputs():
    tasks, Phi_in, Phi_out, q = fixed_feature_problem()
    for eta in (0.0, -0.1, math.inf):
        with pytest.raises(ValueError, match="eta"):
            sinusoid.linear_maml_quadratic(Phi_in, tasks.y_support, Phi_out, tasks.y_query, eta)
    with pytest.raises(ValueError, match="labels"):
        sinusoid.linear_maml_quadratic(Phi_in, tasks.y_support[:, :-1], Phi_out, tasks.y_query, 0.05)
    with pytest.raises(ValueError, match="match"):
        sinusoid.linear_maml_quadratic(Phi_in, tasks.y_support, Phi_out[..., :-1], tasks.y_query, 0.05)
    with pytest.raises(ValueError, match="shape"):
        sinusoid.linear_maml_objective(torch.zeros(4, dtype=torch.float64), Phi_in[0], tasks.y_support, Phi_out, tasks.y_query, 0.05)
    with pytest.raises(ValueError, match="lr"):
        sinusoid.quadratic_gd(q, 10, lr=2.5 / float(q.eigenvalues()[-1]))
    with pytest.raises(ValueError, match="steps"):
        sinusoid.quadratic_gd(q, -1)


# --------------------------------------------------------------------------- fixed features: the closed form of the ANIL head objective

def test_linear_maml_quadratic_is_maml_head_quadratic_with_the_identity_representation():
    tasks, Phi_in, Phi_out, q = fixed_feature_problem(eta=0.05)
    H, r, c = maml.head_quadratic(torch.eye(4, dtype=torch.float64), SampledTasks(Phi_in, tasks.y_support), alpha=0.05,
                                  outer_tasks=SampledTasks(Phi_out, tasks.y_query))
    assert torch.allclose(q.H, H, atol=1e-12) and torch.allclose(q.b, r, atol=1e-12)
    assert q.c == pytest.approx(float(c), abs=1e-12)


# --------------------------------------------------------------------------- a ReLU MLP with Reptile and ARUBA

def test_adapt_matches_a_plain_module_step():
    phi = sinusoid.relu_mlp_init(8, seed=1)
    tasks = sinusoid.sinusoid_tasks(1, 10, 5, seed=2)
    theta, grad_sq, _ = sinusoid.adapt(phi, tasks, 0.01, 1)
    net = torch.nn.Sequential(torch.nn.Linear(1, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8), torch.nn.ReLU(),
                              torch.nn.Linear(8, 1)).double()
    with torch.no_grad():
        for layer, (w, b) in zip(net[::2], (("W1", "b1"), ("W2", "b2"), ("W3", "b3"))):
            layer.weight.copy_(phi[w].T)
            layer.bias.copy_(phi[b])
    loss = (net(tasks.x_support[0].unsqueeze(-1)).squeeze(-1) - tasks.y_support[0]).pow(2).mean()
    loss.backward()
    expected = net[0].weight.detach().T - 0.01 * net[0].weight.grad.T
    assert torch.allclose(theta["W1"][0], expected, atol=1e-12)
    assert torch.allclose(grad_sq["W1"], net[0].weight.grad.pow(2).sum().reshape(1), atol=1e-12)


def test_divergent_rate_raises():
    with pytest.raises(ValueError, match="diverged"):
        sinusoid.adapt(sinusoid.relu_mlp_init(8, seed=0), sinusoid.sinusoid_tasks(2, 10, 5, seed=0), 50.0, 30)
    with pytest.raises(ValueError, match="positive and finite"):
        sinusoid.adapt(sinusoid.relu_mlp_init(8, seed=0), sinusoid.sinusoid_tasks(2, 10, 5, seed=0), -0.1, 3)


REPTILE = dict(hidden=8, shots=5, inner_steps=3, meta_iterations=30, meta_batch=4, meta_step=0.5, eta0=0.01,
               smoothing=1.0, power=0.4)


def test_reptile_rates_start_at_eta0_and_follow_arubas_formula():
    fixed = sinusoid.reptile(**REPTILE, learn_rate=False, seed=1)
    assert torch.equal(fixed.rates, torch.full((30, 6), 0.01, dtype=torch.float64))
    learned = sinusoid.reptile(**REPTILE, seed=1)
    assert torch.equal(learned.rates[0], fixed.rates[0])  # the first meta-batch runs with eta0
    assert torch.equal(fixed.phi["W1"], sinusoid.reptile(**REPTILE, learn_rate=False, seed=1).phi["W1"])
    assert not torch.equal(learned.rates[-1], fixed.rates[-1]) and all(v > 0 for v in learned.eta.values())
    assert set(sinusoid.layer_rates(learned.eta)) == {"layer 1", "layer 2", "head"}
    assert sinusoid.layer_rates(learned.eta)["head"] == pytest.approx((learned.eta["W3"] + learned.eta["b3"]) / 2)
    with pytest.raises(ValueError, match="power"):
        sinusoid.reptile(**{**REPTILE, "power": 1.0})


def test_tune_rate_picks_the_lowest_query_loss():
    phi = sinusoid.relu_mlp_init(8, seed=0)
    tasks = sinusoid.sinusoid_tasks(20, 10, 10, seed=1)
    best, scores = sinusoid.tune_rate(phi, tasks, (0.001, 0.01, 50.0), 3)
    assert scores[50.0] == math.inf and best == min(scores, key=scores.get)
    assert scores[best] == pytest.approx(float(sinusoid.adapt(phi, tasks, best, 3, record=True)[2][-1].mean()))
    with pytest.raises(ValueError, match="every rate"):
        sinusoid.tune_rate(phi, tasks, (50.0,), 30)
