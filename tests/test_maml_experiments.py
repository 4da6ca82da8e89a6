import math

import numpy as np
import pytest
import torch

from replearn import linear, maml
from replearn.experiments import maml_experiments as mx
from replearn.widgets import maml_explorer, maml_explorer_curves


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def small_problem(mean_norm=2.0, seed=0):
    return mx.make_tightness_problem(12, 2, 10, cond=2.0, mean_norm=mean_norm, alpha=0.25, seed=seed)


def test_train_or_diverge_keeps_the_curve_before_the_blow_up():
    pb = small_problem()
    run = mx.train_or_diverge(*pb.starts["structured"], pb.tasks, pb.Bstar, algorithm="FO-MAML", alpha=0.25,
                              beta=0.25, iterations=400)
    assert run.diverged and "diverged" in run.message and mx.outcome(run) == "diverged"
    assert len(run.dist) == run.diverged_at and np.isfinite(run.dist).all()


def test_train_or_diverge_finishes_and_propagates_other_errors():
    pb = small_problem(mean_norm=0.0)
    run = mx.train_or_diverge(*pb.starts["structured"], pb.tasks, pb.Bstar, algorithm="ANIL", alpha=0.25,
                              beta=0.5, iterations=150)
    assert not run.diverged and len(run.dist) == 151 and mx.outcome(run) == "converged"
    with pytest.raises(ValueError, match="unknown algorithm"):
        mx.train_or_diverge(*pb.starts["structured"], pb.tasks, pb.Bstar, algorithm="Reptile", alpha=0.25,
                            beta=0.5, iterations=5)


def test_tightness_claims_on_a_small_instance():
    cfg = mx.TightnessSettings(d=12, k=2, n=10, iterations=300, seeds=1)
    res = mx.run_tightness(cfg)
    assert mx.outcome(res.runs["structured"]["MAML"]) == "converged"
    assert mx.outcome(res.runs["structured"]["FO-MAML"]) == "diverged"
    assert mx.outcome(res.runs["random"]["ANIL"]) == "converged"
    assert res.runs["random"]["ARM"].dist[-1] > 0.5


def test_tightness_settings_validate():
    with pytest.raises(ValueError, match="delta0"):
        mx.make_tightness_problem(12, 2, 10, cond=2.0, mean_norm=1.0, alpha=0.25, delta0=1.5)
    with pytest.raises(ValueError, match="k"):
        mx.make_tightness_problem(3, 3, 10, cond=2.0, mean_norm=1.0, alpha=0.25)
    assert mx.TightnessSettings.paper().d > mx.TightnessSettings().d


def test_finite_samples_error_falls_with_m():
    cfg = mx.FiniteSampleSettings(d=20, k=2, iterations=60, tail=10, ms=(4, 64), ns=(5,), seeds=1,
                                  algorithms=("FO-ANIL",))
    res = mx.run_finite_samples(cfg)
    assert res.by_m["FO-ANIL"].shape == (2, 1) and res.by_n["FO-ANIL"].shape == (1, 1)
    assert res.by_m["FO-ANIL"][1, 0] < res.by_m["FO-ANIL"][0, 0]
    with pytest.raises(ValueError, match="tail"):
        mx.run_finite_samples(mx.FiniteSampleSettings(iterations=5, tail=10))


