from dataclasses import replace

import pytest
import torch

from replearn.theory import linear_federated, linear
from replearn.experiments.ch04_fedavg import s05_generalisation as s05

TINY = s05.GeneralisationSettings(d=8, k=2, M=6, rounds=1500, ns=(3, 30), runs=2, clients=4, ft_steps=50)


def test_gradient_norms_match_the_library_and_dgd_reaches_a_stationary_point():
    cfg = replace(TINY, rounds=3000)
    Bstar, W, trajectories = s05.train(cfg, 0, "cpu")
    v = Bstar @ W.mean(0)
    tasks = linear.population_tasks(Bstar, W)
    for tr in trajectories.values():
        g = linear_federated.global_gradient_norms(tr, v)
        assert g.shape == (cfg.rounds + 1,)
        for t in (0, 1, 7, cfg.rounds):
            assert float(g[t]) == pytest.approx(float(linear_federated.global_gradient_norm(tr.B[t], tr.w[t], tasks)),
                                                rel=1e-10, abs=1e-15)
    g_dgd = linear_federated.global_gradient_norms(trajectories["D-GD"], v)
    g_fed = linear_federated.global_gradient_norms(trajectories["FedAvg"], v)
    assert float(g_dgd[-1]) < 1e-6 * float(g_dgd[0])   # D-GD converges to a stationary point ...
    assert float(g_fed[-1]) > 1e-2 * float(g_fed[0])   # ... FedAvg's gradient levels off


def test_finetuning_from_the_true_representation_with_many_samples_is_accurate():
    d, k, n = 10, 2, 400
    Bstar = linear.ground_truth_representation(d, k, seed=5)
    theta, X, y = s05.new_clients(Bstar, n, 6, 0.1, seed=6)
    B = (Bstar / 0.2**0.5).expand(6, d, k)
    w = torch.zeros(6, k, dtype=B.dtype)
    B_ft, w_ft = linear.finetune_joint(B, w, X, y, lr=linear.stable_finetune_step(B, w, X, 0.25), steps=200)
    assert float(linear.excess_risk(B_ft, w_ft, theta).max()) < 0.01
    head = linear.finetune_head(B, X, y)
    assert float(linear.excess_risk(B, head, theta).max()) < 0.01
    # and from a representation orthogonal to col(B_*), head-only fine-tuning learns nothing
    perp = torch.linalg.svd(Bstar, full_matrices=True).U[:, k:2 * k].expand(6, d, k)
    miss = linear.excess_risk(perp, linear.finetune_head(perp, X, y), theta)
    assert torch.allclose(miss, theta.pow(2).sum(-1), rtol=0.05)


def test_run_shapes_claims_and_reproducibility(monkeypatch):
    res = s05.run(TINY, device="cpu")
    assert res.rounds.shape == (TINY.rounds + 1,)
    assert res.ns.tolist() == list(TINY.ns)
    for m in s05.METHODS:
        assert res.grad_norm[m].shape == (TINY.runs, TINY.rounds + 1)
        assert res.dist[m].shape == (TINY.runs,)
        assert res.steps[m].shape == (2, TINY.runs, TINY.clients)
    for name in s05.ERRORS:
        assert res.errors[name].shape == (2, TINY.runs, TINY.clients)
        assert res.mean(name).shape == (2,) and res.run_means(name).shape == (2, TINY.runs)
        assert bool((res.errors[name] >= 0).all())
    assert float(res.dist["FedAvg"].max()) < 1e-3 < float(res.dist["D-GD"].min())
    assert float(res.mean("FedAvg")[0]) < float(res.mean("D-GD")[0])
    again = s05.run(TINY, device="cpu")
    for name in s05.ERRORS:
        assert torch.equal(res.errors[name], again.errors[name])
    assert torch.equal(res.grad_norm["FedAvg"], again.grad_norm["FedAvg"])
    other = s05.run(replace(TINY, seed=1, rounds=10), device="cpu")
    assert not torch.equal(other.errors[s05.ORACLE], res.errors[s05.ORACLE])
    monkeypatch.setenv("REPLEARN_PROFILE", "paper")
    paper = s05.GeneralisationSettings.current()
    assert (paper.d, paper.k, paper.M, paper.tau, paper.runs, paper.ft_steps) == (100, 5, 40, 2, 10, 200)


@pytest.mark.parametrize("change, message", [
    (dict(k=8), "k < d"),
    (dict(tau=1), "tau"),
    (dict(ns=()), "must not be empty"),
    (dict(ns=(3, 0)), "every n"),
    (dict(ft_lr=2.0), "ft_lr"),
    (dict(alpha=-0.1), "alpha"),
    (dict(noise_std=-1.0), "noise_std"),
    (dict(runs=0), "runs"),
    (dict(seed=-1), "seed"),
])
def test_bad_settings_raise(change, message):
    with pytest.raises(ValueError, match=message):
        s05.run(replace(TINY, **change), device="cpu")


def test_tables_formula_and_figure():
    import matplotlib.pyplot as plt

    from replearn.theory.linear import expected_head_error

    res = s05.run(TINY)
    grad = s05.gradient_table(res, TINY).splitlines()
    assert grad[0] == f"runs: {TINY.runs}, rounds: {TINY.rounds}, step alpha = {TINY.alpha}" and len(grad) == 6
    text = "\n".join(grad)   # numbers and words, nothing in Python's voice
    assert not any(python in text for python in ("[", "]", "True", "False")) and "in every run" in text
    errors = s05.error_table(res, TINY).splitlines()
    assert errors[2].split()[0] == "n" and len(errors) == 3 + len(TINY.ns)
    formula = s05.head_formula(res, TINY)
    assert set(formula) == set(s05.METHODS) and formula["D-GD"].shape == (len(TINY.ns),)
    expected = sum(expected_head_error(TINY.ns[1], TINY.k, TINY.noise_std**2, float(F))
                   for F in res.floor["D-GD"]) / TINY.runs
    assert float(formula["D-GD"][1]) == pytest.approx(expected)
    fig = s05.plot_generalisation(res, TINY)
    assert len(fig.axes) == 2
    plt.close(fig)
