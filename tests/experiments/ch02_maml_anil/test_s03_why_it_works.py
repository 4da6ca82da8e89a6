from replearn.experiments.ch02_maml_anil import s03_why_it_works as s03

SMALL = s03.HypothesesSettings(d=8, k=2, n=6, iterations=120)


def test_decomposition_check():
    dec = s03.decomposition_check(SMALL)
    assert dec["error"] < 1e-10 and float(dec["signal_min_sv"].min()) > 0
    assert float(dec["arm_signal_sv"].max()) < 1e-12  # centred heads, ARM's signal weight vanishes


def test_hypotheses_diverse_vs_degenerate():
    div = s03.hypotheses_runs(SMALL)["FO-ANIL"]
    deg = s03.hypotheses_runs(SMALL, degenerate=True)["FO-ANIL"]
    assert float(div["psi_cond"].max()) < 2 * SMALL.cond and bool((div["perp_ratio"][1:] < 1).all())
    assert bool((deg["psi_cond"] > 1e8).all()) and float(deg["dist"][-1]) > 0.5 * SMALL.delta0


def test_check_hypotheses_names_a1_to_a6_and_fails_a_violated_one():
    import torch

    hyp = s03.hypotheses_runs(SMALL)
    rho = 1 - 0.25 * SMALL.beta * SMALL.alpha * SMALL.mu2
    checks = s03.check_hypotheses(hyp["ANIL"], SMALL, rho)
    assert list(checks) == ["A1", "A2", "A3", "A4", "A5", "A6"] and all(checks.values())
    broken = dict(hyp["ANIL"], w_norm=hyp["ANIL"]["w_norm"] + 10.0)
    assert not s03.check_hypotheses(broken, SMALL, rho)["A1"]
    grown = dict(hyp["ANIL"], dist=torch.ones_like(hyp["ANIL"]["dist"]))
    assert not s03.check_hypotheses(grown, SMALL, rho)["A6"]


def test_plot_hypotheses_draws_six_panels():
    import matplotlib.pyplot as plt

    hyp = s03.hypotheses_runs(SMALL)
    fig = s03.plot_hypotheses(hyp, SMALL, rho=0.99)
    assert len(fig.axes) == 6 and fig.axes[0].get_title().startswith("A1")
    plt.close(fig)
