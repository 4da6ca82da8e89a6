"""Fine-tuning, and the +FT variants of Table 1 (Collins et al., 2021, Sec. 5.2, "Baselines"):
FedAvg+FT, FedProx+FT and SCAFFOLD+FT.

:class:`FineTuning` ("Fine-tuning" in the registry) is an algorithm of the engine's loop like
any other: one round in which every client trains ``part`` (``"head"``: the last layer; or
``"all"``) of the given starting model for ``epochs`` epochs of the run's SGD on its own
training data, keeps it (personal, nothing shared) and is tested. It declares that and inherits
the default client update. Used by the +FT methods, by the new-client experiments (4.8, 4.9,
5.9) and to fit heads on a frozen body.

"To obtain fine-tuning results, we first train the global model for the full training period,
then each client then fine-tunes only the head on its local training data for 10 epochs of SGD
before computing the final test accuracy." :class:`FineTuned` wraps a base algorithm: it runs
the base for ``cfg.rounds`` rounds, then :class:`FineTuning` of ``part`` (``"head"``) from the
server's final model for ``epochs`` epochs (the run's lr, momentum, weight decay, batch size and
augmentation) and is tested. The result's ``final`` and ``accuracy`` are the fine-tuned
evaluation (``test_accuracy`` is NaN except in the last round, which holds it), ``local`` the
fine-tuned parameters, ``train_loss`` and ``participants`` the base run's; ``extras["base"]``
and ``extras["finetune"]`` keep both runs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from replearn import neural
from replearn.backend import derive_seed
from replearn.checks import check_count, check_seed
from replearn.neural.algorithms import fedavg, fedprox, scaffold
from replearn.neural.algorithms.base import Algorithm, Summary, check_epochs, joint_names, table1_accuracy


@dataclass(frozen=True)
class FineTuningOptions:
    """``part``: ``"head"`` (the last layer, body frozen) or ``"all"``; ``epochs``: the epochs
    every client trains (default 10, the FedRep paper's +FT)."""

    part: str = "head"
    epochs: int = 10

    def __post_init__(self):
        check_count(self.epochs, "epochs", 1)
        if self.part not in ("head", "all"):
            raise ValueError(f"part must be 'head' or 'all', got {self.part!r}")


class FineTuning(Algorithm):
    """One round in which every client trains ``part`` of the starting model for ``epochs``
    epochs and keeps it (see the module docstring)."""

    name = "Fine-tuning"
    Options = FineTuningOptions
    summary = Summary(
        shares="nothing (each client starts from the given model)",
        personal="the fine-tuned part (the head, or the whole model)",
        local_objective="nothing: SGD on its own loss for the given epochs, the rest frozen",
        cite="collins2021fedrep")

    def personal_names(self, model, options):
        return neural.split_body_head(model)[1] if options.part == "head" else joint_names(model)

    def shared_names(self, model, options):
        return ()

    def phases(self, model, cfg, options):
        return (neural.Phase(self.personal_names(model, options), None, options.epochs),)

    def run(self, model, clients, cfg, options=None, *, state=None, callback=None, workers=None, runner=None):
        """One round of ``cfg``'s SGD (its lr, momentum, weight decay, batch size, augmentation,
        seed and ``vmap_clients``) with every client taking part, from ``state`` (default: the
        model's parameters)."""
        options = self.check_options(options)
        check_epochs(self.name, options.epochs, "FineTuningOptions.epochs", clients, cfg.batch_size)
        once = replace(cfg, rounds=1, participation=1.0, local_epochs=options.epochs, local_steps=None,
                       eval_every=1, last_rounds=1)
        return super().run(model, clients, once, options, state=state, callback=callback, workers=workers,
                           runner=runner)


@dataclass(frozen=True)
class FineTuneOptions:
    """``epochs``: fine-tuning epochs (default 10, the paper's); ``part``: ``"head"`` (the
    paper's) or ``"all"``; ``seed``: the fine-tuning's seed (default None: derived from the
    run's ``cfg.seed``); ``base``: the base algorithm's options (None: its defaults)."""

    epochs: int = 10
    part: str = "head"
    seed: int | None = None
    base: object = None

    def __post_init__(self):
        check_count(self.epochs, "epochs", 1)
        if self.part not in ("head", "all"):
            raise ValueError(f"part must be 'head' or 'all', got {self.part!r}")
        if self.seed is not None:
            check_seed(self.seed, "seed")


def fine_tuned_summary(base: Summary) -> Summary:
    """The base's summary with the default fine-tuning (``part="head"``, 10 epochs) added: the
    server shares what the base's shares; each client then keeps a fine-tuned head."""
    return Summary(shares=base.shares,
                   personal="the head, fine-tuned on its data after training",
                   local_objective=f"{base.local_objective}; after the last round, 10 epochs of SGD on "
                                   "the head alone",
                   cite=base.cite)


class FineTuned(Algorithm):
    """``base`` (an :class:`~replearn.neural.algorithms.base.Algorithm`), then fine-tuning."""

    Options = FineTuneOptions

    def __init__(self, base: Algorithm, paper_accuracy: dict):
        self.base, self.name, self.table1_row = base, f"{base.name}+FT", base.table1_row + 1
        self.paper_accuracy, self.models = paper_accuracy, base.models
        self.batched = base.batched  # the fine-tuning is batched whenever cfg.vmap_clients > 1
        self.summary = fine_tuned_summary(base.summary)

    def run(self, model, clients, cfg, options=None, *, state=None, callback=None, workers=None, runner=None):
        options = self.check_options(options)
        # refused before the base run trains, naming this option (not Fine-tuning's or TrainConfig's)
        check_epochs(self.name, options.epochs, "FineTuneOptions.epochs", clients, cfg.batch_size)
        base = self.base.run(model, clients, cfg, options.base, state=state, callback=callback, workers=workers,
                             runner=runner)
        return self.fine_tune(base, model, clients, options, runner=runner)

    def fine_tune(self, base: neural.FedResult, model, clients, options=None, *, runner=None) -> neural.FedResult:
        """The +FT result from a finished run ``base`` of the base algorithm (with the run's
        ``base.config``): every client fine-tunes ``options.part`` of ``base.state`` (so a page
        that already trained FedAvg gets FedAvg+FT without training it again)."""
        options = self.check_options(options)
        cfg = base.config
        check_epochs(self.name, options.epochs, "FineTuneOptions.epochs", clients, cfg.batch_size)
        seed = derive_seed(cfg.seed, 5) if options.seed is None else options.seed
        tuning = neural.TrainConfig(lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay,
                                    batch_size=cfg.batch_size, augment=cfg.augment, seed=seed,
                                    vmap_clients=cfg.vmap_clients)
        ft = FINE_TUNING.run(model, clients, tuning, FineTuningOptions(options.part, options.epochs), state=base.state,
                             runner=runner)
        acc = torch.full_like(base.test_accuracy, float("nan"))
        acc[-1] = ft.final.average
        return replace(base, algorithm=self.name, local=ft.local, local_names=ft.local_names,
                       shared_names=tuple(n for n in base.state if n not in ft.local_names), test_accuracy=acc,
                       final=ft.final, extras={"base": base, "finetune": ft})


def _fine_tuned():
    return (FineTuned(fedavg.ALGORITHM, table1_accuracy(87.65, 73.68, 82.04, 79.34, 55.44)),
            FineTuned(fedprox.ALGORITHM, table1_accuracy(85.81, 72.75, 75.41, 78.52, 55.09)),
            FineTuned(scaffold.ALGORITHM, table1_accuracy(86.35, 68.23, 78.24, 78.88, 44.34)))


FINE_TUNING = FineTuning()

#: Fine-tuning, then FedAvg+FT, FedProx+FT and SCAFFOLD+FT with their Table 1 rows (the row after
#: their base's).
ALGORITHMS = (FINE_TUNING, *_fine_tuned())
