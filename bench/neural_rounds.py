"""FedAvg rounds on CIFAR CNNs: replearn.neural vs a PFLlib-style loop and vs the previous engine.

Three implementations of the same FedAvg (every client each round, ``tau`` local SGD steps of
``batch`` samples without replacement, the server's n_i-weighted average), run in one process
on the same model, initial weights and images:

- ``pfllib``: what PFLlib's FedAvg does (Zhang et al., PFLlib, ``clientavg.py``/``clientbase.py``
  and ``serveravg.py``/``serverbase.py``, read, not copied): every client holds its own model
  (``copy.deepcopy`` of the global one at start) and its own ``torch.optim.SGD``; each round the
  server writes the global parameters into every client (``param.data = global.data.clone()``),
  each client iterates ``DataLoader(list of (x, y) pairs, batch, shuffle=True,
  drop_last=True)`` (epochs until tau steps), and the server aggregates by
  ``deepcopy(first client model)``, zeroing it and adding ``w_i * param.clone()``.
- ``previous``: a frozen copy of the engine's round loop before the speed work (one working
  model, index batches on tensors, foreach SGD), kept here, not in the library.
- ``ours``: the registry's FedAvg on the engine's loop, :func:`replearn.neural.run`.

Three settings, 10 clients x 200 images, tau = 10 local steps, momentum 0.5:

- ``book``: the book's CPU default, read from :class:`replearn.experiments.ch05_fedrep.cifar_federation.FederationSettings`
  (the FedRep CNN with the narrow 16/32-channel body, batch 10); target >= 2x ``pfllib``;
- ``narrow50``: the same network at batch 50 (the larger batch the issue proposed); target >= 2x;
- ``cifar10``: the authors' FedRep CNN (64/64 channels) with batch 10; targets >= 1.2x
  ``pfllib`` and >= 70% of the GEMM rate.

Each runs in float32 and float64 (the dtype follows the model; the book's CPU runs use float64).
All three implementations get the same torch thread count (``--threads``, default torch's):
``pfllib`` and ``previous`` use it inside each operation, ``ours`` trains that many clients at
once, one thread each (:func:`replearn.neural.run`'s ``workers``). Runs are interleaved and
repeated; the script prints medians and [min, max] of samples/s, the training FLOP/s (forward and
backward convolutions and matrix products, ``torch.utils.flop_counter``) as % of a float GEMM
(1024^3) of the same dtype on the same threads, timed in the same process between the runs, and
the ratios. A last line gives the ceiling no engine can pass: the forward and backward kernels
alone on one fixed batch and one thread, times the thread count (``kernels``). Then the operator
launches and host syncs of one round (:class:`replearn.book.scales.OperatorCount`) on the per-client
path and on the batched path (clients stacked, ``torch.func.vmap``), what bounds a GPU round, for
FedAvg and for every method with its own client update (:func:`counted`).

Run: ``python bench/neural_rounds.py`` (``--settings book --dtypes float64`` for one case;
``--counts-only`` for the operator counts alone, which need no quiet machine).
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
from torch.utils.flop_counter import FlopCounterMode

from replearn.experiments.ch05_fedrep import cifar_federation as personalisation
from replearn.neural import algorithms, models
from replearn import neural
from replearn.book import scales
from replearn.neural.specs import FEDREP_WIDTHS

BOOK = personalisation.FederationSettings()
#: setting -> (FedRep CNN widths, batch size, target x the PFLlib-style loop)
SETTINGS = {"book": (BOOK.variant, BOOK.train.batch_size, 2.0), "narrow50": ("narrow", 50, 2.0),
            "cifar10": ("cifar10", 10, 1.2)}
GEMM_TARGET = 0.70  # share of the GEMM rate, FedRep CNN at batch 10


# --------------------------------------------------------------------------------------------
# PFLlib-style FedAvg


class PFLClient:
    def __init__(self, model, data, *, lr, momentum, batch_size):
        self.model = copy.deepcopy(model)
        self.data = data  # list of (x, y) pairs, as PFLlib's read_client_data returns
        self.train_samples = len(data)
        self.batch_size = batch_size
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr, momentum=momentum)

    def set_parameters(self, model):
        for new, old in zip(model.parameters(), self.model.parameters()):
            old.data = new.data.clone()

    def train(self, tau):
        self.model.train()
        steps = 0
        while steps < tau:
            for x, y in DataLoader(self.data, self.batch_size, drop_last=True, shuffle=True):
                loss = F.cross_entropy(self.model(x), y)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()
                steps += 1
                if steps == tau:
                    break


def pfllib_fedavg(global_model, clients, *, rounds, tau):
    for _ in range(rounds):
        for c in clients:  # send_models
            c.set_parameters(global_model)
        for c in clients:
            c.train(tau)
        total = sum(c.train_samples for c in clients)  # receive_models
        weights = [c.train_samples / total for c in clients]
        global_model = copy.deepcopy(clients[0].model)  # aggregate_parameters
        for p in global_model.parameters():
            p.data.zero_()
        for w, c in zip(weights, clients):
            for sp, cp in zip(global_model.parameters(), c.model.parameters()):
                sp.data += cp.data.clone() * w
    return global_model


# --------------------------------------------------------------------------------------------
# The previous engine's FedAvg (frozen copy of its round loop, sequential clients)


def previous_fedavg(model, clients: neural.ClientData, cfg: neural.TrainConfig):
    names = [n for n, _ in model.named_parameters()]
    state = {n: p.detach().clone() for n, p in model.named_parameters()}
    work = copy.deepcopy(model)
    wparams = dict(work.named_parameters())
    sizes = clients.train_sizes
    gen = torch.Generator().manual_seed(cfg.seed)
    M = clients.n_clients
    for _ in range(cfg.rounds):
        plans = {i: neural.plan_batches(int(sizes[i]), cfg.batch_size, steps=cfg.local_steps, epochs=1,
                                        generator=gen) for i in range(M)}
        acc = {n: torch.zeros_like(state[n]) for n in names}
        for i in range(M):
            x, y = clients.x_train[i], clients.y_train[i]
            with torch.no_grad():
                for n, p in wparams.items():
                    p.copy_(state[n])
                    p.requires_grad_(True)
            tp = list(wparams.values())
            buf = None
            loss_sum = torch.zeros(())
            for idx in plans[i]:
                for p in tp:
                    p.grad = None
                loss = F.cross_entropy(work(x[idx]), y[idx])
                loss.backward()
                with torch.no_grad():
                    loss_sum += loss
                    grads = [p.grad for p in tp]
                    if cfg.momentum:
                        if buf is None:
                            buf = [g.clone() for g in grads]
                        else:
                            torch._foreach_mul_(buf, cfg.momentum)
                            torch._foreach_add_(buf, grads)
                        grads = buf
                    torch._foreach_add_(tp, grads, alpha=-cfg.lr)
            for n in names:
                acc[n] += float(sizes[i]) * wparams[n].detach()
            float(loss_sum)
        state = {n: acc[n] / float(sizes.sum()) for n in names}
        neural.evaluate(model, clients, state)
    return state


# --------------------------------------------------------------------------------------------
# Measurement


def load_images(n: int, seed: int):
    """``n`` CIFAR-10 training images (uint8) and labels, or random ones when the subset is
    missing; returns (x, y, description)."""
    try:
        from replearn.neural import data
        cifar = data.load_cifar("cifar10", root=os.environ.get("REPLEARN_DATA") or
                                os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data"))
        return cifar.x_train[:n], cifar.y_train[:n], f"real images: {cifar.describe()}"
    except (ImportError, FileNotFoundError) as err:
        g = torch.Generator().manual_seed(seed)
        x = torch.randint(0, 256, (n, 3, 32, 32), generator=g, dtype=torch.uint8)
        return x, torch.randint(0, 10, (n,), generator=g), f"RANDOM images (no CIFAR-10 subset: {err})"


def train_flops_per_sample(model, dtype, batch) -> float:
    x = torch.randn(batch, 3, 32, 32, dtype=dtype)
    y = torch.zeros(batch, dtype=torch.int64)
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(model(x), y).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops() / batch


def gemm_rate(dtype, n: int = 1024, reps: int = 5) -> float:
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * n**3 * reps / (time.perf_counter() - start)


def kernel_rate(model, x, y, batch: int, reps: int = 30) -> float:
    """The ceiling for any engine, in samples/s: the forward, loss and backward kernels alone (no
    optimizer, no batch gathering, no server) of ``neural.fast_copy(model)`` on one fixed batch,
    timed on one thread and multiplied by the thread count (perfect scaling over clients)."""
    threads = torch.get_num_threads()
    work = neural.fast_copy(model)
    xb, yb = x[:batch].contiguous(memory_format=neural.work_layout(x.dtype)), y[:batch]

    def steps(k):
        for _ in range(k):
            work.zero_grad(set_to_none=True)
            F.cross_entropy(work(xb), yb).backward()

    torch.set_num_threads(1)
    try:
        steps(3)
        return threads * reps * batch / timed(lambda: steps(reps))
    finally:
        torch.set_num_threads(threads)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def counted() -> tuple[str, ...]:
    """Methods whose operator counts the bench prints, from the registry: FedAvg (the default
    client update, which every declared method shares) and every method with its own client
    update (``FunctionalSGD`` under vmap when batched); wrappers (+FT) are their stages'."""
    from replearn.neural.algorithms.base import Algorithm
    from replearn.neural.algorithms.fine_tuning import FineTuned
    own = tuple(n for n in algorithms.names() if not isinstance(algorithms.get(n), FineTuned)
                and type(algorithms.get(n)).client_update is not Algorithm.client_update)
    return ("FedAvg",) + own


