import math

import pytest
import torch

from replearn.theory import aruba


@pytest.fixture(scope="module")
def iso():
    """Isotropic least-squares family with V << D, 4 seeds x 150 tasks."""
    fam = aruba.TaskFamily(d=10, m=40, radius=10.0, center_norm=3.0, spread=0.15)
    return fam, aruba.sample_tasks(fam, 150, runs=4, seed=0)


@pytest.fixture(scope="module")
def aniso():
    """Two coordinates vary across tasks, eight are (almost) shared."""
    fam = aruba.TaskFamily.anisotropic(10, 2, high=1.0, low=0.01, m=20)
    return fam, aruba.sample_tasks(fam, 200, runs=3, seed=1)


def reference_ogd(X, y, phi, eta, loss, radius):
    """Round-by-round OGD with autograd gradients and a Euclidean projection (scalar eta)."""
    theta, total, gsq = phi.clone(), 0.0, torch.zeros_like(phi)
    for i in range(X.shape[0]):
        t = theta.clone().requires_grad_(True)
        value = aruba.round_losses(X[i:i + 1], y[i:i + 1], t, loss).sum()
        (g,) = torch.autograd.grad(value, t)
        total, gsq = total + float(value.detach()), gsq + g * g
        theta = theta - eta * g
        if theta.norm() > radius:
            theta = theta * radius / theta.norm()
    return total, gsq, theta


@pytest.mark.parametrize("loss", aruba.LOSSES)
def test_ogd_matches_round_by_round_autograd_reference(loss):
    fam = aruba.TaskFamily(d=5, m=15, radius=2.0, center_norm=1.0, spread=0.5, loss=loss)
    tasks = aruba.sample_tasks(fam, 3, seed=4)
    phi = torch.full((5,), 0.3, dtype=torch.float64)
    run = aruba.ogd(tasks.X[0], tasks.y[0], phi, 0.7, loss=loss, radius=2.0, keep_iterates=True)
    for t in range(3):
        total, gsq, last = reference_ogd(tasks.X[0, t], tasks.y[0, t], phi, 0.7, loss, 2.0)
        assert math.isclose(float(run.losses[t].sum()), total, rel_tol=1e-12)
        assert torch.allclose(run.grad_sq[t], gsq, atol=1e-12) and torch.allclose(run.last[t], last, atol=1e-12)
    assert run.iterates.shape == (3, 16, 5) and torch.equal(run.iterates[:, -1], run.last)
    assert bool((run.iterates.norm(dim=-1) <= 2.0 + 1e-12).all())


@pytest.mark.parametrize("loss", aruba.LOSSES)
def test_regret_below_upper_bound(loss):
    fam = aruba.TaskFamily(d=8, m=30, radius=3.0, center_norm=1.5, spread=0.8, loss=loss)
    tasks = aruba.sample_tasks(fam, 40, runs=2, seed=3)
    gen = torch.Generator().manual_seed(0)
    phi = aruba.project_ball(torch.randn(2, 40, 8, generator=gen, dtype=torch.float64), 3.0)
    per_coord = 0.05 + torch.rand(2, 40, 8, generator=gen, dtype=torch.float64)
    for eta in (fam.single_task_rate(), 0.5, per_coord):
        run = aruba.ogd(tasks.X, tasks.y, phi, eta, loss=loss, radius=3.0)
        R = aruba.regret(tasks.X, tasks.y, run.losses, tasks.theta_star, loss)
        data = aruba.regret_upper_bound(phi, tasks.theta_star, eta, grad_sq=run.grad_sq)
        worst = aruba.regret_upper_bound(phi, tasks.theta_star, eta, G=fam.G, m=fam.m)
        per = aruba.regret_upper_bound(phi, tasks.theta_star, eta, G=torch.full((8,), fam.G), m=fam.m)
        assert bool((R <= data + 1e-10).all()) and bool((data <= worst + 1e-10).all())
        assert bool((data <= per + 1e-10).all())
    # the gradient bound G of the family holds round by round
    assert float(run.grad_sq.sum(-1).max()) <= fam.G ** 2 * fam.m * (1 + 1e-12)
    # the regret is a real quantity: with eta tiny OGD barely moves and the regret is positive
    if loss == "squared":
        assert float(R.mean()) > 0


