import numpy as np
import pytest
import torch

from replearn.theory import linalg, linear, maml, meta

ALPHA = 0.25


@pytest.fixture(scope="module")
def inst():
    """d = 20, k = 3, n = 20 diverse heads, population losses."""
    d, k, n = 20, 3, 20
    Bstar = linear.ground_truth_representation(d, k, seed=1)
    W = linear.make_heads(n, k, mean_norm=0.0, cond=2.0, seed=2)
    return dict(d=d, k=k, n=n, Bstar=Bstar, W=W, tasks=linear.population_tasks(Bstar, W))


def point(inst, seed=5):
    gen = torch.Generator().manual_seed(seed)
    B = torch.randn(inst["d"], inst["k"], generator=gen, dtype=torch.float64) / 3
    w = torch.randn(inst["k"], generator=gen, dtype=torch.float64)
    return B, w


def autograd_meta_gradient(B, w, tasks, outer, algorithm, alpha):
    """Plain torch.autograd through a Python loop over tasks (the test oracle)."""
    B = B.clone().requires_grad_(True)
    w = w.clone().requires_grad_(True)
    first_order = algorithm.startswith("FO-")
    total = 0.0
    for i in range(tasks.n):
        idx = torch.tensor([i])
        f_in = tasks.loss_theta(B @ w, idx).sum()
        gB, gw = torch.autograd.grad(f_in, (B, w), create_graph=not first_order)
        B_i = B - alpha * gB if "MAML" in algorithm else B
        w_i = w - alpha * gw
        if first_order:
            B_i, w_i = B_i.detach().requires_grad_(True), w_i.detach().requires_grad_(True)
            GB, Gw = torch.autograd.grad(outer.loss_theta(B_i @ w_i, idx).sum(), (B_i, w_i))
            total = total + torch.cat([GB.flatten(), Gw])
        else:
            total = total + outer.loss_theta(B_i @ w_i, idx).sum()
    if first_order:
        return total[:-w.shape[0]].reshape(B.shape) / tasks.n, total[-w.shape[0]:] / tasks.n
    GB, Gw = torch.autograd.grad(total / tasks.n, (B, w))
    return GB, Gw


@pytest.mark.parametrize("algorithm", maml.ALGORITHMS)
@pytest.mark.parametrize("sampled", [False, True])
def test_meta_gradient_matches_autograd(inst, algorithm, sampled):
    B, w = point(inst)
    tasks = inst["tasks"]
    outer = None
    if sampled:
        tasks, outer = maml.split_tasks(linear.sample_tasks(inst["Bstar"], inst["W"], 9, noise_std=0.1, seed=4), 4)
    GB, Gw = maml.meta_gradient(B, w, tasks, algorithm=algorithm, alpha=ALPHA, outer_tasks=outer)
    RB, Rw = autograd_meta_gradient(B, w, tasks, tasks if outer is None else outer, algorithm, ALPHA)
    assert torch.allclose(GB, RB, atol=1e-12) and torch.allclose(Gw, Rw, atol=1e-12)
    if not algorithm.startswith("FO-"):  # exact: the gradient of the meta-objective
        Bg, wg = B.clone().requires_grad_(True), w.clone().requires_grad_(True)
        obj = maml.meta_objective(Bg, wg, tasks, algorithm=algorithm, alpha=ALPHA, outer_tasks=outer)
        OB, Ow = torch.autograd.grad(obj, (Bg, wg))
        assert torch.allclose(GB, OB, atol=1e-12) and torch.allclose(Gw, Ow, atol=1e-12)


def test_first_order_differs_from_exact(inst):
    B, w = point(inst)
    exact = maml.meta_gradient(B, w, inst["tasks"], algorithm="ANIL", alpha=ALPHA)[0]
    first = maml.meta_gradient(B, w, inst["tasks"], algorithm="FO-ANIL", alpha=ALPHA)[0]
    assert (exact - first).norm() > 1e-3 * exact.norm()


