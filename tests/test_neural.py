import copy
import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import nn

from replearn.neural.engine import rounds
from replearn.neural import models
from replearn import neural
from replearn.neural.algorithms import dsgd
from replearn.neural import algorithms
from replearn.backend import make_generator
from replearn.neural.specs import FEDREP_WIDTHS
from tiny_net import Tiny, authors_sgd
from engine_calls import finetune, run_key


def tiny_model(seed=0):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Tiny()


def tiny_clients(sizes=(12, 20, 8, 16), n_test=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    xs, ys, xt, yt = [], [], [], []
    for i, n in enumerate(sizes):
        shift = torch.randn(3, 1, 1, generator=g)
        xs.append(torch.randn(n, 3, 8, 8, generator=g) + shift)
        ys.append(torch.randint(0, 3, (n,), generator=g))
        xt.append(torch.randn(n_test + i, 3, 8, 8, generator=g) + shift)
        yt.append(torch.randint(0, 3, (n_test + i,), generator=g))
    return neural.ClientData(tuple(xs), tuple(ys), tuple(xt), tuple(yt))


CLIENTS = tiny_clients()
BIG = 1000  # a batch size above every client's data size: full-batch steps


def params_of(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def assert_close(a, b, atol=1e-5):
    assert a.keys() == b.keys()
    for n in a:
        assert torch.allclose(a[n], b[n], atol=atol, rtol=0), (n, float((a[n] - b[n]).abs().max()))


def reference(model, clients, cfg, participants, *, shared, local, phases):
    """Direct per-client loop with deepcopy and torch.optim.SGD, full-batch steps;
    ``phases``: list of (trainable names, number of steps)."""
    glob = copy.deepcopy(model)
    init = params_of(model)
    locals_ = [{n: init[n].clone() for n in local} for _ in range(clients.n_clients)]
    for sel in participants:
        total = sum(clients.x_train[i].shape[0] for i in sel)
        acc = {n: 0.0 for n in shared}
        for i in sel:
            m = copy.deepcopy(glob)
            with torch.no_grad():
                for n, p in m.named_parameters():
                    if n in local:
                        p.copy_(locals_[i][n])
            for names, steps in phases:
                ps = [p for n, p in m.named_parameters() if n in names]
                opt = authors_sgd(ps, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
                for _ in range(steps):
                    opt.zero_grad()
                    nn.functional.cross_entropy(m(clients.x_train[i]), clients.y_train[i]).backward()
                    opt.step()
            new = params_of(m)
            for n in local:
                locals_[i][n] = new[n]
            for n in shared:
                acc[n] = acc[n] + clients.x_train[i].shape[0] * new[n]
        with torch.no_grad():
            for n, p in glob.named_parameters():
                if n in shared:
                    p.copy_(acc[n] / total)
    stacked = {n: torch.stack([loc[n] for loc in locals_]) for n in local}
    return params_of(glob), stacked


BODY = [n for n, _ in tiny_model().named_parameters() if n.startswith("body.")]
HEAD = ["head.weight", "head.bias"]
TOP2 = BODY[-2:] + HEAD  # LG-FedAvg's shared layers (the authors' split): the last hidden layer and the head
LOWER = BODY[:-2]



def reference_sgd(model, trainable, x, y, batches, cfg):
    """torch.optim.SGD on a deep copy of ``model`` over the parameters named in ``trainable``, one
    step per batch of ``batches``: the trained copy and the summed loss (what LocalSGD must match)."""
    ref = copy.deepcopy(model)
    opt = authors_sgd([p for n, p in ref.named_parameters() if n in trainable], lr=cfg.lr,
                          momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    total = 0.0
    for idx in batches:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(ref(x[idx]), y[idx])
        loss.backward()
        opt.step()
        total += float(loss.detach())
    return ref, total

def test_fedavg_one_full_batch_step_is_centralised_gradient_descent():
    model = tiny_model()
    cfg = neural.TrainConfig(rounds=4, lr=0.3, momentum=0.0, batch_size=BIG, local_steps=1)
    result = algorithms.run("FedAvg", model, CLIENTS, cfg)
    x, y = torch.cat(CLIENTS.x_train), torch.cat(CLIENTS.y_train)
    gd = tiny_model()
    opt = torch.optim.SGD(gd.parameters(), lr=cfg.lr)
    for _ in range(cfg.rounds):
        opt.zero_grad()
        nn.functional.cross_entropy(gd(x), y).backward()  # mean over all N = sum_i n_i/N f_i
        opt.step()
    assert_close(result.state, params_of(gd))
    assert not torch.allclose(result.state["head.weight"], model.head.weight)
    assert torch.all(result.train_loss[1:] < result.train_loss[:-1])


@pytest.mark.parametrize("participation", [1.0, 0.5])
def test_fedavg_averages_client_models_weighted_by_size(participation):
    model = tiny_model()
    cfg = neural.TrainConfig(rounds=3, lr=0.1, momentum=0.9, weight_decay=1e-2, batch_size=BIG, local_steps=3,
                             participation=participation, seed=3)
    result = algorithms.run("FedAvg", model, CLIENTS, cfg)
    assert all(len(p) == round(4 * participation) for p in result.participants)
    everything = BODY + HEAD
    ref, _ = reference(model, CLIENTS, cfg, result.participants, shared=everything, local=[],
                       phases=[(everything, 3)])
    assert_close(result.state, ref)
    assert result.local == {}


@pytest.mark.parametrize("algorithm, shared, local, phases", [
    ("fedrep", BODY, HEAD, [(HEAD, 2), (BODY, 1)]),
    ("fedper", BODY, HEAD, [(BODY + HEAD, 1)]),
    ("lg_fedavg", TOP2, LOWER, [(BODY + HEAD, 1)]),
    ("local_only", [], BODY + HEAD, [(BODY + HEAD, 1)]),
])
def test_personalised_algorithms_share_exactly_the_right_parts(algorithm, shared, local, phases):
    model = tiny_model()
    cfg = neural.TrainConfig(rounds=3, lr=0.2, momentum=0.5, batch_size=BIG, local_epochs=1, head_epochs=2,
                             participation=0.75, seed=1)
    result = run_key(algorithm, model, CLIENTS, cfg)
    ref_global, ref_local = reference(model, CLIENTS, cfg, result.participants, shared=shared, local=local,
                                      phases=phases)
    assert set(result.local) == set(local) and set(result.shared_names) == set(shared)
    assert_close(result.state, ref_global)
    assert_close(result.local, ref_local)
    # local parts differ between clients that trained; shared parts equal the server's
    trained = sorted(set(sum(result.participants, ())))
    n = local[0]
    assert not torch.allclose(result.local[n][trained[0]], result.local[n][trained[1]])
    for name in shared:
        assert torch.equal(result.client_state(trained[0])[name], result.state[name])


class Split(algorithms.base.Algorithm):
    """A method declared by its parts: the body shared, the head personal, the given phases."""

    name = "split"

    def __init__(self, phases):
        self._phases = tuple(neural.Phase(tuple(t), s, e) for t, s, e in phases)

    def personal_names(self, model, options):
        return tuple(HEAD)

    def phases(self, model, cfg, options):
        return self._phases


def test_fedrep_heads_change_only_in_head_phase_and_body_only_in_body_phase():
    model = tiny_model()
    cfg = neural.TrainConfig(rounds=1, lr=0.2, batch_size=BIG, head_epochs=3)
    body_only = neural.run(Split([(BODY, None, 1)]), model, CLIENTS, cfg)
    init = params_of(model)
    for n in HEAD:  # heads frozen in the body phase
        assert torch.equal(body_only.local[n], init[n].expand_as(body_only.local[n]))
    head_only = neural.run(Split([(HEAD, None, 3)]), model, CLIENTS, cfg)
    assert_close(head_only.state, init, atol=1e-6)  # bodies unchanged (up to the averaging rounding)


def test_runs_are_bit_identical_for_a_seed_and_vmap_matches_sequential():
    model = tiny_model()
    cfg = neural.TrainConfig(rounds=3, lr=0.1, momentum=0.5, weight_decay=1e-3, batch_size=4, local_steps=3,
                             participation=0.75, augment=True, seed=7)
    a, b = algorithms.run("FedRep", model, CLIENTS, cfg), algorithms.run("FedRep", model, CLIENTS, cfg)
    assert_close(a.state, b.state, atol=0)
    assert_close(a.local, b.local, atol=0)
    assert torch.equal(a.train_loss, b.train_loss)
    c = algorithms.run("FedRep", model, CLIENTS, replace(cfg, seed=8))
    assert not torch.equal(a.state["head.weight"] if "head.weight" in a.state else a.local["head.weight"],
                           c.local["head.weight"])
    # clients with equal schedules (equal batch sizes per step) trained together with vmap
    plain = replace(cfg, augment=False, participation=1.0)
    seq = algorithms.run("FedAvg", model, CLIENTS, plain)
    vm = algorithms.run("FedAvg", model, CLIENTS, replace(plain, vmap_clients=4))
    assert_close(seq.state, vm.state, atol=1e-5)


@pytest.mark.parametrize("algorithm", ["fedavg", "fedrep", "lg_fedavg"])
def test_client_threads_give_the_iterates_of_a_one_thread_run(algorithm):
    model = tiny_model()
    cfg = neural.TrainConfig(rounds=3, lr=0.1, momentum=0.5, weight_decay=1e-3, batch_size=4, local_steps=3,
                             head_steps=2, participation=0.75, seed=3)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = run_key(algorithm, model, CLIENTS, cfg)  # one thread: the clients one after another
        torch.set_num_threads(2)
        runs = [run_key(algorithm, model, CLIENTS, cfg, workers=w) for w in (2, 3, 4)]
        assert torch.get_num_threads() == 2  # the pool restores the caller's thread count
    finally:
        torch.set_num_threads(threads)
    for run in runs:
        assert_close(one.state, run.state, atol=0)
        assert_close(one.local, run.local, atol=0)
        assert torch.equal(one.train_loss, run.train_loss)
        assert torch.equal(one.test_accuracy.nan_to_num(-1), run.test_accuracy.nan_to_num(-1))
        assert one.participants == run.participants


def test_client_threads_report_divergence_and_bad_settings():
    cfg = neural.TrainConfig(rounds=3, lr=1e4, momentum=0.0, batch_size=BIG, local_steps=5)
    threads = torch.get_num_threads()
    with pytest.raises(FloatingPointError, match=r"round \d+: client \d+.*lr = 10000"):
        neural.run(algorithms.get("FedAvg"), tiny_model(), CLIENTS, cfg, workers=2)
    assert torch.get_num_threads() == threads
    for workers in (0, 1.5, True):
        with pytest.raises(ValueError, match="workers"):
            neural.run(algorithms.get("FedAvg"), tiny_model(), CLIENTS, cfg, workers=workers)
    for change in (dict(augment=True), dict(vmap_clients=2)):
        with pytest.raises(ValueError, match="workers=1"):
            neural.run(algorithms.get("FedAvg"), tiny_model(), CLIENTS, replace(cfg, lr=0.1, **change), workers=2)


def test_evaluate_matches_a_direct_computation_and_weights_by_test_size():
    model = tiny_model()
    cfg = neural.TrainConfig(rounds=2, lr=0.2, batch_size=5, head_epochs=1)
    result = algorithms.run("FedRep", model, CLIENTS, cfg)
    ev = neural.evaluate(model, CLIENTS, result.state, result.local, batch_size=4)
    direct = []
    for i in range(CLIENTS.n_clients):
        m = result.load_into(tiny_model(1), i)
        with torch.no_grad():
            direct.append(float((m(CLIENTS.x_test[i]).argmax(1) == CLIENTS.y_test[i]).float().mean()))
    assert torch.allclose(ev.accuracy, torch.tensor(direct))
    sizes = torch.tensor([x.shape[0] for x in CLIENTS.x_test], dtype=torch.float32)
    assert ev.average == pytest.approx(float((sizes * torch.tensor(direct)).sum() / sizes.sum()))
    assert result.test_accuracy[-1] == pytest.approx(ev.average)
    assert result.accuracy == pytest.approx(float(result.test_accuracy.mean()))


def test_dsgd_is_fedavg_with_one_step_and_matched_config_equalises_updates():
    model = tiny_model()
    cfg = neural.TrainConfig(rounds=2, lr=0.1, batch_size=5, local_steps=4, eval_every=1, last_rounds=2)
    matched = dsgd.matched_config(cfg)
    assert (matched.rounds * 1, matched.eval_every, matched.last_rounds) == (8, 4, 8)
    d = algorithms.run("D-SGD", model, CLIENTS, matched)
    f = algorithms.run("FedAvg", model, CLIENTS, replace(matched, local_steps=1))
    assert d.algorithm == "D-SGD"
    assert_close(d.state, f.state, atol=0)
    assert int((~torch.isnan(d.test_accuracy)).sum()) == 2
    with pytest.raises(ValueError, match="local_steps"):
        dsgd.matched_config(replace(cfg, local_steps=None))


def test_finetune_head_changes_only_heads_all_changes_everything():
    model = tiny_model()
    init = params_of(model)
    head = finetune(model, CLIENTS, epochs=2, part="head", lr=0.1)
    assert set(head.local) == set(HEAD)
    assert_close(head.state, init, atol=0)
    assert not torch.allclose(head.local["head.weight"][0], head.local["head.weight"][1])
    full = finetune(model, CLIENTS, state=init, epochs=2, part="all", lr=0.1)
    assert set(full.local) == set(BODY + HEAD)
    with pytest.raises(ValueError, match="part"):
        finetune(model, CLIENTS, part="body")


def test_callback_reports_every_round():
    seen = []
    algorithms.run("FedAvg", tiny_model(), CLIENTS, neural.TrainConfig(rounds=3, batch_size=5, eval_every=2),
                  callback=lambda t, m: seen.append((t, sorted(m))))
    both = ["test_accuracy", "train_loss"]
    assert seen == [(0, ["train_loss"]), (1, both), (2, both)]


@pytest.mark.parametrize("kwargs, match", [
    (dict(local_steps=0), "tau"), (dict(participation=0.0), "participation"),
    (dict(participation=1.5), "participation"), (dict(lr=0.0), "lr"), (dict(lr=-1.0), "lr"),
    (dict(batch_size=0), "batch_size"), (dict(momentum=1.0), "momentum"), (dict(seed=-1), "seed"),
])
def test_bad_config_is_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        neural.TrainConfig(**kwargs)


def test_bad_client_data_is_rejected():
    x, y = CLIENTS.x_train, CLIENTS.y_train
    empty = (torch.zeros(0, 3, 8, 8),) + x[1:]
    with pytest.raises(ValueError, match="no training data"):
        neural.ClientData(empty, (torch.zeros(0, dtype=torch.int64),) + y[1:], CLIENTS.x_test, CLIENTS.y_test)
    with pytest.raises(ValueError, match="float32 or float64"):
        neural.ClientData(tuple(t.to(torch.int32) for t in x), y, CLIENTS.x_test, CLIENTS.y_test)
    with pytest.raises(ValueError, match="all must agree"):  # float64 train, float32 test
        neural.ClientData(tuple(t.double() for t in x), y, CLIENTS.x_test, CLIENTS.y_test)
    with pytest.raises(ValueError, match="one entry per client"):
        neural.ClientData(x[:2], y, CLIENTS.x_test, CLIENTS.y_test)
    with pytest.raises(ValueError, match="dataset="):
        neural.ClientData.from_partition(torch.zeros(4, 3, 8, 8, dtype=torch.uint8),
                                         torch.zeros(4, dtype=torch.int64),
                                         [torch.arange(2)], torch.zeros(2, 3, 8, 8, dtype=torch.uint8),
                                         torch.zeros(2, dtype=torch.int64), [torch.arange(2)], device="cpu")


def test_from_partition_and_take_train():
    x = torch.randn(10, 3, 8, 8)
    y = torch.arange(10) % 3
    clients = neural.ClientData.from_partition(x, y, [torch.tensor([0, 2, 4]), torch.tensor([1, 3])], x, y,
                                               [torch.tensor([5]), torch.tensor([6, 7])], device="cpu")
    assert torch.equal(clients.x_train[0], x[[0, 2, 4]]) and torch.equal(clients.y_test[1], y[[6, 7]])
    assert clients.train_sizes.tolist() == [3, 2] and clients.test_sizes.tolist() == [1, 2]
    small = clients.take_train(2, seed=0)
    assert small.train_sizes.tolist() == [2, 2]
    assert clients.subset([1]).n_clients == 1


def _cifar_or_skip():
    data = pytest.importorskip("replearn.neural.data")
    root = os.environ.get("REPLEARN_DATA") or (Path(__file__).resolve().parents[2] / "shared" / "data")
    try:
        return data, data.load_cifar("cifar10", root=root)
    except FileNotFoundError as err:
        pytest.skip(f"CIFAR-10 subset not found (set REPLEARN_DATA to the folder holding it): {err}")


@pytest.fixture(scope="module")
def cifar_clients():
    data, cifar = _cifar_or_skip()
    keep = torch.arange(2000)
    parts = data.shard_partition(cifar.y_train[keep], 10, 5, seed=0)
    test_parts = data.client_test_split(parts, cifar.y_train[keep], cifar.y_test, seed=0, n_per_client=100)
    clients = neural.ClientData.from_partition(cifar.x_train[keep], cifar.y_train[keep], parts, cifar.x_test,
                                               cifar.y_test, test_parts, dataset="cifar10", device="cpu")
    assert clients.train_sizes.sum() == 2000
    return clients


# chance level of the model each algorithm serves: 1/10 for one global model, 1/5 for models with a
# personal part on clients holding 5 classes
SMOKE = [("fedavg", 0.1), ("fedrep", 0.2), ("fedper", 0.2), ("lg_fedavg", 0.2), ("local_only", 0.2)]


@pytest.mark.parametrize("algorithm, chance", SMOKE, ids=[a for a, _ in SMOKE])
def test_smoke_on_real_cifar10_loss_falls_and_accuracy_beats_chance(cifar_clients, algorithm, chance):
    model = models.make_model("fedrep_cnn", 10, seed=0, device="cpu", widths=FEDREP_WIDTHS["cifar10"])
    cfg = neural.TrainConfig(rounds=4, lr=0.05, momentum=0.5, batch_size=10, local_epochs=1, head_epochs=1,
                             last_rounds=1)
    result = run_key(algorithm, model, cifar_clients, cfg)
    assert result.train_loss[-1] < result.train_loss[0], result.train_loss
    assert result.accuracy > chance + 0.05, (result.algorithm, result.accuracy)


def test_smoke_dsgd_and_finetuning_on_real_cifar10(cifar_clients):
    model = models.make_model("fedrep_cnn", 10, seed=0, device="cpu", widths=FEDREP_WIDTHS["cifar10"])
    cfg = neural.TrainConfig(rounds=5, lr=0.05, momentum=0.5, batch_size=10, local_steps=10, last_rounds=1)
    d = algorithms.run("D-SGD", model, cifar_clients, dsgd.matched_config(cfg))
    assert d.train_loss[-1] < d.train_loss[0] and d.accuracy > 0.15, (d.train_loss, d.accuracy)
    tuned = finetune(model, cifar_clients, state=d.state, epochs=2, part="head", lr=0.05)
    assert tuned.final.average > d.accuracy + 0.05   # a personal head on 5-class clients beats the global one


# --------------------------------------------------------------------------------------------
# The public pieces an FL framework uses


def test_split_body_head_and_what_every_declared_method_shares_keeps_and_trains():
    model = tiny_model()
    body, head = neural.split_body_head(model)
    assert list(body) == BODY and list(head) == HEAD
    with pytest.raises(ValueError, match="head"):
        neural.split_body_head(nn.Sequential(nn.Linear(2, 2)))
    cfg = neural.TrainConfig(local_steps=3, head_epochs=2)
    expected = {  # method: (options, shared, personal, [(trainable, steps, epochs)])
        "FedAvg": (None, BODY + HEAD, [], [(BODY + HEAD, 3, 1)]),
        "D-SGD": (None, BODY + HEAD, [], [(BODY + HEAD, 1, 1)]),
        "FedRep": (None, BODY, HEAD, [(HEAD, None, 2), (BODY, 3, 1)]),
        "FedPer": (None, BODY, HEAD, [(BODY + HEAD, 3, 1)]),
        "LG-FedAvg": (None, TOP2, LOWER, [(BODY + HEAD, 3, 1)]),
        "Local only": (None, [], BODY + HEAD, [(BODY + HEAD, 3, 1)]),
        "Fine-tuning": (dict(part="head", epochs=1), [], HEAD, [(HEAD, None, 1)]),
        "Fine-tuning/all": (dict(part="all", epochs=4), [], BODY + HEAD, [(BODY + HEAD, None, 4)]),
    }
    for key, (opts, shared, personal, phases) in expected.items():
        alg = algorithms.get(key.split("/")[0])
        options = alg.Options(**(opts or {}))
        assert type(alg).client_update is algorithms.base.Algorithm.client_update, key  # declared, not written
        assert list(alg.shared_names(model, options)) == shared, key
        assert list(alg.personal_names(model, options)) == personal, key
        assert [(list(p.trainable), p.steps, p.epochs) for p in alg.phases(model, cfg, options)] == phases, key
    with pytest.raises(ValueError, match="unknown parameter names.*nope"):
        neural.run(Split([(("nope",), 1, 1)]), model, CLIENTS, cfg)
    with pytest.raises(ValueError, match="at least one local phase"):
        neural.run(Split([]), model, CLIENTS, cfg)
    with pytest.raises(ValueError, match="trains no parameter"):
        neural.run(Split([((), 1, 1)]), model, CLIENTS, cfg)


def test_the_registry_runs_the_engines_loop():
    model = tiny_model()
    cfg = neural.TrainConfig(rounds=2, lr=0.1, batch_size=5, local_steps=2, head_steps=2, participation=0.5)
    a = algorithms.run("FedRep", model, CLIENTS, cfg)
    b = run_key("fedrep", model, CLIENTS, cfg)
    assert_close(a.state, b.state, atol=0)
    assert_close(a.local, b.local, atol=0)


def test_sample_clients_and_plan_batches():
    g = torch.Generator().manual_seed(0)
    assert neural.sample_clients(5, 1.0, g) == [0, 1, 2, 3, 4]
    assert torch.equal(torch.Generator().manual_seed(0).get_state(), g.get_state())  # no draw for all clients
    picked = neural.sample_clients(10, 0.3, g)
    assert len(picked) == 3 and picked == sorted(set(picked)) and all(0 <= i < 10 for i in picked)
    assert neural.sample_clients(10, 0.01, g).__len__() == 1  # at least one client
    steps = neural.plan_batches(7, 3, steps=5, epochs=1, generator=g)
    assert [len(b) for b in steps] == [3] * 5
    for k in range(0, 4, 2):  # two batches of 3 per permutation of 7 (the tail of 1 dropped)
        assert len(set(torch.cat(steps[k:k + 2]).tolist())) == 6
    epochs = neural.plan_batches(7, 3, steps=None, epochs=2, generator=g)
    assert [len(b) for b in epochs] == [3, 3, 1, 3, 3, 1]
    assert sorted(torch.cat(epochs[:3]).tolist()) == list(range(7))
    assert [len(b) for b in neural.plan_batches(2, 5, steps=3, epochs=1, generator=g)] == [2, 2, 2]
    with pytest.raises(ValueError, match="batch_size"):
        neural.plan_batches(7, 0, steps=1, epochs=1, generator=g)


def test_plan_round_replays_the_engines_draws():
    model = tiny_model()
    cfg = neural.TrainConfig(rounds=3, lr=0.1, batch_size=5, local_steps=2, head_epochs=1, participation=0.5,
                             seed=4)
    fedrep = algorithms.get("FedRep")
    result = neural.run(fedrep, model, CLIENTS, cfg)
    phases = fedrep.phases(model, cfg, None)
    shared, local = fedrep.shared_names(model, None), fedrep.personal_names(model, None)
    gen = make_generator(cfg.seed)
    plans = [neural.plan_round(CLIENTS.train_sizes.tolist(), phases, cfg, gen) for _ in range(cfg.rounds)]
    assert tuple(p.clients for p in plans) == result.participants
    # replay round by round with the public worker and average as the server does
    worker = neural.LocalSGD(model)
    state = params_of(model)
    heads = {n: state[n].expand(CLIENTS.n_clients, *state[n].shape).clone() for n in local}
    for plan in plans:
        total = sum(CLIENTS.x_train[i].shape[0] for i in plan.clients)
        acc = {n: 0 for n in shared}
        for i in plan.clients:
            params = {**state, **{n: heads[n][i] for n in local}}
            for phase, batches in zip(phases, plan.batches[i]):
                new, _ = worker.train(params, phase.trainable, CLIENTS.x_train[i], CLIENTS.y_train[i], batches, cfg)
                params = {**params, **new}
            for n in local:
                heads[n][i] = params[n]
            for n in shared:
                acc[n] = acc[n] + CLIENTS.x_train[i].shape[0] * params[n]
        state = {**state, **{n: acc[n] / total for n in shared}}
    assert_close({n: state[n] for n in shared}, {n: result.state[n] for n in shared}, atol=1e-6)
    assert_close(heads, result.local, atol=1e-6)


def test_local_sgd_is_torch_optim_sgd():
    model = tiny_model()
    cfg = neural.TrainConfig(lr=0.05, momentum=0.9, weight_decay=0.01)
    x, y = CLIENTS.x_train[1], CLIENTS.y_train[1]
    batches = neural.plan_batches(x.shape[0], 6, steps=4, epochs=1, generator=torch.Generator().manual_seed(1))
    new, loss_sum = neural.LocalSGD(model).train(params_of(model), HEAD + BODY[:2], x, y, batches, cfg)
    ref, total = reference_sgd(model, HEAD + BODY[:2], x, y, batches, cfg)
    assert set(new) == set(HEAD + BODY[:2])
    assert_close(new, {n: p for n, p in params_of(ref).items() if n in new})
    assert float(loss_sum) == pytest.approx(total, rel=1e-5)
    assert torch.equal(params_of(model)["head.weight"], tiny_model().head.weight.detach())  # model untouched
    with pytest.raises(ValueError, match="augment"):
        neural.LocalSGD(model).train(params_of(model), HEAD, x, y, batches, replace(cfg, augment=True))


# --------------------------------------------------------------------------------------------
# Faults: divergence, bad inputs, bad settings


def test_divergence_is_reported_with_round_client_and_lr():
    cfg = neural.TrainConfig(rounds=3, lr=1e4, momentum=0.0, batch_size=BIG, local_steps=5)
    with pytest.raises(FloatingPointError, match=r"round \d+: client \d+.*lr = 10000"):
        algorithms.run("FedAvg", tiny_model(), CLIENTS, cfg)
    with pytest.raises(FloatingPointError, match="client"):  # personal parts are checked too
        run_key("local_only", tiny_model(), CLIENTS, cfg)


def test_non_finite_images_are_rejected_naming_the_client():
    x = list(CLIENTS.x_train)
    x[2] = x[2].clone()
    x[2][1, 0, 3, 3] = float("nan")  # one NaN pixel
    with pytest.raises(ValueError, match="client 2 train images contain NaN"):
        neural.ClientData(tuple(x), CLIENTS.y_train, CLIENTS.x_test, CLIENTS.y_test)


def test_clients_without_test_data_are_left_out_of_the_average():
    xt, yt = list(CLIENTS.x_test), list(CLIENTS.y_test)
    xt[1], yt[1] = xt[1][:0], yt[1][:0]
    clients = neural.ClientData(CLIENTS.x_train, CLIENTS.y_train, tuple(xt), tuple(yt))
    result = algorithms.run("FedRep", tiny_model(), clients, neural.TrainConfig(rounds=2, lr=0.1, batch_size=5))
    ev = result.final
    assert torch.isnan(ev.accuracy[1]) and ev.test_sizes[1] == 0
    keep = [0, 2, 3]
    n = ev.test_sizes[keep].double()
    assert ev.average == pytest.approx(float((n * ev.accuracy[keep].double()).sum() / n.sum()))
    assert not torch.isnan(result.test_accuracy).any()
    none = tuple(x[:0] for x in CLIENTS.x_test), tuple(y[:0] for y in CLIENTS.y_test)
    with pytest.raises(ValueError, match="no client has test data"):
        algorithms.run("FedRep", tiny_model(), neural.ClientData(CLIENTS.x_train, CLIENTS.y_train, *none),
                       neural.TrainConfig(rounds=1, batch_size=5))


def test_labels_image_sizes_and_devices_must_fit_the_model():
    model = tiny_model()  # 3 classes, 3x8x8 images
    cfg = neural.TrainConfig(rounds=1, batch_size=5)
    yt = list(CLIENTS.y_test)
    yt[3] = yt[3].clone()
    yt[3][0] = 3
    bad_labels = neural.ClientData(CLIENTS.x_train, CLIENTS.y_train, CLIENTS.x_test, tuple(yt))
    with pytest.raises(ValueError, match="client 3 test labels go up to 3.*3 outputs"):
        algorithms.run("FedAvg", model, bad_labels, cfg)
    with pytest.raises(ValueError, match="client 3 test labels"):
        neural.evaluate(model, bad_labels)
    ys = list(CLIENTS.y_train)
    ys[0] = -ys[0] - 1
    with pytest.raises(ValueError, match="client 0 train labels must be >= 0"):
        neural.ClientData(CLIENTS.x_train, tuple(ys), CLIENTS.x_test, CLIENTS.y_test)
    big = neural.ClientData(*(tuple(torch.nn.functional.pad(x, (4, 4, 4, 4)) for x in xs) if k % 2 == 0 else xs
                              for k, xs in enumerate((CLIENTS.x_train, CLIENTS.y_train, CLIENTS.x_test,
                                                      CLIENTS.y_test))))
    with pytest.raises(ValueError, match=r"images of shape \(3, 16, 16\) do not fit the model"):
        algorithms.run("FedRep", model, big, cfg)
    mixed = CLIENTS.x_train[:1] + (CLIENTS.x_train[1][:, :, :4],) + CLIENTS.x_train[2:]
    with pytest.raises(ValueError, match="client 1 train images .* all must agree"):
        neural.ClientData(mixed, CLIENTS.y_train, CLIENTS.x_test, CLIENTS.y_test)
    with pytest.raises(ValueError, match="one floating dtype"):
        algorithms.run("FedAvg", copy.deepcopy(model).to(torch.float16), CLIENTS, cfg)
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="the model is on"):
            algorithms.run("FedAvg", copy.deepcopy(model).cuda(), CLIENTS, cfg)


def test_dtype_follows_the_model_float64_matches_float32():
    cfg = neural.TrainConfig(rounds=2, lr=0.1, momentum=0.5, batch_size=5, local_steps=3, seed=2)
    r32 = algorithms.run("FedAvg", tiny_model(), CLIENTS, cfg)
    m64 = tiny_model().double()
    r64 = algorithms.run("FedAvg", m64, CLIENTS, cfg)  # float32 data converted to the model's float64
    assert all(p.dtype == torch.float64 for p in r64.state.values())
    assert r64.train_loss.isfinite().all()
    assert_close({n: p.float() for n, p in r64.state.items()}, r32.state, atol=1e-4)
    c64 = CLIENTS.to(torch.float64)
    assert c64.dtype == torch.float64 and CLIENTS.to(torch.float32) is CLIENTS
    r64b = algorithms.run("FedAvg", tiny_model().double(), c64, cfg)
    assert_close(r64b.state, r64.state, atol=0)
    assert neural.evaluate(tiny_model(), c64).accuracy.isfinite().all()  # float64 data, float32 model


@pytest.mark.parametrize("kwargs, match", [
    (dict(rounds=2.0), "rounds"), (dict(rounds=True), "rounds"), (dict(head_epochs=-1), "head_epochs"),
    (dict(head_epochs=1.5), "head_epochs"), (dict(head_steps=0), "head_steps"), (dict(eval_every=0), "eval_every"),
    (dict(last_rounds=0), "last_rounds"), (dict(vmap_clients=0), "vmap_clients"), (dict(local_epochs=0), "local_epochs"),
    (dict(lr=float("nan")), "lr"), (dict(lr="0.1"), "lr"), (dict(lr=float("inf")), "lr"),
    (dict(momentum=-0.1), "momentum"), (dict(momentum=float("nan")), "momentum"),
    (dict(weight_decay=-1e-3), "weight_decay"), (dict(weight_decay=float("inf")), "weight_decay"),
    (dict(participation=True), "participation"), (dict(augment=1), "augment"), (dict(seed=1.0), "seed"),
])
def test_every_config_field_is_validated(kwargs, match):
    with pytest.raises(ValueError, match=match):
        neural.TrainConfig(**kwargs)


def test_forward_chunks_are_small_in_float64_on_the_cpu():
    x64, x32 = torch.zeros(2, 3, 4, 4, dtype=torch.float64), torch.zeros(2, 3, 4, 4)
    assert neural.forward_chunk(x64, 1000) == 16 and neural.forward_chunk(x64, 5) == 5
    assert neural.forward_chunk(x32, 1000) == 1000


def test_the_working_layout_is_channels_last_except_in_float64():
    assert neural.work_layout(torch.float32) == torch.channels_last
    assert neural.work_layout(torch.float64) == torch.contiguous_format
    for dtype, fmt in ((torch.float32, torch.channels_last), (torch.float64, torch.contiguous_format)):
        fast = neural.fast_copy(models.FedRepCNN(10, FEDREP_WIDTHS["narrow"]).to(dtype))
        weights = [p for p in fast.parameters() if p.ndim == 4]
        assert weights and all(p.is_contiguous(memory_format=fmt) for p in weights)
        if fmt == torch.channels_last:
            assert not all(p.is_contiguous() for p in weights)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fast_copy_computes_the_same_function_and_gradients(dtype):
    for model in (tiny_model().to(dtype), models.make_model("fedrep_cnn", 10, seed=0, device="cpu",
                                                            widths=FEDREP_WIDTHS["cifar10"]).to(dtype)):
        fast = neural.fast_copy(model)
        kinds = [type(m).__name__ for m in fast.body]
        assert "MaxPool2d" in kinds and kinds.index("MaxPool2d") < kinds.index("ReLU")  # pool before ReLU
        orig = [type(m).__name__ for m in model.body]
        assert orig.index("ReLU") < orig.index("MaxPool2d")  # the model itself is untouched
        side = 8 if isinstance(model, Tiny) else 32
        x = torch.randn(6, 3, side, side, dtype=dtype, generator=torch.Generator().manual_seed(0))
        y = torch.arange(6) % 3
        outs, grads = [], []
        for m, xx in ((model, x), (fast, x.contiguous(memory_format=neural.work_layout(dtype)))):
            m.zero_grad(set_to_none=True)
            out = m(xx)
            nn.functional.cross_entropy(out, y).backward()
            outs.append(out.detach())
            grads.append({n: p.grad.clone() for n, p in m.named_parameters()})
        tol = 1e-5 if dtype == torch.float32 else 1e-12
        assert torch.allclose(outs[0], outs[1], atol=tol, rtol=0)
        assert_close(grads[0], grads[1], atol=tol)


class ScaledTiny(Tiny):
    """forward is not head(body(x)): head phases must not use cached body features."""

    def forward(self, x):
        return self.head(2 * self.body(x))


@pytest.mark.parametrize("cls", [Tiny, ScaledTiny])
def test_head_phase_on_cached_features_is_plain_sgd(cls):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = cls()
    cfg = neural.TrainConfig(lr=0.1, momentum=0.5, weight_decay=0.01)
    x, y = CLIENTS.x_train[1], CLIENTS.y_train[1]
    batches = neural.plan_batches(x.shape[0], 6, steps=None, epochs=3, generator=torch.Generator().manual_seed(2))
    worker = neural.LocalSGD(model)
    new, loss_sum = worker.train(params_of(model), HEAD, x, y, batches, cfg)
    assert bool(worker._head_names) == (cls is Tiny)  # features cached only where forward = head(body(x))
    ref, total = reference_sgd(model, HEAD, x, y, batches, cfg)
    assert_close(new, {n: params_of(ref)[n] for n in HEAD})
    assert float(loss_sum) == pytest.approx(total, rel=1e-5)


@pytest.mark.parametrize("extra", [dict(augment=True), dict(vmap_clients=2), dict()])
def test_runs_in_the_calling_thread_do_not_depend_on_the_thread_count(extra):
    """Augmented and vmapped runs train in the calling thread; it runs one intra-op thread, so
    the iterates are those of a one-thread run for any thread count (issue 27: augment=True
    printed different accuracies at 1 and 2 threads)."""
    cfg = neural.TrainConfig(rounds=2, lr=0.05, local_steps=2, batch_size=5, **extra)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = algorithms.run("FedAvg", tiny_model().double(), CLIENTS.to(torch.float64), cfg)
        torch.set_num_threads(3)
        more = algorithms.run("FedAvg", tiny_model().double(), CLIENTS.to(torch.float64), cfg) if extra else \
            algorithms.run("FedAvg", tiny_model().double(), CLIENTS.to(torch.float64), cfg, workers=1)
        assert torch.get_num_threads() == 3  # restored
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(one.state[n], more.state[n]) for n in one.state)
    assert torch.equal(one.final.accuracy, more.final.accuracy)


def test_worker_records_the_first_and_peak_minibatch_loss():
    model = tiny_model()
    worker = neural.LocalSGD(model)
    params = params_of(model)
    worker.watch()
    cfg = neural.TrainConfig(lr=0.05)
    batches = [torch.arange(5), torch.arange(5, 10)]
    _, loss_sum = worker.train(params, list(params), CLIENTS.x_train[0], CLIENTS.y_train[0], batches, cfg)
    assert worker.first_loss <= worker.peak_loss and float(worker.peak_loss) <= float(loss_sum)
    loss, grads = worker.gradient(params, ["head.bias"], CLIENTS.x_train[0], CLIENTS.y_train[0], None, cfg)
    ref = nn.functional.cross_entropy(model(CLIENTS.x_train[0]), CLIENTS.y_train[0])
    (g,) = torch.autograd.grad(ref, [model.head.bias])
    assert torch.allclose(loss, ref.detach(), atol=1e-6) and torch.allclose(grads["head.bias"], g, atol=1e-6)


@pytest.mark.parametrize("part", ["head", "all"])
def test_finetune_and_fit_heads_batched_match_one_client_at_a_time(part, monkeypatch):
    """The batched path of fine-tuning and head fitting (``vmap_clients``, meant for a GPU) gives
    the per-client results to float64 rounding; clients of equal sizes are grouped, the others
    train alone, so any mix of sizes works."""
    from replearn.experiments.ch05_fedrep.cifar_federation import fit_heads

    model = tiny_model().double()
    clients = tiny_clients(sizes=(12, 12, 12, 8))
    clients = neural.ClientData(tuple(x.double() for x in clients.x_train), clients.y_train,
                                tuple(x.double() for x in clients.x_test), clients.y_test)
    state = params_of(model)
    groups, real = [], rounds.groups_of
    monkeypatch.setattr(rounds, "groups_of", lambda *a: groups.append(real(*a)) or groups[-1])
    one = finetune(model, clients, state=state, epochs=2, part=part, lr=0.1, batch_size=4, seed=3)
    assert groups == []  # one client at a time: nothing grouped
    batched = finetune(model, clients, state=state, epochs=2, part=part, lr=0.1, batch_size=4, seed=3,
                              vmap_clients=4)
    assert sorted(len(g) for g in groups[-1]) == [1, 3]  # the three clients of 12 images train together
    for i in range(clients.n_clients):
        assert_close(one.client_state(i), batched.client_state(i), atol=1e-12)
    assert abs(one.final.average - batched.final.average) < 1e-12
    kw = dict(epochs=3, lr=0.1, momentum=0.5, batch_size=4, seed=5)
    a, b = fit_heads(model, clients, state, **kw), fit_heads(model, clients, state, **kw, vmap_clients=3)
    assert sorted(len(g) for g in groups[-1]) == [1, 3]
    assert torch.allclose(a.test_accuracy, b.test_accuracy, atol=1e-12)
    for i in range(clients.n_clients):
        assert_close(a.client_state(i), b.client_state(i), atol=1e-12)
