"""FedProx (Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith, 2020, MLSys, Alg. 2): FedAvg whose
clients minimise the proximal local objective of eq. (2),
``h_k(w; w^t) = F_k(w) + (mu / 2) ||w - w^t||^2``, with ``w^t`` the server's model of the round.

Each local SGD step (the engine's :class:`replearn.neural.LocalSGD`, same minibatches,
momentum and weight decay as FedAvg) uses the gradient ``grad F_k(w; batch) + mu (w - w^t)``;
the server's model becomes the n_i-weighted average of the clients' models (as FedAvg; the
paper's inexact local solves are these fixed numbers of steps or epochs). With ``mu = 0`` the
step is FedAvg's (no extra term is added), so its iterates, losses and evaluations are
FedAvg's bit for bit in every dtype and on every path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from replearn import neural
from replearn.neural.algorithms.base import Algorithm, Summary, set_real, table1_accuracy


@dataclass(frozen=True)
class FedProxOptions:
    """``mu``: the proximal coefficient (default 0.01, in the grid {0.001, 0.01, 0.1, 1} of
    Li et al., 2020, Sec. 5.2; the FedRep paper does not state its value)."""

    mu: float = 0.01
    step_scales: ClassVar[tuple[str, ...]] = ("mu",)  # the proximal term's weight in every step

    def __post_init__(self):
        set_real(self, "mu", low=0)


class FedProx(Algorithm):
    name, table1_row, Options = "FedProx", 3, FedProxOptions
    paper_accuracy = table1_accuracy(39.92, 50.99, 21.93, 20.17, 28.52)
    summary = Summary(
        shares="the whole model (weighted average)",
        personal="nothing",
        local_objective="a proximal term: μ/2 times the squared distance to the server's model",
        cite="li2020fedprox")
    batched = True  # its client_update also runs batched (vmap-safe)

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
