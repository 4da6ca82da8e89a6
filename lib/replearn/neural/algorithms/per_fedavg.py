"""Per-FedAvg (Fallah, Mokhtari, Ozdaglar, 2020, Alg. 1), first-order version (Per-FedAvg (FO),
Sec. 5: the Hessian-vector term of the MAML gradient dropped).

The server's model ``w`` is a meta-initialisation. A sampled client starts from ``w`` and takes
local meta-steps, each on two independent minibatches D and D' (lines 6-8):
``w_tmp = w - alpha grad f_i(w; D)`` (the inner, adaptation step, plain SGD), then
``w <- w - beta grad f_i(w_tmp; D')`` (the outer step, with the engine's SGD semantics:
``beta = lr``, momentum, weight decay). The minibatches are the engine's planned batches taken
in consecutive pairs: with ``local_steps`` tau the client plans 2 tau batches (tau
meta-steps); with ``local_epochs`` it uses each epoch's batches in pairs and an odd last batch
of the phase is left out. The server averages the clients' models (weights n_i). A client is
evaluated with the model adapted by one gradient step of size ``alpha`` on its whole training
set (the paper's personalised model ``w - alpha grad f_i(w)``, Sec. 3). ``train_loss`` is the
loss of the outer (D') steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from replearn import neural
from replearn.neural.algorithms.base import Momentum, Algorithm, Summary, joint_names, joint_phase, set_real, table1_accuracy


@dataclass(frozen=True)
class PerFedAvgOptions:
    """``alpha``: the inner (adaptation) step size, also used at evaluation (default 0.01; the
    FedRep paper does not state it; Fallah et al. use 0.001-0.01). ``variant``: ``"paper"``
    (default), Per-FedAvg (FO) as above; ``"authors"``, what the FedRep authors' code runs for
    ``--alg maml`` (``main_fedrep.py``, which never calls its ``LocalUpdateMAML``): each client
    continues training its own copy of the model by plain local SGD (``alpha`` unused), the
    server averages the copies, the average only reaching clients not yet sampled (set
    ``TrainConfig.first_visit = "average"`` for their shared memory), and each client is
    tested with its own copy."""

    alpha: float = 0.01
    variant: str = "paper"
    step_scales: ClassVar[tuple[str, ...]] = ("alpha",)  # the inner step size

    def __post_init__(self):
        set_real(self, "alpha", low=0, low_open=True)
        if self.variant not in ("paper", "authors"):
            raise ValueError(f"variant must be 'paper' (Per-FedAvg (FO)) or 'authors' (the FedRep authors' "
                             f"--alg maml: plain local SGD on each client's own copy), got {self.variant!r}")


class PerFedAvg(Algorithm):
    name, table1_row, Options = "Per-FedAvg", 8, PerFedAvgOptions
    paper_accuracy = table1_accuracy(82.27, 67.20, 67.36, 72.05, 52.49)
    models = 2  # a client trains two models a round (cost estimates)
    summary = Summary(
        shares="the whole model, a meta-initialisation (weighted average)",
        personal="nothing kept; adapted for evaluation by one gradient step (size α) on its data",
        local_objective="MAML's: the loss after one inner gradient step of size α (first-order version)",
        cite="fallah2020perfedavg")
    batched = True  # its client_update also runs batched (vmap-safe)

    def phases(self, model, cfg, options):
        return (joint_phase(model, cfg, factor=1 if options.variant == "authors" else 2),)

    def client_update(self, ctx: neural.ClientRound) -> neural.ClientUpdate:
        names = tuple(ctx.global_params)
        if ctx.options.variant == "authors":  # plain local SGD on the client's own continuing copy
            w, loss = ctx.worker.train(self.start_params(ctx), names, ctx.x, ctx.y, ctx.batches[0], ctx.cfg,
                                       ctx.generator)
            return neural.ClientUpdate(w, dict(w), loss, len(ctx.batches[0]))
        cfg, alpha = ctx.cfg, ctx.options.alpha
        w = dict(ctx.global_params)
        outer = Momentum(cfg.momentum, cfg.weight_decay)
        batches = ctx.batches[0]
        loss_sum, steps = None, 0
        for k in range(0, len(batches) - 1, 2):
            _, g = ctx.worker.gradient(w, names, ctx.x, ctx.y, batches[k], cfg, ctx.generator)
            w_tmp = dict(zip(names, neural.foreach_add([w[n] for n in names], [g[n] for n in names], alpha=-alpha)))
            loss, g2 = ctx.worker.gradient(w_tmp, names, ctx.x, ctx.y, batches[k + 1], cfg, ctx.generator)
            w = dict(zip(names, outer.step([w[n] for n in names], [g2[n] for n in names], cfg.lr)))
            loss_sum = loss if loss_sum is None else loss_sum + loss
            steps += 1
        if loss_sum is None:
            raise ValueError(f"Per-FedAvg: client {ctx.client} has a single minibatch per phase, and a "
                             f"meta-step needs two; raise local_steps/local_epochs or lower batch_size")
        return neural.ClientUpdate(w, {}, loss_sum, steps)

    def personal_names(self, model, options):
        return joint_names(model)

    def eval_params(self, ctx):
        if ctx.options.variant == "authors":  # the client's own copy
            return super().eval_params(ctx)
        names = tuple(ctx.global_params)
        _, g = ctx.worker.gradient(ctx.global_params, names, ctx.x, ctx.y, None, ctx.cfg)
        return {n: ctx.global_params[n] - ctx.options.alpha * g[n] for n in names}


ALGORITHM = PerFedAvg()