def test_adapted_heads_closed_form(inst):
    B, w = point(inst)
    heads = maml.adapted_heads(B, w, inst["Bstar"], inst["W"], ALPHA)
    _, gw = linear.grads(B, w, inst["tasks"])
    assert torch.allclose(heads, w - ALPHA * gw, atol=1e-13)
    # broadcasting over a stack of iterates
    stack = maml.adapted_heads(torch.stack([B, 2 * B]), torch.stack([w, w]), inst["Bstar"], inst["W"], ALPHA)
    assert torch.allclose(stack[0], heads) and stack.shape == (2, inst["n"], inst["k"])


def test_fo_anil_decomposition_matches_the_code_step(inst):
    beta = 0.3
    B0, w0 = maml.structured_init(inst["Bstar"], ALPHA, 0.5, seed=3)
    traj = maml.meta_train(B0, w0 + 0.1, inst["tasks"], algorithm="FO-ANIL", alpha=ALPHA, beta=beta,
                           iterations=10)
    for t in range(10):
        prior, signal = maml.fo_anil_decomposition(traj.B[t], traj.w[t], inst["Bstar"], inst["W"],
                                                   alpha=ALPHA, beta=beta)
        assert torch.allclose(traj.B[t] @ prior + inst["Bstar"] @ signal, traj.B[t + 1], atol=1e-12)
    # unlike ARM's, both weights have full rank k when the adapted heads are diverse
    assert int(torch.linalg.matrix_rank(signal)) == inst["k"]
    # the same step with the global head w_t in place of the adapted heads (ARM) does not match
    p_arm, s_arm = meta.arm_decomposition(traj.w[5], inst["W"], beta)
    assert not torch.allclose(traj.B[5] @ p_arm + inst["Bstar"] @ s_arm, traj.B[6], atol=1e-6)


def test_meta_learners_recover_the_representation_and_arm_does_not(inst):
    B0, w0 = maml.structured_init(inst["Bstar"], ALPHA, 0.5, seed=3)
    for algorithm in maml.ALGORITHMS:
        traj = maml.meta_train(B0, w0, inst["tasks"], algorithm=algorithm, alpha=ALPHA, beta=0.5, iterations=150)
        dist = traj.dist(inst["Bstar"])
        assert float(dist[-1]) < 1e-3, algorithm
        assert float(dist[-1]) < float(dist[75]) < float(dist[0])
    arm = meta.arm(B0, w0, inst["tasks"], beta=0.5, iterations=150)
    floor = float(meta.arm_subspace_floor(B0, inst["Bstar"], inst["W"]))
    assert float(arm.dist(inst["Bstar"]).min()) >= max(0.1 * 0.5, floor) - 1e-12


def test_tightness_nonzero_head_mean(inst):
    """Heads with mean norm 2: ANIL / FO-ANIL recover B_* from the structured init, FO-MAML
    blows up at the same step sizes, and MAML from a random init stays far from B_*."""
    W = linear.make_heads(inst["n"], inst["k"], mean_norm=2.0, cond=2.0, seed=2)
    tasks = linear.population_tasks(inst["Bstar"], W)
    B0, w0 = maml.structured_init(inst["Bstar"], ALPHA, 0.5, seed=3)
    for algorithm in ("ANIL", "FO-ANIL"):
        traj = maml.meta_train(B0, w0, tasks, algorithm=algorithm, alpha=ALPHA, beta=0.25, iterations=200)
        assert float(traj.dist(inst["Bstar"])[-1]) < 1e-3
    with pytest.raises(ValueError, match="diverged"):
        maml.meta_train(B0, w0, tasks, algorithm="FO-MAML", alpha=ALPHA, beta=0.25, iterations=200)
    Br, wr = maml.random_init(inst["d"], inst["k"], ALPHA, seed=3)
    anil = maml.meta_train(Br, wr, tasks, algorithm="ANIL", alpha=ALPHA, beta=0.25, iterations=300)
    assert float(anil.dist(inst["Bstar"])[-1]) < 1e-3
    mamlr = maml.meta_train(Br, wr, tasks, algorithm="MAML", alpha=ALPHA, beta=0.25, iterations=300)
    assert float(mamlr.dist(inst["Bstar"])[-1]) > 0.9


