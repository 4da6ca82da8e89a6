"""The CIFAR experiments as the FedRep authors run them (lgcollins/FedRep): their shard split,
Local only trained per client, LG-FedAvg's shared layers, weight decay on weights only, and a
deterministic augmentation; the batched path refuses augmentation instead of drawing it in
another order."""

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
import torch

from replearn.neural import algorithms as A
from replearn.neural import algorithms
from replearn.neural import data as D
from replearn import neural
from test_algorithms import make_clients, tiny
from engine_calls import finetune, run_key

# CIFAR-10's training labels as far as the split is concerned: 10 classes of 5,000 images.
CIFAR10_LABELS = np.random.default_rng(0).permutation(np.repeat(np.arange(10), 5000))


def authors_noniid(labels, num_users, shard_per_user, num_classes, rng):
    """``noniid`` of the authors' ``utils/sampling.py``, transcribed (numpy's global RNG and
    ``random.shuffle`` replaced by ``rng``): the label lists and each client's shard classes."""
    idxs = {c: list(np.flatnonzero(labels == c)) for c in range(num_classes)}
    shard_per_class = int(shard_per_user * num_users / num_classes)
    for c, x in idxs.items():
        leftover = len(x) % shard_per_class
        rest = x[-leftover:] if leftover else []
        x = np.array(x[:-leftover] if leftover else x).reshape((shard_per_class, -1))
        x = list(x)
        for i, ix in enumerate(rest):
            x[i] = np.concatenate([x[i], [ix]])
        idxs[c] = x
    rand_set_all = list(range(num_classes)) * shard_per_class
    rng.shuffle(rand_set_all)
    rand_set_all = np.array(rand_set_all).reshape((num_users, -1))
    users = []
    for i in range(num_users):
        users.append(np.concatenate([idxs[c].pop(rng.integers(len(idxs[c]))) for c in rand_set_all[i]]))
    return users


