import math
from dataclasses import replace

import pytest
import torch

from replearn.theory import maml
from replearn.experiments.ch02_maml_anil import s02_population_dynamics as s02

SMALL = s02.PopulationDynamicsSettings(d=8, k=2, n=6, iterations=120, conds=(1.0, 4.0), alphas=(0.1, 0.4),
                                       betas=(0.2, 0.8), sweep_iterations=300)


def test_run_meta_learners_converge_and_arm_stalls():
    res = s02.run(SMALL)
    for a in maml.ALGORITHMS:
        assert float(res.dist[a][-1]) < 1e-3
    assert float(res.dist["ARM"].min()) >= res.floor - 1e-12
    assert float(res.dist["ARM"][-1]) > 0.4
    again = s02.run(SMALL)
    assert torch.equal(res.dist["FO-ANIL"], again.dist["FO-ANIL"])
    assert tuple(res.dist) == s02.METHODS


def test_linear_rate_fits_the_window_of_the_linear_phase():
    t = torch.arange(400, dtype=torch.float64)
    # rate 0.1 above dist = 0.1 (transient), rate -log 0.9 inside (1e-8, 0.1), flat below 1e-8 (rounding floor)
    dist = torch.where(t < 20, 0.9 * torch.exp(-0.1 * t), 0.9 * math.exp(-3.0) * 0.9 ** (t - 20)).clamp(min=1e-9)
    assert abs(s02.linear_rate(dist) + math.log(0.9)) < 1e-10
    with pytest.raises(ValueError, match="points"):
        s02.linear_rate(dist[:25])  # the transient and 5 iterates of the linear phase: fewer than 10


def test_rate_sweep_matches_beta_alpha_mu2():
    sweep = s02.rate_sweep(SMALL, algorithms=("FO-ANIL",))
    for rows in sweep.values():
        predicted = -torch.log1p(-rows["x"])
        assert torch.allclose(rows["FO-ANIL"], predicted, rtol=0.05)
    with pytest.raises(ValueError, match="unknown algorithm"):
        s02.rate_sweep(SMALL, algorithms=("ARM",))


def test_contraction_envelope():
    env = s02.contraction_envelope(SMALL, c=0.5)
    assert env.shape == (SMALL.iterations + 1,) and float(env[0]) == SMALL.delta0
    with pytest.raises(ValueError):
        s02.contraction_envelope(replace(SMALL, beta=100.0), c=1.0)


def test_paper_settings_and_bad_sweeps():
    paper = s02.PopulationDynamicsSettings.profile("paper")
    assert (paper.d, paper.k, paper.n, paper.iterations, paper.sweep_iterations) == (100, 5, 100, 500, 1000)
    with pytest.raises(ValueError, match="conds"):
        replace(SMALL, conds=(0.5, 2.0))
    with pytest.raises(ValueError, match="sweep_iterations"):
        replace(SMALL, sweep_iterations=0)


def test_plot_rate_sweep_has_a_panel_per_swept_parameter():
    import matplotlib.pyplot as plt

    x = torch.tensor([0.01, 0.02, 0.04], dtype=torch.float64)
    sweep = {name: {"x": x, "ANIL": x, "FO-ANIL": x, "FO-MAML": x} for name in ("cond", "alpha", "beta")}
    fig = s02.plot_rate_sweep(sweep)
    assert len(fig.axes) == 4                       # three panels, two to a row, and the legend's place
    assert fig.axes[0].get_ylabel() == "measured linear rate"
    assert "inner step" in fig.axes[1].get_title()
    assert not fig.axes[3].axison and len(fig.axes[3].get_legend().get_texts()) == 5
    plt.close(fig)
