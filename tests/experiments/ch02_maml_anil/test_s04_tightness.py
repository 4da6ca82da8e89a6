import numpy as np
import pytest

from replearn.theory import maml
from replearn.experiments.ch02_maml_anil import s04_tightness as s04


pytestmark = pytest.mark.usefixtures("one_thread")


def test_tightness_claims_on_a_small_instance():
    cfg = s04.TightnessSettings(d=12, k=2, n=10, iterations=300, seeds=1)
    res = s04.run_tightness(cfg)
    assert maml.outcome(res.runs["structured"]["MAML"]) == "converged"
    assert maml.outcome(res.runs["structured"]["FO-MAML"]) == "diverged"
    assert maml.outcome(res.runs["random"]["ANIL"]) == "converged"
    assert res.runs["random"]["ARM"].dist[-1] > 0.5


def test_tightness_outcomes_table():
    cfg = s04.TightnessSettings(d=12, k=2, n=10, iterations=300, seeds=2)
    table = s04.tightness_outcomes(cfg)
    assert set(table) == set(s04.INITS) and all(set(row) == set(maml.ALGORITHMS) for row in table.values())
    assert all(len(v) == 2 for row in table.values() for v in row.values())
    assert table["structured"]["FO-MAML"] == ["diverged", "diverged"]


def test_tightness_settings_validate():
    with pytest.raises(ValueError, match="delta0"):
        s04.make_tightness_problem(12, 2, 10, cond=2.0, mean_norm=1.0, alpha=0.25, delta0=1.5)
    with pytest.raises(ValueError, match="k"):
        s04.make_tightness_problem(3, 3, 10, cond=2.0, mean_norm=1.0, alpha=0.25)
    assert s04.TightnessSettings.profile("paper").d > s04.TightnessSettings().d
    with pytest.raises(ValueError, match="delta0"):
        s04.TightnessSettings(delta0=1.0)


# --------------------------------------------------------------------------- explorer

def test_explorer_curves_shapes_and_claims():
    curves = s04.explorer_curves("ANIL", 0.25, 0.25, 2.0, 2.0, "random", T=300)
    assert set(curves) == {"iteration", "ANIL", "ARM"}
    assert all(isinstance(v, np.ndarray) and v.shape == (301,) for v in curves.values())
    assert curves["ANIL"][-1] < 1e-2 and curves["ARM"][-1] > 0.9
    again = s04.explorer_curves("ANIL", 0.25, 0.25, 2.0, 2.0, "random", T=300)
    assert all(np.array_equal(curves[key], again[key]) for key in curves)


def test_explorer_curves_divergence_and_bad_input():
    with pytest.raises(ValueError, match="diverged"):
        s04.explorer_curves("FO-MAML", 0.25, 0.25, 2.0, 2.0, "structured", T=200)
    with pytest.raises(ValueError, match="algorithm"):
        s04.explorer_curves("ARM", 0.25, 0.25, 2.0, 2.0, "random")
    with pytest.raises(ValueError, match="init"):
        s04.explorer_curves("ANIL", 0.25, 0.25, 2.0, 2.0, "zero")
    with pytest.raises(ValueError, match="alpha"):
        s04.explorer_curves("ANIL", 0.0, 0.25, 2.0, 2.0, "random")
    with pytest.raises(ValueError, match="cond"):
        s04.explorer_curves("ANIL", 0.25, 0.25, 0.5, 2.0, "random")
    with pytest.raises(ValueError, match="mean_norm"):
        s04.explorer_curves("ANIL", 0.25, 0.25, 2.0, -1.0, "random")
    with pytest.raises(ValueError, match="T"):
        s04.explorer_curves("ANIL", 0.25, 0.25, 2.0, 2.0, "random", T=0)


def test_explorer_builds_redraws_and_rejects_unknown_settings():
    import ipywidgets

    panel = s04.explorer(algorithm="FO-ANIL", mean_norm=0.0)
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
        s04.explorer(tau=2)