def test_hypotheses_tracker_matches_direct_computation(inst):
    B0, w0 = maml.structured_init(inst["Bstar"], ALPHA, 0.5, seed=3)
    traj = maml.meta_train(B0, w0, inst["tasks"], algorithm="ANIL", alpha=ALPHA, beta=0.5, iterations=30)
    h = maml.hypotheses(traj, inst["Bstar"], inst["W"], ALPHA)
    assert set(h) == {"w_norm", "delta_norm", "psi_cond", "perp_norm", "perp_ratio", "dist"}
    assert all(v.shape == (31,) for v in h.values())
    perp = linalg.orthogonal_complement(inst["Bstar"])
    eye = torch.eye(inst["k"], dtype=torch.float64)
    for t in (0, 7, 30):
        B, w = traj.B[t], traj.w[t]
        _, gw = linear.grads(B, w, inst["tasks"])
        heads = w - ALPHA * gw
        psi = heads.T @ heads / inst["n"]
        ev = torch.linalg.eigvalsh(psi)
        assert abs(float(h["psi_cond"][t]) - float(ev[-1] / ev[0])) < 1e-8 * float(ev[-1] / ev[0])
        assert abs(float(h["w_norm"][t]) - float(w.norm())) < 1e-12
        assert abs(float(h["delta_norm"][t]) - float(torch.linalg.matrix_norm(eye - ALPHA * B.T @ B, 2))) < 1e-12
        assert abs(float(h["perp_norm"][t]) - float(torch.linalg.matrix_norm(perp.T @ B, 2))) < 1e-12
        assert abs(float(h["dist"][t]) - float(linalg.principal_angle_distance(B, inst["Bstar"]))) < 1e-12
    assert torch.isnan(h["perp_ratio"][0])
    assert torch.allclose(h["perp_ratio"][1:], h["perp_norm"][1:] / h["perp_norm"][:-1])
    # the hypotheses hold along this run: contraction, small Delta, diverse adapted heads
    assert bool((h["perp_ratio"][1:] < 1).all()) and float(h["delta_norm"].max()) < 0.5
    assert float(h["psi_cond"].max()) < 10


def test_initialisations(inst):
    B0, w0 = maml.structured_init(inst["Bstar"], ALPHA, 0.4, seed=3)
    assert abs(float(linalg.principal_angle_distance(B0, inst["Bstar"])) - 0.4) < 1e-12
    eye = torch.eye(inst["k"], dtype=torch.float64)
    assert torch.allclose(ALPHA * B0.T @ B0, eye, atol=1e-12) and not w0.any()
    Br, wr = maml.random_init(200, 3, ALPHA, seed=0)
    assert float(torch.linalg.matrix_norm(eye - ALPHA * Br.T @ Br, 2)) < 0.4 and not wr.any()
    assert torch.equal(Br, maml.random_init(200, 3, ALPHA, seed=0)[0])




def test_finite_samples_anil_converge_to_a_floor_that_falls_with_m(inst, one_thread):
    B0, w0 = maml.structured_init(inst["Bstar"], ALPHA, 0.5, seed=3)
    final = {}
    for m, algorithms in ((10, ("FO-ANIL",)), (160, ("ANIL", "FO-ANIL"))):
        fresh = linear.FreshSamples(inst["Bstar"], inst["W"], m)  # m inner and m outer samples
        for algorithm in algorithms:
            traj = maml.meta_train(B0, w0, fresh, algorithm=algorithm, alpha=ALPHA, beta=0.5, iterations=60, seed=1)
            final[m, algorithm] = float(traj.dist(inst["Bstar"])[-1])
    assert final[160, "ANIL"] < 0.03 and final[160, "FO-ANIL"] < 0.03
    assert final[10, "FO-ANIL"] > 3 * final[160, "FO-ANIL"]
    # a fixed inner/outer split: the floor is set by the fixed samples and falls with m
    fixed = {}
    for m in (10, 160):
        inner, outer = maml.split_tasks(linear.sample_tasks(inst["Bstar"], inst["W"], 2 * m, seed=4), m)
        traj = maml.meta_train(B0, w0, inner, outer_tasks=outer, algorithm="FO-ANIL", alpha=ALPHA, beta=0.5,
                               iterations=100)
        fixed[m] = float(traj.dist(inst["Bstar"])[-1])
    assert fixed[160] < 0.1 < fixed[10]


