"""Resumable long runs: inside :func:`resumable`, every finished federated run of the engine's
round loop (:func:`replearn.neural.run`) is stored on disk under a digest of everything it
depends on, and an identical later call loads it instead of training.

A seed of a CIFAR section is a sequence of engine runs (5.7 at the paper's settings: 15 methods
on each of several partitions; 4.8: FedAvg, D-SGD, then dozens of fine-tunings), hours long on a
CPU. ``scripts/run_results.py`` runs every seed inside ``resumable(folder)``, so a seed cut
short (a session that ends, a machine that goes away) restarts from the runs it finished: the
driver is called again from the start, and the finished runs come back from disk bit for bit.

Each run has a record (:func:`record`) of what it is a run of: its kind, algorithm (its name
and a digest of its class's code), configuration and options (their ``repr``: every field), the network (its ``repr`` and
:func:`code_digest`, the source of its modules' classes), and digests (:func:`digest`) of the
starting parameters and the clients' data (their bytes). The file is ``<digest of the
record>.pt``, so a changed setting, seed, network (its layers or its code) or data set misses
the store. Runs with a ``callback`` are never stored (the callback would not be called on a
load).

A file holds only tensors and plain data (strings, numbers, tuples, lists, dicts; the
dataclasses of a result as a tagged dict of their fields) and is read with
``torch.load(weights_only=True)``, so loading runs no code. It also holds the run's record,
checked against the call's before the run is returned: an unreadable file, one that is not a
stored run, or one stored for another call is a ``ValueError`` naming it (delete it to re-run).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import inspect
import os
import types
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import torch

__all__ = ["active", "cached", "code_digest", "digest", "record", "resumable"]

FORMAT = "replearn.neural.checkpoints/2"  # what a stored file says it is

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


@functools.lru_cache(maxsize=None)
def _class_code(cls: type) -> str:
    """The source of ``cls`` and of its base classes outside torch (torch's own classes by
    name: their code is torch's); a class without source by its functions' bytecode."""
    parts = []
    for c in cls.__mro__:
        if c is object:
            continue
        name = f"{c.__module__}.{c.__qualname__}"
        if c.__module__.split(".")[0] == "torch":
            parts.append(name)
            continue
        try:
            parts.append(f"{name}\n{inspect.getsource(c)}")
        except (OSError, TypeError):  # defined where no source is kept (exec, some notebooks)
            codes = [(k, v.__code__) for k, v in sorted(vars(c).items()) if hasattr(v, "__code__")]
            parts.append(f"{name}\n" + repr([(k, _bytecode(code)) for k, code in codes]))
    return "\n".join(parts)


def _bytecode(code: types.CodeType) -> tuple:
    """``code``'s instructions, names and constants (nested code objects likewise), without
    its file name and line numbers."""
    consts = tuple(_bytecode(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts)
    return code.co_code, code.co_names, consts


def code_digest(model) -> str:
    """SHA-256 of the code of ``model``'s network: :func:`_class_code` of the class of the
    model and of every submodule."""
    classes = {type(m): None for m in model.modules()}
    return hashlib.sha256("\n".join(_class_code(c) for c in classes).encode()).hexdigest()


def record(run: dict[str, str], model, start, clients) -> dict[str, str]:
    """What a run is a run of: ``run`` (its kind, algorithm, configuration and options, as
    strings), the network's ``repr`` and :func:`code_digest`, and :func:`digest` of the
    starting parameters and of the clients' data."""
    return {**run, "network": repr(model), "network_code": code_digest(model),
            "start": digest(start), "data": digest(clients)}


def _stored_classes() -> dict[str, type]:
    """The dataclasses a stored run may hold, by name."""
    from replearn import neural  # here: neural imports this module
    return {c.__name__: c for c in (neural.FedResult, neural.Evaluation, neural.TrainConfig)}


def _encode(obj):
    """``obj`` as tensors and plain data: each container a pair (kind, items)."""
    if obj is None or isinstance(obj, torch.Tensor) or type(obj) in (str, int, float, bool):
        return obj
    if isinstance(obj, (tuple, list)):
        return (type(obj).__name__, [_encode(v) for v in obj])
    if isinstance(obj, dict):
        return ("dict", [(_encode(k), _encode(v)) for k, v in obj.items()])
    name = type(obj).__name__
    if dataclasses.is_dataclass(obj) and _stored_classes().get(name) is type(obj):
        return (name, {f.name: _encode(getattr(obj, f.name)) for f in dataclasses.fields(obj)})
    raise TypeError(f"cannot store a {type(obj).__qualname__} in a checkpoint")


def _decode(obj):
    """The object :func:`_encode` made ``obj`` of."""
    if not isinstance(obj, tuple):
        return obj
    kind, items = obj
    if kind in ("tuple", "list"):
        return (tuple if kind == "tuple" else list)(_decode(v) for v in items)
    if kind == "dict":
        return {_decode(k): _decode(v) for k, v in items}
    return _stored_classes()[kind](**{k: _decode(v) for k, v in items.items()})


def _load(path: Path, expected: dict[str, str]):
    """The run stored in ``path`` for the call recorded as ``expected``; ``ValueError`` naming
    the file if it cannot be read, is not a stored run, or was stored for another call."""
    try:
        stored = torch.load(path, weights_only=True)  # tensors and plain data only: runs no code
        if not (isinstance(stored, dict) and stored.get("format") == FORMAT
                and isinstance(stored.get("record"), dict)):
            raise ValueError("no stored-run header")
        result = _decode(stored["result"])
    except Exception as err:  # truncated, foreign or crafted: say which, do not train over it silently
        raise ValueError(f"{path} is not a stored run ({type(err).__name__}: {err}); "
                         f"delete it to re-run") from err
    differ = sorted(k for k in expected.keys() | stored["record"].keys()
                    if stored["record"].get(k) != expected.get(k))
    if differ:
        raise ValueError(f"{path} holds a run of another call (it differs in {', '.join(differ)}); "
                         f"delete it to re-run")
    return result


def cached(run_record: dict[str, str], compute: Callable[[], object]):
    """``compute()``, stored with ``run_record`` (see :func:`record`) as
    ``<active folder>/<digest of run_record>.pt``; loaded instead when that file exists and
    its record is ``run_record``. Outside :func:`resumable`, just ``compute()``. A file that
    cannot be read, is not a stored run or holds another call's run is a ``ValueError`` naming
    it (delete it to re-run)."""
    folder = active()
    if folder is None:
        return compute()
    path = folder / f"{digest(run_record)}.pt"
    if path.is_file():
        return _load(path, run_record)
    result = compute()
    tmp = path.with_suffix(".tmp")
    torch.save({"format": FORMAT, "record": dict(run_record), "result": _encode(result)}, tmp)
    os.replace(tmp, path)  # atomic: a run cut short leaves no half-written file under the final name
    return result