def test_scalar_worst_case_bound_formula():
    phi, star = torch.tensor([1.0, 0.0], dtype=torch.float64), torch.tensor([0.0, 2.0], dtype=torch.float64)
    U = aruba.regret_upper_bound(phi, star, 0.5, G=3.0, m=4)
    assert math.isclose(float(U), 5 / (2 * 0.5) + 0.5 * 9 * 4)
    Uj = aruba.regret_upper_bound(phi, star, torch.tensor([0.5, 1.0]), G=torch.tensor([1.0, 2.0]), m=4)
    assert math.isclose(float(Uj), 1 / 1.0 + 4 / 2.0 + 4 * (0.5 * 1 + 1.0 * 4))


def test_least_squares_comparator_matches_brute_force():
    gen = torch.Generator().manual_seed(5)
    X = torch.randn(6, 12, 4, generator=gen, dtype=torch.float64)
    y = torch.randn(6, 12, generator=gen, dtype=torch.float64) * 3
    free = aruba.least_squares_in_ball(X, y, None)
    assert torch.allclose(free, torch.linalg.lstsq(X, y.unsqueeze(-1)).solution.squeeze(-1), atol=1e-10)
    radius = 0.5 * float(free.norm(dim=-1).min())
    theta = aruba.least_squares_in_ball(X, y, radius)
    assert torch.allclose(theta.norm(dim=-1), torch.full((6,), radius, dtype=torch.float64), atol=1e-12)
    # brute force: projected gradient descent for many steps from 0
    ref = torch.zeros(6, 4, dtype=torch.float64)
    step = 1.0 / float(torch.linalg.matrix_norm(X, ord=2).max()) ** 2
    for _ in range(5000):
        ref = aruba.project_ball(ref - step * (X.mT @ (X @ ref.unsqueeze(-1) - y.unsqueeze(-1))).squeeze(-1), radius)
    assert torch.allclose(theta, ref, atol=1e-8)
    # and no random feasible point does better
    obj = lambda th: 0.5 * ((X @ th.unsqueeze(-1)).squeeze(-1) - y).pow(2).sum(-1)
    cand = aruba.project_ball(radius * torch.randn(500, 6, 4, generator=gen, dtype=torch.float64), radius)
    assert bool((obj(theta) <= obj(cand).amin(0) + 1e-10).all())


def test_weighted_projection_is_the_weighted_nearest_point():
    gen = torch.Generator().manual_seed(6)
    v = 4 * torch.randn(50, 5, generator=gen, dtype=torch.float64)
    w = 0.01 + torch.rand(50, 5, generator=gen, dtype=torch.float64)
    p = aruba.project_ball(v, 1.5, w)
    assert bool((p.norm(dim=-1) <= 1.5 + 1e-12).all())
    cand = aruba.project_ball(torch.randn(2000, 1, 5, generator=gen, dtype=torch.float64), 1.5)
    dist = lambda q: ((q - v) ** 2 / w).sum(-1)
    assert bool((dist(p) <= dist(cand).amin(0) + 1e-10).all())


def test_learned_init_converges_to_mean_and_beats_single_task(iso):
    fam, tasks = iso
    single = aruba.single_task_ogd(tasks)
    meta = aruba.meta_learn(tasks, rate=fam.oracle_rate())
    # follow-the-leader on U_t: phi_{t+1} is the running mean of the optima
    assert torch.allclose(meta.final_init, tasks.theta_star.mean(1), atol=1e-12)
    assert torch.allclose(meta.init[:, 10], tasks.theta_star[:, :10].mean(1), atol=1e-12)
    assert float((meta.final_init - fam.phi_star()).norm(dim=-1).max()) < 0.1 * fam.center_norm
    avg = meta.task_averaged()
    assert bool((avg[:, -1] < avg[:, 4]).all())
    # R-bar approaches the O(V sqrt m) level: below 3/2 V G sqrt m, the bound at phi*, eta = V/(G sqrt m)
    level = 1.5 * fam.V * fam.G * math.sqrt(fam.m)
    assert float(avg[:, -1].max()) < level
    assert float(single.task_averaged()[:, -1].min()) > 5 * float(avg[:, -1].max())
    assert bool((meta.regret <= meta.bound + 1e-10).all())
    # the empirical task similarity matches the family's V
    assert abs(float(aruba.task_similarity(tasks.theta_star).mean()) - fam.V) < 0.15 * fam.V


def test_fast_path_equals_task_by_task_ogd(iso):
    fam, tasks = iso
    meta = aruba.meta_learn(tasks, rate=0.05)
    phi = torch.zeros(tasks.runs, fam.d, dtype=torch.float64)
    for t in range(5):
        run = aruba.ogd(tasks.X[:, t], tasks.y[:, t], phi, 0.05, radius=fam.radius)
        R = aruba.regret(tasks.X[:, t], tasks.y[:, t], run.losses, tasks.theta_star[:, t])
        assert torch.allclose(meta.regret[:, t], R, atol=1e-12)
        phi = phi + (tasks.theta_star[:, t] - phi) / (t + 1)


