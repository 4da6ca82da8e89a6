"""Every method of Table 1 (Collins et al., 2021): replearn.neural.algorithms vs a PFLlib-style loop.

For each of the 15 methods, R rounds of ours (:func:`replearn.neural.algorithms.run`, ``workers=1``)
and of a PFLlib-style loop of the same method written below run in one process on one torch
thread, on the same model (the FedRep CNN with the narrow 16/32-channel body, the book's CPU
network), the same initial weights, the same data (synthetic CIFAR-shaped images, 2 classes
per client, class prototypes plus noise; by default 10 clients x 100 training and 25 test
images: ``--clients``, ``--per-client``, ``--test-per-client``) and the same
hyper-parameters (the book's CPU optimiser: lr 0.05, momentum 0.5, batch 10; ``--steps`` tau
local steps, FedRep ``--head-steps`` head steps; every client in every round; each method's
own parameters at the library's defaults, printed). Runs are interleaved (each repeat runs every
method, ours and the loop in alternating order) and repeated; the script prints per method the
median seconds per round of each, the ratio (PFLlib-style time / ours, > 1: ours faster; the
median of the per-repeat ratios, with their range), whether it meets the target (ratio >= 1.0)
and the same ratio of wall-clock times. The seconds are CPU seconds of the process
(``time.process_time``; both run on one thread, so on a quiet machine they equal the wall
time): on a loaded machine the wall time also counts the waits for a core, which swamp the
differences. A "round" is the run's time divided by R: it includes each run's setup and one
evaluation of every client on its test images after the last round (both do both). The +FT
rows time the fine-tuning alone (seconds per fine-tuning of every client's head for
``--ft-epochs`` epochs, from the final model of ours' base run): their base rounds are the
base method's row. The last line of each dtype times one forward and backward pass of a batch
on the plain model (what the loops train) and on ours' working copy
(:func:`replearn.neural.fast_copy`), which explains most of the ratios.

"PFLlib-style" means what PFLlib (Zhang et al., github.com/TsingZ0/PFLlib,
``system/flcore/clients/client*.py`` and ``servers/server*.py``) does, read, not copied: every
client owns ``copy.deepcopy`` models and fresh ``torch.optim`` optimisers (one per round here,
so that the momentum buffer restarts each round as in ours), iterates a ``DataLoader`` over a
list of ``(image, label)`` pairs, steps parameter by parameter, receives the server's model by
``param.data = new.data.clone()``, and the server aggregates by ``deepcopy`` of the first
upload, ``zero_()`` and ``+= w_i * param.clone()``. The DataLoaders replay the batches ours
draws (:func:`replearn.neural.plan_round` from a generator seeded with ``cfg.seed``; L2GD's
coins drawn after it, as ours), so both compute the same iterates and a sanity check compares
them: the relative difference of the parameters every client is evaluated with (all clients
stacked), which must stay below 1e-9 (float64: only the summation order of the server's
average differs, ours training a copy with ReLU and max-pooling swapped) or 1e-3 (float32,
where ours' convolutions also run ``channels_last``), and the two average test accuracies
(within 0.02). A method whose check fails is marked ``FAILED`` instead of ``MET``/``MISSED``
(the two loops computed different things, so their times compare nothing), left out of the
count of targets met, and makes the bench exit with status 1 naming it.

What the ratios show (a 2-core Xeon, torch 2.13, one thread): in float32 ours' working copy
runs a forward and backward pass about 1.2-1.5x faster than the plain model (oneDNN's
``channels_last`` convolutions, a quarter of the ReLU work), and ours also saves the
DataLoader's collation, ``zero_grad`` and the per-parameter optimiser loop, so every method
is faster. In float64 there is no oneDNN: ATen's ``slow_conv2d`` runs both, and on
``channels_last`` tensors it is 5-25% slower than on the plain layout, which the saved
overheads (about 0.5 ms of a 15-20 ms step) did not make up (about half the methods missed the
target, by up to 15%), so ours keeps the plain layout in float64
(:func:`replearn.neural.work_layout`) and saves the overheads on top: measured since (5 repeats,
one other job on the second core), 14 of 15 methods at 1.00-1.17 and L2GD at parity (0.9997),
the +FT rows and Fed-MTL at 1.9-2.2; the full-model methods' margins are within the noise. Methods where the
PFLlib style itself is slow win in both dtypes: Fed-MTL (its regulariser builds and
differentiates the d x m matrix W every step) and the +FT fine-tuning (ours runs the frozen
body once per client, the loop once per batch and epoch; measured at 2 and 10 epochs).

The reference loops, per method (one round; "train" is SGD with momentum on the planned
batches, "send" the clone of the server's parameters into the client's model):

- Local only: each client trains its own model (never sent anything); nothing is averaged.
- FedAvg (McMahan et al., 2017, Alg. 1): send; train the whole model; the server averages the
  models with weights n_i / n.
- FedProx (Li et al., 2020, eq. 2): FedAvg whose optimiser adds ``mu (w - w^t)`` to every
  gradient (PFLlib's ``PerturbedGradientDescent``, with momentum), ``w^t`` the sent model.
- SCAFFOLD (Karimireddy et al., 2020, Alg. 1, option II): send the model and ``c``; the
  optimiser adds ``c - c_i`` to every gradient (PFLlib's ``SCAFFOLDOptimizer``, with momentum);
  then ``c_i+ = c_i - c + (x - y_i) / (K lr)``; the server (lines 16-17) adds the mean of
  ``y_i - x`` to x and ``|S|/N`` times the mean of ``c_i+ - c_i`` to c (means weighted by
  n_i, PFLlib's uniform ones for equal data).
- Fed-MTL (Smith et al., 2017, eq. 1, the FedRep authors' Omega and lambda): the server stacks
  the sampled clients' flattened models in ``W`` (d x m); every step a client writes its
  flattened parameters into its column and adds ``lambda (||W||_F^2 + sum_r (sum_j W_rj
  sqrt(c))^2)``, ``c = (1 - 1/m)^2``, to its loss (PFLlib's ``clientmtl`` regulariser; PFLlib
  flattens the detached ``state_dict``, so there its gradient is lost; here it flows into the
  model); nothing is averaged.
- Per-FedAvg (FO) (Fallah et al., 2020, Alg. 1): the DataLoader yields 2B images, split in
  halves D and D'; save the parameters, take a plain SGD step of size alpha on D, take the
  gradient on D', restore the parameters and step the momentum SGD with it (PFLlib's
  ``clientperavg``); the server averages; a client is evaluated with one full-batch gradient
  step of size alpha from the server's model.
- LG-FedAvg (Liang et al., 2020): send the method's shared layers (its ``shared_layers`` top
  layers: by default the head and the layer below, the FedRep authors' ``fc2`` and ``fc3``;
  PFLlib shares the head alone); train the whole model; the server averages those layers (each
  client keeps the layers below).
- L2GD (Hanzely & Richtarik, 2020, Alg. 1; not in PFLlib): each client keeps its model; at
  step k, coin k decides between ``x_i <- x_i - (lr lambda / p)(x_i - xbar)`` (in place) and a
  momentum SGD step of size ``lr / (1 - p)`` on the next planned batch; the server's ``xbar``
  becomes the average of the ``x_i``.
- APFL (Deng et al., 2020, Alg. 1): three models per client (w, v, and a scratch model holding
  ``vbar = alpha v + (1 - alpha) w``); per batch: the gradient of w, the gradient at vbar
  (written into the scratch model), ``<v - w, grad vbar>`` for alpha; w steps its optimiser, v
  steps with ``alpha grad vbar``, alpha steps and is clipped to [0, 1]; the server averages w
  (PFLlib's ``clientapfl`` trains v on its own loss instead; the loop follows the paper, as
  ours does).
- Ditto (Li et al., 2021, Alg. 1): send; ``ptrain``: the personal model steps a
  ``PerturbedGradientDescent`` toward the sent model (``+ lambda (v - w^t)``) on the second
  planned schedule; ``train``: the sent model trains on the first; the server averages.
- FedPer (Arivazhagan et al., 2019): send the body; train the whole model; average the bodies.
- FedRep (Collins et al., 2021, Alg. 1): send the body; train the head with the body frozen
  (``requires_grad = False``, PFLlib's ``clientrep``: a forward through the body every step),
  then the body with the head frozen; average the bodies.
- +FT (Collins et al., 2021, Sec. 5.2): after the base loop, send the final model to every
  client and train its head for ``--ft-epochs`` epochs (body frozen), batches as ours draws
  them (``derive_seed(cfg.seed, 5)``).

Run: ``OMP_NUM_THREADS=1 python bench/algorithm_rounds.py`` (both dtypes, 1 round, 2 repeats,
tau = 5: about 3 minutes on a loaded 2-core machine); the book's sizes with the paper's
fine-tuning: ``--steps 10 --head-steps 10 --per-client 200 --test-per-client 50
--ft-epochs 10``; ``--rounds 3 --repeats 5`` for tighter medians; ``--dtypes float64`` and
``--methods FedAvg,APFL`` for a subset.
"""

