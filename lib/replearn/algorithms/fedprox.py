"""FedProx (Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith, 2020, MLSys, Alg. 2): FedAvg whose
clients minimise the proximal local objective of eq. (2),
``h_k(w; w^t) = F_k(w) + (mu / 2) ||w - w^t||^2``, with ``w^t`` the server's model of the round.

Each local SGD step (the engine's :class:`replearn.neural.LocalSGD`, same minibatches,
momentum and weight decay as FedAvg) uses the gradient ``grad F_k(w; batch) + mu (w - w^t)``;
the server's model becomes the n_i-weighted average of the clients' models (as FedAvg; the
paper's inexact local solves are these fixed numbers of steps or epochs). ``mu = 0`` gives
FedAvg's iterates exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import neural
from .base import ProtocolAlgorithm, check_real


@dataclass(frozen=True)
class FedProxOptions:
    """``mu``: the proximal coefficient (default 0.01, in the grid {0.001, 0.01, 0.1, 1} of
    Li et al., 2020, Sec. 5.2; the FedRep paper does not state its value)."""

    mu: float = 0.01

    def __post_init__(self):
        check_real(self.mu, "mu", low=0)


class FedProx(ProtocolAlgorithm):
    name, row, Options = "FedProx", 3, FedProxOptions
    batched = True  # client_update also runs batched (ProtocolAlgorithm)

    def client_update(self, ctx: neural.ClientRound) -> neural.ClientUpdate:
        names = tuple(ctx.global_params)
        anchor = [ctx.global_params[n] for n in names]
        mu = ctx.options.mu

        def prox(theta):
            return neural.foreach_mul(neural.foreach_sub(theta, anchor), mu)

        new, loss = ctx.worker.train(ctx.global_params, names, ctx.x, ctx.y, ctx.batches[0], ctx.cfg,
                                     ctx.generator, extra_grad=prox)
        return neural.ClientUpdate(new, {}, loss, len(ctx.batches[0]))


ALGORITHM = FedProx()