def operator_counts(model, clients: neural.ClientData, cfg: neural.TrainConfig, methods=None) -> dict:
    """Operators dispatched in one round (with its evaluation) of each method by the per-client
    path (one client after another) and by the batched path (the round's clients stacked and
    trained with ``torch.func.vmap``, ``vmap_clients = M``): on a GPU each launch costs a few
    microseconds from Python and each sync stalls the host, so these counts bound a GPU round."""
    one = replace(cfg, rounds=1, eval_every=1)
    out = {}
    for method in methods or counted():
        for label, c in (("per-client", one), ("batched", replace(one, vmap_clients=clients.n_clients))):
            with scales.OperatorCount() as count:
                algorithms.run(method, model, clients, c, workers=1)
            out[(method, label)] = count
    return out


def setting_inputs(name, dtype, x, y, args):
    """The model, clients and configuration of a setting."""
    variant, batch, _ = SETTINGS[name]
    M, n = args.clients, args.per_client
    model = models.make_model("fedrep_cnn", 10, seed=0, device="cpu", widths=FEDREP_WIDTHS[variant]).to(dtype)
    parts = list(torch.arange(M * n).split(n))
    clients = neural.ClientData.from_partition(x, y, parts, x, y, [p[:10] for p in parts], dataset="cifar10",
                                               device="cpu", dtype=dtype)
    cfg = neural.TrainConfig(rounds=args.rounds, lr=0.01, momentum=args.momentum, batch_size=batch,
                             local_steps=args.steps, eval_every=args.rounds, last_rounds=1)
    return model, clients, cfg