from __future__ import annotations

import argparse
import copy
import math
import statistics
import sys
import time
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from replearn.experiments.ch05_fedrep import cifar_federation as personalisation
from replearn.neural import algorithms, models
from replearn import neural
from replearn.backend import derive_seed, make_generator
from replearn.neural.specs import FEDREP_WIDTHS

BOOK = personalisation.FederationSettings().train
TARGET = 1.0
TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-3}


# --------------------------------------------------------------------------------------------
# Data


def synthetic_clients(n_clients: int, per_client: int, n_test: int, dtype: torch.dtype, seed: int = 0):
    """CIFAR-shaped images: client i holds classes 2i and 2i + 1 (mod 10); an image is its
    class's prototype plus standard normal noise."""
    g = torch.Generator().manual_seed(seed)
    protos = 0.5 * torch.randn(10, 3, 32, 32, generator=g)
    xs, ys, xt, yt = [], [], [], []
    for i in range(n_clients):
        classes = torch.tensor([(2 * i) % 10, (2 * i + 1) % 10])
        for n, xl, yl in ((per_client, xs, ys), (n_test, xt, yt)):
            y = classes[torch.randint(0, 2, (n,), generator=g)]
            xl.append((protos[y] + torch.randn(n, 3, 32, 32, generator=g)).to(dtype))
            yl.append(y)
    return neural.ClientData(tuple(xs), tuple(ys), tuple(xt), tuple(yt))


