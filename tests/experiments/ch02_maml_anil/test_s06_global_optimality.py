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
    assert s06.NeuralMamlSettings.profile("paper").steps > cfg.steps
    with pytest.raises(ValueError, match="width"):
        s06.run_neural_optimality(s06.NeuralMamlSettings(widths=()))


def test_fixed_feature_settings():
    assert s06.FixedFeatureSettings.profile("paper").steps > s06.FixedFeatureSettings().steps
    with pytest.raises(ValueError, match="eta"):
        s06.FixedFeatureSettings(eta=0.0)


def _fake_result():
    from types import SimpleNamespace

    g = np.random.default_rng(0)
    shape = (3, 2)
    gap = g.uniform(0.01, 0.1, shape)
    first = gap * 2
    return SimpleNamespace(widths=(2, 10, 40), comparator=(40, 1), objective=g.uniform(0.1, 1, shape), gap=gap,
                           first_order=first, bound=first * 3, stationarity=g.uniform(0.01, 0.1, shape),
                           expressivity=g.uniform(0.1, 1, shape), eps=g.uniform(0.001, 0.01, shape),
                           radius=g.uniform(1, 2, shape), min_residual=g.uniform(0, 1, shape),
                           u_norm=g.uniform(1, 2, shape))


def test_tables_and_quoted_numbers_of_the_width_sweep():
    import matplotlib.pyplot as plt

    res = _fake_result()
    is_comp = np.zeros(res.gap.shape, dtype=bool)
    is_comp[2, 1] = True
    mask = ~is_comp
    assert np.allclose(s06.mean_over_runs(res.gap, mask), [res.gap[0].mean(), res.gap[1].mean(), res.gap[2, 0]])
    table = s06.run_table(res, is_comp).splitlines()
    assert table[0].startswith("comparator: width 40, restart 1") and len(table) == 2 + res.gap.size
    assert table[-1].endswith("(comparator)")
    widths = s06.width_table(res, mask, rows_of_j=12).splitlines()
    assert widths[0].startswith("width                    :") and "(rows of J: 12)" in widths[1]
    assert [line.split(":")[0].strip() for line in widths[2:]] == [
        "mean gap", "mean expressivity term", "mean stationarity term", "stationarity share",
        "mean residual floor", "mean bound"]
    assert s06.listed([1, 2, 3], "d") == "1, 2 and 3"
    wide, narrow = s06.wide_and_narrow_eps(res, mask)
    assert len(wide) == 3 and len(narrow) == 2
    numbers = s06.quoted_numbers(res, mask, rows_of_j=12)
    assert numbers["widths"] == "2, 10 and 40" and numbers["params-last"] == 121 and numbers["queries"] == 12
    assert numbers["first-over-gap-lo"] == numbers["first-over-gap-hi"] == 2.0
    fig = s06.plot_terms(res, mask, rows_of_j=12)
    assert len(fig.axes) == 2
    plt.close(fig)