def test_reproducible_and_task_batches(inst):
    B0, w0 = maml.structured_init(inst["Bstar"], ALPHA, 0.5, seed=3)
    fresh = linear.FreshSamples(inst["Bstar"], inst["W"], 10, noise_std=0.1)
    kw = dict(algorithm="ANIL", alpha=ALPHA, beta=0.3, iterations=5, tasks_per_iteration=8)
    a = maml.meta_train(B0, w0, fresh, seed=7, **kw)
    b = maml.meta_train(B0, w0, fresh, seed=7, **kw)
    c = maml.meta_train(B0, w0, fresh, seed=8, **kw)
    assert torch.equal(a.B, b.B) and torch.equal(a.w, b.w) and not torch.equal(a.B, c.B)
    # an outer sampler of the same size gives the same run as the default (the inner one, drawn again)
    same = maml.meta_train(B0, w0, fresh, outer_tasks=linear.FreshSamples(inst["Bstar"], inst["W"], 10, noise_std=0.1),
                           seed=7, **kw)
    assert torch.equal(a.B, same.B)
    # m_in != m_out: each iteration draws the inner samples, then the outer ones, from the run's generator
    inner_s, outer_s = (linear.FreshSamples(inst["Bstar"], inst["W"], m, noise_std=0.1) for m in (3, 7))
    one = maml.meta_train(B0, w0, inner_s, outer_tasks=outer_s, algorithm="FO-MAML", alpha=ALPHA, beta=0.3,
                          iterations=1, seed=9)
    gen = torch.Generator().manual_seed(9)
    inner, outer = inner_s.draw(None, gen), outer_s.draw(None, gen)
    assert inner.m == 3 and outer.m == 7
    GB, Gw = maml.meta_gradient(B0, w0, inner, outer_tasks=outer, algorithm="FO-MAML", alpha=ALPHA)
    assert torch.equal(one.B[1], B0 - 0.3 * GB) and torch.equal(one.w[1], w0 - 0.3 * Gw)
    # one batched step equals the meta-gradient on the chosen tasks only
    pop = maml.meta_train(B0, w0, inst["tasks"], algorithm="MAML", alpha=ALPHA, beta=0.3, iterations=1,
                          tasks_per_iteration=5, seed=2)
    index = torch.randperm(inst["n"], generator=torch.Generator().manual_seed(2))[:5].sort().values
    GB, Gw = maml.meta_gradient(B0, w0, inst["tasks"], algorithm="MAML", alpha=ALPHA, index=index)
    assert torch.allclose(pop.B[1], B0 - 0.3 * GB, atol=1e-13) and torch.allclose(pop.w[1], w0 - 0.3 * Gw)