# --------------------------------------------------------------------------------------------
# PFLlib-style pieces


class PFLClient:
    """A client as PFLlib holds it: its own deepcopied model and its data as (x, y) pairs."""

    def __init__(self, model, train_pairs, test_pairs):
        self.model = copy.deepcopy(model)
        self.data, self.test = train_pairs, test_pairs
        self.train_samples = len(train_pairs)

    def loader(self, batches):
        """A DataLoader replaying the planned index batches (PFLlib: ``shuffle=True``)."""
        return DataLoader(self.data, batch_sampler=[b.tolist() for b in batches])


def set_parameters(source, target):
    for new, old in zip(source.parameters(), target.parameters()):
        old.data = new.data.clone()


def aggregate(modules, weights):
    """PFLlib's ``aggregate_parameters``: deepcopy the first upload, zero it, add the others."""
    out = copy.deepcopy(modules[0])
    for p in out.parameters():
        p.data.zero_()
    for w, m in zip(weights, modules):
        for sp, cp in zip(out.parameters(), m.parameters()):
            sp.data += cp.data.clone() * w
    return out


def sgd(params, cfg, lr=None):
    """torch.optim.SGD as the FedRep authors configure it: weight decay on weights, not biases."""
    params = list(params)
    groups = [{"params": [p for p in params if p.ndim > 1], "weight_decay": cfg.weight_decay},
              {"params": [p for p in params if p.ndim <= 1], "weight_decay": 0.0}]
    return torch.optim.SGD([g for g in groups if g["params"]], lr=cfg.lr if lr is None else lr,
                           momentum=cfg.momentum)


class _MomentumSGD(torch.optim.Optimizer):
    """PFLlib's fedoptimizer style (a loop over the parameters), with torch.optim.SGD's
    momentum and weight decay applied to ``grad + extra``."""

    def __init__(self, params, cfg):
        super().__init__(list(params), dict(lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay))

    @torch.no_grad()
    def _step(self, extras):
        for group in self.param_groups:
            for p, extra in zip(group["params"], extras):
                d_p = p.grad + extra
                if group["weight_decay"] and p.ndim > 1:  # weights only, as the authors' optimiser
                    d_p = d_p.add(p, alpha=group["weight_decay"])
                if group["momentum"]:
                    buf = self.state[p].get("momentum_buffer")
                    if buf is None:
                        buf = self.state[p]["momentum_buffer"] = d_p.clone()
                    else:
                        buf.mul_(group["momentum"]).add_(d_p)
                    d_p = buf
                p.add_(d_p, alpha=-group["lr"])


class PerturbedSGD(_MomentumSGD):
    """FedProx's / Ditto's step: ``grad + mu (p - anchor)``."""

    def __init__(self, params, cfg, mu):
        super().__init__(params, cfg)
        self.mu = mu

    def step(self, anchor):
        with torch.no_grad():
            self._step([(p - a) * self.mu for p, a in zip(self.param_groups[0]["params"], anchor)])


class ScaffoldSGD(_MomentumSGD):
    """SCAFFOLD's step: ``grad + c - c_i``."""

    def step(self, c, c_i):
        with torch.no_grad():
            self._step([a - b for a, b in zip(c, c_i)])


def train(model, loader, opt, step=None):
    model.train()
    for x, y in loader:
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step() if step is None else step()


def frozen(module_on, module_off):
    for p in module_on.parameters():
        p.requires_grad_(True)
    for p in module_off.parameters():
        p.requires_grad_(False)


class Planner:
    """The round's random draws, as ours makes them (clients and batches, seeded by cfg.seed)."""

    def __init__(self, sizes, phases, cfg):
        self.sizes, self.phases, self.cfg = sizes, phases, cfg
        self.gen = make_generator(cfg.seed)

    def round(self):
        return neural.plan_round(self.sizes, self.phases, self.cfg, self.gen)


def phase(steps, epochs=1):
    return neural.Phase(("all",), steps, epochs)  # the names do not enter the draws


def weights_of(clients, selected):
    total = sum(clients[i].train_samples for i in selected)
    return [clients[i].train_samples / total for i in selected]


def test_models(eval_models, clients):
    """Pooled test accuracy and each client's evaluated parameters (flattened)."""
    correct, total, flats = 0, 0, []
    for m, c in zip(eval_models, clients):
        m.eval()
        with torch.no_grad():
            for x, y in DataLoader(c.test, batch_size=1000):
                correct += int((m(x).argmax(1) == y).sum())
                total += len(y)
            flats.append(torch.cat([p.detach().flatten() for p in m.parameters()]))
    return correct / total, torch.stack(flats)


