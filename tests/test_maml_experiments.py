import math

import numpy as np
import pytest
import torch

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


def test_sine_tasks_are_the_sections_family():
    tasks = mx.sine_tasks(6, 4, 5, seed=2)
    assert tasks.x_support.shape == (6, 4) and tasks.x_query.shape == (6, 5)
    phi = -tasks.phase  # y = a sin(x + phi), phi ~ U[0, pi]
    assert float(phi.min()) >= 0.0 and float(phi.max()) <= math.pi
    assert float(tasks.amplitude.min()) >= 0.5 and float(tasks.amplitude.max()) <= 2.0
    assert torch.allclose(tasks.y_query, tasks.amplitude[:, None] * torch.sin(tasks.x_query + phi[:, None]), atol=1e-15)


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
