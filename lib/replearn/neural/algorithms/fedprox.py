"""FedProx (Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith, 2020, MLSys, Alg. 2): FedAvg whose
clients minimise the proximal local objective of eq. (2),
``h_k(w; w^t) = F_k(w) + (mu / 2) ||w - w^t||^2``, with ``w^t`` the server's model of the round.

Each local SGD step (the engine's :class:`replearn.neural.LocalSGD`, same minibatches,
momentum and weight decay as FedAvg) uses the gradient ``grad F_k(w; batch) + mu (w - w^t)``;
the server's model becomes the n_i-weighted average of the clients' models (as FedAvg; the
paper's inexact local solves are these fixed numbers of steps or epochs). ``mu = 0`` runs
FedAvg itself (its :func:`replearn.neural.run_spec` code path, the same arithmetic), so its
iterates, losses and evaluations are FedAvg's bit for bit in every dtype and on every path.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import torch

from replearn import neural
from replearn.neural.algorithms.base import ProtocolAlgorithm, Summary, set_real, table1_accuracy


@dataclass(frozen=True)
class FedProxOptions:
    """``mu``: the proximal coefficient (default 0.01, in the grid {0.001, 0.01, 0.1, 1} of
    Li et al., 2020, Sec. 5.2; the FedRep paper does not state its value)."""

    mu: float = 0.01
    step_scales: ClassVar[tuple[str, ...]] = ("mu",)  # the proximal term's weight in every step

    def __post_init__(self):
        set_real(self, "mu", low=0)


class FedProx(ProtocolAlgorithm):
    name, table1_row, Options = "FedProx", 3, FedProxOptions
    paper_accuracy = table1_accuracy(39.92, 50.99, 21.93, 20.17, 28.52)
    summary = Summary(
        shares="the whole model (weighted average)",
        personal="nothing",
        local_objective="a proximal term (μ/2)‖w − wᵗ‖² toward the server's model wᵗ",
        cite="li2020fedprox")
    batched = True  # client_update also runs batched (ProtocolAlgorithm)

    def run(self, model, clients, cfg, options=None, *, state=None, callback=None, workers=None):
        options = self.check_options(options)
        if options.mu == 0:  # no proximal term: FedAvg's own run, so FedAvg's arithmetic exactly
            from replearn.neural.algorithms.fedavg import ALGORITHM as fedavg
            result = fedavg.run(model, clients, cfg, state=state, callback=callback, workers=workers)
            sampled = dict.fromkeys(i for sel in result.participants for i in sel)  # by first sampling
            return dataclasses.replace(result, algorithm=self.name,
                                       extras={"server": {}, "clients": {i: {} for i in sampled}})
        return super().run(model, clients, cfg, options, state=state, callback=callback, workers=workers)

    def client_update(self, ctx: neural.ClientRound) -> neural.ClientUpdate:
        names = tuple(ctx.global_params)
        anchor = [ctx.global_params[n] for n in names]
        mu = ctx.options.mu

        def prox(theta):
            return neural.foreach_mul(neural.foreach_sub(theta, anchor), mu)

        new, loss = ctx.worker.train(ctx.global_params, names, ctx.x, ctx.y, ctx.batches[0], ctx.cfg,
                                     ctx.generator, extra_grad=prox if mu != 0 else None)
        return neural.ClientUpdate(new, {}, loss, len(ctx.batches[0]))


ALGORITHM = FedProx()