# --------------------------------------------------------------------------------------------
# The PFLlib-style reference of every method: (model, pairs, cfg, options) -> evaluated models


def shared_part(name, opts):
    """The parameters of a model that method ``name`` shares with ``opts`` (its ``shared_names``),
    as one module in the model's order, holding the model's own tensors (so that sending and
    aggregating act on them)."""
    def part(m):
        names = set(algorithms.get(name).shared_names(m, opts))
        return torch.nn.ParameterList([p for n, p in m.named_parameters() if n in names])
    return part


def ref_fedavg_like(model, pairs, cfg, kind="fedavg", opts=None):
    """FedAvg, FedProx, Local only, FedPer, LG-FedAvg (one joint phase, different sharing;
    LG-FedAvg's: the layers the method shares with ``opts``)."""
    clients = [PFLClient(model, *p) for p in pairs]
    server = copy.deepcopy(model)
    plans = Planner([c.train_samples for c in clients], [phase(cfg.local_steps)], cfg)
    shared = {"fedavg": lambda m: m, "fedprox": lambda m: m, "fedper": lambda m: m.body,
              "lg_fedavg": shared_part("LG-FedAvg", opts), "local_only": None}[kind]
    for _ in range(cfg.rounds):
        plan = plans.round()
        if shared is not None:
            for i in plan.clients:
                set_parameters(shared(server), shared(clients[i].model))
        for i in plan.clients:
            c = clients[i]
            if kind == "fedprox":
                anchor = [p.data.clone() for p in c.model.parameters()]
                opt = PerturbedSGD(c.model.parameters(), cfg, opts.mu)
                train(c.model, c.loader(plan.batches[i][0]), opt, lambda: opt.step(anchor))
            else:
                train(c.model, c.loader(plan.batches[i][0]), sgd(c.model.parameters(), cfg))
        if shared is not None:
            agg = aggregate([shared(clients[i].model) for i in plan.clients], weights_of(clients, plan.clients))
            set_parameters(agg, shared(server))
    if shared is not None and kind not in ("fedavg", "fedprox"):
        for c in clients:
            set_parameters(shared(server), shared(c.model))
    return [server] * len(clients) if kind in ("fedavg", "fedprox") else [c.model for c in clients], clients


def ref_scaffold(model, pairs, cfg, opts):
    clients = [PFLClient(model, *p) for p in pairs]
    for c in clients:
        c.c = [torch.zeros_like(p) for p in c.model.parameters()]
    server = copy.deepcopy(model)
    global_c = [torch.zeros_like(p) for p in server.parameters()]
    plans = Planner([c.train_samples for c in clients], [phase(cfg.local_steps)], cfg)
    n_clients = len(clients)
    for _ in range(cfg.rounds):
        plan = plans.round()
        for i in plan.clients:  # send_models: the model and c
            set_parameters(server, clients[i].model)
        deltas = []
        for i in plan.clients:
            c = clients[i]
            opt = ScaffoldSGD(c.model.parameters(), cfg)
            batches = plan.batches[i][0]
            train(c.model, c.loader(batches), opt, lambda: opt.step(global_c, c.c))
            K = len(batches)
            with torch.no_grad():
                new_c = [ci - gc + (x - y) / (K * cfg.lr)
                         for ci, gc, x, y in zip(c.c, global_c, server.parameters(), c.model.parameters())]
                dy = [y - x for x, y in zip(server.parameters(), c.model.parameters())]
                dc = [a - b for a, b in zip(new_c, c.c)]
            c.c = new_c
            deltas.append((dy, dc))
        new_server, new_c = copy.deepcopy(server), copy.deepcopy(global_c)  # aggregate_parameters
        m = len(plan.clients)
        for w, (dy, dc) in zip(weights_of(clients, plan.clients), deltas):
            for sp, d in zip(new_server.parameters(), dy):
                sp.data += d.clone() * w * opts.global_lr
            for sc, d in zip(new_c, dc):
                sc.data += d.clone() * w * m / n_clients
        server, global_c = new_server, new_c
    return [server] * len(clients), clients


def ref_fed_mtl(model, pairs, cfg, opts):
    clients = [PFLClient(model, *p) for p in pairs]
    plans = Planner([c.train_samples for c in clients], [phase(cfg.local_steps)], cfg)
    d = sum(p.numel() for p in model.parameters())
    lam = 10.0 ** -(math.floor(math.log10(d)) + 2)
    for _ in range(cfg.rounds):
        plan = plans.round()
        m = len(plan.clients)
        W_glob = torch.zeros(d, m, dtype=next(model.parameters()).dtype)  # the server's aggregate_parameters
        for idx, i in enumerate(plan.clients):
            W_glob[:, idx] = torch.cat([p.data.flatten() for p in clients[i].model.parameters()])
        omega = 1 - 1 / m  # sqrt of the authors' constant Omega entry (1 - 1/m)^2
        for idx, i in enumerate(plan.clients):
            c = clients[i]
            opt = sgd(c.model.parameters(), cfg)
            c.model.train()
            for x, y in c.loader(plan.batches[i][0]):
                loss = F.cross_entropy(c.model(x), y)
                W = W_glob.clone()
                W[:, idx] = torch.cat([p.flatten() for p in c.model.parameters()])
                loss = loss + lam * (W.norm() ** 2 + torch.sum(torch.sum(W * omega, 1) ** 2))
                opt.zero_grad()
                loss.backward()
                opt.step()
    return [c.model for c in clients], clients


