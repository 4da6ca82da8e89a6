"""Resumable long runs: inside :func:`resumable`, every finished federated run of the engine's
round loop (:func:`replearn.neural.run`) is stored on disk under a digest of everything it
depends on, and an identical later call loads it instead of training.

A seed of a CIFAR section is a sequence of engine runs (5.7 at the paper's settings: 15 methods
on each of several partitions; 4.8: FedAvg, D-SGD, then dozens of fine-tunings), hours long on a
CPU. ``scripts/run_results.py`` runs every seed inside ``resumable(folder)``, so a seed cut
short (a session that ends, a machine that goes away) restarts from the runs it finished: the
driver is called again from the start, and the finished runs come back from disk bit for bit.

Each run has a record (:func:`record`) of what it is a run of: its kind, algorithm (its name
and :func:`algorithm_code`, a digest of its class's bytecode), configuration and options (their
``repr``: every field), the network (its ``repr`` and :func:`code_digest`, the bytecode of its
modules' classes), and digests (:func:`digest`) of the
starting parameters and the clients' data (their bytes). The file is ``<digest of the
record>.pt``, so a changed setting, seed, network (its layers or its code) or data set misses
the store. Runs with a ``callback`` are never stored (the callback would not be called on a
load).

A file holds only tensors and plain data (strings, numbers, tuples, lists, dicts; the
dataclasses of a result as a tagged dict of their fields) and is read with
``torch.load(weights_only=True)``, so loading runs no code. It also holds the run's record,
checked against the call's before the run is returned, and a :func:`digest` of the record and
the run, checked on load (``torch.load`` does not check the zip's CRC, so a flipped bit would
otherwise come back as the run): an unreadable file, one that is not a stored run, one whose
payload does not match its digest, one stored for another call, or one whose parameters
(``state`` and ``local`` of each result it holds) are not all finite (a finished run's are) is a
``ValueError`` naming it (delete it to re-run).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import types
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import torch

from replearn.neural.engine.config import TrainConfig
from replearn.neural.engine.fed_result import Evaluation, FedResult

__all__ = ["active", "algorithm_code", "cached", "code_digest", "digest", "record", "resumable"]

FORMAT = "replearn.neural.checkpoints/3"  # what a stored file says it is

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
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")  # 0-d: as one element
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


def _class_code(cls: type) -> str:
    """The code of ``cls`` and of its base classes outside torch (torch's own classes by name:
    their code is torch's): each class's attributes by name and :func:`_value_code` (functions
    by their bytecode, whether or not their source can be read: a class from ``exec`` or a
    notebook cell has none). Read at each call, not cached: a class attribute set later counts."""
    parts = []
    for c in cls.__mro__:
        if c is object:
            continue
        name = f"{c.__module__}.{c.__qualname__}"
        if c.__module__.split(".")[0] == "torch":
            parts.append(name)
            continue
        members = [(k, _value_code(v)) for k, v in sorted(vars(c).items())
                   if k not in ("__dict__", "__weakref__", "__module__", "__qualname__")]
        parts.append(f"{name}\n{members!r}")
    return "\n".join(parts)


def _value_code(value, inside: frozenset = frozenset()):
    """What :func:`_class_code` keeps of a class attribute or an algorithm's own attribute: a
    function's, static or class method's or property's :func:`_bytecode` with its default
    arguments and the values it closes over (``inside``: the functions already being read, so
    a function that closes over itself is read once); a class by its name; a tensor by
    :func:`digest`; plain data (numbers, strings, and tuples, lists, sets and dicts of them) by its ``repr``
    (a set's items sorted: their order follows string hashing, which changes between
    processes); anything else by its type's name."""
    for attr in ("__func__", "fget"):  # staticmethod, classmethod; property (with its setter and deleter)
        if hasattr(value, attr):
            return tuple(_value_code(getattr(value, a, None), inside) for a in (attr, "fset", "fdel"))
    if isinstance(value, types.CodeType):
        return _bytecode(value)
    if isinstance(value, types.FunctionType):
        if id(value) in inside:
            return "itself"
        inside = inside | {id(value)}
        cells = tuple(_value_code(_contents(c), inside) for c in value.__closure__ or ())
        return (_bytecode(value.__code__), _value_code(value.__defaults__, inside),
                _value_code(value.__kwdefaults__, inside), cells)
    if isinstance(value, type):
        return f"class {value.__module__}.{value.__qualname__}"
    if isinstance(value, torch.Tensor):
        return digest(value)
    if value is None or type(value) in (bool, int, float, complex, str, bytes):
        return repr(value)
    if type(value) in (tuple, list):
        return (type(value).__name__, tuple(_value_code(v, inside) for v in value))
    if type(value) in (set, frozenset):
        return ("set", tuple(sorted(repr(_value_code(v, inside)) for v in value)))
    if type(value) is dict:
        return ("dict", tuple(sorted((repr(_value_code(k, inside)), repr(_value_code(v, inside)))
                                     for k, v in value.items())))
    return f"a {type(value).__module__}.{type(value).__qualname__}"


def _contents(cell: types.CellType):
    """What a closure's cell holds (None while the variable is unassigned)."""
    try:
        return cell.cell_contents
    except ValueError:
        return None


def _bytecode(code: types.CodeType) -> tuple:
    """``code``'s instructions, names and constants (nested code objects likewise, recursively;
    see :func:`_value_code`), without its file name and line numbers."""
    return code.co_code, code.co_names, tuple(_value_code(c) for c in code.co_consts)


def algorithm_code(algorithm) -> str:
    """SHA-256 of the code of ``algorithm``'s class and its bases (:func:`_class_code`, whether
    or not their source can be read) and of its own attributes: an edited method, even one
    defined in a notebook cell, misses the store."""
    own = sorted((k, _value_code(v)) for k, v in vars(algorithm).items())
    return hashlib.sha256(f"{_class_code(type(algorithm))}\n{own!r}".encode()).hexdigest()


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
    return {c.__name__: c for c in (FedResult, Evaluation, TrainConfig)}


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


def _nonfinite(result, where: str = "") -> list[str]:
    """Where the parameters of ``result`` (``state`` and ``local`` of it and of every
    :class:`~replearn.neural.FedResult` in its ``extras``) hold NaN or infinite values."""
    if isinstance(result, dict):
        return [w for k, v in result.items() for w in _nonfinite(v, f"{where}[{k!r}]")]
    if not isinstance(result, FedResult):
        return []
    bad = [f"{where}.{part}[{n!r}]" for part in ("state", "local") for n, t in getattr(result, part).items()
           if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    return bad + _nonfinite(result.extras, f"{where}.extras")


def _load(path: Path, expected: dict[str, str]):
    """The run stored in ``path`` for the call recorded as ``expected``; ``ValueError`` naming
    the file if it cannot be read, is not a stored run, does not match its digest, was stored
    for another call or holds non-finite parameters."""
    try:
        stored = torch.load(path, weights_only=True)  # tensors and plain data only: runs no code
        if not (isinstance(stored, dict) and stored.get("format") == FORMAT
                and isinstance(stored.get("record"), dict)):
            raise ValueError("no stored-run header")
        result = _decode(stored["result"])
    except Exception as err:  # truncated, foreign or crafted: say which, do not train over it silently
        raise ValueError(f"{path} is not a stored run ({type(err).__name__}: {err}); "
                         f"delete it to re-run") from err
    if stored.get("digest") != digest(stored["record"], stored["result"]):
        raise ValueError(f"{path} is damaged: its record and run do not match the digest stored with them; "
                         f"delete it to re-run")
    differ = sorted(k for k in expected.keys() | stored["record"].keys()
                    if stored["record"].get(k) != expected.get(k))
    if differ:
        raise ValueError(f"{path} holds a run of another call (it differs in {', '.join(differ)}); "
                         f"delete it to re-run")
    bad = _nonfinite(result, "the run")
    if bad:
        raise ValueError(f"{path} holds a run with non-finite parameters ({', '.join(bad[:3])}): a "
                         f"finished run has none; delete it to re-run")
    return result


def cached(run_record: dict[str, str], compute: Callable[[], object]):
    """``compute()``, stored with ``run_record`` (see :func:`record`) as
    ``<active folder>/<digest of run_record>.pt``; loaded instead when that file exists and
    its record is ``run_record``. Outside :func:`resumable`, just ``compute()``. A file that
    cannot be read, is not a stored run, does not match its digest, holds another call's run or
    non-finite parameters is a ``ValueError`` naming it (delete it to re-run)."""
    folder = active()
    if folder is None:
        return compute()
    path = folder / f"{digest(run_record)}.pt"
    if path.is_file():
        return _load(path, run_record)
    result = compute()
    tmp = path.with_suffix(".tmp")
    record, encoded = dict(run_record), _encode(result)
    torch.save({"format": FORMAT, "record": record, "result": encoded, "digest": digest(record, encoded)},
               tmp)
    os.replace(tmp, path)  # atomic: a run cut short leaves no half-written file under the final name
    return result
