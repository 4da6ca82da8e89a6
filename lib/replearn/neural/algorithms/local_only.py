"""Local only (Table 1's first row, Collins et al., 2021): every client trains its own copy of the initial model on its
own data; nothing is communicated.

As the authors run it (``main_local.py`` of lgcollins/FedRep): every client trains
independently for ``epochs`` epochs of the run's SGD, whether or not a federated method would
have sampled it, and is tested once at the end. ``epochs = None`` trains instead in the rounds
where the client is sampled (``cfg.rounds`` rounds at ``cfg.participation``, the budget of the
federated methods, a budget that grows with participation). Everything is personal, nothing
shared, one joint phase: it inherits the default client update of
:class:`~replearn.neural.algorithms.base.Algorithm`.
"""

from dataclasses import dataclass, replace

import torch

from replearn.checks import check_int
from replearn.neural.algorithms.base import Algorithm, Summary, check_epochs, table1_accuracy


@dataclass(frozen=True)
class LocalOnlyOptions:
    """``epochs``: each client's local epochs (default 10, ``--epochs``' default in the authors'
    ``main_local.py``); ``None``: train in the rounds where the client is sampled."""

    epochs: int | None = 10

    def __post_init__(self):
        if self.epochs is not None:
            check_int(self.epochs, "epochs", 1)


class LocalOnly(Algorithm):
    name, table1_row = "Local only", 0
    paper_accuracy = table1_accuracy(89.79, 70.68, 78.30, 75.29, 41.29)
    summary = Summary(
        shares="nothing (no communication)",
        personal="the whole model",
        local_objective="nothing: SGD on its own loss (10 epochs, independently of any sampling)",
        cite="collins2021fedrep")  # the baseline of Table 1
    Options = LocalOnlyOptions

    def personal_names(self, model, options):
        return tuple(n for n, _ in model.named_parameters())

    def cost(self, cfg, options):
        """With ``epochs``: one round of every client, ``epochs`` epochs each (:meth:`run`)."""
        options = self.check_options(options)
        if options.epochs is None:
            return super().cost(cfg, options)
        return replace(cfg, rounds=1, participation=1.0, eval_every=1, last_rounds=1), options.epochs, self.batched

    def run(self, model, clients, cfg, options=None, *, state=None, callback=None, workers=None, runner=None):
        """With ``epochs``: one round in which every client trains ``epochs`` epochs, recorded as
        the last of ``cfg.rounds`` rounds (``train_loss`` and ``test_accuracy`` NaN before it,
        ``participants`` empty before it), so that ``accuracy`` is that one evaluation."""
        options = self.check_options(options)
        if options.epochs is None:
            return super().run(model, clients, cfg, options, state=state, callback=callback, workers=workers,
                               runner=runner)
        check_epochs(self.name, options.epochs, "LocalOnlyOptions.epochs", clients, cfg.batch_size)
        once = replace(cfg, rounds=1, participation=1.0, local_epochs=options.epochs, local_steps=None,
                       eval_every=1, last_rounds=1)
        r = super().run(model, clients, once, options, state=state, workers=workers, runner=runner)
        pad = cfg.rounds - 1
        loss = torch.cat([torch.full((pad,), float("nan")), r.train_loss])
        acc = torch.cat([torch.full((pad,), float("nan")), r.test_accuracy])
        if callback is not None:
            callback(cfg.rounds - 1, {"train_loss": float(loss[-1]), "test_accuracy": float(acc[-1])})
        return replace(r, train_loss=loss, test_accuracy=acc, participants=((),) * pad + r.participants,
                       config=cfg)


ALGORITHM = LocalOnly()
