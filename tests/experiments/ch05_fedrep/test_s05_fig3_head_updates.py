"""Book 5.5 driver (replearn.experiments.ch05_fedrep.s05_fig3_head_updates): Fig. 3, exact heads
against gradient steps on the head."""

import math

import pytest

from replearn.experiments.ch05_fedrep import s05_fig3_head_updates as s05

SMALL3 = s05.Fig3Settings(ns=(100,), rounds=100, seeds=1)


def test_paper_profile_has_the_papers_sizes():
    p3 = s05.Fig3Settings.profile("paper")
    assert (p3.d, p3.k, p3.m, p3.r) == (10, 2, 5, 0.1) and len(p3.ns) == 4
    assert p3.noise_std == pytest.approx(math.sqrt(1e-3))


def test_fig3_shapes_and_ordering_noiseless():
    res = s05.run_fig3(SMALL3)
    curves = res.dist[100]
    assert set(curves) == set(s05.FIG3_METHODS) and curves["FedRep"].shape == (1, 101)
    # shared start
    assert float(curves["FedRep"][0, 0]) == float(curves["GD-GD"][0, 0])
    end = {name: float(res.geometric_mean(100, name)[-1]) for name in s05.FIG3_METHODS}
    assert end["FedRep"] < end["10GD-GD"] < end["GD-GD"] < 0.1


@pytest.mark.parametrize("bad", [dict(r=0.0), dict(r=1.5), dict(ns=()), dict(head_lr=0.0), dict(m=0),
                                 dict(rounds=0)])
def test_fig3_bad_settings_raise(bad):
    with pytest.raises(ValueError):
        s05.run_fig3(s05.Fig3Settings(**bad))


def test_budget_table_at_round_and_figure():
    import matplotlib.pyplot as plt

    res = s05.run_fig3(SMALL3)
    assert s05.at_round(res, 100, "FedRep", 100) == float(res.geometric_mean(100, "FedRep")[100])
    lines = s05.budget_table(res, 50, SMALL3.seeds).splitlines()
    assert lines[0].startswith("dist(B_t, B_*) at round 50 (geometric mean over 1 runs)")
    assert lines[1].startswith("n =   100: FedRep ") and len(lines) == 2
    fig = s05.plot_fig3(res, "title")
    assert fig.axes[0].get_title() == "n = 100" and fig._suptitle.get_text() == "title"
    plt.close(fig)