def print_counts(model, clients, cfg) -> None:
    counts = operator_counts(model, clients, cfg)
    print(f"  one round with its evaluation ({clients.n_clients} clients): operator launches and host syncs, "
          f"per-client -> batched")
    for method in counted():
        a, b = counts[(method, "per-client")], counts[(method, "batched")]
        print(f"    {method:<11} {a.launches:>8,} -> {b.launches:>7,} launches ({a.launches / b.launches:4.1f}x fewer), "
              f"{a.syncs:>5,} -> {b.syncs:>4,} syncs")


def bench_setting(name, dtype, x, y, args):
    variant, batch, target = SETTINGS[name]
    M, tau, rounds = args.clients, args.steps, args.rounds
    model, clients, cfg = setting_inputs(name, dtype, x, y, args)
    if args.counts_only:
        print(f"\n{name}: FedRep CNN ({variant}), batch {batch}, {str(dtype).removeprefix('torch.')}; "
              f"{M} clients x {args.per_client} images, tau = {tau}")
        print_counts(model, clients, cfg)
        return
    pfl_clients = [PFLClient(model, list(zip(clients.x_train[i], clients.y_train[i])), lr=0.01,
                             momentum=args.momentum, batch_size=batch) for i in range(M)]
    runs = {
        "pfllib": lambda: pfllib_fedavg(copy.deepcopy(model), pfl_clients, rounds=rounds, tau=tau),
        "previous": lambda: previous_fedavg(model, clients, cfg),
        "ours": lambda: neural.run(algorithms.get("FedAvg"), model, clients, cfg),
    }
    times = {k: [] for k in runs}
    gemms, ceilings = [], []
    for fn in runs.values():  # warm-up
        fn()
    torch.manual_seed(0)  # the DataLoader shuffles with the global RNG, as in PFLlib
    for _ in range(args.repeat):  # interleaved, so that load changes hit all alike
        for k, fn in runs.items():
            times[k].append(timed(fn))
        gemms.append(gemm_rate(dtype))
        ceilings.append(kernel_rate(model, clients.x_train[0], clients.y_train[0], batch))
    samples = M * rounds * tau * batch
    flops = train_flops_per_sample(model, dtype, batch)
    gemm = statistics.median(gemms)
    print(f"\n{name}: FedRep CNN ({variant}: {FEDREP_WIDTHS[variant][:2]} channels), batch {batch}, "
          f"{str(dtype).removeprefix('torch.')}; {M} clients x {n} images, tau = {tau}, {rounds} rounds, "
          f"{args.repeat} interleaved repeats")
    print(f"  training FLOPs per sample: {flops / 1e6:.1f} MFLOP; GEMM: median {gemm / 1e9:.1f} GFLOP/s "
          f"[{min(gemms) / 1e9:.1f}, {max(gemms) / 1e9:.1f}]")
    rates = {}
    for k, ts in times.items():
        rates[k] = [samples / t for t in ts]
        med = statistics.median(rates[k])
        print(f"  {k:<9} {med:8.0f} samples/s [{min(rates[k]):.0f}, {max(rates[k]):.0f}]  "
              f"{flops * med / 1e9:6.1f} GFLOP/s = {100 * flops * med / gemm:5.1f}% of GEMM")
    ceiling = statistics.median(ceilings)
    print(f"  {'kernels':<9} {ceiling:8.0f} samples/s [{min(ceilings):.0f}, {max(ceilings):.0f}]  "
          f"{flops * ceiling / 1e9:6.1f} GFLOP/s = {100 * flops * ceiling / gemm:5.1f}% of GEMM: the ceiling, "
          f"{ceiling / statistics.median(rates['pfllib']):.2f}x pfllib (forward + backward alone, one thread, "
          f"x {torch.get_num_threads()} threads)")
    ratio = {k: statistics.median([a / b for a, b in zip(rates["ours"], rates[k])]) for k in ("pfllib", "previous")}
    print(f"  ours / pfllib: {ratio['pfllib']:.2f}x (median of per-repeat ratios; target >= {target}x: "
          f"{'MET' if ratio['pfllib'] >= target else 'MISSED'}); ours / previous: {ratio['previous']:.2f}x")
    print_counts(model, clients, cfg)
    if name == "cifar10":
        share = flops * statistics.median(rates["ours"]) / gemm
        print(f"  ours at {100 * share:.0f}% of GEMM (target >= {100 * GEMM_TARGET:.0f}%: "
              f"{'MET' if share >= GEMM_TARGET else 'MISSED'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--per-client", type=int, default=200, help="training images per client")
    parser.add_argument("--steps", type=int, default=10, help="local SGD steps tau per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--momentum", type=float, default=0.5, help="SGD momentum (the book's: 0.5)")
    parser.add_argument("--repeat", type=int, default=5, help="interleaved timed repeats (median reported)")
    parser.add_argument("--dtypes", default="float32,float64")
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--counts-only", action="store_true",
                        help="only the operator launches and host syncs per round (no timing; any machine state)")
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    x, y, source = load_images(args.clients * args.per_client, seed=0)
    print(f"FedAvg rounds, CPU, torch threads = {torch.get_num_threads()}; data: {source}")
    for name in args.settings.split(","):
        if name not in SETTINGS:
            parser.error(f"unknown setting {name!r}; choose from {', '.join(SETTINGS)}")
        for dt in args.dtypes.split(","):
            bench_setting(name, getattr(torch, dt), x, y, args)


if __name__ == "__main__":
    main()
