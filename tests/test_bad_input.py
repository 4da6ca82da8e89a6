"""Bad inputs across the library fail early with a ValueError that names the input.

Every case is a call with one bad argument (non-finite data, a wrong shape, rank, dtype or
device, a bool or a negative count, an empty client set, an out-of-range setting) and the
regular expression its message must match: the name of that argument. A case passes only
if the call raises ``ValueError`` (not a torch/numpy error from deep inside) and the message
names the input. Below the table: the values that used to come back silently wrong
(overflowing projections, rank-deficient distances, divergence blamed on the step size).
"""

import dataclasses
import math

import pytest
import torch

from replearn.theory import aruba, linear_fedrep, linear_federated, linalg, linear, lower_bound, maml, meta
from replearn import checks
from replearn.neural import similarity
from replearn.experiments.ch01_arm import s01_model, s02_arm_dynamics, s03_lower_bound, s04_finetuning
from replearn.experiments.ch02_maml_anil import (s02_population_dynamics, s04_tightness, s05_finite_samples,
                                                 s06_global_optimality)
from replearn.experiments.ch04_fedavg import (s01_fedavg_and_dsgd, s02_local_fits, s04_convergence,
                                              s05_generalisation, s06_dgd_lower_bound)
from replearn.experiments.ch05_fedrep import (s01_personalisation, s02_fedrep, s03_theory, s04_fig1_local_vs_global,
                                              s05_fig3_head_updates, s06_new_clients)
from replearn.experiments.ch03_aruba import (s01_online_learning, s02_meta_initialisation, s03_framework,
                                             s04_adaptive_rates, s05_neural)
from replearn.experiments import settings_classes
from replearn.settings import _annotated_kinds
from replearn.theory.trajectory import Trajectory
from engine_calls import finetune, run_key
from replearn.neural import algorithms
from replearn.neural.specs import FEDREP_WIDTHS, NetworkSpec

NAN, INF = float("nan"), float("inf")
F64 = torch.float64


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=_gen(seed), dtype=F64)


def _with(t, index, value):
    t = t.clone()
    t[index] = value
    return t


D, K, N, M = 6, 2, 5, 4
BSTAR = linalg.random_orthonormal(D, K, seed=0)
W = _randn(N, K, seed=1)
POP = linear.population_tasks(BSTAR, W)
SAMPLED = linear.sample_tasks(BSTAR, W, M, seed=2)
B0 = linalg.random_orthonormal(D, K, seed=3) / 0.2**0.5
W0 = torch.zeros(K, dtype=F64)
X1, Y1 = _randn(M, D, seed=4), _randn(M, seed=5)
FAMILY = aruba.TaskFamily(d=3, m=5)
ONLINE = aruba.sample_tasks(FAMILY, 4, runs=2, seed=0)
OX, OY = _randn(2, 5, 3, seed=6), _randn(2, 5, seed=7)
CX, CY = _randn(12, 3, seed=8), _randn(12, 2, seed=9)


def fedavg(**kw):
    args = dict(B0=B0, w0=W0, tasks=POP, alpha=0.1, tau=2, rounds=3)
    args.update(kw)
    return linear_federated.fedavg(args.pop("B0"), args.pop("w0"), args.pop("tasks"), **args)


def update_weights(**kw):
    args = dict(B=B0, w=W0, Bstar=BSTAR, W=W, alpha=0.1, tau=2)
    args.update(kw)
    return linear_federated.global_update_weights(args.pop("B"), args.pop("w"), args.pop("Bstar"), args.pop("W"),
                                           **args)


def meta_train(**kw):
    args = dict(B0=B0, w0=W0, tasks=POP, algorithm="ANIL", alpha=0.1, beta=0.1, iterations=2)
    args.update(kw)
    return maml.meta_train(args.pop("B0"), args.pop("w0"), args.pop("tasks"), **args)


def run_fedrep(**kw):
    args = dict(B0=linalg.random_orthonormal(D, K, seed=3), data=SAMPLED, eta=0.1, rounds=2)
    args.update(kw)
    return linear_fedrep.fedrep(args.pop("B0"), args.pop("data"), **args)


def ogd(**kw):
    args = dict(X=OX, y=OY, phi=torch.zeros(3, dtype=F64), eta=0.1)
    args.update(kw)
    return aruba.ogd(args.pop("X"), args.pop("y"), args.pop("phi"), args.pop("eta"), **args)


def finetune_gd(**kw):
    args = dict(B=B0, w=W0, X=X1, y=Y1, lr=0.01, steps=2)
    args.update(kw)
    return linear.finetune_gd(args.pop("B"), args.pop("w"), args.pop("X"), args.pop("y"), **args)