def test_head_objective_is_the_convex_quadratic_and_gd_finds_its_minimiser(inst):
    B = linalg.basis_at_distance(inst["Bstar"], 0.3, seed=1) / 2.0
    for tasks, outer in [(inst["tasks"], None),
                         maml.split_tasks(linear.sample_tasks(inst["Bstar"], inst["W"], 30, noise_std=0.2, seed=3), 10)]:
        H, r, c = maml.head_quadratic(B, tasks, alpha=ALPHA, outer_tasks=outer)
        assert float(torch.linalg.eigvalsh(H)[0]) > 0
        for w in (torch.zeros(inst["k"], dtype=torch.float64), point(inst)[1]):
            direct = maml.head_objective(w, B, tasks, alpha=ALPHA, outer_tasks=outer)
            assert abs(float(direct - (0.5 * w @ H @ w - r @ w + c))) < 1e-12
        w_opt = maml.head_minimiser(B, tasks, alpha=ALPHA, outer_tasks=outer)
        wg = w_opt.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(maml.head_objective(wg, B, tasks, alpha=ALPHA, outer_tasks=outer), wg)
        assert float(g.norm()) < 1e-12
        traj = maml.meta_train(B, torch.zeros(inst["k"], dtype=torch.float64), tasks, outer_tasks=outer,
                               algorithm="ANIL", alpha=ALPHA, beta=2.0, iterations=60, freeze_representation=True)
        assert torch.equal(traj.B[-1], B) and torch.allclose(traj.w[-1], w_opt, atol=1e-8)


def test_bad_inputs(inst):
    B0, w0 = maml.structured_init(inst["Bstar"], ALPHA, 0.5, seed=3)
    tasks = inst["tasks"]
    kw = dict(algorithm="ANIL", beta=0.1, iterations=3)
    for alpha in (0.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="alpha"):
            maml.meta_train(B0, w0, tasks, alpha=alpha, **kw)
    with pytest.raises(ValueError, match="k <= d"):
        maml.meta_train(torch.ones(2, 3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64),
                        tasks, alpha=ALPHA, **kw)
    with pytest.raises(ValueError, match="w must have shape"):
        maml.meta_train(B0, torch.zeros(2, dtype=torch.float64), tasks, alpha=ALPHA, **kw)
    with pytest.raises(ValueError, match="dimension"):
        maml.meta_train(B0[:10], w0, tasks, alpha=ALPHA, **kw)
    with pytest.raises(ValueError, match="unknown algorithm"):
        maml.meta_train(B0, w0, tasks, alpha=ALPHA, algorithm="Reptile", beta=0.1, iterations=3)
    with pytest.raises(ValueError, match="same tasks"):
        maml.meta_train(B0, w0, tasks, outer_tasks=linear.population_tasks(inst["Bstar"], inst["W"][:5]),
                        alpha=ALPHA, **kw)
    with pytest.raises(ValueError, match="tasks_per_iteration"):
        maml.meta_train(B0, w0, tasks, alpha=ALPHA, tasks_per_iteration=0, **kw)
    with pytest.raises(ValueError, match="freeze_representation"):
        maml.meta_train(B0, w0, tasks, alpha=ALPHA, algorithm="MAML", beta=0.1, iterations=3,
                        freeze_representation=True)
    with pytest.raises(ValueError, match="diverged"):
        maml.meta_train(B0, w0, tasks, alpha=ALPHA, algorithm="ANIL", beta=20.0, iterations=50)
    fresh = linear.FreshSamples(inst["Bstar"], inst["W"], 5)
    with pytest.raises(ValueError, match="outer_tasks must be a FreshSamples"):
        maml.meta_train(B0, w0, fresh, outer_tasks=tasks, alpha=ALPHA, **kw)
    with pytest.raises(ValueError, match="share the ground truth"):
        maml.meta_train(B0, w0, fresh, outer_tasks=linear.FreshSamples(inst["Bstar"], inst["W"][:5], 5),
                        alpha=ALPHA, **kw)
    with pytest.raises(ValueError, match="m_in"):
        maml.split_tasks(linear.sample_tasks(inst["Bstar"], inst["W"], 5, seed=0), 5)
    with pytest.raises(ValueError, match="do not fit"):
        maml.hypotheses(maml.meta_train(B0, w0, tasks, alpha=ALPHA, **kw), inst["Bstar"], inst["W"][:, :2], ALPHA)


# --------------------------------------------------------------------------- autograd oracle, Hessian term

