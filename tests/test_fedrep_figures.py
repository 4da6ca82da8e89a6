import math

import numpy as np
import pytest
import torch

from replearn.experiments import fedrep_figures as ff
from replearn.widgets import fedrep_explorer, fedrep_explorer_curves

# n m >= 250 samples in d = 20: with n = 30, m = 5 the method-of-moments start is often too far for
# FedRep to converge within 100 rounds (3 of the first 4 seeds drawn by derive_seed)
SMALL1 = ff.Fig1Settings(n=50, ms=(5, 20), rounds=100, seeds=2)
SMALL3 = ff.Fig3Settings(ns=(100,), rounds=100, seeds=1)
SMALL4 = ff.Fig4Settings(n=40, rounds=100, m_news=(2, 4, 10, 40), new=50, seeds=1)


def test_paper_profiles_have_the_papers_sizes():
    p1, p3, p4 = ff.Fig1Settings.paper(), ff.Fig3Settings.paper(), ff.Fig4Settings.paper()
    assert (p1.d, p1.k, p1.n, p1.ms) == (20, 2, 100, (5, 10, 20))
    assert (p3.d, p3.k, p3.m, p3.r) == (10, 2, 5, 0.1) and len(p3.ns) == 4
    assert p3.noise_std == pytest.approx(math.sqrt(1e-3))
    assert (p4.d, p4.k, p4.n) == (20, 2, 100)


def test_fig1_fedrep_beats_both_baselines():
    res = ff.run_fig1(SMALL1)
    assert set(res.errors) == set(ff.FIG1_METHODS)
    for name in ff.FIG1_METHODS:
        assert res.errors[name].shape == (2, 2)
    assert bool((res.mean("FedRep") < 0.05 * res.mean("local only")).all())
    assert bool((res.mean("single model") > 0.8).all())
    assert float(res.mean("local only")[1]) < float(res.mean("local only")[0])
    assert bool((res.dist < res.dist0).all())


def test_fig1_is_deterministic():
    a, b = ff.run_fig1(SMALL1), ff.run_fig1(SMALL1)
    assert all(torch.equal(a.errors[k], b.errors[k]) for k in a.errors)


def test_fig3_shapes_and_ordering_noiseless():
    res = ff.run_fig3(SMALL3)
    curves = res.dist[100]
    assert set(curves) == set(ff.FIG3_METHODS) and curves["FedRep"].shape == (1, 101)
    # shared start
    assert float(curves["FedRep"][0, 0]) == float(curves["GD-GD"][0, 0])
    end = {name: float(res.geometric_mean(100, name)[-1]) for name in ff.FIG3_METHODS}
    assert end["FedRep"] < end["10GD-GD"] < end["GD-GD"] < 0.1


def test_rounds_to_reach():
    curve = torch.tensor([1.0, 0.5, 0.1, 0.01])
    assert ff.rounds_to_reach(curve, 0.1) == 2 and ff.rounds_to_reach(curve, 1e-3) is None


def test_fig4_new_clients_need_k_samples_on_fedrep():
    res = ff.run_fig4(SMALL4)
    fed, local = res.median("FedRep"), res.median("local only")
    assert float(fed[1]) < 0.02 and float(local[1]) > 0.5  # m_new = 4 < d
    assert float(local[-1]) < 0.01  # m_new = 2d


def test_fig4_fedavg_learns_the_representation_only_from_the_scaled_start():
    # the scaled start B_0 = Q/sqrt(alpha) of Collins et al. (2022) learns col(B_*) on the
    # training clients' data, so a head fitted on it serves new clients; the unscaled start
    # Q (alpha B_0^T B_0 = alpha I) stays far from col(B_*) on this seed (after 100 rounds the scaled
    # start is at distance 0.09-0.15 on the first four seeds, the unscaled one at 0.6-1)
    res = ff.run_fig4(SMALL4)
    assert float(res.dist["FedAvg"][0]) < 0.2 < 0.5 < float(res.dist["FedAvg, unscaled start"][0])
    assert float(res.median("FedAvg")[1]) < 0.05 < 0.5 < float(res.median("FedAvg, unscaled start")[1])
    assert float(res.cond["FedAvg"][0]) < 1.5 < 5.0 < float(res.cond["FedAvg, unscaled start"][0])  # a collapsed direction
    for name in ff.FIG4_LEARNED:
        assert float(res.leak[name][0]) <= float(res.dist[name][0]) ** 2 * SMALL4.k + 1e-12  # ||theta_*||^2 = k
    assert res.errors["true representation"].shape == (1, 4, 50)