CASES = [
    # ------------------------------------------------------------------ linear: ground truth and tasks
    ("make_heads n=0", lambda: linear.make_heads(0, K), r"n \(tasks\)"),
    ("make_heads n=True", lambda: linear.make_heads(True, K), r"n \(tasks\)"),
    ("make_heads cond=nan", lambda: linear.make_heads(N, K, cond=NAN), r"cond"),
    ("make_heads cond<1", lambda: linear.make_heads(N, K, cond=0.5), r"cond"),
    ("make_heads scale<0", lambda: linear.make_heads(N, K, scale=-1.0), r"scale"),
    ("make_heads mean_norm=nan", lambda: linear.make_heads(N, K, mean_norm=NAN), r"mean_norm"),
    ("make_heads exact='yes'", lambda: linear.make_heads(N, K, exact="yes"), r"exact"),
    ("population NaN heads",
     lambda: linear.population_tasks(BSTAR, _with(W, (1, 0), NAN)), r"W \(heads\) contains NaN"),
    ("population inf Bstar",
     lambda: linear.population_tasks(_with(BSTAR, (0, 0), INF), W), r"Bstar contains NaN"),
    ("population dtypes", lambda: linear.population_tasks(BSTAR, W.float()), r"W \(heads\).*float32.*Bstar"),
    ("population no clients", lambda: linear.population_tasks(BSTAR, W[:0]), r"W \(heads\) has no rows"),
    ("population 1-D heads", lambda: linear.population_tasks(BSTAR, W[0]), r"W \(heads\) must have 2"),
    ("population k mismatch", lambda: linear.population_tasks(BSTAR, _randn(N, 3)), r"same k"),
    ("population numpy Bstar",
     lambda: linear.population_tasks(BSTAR.numpy(), W), r"Bstar must be a torch.Tensor"),
    ("population integer heads",
     lambda: linear.population_tasks(BSTAR, W.long()), r"W \(heads\) must be a floating"),
    ("sample_tasks noise nan", lambda: linear.sample_tasks(BSTAR, W, M, noise_std=NAN), r"noise_std"),
    ("sample_tasks noise<0", lambda: linear.sample_tasks(BSTAR, W, M, noise_std=-1.0), r"noise_std"),
    ("sample_tasks m=0", lambda: linear.sample_tasks(BSTAR, W, 0), r"m \(samples per task\)"),
    ("sample_tasks m=True", lambda: linear.sample_tasks(BSTAR, W, True), r"m \(samples per task\)"),
    ("sample_tasks a client with 0", lambda: linear.sample_tasks(BSTAR, W, [3, 0, 2, 2, 2]), r"m must be"),
    ("sample_tasks float counts", lambda: linear.sample_tasks(BSTAR, W, [1.5] * N), r"m must be"),
    ("PopulationTasks NaN theta",
     lambda: linear.PopulationTasks(_with(POP.theta, (0, 0), NAN)), r"theta .*NaN"),
    ("PopulationTasks empty",
     lambda: linear.PopulationTasks(torch.zeros(0, D, dtype=F64)), r"theta must hold"),
    ("SampledTasks NaN Y",
     lambda: linear.SampledTasks(SAMPLED.X, _with(SAMPLED.Y, (0, 1), NAN)), r"Y \(labels\) contains NaN"),
    ("SampledTasks inf X",
     lambda: linear.SampledTasks(_with(SAMPLED.X, (0, 0, 0), INF), SAMPLED.Y), r"X \(inputs\) contains NaN"),
    ("SampledTasks Y shape",
     lambda: linear.SampledTasks(SAMPLED.X, SAMPLED.Y[:, :2]), r"Y \(labels\) must have shape"),
    ("SampledTasks 0-sample client",
     lambda: linear.SampledTasks(SAMPLED.X, SAMPLED.Y, torch.tensor([4, 0, 4, 4, 4])), r"counts .*0 samples"),
    ("SampledTasks float counts",
     lambda: linear.SampledTasks(SAMPLED.X, SAMPLED.Y, torch.full((N,), 4.0)), r"counts must be"),
    ("SampledTasks dtypes",
     lambda: linear.SampledTasks(SAMPLED.X.float(), SAMPLED.Y), r"Y \(labels\).*X \(inputs\)"),
    ("losses k mismatch", lambda: linear.losses(B0, torch.zeros(3, dtype=F64), POP), r"same k"),
    ("losses d mismatch", lambda: linear.losses(B0[:5], W0, POP), r"B has d = 5"),
    ("losses dtypes", lambda: linear.losses(B0.float(), W0.float(), POP), r"B.*dtype"),
    ("grads wrong tasks", lambda: linear.grads(B0, W0, "tasks"), r"tasks must be"),
    ("predict NaN w", lambda: linear.predict(B0, _with(W0, 0, NAN)), r"\bw contains NaN"),
    ("losses NaN B", lambda: linear.losses(_with(B0, (0, 0), NAN), W0, POP), r"\bB contains NaN"),
    ("average_grads NaN w", lambda: linear.average_grads(B0, _with(W0, 1, INF), POP), r"\bw contains NaN"),
    ("excess_risk NaN theta", lambda: linear.excess_risk(B0, W0, _with(POP.theta, (0, 0), NAN)),
     r"theta_star contains NaN"),
    ("fit_linear ridge<0", lambda: linear.fit_linear(_randn(M, 3), Y1, ridge=-1.0), r"ridge"),
    ("fit_linear NaN design",
     lambda: linear.fit_linear(_with(_randn(M, 3), (0, 0), NAN), Y1), r"design A contains NaN"),
    ("fit_linear NaN targets",
     lambda: linear.fit_linear(_randn(M, 3), _with(Y1, 0, NAN)), r"targets y contains NaN"),
    ("fit_linear shapes", lambda: linear.fit_linear(_randn(M, 3), Y1[:2]), r"design .* and targets"),
    ("finetune_gd lr=0", lambda: finetune_gd(lr=0.0), r"lr"),
    ("finetune_gd lr=nan", lambda: finetune_gd(lr=NAN), r"lr"),
    ("finetune_gd steps<0", lambda: finetune_gd(steps=-1), r"steps"),
    ("finetune_gd steps=True", lambda: finetune_gd(steps=True), r"steps"),
    ("finetune_gd NaN X", lambda: finetune_gd(X=_with(X1, (0, 0), NAN)), r"X contains NaN"),
    ("finetune_gd NaN y", lambda: finetune_gd(y=_with(Y1, 0, NAN)), r"y contains NaN"),
    ("finetune_head X width", lambda: linear.finetune_head(B0, _randn(M, 5), Y1), r"X has 5 features"),
    ("head_second_moment empty", lambda: linear.head_second_moment(W[:0]), r"W \(heads\) has no rows"),
    ("excess_risk theta width", lambda: linear.excess_risk(B0, W0, _randn(4)), r"theta_star"),
    # ------------------------------------------------------------------ federated
    ("fedavg tau=0", lambda: fedavg(tau=0), r"tau"),
    ("fedavg tau=-3", lambda: fedavg(tau=-3), r"tau"),
    ("fedavg tau=2.0", lambda: fedavg(tau=2.0), r"tau"),
    ("fedavg rounds=True", lambda: fedavg(rounds=True), r"rounds"),
    ("fedavg rounds<0", lambda: fedavg(rounds=-1), r"rounds"),
    ("fedavg alpha<0", lambda: fedavg(alpha=-1.0), r"alpha"),
    ("fedavg alpha=nan", lambda: fedavg(alpha=NAN), r"alpha"),
    ("fedavg alpha=inf", lambda: fedavg(alpha=INF), r"alpha"),
    ("fedavg alpha=True", lambda: fedavg(alpha=True), r"alpha"),
    ("fedavg NaN B0", lambda: fedavg(B0=_with(B0, (0, 0), NAN)), r"B0 contains NaN"),
    ("fedavg NaN w0", lambda: fedavg(w0=_with(W0, 0, NAN)), r"w0 contains NaN"),
    ("fedavg dtypes", lambda: fedavg(B0=B0.float()), r"w0 .*dtype.*B0"),
    ("fedavg w0 shape", lambda: fedavg(w0=torch.zeros(3, dtype=F64)), r"w0 must have shape"),
    ("fedavg B0 rows", lambda: fedavg(B0=B0[:5]), r"B0 has d = 5"),
    ("fedavg not tasks", lambda: fedavg(tasks=POP.theta), r"tasks must be"),
    ("fedavg clients 0", lambda: fedavg(clients_per_round=0), r"clients_per_round"),
    ("fedavg clients True", lambda: fedavg(clients_per_round=True), r"clients_per_round"),
    ("fedavg clients > n", lambda: fedavg(clients_per_round=99), r"clients_per_round"),
    ("fedavg zero weight", lambda: fedavg(weights=[1.0, 0.0, 1.0, 1.0, 1.0]), r"weights"),
    ("fedavg NaN weight", lambda: fedavg(weights=[1.0, NAN, 1.0, 1.0, 1.0]), r"weights"),
    ("fedavg weights length", lambda: fedavg(weights=[1.0, 1.0]), r"weights"),
    ("fedavg batch on population", lambda: fedavg(batch_size=2), r"batch_size"),
    ("fedavg batch 0", lambda: fedavg(tasks=SAMPLED, batch_size=0), r"batch_size"),
    ("fedavg batch > samples", lambda: fedavg(tasks=SAMPLED, batch_size=M + 1), r"batch_size"),
    ("fedavg seed<0", lambda: fedavg(seed=-1), r"seed"),
    ("dgd alpha=0", lambda: linear_federated.dgd(B0, W0, POP, alpha=0.0, rounds=2), r"alpha"),
    ("update weights tau=0", lambda: update_weights(tau=0), r"tau"),
    ("update weights tau=-3", lambda: update_weights(tau=-3), r"tau"),
    ("update weights alpha=-1", lambda: update_weights(alpha=-1.0), r"alpha"),
    ("update weights empty index",
     lambda: update_weights(index=torch.tensor([], dtype=torch.long)), r"index selects no clients"),
    ("update weights index range", lambda: update_weights(index=torch.tensor([0, 7])), r"index must hold"),
    ("update weights repeated", lambda: update_weights(index=torch.tensor([1, 1])), r"index lists a client"),
    ("update weights float index", lambda: update_weights(index=torch.tensor([0.0, 1.0])), r"index must be"),
    ("update weights NaN heads",
     lambda: update_weights(W=_with(W, (0, 0), NAN)), r"W \(heads\) contains NaN"),
    ("update weights negative p", lambda: update_weights(weights=[-1.0, 1.0, 1.0, 1.0, 1.0]), r"weights"),
    ("local_updates alpha=0", lambda: linear_federated.local_updates(B0, W0, POP, None, alpha=0.0, tau=1), r"alpha"),
    ("local_updates tau=0", lambda: linear_federated.local_updates(B0, W0, POP, None, alpha=0.1, tau=0), r"tau"),
    ("local_updates no generator",
     lambda: linear_federated.local_updates(B0, W0, SAMPLED, None, alpha=0.1, tau=1, batch_size=2), r"generator"),
    ("local_coordinates sampled",
     lambda: linear_federated.local_coordinates(B0, W0, SAMPLED, None, alpha=0.1, tau=1), r"PopulationTasks"),
    ("gradient norm weights",
     lambda: linear_federated.global_gradient_norm(B0, W0, POP, weights=torch.zeros(N)), r"weights"),
    # ------------------------------------------------------------------ linalg
    ("distance to zero matrix",
     lambda: linalg.principal_angle_distance(BSTAR, torch.zeros(D, K, dtype=F64)), r"B2 is rank-deficient"),
    ("distance repeated columns",
     lambda: linalg.principal_angle_distance(BSTAR, BSTAR[:, [0, 0]]), r"B2 is rank-deficient"),
    ("distance NaN",
     lambda: linalg.principal_angle_distance(BSTAR, _with(BSTAR, (0, 0), NAN)), r"B2 contains NaN"),
    ("distance dtypes", lambda: linalg.principal_angle_distance(BSTAR, BSTAR.float()), r"B2 has dtype .* B1"),
    ("distance spaces",
     lambda: linalg.principal_angle_distance(BSTAR, _randn(7, K)), r"B1 and B2 live in different"),
    ("distance vector", lambda: linalg.principal_angle_distance(BSTAR[:, 0], BSTAR), r"B1 must be a matrix"),
    ("angles rank-deficient B1",
     lambda: linalg.principal_angles(torch.zeros(D, K, dtype=F64), BSTAR), r"B1 is rank-deficient"),
    ("random_orthonormal d=True", lambda: linalg.random_orthonormal(True, 1), r"\bd\b"),
    ("random_orthonormal k=0", lambda: linalg.random_orthonormal(3, 0), r"\bk\b"),
    ("random_orthonormal k>d", lambda: linalg.random_orthonormal(2, 3), r"k = 3 > d = 2"),
    ("basis_at_distance delta>1", lambda: linalg.basis_at_distance(BSTAR, 1.5), r"delta"),
    ("basis_at_distance delta=nan", lambda: linalg.basis_at_distance(BSTAR, NAN), r"delta"),
    ("basis_at_distance n_tilted", lambda: linalg.basis_at_distance(BSTAR, 0.5, n_tilted=0), r"n_tilted"),
    ("condition_number vector", lambda: linalg.condition_number(W0), r"\bM\b"),
    # ------------------------------------------------------------------ aruba
    ("project_ball radius<0", lambda: aruba.project_ball(OX[0, 0], -1.0), r"radius"),
    ("project_ball NaN", lambda: aruba.project_ball(_with(OX[0, 0], 0, NAN), 1.0), r"v contains NaN"),
    ("project_ball weights",
     lambda: aruba.project_ball(OX[0, 0], 1.0, -torch.ones(3, dtype=F64)), r"weights"),
    ("TaskFamily d=0", lambda: aruba.TaskFamily(d=0), r"\bd\b"),
    ("TaskFamily m=True", lambda: aruba.TaskFamily(m=True), r"m \(rounds"),
    ("TaskFamily loss", lambda: aruba.TaskFamily(loss="hinge"), r"loss"),
    ("TaskFamily radius nan", lambda: aruba.TaskFamily(radius=NAN), r"radius"),
    ("TaskFamily noise<0", lambda: aruba.TaskFamily(noise=-1.0), r"noise"),
    ("TaskFamily centre outside", lambda: aruba.TaskFamily(center_norm=20.0), r"center_norm"),
    ("TaskFamily spread length", lambda: aruba.TaskFamily(spread=(1.0, 2.0)), r"spread"),
    ("TaskFamily spread nan", lambda: aruba.TaskFamily(spread=NAN), r"spread"),
    ("aruba.sample_tasks T=0", lambda: aruba.sample_tasks(FAMILY, 0), r"T \(tasks\)"),
    ("aruba.sample_tasks family", lambda: aruba.sample_tasks("family", 3), r"family"),
    ("ogd NaN X", lambda: ogd(X=_with(OX, (0, 0, 0), NAN)), r"X contains NaN"),
    ("ogd NaN y", lambda: ogd(y=_with(OY, (0, 0), NAN)), r"y contains NaN"),
    ("ogd NaN phi", lambda: ogd(phi=torch.full((3,), NAN, dtype=F64)), r"phi contains NaN"),
    ("ogd phi width", lambda: ogd(phi=torch.zeros(4, dtype=F64)), r"phi must end"),
    ("ogd eta<0", lambda: ogd(eta=-1.0), r"eta"),
    ("ogd loss", lambda: ogd(loss="hinge"), r"loss"),
    ("ogd radius=0", lambda: ogd(radius=0.0), r"radius"),
    ("ogd adagrad_delta=0", lambda: ogd(adagrad_delta=0.0), r"adagrad_delta"),
    ("meta_learn init", lambda: aruba.meta_learn(ONLINE, init="random"), r"init"),
    ("meta_learn rate<0", lambda: aruba.meta_learn(ONLINE, rate=-1.0), r"rate"),
    ("meta_learn rate name", lambda: aruba.meta_learn(ONLINE, rate="adam"), r"rate"),
    ("meta_learn power=1", lambda: aruba.meta_learn(ONLINE, power=1.0), r"power"),
    ("meta_learn smoothing=0", lambda: aruba.meta_learn(ONLINE, smoothing=0.0), r"smoothing"),
    ("meta_learn tasks", lambda: aruba.meta_learn(FAMILY), r"tasks must be OnlineTasks"),
    ("regret bound m=0", lambda: aruba.regret_upper_bound(OX[0, 0], OX[0, 1], 0.1, G=1.0, m=0), r"\bm\b"),
    ("task_similarity 1-D", lambda: aruba.task_similarity(OX[0, 0]), r"theta"),
    ("task_averaged_regret NaN",
     lambda: aruba.task_averaged_regret(torch.tensor([1.0, NAN])), r"regret contains NaN"),
    # ------------------------------------------------------------------ maml and meta
    ("meta_train algorithm", lambda: meta_train(algorithm="Reptile"), r"algorithm"),
    ("meta_train alpha=0", lambda: meta_train(alpha=0.0), r"alpha"),
    ("meta_train beta=nan", lambda: meta_train(beta=NAN), r"beta"),
    ("meta_train iterations=True", lambda: meta_train(iterations=True), r"iterations"),
    ("meta_train tasks_per_iteration", lambda: meta_train(tasks_per_iteration=0), r"tasks_per_iteration"),
    ("meta_train NaN B0", lambda: meta_train(B0=_with(B0, (1, 1), NAN)), r"B0 contains NaN"),
    ("structured_init NaN Bstar", lambda: maml.structured_init(_with(BSTAR, (0, 0), NAN), 0.1, 0.3),
     r"Bstar contains NaN"),
    ("meta_train freeze flag", lambda: meta_train(freeze_representation="yes"), r"freeze_representation"),
    ("meta_train dtypes", lambda: meta_train(B0=B0.float(), w0=W0.float()), r"tasks' data"),
    ("meta_train fresh outer sampler, fixed inner data",
     lambda: meta_train(tasks=SAMPLED, outer_tasks=linear.FreshSamples(BSTAR, W, 2)), r"outer_tasks"),
    ("meta_train fresh inner sampler, fixed outer data",
     lambda: meta_train(tasks=linear.FreshSamples(BSTAR, W, 2), outer_tasks=SAMPLED), r"outer_tasks"),
    ("meta_train fresh samplers of two ground truths",
     lambda: meta_train(tasks=linear.FreshSamples(BSTAR, W, 2), outer_tasks=linear.FreshSamples(BSTAR, 2 * W, 2)),
     r"same Bstar and W"),
    ("split_tasks m_in=0", lambda: maml.split_tasks(SAMPLED, 0), r"m_in"),
    ("random_init k>d", lambda: maml.random_init(3, 5, 0.1), r"\bd\b"),
    ("adapted_heads NaN heads", lambda: maml.adapted_heads(B0, W0, BSTAR, _with(W, (0, 0), NAN), 0.1),
     r"W \(heads\) contains NaN"),
    ("adapted_heads alpha<0", lambda: maml.adapted_heads(B0, W0, BSTAR, W, -0.1), r"alpha"),
    ("adapted_heads shapes", lambda: maml.adapted_heads(B0, W0, BSTAR[:, :1], W, 0.1), r"need B"),
    ("arm_decomposition beta<0", lambda: meta.arm_decomposition(W0, W, -1.0), r"beta"),
    ("arm_decomposition NaN w", lambda: meta.arm_decomposition(_with(W0, 0, NAN), W, 0.1), r"w contains NaN"),
    ("arm_subspace_floor no heads", lambda: meta.arm_subspace_floor(B0, BSTAR, W[:0]), r"heads W"),
    ("adversarial delta=1", lambda: lower_bound.adversarial_ground_truth(B0, W, 1.0), r"delta"),
    ("adversarial NaN heads",
     lambda: lower_bound.adversarial_ground_truth(B0, _with(W, (0, 0), NAN), 0.5),
     r"W \(heads\) contains NaN"),
    # ------------------------------------------------------------------ fedrep
    ("fedrep eta=0", lambda: run_fedrep(eta=0.0), r"eta"),
    ("fedrep r=0", lambda: run_fedrep(r=0.0), r"participation rate r"),
    ("fedrep r=nan", lambda: run_fedrep(r=NAN), r"participation rate r"),
    ("fedrep rounds=True", lambda: run_fedrep(rounds=True), r"rounds"),
    ("fedrep head_steps=0", lambda: run_fedrep(head_steps=0, head_lr=0.1), r"head_steps"),
    ("fedrep dtypes", lambda: run_fedrep(B0=linalg.random_orthonormal(D, K, seed=3).float()), r"B0"),
    ("FreshSamples NaN heads",
     lambda: linear.FreshSamples(BSTAR, _with(W, (2, 1), NAN), 3), r"W \(heads\) contains NaN"),
    ("FreshSamples noise nan", lambda: linear.FreshSamples(BSTAR, W, 2, noise_std=NAN), r"noise_std"),
    ("FreshSamples m=0", lambda: linear.FreshSamples(BSTAR, W, 0), r"\bm\b"),
    ("method_of_moments k=0", lambda: linear_fedrep.method_of_moments_init(SAMPLED, 0), r"\bk\b"),
    ("clients_per_round r=0", lambda: linear_fedrep.clients_per_round(10, 0.0), r"participation rate r"),
    ("paper_heads n=True", lambda: linear_fedrep.paper_heads(True, 2), r"\bn\b"),
    ("head_solve population", lambda: linear_fedrep.head_solve(B0, POP), r"tasks must be the clients' data"),
    ("head_solve NaN B", lambda: linear_fedrep.head_solve(_with(B0, (0, 0), NAN), SAMPLED), r"\bB contains NaN"),
    ("representation_gradients heads", lambda: linear_fedrep.representation_gradients(B0, W0, SAMPLED), r"w \(heads\)"),
    ("head_gd lr=0",
     lambda: linear_fedrep.head_gd(B0, SAMPLED, torch.zeros(N, K, dtype=F64), lr=0.0, steps=1), r"lr"),
    ("global_error dtypes", lambda: linear_fedrep.global_error(POP.theta.float(), POP.theta), r"theta_star.*theta"),
    # ------------------------------------------------------------------ similarity
    ("cka rows", lambda: similarity.linear_cka(CX, CY[:9]), r"same examples"),
    ("cka NaN X", lambda: similarity.linear_cka(_with(CX, (0, 0), NAN), CY), r"X contains NaN"),
    ("cka constant X",
     lambda: similarity.linear_cka(torch.full((12, 3), 1e10, dtype=F64), CY), r"X is degenerate"),
    ("cka constant Y unbiased",
     lambda: similarity.linear_cka(CX, torch.ones(12, 2), unbiased=True), r"Y is degenerate"),
    ("minibatch batch_size", lambda: similarity.minibatch_cka(CX, CY, batch_size=2), r"batch_size"),
    ("rbf sigma_frac", lambda: similarity.rbf_cka(CX, CY, sigma_frac=0.0), r"sigma_frac"),
    ("kernel_cka shape", lambda: similarity.kernel_cka(CX, CX), r"K must be a square"),
    ("hsic unbiased n",
     lambda: similarity.hsic(torch.eye(3), torch.eye(3), unbiased=True), r"at least n = 4"),
    ("cosine n_classes",
     lambda: similarity.class_cosine_similarity(CX, torch.zeros(12, dtype=torch.long), 0), r"n_classes"),
    ("cosine float labels",
     lambda: similarity.class_cosine_similarity(CX, torch.zeros(12), 2), r"labels must be integers"),
    # ------------------------------------------------------------------ widgets
    ("fedavg explorer tau", lambda: s04_convergence.explorer_curves(0, 0.1, 1.0, 1.0), r"tau"),
    ("maml explorer algorithm",
     lambda: s04_tightness.explorer_curves("Reptile", 0.1, 0.1, 1.0, 0.0, "random"), r"algorithm"),
    ("fedrep explorer r", lambda: s06_new_clients.explorer_curves(10, 5, 1.5, None), r"\br\b"),
    ("Trajectory shapes", lambda: Trajectory(B0.expand(3, D, K), W0.expand(2, K)), r"need B \(T \+ 1, d, k\)"),
    ("Trajectory dtypes", lambda: Trajectory(B0.expand(3, D, K), W0.float().expand(3, K)), r"w \(the heads\)"),
    ("Trajectory 2-D B", lambda: Trajectory(B0, W0), r"B \(the representations\)"),
    # ------------------------------------------------------------------ shared checks
    ("check_same_kind devices", lambda: checks.check_same_kind(("B", B0), ("w", W0.to("meta"))),
     r"w is on device meta but B"),
    ("check_int bool", lambda: checks.check_int(True, "rounds"), r"rounds"),
    ("check_number string", lambda: checks.check_number("0.1", "alpha"), r"alpha"),
    ("check_fraction 0", lambda: checks.check_fraction(0.0, "participation"), r"participation"),
    ("check_same_kind device names both",
     lambda: checks.check_same_kind(("B", B0), ("w", W0.float())), r"w has dtype .* B has"),
    ("check_sequence string", lambda: checks.check_ints("123", "ms"), r"ms"),
    # ------------------------------------------------------------------ settings fail at construction
    ("FedAvgConvergence fractions=()",
     lambda: s04_convergence.ConvergenceSettings(fractions=()), r"fractions"),
    ("FedAvgConvergence fraction 0",
     lambda: s04_convergence.ConvergenceSettings(fractions=(1.0, 0.0)), r"fractions"),
    ("FedAvgConvergence tau=0", lambda: s04_convergence.ConvergenceSettings(tau=0), r"tau"),
    ("FedAvgConvergence rounds=True",
     lambda: s04_convergence.ConvergenceSettings(rounds=True), r"rounds"),
    ("FedAvgConvergence alpha=nan",
     lambda: s04_convergence.ConvergenceSettings(alpha=NAN), r"alpha"),
    ("FedAvgConvergence alpha str",
     lambda: s04_convergence.ConvergenceSettings(alpha="0.2"), r"alpha"),
    ("FedAvgConvergence taus", lambda: s04_convergence.ConvergenceSettings(taus=[1, 0]), r"taus"),
    ("FedAvgConvergence seed<0", lambda: s04_convergence.ConvergenceSettings(seed=-1), r"seed"),
    ("ArmDynamics k>=d", lambda: s02_arm_dynamics.ArmDynamicsSettings(k=50), r"\bd\b"),
    ("ArmDynamics beta<0", lambda: s02_arm_dynamics.ArmDynamicsSettings(beta=-1.0), r"beta"),
    ("FedAvgDsgd alpha=0", lambda: s01_fedavg_and_dsgd.FedAvgDsgdSettings(alpha=0.0), r"alpha"),
    ("SingleTask ms=()", lambda: s01_online_learning.SingleTaskSettings(ms=()), r"ms"),
    ("MetaInit centre outside",
     lambda: s02_meta_initialisation.MetaInitSettings(family=aruba.TaskFamily(m=40, center_norm=20.0)),
     r"center_norm"),
    ("MetaInit family", lambda: s02_meta_initialisation.MetaInitSettings(family=(10, 40)), r"family"),
    ("Framework reptile rates",
     lambda: s03_framework.FrameworkSettings(reptile_rates=(-1.0,)), r"reptile_rates"),
    ("ArubaNeural power=1", lambda: s05_neural.ArubaNeuralSettings(power=1.0), r"power"),
    ("ArubaRates varying>d", lambda: s04_adaptive_rates.ArubaRatesSettings(varying=11), r"varying"),
    ("DgdLowerBound d_range", lambda: s06_dgd_lower_bound.DgdLowerBoundSettings(d_range=(10,)), r"d_range"),
    ("Generalisation tau=1", lambda: s05_generalisation.GeneralisationSettings(tau=1), r"tau"),
    ("Personalisation spreads",
     lambda: s01_personalisation.PersonalisationSettings(spreads=(0.1, -1.0)), r"spreads"),
    ("Moment noise<0", lambda: s02_fedrep.MomentSettings(noise_std=-1.0), r"noise_std"),
    ("Trajectory r=0", lambda: s02_fedrep.TrajectorySettings(r=0.0), r"\br\b"),
    ("Rate window", lambda: s03_theory.RateSettings(window=(0.1, 0.01)), r"window"),
    ("Federation tol=0", lambda: s03_theory.LinearFederationSettings(tol=0.0), r"tol"),
    ("Fig1 ms=()", lambda: s04_fig1_local_vs_global.Fig1Settings(ms=()), r"ms"),
    ("Fig3 r>1", lambda: s05_fig3_head_updates.Fig3Settings(r=1.5), r"\br\b"),
    ("Fig4 fedavg_alpha=0", lambda: s06_new_clients.Fig4Settings(fedavg_alpha=0.0), r"fedavg_alpha"),
    ("LocalFits taus=()", lambda: s02_local_fits.LocalFitsSettings(taus=()), r"taus"),
    ("LowerBoundSweep step_fraction",
     lambda: s03_lower_bound.LowerBoundSweepSettings(step_fraction=(0.5,)), r"step_fraction"),
    ("PopulationDynamics n<=k", lambda: s02_population_dynamics.PopulationDynamicsSettings(n=2), r"\bn\b"),
    ("Tightness delta0=1", lambda: s04_tightness.TightnessSettings(delta0=1.0), r"delta0"),
    ("FiniteSample algorithms",
     lambda: s05_finite_samples.FiniteSampleSettings(algorithms=("MAML",)), r"algorithms"),
    ("NeuralMaml widths=()", lambda: s06_global_optimality.NeuralMamlSettings(widths=()), r"widths"),
    ("FixedFeature eta=0", lambda: s06_global_optimality.FixedFeatureSettings(eta=0.0), r"eta"),
    ("SampleComplexity trials=0", lambda: s01_model.SampleComplexitySettings(trials=0), r"trials"),
    ("Finetune delta=1", lambda: s04_finetuning.FinetuneSettings(delta=1.0), r"delta"),
    ("current() override", lambda: s02_fedrep.MomentSettings.current(repeats=0), r"repeats"),
    # ------------------------------------------------------------------ driver helpers
    ("average_regret_bound T=0", lambda: aruba.average_regret_bound(1.0, 1.0, 10, 0, 1.0, 0.1), r"\bT\b"),
    ("average_regret_bound eta=nan", lambda: aruba.average_regret_bound(1.0, 1.0, 10, 5, 1.0, NAN), r"eta"),
    ("stable_finetune_step fraction=nan", lambda: linear.stable_finetune_step(B0[None], W0[None], X1[None], NAN),
     r"fraction"),
    ("stable_finetune_step shapes", lambda: linear.stable_finetune_step(B0[None], W0[None], X1, 0.5), r"\bX\b"),
    ("average_risk_minimum NaN", lambda: meta.average_risk_minimum(_with(W, (0, 0), NAN)),
     r"W \(heads\) contains NaN"),
]