def ref_per_fedavg(model, pairs, cfg, opts):
    clients = [PFLClient(model, *p) for p in pairs]
    server = copy.deepcopy(model)
    plans = Planner([c.train_samples for c in clients], [phase(2 * cfg.local_steps)], cfg)
    for _ in range(cfg.rounds):
        plan = plans.round()
        for i in plan.clients:
            set_parameters(server, clients[i].model)
        for i in plan.clients:
            c = clients[i]
            b = plan.batches[i][0]
            pairs_ = [torch.cat([b[k], b[k + 1]]) for k in range(0, len(b) - 1, 2)]
            half = len(b[0])
            opt = sgd(c.model.parameters(), cfg)
            params = list(c.model.parameters())
            c.model.train()
            for X, Y in c.loader(pairs_):
                temp = [p.data.clone() for p in params]
                opt.zero_grad()
                F.cross_entropy(c.model(X[:half]), Y[:half]).backward()
                with torch.no_grad():  # PFLlib's PerAvgOptimizer.step(): plain SGD, step alpha
                    for p in params:
                        p.add_(p.grad, alpha=-opts.alpha)
                opt.zero_grad()
                F.cross_entropy(c.model(X[half:]), Y[half:]).backward()
                for p, t in zip(params, temp):
                    p.data = t.clone()
                opt.step()
        agg = aggregate([clients[i].model for i in plan.clients], weights_of(clients, plan.clients))
        set_parameters(agg, server)
    adapted = []
    for c in clients:  # one full-batch gradient step from the server's model
        set_parameters(server, c.model)
        c.model.zero_grad()
        for x, y in DataLoader(c.data, batch_size=len(c.data)):
            F.cross_entropy(c.model(x), y).backward()
        with torch.no_grad():
            for p in c.model.parameters():
                p.add_(p.grad, alpha=-opts.alpha)
        adapted.append(c.model)
    return adapted, clients


