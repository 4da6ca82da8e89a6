"""Records: tensors and nested objects in Flower's messages (``ArrayRecord`` s and JSON trees)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import torch
from flwr.app import Array, ArrayRecord

from replearn.neural import Params

__all__ = ["finite", "from_record", "pack", "structure", "tensors", "to_record", "unpack"]


def to_record(params: Params, names: Sequence[str] | None = None) -> ArrayRecord:
    """The named tensors (default: all of ``params``) as a Flower ``ArrayRecord`` of NumPy arrays."""
    names = list(params) if names is None else names
    return ArrayRecord({n: Array(params[n].detach().cpu().numpy()) for n in names})


def from_record(record: ArrayRecord, device: torch.device) -> Params:
    """A Flower ``ArrayRecord`` as tensors on ``device``."""
    return {n: torch.tensor(np.asarray(a.numpy()), device=device) for n, a in record.items()}


def pack(obj) -> tuple[ArrayRecord, str]:
    """``obj`` (nested dicts, lists and tuples of tensors, NumPy arrays, numbers, strings,
    booleans and None: an algorithm's draw, broadcast, server or client state) for a Flower
    message: its tensors in an ``ArrayRecord`` and its structure as a JSON string (for a
    ``ConfigRecord``). :func:`unpack` inverts it exactly (the tensors bit for bit)."""
    arrays: dict[str, Array] = {}

    def enc(o):
        if isinstance(o, torch.Tensor):
            arrays[str(len(arrays))] = Array(o.detach().cpu().numpy())
            return {"tensor": str(len(arrays) - 1)}
        if isinstance(o, np.ndarray):
            arrays[str(len(arrays))] = Array(o)
            return {"ndarray": str(len(arrays) - 1)}
        if isinstance(o, Mapping):
            return {"dict": [[enc(k), enc(v)] for k, v in o.items()]}
        if isinstance(o, tuple):
            return {"tuple": [enc(v) for v in o]}
        if isinstance(o, list):
            return {"list": [enc(v) for v in o]}
        if isinstance(o, np.generic):
            o = o.item()
        if o is None or isinstance(o, (bool, int, float, str)):
            return {"value": o}
        raise TypeError(f"cannot send a {type(o).__name__} in a Flower message: an algorithm's draws, "
                        f"broadcast and states must be nested dicts, lists and tuples of tensors, arrays, "
                        f"numbers, strings and None")

    tree = json.dumps(enc(obj))  # first: it fills arrays
    return ArrayRecord(arrays), tree


def unpack(record: ArrayRecord | None, tree: str, device: torch.device):
    """The object :func:`pack` made ``record`` and ``tree`` from, its tensors on ``device``."""

    def dec(node):
        (kind, v), = node.items()
        if kind == "tensor":
            return torch.tensor(np.asarray(record[v].numpy()), device=device)
        if kind == "ndarray":
            return np.asarray(record[v].numpy())
        if kind == "dict":
            return {dec(k): dec(x) for k, x in v}
        if kind == "tuple":
            return tuple(dec(x) for x in v)
        if kind == "list":
            return [dec(x) for x in v]
        if kind == "value":
            return v
        raise ValueError(f"unknown kind {kind!r} in a packed object")

    return dec(json.loads(tree))


def structure(obj):
    """``obj``'s nesting, with each tensor as its dtype and shape (to compare two states)."""
    if isinstance(obj, torch.Tensor):
        return ("tensor", str(obj.dtype), tuple(obj.shape))
    if isinstance(obj, Mapping):
        return ("dict", tuple((k, structure(v)) for k, v in obj.items()))
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, tuple(structure(v) for v in obj))
    return (type(obj).__name__,)


def tensors(obj) -> list[torch.Tensor]:
    """Every tensor of ``obj`` (nested dicts, lists and tuples), in order."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, Mapping):
        return [t for v in obj.values() for t in tensors(v)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in tensors(v)]
    return []


def finite(items: Iterable[torch.Tensor]) -> bool:
    """Whether every floating or complex tensor of ``items`` is finite."""
    return all(bool(torch.isfinite(t).all()) for t in items if t.is_floating_point() or t.is_complex())