@pytest.mark.parametrize("call, name", [pytest.param(call, name, id=case) for case, call, name in CASES])
def test_bad_input_raises_value_error_naming_it(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_the_suite_is_large_and_its_ids_are_unique():
    ids = [case for case, _, _ in CASES]
    assert len(ids) >= 100 and len(set(ids)) == len(ids)


# ---------------------------------------------------------------------- issue 27: results, sizes, data, similarity, linear

from replearn import backend
from replearn.neural import data as data_lib, models
from replearn.book import results as results_lib, seeds as seeds_lib  # noqa: E402
from replearn.experiments.ch04_fedavg import s07_feature_similarity  # noqa: E402

FEAT = _randn(12, 5, seed=20)
FEAT_LABELS = torch.arange(12) % 3
SYM = FEAT @ FEAT.T

CASES_27 = [
    # ------------------------------------------------------------------ absurd sizes and seeds
    ("settings clients=1e12", lambda: dataclasses.replace(s07_feature_similarity.SimilaritySettings(),
                                                          clients=10**12), r"clients = 10+ .*MAX_COUNT"),
    ("settings total_steps=1e12", lambda: dataclasses.replace(s07_feature_similarity.SimilaritySettings(),
                                                              total_steps=10**12), r"total_steps"),
    ("settings trials=1e12", lambda: s01_model.SampleComplexitySettings(trials=10**12), r"trials = 10+"),
    ("settings grid entry 1e12", lambda: s02_local_fits.LocalFitsSettings(taus=(1, 10**12)), r"taus"),
    ("settings seed 2**64", lambda: dataclasses.replace(s07_feature_similarity.SimilaritySettings(), seed=2**64),
     r"seed must be at most 2\*\*64 - 1"),
    ("settings seeds 2**70", lambda: dataclasses.replace(s07_feature_similarity.SimilaritySettings(),
                                                         seeds=(0, 2**70)), r"every entry of seeds .*2\*\*64"),
    ("make_generator 2**64", lambda: backend.make_generator(2**64), r"seed must be at most 2\*\*64 - 1"),
    ("check_seeds 2**64", lambda: seeds_lib.check_seeds((0, 2**64)), r"seeds must be at most 2\*\*64"),
    ("make_model seed 2**64", lambda: models.make_model("fedrep_cnn", 10, 2**64, widths=FEDREP_WIDTHS["cifar10"]), r"\bseed\b"),
    ("model n_classes=1e12", lambda: models.FedRepCNN(10**12, FEDREP_WIDTHS["cifar10"]), r"n_classes=10+ .*MAX_PARAMETERS"),
    ("model channels=1e5", lambda: models.FedAvgCNN(10, channels=(10**5, 10**5, 10**5)), r"channels=.*MAX_PARAM"),
    ("fedrep rounds=1e12", lambda: run_fedrep(rounds=10**12), r"rounds = 10+ .*MAX_COUNT"),
    ("arm iterations=1e12", lambda: meta.arm(B0, W0, POP, beta=0.1, iterations=10**12), r"iterations = 10+"),
    ("partition n_clients=1e12", lambda: data_lib.dirichlet_partition(FEAT_LABELS, 10**12, 0.5, seed=0),
     r"n_clients = 10+"),
    # ------------------------------------------------------------------ data and models
    ("network variant=''", lambda: NetworkSpec.fedrep_cnn("", "float32"), r"variant must be one of"),
    ("network variant=1", lambda: NetworkSpec.fedrep_cnn(1, "float32"), r"variant must be one of"),
    ("model widths=(1, 2)", lambda: models.FedRepCNN(10, (1, 2)), r"widths must be a tuple"),
    ("model n_classes=True", lambda: models.FedRepCNN(True, FEDREP_WIDTHS["cifar10"]), r"n_classes must be positive ints"),
    ("partition n_clients float", lambda: data_lib.dirichlet_partition(FEAT_LABELS, 3.0, 0.5, seed=0),
     r"n_clients must be an integer"),
    ("shard n_clients float", lambda: data_lib.shard_partition(FEAT_LABELS, 3.0, 1, seed=0), r"n_clients"),
    ("partition empty labels", lambda: data_lib.dirichlet_partition(FEAT_LABELS[:0], 3, 0.5, seed=0),
     r"labels is empty"),
    ("test split out-of-range", lambda: data_lib.client_test_split([torch.tensor([0, 99])], FEAT_LABELS,
                                                                  FEAT_LABELS, seed=0), r"partition\[0\]"),
    ("download timeout=0", lambda: data_lib.load_cifar("cifar10", root="/nonexistent", timeout=0), r"timeout"),
    ("download retry_delay<0", lambda: data_lib.load_cifar("cifar10", root="/nonexistent", retry_delay=-1),
     r"retry_delay"),
    # ------------------------------------------------------------------ similarity
    ("cosine complex", lambda: similarity.class_cosine_similarity(FEAT.to(torch.complex128), FEAT_LABELS, 3),
     r"features is complex"),
    ("linear_cka complex", lambda: similarity.linear_cka(FEAT * 1j, FEAT), r"X is complex"),
    ("cosine 0 rows", lambda: similarity.class_cosine_similarity(FEAT[:0], FEAT_LABELS[:0], 3),
     r"features has no rows"),
    ("linear_cka 0 rows", lambda: similarity.linear_cka(FEAT[:0], FEAT[:0]), r"X has no rows"),
    ("rbf_kernel 0 rows", lambda: similarity.rbf_kernel(torch.zeros(0, 3, 4)), r"X has no rows"),
    ("kernel_cka asymmetric", lambda: similarity.kernel_cka(_randn(12, 12, seed=21), SYM), r"K is not symmetric"),
    ("kernel_cka asymmetric L", lambda: similarity.kernel_cka(SYM, SYM + torch.triu(SYM, 1)), r"L is not symmetric"),
    ("kernel_cka complex", lambda: similarity.kernel_cka(SYM.to(torch.complex128), SYM), r"K is complex"),
    ("rbf sigma tiny", lambda: similarity.rbf_kernel(FEAT, sigma_frac=1e-200), r"sigma_frac = 1e-200 is an absurd"),
    ("rbf sigma huge", lambda: similarity.rbf_kernel(FEAT, sigma_frac=1e200), r"sigma_frac = 1e\+200 is an absurd"),
    ("rbf_cka sigma huge", lambda: similarity.rbf_cka(FEAT, FEAT, sigma_frac=1e30), r"absurd RBF bandwidth"),
    # ------------------------------------------------------------------ linear corner cases
    ("fedrep B0=0", lambda: run_fedrep(B0=torch.zeros(D, K, dtype=F64)), r"B0 has rank 0 < k = 2"),
    ("fedrep B0 rank 1", lambda: run_fedrep(B0=BSTAR[:, :1].repeat(1, 2)), r"B0 has rank 1 < k = 2"),
    ("logistic ogd 1e300", lambda: aruba.ogd(OX * 1e300, OY.sign(), torch.zeros(3, dtype=F64), 0.1,
                                             loss="logistic"), r"X has entries up to .*rescale X"),
    ("squared ogd y 1e300", lambda: aruba.ogd(OX, OY * 1e300, torch.zeros(3, dtype=F64), 0.1), r"y has entries"),
    ("arm beta=0", lambda: meta.arm(B0, W0, POP, beta=0.0, iterations=2), r"^beta"),
    ("arm beta=nan", lambda: meta.arm(B0, W0, POP, beta=NAN, iterations=2), r"^beta"),
    ("population float16", lambda: linear.population_tasks(BSTAR.half(), W.half()), r"Bstar has dtype torch.float16"),
    ("distance bfloat16", lambda: linalg.principal_angle_distance(BSTAR.bfloat16(), BSTAR),
     r"B1 has dtype torch.bfloat16"),
    ("ogd float16", lambda: aruba.ogd(OX.half(), OY, torch.zeros(3, dtype=F64), 0.1), r"X has dtype torch.float16"),
    ("new_client_head dtypes", lambda: linear_fedrep.new_client_head(B0, X1[None].float(), Y1[None]),
     r"X has dtype torch.float32 but B"),
    ("new_client_head ranks", lambda: linear_fedrep.new_client_head(B0, X1, Y1), r"need X \(c, m, d\)"),
    ("finetune_gd unequal ranks", lambda: finetune_gd(y=Y1[:, None]), r"\by\b must have shape"),
    ("fedavg meta device", lambda: fedavg(B0=B0.to("meta")), r"B0 is on the meta device"),
    ("fedrep meta device", lambda: run_fedrep(B0=B0.to("meta")), r"B0 is on the meta device"),
    ("distance meta device", lambda: linalg.principal_angle_distance(BSTAR, BSTAR.to("meta")), r"B2 is on the meta"),
]


@pytest.mark.parametrize("call, name", [pytest.param(call, name, id=case) for case, call, name in CASES_27])
def test_issue_27_bad_input_raises_value_error_naming_it(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def _results_file(tmp_path, **over):
    import json
    record = {"section": "5.8", "profile": "long", "settings": {}, "seeds": [0, 1],
              "results": {"0": {"acc": 0.5}, "1": {"acc": 0.7}}, "provenance": {}}
    record.update(over)
    (tmp_path / "long").mkdir(exist_ok=True)
    (tmp_path / "long" / "5.8.json").write_text(json.dumps(record))
    return lambda: results_lib.load("5.8", "long", tmp_path)


@pytest.mark.parametrize("over, match", [
    ({"section": "4.7"}, r"section '4.7' at profile 'long', not of section '5.8'"),
    ({"profile": "paper"}, r"profile 'paper'"),
    ({"seeds": [0, 0, 1]}, r"seeds must be distinct"),
    ({"results": {"0": {"acc": NAN}, "1": {"acc": 0.7}}}, r"NaN or infinite values at \['/0/acc'\]"),
])
def test_issue_27_results_files_that_disagree_with_their_name_or_hold_nan(tmp_path, over, match):
    with pytest.raises(ValueError, match=match):
        _results_file(tmp_path, **over)()


def test_issue_27_results_file_truncated_names_the_file(tmp_path):
    load = _results_file(tmp_path)
    path = tmp_path / "long" / "5.8.json"
    path.write_text(path.read_text()[:25])
    with pytest.raises(ValueError, match=r"5.8.json is not a results file"):
        load()


def test_issue_27_class_cosine_similarity_of_huge_and_tiny_features_is_scale_free():
    ref = similarity.class_cosine_similarity(FEAT, FEAT_LABELS, 3)
    assert float(ref.abs().max()) > 0.1
    for scale in (1e160, 1e-160, 1e300, 1e-300):
        got = similarity.class_cosine_similarity(FEAT * scale, FEAT_LABELS, 3)
        assert torch.allclose(got, ref, rtol=1e-12, atol=1e-15), scale
    mixed = FEAT.clone()
    mixed[0] *= 1e200
    mixed[1] *= 1e-200
    assert torch.allclose(similarity.class_cosine_similarity(mixed, FEAT_LABELS, 3), ref, rtol=1e-12, atol=1e-15)


def test_issue_27_valid_similarity_and_seeds_are_unchanged():
    assert float(similarity.kernel_cka(SYM, SYM)) == pytest.approx(1.0, abs=1e-12)
    assert torch.equal(similarity.rbf_kernel(FEAT), similarity.rbf_kernel(FEAT * 2.0**40))
    assert backend.make_generator(2**64 - 1).initial_seed() == 2**64 - 1
    assert seeds_lib.check_seeds((0, 2**63)) == (0, 2**63)


# ---------------------------------------------------------------------- values that used to be silently wrong

def test_project_ball_of_huge_vectors_lands_on_the_sphere():
    for v in (torch.tensor([1e200, 1e200], dtype=F64), torch.tensor([1e-200, 0.0], dtype=F64) * 1e-120):
        p = aruba.project_ball(v, 10.0)
        assert bool(torch.isfinite(p).all())
    p = aruba.project_ball(torch.tensor([1e200, 1e200], dtype=F64), 10.0)
    assert torch.allclose(p, torch.full((2,), 10.0 / math.sqrt(2.0), dtype=F64), rtol=1e-14)
    huge, weights = torch.tensor([1e200, -3e199], dtype=F64), torch.tensor([1.0, 2.0], dtype=F64)
    weighted = aruba.project_ball(huge, 2.0, weights)
    assert float(weighted.norm()) == pytest.approx(2.0, rel=1e-9)
    small = torch.tensor([0.3, 0.4], dtype=F64)
    assert torch.equal(aruba.project_ball(small, 10.0), small)  # inside: unchanged, bit for bit


def test_nan_heads_are_reported_as_heads_not_as_a_step_size():
    bad = _with(W, (0, 0), NAN)
    for make in (lambda: linear.population_tasks(BSTAR, bad), lambda: linear.FreshSamples(BSTAR, bad, 2)):
        with pytest.raises(ValueError) as info:
            make()
        assert "W (heads)" in str(info.value) and "step size" not in str(info.value)


def test_divergence_is_still_reported_for_finite_inputs():
    with pytest.raises(ValueError, match="diverged"):
        fedavg(alpha=50.0, rounds=40)
    with pytest.raises(ValueError, match="diverged"):
        aruba.ogd(OX * 100, OY, torch.zeros(3, dtype=F64), 1e6)


def test_valid_calls_are_unchanged_by_the_checks():
    run = fedavg(rounds=5)
    assert run.B.shape == (6, D, K) and bool(torch.isfinite(run.B).all())
    same_span = BSTAR @ _randn(K, K, seed=11)
    assert float(linalg.principal_angle_distance(BSTAR, same_span)) == pytest.approx(0.0, abs=1e-12)
    zero_col = torch.cat([BSTAR[:, :1], torch.zeros(D, 1, dtype=F64)], dim=1)
    # a rank-deficient B1 is allowed: its missing direction counts as missed
    assert float(linalg.principal_angle_distance(zero_col, BSTAR)) == pytest.approx(1.0)
    labels = aruba.ogd(OX, OY.float(), torch.zeros(3, dtype=F64), 0.1)  # float32 labels: converted
    assert labels.losses.dtype == F64
    assert s04_convergence.ConvergenceSettings(taus=[1, 2]).taus == (1, 2)  # a list becomes a tuple


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU to put the inputs on two devices")
def test_inputs_on_two_devices_are_named():
    with pytest.raises(ValueError, match="is on device .* but"):
        fedavg(B0=B0.cuda(), w0=W0.cuda())
    with pytest.raises(ValueError, match="B2 is on device .* but B1"):
        linalg.principal_angle_distance(BSTAR, BSTAR.cuda())


@pytest.mark.parametrize("key", sorted(settings_classes()))
def test_every_settings_field_is_type_checked_at_construction(key):
    """A bool for a count, a string for a number, a NaN for a float and an empty grid fail when
    the settings are built, naming the field, in every settings class of the book."""
    cls = settings_classes()[key]
    base = cls.profile("default")
    for f in dataclasses.fields(cls):
        kinds = _annotated_kinds(f.type)
        bad = ([True] if kinds == {"int"} else ["0.1", NAN] if "float" in kinds and kinds <= {"int", "float"}
               else [()] if kinds == {"tuple"} and isinstance(f.default, tuple) and f.default else [])
        for value in bad:
            with pytest.raises(ValueError, match=rf"\b{f.name}\b"):
                dataclasses.replace(base, **{f.name: value})


# ============================================================================================
# The neural engine (replearn.neural, replearn.neural.algorithms): training that blows up while staying
# finite, bad data or starting state blamed on nothing else, NaN models, absurd sizes (issue 27)
# ============================================================================================


def _neural_tiny(seed=0):
    from torch import nn

    class _Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                                      nn.Linear(4 * 16, 8), nn.ReLU())
            self.head = nn.Linear(8, 3)

        def forward(self, x):
            return self.head(self.body(x))

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _Tiny().to(F64)


def _neural_clients(sizes=(12, 20, 8), scale=1.0):
    from replearn import neural
    g = torch.Generator().manual_seed(0)
    xs = tuple(scale * torch.randn(n, 3, 8, 8, generator=g, dtype=F64) for n in sizes)
    ys = tuple(torch.randint(0, 3, (n,), generator=g) for n in sizes)
    return neural.ClientData(xs, ys, xs, ys)


@pytest.mark.parametrize("algorithm", ["fedavg", "fedrep", "fedper", "local_only"])
@pytest.mark.parametrize("lr", [1e3, 30.0])
def test_neural_divergence_while_finite_names_the_learning_rate(algorithm, lr):
    from replearn import neural
    cfg = neural.TrainConfig(rounds=2, lr=lr, local_steps=3, head_steps=3, batch_size=5)
    with pytest.raises(FloatingPointError, match=rf"lr = {lr:g}"):
        run_key(algorithm, _neural_tiny(), _neural_clients(), cfg)


@pytest.mark.parametrize("name", ["FedProx", "SCAFFOLD", "Ditto", "APFL", "Per-FedAvg", "Fed-MTL", "FedAvg+FT"])
def test_neural_protocol_algorithms_report_divergence_with_the_learning_rate(name):
    from replearn.neural import algorithms
    from replearn import neural
    cfg = neural.TrainConfig(rounds=2, lr=1e3, local_steps=3, batch_size=5)
    with pytest.raises(FloatingPointError, match="lr = 1000"):
        algorithms.run(name, _neural_tiny(), _neural_clients(), cfg)


def test_neural_divergence_factor_is_documented_and_sane():
    from replearn import neural
    assert neural.DIVERGENCE_FACTOR == 1e3 and "DIVERGENCE_FACTOR" in neural.LocalSGD.watch.__doc__
    ok = algorithms.run("FedAvg", _neural_tiny(), _neural_clients(), neural.TrainConfig(rounds=2, lr=0.05, local_steps=3))
    assert math.isfinite(ok.accuracy)


@pytest.mark.parametrize("scale", [1e30, 1e5])
def test_neural_huge_pixels_are_named_not_blamed_on_the_step_size(scale):
    from replearn import neural
    with pytest.raises(ValueError, match="client 0 train images.*MAX_INPUT.*normalise"):
        algorithms.run("FedAvg", _neural_tiny(), _neural_clients(scale=scale), neural.TrainConfig(rounds=1, lr=0.01))


@pytest.mark.parametrize("bad", [NAN, math.inf, 1e9])
def test_neural_bad_starting_state_is_named(bad):
    from replearn.neural import algorithms
    from replearn import neural
    model = _neural_tiny()
    state = {n: p.detach().clone() for n, p in model.named_parameters()}
    state["body.0.weight"][0, 0, 0, 0] = bad
    cfg = neural.TrainConfig(rounds=1, lr=0.01, local_steps=1)
    with pytest.raises(ValueError, match="starting state's parameter 'body.0.weight'"):
        run_key("fedavg", model, _neural_clients(), cfg, state=state)
    with pytest.raises(ValueError, match="'body.0.weight'"):
        algorithms.run("Ditto", model, _neural_clients(), cfg, state=state)
    with torch.no_grad():
        model.body[0].weight[0, 0, 0, 0] = bad
    with pytest.raises(ValueError, match="model's parameter 'body.0.weight'"):
        algorithms.run("FedAvg", model, _neural_clients(), cfg)


def test_neural_evaluate_refuses_a_nan_model():
    from replearn import neural
    model = _neural_tiny()
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(NAN)
    with pytest.raises(ValueError, match="NaN or infinite.*not evaluated"):
        neural.evaluate(model, _neural_clients())
    good = _neural_tiny()
    local = {"head.bias": torch.full((3, 3), NAN, dtype=F64)}
    with pytest.raises(ValueError, match="local parameter 'head.bias'"):
        neural.evaluate(good, _neural_clients(), local=local)


@pytest.mark.parametrize("field", ["rounds", "local_steps", "local_epochs", "head_steps", "head_epochs",
                                   "vmap_clients"])
def test_neural_absurd_sizes_are_refused_at_construction(field):
    from replearn import neural
    with pytest.raises(ValueError, match=rf"{field}.*MAX_COUNT"):
        neural.TrainConfig(**{field: 10**12})


def test_neural_absurd_work_is_refused_before_anything_is_allocated():
    from replearn.neural import algorithms
    from replearn import neural
    model, clients = _neural_tiny(), _neural_clients()
    with pytest.raises(ValueError, match="MAX_RUN_STEPS"):
        algorithms.run("FedAvg", model, clients, neural.TrainConfig(rounds=10**6, local_steps=10**5))
    with pytest.raises(ValueError, match="MAX_PHASE_BATCHES"):
        algorithms.run("FedRep", model, clients, neural.TrainConfig(rounds=1, head_steps=5 * 10**6, local_steps=1))
    with pytest.raises(ValueError, match="MAX_PHASE_BATCHES"):
        algorithms.run("FedAvg", model, clients, neural.TrainConfig(rounds=1, local_epochs=10**6, batch_size=1))
    with pytest.raises(ValueError, match="MAX_RUN_STEPS"):
        algorithms.run("SCAFFOLD", model, clients, neural.TrainConfig(rounds=10**6, local_steps=10**4))
    with pytest.raises(ValueError, match="epochs"):
        finetune(model, clients, epochs=10**12)
    with pytest.raises(ValueError, match="MAX_PHASE_BATCHES"):
        neural.plan_batches(10, 5, steps=10**7, epochs=1, generator=torch.Generator())


def test_neural_seeds_that_overflow_the_generator_are_named():
    from replearn import neural
    with pytest.raises(ValueError, match="seed must be at most 2\\*\\*64 - 1"):
        neural.TrainConfig(seed=2**70)


# ============================================================================================
# Issue 37: algorithm options that scale the steps, NumPy options, FedProx at mu = 0, L2GD's
# rounds without a local step, impossible Dirichlet partitions, specs naming absent classes,
# starting states of another architecture
# ============================================================================================

import numpy as np  # noqa: E402


@pytest.mark.parametrize("name,field", [("FedProx", "mu"), ("Ditto", "lam"), ("Fed-MTL", "lam"),
                                        ("Per-FedAvg", "alpha"), ("SCAFFOLD", "global_lr")])
def test_divergence_caused_by_an_option_names_the_option(name, field):
    """A huge step-scaling option diverges at a sane lr: the error names the option and its value,
    not only the learning rate (which alone trains fine)."""
    from replearn.neural import algorithms
    from replearn import neural
    cfg = neural.TrainConfig(rounds=3, lr=0.01, local_steps=3, batch_size=5)
    opts = algorithms.get(name).Options(**{field: 1e6})
    with pytest.raises(FloatingPointError,
                       match=rf"lr = 0\.01 and {name}'s {field} = 1e\+06; lower {field} or the learning rate"):
        algorithms.run(name, _neural_tiny(), _neural_clients(), cfg, opts)
    ok = algorithms.run(name, _neural_tiny(), _neural_clients(), cfg)  # the default options: no divergence
    assert bool(torch.isfinite(ok.train_loss).all())


def test_every_algorithm_declares_its_step_scaling_options():
    from replearn.neural import algorithms
    from replearn import neural
    for name in algorithms.names():
        opts = algorithms.get(name).Options
        scales = getattr(opts, "step_scales", ())
        assert set(scales) <= {f.name for f in dataclasses.fields(opts)}, name
    declared = {n: algorithms.get(n).Options.step_scales for n in ("FedProx", "Ditto", "Fed-MTL", "Per-FedAvg",
                                                                    "SCAFFOLD", "L2GD", "APFL")}
    assert all(declared.values())
    apfl = algorithms.get("APFL").Options()  # alpha_lr None (the run's lr): only the learning rate to lower
    assert neural.divergence_advice(0.1, "APFL", apfl) == "with lr = 0.1; lower the learning rate"
    l2gd = algorithms.get("L2GD").Options(lam=0.5, p=0.9)
    assert "L2GD's p = 0.9; lower p or the learning rate" in neural.divergence_advice(0.1, "L2GD", l2gd)


@pytest.mark.parametrize("value", [np.float64(0.25), np.float32(0.25), np.float16(0.5), np.int64(2), 2])
def test_numpy_real_options_are_accepted_as_python_floats(value):
    from replearn.neural import algorithms
    for name, field in [("FedProx", "mu"), ("Ditto", "lam"), ("Fed-MTL", "lam"), ("SCAFFOLD", "global_lr"),
                        ("Per-FedAvg", "alpha"), ("APFL", "alpha_lr"), ("L2GD", "lam")]:
        opts = algorithms.get(name).Options(**{field: value})
        got = getattr(opts, field)
        assert type(got) is float and got == float(value), (name, got)
        assert opts == algorithms.get(name).Options(**{field: float(value)})  # equal, same repr and hash
        assert repr(opts) == repr(algorithms.get(name).Options(**{field: float(value)}))
    p = algorithms.get("L2GD").Options(p=np.float32(0.5)).p
    assert type(p) is float and p == 0.5


@pytest.mark.parametrize("bad", [True, np.bool_(True), NAN, INF, np.float32("nan"), np.float64("-inf"), "0.1",
                                 10**400, None, torch.tensor(0.1)],
                         ids=["bool", "np.bool_", "nan", "inf", "f32-nan", "f64-inf", "str", "10**400", "None",
                              "tensor"])
def test_options_still_refuse_bools_non_finite_values_and_strings(bad):
    from replearn.neural import algorithms
    with pytest.raises(ValueError, match="mu must be a finite real number"):
        algorithms.get("FedProx").Options(mu=bad)


@pytest.mark.parametrize("extra", [dict(local_steps=4, batch_size=5, vmap_clients=2),
                                   dict(local_steps=None, local_epochs=2, batch_size=5),
                                   dict(local_steps=4, batch_size=5, weight_decay=1e-3)])
def test_fedprox_with_mu_zero_is_fedavg_bit_for_bit_in_float32_with_momentum(extra):
    """mu = 0 takes FedAvg's own arithmetic: iterates, losses and accuracies equal bit for bit in
    float32 with momentum, on the per-client, epoch and batched paths (these differed by an ulp)."""
    from replearn.neural import algorithms
    from replearn import neural
    model = _neural_tiny().float()
    clients = _neural_clients(sizes=(12, 20, 8, 16)).to(torch.float32)
    cfg = neural.TrainConfig(**{**dict(rounds=3, lr=0.1, momentum=0.5, participation=1.0, last_rounds=1), **extra})
    a = algorithms.run("FedAvg", model, clients, cfg)
    b = algorithms.run("FedProx", model, clients, cfg, algorithms.get("FedProx").Options(mu=0.0))
    assert b.algorithm == "FedProx" and b.state["head.weight"].dtype == torch.float32
    assert all(torch.equal(a.state[n], b.state[n]) for n in a.state)
    assert torch.equal(a.train_loss, b.train_loss) and torch.equal(a.final.accuracy, b.final.accuracy)
    assert torch.equal(a.test_accuracy, b.test_accuracy) and a.participants == b.participants
    assert b.extras["server"] == {} and set(b.extras["clients"]) == {i for s in b.participants for i in s}
    small = algorithms.run("FedProx", model, clients, cfg, algorithms.get("FedProx").Options(mu=1e-3))
    assert not all(torch.equal(a.state[n], small.state[n]) for n in a.state)  # mu > 0 is not FedAvg


@pytest.mark.parametrize("vmap", [1, 2])
def test_l2gd_rounds_without_a_local_step_report_a_measured_loss(vmap):
    """With one step per round and p = 0.5 some rounds' coins only aggregate: their loss is the
    loss of each client's final model on its round's first minibatch (no 0.0 for "no step")."""
    from replearn.neural import algorithms
    from replearn import neural
    from replearn.backend import make_generator
    opts = algorithms.get("L2GD").Options(lam=1.0, p=0.5)
    clients = _neural_clients(sizes=(12, 20, 8, 16))
    base = dict(lr=0.1, batch_size=5, local_steps=1, participation=1.0, last_rounds=1, vmap_clients=vmap)
    # replay the coins: the rounds whose single coin says "aggregate"
    cfg = neural.TrainConfig(rounds=8, **base)
    gen, phases = make_generator(cfg.seed), algorithms.get("L2GD").phases(_neural_tiny(), cfg, opts)
    no_step = []
    for t in range(cfg.rounds):
        plan = neural.plan_round(clients.train_sizes.tolist(), phases, cfg, gen)
        coins = (torch.rand(max(len(plan.batches[i][0]) for i in plan.clients), generator=gen) < opts.p).tolist()
        if all(coins):
            no_step.append((t, plan))
    assert no_step, "the test needs a round without a local step"
    r = algorithms.run("L2GD", _neural_tiny(), clients, cfg, opts)
    assert bool(torch.isfinite(r.train_loss).all()) and bool((r.train_loss > 0.1).all())
    t, plan = no_step[0]
    short = algorithms.run("L2GD", _neural_tiny(), clients, neural.TrainConfig(rounds=t + 1, **base), opts)
    assert torch.equal(short.train_loss, r.train_loss[:t + 1]) or vmap > 1
    model = _neural_tiny()
    sizes = clients.train_sizes.to(F64)
    losses = []
    for i in range(clients.n_clients):
        x_i = {n: short.local[n][i] for n in short.local_names}
        idx = plan.batches[i][0][0]
        out = torch.func.functional_call(model, x_i, (clients.x_train[i][idx],))
        losses.append(torch.nn.functional.cross_entropy(out, clients.y_train[i][idx]))
    expected = float((sizes * torch.stack(losses)).sum() / sizes.sum())
    assert float(short.train_loss[t]) == pytest.approx(expected, rel=1e-6)  # train_loss is float32


def test_impossible_dirichlet_min_size_is_refused_before_any_draw(monkeypatch):
    from replearn.neural import data

    class NoDraws:
        def __getattr__(self, name):
            raise AssertionError(f"drew ({name}) although no draw can succeed")

    y = torch.arange(10).repeat_interleave(500)
    monkeypatch.setattr(data.partition, "_rng", lambda seed: NoDraws())
    with pytest.raises(ValueError, match=r"min_size=300 .* 20 clients needs 6000 samples, but labels has 5000.*"
                                         r"min_size <= 250 or at most 16 clients"):
        data.dirichlet_partition(y, 20, 0.6, seed=0, min_size=300, max_attempts=10_000)
    monkeypatch.undo()
    with pytest.raises(ValueError, match="MAX_DIRICHLET_ATTEMPTS"):
        data.dirichlet_partition(y, 20, 0.6, seed=0, max_attempts=10**7)
    assert data.MAX_DIRICHLET_ATTEMPTS <= 10**4
    # feasible but (nearly) hopeless: every client needs exactly its tenth of the samples
    small = torch.arange(10).repeat_interleave(10)
    with pytest.raises(ValueError, match=r"best draw's smallest client had \d+\), so a draw succeeds with "
                                         r"probability below about 0\.15 \(95% bound from 20 failures\)"):
        data.dirichlet_partition(small, 10, 0.5, seed=0, min_size=10, max_attempts=20)
    parts = data.dirichlet_partition(small, 10, 100.0, seed=0, min_size=5, max_attempts=1000)  # possible: works
    assert min(len(p) for p in parts) >= 5 and sum(len(p) for p in parts) == 100
    assert np.array_equal(np.sort(torch.cat(parts).numpy()), np.arange(100))


def test_federation_spec_naming_absent_classes_is_refused():
    from cifar_fixtures import fake_cifar
    from replearn.neural.specs import FederationSpec
    c = fake_cifar(10, 20, 6)
    with pytest.raises(ValueError, match=r"classes \[12\] are not classes of cifar10: its labels are 0\.\.9 "
                                         r"\(10 classes\)"):
        FederationSpec(3, classes_per_client=1, classes=(0, 1, 12)).build(c, partition_seed=0, test_seed=1)
    with pytest.raises(ValueError, match=r"classes \[-1\] are not classes"):
        FederationSpec(3, classes_per_client=1, classes=(-1, 1, 2)).build(c, partition_seed=0, test_seed=1)
    with pytest.raises(ValueError, match="integer class labels"):
        FederationSpec(2, classes_per_client=1, classes=(0, 1.5)).build(c, partition_seed=0, test_seed=1)
    with pytest.raises(ValueError, match="distinct"):
        FederationSpec(2, classes_per_client=1, classes=(3, 3)).build(c, partition_seed=0, test_seed=1)
    keep = c.y_train != 3  # a dataset whose training images lack class 3
    holed = dataclasses.replace(c, x_train=c.x_train[keep], y_train=c.y_train[keep])
    with pytest.raises(ValueError, match=r"classes \[3\] have no training images in this cifar10 data"):
        FederationSpec(2, classes_per_client=1, classes=(2, 3)).build(holed, partition_seed=0, test_seed=1)
    with pytest.raises(ValueError, match=r"classes \[3\] have no training images"):
        FederationSpec(5, classes_per_client=2).build(holed, partition_seed=0, test_seed=1)  # None: all classes
    fed = FederationSpec(2, classes_per_client=1, classes=(2, 4)).build(holed, partition_seed=0, test_seed=1)
    assert fed.classes == (2, 4) and fed.n_classes == 2


def test_starting_state_of_another_architecture_is_named_with_both_shapes():
    from replearn.neural import algorithms
    from replearn import neural
    model, clients = _neural_tiny(), _neural_clients()
    cfg = neural.TrainConfig(rounds=1, lr=0.01, local_steps=1)
    good = {n: p.detach().clone() for n, p in model.named_parameters()}
    wrong = {**good, "head.weight": torch.zeros(5, 8, dtype=F64)}  # a 5-class head
    msg = r"parameter 'head.weight' has shape \(5, 8\), but the model's has shape \(3, 8\)"
    with pytest.raises(ValueError, match=msg):
        run_key("fedavg", model, clients, cfg, state=wrong)
    with pytest.raises(ValueError, match=msg):
        algorithms.run("Ditto", model, clients, cfg, state=wrong)
    with pytest.raises(ValueError, match=r"'body.0.weight' has shape \(4, 3, 9\)"):
        run_key("fedrep", model, clients, cfg,
                        state={**good, "body.0.weight": torch.zeros(4, 3, 9, dtype=F64)})
    with pytest.raises(ValueError, match=r"entries \['head.extra'\] that are not parameters of the model"):
        run_key("fedavg", model, clients, cfg,
                        state={**good, "head.extra": torch.zeros(3)})
    with pytest.raises(ValueError, match="'head.bias' must be a torch.Tensor"):
        algorithms.run("FedProx", model, clients, cfg, state={**good, "head.bias": [0.0, 0.0, 0.0]})
    with pytest.raises(ValueError, match="state must be a dict"):
        run_key("fedavg", model, clients, cfg, state=[1, 2])
    assert math.isfinite(run_key("fedavg", model, clients, cfg,
                                         state=good).accuracy)