def ref_l2gd(model, pairs, cfg, opts):
    clients = [PFLClient(model, *p) for p in pairs]
    xbar = copy.deepcopy(model)
    plans = Planner([c.train_samples for c in clients], [phase(cfg.local_steps)], cfg)
    theta = cfg.lr * opts.lam / opts.p
    for _ in range(cfg.rounds):
        plan = plans.round()
        longest = max(len(plan.batches[i][0]) for i in plan.clients)
        coins = (torch.rand(longest, generator=plans.gen) < opts.p).tolist()
        for i in plan.clients:
            c = clients[i]
            batches = plan.batches[i][0]
            opt = sgd(c.model.parameters(), cfg, lr=cfg.lr / (1 - opts.p))
            local = iter(c.loader([b for b, agg in zip(batches, coins) if not agg]))
            c.model.train()
            for _, agg in zip(batches, coins):
                if agg:
                    with torch.no_grad():
                        for p, xb in zip(c.model.parameters(), xbar.parameters()):
                            p.sub_(theta * (p - xb))
                else:
                    x, y = next(local)
                    loss = F.cross_entropy(c.model(x), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
        agg = aggregate([clients[i].model for i in plan.clients], weights_of(clients, plan.clients))
        set_parameters(agg, xbar)
    return [c.model for c in clients], clients


def ref_apfl(model, pairs, cfg, opts):
    clients = [PFLClient(model, *p) for p in pairs]
    dtype = next(model.parameters()).dtype
    for c in clients:
        c.model_per, c.model_mix = copy.deepcopy(model), copy.deepcopy(model)
        c.alpha = torch.tensor(opts.alpha, dtype=dtype)
    server = copy.deepcopy(model)
    plans = Planner([c.train_samples for c in clients], [phase(cfg.local_steps)], cfg)
    alpha_lr = cfg.lr if opts.alpha_lr is None else opts.alpha_lr

    def mix_into(target, alpha, v, w):
        for pm, pv, pw in zip(target.parameters(), v.parameters(), w.parameters()):
            pm.data = alpha * pv.data + (1 - alpha) * pw.data

    for _ in range(cfg.rounds):
        plan = plans.round()
        for i in plan.clients:
            set_parameters(server, clients[i].model)
        for i in plan.clients:
            c = clients[i]
            opt, opt_per = sgd(c.model.parameters(), cfg), sgd(c.model_per.parameters(), cfg)
            w_params, v_params, m_params = (list(m.parameters()) for m in (c.model, c.model_per, c.model_mix))
            c.model.train()
            c.model_mix.train()
            for x, y in c.loader(plan.batches[i][0]):
                opt.zero_grad()
                F.cross_entropy(c.model(x), y).backward()
                mix_into(c.model_mix, c.alpha, c.model_per, c.model)
                c.model_mix.zero_grad()
                F.cross_entropy(c.model_mix(x), y).backward()
                with torch.no_grad():
                    g_alpha = sum(torch.sum((pv - pw) * pm.grad) for pv, pw, pm in zip(v_params, w_params, m_params))
                    for pv, pm in zip(v_params, m_params):
                        pv.grad = c.alpha * pm.grad
                opt.step()
                opt_per.step()
                if opts.adapt_alpha:
                    c.alpha = torch.clamp(c.alpha - alpha_lr * g_alpha, 0.0, 1.0)
        agg = aggregate([clients[i].model for i in plan.clients], weights_of(clients, plan.clients))
        set_parameters(agg, server)
    for c in clients:  # evaluated with alpha_i v_i + (1 - alpha_i) w
        mix_into(c.model_mix, c.alpha, c.model_per, server)
    return [c.model_mix for c in clients], clients


def ref_ditto(model, pairs, cfg, opts):
    clients = [PFLClient(model, *p) for p in pairs]
    for c in clients:
        c.model_per = copy.deepcopy(model)
    server = copy.deepcopy(model)
    plans = Planner([c.train_samples for c in clients], [phase(cfg.local_steps), phase(cfg.local_steps)], cfg)
    for _ in range(cfg.rounds):
        plan = plans.round()
        for i in plan.clients:
            set_parameters(server, clients[i].model)
        for i in plan.clients:
            c = clients[i]
            anchor = list(c.model.parameters())  # ptrain runs first: the sent model
            opt_per = PerturbedSGD(c.model_per.parameters(), cfg, opts.lam)
            train(c.model_per, c.loader(plan.batches[i][1]), opt_per, lambda: opt_per.step(anchor))
            train(c.model, c.loader(plan.batches[i][0]), sgd(c.model.parameters(), cfg))
        agg = aggregate([clients[i].model for i in plan.clients], weights_of(clients, plan.clients))
        set_parameters(agg, server)
    return [c.model_per for c in clients], clients


def ref_fedrep(model, pairs, cfg, opts):
    clients = [PFLClient(model, *p) for p in pairs]
    server = copy.deepcopy(model)
    plans = Planner([c.train_samples for c in clients], [phase(cfg.head_steps, cfg.head_epochs),
                                                          phase(cfg.local_steps)], cfg)
    for _ in range(cfg.rounds):
        plan = plans.round()
        for i in plan.clients:
            set_parameters(server.body, clients[i].model.body)
        for i in plan.clients:
            c = clients[i]
            frozen(c.model.head, c.model.body)
            train(c.model, c.loader(plan.batches[i][0]), sgd(c.model.head.parameters(), cfg))
            frozen(c.model.body, c.model.head)
            train(c.model, c.loader(plan.batches[i][1]), sgd(c.model.body.parameters(), cfg))
            frozen(c.model, torch.nn.Module())
        agg = aggregate([clients[i].model.body for i in plan.clients], weights_of(clients, plan.clients))
        set_parameters(agg, server.body)
    for c in clients:
        set_parameters(server.body, c.model.body)
    return [c.model for c in clients], clients


def ref_finetune(model, server, pairs, cfg, epochs):
    """+FT's last stage: every client receives the server's final model and trains its head
    (body frozen) for ``epochs`` epochs on the batches ours draws."""
    clients = [PFLClient(model, *p) for p in pairs]
    ft = neural.TrainConfig(rounds=1, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay,
                            batch_size=cfg.batch_size, local_epochs=epochs, last_rounds=1,
                            seed=derive_seed(cfg.seed, 5))
    plan = Planner([c.train_samples for c in clients], [phase(None, epochs)], ft).round()
    for i in plan.clients:
        c = clients[i]
        set_parameters(server, c.model)
        frozen(c.model.head, c.model.body)
        train(c.model, c.loader(plan.batches[i][0]), sgd(c.model.head.parameters(), cfg))
    return [c.model for c in clients], clients


def _with_kind(kind):
    def run(model, pairs, cfg, opts):
        return ref_fedavg_like(model, pairs, cfg, kind, opts)
    return run


#: The PFLlib-style loop of each base method, by registry name (+FT methods: :func:`reference`).
REFERENCES = {
    "Local only": _with_kind("local_only"),
    "FedAvg": _with_kind("fedavg"),
    "FedProx": _with_kind("fedprox"),
    "SCAFFOLD": ref_scaffold,
    "Fed-MTL": ref_fed_mtl,
    "Per-FedAvg": ref_per_fedavg,
    "LG-FedAvg": _with_kind("lg_fedavg"),
    "L2GD": ref_l2gd,
    "APFL": ref_apfl,
    "Ditto": ref_ditto,
    "FedPer": _with_kind("fedper"),
    "FedRep": ref_fedrep,
}


def reference(name: str):
    """The reference loop of a registered method: ``ref_finetune`` (the fine-tuning stage alone,
    see finetune_runs) for a +FT method, else its entry of :data:`REFERENCES`; None when the
    method (e.g. one a reader registered) has no reference written."""
    from replearn.neural.algorithms.fine_tuning import FineTuned
    return ref_finetune if isinstance(algorithms.get(name), FineTuned) else REFERENCES.get(name)


# --------------------------------------------------------------------------------------------
# Measurement


def options_for(name: str, ft_epochs: int):
    alg = algorithms.get(name)
    if name.endswith("+FT"):
        return alg.Options(epochs=ft_epochs, base=alg.base.Options())
    if name == "Local only":  # the reference loop trains the sampled clients each round
        return alg.Options(epochs=None)
    return alg.Options()


def flat_states(result, names, n_clients):
    return torch.stack([torch.cat([result.client_state(i)[n].flatten() for n in names]) for i in range(n_clients)])


def run_ours(name, model, clients, cfg, opts):
    res = algorithms.run(name, model, clients, cfg, opts, workers=1)
    return res.final.average, flat_states(res, [n for n, _ in model.named_parameters()], clients.n_clients)


def run_reference(name, model, pairs, cfg, opts):
    evaluated, clients = reference(name)(model, pairs, cfg, opts)
    return test_models(evaluated, clients)


def finetune_runs(name, model, clients, pairs, cfg, opts):
    """+FT rows: the fine-tuning alone, from the final state of ours' base run (the base's rounds
    are its own row). Ours: what :class:`replearn.neural.algorithms.fine_tuning.FineTuned` runs after
    the base (:meth:`~replearn.neural.algorithms.fine_tuning.FineTuned.fine_tune`: the registry's
    "Fine-tuning", seed ``derive_seed(cfg.seed, 5)``)."""
    base = algorithms.get(name).base
    base_run = base.run(model, clients, cfg, opts.base, workers=1)
    state = base_run.state
    server = copy.deepcopy(model)
    with torch.no_grad():
        for n, p in server.named_parameters():
            p.copy_(state[n])
    names = [n for n, _ in model.named_parameters()]

    def ours():
        ft = algorithms.get(name).fine_tune(replace(base_run, state=state), model, clients, opts)
        return ft.final.average, flat_states(ft, names, clients.n_clients)

    def reference():
        return test_models(*ref_finetune(model, server, pairs, cfg, opts.epochs))

    return ours, reference


def timed(fn):
    """(wall seconds, CPU seconds of this process, fn's result)."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def step_kernels(model, dtype, batch, reps=10, repeats=3):
    """Median ms of one forward + backward of a batch on the plain model (what the PFLlib-style
    loops train) and on ours' working copy (:func:`replearn.neural.fast_copy`: the layout of
    :func:`replearn.neural.work_layout`, ReLU after max-pooling), the images in each one's layout."""
    x = torch.randn(batch, 3, 32, 32, dtype=dtype)
    y = torch.arange(batch) % 10
    nets = {"plain": (model, x), "ours": (neural.fast_copy(model), x.contiguous(memory_format=neural.work_layout(dtype)))}
    out = {k: [] for k in nets}
    for r in range(repeats + 1):
        for k, (net, xb) in nets.items():
            start = time.process_time()
            for _ in range(reps):
                net.zero_grad(set_to_none=True)
                F.cross_entropy(net(xb), y).backward()
            if r:
                out[k].append(1e3 * (time.process_time() - start) / reps)
    model.zero_grad(set_to_none=True)
    return {k: statistics.median(v) for k, v in out.items()}


