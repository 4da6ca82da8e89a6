"""What the FedRep authors' code runs for Table 1, as options of the engine and the methods: the
first visit (``TrainConfig.first_visit``), Per-FedAvg's ``--alg maml`` and L2GD's one coin per round,
each checked on a tiny federation against the rule written out by hand."""

import pytest
import torch

from replearn import neural
from replearn.neural import algorithms
from test_neural import tiny_clients
from tiny_net import Tiny

SIZES = (12, 20, 8, 16, 10, 14)


def one_round(method, rule, participation=0.5, rounds=1, options=None):
    torch.manual_seed(0)
    model = Tiny()
    cfg = neural.TrainConfig(rounds=rounds, participation=participation, local_steps=2, head_steps=2, lr=0.05,
                             eval_every=1, last_rounds=1, first_visit=rule, seed=3)
    r = algorithms.run(method, model, tiny_clients(SIZES), cfg, options)
    return model, r


def test_average_gives_unsampled_clients_the_sampled_heads_weighted_mean():
    model, r = one_round("FedPer", "average")
    sampled = list(r.participants[0])
    assert 0 < len(sampled) < len(SIZES)
    weights = torch.tensor([float(SIZES[i]) for i in sampled])
    for name in ("head.weight", "head.bias"):
        heads = r.local[name]
        mean = sum(w * heads[i] for w, i in zip(weights, sampled)) / weights.sum()
        for i in set(range(len(SIZES))) - set(sampled):
            torch.testing.assert_close(heads[i], mean, rtol=1e-6, atol=1e-7)
        assert not torch.allclose(mean, dict(model.named_parameters())[name].detach())


def test_initial_and_global_keep_the_initial_head_for_a_method_with_personal_heads():
    model, r_init = one_round("FedRep", "initial")
    _, r_glob = one_round("FedRep", "global")
    start = dict(model.named_parameters())["head.weight"].detach()
    unsampled = sorted(set(range(len(SIZES))) - set(r_init.participants[0]))
    for i in unsampled:  # the server never changes FedRep's heads, so its "global" head is the initial one
        torch.testing.assert_close(r_init.local["head.weight"][i], start)
        torch.testing.assert_close(r_glob.local["head.weight"][i], start)
    torch.testing.assert_close(r_init.accuracy, r_glob.accuracy)


@pytest.mark.parametrize("rule", ["global", "average"])
def test_ditto_personal_models_start_at_the_current_global_model(rule):
    _, r = one_round("Ditto", rule)
    unsampled = sorted(set(range(len(SIZES))) - set(r.participants[0]))
    assert unsampled
    for name, p in r.state.items():
        for i in unsampled:
            torch.testing.assert_close(r.local[name][i], p)


def test_the_rule_changes_nothing_when_every_client_takes_part_in_round_one():
    _, a = one_round("FedRep", "initial", participation=1.0, rounds=2)
    _, b = one_round("FedRep", "average", participation=1.0, rounds=2)
    assert torch.equal(a.test_accuracy, b.test_accuracy)
    for n in a.state:
        assert torch.equal(a.state[n], b.state[n])


def test_a_later_first_visit_trains_from_the_average_and_changes_the_run():
    _, a = one_round("FedPer", "initial", participation=0.34, rounds=4)
    _, b = one_round("FedPer", "average", participation=0.34, rounds=4)
    first = set(a.participants[0])
    assert any(i not in first for i in a.participants[1])  # a newcomer in round 2
    assert a.participants == b.participants
    assert not torch.equal(a.local["head.weight"], b.local["head.weight"])


def test_unknown_rule_is_refused():
    with pytest.raises(ValueError, match="first_visit must be one of"):
        neural.TrainConfig(first_visit="previous")


def test_per_fedavg_authors_variant_is_fedavg_tested_with_local_copies_in_its_first_round():
    """``--alg maml`` of the authors' code: plain local SGD on each client's own copy; in round 1
    every copy starts at the initial model, so it is FedAvg tested with the updated copies."""
    pf = algorithms.get("Per-FedAvg").Options(variant="authors")
    _, a = one_round("Per-FedAvg", "average", participation=1.0, options=pf)
    _, b = one_round("FedAvg", "average", participation=1.0, options=algorithms.get("FedAvg").Options(evaluate="local"))
    assert torch.equal(a.final.accuracy, b.final.accuracy)


def test_per_fedavg_authors_variant_continues_each_clients_copy():
    pf = algorithms.get("Per-FedAvg").Options(variant="authors")
    _, one = one_round("Per-FedAvg", "average", participation=1.0, options=pf)
    _, two = one_round("Per-FedAvg", "average", participation=1.0, rounds=2, options=pf)
    # round 2 starts each client from its own round-1 copy, not from the server's average
    assert not torch.equal(two.local["head.weight"][0], one.state["head.weight"])


def test_l2gd_round_coin_takes_all_local_steps_or_one_aggregation_step():
    """With ``coin = "round"`` a round whose coin says "aggregate" moves every x_i once by
    theta = lr lam / p toward the server's average (the authors' main_l2gd.py), whatever the
    number of planned steps; the coins are forced here: local in round 1, aggregate in round 2."""
    opts = algorithms.get("L2GD").Options(p=0.5, lam=1.0, coin="round")

    def forced(rounds):
        alg = type(algorithms.get("L2GD"))()
        seen = []

        def draw(plan, cfg, options, generator):
            aggregate = len(seen) == 1
            seen.append(aggregate)
            longest = max(len(plan.batches[i][0]) for i in plan.clients)
            return {i: [aggregate] * longest for i in plan.clients}

        alg.draw = draw
        torch.manual_seed(0)
        model = Tiny()
        cfg = neural.TrainConfig(rounds=rounds, participation=1.0, local_steps=3, lr=0.05, eval_every=1,
                                 last_rounds=1, seed=3)
        return neural.run(alg, model, tiny_clients(SIZES), cfg, opts)

    one, two = forced(1), forced(2)
    theta = 0.05 * 1.0 / 0.5
    for n, xbar in one.state.items():
        x1 = one.local[n]
        torch.testing.assert_close(two.local[n], x1 - theta * (x1 - xbar), rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="coin must be"):
        algorithms.get("L2GD").Options(coin="client")
