"""``TrainConfig.first_visit``: what a client's personal part is before its first visit, checked
on a tiny federation against the rule written out by hand (the FedRep authors' shared memory)."""

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