@pytest.mark.parametrize("bad", [dict(d=2, k=2), dict(ms=()), dict(ms=(0,)), dict(eta=0.0),
                                 dict(noise_std=-1.0), dict(seeds=0), dict(ridge=-1.0)])
def test_fig1_bad_settings_raise(bad):
    with pytest.raises(ValueError):
        ff.run_fig1(ff.Fig1Settings(**bad))


@pytest.mark.parametrize("bad", [dict(r=0.0), dict(r=1.5), dict(ns=()), dict(head_lr=0.0), dict(m=0),
                                 dict(rounds=0)])
def test_fig3_bad_settings_raise(bad):
    with pytest.raises(ValueError):
        ff.run_fig3(ff.Fig3Settings(**bad))


@pytest.mark.parametrize("bad", [dict(m_news=()), dict(new=0), dict(m=0), dict(k=20), dict(fedavg_tau=0),
                                 dict(fedavg_alpha=0.0)])
def test_fig4_bad_settings_raise(bad):
    with pytest.raises(ValueError):
        ff.run_fig4(ff.Fig4Settings(**bad))


# --------------------------------------------------------------------------- explorer

def test_explorer_curves_exact_head():
    curves = fedrep_explorer_curves(100, 5, 0.1, 0, rounds=60)
    assert set(curves) == {"round", "dist", "exact"}
    for key in curves:
        assert isinstance(curves[key], np.ndarray) and curves[key].shape == (61,)
    assert np.array_equal(curves["dist"], curves["exact"])
    assert np.array_equal(curves["dist"], fedrep_explorer_curves(100, 5, 0.1, None, rounds=60)["dist"])
    assert curves["dist"][-1] < 1e-2 * curves["dist"][0]


def test_explorer_curves_gd_heads_are_slower_and_share_the_start():
    curves = fedrep_explorer_curves(100, 5, 0.1, 1, rounds=100)
    assert curves["dist"][0] == curves["exact"][0]
    assert curves["dist"][-1] > 10 * curves["exact"][-1]


def test_explorer_curves_deterministic():
    a = fedrep_explorer_curves(50, 5, 0.2, 3, rounds=30, seed=4)
    b = fedrep_explorer_curves(50, 5, 0.2, 3, rounds=30, seed=4)
    assert all(np.array_equal(a[key], b[key]) for key in a)


@pytest.mark.parametrize("args", [(0, 5, 0.1, 0), (10, 0, 0.1, 0), (10, 5, 0.0, 0), (10, 5, 1.2, 0),
                                  (10, 5, 0.1, -1), (10, 5, 0.1, 1.5), (10.0, 5, 0.1, 0)])
def test_explorer_bad_inputs_raise(args):
    with pytest.raises(ValueError):
        fedrep_explorer_curves(*args, rounds=5)


def test_explorer_bad_keywords_and_divergence_raise():
    with pytest.raises(ValueError, match="k"):
        fedrep_explorer_curves(10, 5, 0.5, 0, d=2, k=2, rounds=5)
    with pytest.raises(ValueError, match="rounds"):
        fedrep_explorer_curves(10, 5, 0.5, 0, rounds=0)
    with pytest.raises(ValueError, match="diverged"):
        fedrep_explorer_curves(20, 5, 0.5, 10, head_lr=5.0, rounds=50)


def test_explorer_builds_redraws_and_rejects_unknown_settings():
    import ipywidgets

    panel = fedrep_explorer(n=20, head_steps=1)
    assert isinstance(panel, ipywidgets.VBox)
    shown = panel._repr_mimebundle_()["text/plain"]
    assert "VBox" in shown and " at 0x" not in shown
    out, n_slider = panel.children[-1], panel.children[0].children[0]
    assert len(out.outputs) == 1 and "image/png" in out.outputs[0]["data"]
    first = out.outputs[0]["data"]["image/png"]
    n_slider.value = 50
    assert len(out.outputs) == 1 and out.outputs[0]["data"]["image/png"] != first
    with pytest.raises(ValueError, match="unknown"):
        fedrep_explorer(tau=2)
