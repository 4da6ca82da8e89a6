"""The in-process loop screens a method's hooks and uploads as Flower's server does (issue 45,
class 4): a user's method that returns the wrong thing is stopped with an error naming the
method, the hook and the tensor, before it can turn the server's state into something else; a
client that takes no step reports NaN loss; a NaN upload beside a finite loss is blamed on the
method's code."""

import dataclasses
import math

import pytest
import torch

from replearn import neural
from replearn.neural.algorithms import base
from test_neural import tiny_clients, tiny_model

CLIENTS = tiny_clients()
CFG = neural.TrainConfig(rounds=2, local_steps=2, batch_size=5, seed=1)


class Faulty(base.Algorithm):
    """FedAvg (the default client update) with one fault injected by ``fault(update)`` into
    every client update, or in a hook replaced by a subclass."""

    name = "Faulty (test)"
    summary = base.Summary("everything", "nothing", "nothing", "mcmahan2017communication")

    def __init__(self, fault=None):
        self.fault = fault

    def client_update(self, ctx):
        update = super().client_update(ctx)
        return self.fault(update) if self.fault is not None else update


def with_upload(change):
    def fault(update):
        return dataclasses.replace(update, upload=change(dict(update.upload)))
    return fault


def run(algorithm, cfg=CFG, **kwargs):
    return neural.run(algorithm, tiny_model(), CLIENTS, cfg, **kwargs)


def test_a_float64_upload_for_a_float32_model_is_refused():
    """Before: the server's parameters silently became float64."""
    bad = with_upload(lambda u: {**u, "head.bias": u["head.bias"].double()})
    with pytest.raises(ValueError, match=r"Faulty \(test\): client_update's upload 'head.bias' is torch.float64 "
                                         r"of shape \(3,\), but the model's parameter is torch.float32"):
        run(Faulty(bad))
    extra = with_upload(lambda u: {**u, "spread": torch.zeros(2, dtype=torch.float64)})
    with pytest.raises(ValueError, match=r"client_update's upload 'spread' is torch.float64, but the model is "
                                         r"torch.float32"):
        run(Faulty(extra))


def test_a_misshapen_upload_names_the_method_hook_and_tensor():
    """Before: a torch size error from inside the server's sum."""
    bad = with_upload(lambda u: {**u, "head.weight": u["head.weight"][:1]})
    with pytest.raises(ValueError, match=r"Faulty \(test\): client_update's upload 'head.weight' is torch.float32 "
                                         r"of shape \(1, 8\), but the model's parameter is torch.float32 of shape "
                                         r"\(3, 8\)"):
        run(Faulty(bad))
    with pytest.raises(ValueError, match=r"client_update's upload must be a dict"):
        run(Faulty(lambda update: dataclasses.replace(update, upload=[1])))
    with pytest.raises(ValueError, match=r"client_update must report n_steps as an int >= 0, got 2.0"):
        run(Faulty(lambda update: dataclasses.replace(update, n_steps=2.0)))


def test_a_client_that_takes_no_step_reports_nan_loss():
    """Before: the loop divided by max(n_steps, 1) and reported a training loss of 0.0."""
    idle = Faulty(lambda update: dataclasses.replace(update, loss_sum=torch.zeros(()), n_steps=0))
    result = run(idle)
    assert torch.isnan(result.train_loss).all()
    assert neural.engine.guards.mean_loss(0.0, 0) != neural.engine.guards.mean_loss(0.0, 0)  # NaN


def test_a_nan_upload_beside_a_finite_loss_is_blamed_on_the_method():
    """Before: "local training diverged ... lower the learning rate"."""
    bad = with_upload(lambda u: {**u, "body.0.weight": u["body.0.weight"] * math.nan})
    with pytest.raises(FloatingPointError, match=r"round 0: client \d: Faulty \(test\)'s client_update returned "
                                                 r"upload\['body.0.weight'\] with NaN or infinite values although "
                                                 r"its training loss stayed finite: a fault of the method's code"):
        run(Faulty(bad))
    nan_loss = Faulty(lambda update: dataclasses.replace(update, loss_sum=update.loss_sum * math.nan))
    with pytest.raises(FloatingPointError, match=r"local training diverged .*lower the learning rate"):
        run(nan_loss)


class NoServerStep(Faulty):
    server_update = None


class NoneServerStep(Faulty):
    def server_update(self, params, server, mean_upload, selected, n_clients, options):
        return None


class DroppingStart(Faulty):
    def start_params(self, ctx):
        params = super().start_params(ctx)
        del params["head.bias"]
        return params


class ReshapingStart(Faulty):
    def start_params(self, ctx):
        params = super().start_params(ctx)
        return {**params, "head.weight": params["head.weight"].T}


class NoneEval(Faulty):
    def eval_params(self, ctx):
        return None


@pytest.mark.parametrize("algorithm, error, message", [
    (NoServerStep(), ValueError, r"Faulty \(test\): the round loop calls the algorithm's hooks .*\['server_update'\] "
                                 r"is not callable"),
    (NoneServerStep(), ValueError, r"Faulty \(test\): server_update must return \(parameters, server state\), got "
                                   r"NoneType"),
    (DroppingStart(), ValueError, r"Faulty \(test\): start_params dropped the parameter 'head.bias'"),
    (ReshapingStart(), ValueError, r"Faulty \(test\): start_params's parameter 'head.weight' is torch.float32 of "
                                   r"shape \(8, 3\), but the model's parameter is torch.float32 of shape \(3, 8\)"),
    (NoneEval(), ValueError, r"Faulty \(test\): eval_params must return a dict of parameter name -> tensor, got "
                             r"NoneType"),
    (Faulty(lambda update: None), TypeError, r"Faulty \(test\): client_update must return a neural.ClientUpdate, "
                                             r"got NoneType"),
], ids=["None hook", "None server step", "start drops", "start reshapes", "None eval", "None update"])
def test_hooks_and_their_returns_are_checked_naming_the_method_and_hook(algorithm, error, message):
    """Before: TypeErrors ('NoneType' object is not callable / subscriptable), torch size errors
    and bare KeyErrors naming neither the method nor the hook."""
    with pytest.raises(error, match=message):
        run(algorithm)


def test_the_batched_path_screens_alike():
    """The batched path (vmap_clients > 1) runs the same screening inside the vmapped update."""
    bad = with_upload(lambda u: {**u, "head.bias": u["head.bias"].double()})
    algorithm = Faulty(bad)
    algorithm.batched = True
    cfg = dataclasses.replace(CFG, vmap_clients=2)
    with pytest.raises(ValueError, match=r"client_update's upload 'head.bias' is torch.float64"):
        neural.run(algorithm, tiny_model(), tiny_clients((10, 10, 10, 10)), cfg)
