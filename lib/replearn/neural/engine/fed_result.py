"""What a federated run returns: :class:`FedResult` and its per-client :class:`Evaluation`."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from replearn.neural.engine.config import TrainConfig

Params = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Evaluation:
    """Per-client test accuracy and loss (NaN for a client without test data).

    ``average``: the clients' accuracies weighted by their test-set sizes n_i^test, i.e. the
    accuracy over all test samples pooled; clients without test data have weight 0 and are
    left out."""

    accuracy: torch.Tensor
    loss: torch.Tensor
    test_sizes: torch.Tensor

    @property
    def average(self) -> float:
        has = self.test_sizes > 0
        w = self.test_sizes[has].to(self.accuracy.dtype)
        return float((w * self.accuracy[has]).sum() / w.sum())


@dataclass(frozen=True)
class FedResult:
    """Outcome of a federated run.

    ``state``: the server's parameters (for names in ``local_names`` these are the values the
    clients started from); ``local``: per-client parameters stacked along a first client axis,
    for the names in ``local_names`` (the algorithm's ``personal_names``): those each client is
    evaluated with (FedRep's head, LG-FedAvg's lower layers, Ditto's personal or APFL's mixed
    model; empty when nothing is personal); ``shared_names``: the names the server shares;
    ``train_loss[t]``: the n_i-weighted mean minibatch loss of round t's local updates;
    ``test_accuracy[t]``: the average test accuracy after round t (NaN where not evaluated);
    ``participants[t]``: the clients sampled in round t; ``final``: the last evaluation, of
    what each client would use; ``extras``: what an algorithm keeps besides (the loop:
    ``"server"`` its server state and, for a method with its own client update, ``"clients"``
    the clients' states; the +FT wrappers: the ``"base"`` run and the ``"finetune"`` run).
    """

    algorithm: str
    state: Params
    local: Params
    shared_names: tuple[str, ...]
    local_names: tuple[str, ...]
    train_loss: torch.Tensor
    test_accuracy: torch.Tensor
    participants: tuple[tuple[int, ...], ...]
    final: Evaluation
    config: TrainConfig = field(repr=False)
    extras: dict = field(default_factory=dict, repr=False)

    @property
    def accuracy(self) -> float:
        """Mean test accuracy over the last ``config.last_rounds`` evaluated rounds."""
        acc = self.test_accuracy[-self.config.last_rounds:]
        return float(acc[~torch.isnan(acc)].mean())

    def client_state(self, i: int) -> Params:
        """Client ``i``'s full parameters: shared ones from the server, local ones its own."""
        return {n: (self.local[n][i] if n in self.local else p) for n, p in self.state.items()}

    def load_into(self, model: nn.Module, client: int | None = None) -> nn.Module:
        """Copy the server's (``client=None``) or a client's parameters into ``model``."""
        params = self.state if client is None else self.client_state(client)
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(params[n])
        return model

