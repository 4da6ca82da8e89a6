import math

import numpy as np
import pytest
import torch

from replearn.experiments.ch02_maml_anil import s06_global_optimality as s06


pytestmark = pytest.mark.usefixtures("one_thread")


def test_sine_tasks_are_the_sections_family():
    tasks = s06.sine_tasks(6, 4, 5, seed=2)
    assert tasks.x_support.shape == (6, 4) and tasks.x_query.shape == (6, 5)
    phi = -tasks.phase  # y = a sin(x + phi), phi ~ U[0, pi]
    assert float(phi.min()) >= 0.0 and float(phi.max()) <= math.pi
    assert float(tasks.amplitude.min()) >= 0.5 and float(tasks.amplitude.max()) <= 2.0
    assert torch.allclose(tasks.y_query, tasks.amplitude[:, None] * torch.sin(tasks.x_query + phi[:, None]), atol=1e-15)


def test_run_neural_optimality_small():
    cfg = s06.NeuralMamlSettings(n=4, m_in=5, m_out=5, widths=(2, 8), steps=40, restarts=2)
    res = s06.run_neural_optimality(cfg)
    assert res.gap.shape == (2, 2) and res.curves.shape == (2, 2, 41)
    assert bool((res.gap <= res.first_order + 1e-12).all() and (res.first_order <= res.bound + 1e-12).all())
    assert np.allclose(res.stationarity + res.expressivity, res.bound)
    assert res.comparator[0] in cfg.widths and float(res.gap.min()) == 0.0
    assert s06.NeuralMamlSettings.paper().steps > cfg.steps
    with pytest.raises(ValueError, match="width"):
        s06.run_neural_optimality(s06.NeuralMamlSettings(widths=()))


def test_fixed_feature_settings():
    assert s06.FixedFeatureSettings.paper().steps > s06.FixedFeatureSettings().steps
    with pytest.raises(ValueError, match="eta"):
        s06.FixedFeatureSettings(eta=0.0)