def bench_dtype(dtype, args, methods):
    model = models.make_model("fedrep_cnn", 10, seed=0, device="cpu", dtype=dtype, widths=FEDREP_WIDTHS["narrow"])
    clients = synthetic_clients(args.clients, args.per_client, args.test_per_client, dtype)
    pairs = [(list(zip(x, y)), list(zip(xt, yt)))
             for x, y, xt, yt in zip(clients.x_train, clients.y_train, clients.x_test, clients.y_test)]
    cfg = replace(BOOK, rounds=args.rounds, participation=1.0, local_steps=args.steps, head_steps=args.head_steps,
                  eval_every=args.rounds, last_rounds=1, seed=0)
    print(f"\n{str(dtype).removeprefix('torch.')}: FedRep CNN (narrow), {args.clients} clients x {args.per_client} "
          f"images (2 classes each, synthetic), all clients every round; lr {cfg.lr}, momentum {cfg.momentum}, "
          f"batch {cfg.batch_size}, tau = {cfg.local_steps} local steps, FedRep head {cfg.head_steps} steps; "
          f"{args.rounds} round(s) per run, {args.repeats} interleaved repeats; +FT rows: the fine-tuning alone "
          f"({args.ft_epochs} head epochs), seconds per fine-tuning")
    opts = {m: options_for(m, args.ft_epochs) for m in methods}
    runs = {}
    for m in methods:
        if m.endswith("+FT"):
            ours, ref = finetune_runs(m, model, clients, pairs, cfg, opts[m])
        else:
            ours = (lambda m=m: run_ours(m, model, clients, cfg, opts[m]))
            ref = (lambda m=m: run_reference(m, model, pairs, cfg, opts[m]))
        runs[m] = {"ours": ours, "pfllib": ref}
    warm = replace(cfg, rounds=1)  # first-call costs (kernels, DataLoader) out of the timings
    run_ours("FedAvg", model, clients.subset([0, 1]), warm, None)
    run_reference("FedAvg", model, pairs[:2], warm, None)
    times = {m: {"ours": [], "pfllib": []} for m in methods}
    walls = {m: {"ours": [], "pfllib": []} for m in methods}
    outputs = {}
    for r in range(args.repeats):
        for m in methods:
            per = 1 if m.endswith("+FT") else args.rounds
            order = ("ours", "pfllib") if r % 2 == 0 else ("pfllib", "ours")
            for k in order:
                wall, cpu, out = timed(runs[m][k])
                times[m][k].append(cpu / per)
                walls[m][k].append(wall / per)
                outputs.setdefault((m, k), out)  # every repeat computes the same (deterministic)
    kernels = step_kernels(model, dtype, cfg.batch_size)
    tol = TOLERANCE[dtype]
    print(f"  {'method':<12} {'ours':>7} {'pfllib':>7} {'ratio':>6} {'[range]':>13}  target  {'wall':>5}  "
          f"sanity: rel. diff of evaluated params (tol {tol:.0e}), accuracy ours / pfllib; options")
    summary, differ = {}, []
    for m in methods:
        o, p = statistics.median(times[m]["ours"]), statistics.median(times[m]["pfllib"])
        ratios = [b / a for a, b in zip(times[m]["ours"], times[m]["pfllib"])]
        ratio = statistics.median(ratios)
        wall = statistics.median([b / a for a, b in zip(walls[m]["ours"], walls[m]["pfllib"])])
        (acc_o, flat_o), (acc_r, flat_r) = outputs[(m, "ours")], outputs[(m, "pfllib")]
        rel = float((flat_o - flat_r).norm() / flat_r.norm())
        ok = rel < tol and abs(acc_o - acc_r) <= 0.02
        if ok:
            summary[m] = ratio
        else:  # the two loops computed different things: their times compare nothing
            differ.append(m)
        target = "FAILED" if not ok else "MET   " if ratio >= TARGET else "MISSED"
        print(f"  {m:<12} {o:7.3f} {p:7.3f} {ratio:6.2f} [{min(ratios):4.2f}, {max(ratios):4.2f}]  "
              f"{target}  {wall:5.2f}  {'agree' if ok else 'DIFFER'} {rel:.1e}, "
              f"{acc_o:.3f} / {acc_r:.3f}; {opts[m]}")
    missed = [m for m, r in summary.items() if r < TARGET]
    print(f"  (ours, pfllib: median CPU seconds per round of this process; ratio: pfllib / ours, median of the "
          f"repeats, [min, max]; wall: the same ratio of wall-clock times)")
    print(f"  target ratio >= {TARGET}: {len(summary) - len(missed)}/{len(methods)} met"
          + (f"; missed: {', '.join(missed)}" if missed else "")
          + (f"; sanity check failed (not timed): {', '.join(differ)}" if differ else ""))
    print(f"  one forward + backward of {cfg.batch_size} images: plain model {kernels['plain']:.1f} ms, ours' working "
          f"copy {kernels['ours']:.1f} ms ({kernels['plain'] / kernels['ours']:.2f}x)")
    return summary, differ


