"""L2GD, loopless local gradient descent (Hanzely & Richtárik, 2020, "Federated learning of a
mixture of global and local models", Alg. 1), for the mixture objective of eq. (2):
``min_x (1/n) sum_i f_i(x_i) + (lambda / 2n) sum_i ||x_i - xbar||^2``.

Every client keeps its own model ``x_i``. At each step a coin ``xi ~ Bernoulli(p)`` decides
(line 3): with probability ``1 - p`` a local gradient step
``x_i <- x_i - eta / (1 - p) * grad f_i(x_i)`` (line 5), with probability ``p`` an aggregation
step toward the average, ``x_i <- x_i - (eta lambda / p) (x_i - xbar)`` (line 7). Here the
per-client step ``eta`` is the run's ``lr`` (the paper's ``eta / n`` for the joint variable),
the local steps use the engine's minibatches and SGD semantics (momentum, weight decay; the
buffer only advances on local steps), and the coins are drawn in the calling thread, one
sequence per round shared by the round's clients (the paper's coin is global), step k of
every client using coin k. Communication happens once per round: ``xbar`` is the server's
average of the sampled clients' models at the end of the previous round (the paper's
``xbar`` is the current average of all clients: with partial participation and rounds,
this is the average last communicated). The server sets ``xbar`` to the n_i-weighted average
of the round's ``x_i``. Clients are evaluated with their own ``x_i``. Needs
``lr * lambda / p <= 1`` (an aggregation step must not overshoot ``xbar``).

``train_loss``: the mean minibatch loss of a client's local steps. A round's coins can all
come up "aggregate" (probability ``p^K`` for K steps): a client then takes no local step, and
it reports the loss of the model it ends the round with on the round's first planned
minibatch (no step taken, no augmentation, nothing drawn), so the round's loss is a measured
loss, never a 0 standing for "no step".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import torch

from replearn import neural
from replearn.neural.algorithms.base import Momentum, Algorithm, Summary, joint_names, set_real, table1_accuracy


@dataclass(frozen=True)
class L2GDOptions:
    """``lam``: the penalty lambda on the spread of the local models (default 2); ``p``: the
    probability of an aggregation step (default 0.2: four local steps per aggregation step on
    average). Ours: the FedRep paper does not state its values. ``coin``: ``"step"`` (default)
    draws a coin for every step of a round; ``"round"`` draws one coin per round, as the FedRep
    authors' ``main_l2gd.py`` does for all its clients at once: with probability ``1 - p`` the
    round's clients take all their planned local steps, otherwise each takes one aggregation step
    (run it with every client in every round, ``participation = 1``, to be their loop)."""

    lam: float = 2.0
    p: float = 0.2
    coin: str = "step"
    step_scales: ClassVar[tuple[str, ...]] = ("p",)  # a local step is lr / (1 - p)

    def __post_init__(self):
        set_real(self, "lam", low=0)
        set_real(self, "p", low=0, high=1, low_open=True)
        if self.p >= 1:
            raise ValueError(f"p must be < 1 (some steps must be local), got {self.p!r}")
        if self.coin not in ("step", "round"):
            raise ValueError(f"coin must be 'step' (a coin per local step) or 'round' (one per round, the "
                             f"FedRep authors' main_l2gd.py), got {self.coin!r}")


class L2GD(Algorithm):
    name, table1_row, Options = "L2GD", 10, L2GDOptions
    paper_accuracy = table1_accuracy(81.04, 59.98, 71.96, 72.13, 42.84)
    summary = Summary(
        shares="the average of the clients' models",
        personal="the whole model",
        local_objective=("a penalty, λ/2 times the squared distance to that average, taken as random steps toward "
                         "it (probability p)"),
        cite="hanzely2020l2gd")
    batched = True  # its client_update also runs batched (vmap-safe)

    def check(self, model, cfg, options):
        theta = cfg.lr * options.lam / options.p
        if theta > 1:
            raise ValueError(f"L2GD: an aggregation step moves x_i by lr * lam / p = {theta:.3g} of the way to the "
                             f"average, more than 1; lower lam or lr, or raise p")

    def init_client(self, initial, options):
        return {"x": {n: p.clone() for n, p in initial.items()}}

    def draw(self, plan, cfg, options, generator):
        longest = max(len(plan.batches[i][0]) for i in plan.clients)
        if options.coin == "round":
            coins = [bool(torch.rand(1, generator=generator) < options.p)] * longest
        else:
            coins = (torch.rand(longest, generator=generator) < options.p).tolist()
        return {i: coins for i in plan.clients}

    def client_update(self, ctx: neural.ClientRound) -> neural.ClientUpdate:
        names = tuple(ctx.global_params)
        cfg, opt = ctx.cfg, ctx.options
        x = dict(ctx.state["x"])
        xbar = ctx.global_params
        theta = cfg.lr * opt.lam / opt.p
        local = Momentum(cfg.momentum, cfg.weight_decay)
        first = next(iter(x.values()))
        loss_sum, steps = torch.zeros((), dtype=first.dtype, device=first.device), 0
        if opt.coin == "round" and ctx.draw and ctx.draw[0]:  # the round's one aggregation step
            x = {n: x[n] - theta * (x[n] - xbar[n]) for n in names}
        for idx, aggregate in zip(ctx.batches[0], ctx.draw):
            if opt.coin == "round" and aggregate:
                break
            if aggregate:
                x = {n: x[n] - theta * (x[n] - xbar[n]) for n in names}
            else:
                loss, g = ctx.worker.gradient(x, names, ctx.x, ctx.y, idx, cfg, ctx.generator)
                x = dict(zip(names, local.step([x[n] for n in names], [g[n] for n in names], cfg.lr / (1 - opt.p))))
                loss_sum = loss_sum + loss
                steps += 1
        if steps == 0:  # aggregation steps only: the loss of the model it keeps, on the first minibatch
            first_batch = ctx.batches[0][0] if len(ctx.batches[0]) else None
            loss_sum, _ = ctx.worker.gradient(x, names, ctx.x, ctx.y, first_batch,
                                              dataclasses.replace(cfg, augment=False))
            steps = 1
        return neural.ClientUpdate(x, {"x": x}, loss_sum, steps)

    def personal_names(self, model, options):
        return joint_names(model)

    def eval_params(self, ctx):
        return ctx.state["x"]


ALGORITHM = L2GD()
