"""Book 5.6 driver (replearn.experiments.ch05_fedrep.s06_new_clients): Fig. 4, new clients fit only a
head on a learned representation, and the explorer of FedRep's convergence."""

import numpy as np
import pytest

from replearn.experiments.ch05_fedrep import s06_new_clients as s06

SMALL4 = s06.Fig4Settings(n=40, rounds=100, m_news=(2, 4, 10, 40), new=50, seeds=1)


def test_paper_profile_has_the_papers_sizes():
    p4 = s06.Fig4Settings.profile("paper")
    assert (p4.d, p4.k, p4.n) == (20, 2, 100)


def test_fig4_new_clients_need_k_samples_on_fedrep():
    res = s06.run_fig4(SMALL4)
    fed, local = res.median("FedRep"), res.median("local only")
    assert float(fed[1]) < 0.02 and float(local[1]) > 0.5  # m_new = 4 < d
    assert float(local[-1]) < 0.01  # m_new = 2d


def test_fig4_fedavg_learns_the_representation_only_from_the_scaled_start():
    # the scaled start B_0 = Q/sqrt(alpha) of Collins et al. (2022) learns col(B_*) on the
    # training clients' data, so a head fitted on it serves new clients; the unscaled start
    # Q (alpha B_0^T B_0 = alpha I) stays far from col(B_*) on this seed (after 100 rounds the scaled
    # start is at distance 0.09-0.15 on the first four seeds, the unscaled one at 0.6-1)
    res = s06.run_fig4(SMALL4)
    assert float(res.dist["FedAvg"][0]) < 0.2 < 0.5 < float(res.dist["FedAvg, unscaled start"][0])
    assert float(res.median("FedAvg")[1]) < 0.05 < 0.5 < float(res.median("FedAvg, unscaled start")[1])
    assert float(res.cond["FedAvg"][0]) < 1.5 < 5.0 < float(res.cond["FedAvg, unscaled start"][0])  # a collapsed direction
    for name in s06.FIG4_LEARNED:
        assert float(res.leak[name][0]) <= float(res.dist[name][0]) ** 2 * SMALL4.k + 1e-12  # ||theta_*||^2 = k
    assert res.errors["true representation"].shape == (1, 4, 50)


@pytest.mark.parametrize("bad", [dict(m_news=()), dict(new=0), dict(m=0), dict(k=20), dict(fedavg_tau=0),
                                 dict(fedavg_alpha=0.0)])
def test_fig4_bad_settings_raise(bad):
    with pytest.raises(ValueError):
        s06.run_fig4(s06.Fig4Settings(**bad))


# --------------------------------------------------------------------------- explorer

def test_explorer_curves_exact_head():
    curves = s06.explorer_curves(100, 5, 0.1, 0, rounds=60)
    assert set(curves) == {"round", "dist", "exact"}
    for key in curves:
        assert isinstance(curves[key], np.ndarray) and curves[key].shape == (61,)
    assert np.array_equal(curves["dist"], curves["exact"])
    assert np.array_equal(curves["dist"], s06.explorer_curves(100, 5, 0.1, None, rounds=60)["dist"])
    assert curves["dist"][-1] < 1e-2 * curves["dist"][0]


def test_explorer_curves_gd_heads_are_slower_and_share_the_start():
    curves = s06.explorer_curves(100, 5, 0.1, 1, rounds=100)
    assert curves["dist"][0] == curves["exact"][0]
    assert curves["dist"][-1] > 10 * curves["exact"][-1]


def test_explorer_curves_deterministic():
    a = s06.explorer_curves(50, 5, 0.2, 3, rounds=30, seed=4)
    b = s06.explorer_curves(50, 5, 0.2, 3, rounds=30, seed=4)
    assert all(np.array_equal(a[key], b[key]) for key in a)


@pytest.mark.parametrize("args", [(0, 5, 0.1, 0), (10, 0, 0.1, 0), (10, 5, 0.0, 0), (10, 5, 1.2, 0),
                                  (10, 5, 0.1, -1), (10, 5, 0.1, 1.5), (10.0, 5, 0.1, 0)])
def test_explorer_bad_inputs_raise(args):
    with pytest.raises(ValueError):
        s06.explorer_curves(*args, rounds=5)


def test_explorer_bad_keywords_and_divergence_raise():
    with pytest.raises(ValueError, match="k"):
        s06.explorer_curves(10, 5, 0.5, 0, d=2, k=2, rounds=5)
    with pytest.raises(ValueError, match="rounds"):
        s06.explorer_curves(10, 5, 0.5, 0, rounds=0)
    with pytest.raises(ValueError, match="diverged"):
        s06.explorer_curves(20, 5, 0.5, 10, head_lr=5.0, rounds=50)


def test_explorer_builds_redraws_and_rejects_unknown_settings():
    import ipywidgets

    panel = s06.explorer(n=20, head_steps=1)
    assert isinstance(panel, ipywidgets.VBox)
    shown = panel._repr_mimebundle_()["text/plain"]
    assert "VBox" in shown and " at 0x" not in shown
    out, n_slider = panel.children[-1], panel.children[0].children[0]
    assert len(out.outputs) == 1 and "image/png" in out.outputs[0]["data"]
    first = out.outputs[0]["data"]["image/png"]
    n_slider.value = 50
    assert len(out.outputs) == 1 and out.outputs[0]["data"]["image/png"] != first
    with pytest.raises(ValueError, match="unknown"):
        s06.explorer(tau=2)


def test_theory_tables_numbers_and_figure():
    import matplotlib.pyplot as plt

    res = s06.run_fig4(SMALL4)
    eps = {name: float(res.leak[name].mean()) for name in s06.FIG4_LEARNED}
    theory = s06.theory(SMALL4, eps["FedRep"])
    assert np.isnan(theory["FedRep"](SMALL4.k + 1)) and theory["FedRep"](SMALL4.k + 2) > eps["FedRep"]
    assert np.isnan(theory["local only"](SMALL4.d))
    lines = s06.error_table(res, SMALL4, theory).splitlines()
    assert lines[0].split("|")[0].strip() == "m_new" and len(lines) == 1 + len(SMALL4.m_news)
    numbers = s06.quoted_numbers(res, SMALL4, eps)
    assert numbers["seeds"] == SMALL4.seeds and 0 <= numbers["unscaled-fail"] <= SMALL4.seeds
    fig = s06.plot_new_clients(res, SMALL4, theory)
    assert fig.axes[0].get_yscale() == "log"
    plt.close(fig)