def main(argv: list[str] | None = None) -> int:
    """Run the bench; 1 (after printing which) if a sanity check failed in any dtype, else 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="rounds per run R")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved timed repeats (median reported)")
    parser.add_argument("--dtypes", default="float32,float64")
    parser.add_argument("--methods", default=None,
                        help="comma-separated registry names (default: every registered method with a reference loop)")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--per-client", type=int, default=100, help="training images per client")
    parser.add_argument("--test-per-client", type=int, default=25)
    parser.add_argument("--steps", type=int, default=5, help="local steps tau per round (the book's: 10)")
    parser.add_argument("--head-steps", type=int, default=5, help="FedRep's head steps per round (the book's: 10)")
    parser.add_argument("--ft-epochs", type=int, default=2, help="+FT head epochs (the paper's: 10)")
    args = parser.parse_args(argv)
    known = [m for m in algorithms.names() if reference(m) is not None]
    methods = known if args.methods is None else [m.strip() for m in args.methods.split(",")]
    for m in methods:
        if m not in known:
            parser.error(f"no reference loop for {m!r}; choose from {', '.join(known)}")
    missing = [m for m in algorithms.names() if m not in known]
    if missing and args.methods is None:
        print(f"registered without a reference loop (not measured): {', '.join(missing)}")
    torch.set_num_threads(1)
    print(f"Table 1 methods, CPU, one torch thread (ours: workers=1), torch {torch.__version__}")
    start = time.perf_counter()
    differ = [f"{m} ({dt})" for dt in args.dtypes.split(",")
              for m in bench_dtype(getattr(torch, dt), args, methods)[1]]
    print(f"\n(bench time {time.perf_counter() - start:.0f} s)")
    if differ:
        print(f"sanity check failed: {', '.join(differ)}: ours and the reference loop compute different "
              f"iterates, so the bench measures nothing for them; fix the loop that is wrong")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