def label_sets(parts, labels):
    return [tuple(sorted(Counter(labels[p.numpy()]).items())) for p in parts]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shard_partition_is_the_authors_split(seed):
    parts = D.shard_partition(CIFAR10_LABELS, 100, 2, seed=seed)
    used = np.concatenate([p.numpy() for p in parts])
    assert len(used) == len(CIFAR10_LABELS) and len(np.unique(used)) == len(used)  # every sample once
    sets = label_sets(parts, CIFAR10_LABELS)
    assert len({tuple(c for c, _ in s) for s in sets}) > 30  # many distinct label sets, not 5
    # the same multiset of shards as the authors' procedure: 20 shards of 250 images per class
    ours = Counter((c, n) for s in sets for c, n in s for _ in range(n // 250))
    theirs_parts = authors_noniid(CIFAR10_LABELS, 100, 2, 10, np.random.default_rng(seed))
    theirs = Counter((c, n) for s in label_sets([torch.from_numpy(p) for p in theirs_parts], CIFAR10_LABELS)
                     for c, n in s for _ in range(n // 250))
    assert sum(ours.values()) == sum(theirs.values()) == 200
    assert Counter(c for c, _ in ours.elements()) == Counter(c for c, _ in theirs.elements()) == Counter(
        {c: 20 for c in range(10)})
    assert all(len(p) == 500 for p in parts)


def test_the_authors_split_deals_some_clients_one_class_twice():
    twice = [sum(len(s) == 1 for s in label_sets(D.shard_partition(CIFAR10_LABELS, 100, 2, seed=k),
                                                  CIFAR10_LABELS)) for k in range(5)]
    assert sum(twice) > 0  # a client's two shards share their class with probability 19/199


def test_disjoint_split_keeps_its_name_and_its_five_groups():
    parts = D.disjoint_shard_partition(CIFAR10_LABELS, 100, 2, seed=0)
    sets = {tuple(c for c, _ in s) for s in label_sets(parts, CIFAR10_LABELS)}
    assert len(sets) == 5 and len({c for s in sets for c in s}) == 10
    assert D.SHARD_SPLITS == {"authors": D.shard_partition, "disjoint": D.disjoint_shard_partition}


def test_shard_split_is_seeded():
    a = D.shard_partition(CIFAR10_LABELS, 100, 2, seed=4)
    b = D.shard_partition(CIFAR10_LABELS, 100, 2, seed=4)
    assert all(torch.equal(x, y) for x, y in zip(a, b))


CFG = neural.TrainConfig(rounds=4, lr=0.05, momentum=0.5, weight_decay=1e-3, batch_size=5, local_steps=2,
                         participation=0.5, last_rounds=2)


def test_local_only_trains_every_client_for_its_epochs():
    clients = make_clients()
    r = A.run("Local only", tiny(), clients, CFG, A.get("Local only").Options(epochs=3))
    once = replace(CFG, rounds=1, participation=1.0, local_epochs=3, local_steps=None, eval_every=1, last_rounds=1)
    ref = run_key("local_only", tiny(), clients, once)
    assert all(torch.equal(r.local[n], ref.local[n]) for n in ref.local)
    start = dict(tiny().named_parameters())
    for i in range(clients.n_clients):  # every client trained, sampled or not
        assert not torch.equal(r.local["head.weight"][i], start["head.weight"])
    assert r.participants[-1] == tuple(range(clients.n_clients)) and r.participants[:-1] == ((),) * 3
    assert torch.isnan(r.test_accuracy[:-1]).all() and r.accuracy == ref.final.average == r.final.average
    assert len(r.train_loss) == CFG.rounds


def test_local_only_budget_does_not_depend_on_participation():
    clients = make_clients()
    opts = A.get("Local only").Options(epochs=2)
    a = A.run("Local only", tiny(), clients, CFG, opts)
    b = A.run("Local only", tiny(), clients, replace(CFG, participation=1.0, rounds=9), opts)
    assert all(torch.equal(a.local[n], b.local[n]) for n in a.local)


def test_lg_fedavg_shares_the_top_two_layers_as_the_authors():
    model = tiny()
    r = A.run("LG-FedAvg", model, make_clients(), CFG)
    assert set(r.shared_names) == {"body.4.weight", "body.4.bias", "head.weight", "head.bias"}
    assert set(r.local_names) == {"body.0.weight", "body.0.bias"}
    head_only = A.run("LG-FedAvg", tiny(), make_clients(), CFG, A.get("LG-FedAvg").Options(shared_layers=1))
    assert set(head_only.shared_names) == {"head.weight", "head.bias"}
    with pytest.raises(ValueError, match="no layer below"):
        A.run("LG-FedAvg", tiny(), make_clients(), CFG, A.get("LG-FedAvg").Options(shared_layers=3))


def test_weight_decay_leaves_the_biases_alone():
    w, b = torch.ones(2, 2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)
    zero = [torch.zeros_like(w), torch.zeros_like(b)]
    new_w, new_b = neural.Momentum(0.0, 0.5).step([w, b], zero, lr=0.1)
    assert torch.equal(new_b, b) and torch.allclose(new_w, w * (1 - 0.05))


def test_a_seeded_augmented_round_is_bit_for_bit_repeatable():
    cfg = replace(CFG, augment=True, rounds=2)
    runs = [algorithms.run("FedAvg", tiny(), make_clients(), cfg) for _ in range(2)]
    assert all(torch.equal(runs[0].state[n], runs[1].state[n]) for n in runs[0].state)
    plain = algorithms.run("FedAvg", tiny(), make_clients(), replace(cfg, augment=False))
    assert not torch.equal(plain.state["head.weight"], runs[0].state["head.weight"])


@pytest.mark.parametrize("name", ["FedAvg", "FedRep", "Local only"])
def test_the_batched_path_refuses_augmentation(name):
    cfg = replace(CFG, augment=True, vmap_clients=2)
    with pytest.raises(ValueError, match="does not augment"):
        A.run(name, tiny(), make_clients(), cfg)
    with pytest.raises(ValueError, match="does not augment"):
        finetune(tiny(), make_clients(), epochs=1, augment=True, vmap_clients=2)


def test_train_config_takes_numpy_reals_as_floats():
    cfg = neural.TrainConfig(lr=np.float32(0.5), momentum=np.float64(0.25), weight_decay=np.float64(0.0))
    assert type(cfg.lr) is float and cfg.lr == 0.5 and cfg == neural.TrainConfig(lr=0.5, momentum=0.25)
    for bad in (np.bool_(True), np.float64("nan"), "0.1"):
        with pytest.raises(ValueError, match="lr must be a finite real number"):
            neural.TrainConfig(lr=bad)


def test_fedavg_tested_with_its_locally_updated_copies_trains_the_same_model():
    """``evaluate="local"`` (what the authors' log prints as FedAvg's accuracy) changes what each
    client is tested with, not the training: the same server iterates and losses bit for bit; a
    client never sampled is tested with the server's model, one sampled with its last local model."""
    clients = make_clients(sizes=(12, 20, 8, 16, 10, 14))
    cfg = replace(CFG, participation=0.34, rounds=3, eval_every=1)
    plain = A.run("FedAvg", tiny(), clients, cfg)
    local = A.run("FedAvg", tiny(), clients, cfg, A.get("FedAvg").Options(evaluate="local"))
    assert all(torch.equal(plain.state[n], local.state[n]) for n in plain.state)
    assert torch.equal(plain.train_loss, local.train_loss)
    assert plain.local_names == () and set(local.local_names) == set(plain.state)
    seen = {i for p in local.participants for i in p}
    assert seen and len(seen) < clients.n_clients   # some clients never sampled
    for i in range(clients.n_clients):
        same = all(torch.equal(local.local[n][i], local.state[n]) for n in local.state)
        assert same == (i not in seen), i
    # the last round's copies average (n_i-weighted) to the server's model
    last = local.participants[-1]
    n = clients.train_sizes[list(last)].to(torch.float64)
    for name, p in local.state.items():
        avg = sum(w * local.local[name][i] for w, i in zip(n / n.sum(), last))
        assert torch.allclose(avg, p, atol=1e-12)
    assert local.accuracy != plain.accuracy
    # the batched path tests the same copies
    batched = A.run("FedAvg", tiny(), clients, replace(cfg, vmap_clients=4), A.get("FedAvg").Options(evaluate="local"))
    assert torch.allclose(batched.test_accuracy, local.test_accuracy, atol=1e-12, equal_nan=True)
    with pytest.raises(ValueError, match="evaluate"):
        A.get("FedAvg").Options(evaluate="server")