def test_neural_maml_gradient_matches_autograd_and_descends():
    tasks = mx.sine_tasks(4, 5, 5, seed=1)
    theta = torch.randn(mx.n_params(3), dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    t = theta.clone().requires_grad_(True)
    losses = []
    for i in range(4):
        inner = 0.5 * (mx.mlp(t, tasks.X_in[i]) - tasks.Y_in[i]).pow(2).mean()
        (g,) = torch.autograd.grad(inner, t, create_graph=True)
        losses.append(0.5 * (mx.mlp(t - 0.1 * g, tasks.X_out[i]) - tasks.Y_out[i]).pow(2).mean())
    (ref,) = torch.autograd.grad(torch.stack(losses).mean(), t)
    assert torch.allclose(mx.maml_gradient(theta, tasks, 0.1), ref, atol=1e-12)
    run = mx.train_neural_maml(3, tasks, eta=0.05, lr=0.05, steps=50)
    assert run.objective[-1] < run.objective[0] and len(run.grad_norm) == 51
    with pytest.raises(ValueError, match="width"):
        mx.train_neural_maml(0, tasks, eta=0.05, lr=0.05, steps=5)
    with pytest.raises(ValueError, match="diverged"):
        mx.train_neural_maml(3, tasks, eta=0.05, lr=1e6, steps=20)


def test_optimality_bound_holds():
    tasks = mx.sine_tasks(5, 6, 6, seed=2)
    a = mx.train_neural_maml(3, tasks, eta=0.05, lr=0.05, steps=200, seed=0).theta
    b = mx.train_neural_maml(3, tasks, eta=0.05, lr=0.05, steps=200, seed=1).theta
    omega, comp = (a, b) if float(mx.maml_objective(a, tasks, 0.05)) > float(mx.maml_objective(b, tasks, 0.05)) else (b, a)
    terms = mx.optimality_terms(omega, comp, tasks, 0.05)
    assert terms.gap <= terms.first_order + 1e-12 <= terms.bound + 2e-12
    assert math.isclose(terms.eps, float(mx.maml_gradient(omega, tasks, 0.05).norm()), rel_tol=1e-9)


# --------------------------------------------------------------------------- explorer

def test_explorer_curves_shapes_and_claims():
    curves = maml_explorer_curves("ANIL", 0.25, 0.25, 2.0, 2.0, "random", T=300)
    assert set(curves) == {"iteration", "ANIL", "ARM"}
    assert all(isinstance(v, np.ndarray) and v.shape == (301,) for v in curves.values())
    assert curves["ANIL"][-1] < 1e-2 and curves["ARM"][-1] > 0.9
    again = maml_explorer_curves("ANIL", 0.25, 0.25, 2.0, 2.0, "random", T=300)
    assert all(np.array_equal(curves[key], again[key]) for key in curves)


def test_explorer_curves_divergence_and_bad_input():
    with pytest.raises(ValueError, match="diverged"):
        maml_explorer_curves("FO-MAML", 0.25, 0.25, 2.0, 2.0, "structured", T=200)
    with pytest.raises(ValueError, match="algorithm"):
        maml_explorer_curves("ARM", 0.25, 0.25, 2.0, 2.0, "random")
    with pytest.raises(ValueError, match="init"):
        maml_explorer_curves("ANIL", 0.25, 0.25, 2.0, 2.0, "zero")
    with pytest.raises(ValueError, match="alpha"):
        maml_explorer_curves("ANIL", 0.0, 0.25, 2.0, 2.0, "random")
    with pytest.raises(ValueError, match="cond"):
        maml_explorer_curves("ANIL", 0.25, 0.25, 0.5, 2.0, "random")
    with pytest.raises(ValueError, match="mean_norm"):
        maml_explorer_curves("ANIL", 0.25, 0.25, 2.0, -1.0, "random")
    with pytest.raises(ValueError, match="T"):
        maml_explorer_curves("ANIL", 0.25, 0.25, 2.0, 2.0, "random", T=0)


def test_maml_explorer_builds_redraws_and_rejects_unknown_settings():
    import ipywidgets

    panel = maml_explorer(algorithm="FO-ANIL", mean_norm=0.0)
    assert isinstance(panel, ipywidgets.VBox)
    out = panel.children[-1]
    assert len(out.outputs) == 1 and "image/png" in out.outputs[0]["data"]
    algorithm = panel.children[0].children[0]
    algorithm.value = "FO-MAML"
    assert len(out.outputs) == 1 and "image/png" in out.outputs[0]["data"]
    mean = panel.children[1].children[-1]
    mean.value = 2.0
    assert len(out.outputs) == 1 and "diverged" in out.outputs[0]["text"]
    with pytest.raises(ValueError, match="unknown"):
        maml_explorer(tau=2)


# --------------------------------------------------------------------------- fixed features (book 2.6)

def fixed_feature_problem(width=3, eta=0.05, seed=3):
    tasks = mx.sine_tasks(6, 8, 12, seed=seed)
    Phi_in, Phi_out = mx.random_features(tasks.X_in, width, seed), mx.random_features(tasks.X_out, width, seed)
    return tasks, Phi_in, Phi_out, mx.linear_maml_quadratic(Phi_in, tasks.Y_in, Phi_out, tasks.Y_out, eta)


def test_random_features_are_the_frozen_hidden_layer():
    x = torch.linspace(-5, 5, 7, dtype=torch.float64)
    phi = mx.random_features(x, 4, seed=2)
    ub = torch.randn(8, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    vc = torch.randn(5, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    assert phi.shape == (7, 5) and torch.allclose(phi @ vc, mx.mlp(torch.cat([ub, vc]), x), atol=1e-13)
    with pytest.raises(ValueError, match="width"):
        mx.random_features(x, 0)


@pytest.mark.parametrize("eta", [0.05, 0.8])  # 0.8: some inner steps are expansive, still convex
def test_linear_maml_quadratic_is_the_maml_objective(eta):
    tasks, Phi_in, Phi_out, q = fixed_feature_problem(eta=eta)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        theta = 2 * torch.randn(4, generator=gen, dtype=torch.float64)
        t = theta.clone().requires_grad_(True)
        ref = mx.linear_maml_objective(t, Phi_in, tasks.Y_in, Phi_out, tasks.Y_out, eta)
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
    path = mx.quadratic_gd(q, steps)
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
            mx.linear_maml_quadratic(Phi_in, tasks.Y_in, Phi_out, tasks.Y_out, eta)
    with pytest.raises(ValueError, match="labels"):
        mx.linear_maml_quadratic(Phi_in, tasks.Y_in[:, :-1], Phi_out, tasks.Y_out, 0.05)
    with pytest.raises(ValueError, match="match"):
        mx.linear_maml_quadratic(Phi_in, tasks.Y_in, Phi_out[..., :-1], tasks.Y_out, 0.05)
    with pytest.raises(ValueError, match="shape"):
        mx.linear_maml_objective(torch.zeros(4, dtype=torch.float64), Phi_in[0], tasks.Y_in, Phi_out, tasks.Y_out, 0.05)
    with pytest.raises(ValueError, match="lr"):
        mx.quadratic_gd(q, 10, lr=2.5 / float(q.eigenvalues()[-1]))
    with pytest.raises(ValueError, match="steps"):
        mx.quadratic_gd(q, -1)


def test_run_neural_optimality_small():
    cfg = mx.NeuralMamlSettings(n=4, m_in=5, m_out=5, widths=(2, 8), steps=40, restarts=2)
    res = mx.run_neural_optimality(cfg)
    assert res.gap.shape == (2, 2) and res.curves.shape == (2, 2, 41)
    assert bool((res.gap <= res.first_order + 1e-12).all() and (res.first_order <= res.bound + 1e-12).all())
    assert np.allclose(res.stationarity + res.expressivity, res.bound)
    assert res.comparator[0] in cfg.widths and float(res.gap.min()) == 0.0
    assert mx.NeuralMamlSettings.paper().steps > cfg.steps
    with pytest.raises(ValueError, match="width"):
        mx.run_neural_optimality(mx.NeuralMamlSettings(widths=()))