def test_reptile_last_iterate_moves_init_towards_mean(iso):
    fam, tasks = iso
    reptile = aruba.meta_learn(tasks, target="last_iterate", rate=fam.single_task_rate())
    start = float(fam.phi_star().norm())
    assert float((reptile.final_init - fam.phi_star()).norm(dim=-1).max()) < 0.5 * start
    assert float(reptile.task_averaged()[:, -1].max()) < float(aruba.single_task_ogd(tasks).task_averaged()[:, -1].min())


def test_aruba_rates_follow_the_spread_and_win_on_anisotropic_tasks(aniso):
    fam, tasks = aniso
    runs = {name: aruba.meta_learn(tasks, rate=name) for name in ("aruba", "aruba_scalar")}
    runs["oracle"] = aruba.meta_learn(tasks, rate=fam.oracle_rate())
    for eta0 in (0.03, 0.1, 0.3):
        runs[f"adagrad {eta0}"] = aruba.meta_learn(tasks, rate="adagrad", eta0=eta0)
    late = {name: float(r.regret[:, -100:].mean()) for name, r in runs.items()}
    best_other = min(v for k, v in late.items() if k != "aruba")
    assert late["aruba"] < 0.85 * best_other, late
    eta = runs["aruba"].rate[:, -1]                      # (runs, d)
    assert bool((eta[:, :2].amin(-1) > 2.5 * eta[:, 2:].amax(-1)).all())
    assert runs["aruba"].rate[:, 0].allclose(torch.tensor(fam.single_task_rate(), dtype=torch.float64))
    assert bool((runs["aruba"].regret <= runs["aruba"].bound + 1e-10).all())
    assert runs["adagrad 0.1"].bound is None


def test_task_averaged_regret():
    R = torch.tensor([[3.0, 1.0, 2.0]])
    assert torch.equal(aruba.task_averaged_regret(R), torch.tensor([[3.0, 2.0, 2.0]]))


def test_reproducible_and_seed_dependent():
    fam = aruba.TaskFamily(d=6, m=10, loss="logistic")
    a, b = aruba.sample_tasks(fam, 20, runs=2, seed=7), aruba.sample_tasks(fam, 20, runs=2, seed=7)
    c = aruba.sample_tasks(fam, 20, runs=2, seed=8)
    assert torch.equal(a.X, b.X) and torch.equal(a.y, b.y) and not torch.equal(a.X, c.X)
    ra, rb = aruba.meta_learn(a, rate="aruba"), aruba.meta_learn(b, rate="aruba")
    assert torch.equal(ra.regret, rb.regret) and torch.equal(ra.rate, rb.rate)
    assert set(a.y.unique().tolist()) == {-1.0, 1.0}


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="loss"):
        aruba.TaskFamily(loss="hinge")
    with pytest.raises(ValueError, match="spread"):
        aruba.TaskFamily(d=3, spread=(1.0, 2.0))
    with pytest.raises(ValueError, match="inside the ball"):
        aruba.TaskFamily(radius=1.0, center_norm=2.0)
    with pytest.raises(ValueError, match="seed"):
        aruba.sample_tasks(aruba.TaskFamily(), 3, seed=None)
    fam = aruba.TaskFamily(d=4, m=6)
    tasks = aruba.sample_tasks(fam, 3, seed=0)
    X, y, phi = tasks.X[0], tasks.y[0], torch.zeros(4, dtype=torch.float64)
    with pytest.raises(ValueError, match="positive"):
        aruba.ogd(X, y, phi, -0.1)
    with pytest.raises(ValueError, match="last axis"):
        aruba.ogd(X, y, phi, torch.ones(3))
    with pytest.raises(ValueError, match="outside the ball"):
        aruba.ogd(X, y, torch.full((4,), 20.0, dtype=torch.float64), 0.1, radius=1.0)
    with pytest.raises(ValueError, match="diverged"):
        aruba.ogd(X, y, phi, 1e6 * torch.ones(1), radius=None)
    with pytest.raises(ValueError, match="NaN"):
        aruba.ogd(X, y, torch.full((4,), float("nan"), dtype=torch.float64), 0.1)
    with pytest.raises(ValueError, match="exactly one"):
        aruba.regret_upper_bound(phi, phi, 0.1)
    with pytest.raises(ValueError, match="init"):
        aruba.meta_learn(tasks, init="random")
    with pytest.raises(ValueError, match="eta0"):
        aruba.meta_learn(tasks, rate="adagrad")
    with pytest.raises(ValueError, match="rate"):
        aruba.meta_learn(tasks, rate="adam")
    with pytest.raises(ValueError, match="phi0"):
        aruba.meta_learn(tasks, phi0=torch.zeros(5, dtype=torch.float64))
    with pytest.raises(ValueError, match="smoothing"):
        aruba.meta_learn(tasks, power=1.0)


