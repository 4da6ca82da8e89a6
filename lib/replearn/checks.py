"""Argument checks shared by every public function and settings class of :mod:`replearn`.

Each check raises ``ValueError`` with a message that names the argument, states what it must
be and shows what it got, before any computation runs; valid values are returned (converted
where the intent is obvious, e.g. a list of counts to a tuple), so a caller can write
``tau = check_int(tau, "tau")``. Tensor checks cover shape, rank, dtype, device and
finiteness: a NaN in the data is reported as a NaN in that input, never later as a divergence
of the algorithm that consumed it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable

import numpy as np
import torch

from replearn.backend import check_finite

__all__ = [
    "check_int", "check_number", "check_positive", "check_nonnegative", "check_fraction",
    "check_choice", "check_bool", "check_sequence", "check_ints", "check_positives", "check_seed",
    "check_count", "MAX_COUNT", "MAX_SEED",
    "check_tensor", "check_finite", "check_same_kind", "check_client_index", "check_weights",
]


MAX_COUNT = 10**7
"""Largest count a settings field may hold (iterations, rounds, epochs, trials, clients, samples,
dimensions): the book's largest is 1.5e5 (paper-scale steps), and 10**7 of any of them is work
or memory no machine it targets has, so such a value is refused at construction, naming the
field, before anything is allocated."""

MAX_SEED = 2**64 - 1
"""Largest seed a torch generator accepts (``manual_seed`` takes an unsigned 64-bit integer)."""


def _describe(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_int(value, name: str, low: int | None = 1, high: int | None = None) -> int:
    """``value`` as an int, which must be an integer (not a bool) in [low, high] (either end open
    when None)."""
    bounds = ("" if low is None and high is None else f" >= {low}" if high is None
              else f" <= {high}" if low is None else f" in [{low}, {high}]")
    if high is None and low in (0, 1):
        bounds += " (a positive integer)" if low == 1 else " (a non-negative integer)"
    if (not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_))
            or (low is not None and value < low) or (high is not None and value > high)):
        raise ValueError(f"{name} must be an integer{bounds}, got {_describe(value)}")
    return int(value)


def check_number(value, name: str, *, low: float | None = None, high: float | None = None,
                 low_open: bool = False, high_open: bool = False) -> float:
    """``value`` as a float: a real, finite number (not a bool, not a tensor with several
    entries) in the interval given by ``low``/``high`` (closed ends unless ``*_open``)."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.dtype.is_floating_point:
        value = value.item()
    if not isinstance(value, numbers.Real) or isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be a real number, got {_describe(value)}")
    x = float(value)
    if not math.isfinite(x):
        raise ValueError(f"{name} must be a finite number, got {_describe(value)}")
    below = low is not None and (x <= low if low_open else x < low)
    above = high is not None and (x >= high if high_open else x > high)
    if below or above:
        left = "" if low is None else f"{'>' if low_open else '>='} {low}"
        right = "" if high is None else f"{'<' if high_open else '<='} {high}"
        raise ValueError(f"{name} must be {' and '.join(s for s in (left, right) if s)}, got {_describe(value)}")
    return x


def check_positive(value, name: str) -> float:
    """A finite number > 0 (step sizes, radii, scales)."""
    return check_number(value, name, low=0.0, low_open=True)


def check_nonnegative(value, name: str) -> float:
    """A finite number >= 0 (noise levels, mean norms)."""
    return check_number(value, name, low=0.0)


def check_fraction(value, name: str) -> float:
    """A fraction in (0, 1] (participation rates)."""
    return check_number(value, name, low=0.0, high=1.0, low_open=True)


def check_choice(value, name: str, choices: Iterable) -> object:
    """``value`` must be one of ``choices``."""
    choices = tuple(choices)
    if not isinstance(value, (str, int, type(None))) or value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {_describe(value)}")
    return value


def check_bool(value, name: str) -> bool:
    """A plain ``True`` / ``False`` (not 0/1, not a string)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {_describe(value)}")
    return bool(value)


def check_sequence(values, name: str, each: Callable[[object, str], object], *,
                   nonempty: bool = True, each_name: str | None = None) -> tuple:
    """A tuple (lists are converted) whose every entry passes ``each(entry, each_name)``
    (``each_name`` defaults to "every entry of <name>")."""
    if isinstance(values, (str, bytes)) or not isinstance(values, (tuple, list, range)):
        raise ValueError(f"{name} must be a tuple of values, got {_describe(values)}")
    if nonempty and len(values) == 0:
        raise ValueError(f"{name} must not be empty (an empty grid gives an empty result)")
    each_name = f"every entry of {name}" if each_name is None else each_name
    return tuple(each(v, each_name) for v in values)


def check_ints(values, name: str, low: int = 1, each_name: str | None = None) -> tuple:
    """A non-empty tuple of integers >= ``low`` (grids of sample sizes, client counts)."""
    return check_sequence(values, name, lambda v, n: check_int(v, n, low), each_name=each_name)


def check_positives(values, name: str, each_name: str | None = None) -> tuple:
    """A non-empty tuple of finite numbers > 0 (grids of rates, spreads)."""
    return check_sequence(values, name, check_positive, each_name=each_name)


def check_seed(value, name: str = "seed") -> int:
    """A non-negative integer seed that a torch generator accepts (at most :data:`MAX_SEED`)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and value > MAX_SEED:
        raise ValueError(f"{name} must be at most 2**64 - 1 (a torch generator's seed is an unsigned 64-bit "
                         f"integer), got {_describe(value)}; pass a smaller seed")
    return check_int(value, name, 0)


