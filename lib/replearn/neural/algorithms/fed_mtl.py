"""Fed-MTL: federated multi-task learning with the MOCHA regulariser (Smith, Chiang, Sanjabi,
Talwalkar, 2017, eq. (1) with ``R(W, Omega) = lambda (||W||_F^2 + tr(W Omega W^T))``), Omega
fixed, as in the FedRep authors' code (their ``main_mtl.py`` / ``LocalUpdateMTL``).

Every client keeps its whole model ``w_i`` (nothing is averaged). In round t, with S the m
sampled clients, ``W = [w_j]_{j in S}`` (one column per client) is formed from their models
at the start of the round; client i minimises ``f_i(w_i) + R(W, Omega)`` over its own column
with the other columns fixed, so each local SGD step (the engine's minibatches, momentum and
weight decay) adds the regulariser's gradient ``2 lambda (w_i + (W Omega)_{:, i})``, where
column i of W is the current ``w_i``. What we implement of the authors' code: the same
regulariser with their ``Omega`` (``omega="authors"``: they build
``(I - 1 1^T / m) ** 2`` elementwise with ``I`` the all-ones m x m matrix, i.e. the constant
matrix ``(1 - 1/m)^2 1 1^T``) and their coefficient ``lambda = 10^-(floor(log10 d) + 2)`` for a
model of d parameters (default); over all parameters. Not implemented: MOCHA's primal-dual
solver and the update of Omega (the FedRep comparison fixes Omega too). ``omega="laplacian"``
uses ``I - 1 1^T / m`` (mean-regularised multi-task learning: ``tr(W Omega W^T) = sum_j
||w_j - wbar||^2``). Clients are evaluated with their own models.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from replearn import neural
from replearn.neural.algorithms.base import Algorithm, Summary, joint_names, set_real, table1_accuracy


@dataclass(frozen=True)
class FedMTLOptions:
    """``lam``: the regulariser's coefficient (default None: the authors' ``10^-(floor(log10
    d) + 2)`` for d parameters); ``omega``: ``"authors"`` (the constant matrix their code
    builds) or ``"laplacian"`` (``I - 1 1^T / m``)."""

    lam: float | None = None
    omega: str = "authors"
    step_scales: ClassVar[tuple[str, ...]] = ("lam",)  # the regulariser's weight in every step

    def __post_init__(self):
        if self.lam is not None:
            set_real(self, "lam", low=0)
        if self.omega not in ("authors", "laplacian"):
            raise ValueError(f"omega must be 'authors' or 'laplacian', got {self.omega!r}")


def coefficient(options: FedMTLOptions, d: int) -> float:
    """lambda for a model of ``d`` parameters."""
    return options.lam if options.lam is not None else 10.0 ** -(math.floor(math.log10(d)) + 2)


class FedMTL(Algorithm):
    name, table1_row, Options = "Fed-MTL", 7, FedMTLOptions
    paper_accuracy = table1_accuracy(80.46, 58.31, 76.53, 71.47, 41.25)
    summary = Summary(
        shares="the sum of the round's client models (for the regulariser); nothing averaged",
        personal="the whole model",
        local_objective=("MOCHA's regulariser over the round's models: λ times their squared norms plus their "
                         "coupling through a fixed task-relationship matrix"),
        cite="smith2017fedmtl")
    batched = True  # its client_update also runs batched (vmap-safe)

    def init_client(self, initial, options):
        return {"w": {n: p.clone() for n, p in initial.items()}}

    def broadcast(self, params, server, states, selected, options):
        total = {n: torch.zeros_like(p) for n, p in params.items()}
        for i in selected:  # in client order
            for n in total:
                total[n] += states[i]["w"][n]
        return {"sum": total, "m": len(selected)}

    def client_update(self, ctx: neural.ClientRound) -> neural.ClientUpdate:
        names = tuple(ctx.global_params)
        start = ctx.state["w"]
        m = ctx.broadcast["m"]
        lam = coefficient(ctx.options, sum(p.numel() for p in start.values()))
        others = [ctx.broadcast["sum"][n] - start[n] for n in names]  # sum of the other columns
        if ctx.options.omega == "authors":
            c = (1 - 1 / m) ** 2  # Omega = c 1 1^T: (W Omega)_i = c (w_i + sum_{j != i} w_j)

            def grad_r(theta):
                return [2 * lam * (t + c * (t + o)) for t, o in zip(theta, others)]
        else:  # Omega = I - 1 1^T / m: (W Omega)_i = w_i - (w_i + sum_{j != i} w_j) / m

            def grad_r(theta):
                return [2 * lam * (t + t - (t + o) / m) for t, o in zip(theta, others)]

        w, loss = ctx.worker.train(start, names, ctx.x, ctx.y, ctx.batches[0], ctx.cfg, ctx.generator,
                                   extra_grad=grad_r)
        return neural.ClientUpdate({}, {"w": w}, loss, len(ctx.batches[0]))

    def personal_names(self, model, options):
        return joint_names(model)

    def eval_params(self, ctx):
        return ctx.state["w"]


ALGORITHM = FedMTL()
