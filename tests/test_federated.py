import pytest
import torch

from replearn.theory import linear_federated, linalg, linear


def reference_fedavg(B, w, tasks, alpha, tau, rounds, clients=None, weights=None):
    """Per-client Python loop written straight from FedAvg's definition (the test oracle)."""
    for t in range(rounds):
        chosen = range(tasks.n) if clients is None else clients[t]
        Bs, ws, ps = [], [], []
        for i in chosen:
            Bi, wi = B.clone(), w.clone()
            for _ in range(tau):
                idx = torch.tensor([i])
                gB, gw = linear.grads(Bi, wi, tasks, idx)
                Bi, wi = Bi - alpha * gB[0], wi - alpha * gw[0]
            Bs.append(Bi)
            ws.append(wi)
            ps.append(1.0 if weights is None else float(weights[i]))
        p = torch.tensor(ps, dtype=torch.float64) / sum(ps)
        B = sum(pi * Bi for pi, Bi in zip(p, Bs))
        w = sum(pi * wi for pi, wi in zip(p, ws))
    return B, w


@pytest.mark.parametrize("tau", [1, 2, 5])
def test_population_fedavg_matches_per_client_loop(problem, tau):
    traj = linear_federated.fedavg(problem["B0"], problem["w0"], problem["tasks"], alpha=problem["alpha"],
                            tau=tau, rounds=4)
    B, w = reference_fedavg(problem["B0"], problem["w0"], problem["tasks"], problem["alpha"], tau, 4)
    assert torch.allclose(traj.B[-1], B, atol=1e-10) and torch.allclose(traj.w[-1], w, atol=1e-10)
    assert traj.B.shape == (5, problem["d"], problem["k"]) and traj.rounds == 4


def test_sampled_fedavg_matches_per_client_loop(problem):
    tasks = linear.sample_tasks(problem["Bstar"], problem["W"], 6, noise_std=0.1, seed=2)
    traj = linear_federated.fedavg(problem["B0"], problem["w0"], tasks, alpha=0.05, tau=3, rounds=3)
    B, w = reference_fedavg(problem["B0"], problem["w0"], tasks, 0.05, 3, 3)
    assert torch.allclose(traj.B[-1], B, atol=1e-10) and torch.allclose(traj.w[-1], w, atol=1e-10)


@pytest.mark.parametrize("m", [4, 6, 30])  # d = 12 > 2m: gradients from the samples; d <= 2m: from H_i, b_i
@pytest.mark.parametrize("tau", [1, 2, 3, 5])
def test_sampled_fedavg_both_gradient_forms_match_per_client_loop(problem, m, tau):
    # unequal counts (zero-padded rows), weights n_i and partial participation on top
    counts = torch.randint(1, m + 1, (problem["n"],), generator=torch.Generator().manual_seed(m))
    counts[0] = m
    tasks = linear.sample_tasks(problem["Bstar"], problem["W"], counts, noise_std=0.1, seed=4)
    weights = counts.double()
    kwargs = dict(alpha=0.05, tau=tau, rounds=4, clients_per_round=5, weights=weights, seed=3)
    traj = linear_federated.fedavg(problem["B0"], problem["w0"], tasks, **kwargs)
    gen = torch.Generator().manual_seed(3)
    clients = [torch.randperm(problem["n"], generator=gen)[:5].sort().values.tolist() for _ in range(4)]
    B, w = reference_fedavg(problem["B0"], problem["w0"], tasks, 0.05, tau, 4, clients=clients, weights=weights)
    assert torch.allclose(traj.B[-1], B, atol=1e-10) and torch.allclose(traj.w[-1], w, atol=1e-10)
    full = linear_federated.fedavg(problem["B0"], problem["w0"], tasks, alpha=0.05, tau=tau, rounds=3)
    B, w = reference_fedavg(problem["B0"], problem["w0"], tasks, 0.05, tau, 3)
    assert torch.allclose(full.B[-1], B, atol=1e-10) and torch.allclose(full.w[-1], w, atol=1e-10)