def check_count(value, name: str, low: int | None = 0) -> int:
    """An integer >= ``low`` and at most :data:`MAX_COUNT` (a size or a number of steps that
    can run); the message names the limit."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and value > MAX_COUNT:
        raise ValueError(f"{name} = {value} is more work or memory than any machine can take (the limit of a "
                         f"count is MAX_COUNT = {MAX_COUNT:.0e}; the book's largest is 1.5e5): use a smaller {name}")
    return check_int(value, name, low)


def check_tensor(t, name: str, *, ndim: int | None = None, min_ndim: int | None = None,
                 shape: tuple | None = None, finite: bool = True) -> torch.Tensor:
    """``t`` must be a floating-point ``torch.Tensor`` with ``ndim`` dimensions (or at least
    ``min_ndim``), of ``shape`` when given (``None`` entries match any size), and finite."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not t.dtype.is_floating_point:
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {t.dtype} "
                         f"(convert it with .to(torch.float64))")
    if t.dtype not in (torch.float32, torch.float64):
        raise ValueError(f"{name} has dtype {t.dtype}: the library computes in float32 or float64 (half "
                         f"precision has no linear-algebra kernels and too few digits); convert it with "
                         f".to(torch.float64)")
    if t.device.type == "meta":
        raise ValueError(f"{name} is on the meta device (a shape without data): create it on cpu or cuda")
    if ndim is not None and t.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {tuple(t.shape)}")
    if min_ndim is not None and t.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimension(s), got shape {tuple(t.shape)}")
    if shape is not None and (t.ndim != len(shape)
                              or any(s is not None and s != u for s, u in zip(shape, t.shape))):
        want = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
        raise ValueError(f"{name} must have shape {want}, got {tuple(t.shape)}")
    if finite:
        check_finite(t, name)
    return t


def check_same_kind(*named: tuple[str, torch.Tensor]) -> None:
    """Every ``(name, tensor)`` pair must share the first one's dtype and device; the message
    names both tensors (convert with ``.to(other)``)."""
    (first_name, first), *rest = named
    for name, t in rest:
        if t.dtype != first.dtype:
            raise ValueError(f"{name} has dtype {t.dtype} but {first_name} has dtype {first.dtype}; "
                             f"convert one of them, e.g. {name}.to({first_name})")
        if t.device != first.device:
            raise ValueError(f"{name} is on device {t.device} but {first_name} is on {first.device}; "
                             f"move one of them, e.g. {name}.to({first_name}.device)")


def check_client_index(index, n: int, name: str = "index") -> torch.Tensor | None:
    """``None`` (every client) or a non-empty 1-D integer tensor of distinct clients in [0, n)."""
    if index is None:
        return None
    if not isinstance(index, torch.Tensor) or index.ndim != 1 or index.dtype.is_floating_point \
            or index.dtype == torch.bool:
        raise ValueError(f"{name} must be None or a 1-D integer tensor of client indices, got "
                         f"{_describe(index)}")
    if index.numel() == 0:
        raise ValueError(f"{name} selects no clients: pass None for all of them or at least one index")
    if int(index.min()) < 0 or int(index.max()) >= n:
        raise ValueError(f"{name} must hold client indices in [0, {n}), got values in "
                         f"[{int(index.min())}, {int(index.max())}]")
    if index.unique().numel() != index.numel():
        raise ValueError(f"{name} lists a client more than once")
    return index


def check_weights(weights, n: int, like: torch.Tensor, name: str = "weights") -> torch.Tensor:
    """``n`` positive finite client weights (e.g. sample counts n_i) as a tensor like ``like``."""
    try:
        w = torch.as_tensor(weights, dtype=like.dtype, device=like.device)
    except (TypeError, ValueError, RuntimeError) as err:
        raise ValueError(f"{name} must be {n} positive finite numbers (one per client), got "
                         f"{_describe(weights)}") from err
    if w.shape != (n,) or not bool(torch.isfinite(w).all()) or not bool((w > 0).all()):
        raise ValueError(f"{name} must be {n} positive finite numbers (one per client), got "
                         f"{_describe(weights)}")
    return w
