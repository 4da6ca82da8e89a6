"""FedAvg rounds on a CIFAR CNN: replearn.neural vs a loop in the style of the authors' code.

The reference is written the way the FedRep/LG-FedAvg code trains (``LocalUpdate`` and the
server loop): for every client, ``copy.deepcopy`` of the global model, a new
``torch.optim.SGD``, a ``torch.utils.data.DataLoader(shuffle=True)`` over a ``Dataset`` whose
``__getitem__`` augments one image at a time (random crop with 4-pixel zero padding,
horizontal flip, normalisation), ``tau`` local steps, a ``deepcopy`` of the local state dict,
and a Python loop over state-dict keys for the average. Ours: :func:`replearn.neural.fedavg`
with the images as normalised tensors, batched augmentation and no copies of the model.

Both run in this process with the same model, initial weights, data, batch size, number of
local steps and augmentation; the script prints samples/s of each, the ratio (DESIGN.md
section 6 target: at least 3x on the CPU), and the achieved training FLOP/s (forward and
backward, counted by ``torch.utils.flop_counter.FlopCounterMode``: convolutions and matrix
products only) against a plain float32 GEMM on the same device.

Run: ``python bench/neural_rounds.py`` (CPU; on a GPU box pass ``--device cuda``).
"""

from __future__ import annotations

import argparse
import copy
import os
import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
from torch.utils.flop_counter import FlopCounterMode

from replearn import models, neural

TARGET = 3.0


class AugmentedImages(Dataset):
    """Per-sample augmentation in ``__getitem__``, like torchvision's RandomCrop(32, padding=4),
    RandomHorizontalFlip, ToTensor and Normalize in the authors' data pipeline."""

    def __init__(self, x_uint8: torch.Tensor, y: torch.Tensor, mean: torch.Tensor, std: torch.Tensor):
        self.x, self.y, self.mean, self.std = x_uint8, y, mean.view(3, 1, 1), std.view(3, 1, 1)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        img = F.pad(self.x[i].float() / 255.0, (4, 4, 4, 4))
        r, c = torch.randint(0, 9, (2,)).tolist()
        img = img[:, r:r + 32, c:c + 32]
        if torch.rand(1).item() < 0.5:
            img = img.flip(-1)
        return (img - self.mean) / self.std, self.y[i]


def reference_fedavg(global_model, datasets, *, rounds: int, tau: int, lr: float, momentum: float,
                     batch_size: int, device: torch.device):
    for _ in range(rounds):
        w_locals = []
        for ds in datasets:
            local = copy.deepcopy(global_model)
            opt = torch.optim.SGD(local.parameters(), lr=lr, momentum=momentum)
            steps = 0
            while steps < tau:
                for x, y in DataLoader(ds, batch_size=batch_size, shuffle=True):
                    x, y = x.to(device), y.to(device)
                    opt.zero_grad()
                    F.cross_entropy(local(x), y).backward()
                    opt.step()
                    steps += 1
                    if steps == tau:
                        break
            w_locals.append(copy.deepcopy(local.state_dict()))
        w_avg = copy.deepcopy(w_locals[0])
        for k in w_avg:
            for w in w_locals[1:]:
                w_avg[k] += w[k]
            w_avg[k] = torch.div(w_avg[k], len(w_locals))
        global_model.load_state_dict(w_avg)
    return global_model


