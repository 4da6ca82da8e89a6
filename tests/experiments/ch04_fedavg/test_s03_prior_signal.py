from dataclasses import replace

import torch

from replearn.theory import linear_federated, meta
from replearn.experiments.ch04_fedavg import s03_prior_signal as s03
from replearn.theory.fedavg_problems import make_problem

SMALL = s03.PriorSignalSettings(d=12, k=3, M=8, alpha=0.3, rounds=300)


def test_global_update_matches_local_steps_along_a_run():
    errors = s03.decomposition_errors(SMALL, rounds=20)
    assert errors["fedavg"] < 1e-10 and errors["local updates"] < 1e-10


def test_tau_one_signal_is_the_arm_step_and_rank_one():
    pb = make_problem(SMALL, 0)
    w = 0.3 * torch.ones(SMALL.k, dtype=torch.float64)
    prior, signal = linear_federated.global_update_weights(pb.B0, w, pb.Bstar, pb.W, alpha=SMALL.alpha, tau=1)
    prior_arm, signal_arm = meta.arm_decomposition(w, pb.W, SMALL.alpha)
    assert torch.allclose(prior, prior_arm, atol=1e-13) and torch.allclose(signal, signal_arm, atol=1e-13)


def test_signal_rank_follows_tau_and_head_span():
    spectra = s03.signal_spectra(SMALL, taus=(1, 2, 5))
    k = SMALL.k
    for family, expected in (("diverse", k), ("degenerate", k - 1)):
        sv = spectra[family]
        assert int((sv[1] > 1e-10 * sv[1][0]).sum()) == 1
        for tau in (2, 5):
            assert int((sv[tau] > 1e-10 * sv[tau][0]).sum()) == expected


def test_contraction_identity_and_prior_norm():
    res = s03.contraction(replace(SMALL, rounds=150))
    assert bool((res.perp_ratio <= res.prior_norm + 1e-12).all())
    assert float(res.prior_norm.max()) <= 1.0
    assert float(res.delta.max()) < 0.2


def test_paper_profile():
    paper = s03.PriorSignalSettings.profile("paper")
    assert isinstance(paper, s03.PriorSignalSettings) and (paper.d, paper.M, paper.rounds) == (100, 40, 1000)
