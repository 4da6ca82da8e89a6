"""Claims a notebook states and checks: print the values a claim rests on, then assert it.

A section that says "FedAvg's distance falls below 0.1 while D-GD's stays above 0.5" calls ::

    claim("FedAvg recovers B*, D-GD does not", fedavg_dist < 0.1 < 0.5 < dgd_dist,
          fedavg=fedavg_dist, dgd=dgd_dist)

which prints ``FedAvg recovers B*, D-GD does not: holds (fedavg = 0.0123, dgd = 0.871)`` and
raises :class:`ClaimFailed` (an ``AssertionError``) naming the values when the condition is
false. Floats are printed with ``digits`` significant digits (3 unless told), the precision
that a re-run on another CPU reproduces for the book's well-conditioned statistics; pass a
string to control the format yourself.

Numbers quoted in the prose are glued with :func:`glue_number`, which rounds them to the digits
the text shows before handing them to myst-nb: the glued value is stored in the notebook (as the
text of a hidden output) and strict nbval compares it on CI's machine, so a full-precision float
would fail there on the last bits.
"""

from __future__ import annotations

import math
import numbers


class ClaimFailed(AssertionError):
    """A claim stated in the book did not hold on this run."""


def format_value(value, digits: int = 3) -> str:
    """``value`` as printed by :func:`claim`: strings as they are, bools and integers exactly,
    other real numbers (Python, numpy or 0-d torch) with ``digits`` significant digits."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return str(value)
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        x = float(value)
        if not math.isfinite(x):
            return str(x)
        return f"{x:.{digits}g}"
    raise ValueError(f"claim values must be numbers, bools or strings, got {type(value).__name__}: {value!r}")


def round_significant(value, digits: int = 3):
    """``value`` (a real number, or a 0-d array/tensor) rounded to ``digits`` significant digits;
    integers and bools are returned unchanged."""
    if isinstance(digits, bool) or not isinstance(digits, int) or digits < 1:
        raise ValueError(f"digits must be a positive integer, got {digits!r}")
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if isinstance(value, (bool, numbers.Integral)):
        return value
    if not isinstance(value, numbers.Real):
        raise ValueError(f"expected a real number, got {type(value).__name__}: {value!r}")
    x = float(value)
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - math.floor(math.log10(abs(x))))


def glue_number(name: str, value, digits: int = 3):
    """Glue ``value`` under ``name`` for ``{glue:text}`name:FORMAT``` in the prose, rounded to
    ``digits`` significant digits (format it with no more digits than that). Returns the rounded
    value. Needs myst-nb (installed with the book's requirements)."""
    from myst_nb import glue

    rounded = round_significant(value, digits)
    glue(name, rounded, display=False)
    return rounded


def claim(label: str, condition, *, digits: int = 3, **values) -> None:
    """Print ``label: holds (name = value, ...)`` and raise :class:`ClaimFailed` if
    ``condition`` is false. ``condition`` must be a bool (or a 0-d boolean array/tensor)."""
    if not isinstance(label, str) or not label:
        raise ValueError("a claim needs a non-empty label saying what is claimed")
    if hasattr(condition, "item") and getattr(condition, "ndim", 0) == 0:
        condition = condition.item()
    if not isinstance(condition, bool):
        raise ValueError(f"claim {label!r}: the condition must be a bool, got {type(condition).__name__}; "
                         "reduce arrays with .all() or .any() first")
    shown = ", ".join(f"{name} = {format_value(v, digits)}" for name, v in values.items())
    suffix = f" ({shown})" if shown else ""
    if not condition:
        raise ClaimFailed(f"{label}: does NOT hold{suffix}")
    print(f"{label}: holds{suffix}")
