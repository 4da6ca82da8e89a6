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
