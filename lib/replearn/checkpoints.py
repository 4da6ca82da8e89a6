"""Resumable long runs: inside :func:`resumable`, every finished federated run of the engine
(:func:`replearn.neural.run_spec`, :func:`replearn.neural.run_protocol`) is stored on disk under
a digest of everything it depends on, and an identical later call loads it instead of training.

A seed of a CIFAR section is a sequence of engine runs (5.7 at the paper's settings: 15 methods
on each of several partitions; 4.8: FedAvg, D-SGD, then dozens of fine-tunings), hours long on a
CPU. ``scripts/run_results.py`` runs every seed inside ``resumable(folder)``, so a seed cut
short (a session that ends, a machine that goes away) restarts from the runs it finished: the
driver is called again from the start, and the finished runs come back from disk bit for bit.

The digest (:func:`digest`) covers the run's kind and algorithm, its configuration and options
(their ``repr``: every field), the starting parameters and the clients' data (their bytes), so
a changed setting, seed, network or data set misses the store. Runs with a ``callback`` are
never stored (the callback would not be called on a load).
"""

from __future__ import annotations

import hashlib
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import torch

__all__ = ["active", "cached", "digest", "resumable"]

_FOLDERS: list[Path] = []


@contextmanager
def resumable(folder: str | os.PathLike) -> Iterator[Path]:
    """Store finished engine runs in ``folder`` (created if missing) and reuse them, for the
    duration of the ``with`` block."""
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    _FOLDERS.append(path)
    try:
        yield path
    finally:
        _FOLDERS.pop()


def active() -> Path | None:
    """The folder of the innermost :func:`resumable` block, or None outside one."""
    return _FOLDERS[-1] if _FOLDERS else None


def _feed(h, obj) -> None:
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(obj, dict):
        h.update(b"D")
        for k in sorted(obj, key=str):
            h.update(repr(k).encode())
            _feed(h, obj[k])
    elif isinstance(obj, (tuple, list)):
        h.update(f"L{len(obj)}".encode())
        for v in obj:
            _feed(h, v)
    elif hasattr(obj, "x_train") and hasattr(obj, "y_test"):  # neural.ClientData
        _feed(h, (obj.x_train, obj.y_train, obj.x_test, obj.y_test))
    else:
        h.update(repr(obj).encode())


def digest(*parts) -> str:
    """SHA-256 of ``parts``: tensors by dtype, shape and bytes; dicts, tuples and lists item by
    item; client data by their four tensor lists; anything else by its ``repr``."""
    h = hashlib.sha256()
    for p in parts:
        _feed(h, p)
    return h.hexdigest()


def cached(key: str, compute: Callable[[], object]):
    """``compute()``, stored as ``<active folder>/<key>.pt``; loaded instead when that file
    exists. Outside :func:`resumable`, just ``compute()``. A file that cannot be read is a
    ``ValueError`` naming it (delete it to re-run)."""
    folder = active()
    if folder is None:
        return compute()
    path = folder / f"{key}.pt"
    if path.is_file():
        try:
            return torch.load(path, weights_only=False)
        except Exception as err:  # a truncated or foreign file: say which, do not train over it silently
            raise ValueError(f"{path} is not a stored run ({type(err).__name__}: {err}); "
                             f"delete it to re-run") from err
    result = compute()
    tmp = path.with_suffix(".tmp")
    torch.save(result, tmp)
    os.replace(tmp, path)  # atomic: a run cut short leaves no half-written file under the final name
    return result
