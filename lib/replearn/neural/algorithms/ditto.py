"""Ditto (Li, Hu, Beirami, Smith, 2021, ICML, Alg. 1): a global model trained as by FedAvg and a
personal model ``v_k`` per client, regularised toward the global model.

A sampled client k (lines 4-9) receives ``w^t``; (i) it updates a copy of ``w^t`` by local SGD
on ``F_k`` (the global update, FedAvg's local phase) and sends it; (ii) it updates its personal
model by ``s`` local steps of ``v_k <- v_k - eta (grad F_k(v_k) + lambda (v_k - w^t))`` (the
personal objective ``h_k(v; w) = F_k(v) + (lambda / 2) ||v - w||^2``, eq. 2), here with the
engine's SGD (momentum, weight decay) over a second, independently drawn minibatch schedule of
the same length as (i). The server averages the global updates (weights n_i). Personal models
start at the initial model; clients are evaluated with their personal models.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from replearn import neural
from replearn.neural.algorithms.base import Algorithm, Summary, joint_names, joint_phase, set_real, table1_accuracy


@dataclass(frozen=True)
class DittoOptions:
    """``lam``: the coefficient lambda pulling each personal model toward the global model
    (default 0.1, in Ditto's grid {0.01, 0.1, 1, 2}, Sec. 5; the FedRep paper does not state
    its value)."""

    lam: float = 0.1
    step_scales: ClassVar[tuple[str, ...]] = ("lam",)  # the pull's weight in every personal step

    def __post_init__(self):
        set_real(self, "lam", low=0)


class Ditto(Algorithm):
    name, table1_row, Options = "Ditto", 12, DittoOptions
    paper_accuracy = table1_accuracy(85.39, 70.34, 80.36, 78.91, 56.34)
    models = 2  # a client trains two models a round (cost estimates)
    summary = Summary(
        shares="the global model (weighted average, trained as by FedAvg)",
        personal="a personal model",
        local_objective=("for the personal model, a pull toward the global model: λ/2 times their squared distance "
                         "(a second local phase)"),
        cite="li2021ditto")
    batched = True  # its client_update also runs batched (vmap-safe)

    def phases(self, model, cfg, options):
        return (joint_phase(model, cfg), joint_phase(model, cfg))  # global update, personal update

    def init_client(self, initial, options):
        return {"v": {n: p.clone() for n, p in initial.items()}}

    def client_update(self, ctx: neural.ClientRound) -> neural.ClientUpdate:
        names = tuple(ctx.global_params)
        w_global, lam = ctx.global_params, ctx.options.lam
        w, loss = ctx.worker.train(w_global, names, ctx.x, ctx.y, ctx.batches[0], ctx.cfg, ctx.generator)
        anchor = [w_global[n] for n in names]

        def pull(theta):
            return neural.foreach_mul(neural.foreach_sub(theta, anchor), lam)

        v, _ = ctx.worker.train(ctx.state["v"], names, ctx.x, ctx.y, ctx.batches[1], ctx.cfg, ctx.generator,
                                extra_grad=pull)
        return neural.ClientUpdate(w, {"v": v}, loss, len(ctx.batches[0]))

    def personal_names(self, model, options):
        return joint_names(model)

    def eval_params(self, ctx):
        return ctx.state["v"]


ALGORITHM = Ditto()
