"""Book 5.4 driver (replearn.experiments.ch05_fedrep.s04_fig1_local_vs_global): Fig. 1, local only,
one global model and FedRep on fixed data."""

import pytest
import torch

from replearn.experiments.ch05_fedrep import s04_fig1_local_vs_global as s04

# n m >= 250 samples in d = 20: with n = 30, m = 5 the method-of-moments start is often too far for
# FedRep to converge within 100 rounds (3 of the first 4 seeds drawn by derive_seed)
SMALL1 = s04.Fig1Settings(n=50, ms=(5, 20), rounds=100, seeds=2)


def test_paper_profile_has_the_papers_sizes():
    p1 = s04.Fig1Settings.profile("paper")
    assert (p1.d, p1.k, p1.n, p1.ms) == (20, 2, 100, (5, 10, 20))


def test_fig1_fedrep_beats_both_baselines():
    res = s04.run_fig1(SMALL1)
    assert set(res.errors) == set(s04.FIG1_METHODS)
    for name in s04.FIG1_METHODS:
        assert res.errors[name].shape == (2, 2)
    assert bool((res.mean("FedRep") < 0.05 * res.mean("local only")).all())
    assert bool((res.mean("single model") > 0.8).all())
    assert float(res.mean("local only")[1]) < float(res.mean("local only")[0])
    assert bool((res.dist < res.dist0).all())


def test_fig1_is_deterministic():
    a, b = s04.run_fig1(SMALL1), s04.run_fig1(SMALL1)
    assert all(torch.equal(a.errors[k], b.errors[k]) for k in a.errors)


@pytest.mark.parametrize("bad", [dict(d=2, k=2), dict(ms=()), dict(ms=(0,)), dict(eta=0.0),
                                 dict(noise_std=-1.0), dict(seeds=0), dict(ridge=-1.0)])
def test_fig1_bad_settings_raise(bad):
    with pytest.raises(ValueError):
        s04.run_fig1(s04.Fig1Settings(**bad))


def test_error_table():
    res = s04.run_fig1(SMALL1)
    lines = s04.error_table(res, SMALL1).splitlines()
    assert lines[0].split("|")[0].strip() == "m" and len(lines) == 1 + len(SMALL1.ms)
    assert lines[1].split("|")[0].strip() == "5" and "e-4 ±" in lines[1]