@pytest.mark.parametrize("m", [4, 30, None])  # gradients from the samples, from (H_i, b_i), population
def test_client_gradients_match_the_task_oracle(problem, m):
    tasks = problem["tasks"] if m is None else linear.sample_tasks(problem["Bstar"], problem["W"], m, seed=5)
    grads = linear_federated._QuadraticClients(tasks)
    index = torch.tensor([1, 4, 6])
    theta = torch.randn(problem["n"], problem["d"], dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(grads.at(theta.clone()), tasks.grad_theta(theta), atol=1e-12)
    assert torch.allclose(grads.select(index).at_shared(theta[0]), tasks.grad_theta(theta[0], index), atol=1e-12)
    W = torch.randn(3, problem["k"], dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    z, G = W[:, 0], theta[index]
    at = problem["B0"] @ W.T - 0.1 * z * G.T                      # theta_i = B w_i - alpha z_i g_i
    assert torch.allclose(grads.select(index).at_rank_one(W, problem["B0"].T, z, G, 0.1),
                          tasks.grad_theta(at.T, index), atol=1e-12)


def test_coordinates_reproduce_explicit_local_iterates(problem):
    w = problem["w0"] + 0.2
    A, w_loc = linear_federated.local_coordinates(problem["B0"], w, problem["tasks"], None, alpha=0.1, tau=4)
    B_loc, w_ref = linear_federated.local_updates(problem["B0"], w, problem["tasks"], None, alpha=0.1, tau=4)
    k = problem["k"]
    rebuilt = problem["B0"] @ A[:, :k] + problem["tasks"].theta[:, :, None] * A[:, k][:, None, :]
    assert torch.allclose(rebuilt, B_loc, atol=1e-10) and torch.allclose(w_loc, w_ref, atol=1e-10)
    # the prior weight of each client is the ordered product prod_s (I - alpha w_s w_s^T)
    heads = [w.expand(problem["n"], k)]
    for _ in range(3):
        _, nxt = linear_federated.local_updates(problem["B0"], w, problem["tasks"], None, alpha=0.1, tau=len(heads))
        heads.append(nxt)
    eye = torch.eye(k, dtype=torch.float64)
    for i in range(problem["n"]):
        prod = eye
        for ws in heads:
            prod = prod @ (eye - 0.1 * torch.outer(ws[i], ws[i]))
        assert torch.allclose(A[i, :k], prod, atol=1e-10)


def test_tau_one_is_distributed_gd_on_the_average_loss(problem):
    B, w, alpha = problem["B0"], problem["w0"], problem["alpha"]
    traj = linear_federated.dgd(B, w, problem["tasks"], alpha=alpha, rounds=5)
    same = linear_federated.fedavg(B, w, problem["tasks"], alpha=alpha, tau=1, rounds=5)
    assert torch.equal(traj.B, same.B)
    for t in range(5):
        gB, gw = linear.average_grads(B, w, problem["tasks"])
        B, w = B - alpha * gB, w - alpha * gw
        assert torch.allclose(traj.B[t + 1], B, atol=1e-10) and torch.allclose(traj.w[t + 1], w, atol=1e-10)
    # with tau = 2 the round is NOT a gradient step on the average loss
    two = linear_federated.fedavg(problem["B0"], problem["w0"], problem["tasks"], alpha=alpha, tau=2, rounds=1)
    gB, _ = linear.average_grads(problem["B0"], problem["w0"], problem["tasks"])
    assert not torch.allclose(two.B[1], problem["B0"] - 2 * alpha * gB, atol=1e-6)


def test_partial_participation_and_weights(problem):
    weights = torch.arange(1, problem["n"] + 1, dtype=torch.float64)
    kwargs = dict(alpha=problem["alpha"], tau=2, rounds=3, clients_per_round=3, weights=weights)
    a = linear_federated.fedavg(problem["B0"], problem["w0"], problem["tasks"], seed=7, **kwargs)
    b = linear_federated.fedavg(problem["B0"], problem["w0"], problem["tasks"], seed=7, **kwargs)
    c = linear_federated.fedavg(problem["B0"], problem["w0"], problem["tasks"], seed=8, **kwargs)
    assert torch.equal(a.B, b.B) and not torch.equal(a.B, c.B)
    gen = torch.Generator().manual_seed(7)
    clients = [torch.randperm(problem["n"], generator=gen)[:3].sort().values.tolist() for _ in range(3)]
    B, w = reference_fedavg(problem["B0"], problem["w0"], problem["tasks"], problem["alpha"], 2, 3,
                            clients=clients, weights=weights)
    assert torch.allclose(a.B[-1], B, atol=1e-10) and torch.allclose(a.w[-1], w, atol=1e-10)
    sampled = linear.sample_tasks(problem["Bstar"], problem["W"], 4, seed=1)
    s = linear_federated.fedavg(problem["B0"], problem["w0"], sampled, seed=7, **kwargs)
    B, w = reference_fedavg(problem["B0"], problem["w0"], sampled, problem["alpha"], 2, 3,
                            clients=clients, weights=weights)
    assert torch.allclose(s.B[-1], B, atol=1e-10)


def test_fedavg_learns_the_representation_and_dgd_does_not(problem):
    Bstar = problem["Bstar"]
    fed = linear_federated.fedavg(problem["B0"], torch.zeros(problem["k"], dtype=torch.float64), problem["tasks"],
                           alpha=problem["alpha"], tau=5, rounds=400)
    dgd = linear_federated.dgd(problem["B0"], torch.zeros(problem["k"], dtype=torch.float64), problem["tasks"],
                        alpha=problem["alpha"], rounds=400)
    assert float(fed.dist(Bstar)[-1]) < 1e-3
    assert float(dgd.dist(Bstar)[-1]) > 0.5


def test_bad_inputs_raise_clear_errors(problem):
    B0, w0, tasks = problem["B0"], problem["w0"], problem["tasks"]
    with pytest.raises(ValueError, match="tau"):
        linear_federated.fedavg(B0, w0, tasks, alpha=0.1, tau=0, rounds=2)
    with pytest.raises(ValueError, match="alpha"):
        linear_federated.fedavg(B0, w0, tasks, alpha=-0.1, tau=2, rounds=2)
    with pytest.raises(ValueError, match="w0 must have shape"):
        linear_federated.fedavg(B0, w0[:2], tasks, alpha=0.1, tau=2, rounds=2)
    with pytest.raises(ValueError, match="dimension"):
        linear_federated.fedavg(B0[:5], w0, tasks, alpha=0.1, tau=2, rounds=2)
    with pytest.raises(ValueError, match="k <= d"):
        linear_federated.fedavg(torch.zeros(2, 3, dtype=torch.float64), w0, tasks, alpha=0.1, tau=2, rounds=2)
    with pytest.raises(ValueError, match="NaN"):
        linear_federated.fedavg(B0 * float("nan"), w0, tasks, alpha=0.1, tau=2, rounds=2)
    with pytest.raises(ValueError, match="clients_per_round"):
        linear_federated.fedavg(B0, w0, tasks, alpha=0.1, tau=2, rounds=2, clients_per_round=0)
    with pytest.raises(ValueError, match="weights"):
        linear_federated.fedavg(B0, w0, tasks, alpha=0.1, tau=2, rounds=2, weights=-torch.ones(tasks.n))
    with pytest.raises(ValueError, match="diverged by round .*too large"):
        linear_federated.fedavg(B0, w0, tasks, alpha=3.0, tau=2, rounds=40)


@pytest.mark.parametrize("tau", [1, 2, 4])
def test_global_update_is_prior_plus_signal_weight(problem, tau):
    B, w = problem["B0"], problem["w0"] + 0.2
    weights = torch.arange(1, problem["n"] + 1, dtype=torch.float64)
    index = torch.tensor([0, 2, 3, 6])
    prior, signal = linear_federated.global_update_weights(B, w, problem["Bstar"], problem["W"], alpha=0.1, tau=tau,
                                                    index=index, weights=weights)
    B_loc, _ = linear_federated.local_updates(B, w, problem["tasks"], index, alpha=0.1, tau=tau)
    p = weights[index] / weights[index].sum()
    averaged = torch.einsum("s,sdk->dk", p, B_loc)
    assert torch.allclose(B @ prior + problem["Bstar"] @ signal, averaged, atol=1e-10)
    if tau == 1:  # D-GD: the ARM decomposition, prior I - alpha w w^T and rank-one signal
        eye = torch.eye(problem["k"], dtype=torch.float64)
        assert torch.allclose(prior, eye - 0.1 * torch.outer(w, w), atol=1e-12)
        assert torch.allclose(signal, 0.1 * torch.outer(p @ problem["W"][index], w), atol=1e-12)


def test_minibatch_local_sgd_and_unequal_counts(problem):
    counts = torch.tensor([3, 5, 8, 4, 6, 7, 5, 9])
    tasks = linear.sample_tasks(problem["Bstar"], problem["W"], counts, noise_std=0.1, seed=3)
    assert tasks.X.shape[1] == 9 and float(tasks.X[0, 3:].abs().max()) == 0.0
    # the loss of a padded task uses its own n_i
    theta = torch.zeros(problem["d"], dtype=torch.float64)
    direct = 0.5 * tasks.Y[0, :3].pow(2).mean()
    assert float(tasks.loss_theta(theta.expand(problem["n"], -1))[0]) == pytest.approx(float(direct))
    # b = min n_i on a task with exactly b samples is the full gradient
    batch = tasks.minibatch(torch.tensor([0]), 3, torch.Generator().manual_seed(0))
    full = tasks.grad_theta(theta.expand(1, -1), torch.tensor([0]))
    assert torch.allclose(batch.grad_theta(theta.expand(1, -1)), full, atol=1e-12)
    run = lambda seed: linear_federated.fedavg(problem["B0"], problem["w0"], tasks, alpha=0.05, tau=2, rounds=3,
                                        batch_size=2, weights=counts.double(), seed=seed)
    assert torch.equal(run(1).B, run(1).B) and not torch.equal(run(1).B, run(2).B)
    with pytest.raises(ValueError, match="batch size"):
        linear_federated.fedavg(problem["B0"], problem["w0"], tasks, alpha=0.05, tau=2, rounds=1, batch_size=4)
    with pytest.raises(ValueError, match="population"):
        linear_federated.fedavg(problem["B0"], problem["w0"], problem["tasks"], alpha=0.05, tau=2, rounds=1, batch_size=2)


def test_global_gradient_norm_vanishes_for_dgd_but_not_fedavg(problem):
    zeros = torch.zeros(problem["k"], dtype=torch.float64)
    dgd = linear_federated.dgd(problem["B0"], zeros, problem["tasks"], alpha=problem["alpha"], rounds=2500)
    fed = linear_federated.fedavg(problem["B0"], zeros, problem["tasks"], alpha=problem["alpha"], tau=5, rounds=2500)
    g_dgd = linear_federated.global_gradient_norm(*dgd.final, problem["tasks"])
    g_fed = linear_federated.global_gradient_norm(*fed.final, problem["tasks"])
    assert float(g_dgd) < 1e-8 < 1e-3 < float(g_fed)
    # matches autograd on the average loss
    B, w = problem["B0"].clone().requires_grad_(), (problem["w0"] + 0.3).requires_grad_()
    linear.losses(B, w, problem["tasks"]).mean().backward()
    expected = torch.sqrt(B.grad.pow(2).sum() + w.grad.pow(2).sum())
    got = linear_federated.global_gradient_norm(problem["B0"], problem["w0"] + 0.3, problem["tasks"])
    assert float(got) == pytest.approx(float(expected), rel=1e-10)


def test_global_gradient_norms_along_a_trajectory_match_the_pointwise_norm(problem):
    tasks = problem["tasks"]
    v = problem["Bstar"] @ problem["W"].mean(0)
    for traj in (linear_federated.fedavg(problem["B0"], problem["w0"], tasks, alpha=problem["alpha"], tau=3, rounds=30),
                 linear_federated.dgd(problem["B0"], problem["w0"], tasks, alpha=problem["alpha"], rounds=30)):
        g = linear_federated.global_gradient_norms(traj, v)
        assert g.shape == (31,)
        for t in (0, 1, 17, 30):
            assert float(g[t]) == pytest.approx(float(linear_federated.global_gradient_norm(traj.B[t], traj.w[t], tasks)),
                                                rel=1e-10, abs=1e-15)


def _two_clients(d=4):
    """Two clients with regressors e_1, e_2 (B_* = [e_1, e_2], heads I_2) that fit exactly with
    B_i = [e_i, e_3], w_i = (1, 0): their average [(e_1 + e_2)/2, e_3] misses col(B_*)."""
    E = torch.eye(d, dtype=torch.float64)
    Bstar, W = E[:, :2], torch.eye(2, dtype=torch.float64)
    B_local = torch.stack([torch.stack([E[:, 0], E[:, 2]], 1), torch.stack([E[:, 1], E[:, 2]], 1)])
    return Bstar, W, B_local, torch.tensor([[1.0, 0.0], [1.0, 0.0]], dtype=torch.float64)


def test_average_local_fits_is_the_weighted_server_average(problem):
    Bstar, W, B_local, w_local = _two_clients()
    avg = linear_federated.average_local_fits(B_local, w_local, Bstar, W=W)
    assert torch.allclose(avg.B, torch.tensor([[0.5, 0.0], [0.5, 0.0], [0.0, 1.0], [0.0, 0.0]], dtype=torch.float64))
    assert torch.equal(avg.w, torch.tensor([1.0, 0.0], dtype=torch.float64))
    assert abs(avg.dist - 1.0) < 1e-12
    # B_bar w_bar = (e_1 + e_2)/2: each client's loss is 1/2 ||(e_2 - e_1)/2||^2 = 1/4, and it is a minimiser of F
    assert torch.allclose(avg.losses, torch.full((2,), 0.25, dtype=torch.float64)) and avg.grad_norm < 1e-12
    weighted = linear_federated.average_local_fits(B_local, w_local, Bstar, weights=torch.tensor([1.0, 3.0]), W=W)
    assert torch.allclose(weighted.B, 0.25 * B_local[0] + 0.75 * B_local[1])
    assert abs(weighted.dist - 1.0) < 1e-12
    # B_bar w_bar = (e_1 + 3 e_2)/4 minimises the weighted objective; the losses are 1/2 ||B_bar w_bar - e_i||^2
    assert weighted.grad_norm < 1e-12
    assert torch.allclose(weighted.losses, torch.tensor([0.5625, 0.0625], dtype=torch.float64))
    no_heads = linear_federated.average_local_fits(B_local, w_local, Bstar)
    assert torch.isnan(no_heads.losses).all() and no_heads.grad_norm != no_heads.grad_norm
    # the global gradient norm is the library's, on the population losses of (B_*, W)
    M = problem["n"]
    B_many = problem["B0"].expand(M, -1, -1) + 0.01 * torch.arange(M, dtype=torch.float64)[:, None, None]
    w_many = torch.ones(M, problem["k"], dtype=torch.float64)
    avg = linear_federated.average_local_fits(B_many, w_many, problem["Bstar"], W=problem["W"])
    assert avg.grad_norm == pytest.approx(float(linear_federated.global_gradient_norm(avg.B, avg.w, problem["tasks"])),
                                          rel=1e-12)
    assert avg.dist == pytest.approx(float(linalg.principal_angle_distance(avg.B, problem["Bstar"])), rel=1e-12)


@pytest.mark.parametrize("call, message", [
    (lambda Bs, W, B, w: linear_federated.average_local_fits(B[0], w, Bs), "B_local"),
    (lambda Bs, W, B, w: linear_federated.average_local_fits(B, w, Bs[:3]), "Bstar"),
    (lambda Bs, W, B, w: linear_federated.average_local_fits(B, w, Bs, weights=torch.tensor([1.0, -1.0])), "weights"),
    (lambda Bs, W, B, w: linear_federated.average_local_fits(B, w, Bs, weights=torch.ones(3)), "weights"),
    (lambda Bs, W, B, w: linear_federated.average_local_fits(B * float("nan"), w, Bs), "NaN"),
    (lambda Bs, W, B, w: linear_federated.average_local_fits(B, w, Bs, W=torch.eye(3, dtype=torch.float64)), "W must"),
])
def test_average_local_fits_rejects_bad_inputs(call, message):
    with pytest.raises(ValueError, match=message):
        call(*_two_clients())
