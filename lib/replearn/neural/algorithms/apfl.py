"""APFL, adaptive personalised federated learning (Deng, Kamani, Mahdavi, 2020, Alg. 1).

Each client keeps a personal model ``v_i`` and a mixing weight ``alpha_i``; its model is the
mixture ``vbar_i = alpha_i v_i + (1 - alpha_i) w_i``. A sampled client starts ``w_i`` from the
server's model and, at every local step t with minibatch xi (lines 6-9, all three updates from
the values of step t-1, on the same minibatch):

- ``w_i <- w_i - eta grad f_i(w_i; xi)`` (the global model's local SGD),
- ``v_i <- v_i - eta grad_v f_i(vbar_i; xi) = v_i - eta alpha_i grad f_i(vbar_i; xi)``,
- ``alpha_i <- alpha_i - eta_alpha <v_i - w_i, grad f_i(vbar_i; xi)>`` (the chain rule of
  ``d vbar / d alpha = v - w``, Sec. 3.2), then clipped to [0, 1] as in the authors' code.

``w_i`` and ``v_i`` use the engine's SGD semantics (momentum, weight decay, a fresh buffer each
round); ``alpha_i`` plain gradient steps. The server averages the ``w_i`` (weights n_i). A
client is evaluated with ``alpha_i v_i + (1 - alpha_i) w`` for the server's current ``w``
(the personalised model of Alg. 1's output). ``train_loss`` is the global model's loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from replearn import neural
from replearn.neural.algorithms.base import Momentum, Algorithm, Summary, joint_names, set_real, table1_accuracy


@dataclass(frozen=True)
class APFLOptions:
    """``alpha``: every client's initial mixing weight alpha_i (default 0.5, in the range
    {0.25, 0.5, 0.75} of Deng et al., Sec. 5); ``alpha_lr``: the step size of alpha's updates
    (default None: the run's ``lr``); ``adapt_alpha``: update alpha (True, "adaptive APFL")
    or keep it fixed."""

    alpha: float = 0.5
    alpha_lr: float | None = None
    adapt_alpha: bool = True
    step_scales: ClassVar[tuple[str, ...]] = ("alpha_lr",)  # alpha's step size (None: the run's lr)

    def __post_init__(self):
        set_real(self, "alpha", low=0, high=1)
        if self.alpha_lr is not None:
            set_real(self, "alpha_lr", low=0)
        if not isinstance(self.adapt_alpha, bool):
            raise ValueError(f"adapt_alpha must be True or False, got {self.adapt_alpha!r}")


def mix(alpha: torch.Tensor, v: dict, w: dict) -> dict:
    """``alpha v + (1 - alpha) w`` per parameter."""
    return {n: alpha * v[n] + (1 - alpha) * w[n] for n in w}


class APFL(Algorithm):
    name, table1_row, Options = "APFL", 11, APFLOptions
    paper_accuracy = table1_accuracy(83.77, 72.29, 82.39, 78.20, 55.44)
    models = 2  # a client trains two models a round (cost estimates)
    summary = Summary(
        shares="the global model (weighted average)",
        personal="a personal model and a mixing weight α; it predicts with the α-weighted mixture of both models",
        local_objective="the personal model and α trained on the mixture's loss, besides the global model's local SGD",
        cite="deng2020apfl")
    batched = True  # its client_update also runs batched (vmap-safe)

    def init_client(self, initial, options):
        first = next(iter(initial.values()))
        return {"v": {n: p.clone() for n, p in initial.items()},
                "alpha": torch.tensor(options.alpha, dtype=first.dtype, device=first.device)}

    def client_update(self, ctx: neural.ClientRound) -> neural.ClientUpdate:
        names = tuple(ctx.global_params)
        cfg, opt = ctx.cfg, ctx.options
        alpha_lr = cfg.lr if opt.alpha_lr is None else opt.alpha_lr
        w = dict(ctx.global_params)
        v, alpha = dict(ctx.state["v"]), ctx.state["alpha"]
        mw, mv = Momentum(cfg.momentum, cfg.weight_decay), Momentum(cfg.momentum, cfg.weight_decay)
        loss_sum = torch.zeros((), dtype=alpha.dtype, device=alpha.device)
        for idx in ctx.batches[0]:
            loss, gw = ctx.worker.gradient(w, names, ctx.x, ctx.y, idx, cfg, ctx.generator)
            _, gbar = ctx.worker.gradient(mix(alpha, v, w), names, ctx.x, ctx.y, idx, cfg, ctx.generator)
            loss_sum = loss_sum + loss
            g_alpha = sum(torch.sum((v[n] - w[n]) * gbar[n]) for n in names)
            w_new = mw.step([w[n] for n in names], [gw[n] for n in names], cfg.lr)
            v_new = mv.step([v[n] for n in names], [alpha * gbar[n] for n in names], cfg.lr)
            if opt.adapt_alpha:
                alpha = torch.clamp(alpha - alpha_lr * g_alpha, 0.0, 1.0)
            w, v = dict(zip(names, w_new)), dict(zip(names, v_new))
        return neural.ClientUpdate(w, {"v": v, "alpha": alpha}, loss_sum, len(ctx.batches[0]))

    def personal_names(self, model, options):
        return joint_names(model)

    def eval_params(self, ctx):
        return mix(ctx.state["alpha"], ctx.state["v"], ctx.global_params)


ALGORITHM = APFL()
