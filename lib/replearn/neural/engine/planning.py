"""A round's random draws and the work they plan: local phases, client sampling, minibatch
plans, and the limits a run is checked against before it starts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Sequence

import torch
from torch import nn

from replearn.checks import check_int
from replearn.neural.engine.config import TrainConfig

MAX_PHASE_BATCHES = 10**6
"""Most minibatches one client's local phase may plan in one round (``steps``, or ``epochs``
times the batches of an epoch): a round's batch plan is held in memory, and 10**6 index
tensors per client are about 100 MB. The book's largest phase has 500."""

MAX_RUN_STEPS = 10**9
"""Most local SGD steps a run may plan (rounds x clients per round x steps per client): at a
millisecond per step on the tiniest network this is 11 days. Checked at the start of a run,
before anything is allocated, with the fields that set it named."""



class Phase(NamedTuple):
    """One local phase: the ``trainable`` parameter names (the others are frozen), and either
    ``steps`` SGD steps (when not None) or ``epochs`` epochs."""

    trainable: tuple[str, ...]
    steps: int | None
    epochs: int



def sample_clients(n_clients: int, participation: float, generator: torch.Generator) -> list[int]:
    """The clients of one round, sorted: ``m = max(1, round(participation * n_clients))``
    clients drawn uniformly without replacement as ``torch.randperm(n_clients)[:m]`` from
    ``generator``; all clients, with no draw, when ``m = n_clients``."""
    check_int(n_clients, "n_clients", 1)
    m = max(1, round(participation * n_clients))
    if m >= n_clients:
        return list(range(n_clients))
    return sorted(torch.randperm(n_clients, generator=generator)[:m].tolist())


def plan_batches(n: int, batch_size: int, *, steps: int | None, epochs: int,
                 generator: torch.Generator) -> list[torch.Tensor]:
    """Index batches (CPU int64) for one local phase on a client with ``n`` samples:
    ``steps`` batches of ``min(batch_size, n)`` indices cut from successive random
    permutations (each permutation's incomplete tail dropped), or, when ``steps`` is None,
    ``epochs`` permutations each cut into batches of ``batch_size`` (the last one smaller,
    like ``DataLoader(shuffle=True, drop_last=False)``)."""
    check_int(n, "n", 1)
    check_int(batch_size, "batch_size", 1)
    planned = steps if steps is not None else epochs * -(-n // batch_size)
    if isinstance(planned, int) and planned > MAX_PHASE_BATCHES:
        what = f"steps = {steps}" if steps is not None else f"epochs = {epochs} of {-(-n // batch_size)} batches"
        raise ValueError(f"a local phase of {what} plans {planned:.3g} minibatches, more than MAX_PHASE_BATCHES = "
                         f"{MAX_PHASE_BATCHES:.0e} (a round's batch plan is held in memory); use fewer local "
                         f"steps or epochs")
    if steps is None:
        check_int(epochs, "epochs", 1)
        out = []
        for _ in range(epochs):
            out.extend(torch.randperm(n, generator=generator).split(batch_size))
        return out
    check_int(steps, "steps", 1)
    b = min(batch_size, n)
    per_perm = n // b
    perms = [torch.randperm(n, generator=generator)[: per_perm * b] for _ in range(-(-steps // per_perm))]
    return list(torch.cat(perms).split(b)[:steps])


@dataclass(frozen=True)
class RoundPlan:
    """One round's random choices: the sampled ``clients`` (sorted) and ``batches[i][k]``,
    client i's index batches for phase k."""

    clients: tuple[int, ...]
    batches: dict[int, tuple[tuple[torch.Tensor, ...], ...]]


def plan_round(train_sizes: Sequence[int], phases: Sequence[Phase], cfg: TrainConfig,
               generator: torch.Generator) -> RoundPlan:
    """Draw one round from ``generator``: :func:`sample_clients` with ``cfg.participation``,
    then, for each sampled client in increasing order and each phase in order,
    :func:`plan_batches` with ``cfg.batch_size``. This is the order :func:`replearn.neural.run` draws in,
    so a framework that calls ``plan_round`` with a generator seeded by
    ``make_generator(cfg.seed)`` replays an in-process run (without augmentation, whose draws
    follow during training)."""
    sizes = [int(n) for n in train_sizes]
    clients = sample_clients(len(sizes), cfg.participation, generator)
    batches = {i: tuple(tuple(plan_batches(sizes[i], cfg.batch_size, steps=ph.steps, epochs=ph.epochs,
                                           generator=generator)) for ph in phases) for i in clients}
    return RoundPlan(tuple(clients), batches)



def check_work(phases: Sequence[Phase], train_sizes: Sequence[int], cfg: TrainConfig) -> int:
    """The number of local steps a run of ``cfg.rounds`` rounds with these ``phases`` plans
    (at most: every sampled client counted with the largest data size); raise ``ValueError``
    naming the fields if one client's phase exceeds :data:`MAX_PHASE_BATCHES` or the run
    :data:`MAX_RUN_STEPS`. Runs call it before anything is allocated."""
    n = max(int(s) for s in train_sizes)
    m = max(1, round(cfg.participation * len(train_sizes)))
    per_client = 0
    for k, ph in enumerate(phases):
        batches = ph.steps if ph.steps is not None else ph.epochs * -(-n // cfg.batch_size)
        what = (f"phase {k}: {ph.steps} steps" if ph.steps is not None else
                f"phase {k}: {ph.epochs} epochs x {-(-n // cfg.batch_size)} batches")
        if batches > MAX_PHASE_BATCHES:
            raise ValueError(f"{what} = {batches:.3g} minibatches per client and round, more than "
                             f"MAX_PHASE_BATCHES = {MAX_PHASE_BATCHES:.0e}; lower local_steps/local_epochs "
                             f"(or head_steps/head_epochs)")
        per_client += batches
    total = cfg.rounds * m * per_client
    if total > MAX_RUN_STEPS:
        raise ValueError(f"rounds = {cfg.rounds} x {m} clients per round x {per_client} local steps per client = "
                         f"{total:.3g} SGD steps, more than MAX_RUN_STEPS = {MAX_RUN_STEPS:.0e} (days of work); "
                         f"lower rounds, participation or the local steps/epochs")
    return total



def check_phases(algorithm: str, model: nn.Module, phases: Sequence[Phase]) -> None:
    """``ValueError`` unless ``phases`` is a non-empty sequence of :class:`Phase` s, each training
    at least one of ``model``'s parameters (by name) for at least one step or epoch."""
    if not phases:
        raise ValueError(f"{algorithm}: an algorithm needs at least one local phase")
    names = {n for n, _ in model.named_parameters()}
    for k, ph in enumerate(phases):
        if not isinstance(ph, Phase):
            raise ValueError(f"{algorithm}: phase {k} must be a neural.Phase(trainable, steps, epochs), got {ph!r}")
        if not ph.trainable:
            raise ValueError(f"{algorithm}: phase {k} trains no parameter")
        unknown = set(ph.trainable) - names
        if unknown:
            raise ValueError(f"{algorithm}: unknown parameter names {sorted(unknown)}; the model has {sorted(names)}")
        check_int(ph.epochs if ph.steps is None else ph.steps,
                  f"phase {k} {'epochs' if ph.steps is None else 'steps'}", 1)
