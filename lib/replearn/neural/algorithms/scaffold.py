"""SCAFFOLD (Karimireddy, Kale, Mohri, Reddi, Stich, Suresh, 2020, Alg. 1, control variates of
option II).

Server state: the model ``x`` and the control variate ``c``; client state: its control variate
``c_i`` (both start at 0). A sampled client starts from ``y_i = x`` and takes its K local steps
(line 10) with the corrected gradient ``g_i(y_i) - c_i + c`` (the engine's SGD: same
minibatches, momentum and weight decay as FedAvg; optionally clipped in norm, as the FedRep
authors' code does, :class:`ScaffoldOptions`); then (line 12, option II)
``c_i+ = c_i - c + (x - y_i) / (K eta_l)`` with ``eta_l = lr`` and K its number of steps, and it
sends ``y_i`` and ``Delta c_i = c_i+ - c_i`` (the server forms ``mean(Delta y_i) = mean(y_i) - x``). The server (lines 16-17):
``x <- x + eta_g * mean(Delta y_i)`` and ``c <- c + (|S| / N) * mean(Delta c_i)``, where the
means are weighted by n_i (the paper's uniform means when the clients hold equal amounts of
data, as in Table 1's partitions), and ``x <- mean(y_i)`` when ``eta_g = 1``. With ``c = c_i =
0`` (round 0) a client's steps are FedAvg's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from replearn import neural
from replearn.neural.algorithms.base import Algorithm, Summary, set_real, table1_accuracy


@dataclass(frozen=True)
class ScaffoldOptions:
    """``global_lr``: the server's step size eta_g (default 1, the paper's choice in its
    experiments, Sec. 7). ``max_grad_norm``: when set, each local step's corrected gradient
    ``g_i(y_i) - c_i + c`` is scaled to at most this norm (all tensors together) before the
    weight decay is added; None (the default, the paper's Alg. 1) does not clip. The FedRep
    authors' ``LocalUpdateScaffold`` calls ``clip_grad_norm_(..., max_norm=10)`` there."""

    global_lr: float = 1.0
    max_grad_norm: float | None = None
    step_scales: ClassVar[tuple[str, ...]] = ("global_lr",)  # the server's step size

    def __post_init__(self):
        set_real(self, "global_lr", low=0, low_open=True)
        if self.max_grad_norm is not None:
            set_real(self, "max_grad_norm", low=0, low_open=True)


class Scaffold(Algorithm):
    name, table1_row, Options = "SCAFFOLD", 5, ScaffoldOptions
    paper_accuracy = table1_accuracy(37.72, 47.33, 33.79, 20.32, 22.52)
    summary = Summary(
        shares="the whole model and a control variate (clients send the change of theirs)",
        personal="no model; its own control variate",
        local_objective="every step corrected by the server's control variate minus its own (against client drift)",
        cite="karimireddy2020scaffold")
    batched = True  # its client_update also runs batched (vmap-safe)

    def init_server(self, params, options):
        return {"c": {n: torch.zeros_like(p) for n, p in params.items()}}

    def init_client(self, initial, options):
        return {"c": {n: torch.zeros_like(p) for n, p in initial.items()}}

    def client_update(self, ctx: neural.ClientRound) -> neural.ClientUpdate:
        names = tuple(ctx.global_params)
        c, c_i = ctx.server["c"], ctx.state["c"]
        correction = [c[n] - c_i[n] for n in names]
        batches = ctx.batches[0]
        y, loss = ctx.worker.train(ctx.global_params, names, ctx.x, ctx.y, batches, ctx.cfg, ctx.generator,
                                   extra_grad=lambda theta: correction,
                                   max_grad_norm=ctx.options.max_grad_norm)
        K, lr = len(batches), ctx.cfg.lr
        c_new = {n: c_i[n] - c[n] + (ctx.global_params[n] - y[n]) / (K * lr) for n in names}
        upload = {**{f"y:{n}": y[n] for n in names}, **{f"dc:{n}": c_new[n] - c_i[n] for n in names}}
        return neural.ClientUpdate(upload, {"c": c_new}, loss, K)

    def server_update(self, params, server, mean_upload, selected, n_clients, options):
        eta = options.global_lr
        new = {n: (mean_upload[f"y:{n}"] if eta == 1 else p + eta * (mean_upload[f"y:{n}"] - p))
               for n, p in params.items()}
        share = len(selected) / n_clients
        c = {n: v + share * mean_upload[f"dc:{n}"] for n, v in server["c"].items()}
        return new, {"c": c}


ALGORITHM = Scaffold()