def test_adapted_heads_autograd_matches_closed_form():
    d, k, n, alpha, delta0 = 8, 2, 6, 0.25, 0.5
    Bstar = linear.ground_truth_representation(d, k, seed=0)
    W = linear.make_heads(n, k, cond=2.0, seed=1)
    B0, _ = maml.structured_init(Bstar, alpha, delta0, seed=2)
    tasks = linear.population_tasks(Bstar, W)
    w = 0.2 * torch.ones(k, dtype=torch.float64)
    closed = maml.adapted_heads(B0, w, Bstar, W, alpha)
    assert torch.allclose(maml.adapted_heads_autograd(B0, w, tasks, alpha), closed, atol=1e-12)
    with pytest.raises(ValueError, match="alpha"):
        maml.adapted_heads_autograd(B0, w, tasks, 0.0)


def test_relative_hessian_term(inst):
    B, w = point(inst)
    for exact, first in maml.FIRST_ORDER.items():
        G = torch.cat([g.flatten() for g in maml.meta_gradient(B, w, inst["tasks"], algorithm=exact, alpha=ALPHA)])
        F = torch.cat([g.flatten() for g in maml.meta_gradient(B, w, inst["tasks"], algorithm=first, alpha=ALPHA)])
        value = maml.relative_hessian_term(B, w, inst["tasks"], algorithm=exact, alpha=ALPHA)
        assert value == float((G - F).norm() / G.norm()) and value > 0
    small = maml.relative_hessian_term(B, w, inst["tasks"], algorithm="MAML", alpha=0.01)
    assert small < maml.relative_hessian_term(B, w, inst["tasks"], algorithm="MAML", alpha=ALPHA)
    with pytest.raises(ValueError, match="algorithm"):
        maml.relative_hessian_term(B, w, inst["tasks"], algorithm="FO-MAML", alpha=ALPHA)


# --------------------------------------------------------------------------- runs that may diverge

def tightness_instance(mean_norm=2.0, seed=0, alpha=0.25):
    """d = 12, k = 2, n = 10 heads with mean norm ``mean_norm`` and the structured start (book 2.4)."""
    Bstar = linear.ground_truth_representation(12, 2, seed=seed)
    W = linear.make_heads(10, 2, mean_norm=mean_norm, cond=2.0, seed=seed + 1)
    B0, w0 = maml.structured_init(Bstar, alpha, 0.5, seed=seed + 2)
    return B0, w0, linear.population_tasks(Bstar, W), Bstar


def test_train_or_diverge_keeps_the_curve_before_the_blow_up(one_thread):
    run = maml.train_or_diverge(*tightness_instance(), algorithm="FO-MAML", alpha=0.25, beta=0.25, iterations=400)
    assert run.diverged and "diverged" in run.message and maml.outcome(run) == "diverged"
    assert len(run.dist) == run.diverged_at and np.isfinite(run.dist).all()


def test_train_or_diverge_finishes_and_propagates_other_errors(one_thread):
    B0, w0, tasks, Bstar = tightness_instance(mean_norm=0.0)
    run = maml.train_or_diverge(B0, w0, tasks, Bstar, algorithm="ANIL", alpha=0.25, beta=0.5, iterations=150)
    assert not run.diverged and len(run.dist) == 151 and maml.outcome(run) == "converged"
    with pytest.raises(ValueError, match="unknown algorithm"):
        maml.train_or_diverge(B0, w0, tasks, Bstar, algorithm="Reptile", alpha=0.25, beta=0.5, iterations=5)


def test_train_or_diverge_runs_arm_and_outcome_stalled(one_thread):
    B0, w0, tasks, Bstar = tightness_instance(mean_norm=0.0)
    run = maml.train_or_diverge(B0, w0, tasks, Bstar, algorithm="ARM", alpha=0.25, beta=0.5, iterations=50)
    reference = meta.arm(B0, w0, tasks, beta=0.5, iterations=50)
    assert np.array_equal(run.dist, reference.dist(Bstar).numpy()) and maml.outcome(run) == "stalled"
    assert run.delta_norm.shape == (51,) and torch.equal(run.B, reference.B[-1])
