import math

import pytest
import torch

from replearn.theory import sinusoid
from replearn.experiments.ch03_aruba import s05_neural as s05

TINY = s05.ArubaNeuralSettings(hidden=16, meta_iterations=60, meta_batch=4, eval_tasks=40,
                               rate_grid=(0.003, 0.01))


def test_reptile_is_the_library_meta_learner_with_the_settings():
    ours = s05.reptile(TINY, learn_rate=False, seed=3)
    lib = sinusoid.reptile(hidden=16, shots=TINY.shots, inner_steps=TINY.inner_steps, meta_iterations=60, meta_batch=4,
                           meta_step=TINY.meta_step, eta0=TINY.eta0, smoothing=TINY.smoothing, power=TINY.power,
                           learn_rate=False, seed=3)
    assert all(torch.equal(ours.phi[g], lib.phi[g]) for g in sinusoid.GROUPS)


def test_run_is_deterministic_and_meta_learning_helps():
    r1, r2 = s05.run(TINY), s05.run(TINY)
    assert r1.final_loss() == r2.final_loss()
    loss = r1.final_loss()
    assert loss["meta init + ARUBA rates"] < loss["random init + single tuned rate"]
    assert set(r1.layer_rates) == {"layer 1", "layer 2", "head"}
    assert r1.aruba.rates.shape == (TINY.meta_iterations, 6)
    assert torch.allclose(r1.aruba.rates[0], torch.full((6,), TINY.eta0, dtype=torch.float64))
    assert all(math.isfinite(v) and v > 0 for v in r1.aruba.eta.values())


@pytest.mark.parametrize("bad", [dict(hidden=0), dict(eta0=-1.0), dict(power=1.0), dict(rate_grid=())])
def test_bad_settings_raise(bad):
    with pytest.raises(ValueError):
        s05.run(s05.ArubaNeuralSettings(**bad))


def test_moves_gradients_and_figures():
    import matplotlib.pyplot as plt

    res = s05.run(TINY)
    valid = sinusoid.sinusoid_tasks(20, TINY.shots, TINY.query, seed=3)
    adapted, grad_sq, _ = sinusoid.adapt(res.aruba.phi, valid, res.aruba.eta, TINY.inner_steps)
    moves, grads = s05.moves_and_gradients(res, adapted, grad_sq, TINY.inner_steps)
    assert list(moves) == list(sinusoid.GROUPS) == list(grads)
    assert all(v >= 0 for v in moves.values()) and all(v > 0 for v in grads.values())
    for fig in (s05.plot_rates(res, TINY), s05.plot_adaptation(res, TINY.inner_steps)):
        assert fig.axes
        plt.close(fig)
