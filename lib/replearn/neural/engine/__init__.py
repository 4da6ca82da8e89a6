"""The federated engine: fast simulation of federated training of neural networks, one round
loop for every algorithm of :mod:`replearn.neural.algorithms`.

An algorithm (Collins et al., 2021, Alg. 1 and their baselines; Collins et al., 2022, eqs.
(2)-(3)) is an object with a few hooks (:class:`replearn.neural.algorithms.base.Algorithm`).
The simplest methods only declare three things and inherit the default client update:

- the **shared** parameters, averaged by the server with the clients' sample counts as
  weights, ``theta <- sum_i n_i theta_i / sum_i n_i`` over the participating clients (eq. 3);
- the **personal** parameters, kept per client across rounds (FedRep's and FedPer's heads,
  LG-FedAvg's lower layers, everything for local-only training and fine-tuning);
- the **local phases**: which parameters are trained, for how many steps or epochs. FedRep
  trains the head with the body frozen, then the body with the head frozen (the authors' code:
  10 head epochs, then the representation epochs); FedAvg, FedPer, LG-FedAvg and local-only
  train everything jointly.

Methods with extra gradient terms, client and server state or a server step other than an
average (FedProx, SCAFFOLD, Ditto, APFL, L2GD, Per-FedAvg, Fed-MTL) override the client update
and the other hooks; the loop (:func:`run`, module :mod:`~replearn.neural.engine.rounds`) is the
same.

Local training is SGD as in ``torch.optim.SGD`` (momentum without dampening, weight decay
added to the gradient of the weights), with a fresh momentum buffer for every phase of every
round, as the authors' code builds a new optimiser for each local update. A phase is either
``tau`` steps of ``batch_size`` samples (the FedAvg-FT paper's tau local steps; the samples come
from successive random permutations of the client's data) or ``E`` epochs over a fresh random
permutation in batches of ``batch_size`` with a smaller last batch (like a ``DataLoader`` with
``shuffle=True``, ``drop_last=False``).

Speed: the clients' images live as tensors on the device (the training images in the layout of
:func:`work_layout`: ``channels_last`` except in float64); there is no ``DataLoader``, no
per-sample augmentation (:func:`replearn.neural.data.augment` works on whole batches) and no
``deepcopy`` per client: each client's parameters are loaded into one working copy of the model
(:func:`fast_copy`: ReLU after max-pooling, weights in the working layout; same function and
gradients), updated in place with foreach kernels, and averaged as tensors. A phase that trains
only the head runs on body features computed once per phase (:class:`LocalSGD`). On a CPU the
clients of a round train concurrently, one per thread (``workers`` of :func:`run`, default
torch's thread count), each thread running its operations on one intra-op thread: at these
sizes one convolution does not keep two cores busy, two clients do. The server still sums the
clients in order, so a run gives the same iterates bit for bit for any number of workers (those
of a one-thread run). Clients with the same batch schedule can instead be trained together with
``torch.func.vmap`` (``vmap_clients > 1``: stacked parameters, one batched forward/backward for
the group, the algorithm's own per-client code run once per group with a
:class:`FunctionalSGD` worker), meant for GPUs; on a CPU it is slower. On a CPU the training is
compute-bound: the convolutions (oneDNN in float32, ATen's slower kernels in float64) take most
of the time (``bench/neural_rounds.py`` compares with a PFLlib-style loop). The dtype follows
the model (float32 or float64).

All random numbers (client selection, batches, augmentation, an algorithm's own draws) come from
one CPU ``torch.Generator`` seeded with ``cfg.seed``, so a run is bit-for-bit reproducible on the
CPU.

Inputs are checked before any training (images larger than :data:`MAX_INPUT`, starting states
that are not finite or exceed :data:`MAX_PARAMETER`, work beyond :data:`MAX_PHASE_BATCHES` /
:data:`MAX_RUN_STEPS`), and a run whose minibatch loss becomes non-finite or exceeds
:data:`DIVERGENCE_FACTOR` times its starting loss raises ``FloatingPointError`` naming the
learning rate (and the algorithm's options that scale its steps).

Modules, one idea each: :mod:`~replearn.neural.engine.clients` (client data),
:mod:`~replearn.neural.engine.config` (:class:`TrainConfig`),
:mod:`~replearn.neural.engine.fed_result` (:class:`FedResult`),
:mod:`~replearn.neural.engine.parts` (body, head, layers),
:mod:`~replearn.neural.engine.planning` (a round's draws and work),
:mod:`~replearn.neural.engine.sgd` (SGD arithmetic), :mod:`~replearn.neural.engine.workers`
(the local-SGD workers), :mod:`~replearn.neural.engine.evaluation` (testing the clients),
:mod:`~replearn.neural.engine.guards` (start, hook and divergence checks: the screening Flower
shares), :mod:`~replearn.neural.engine.threads` (client threads),
:mod:`~replearn.neural.engine.server` (the server's half of a round, shared with Flower) and
:mod:`~replearn.neural.engine.rounds` (the loop). The public names are re-exported here and
by :mod:`replearn.neural`. A framework that runs the clients elsewhere
(:mod:`replearn.neural.flower`) uses the same pieces: the server's half of a round,
:class:`ClientRound`, :class:`LocalSGD`, the screening and the algorithm's hooks.
"""

from replearn.neural.engine.clients import MAX_INPUT, ClientData, check_inputs, model_dtype
from replearn.neural.engine.config import TrainConfig
from replearn.neural.engine.evaluation import evaluate
from replearn.neural.engine.fed_result import Evaluation, FedResult, Params
from replearn.neural.engine.guards import (DIVERGENCE_FACTOR, MAX_PARAMETER, check_divergence, divergence_advice,
                                           starting_state)
from replearn.neural.engine.parts import layers, split_body_head, top_layers
from replearn.neural.engine.planning import (MAX_PHASE_BATCHES, MAX_RUN_STEPS, Phase, RoundPlan, check_phases,
                                             check_work, plan_batches, plan_round, sample_clients)
from replearn.neural.engine.rounds import ClientRound, ClientUpdate, run
from replearn.neural.engine.sgd import Momentum, add_weight_decay, decays, foreach_add, foreach_mul, foreach_sub
from replearn.neural.engine.workers import FunctionalSGD, LocalSGD, fast_copy, forward_chunk, work_layout

__all__ = ["DIVERGENCE_FACTOR", "MAX_INPUT", "MAX_PARAMETER", "MAX_PHASE_BATCHES", "MAX_RUN_STEPS", "ClientData",
           "ClientRound", "ClientUpdate", "Evaluation", "FedResult", "FunctionalSGD", "LocalSGD", "Momentum",
           "Params", "Phase", "RoundPlan", "TrainConfig", "add_weight_decay", "check_divergence", "check_inputs",
           "check_phases", "check_work", "decays", "divergence_advice", "evaluate", "fast_copy", "foreach_add",
           "foreach_mul", "foreach_sub", "forward_chunk", "layers", "model_dtype", "plan_batches", "plan_round",
           "run", "sample_clients", "split_body_head", "starting_state", "top_layers", "work_layout"]
