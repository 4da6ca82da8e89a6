"""Training a round's clients concurrently on a CPU: one client per thread, each on one intra-op
thread, so that the arithmetic is that of a one-thread run for any thread count."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator, Sequence

import torch
from torch import nn

from replearn.checks import check_int
from replearn.neural.engine.config import TrainConfig
from replearn.neural.engine.workers import LocalSGD


def client_workers(workers: int | None, device: torch.device, cfg: TrainConfig, n_clients: int, *,
                   dropout: bool = False) -> int:
    """How many client threads :func:`replearn.neural.run` uses (1: none, train in the calling thread);
    ``dropout``: the network drops inputs in training (its masks, like augmentation, draw from the
    shared generator, so it trains in the calling thread)."""
    if workers is not None:
        check_int(workers, "workers", 1)
        if workers > 1 and (cfg.augment or dropout or cfg.vmap_clients > 1):
            raise ValueError("workers > 1 needs cfg.augment = False and a network without dropout (augmentation "
                             "and dropout draw from the shared generator during training) and cfg.vmap_clients = 1; "
                             "use workers=1")
    if device.type != "cpu" or cfg.augment or dropout or cfg.vmap_clients > 1:
        return 1
    return min(workers or torch.get_num_threads(), n_clients)


class ClientThreads:
    """``n`` threads for training clients concurrently on a CPU, each with its own
    :class:`LocalSGD` worker (made up front, so that starting a thread is quick) and one
    intra-op thread, so that a client's arithmetic does not depend on how many threads there
    are. The calling thread also runs one intra-op thread while the pool is open (otherwise
    its idle OpenMP threads spin on the cores the clients need); ``close`` restores torch's
    thread count."""

    def __init__(self, model: nn.Module, n: int):
        self._spare = [LocalSGD(model) for _ in range(n)]
        self._local = threading.local()
        self._threads = torch.get_num_threads()
        torch.set_num_threads(1)
        self._pool = ThreadPoolExecutor(n, thread_name_prefix="replearn-client")

    def _worker(self) -> LocalSGD:
        worker = getattr(self._local, "worker", None)
        if worker is None:
            torch.set_num_threads(1)
            worker = self._local.worker = self._spare.pop()
        return worker

    def map(self, fn: Callable, items: Sequence) -> Iterator:
        """``fn(worker, item)`` for each item, computed on the threads, yielded in order."""
        return self._pool.map(lambda item: fn(self._worker(), item), items)

    def close(self) -> None:
        self._pool.shutdown(cancel_futures=True)
        torch.set_num_threads(self._threads)



class OneIntraOpThread:
    """While open, torch runs on one intra-op thread (restored on exit): augmented runs train
    the clients in the calling thread, and one thread makes their arithmetic that of a
    one-thread run for any thread count (issue: different accuracies at 1 and 2 threads)."""

    def __init__(self, active: bool):
        self.active, self.threads = active, torch.get_num_threads()

    def __enter__(self):
        if self.active:
            torch.set_num_threads(1)
        return self

    def __exit__(self, *exc):
        if self.active:
            torch.set_num_threads(self.threads)

