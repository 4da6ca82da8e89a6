"""The hyper-parameters every algorithm shares: :class:`TrainConfig`."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from replearn.checks import check_count, check_int, check_seed

#: The values of :attr:`TrainConfig.first_visit`: where a client's personal part starts.
FIRST_VISIT = ("initial", "global", "average")


@dataclass(frozen=True)
class TrainConfig:
    """Hyper-parameters shared by all algorithms (defaults: the FedRep authors' code: SGD,
    lr 0.01, momentum 0.5, batch 10, 10 head epochs; one representation epoch).

    ``local_steps`` (tau) overrides ``local_epochs`` when given; likewise ``head_steps`` for
    FedRep's head phase. ``participation`` is the fraction r of clients sampled per round
    (``max(1, round(r M))`` clients, uniformly without replacement). ``last_rounds``: the
    reported accuracy is the mean over the last evaluated rounds (FedRep: final 10 rounds).
    ``vmap_clients``: how many clients with identical batch schedules are trained together
    with ``torch.func.vmap``, and how many with test sets of equal size are evaluated together
    (1: one after another).

    ``first_visit``: what a client's personal part is before the client is first sampled (it
    trains from it at its first visit, and is evaluated with it until then), one of
    :data:`FIRST_VISIT`: ``"initial"``, the run's starting parameters; ``"global"``, the
    server's current model; ``"average"``, the server's current model with the parameters the
    algorithm keeps personal by name (FedRep's and FedPer's heads, LG-FedAvg's local layers)
    replaced by the n_i-weighted mean of those of the previous round's clients, as in the FedRep
    authors' code, where a client not yet sampled holds the server's average of every parameter
    (``main_fedrep.py``: its ``w_locals`` entries are views of ``net_glob``'s tensors). A method
    whose clients keep their personal model in another form (Ditto's and APFL's personal
    models, L2GD's local models) then starts it from the current global model, as the authors'
    ``main_ditto.py`` and ``main_apfl.py`` do.
    """

    rounds: int = 10
    lr: float = 0.01
    momentum: float = 0.5
    weight_decay: float = 0.0
    batch_size: int = 10
    local_epochs: int = 1
    local_steps: int | None = None
    head_epochs: int = 10
    head_steps: int | None = None
    participation: float = 1.0
    augment: bool = False
    eval_every: int = 1
    last_rounds: int = 10
    vmap_clients: int = 1
    seed: int = 0
    first_visit: str = "initial"

    def __post_init__(self):
        counts = dict(rounds=self.rounds, batch_size=self.batch_size, local_epochs=self.local_epochs,
                      eval_every=self.eval_every, last_rounds=self.last_rounds, vmap_clients=self.vmap_clients)
        if self.local_steps is not None:
            counts["local_steps (tau)"] = self.local_steps
        if self.head_steps is not None:
            counts["head_steps"] = self.head_steps
        for name, value in counts.items():
            check_int(value, name, 1)
        check_int(self.head_epochs, "head_epochs", 0)
        # sizes that set work: at most checks.MAX_COUNT each (the run checks their product
        # against MAX_RUN_STEPS once the data sizes are known)
        for name in ("rounds", "local_epochs", "local_steps", "head_epochs", "head_steps", "vmap_clients"):
            if getattr(self, name) is not None:
                check_count(getattr(self, name), name, 0)
        check_seed(self.seed, "seed")
        reals = dict(lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay,
                     participation=self.participation)
        for name, value in reals.items():
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise ValueError(f"{name} must be a finite real number, got {value!r}")
            if not isinstance(value, int):  # a NumPy real is kept (printed, hashed, stored) as the float it stands for
                object.__setattr__(self, name, float(value))
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr!r}")
        if not 0 <= self.momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum!r}")
        if not self.weight_decay >= 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay!r}")
        if not 0 < self.participation <= 1:
            raise ValueError(f"participation must be in (0, 1], got {self.participation!r}")
        if self.first_visit not in FIRST_VISIT:
            raise ValueError(f"first_visit must be one of {FIRST_VISIT}, got {self.first_visit!r}")
        if not isinstance(self.augment, bool):
            raise ValueError(f"augment must be True or False, got {self.augment!r}")