def load_images(n: int, seed: int):
    """``n`` CIFAR-10 training images (uint8) and labels, or random ones when the subset is
    missing; returns (x, y, description)."""
    try:
        from replearn import data
        cifar = data.load_cifar("cifar10", root=os.environ.get("REPLEARN_DATA") or
                                os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data"))
        return cifar.x_train[:n], cifar.y_train[:n], f"real images: {cifar.describe()}"
    except (ImportError, FileNotFoundError) as err:
        g = torch.Generator().manual_seed(seed)
        x = torch.randint(0, 256, (n, 3, 32, 32), generator=g, dtype=torch.uint8)
        return x, torch.randint(0, 10, (n,), generator=g), f"RANDOM images (no CIFAR-10 subset: {err})"


def train_flops_per_sample(model, device, batch: int = 10) -> float:
    x = torch.randn(batch, 3, 32, 32, device=device)
    y = torch.zeros(batch, dtype=torch.int64, device=device)
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(model(x), y).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops() / batch


def gemm_flops(device, n: int = 1024, reps: int = 20) -> float:
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    a @ b
    best = float("inf")
    for _ in range(3):
        sync(device)
        start = time.perf_counter()
        for _ in range(reps):
            a @ b
        sync(device)
        best = min(best, (time.perf_counter() - start) / reps)
    return 2 * n**3 / best


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device) -> float:
    sync(device)
    start = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    parser.add_argument("--model", default="fedrep_cnn", choices=models.MODEL_NAMES)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--per-client", type=int, default=200, help="training images per client")
    parser.add_argument("--steps", type=int, default=20, help="local SGD steps tau per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3, help="timed repeats (best is reported)")
    parser.add_argument("--vmap-clients", type=int, default=0,
                        help="also time ours with clients trained together by torch.func.vmap (0: skip)")
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    M, n, tau, b = args.clients, args.per_client, args.steps, args.batch_size

    x, y, source = load_images(M * n, seed=0)
    from replearn import data
    mean, std = (torch.tensor(v, dtype=torch.float32) for v in data.CHANNEL_STATS["cifar10"])
    parts = list(torch.arange(M * n).split(n))
    test_parts = [p[:10] for p in parts]  # tiny test sets: ours evaluates after the last round
    clients = neural.ClientData.from_partition(x, y, parts, x, y, test_parts, dataset="cifar10",
                                               device=device)
    datasets = [AugmentedImages(x[p].to(device), y[p].to(device), mean.to(device), std.to(device))
                for p in parts]
    model = models.make_model(args.model, 10, seed=0, device=device)
    cfg = neural.TrainConfig(rounds=args.rounds, lr=0.01, momentum=0.5, batch_size=b, local_steps=tau,
                             augment=True, eval_every=args.rounds, last_rounds=1)
    samples = M * args.rounds * tau * b
    print(f"FedAvg, {args.model}, {M} clients x {n} images, tau={tau} steps of batch {b}, "
          f"{args.rounds} rounds, "
          f"augmentation on; device={device.type}, torch threads={torch.get_num_threads()}")
    print(f"data: {source}")

    runs = {
        "ours": lambda: neural.fedavg(model, clients, cfg),
        "reference": lambda: reference_fedavg(copy.deepcopy(model), datasets, rounds=args.rounds, tau=tau,
                                              lr=0.01, momentum=0.5, batch_size=b, device=device),
    }
    if args.vmap_clients > 1:
        vcfg = neural.TrainConfig(**{**cfg.__dict__, "vmap_clients": args.vmap_clients})
        runs[f"ours, vmap {args.vmap_clients}"] = lambda: neural.fedavg(model, clients, vcfg)
    best = {name: float("inf") for name in runs}
    for name, fn in runs.items():  # warm-up
        fn()
    torch.manual_seed(0)  # the reference draws its augmentation from the global RNG, as the authors' code
    for _ in range(args.repeat):  # interleaved, so that load changes hit both alike
        for name, fn in runs.items():
            best[name] = min(best[name], timed(fn, device))

    flops = train_flops_per_sample(model, device, b)
    gemm = gemm_flops(device)
    print(f"training FLOPs per sample (forward + backward, conv/matmul): {flops / 1e6:.1f} MFLOP; "
          f"plain GEMM (1024^3, float32): {gemm / 1e9:.1f} GFLOP/s")
    for name, t in best.items():
        rate = samples / t
        print(f"  {name:<18} {rate:8.0f} samples/s  {flops * rate / 1e9:7.1f} GFLOP/s "
              f"({100 * flops * rate / gemm:5.1f}% of GEMM)")
    ratio = best["reference"] / best["ours"]
    verdict = "TARGET MET" if ratio >= TARGET else "TARGET MISSED"
    print(f"speed-up of ours over the reference loop: {ratio:.2f}x ({verdict}, target >= {TARGET:.0f}x)")


if __name__ == "__main__":
    main()
