"""Book 5.1 driver (replearn.experiments.ch05_fedrep.s01_personalisation): one shared model against
personalised models and local-only fits."""

import pytest
import torch

from replearn.experiments.ch05_fedrep import s01_personalisation as s01


pytestmark = pytest.mark.usefixtures("one_thread")


def test_single_model_formula_and_decomposition():
    cfg = s01.PersonalisationSettings(d=8, k=2, n=30, m=40, spreads=(0.5, 1.0), local_ms=(2, 4, 12), rounds=60)
    res = s01.run_personalisation(cfg)
    assert torch.allclose(res.formula, cfg.k * res.spreads**2 / 2, rtol=1e-10)
    # (1/2n) sum ||theta - theta_i||^2 = 1/2 ||theta - mean||^2 + formula, for the fitted theta
    assert torch.allclose(res.single - res.formula, 0.5 * res.to_mean**2, rtol=1e-8, atol=1e-12)
    assert bool((res.single >= res.formula).all())
    assert float(res.local[-1]) < 1e-12 and float(res.local[0]) > 0.4   # m >= d exact, m << d not


@pytest.mark.parametrize("make", [
    lambda: s01.run_personalisation(s01.PersonalisationSettings(k=20, d=20)),
    lambda: s01.run_personalisation(s01.PersonalisationSettings(spreads=(0.0,))),
    lambda: s01.run_personalisation(s01.PersonalisationSettings(eta=-1.0)),
])
def test_bad_inputs_raise(make):
    with pytest.raises(ValueError):
        make()


def test_paper_profile_is_valid():
    assert isinstance(s01.PersonalisationSettings.profile("paper"), s01.PersonalisationSettings)


def test_tables_and_figure():
    import matplotlib.pyplot as plt

    cfg = s01.PersonalisationSettings(d=8, k=2, n=30, m=40, spreads=(0.5, 1.0), local_ms=(2, 4, 12), rounds=60)
    res = s01.run_personalisation(cfg)
    spread = s01.spread_table(res, cfg).splitlines()
    assert spread[0].startswith(" spread s | single-model error") and len(spread) == 3
    local = s01.local_table(res, cfg).splitlines()
    assert local[0] == " m  | m/d  | local-only error | (1 - m/d)_+ k/2" and len(local) == 4
    assert local[3].startswith(" 12 | 1.50 |")
    fig = s01.plot_personalisation(res, cfg)
    assert len(fig.axes) == 2
    plt.close(fig)