# --------------------------------------------------------------------------- measurements and bounds (3.1-3.3)

def test_late_mean_is_the_second_half_mean():
    R = torch.tensor([[1.0, 2.0, 3.0, 5.0], [0.0, 0.0, 1.0, 3.0]], dtype=torch.float64)
    assert aruba.late_mean(R) == 3.0
    assert aruba.late_mean(R[:, :3]) == 1.5                        # T = 3: tasks 2 and 3


def test_fixed_rate_sweep_matches_meta_learn_and_marks_divergence():
    fam = aruba.TaskFamily(d=4, m=6, radius=1e12)                   # (almost) no ball: a huge rate diverges
    tasks = aruba.sample_tasks(fam, 10, runs=2, seed=0)
    sweep = aruba.fixed_rate_sweep(tasks, (0.01, 1e3))
    assert sweep.shape == (2,) and sweep.dtype == torch.float64
    assert float(sweep[0]) == aruba.late_mean(aruba.meta_learn(tasks, init="learned", rate=0.01).regret)
    assert math.isnan(float(sweep[1]))
    fixed = aruba.fixed_rate_sweep(tasks, (0.01,), init="fixed")
    assert float(fixed[0]) == aruba.late_mean(aruba.meta_learn(tasks, init="fixed", rate=0.01).regret)


def test_rademacher_regret_formula_and_bounds():
    m, D = 30, 2.0
    r = aruba.rademacher_regret(m, D, 200, seed=3)
    assert r.shape == (200,)
    assert bool((r <= D * math.sqrt(m) + 1e-9).all())           # OGD's upper bound with G = 1
    assert abs(float(r.mean()) - D * aruba.expected_abs_walk(m)) < 4 * float(r.std()) / math.sqrt(200)


def test_expected_abs_walk_small_cases():
    assert aruba.expected_abs_walk(1) == 1.0
    assert aruba.expected_abs_walk(2) == 1.0
    assert aruba.expected_abs_walk(3) == 1.5
    assert aruba.expected_abs_walk(100) >= math.sqrt(100 / 3)


def test_ftl_meta_regret_matches_definition():
    gen = torch.Generator().manual_seed(0)
    star = torch.randn(1, 6, 3, generator=gen, dtype=torch.float64)
    means = star.cumsum(1) / torch.arange(1, 7, dtype=torch.float64)[:, None]
    init = torch.cat([torch.zeros(1, 1, 3, dtype=torch.float64), means[:, :-1]], 1)
    regret, bound = aruba.ftl_meta_regret(init, star)
    direct = sum(float((init[0, t] - star[0, t]).pow(2).sum()) for t in range(6)) \
        - sum(float((star[0].mean(0) - star[0, t]).pow(2).sum()) for t in range(6))
    assert abs(float(regret) - direct) < 1e-12 and float(regret) <= float(bound)
    with pytest.raises(ValueError, match="runs, T, d"):
        aruba.ftl_meta_regret(init[0], star[0])


def test_average_regret_bound_value():
    assert math.isclose(aruba.average_regret_bound(1.0, 1.0, 4, 1, 1.0, 0.5), 8 + 1 + 1)


def test_convexity_gaps_nonnegative():
    for per_coordinate in (True, False):
        assert bool((aruba.convexity_gaps(300, 4, per_coordinate=per_coordinate, seed=1) >= -1e-12).all())


@pytest.mark.parametrize("bad", [
    lambda: aruba.rademacher_regret(0, 1.0, 5),
    lambda: aruba.rademacher_regret(5, -1.0, 5),
    lambda: aruba.expected_abs_walk(0),
    lambda: aruba.convexity_gaps(0),
    lambda: aruba.average_regret_bound(1.0, 1.0, 10, 0, 1.0, 0.1),
])
def test_measurement_bad_inputs_raise(bad):
    with pytest.raises(ValueError):
        bad()
