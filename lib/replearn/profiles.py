"""Experiment scales: a CPU-sized ``default`` and the papers' ``paper`` settings.

Each experiment's settings are a frozen dataclass whose field defaults are the CPU profile
(what CI runs and what the stored notebook outputs show) and whose ``paper()`` classmethod
returns the paper-scale settings. Readers switch every experiment at once with the
environment variable ``REPLEARN_PROFILE=paper`` (``default`` when unset)::

    @dataclass(frozen=True)
    class StallSettings(Settings):
        d: int = 30
        @classmethod
        def paper(cls):
            return cls(d=100)

    cfg = StallSettings.current()
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace

import numpy as np

PROFILES = ("default", "paper")


def profile_name() -> str:
    """The active profile from ``REPLEARN_PROFILE`` (``default`` when unset)."""
    name = os.environ.get("REPLEARN_PROFILE", "default").strip().lower() or "default"
    if name not in PROFILES:
        raise ValueError(f"REPLEARN_PROFILE={name!r} is not a known profile; use one of {PROFILES}")
    return name


@dataclass(frozen=True)
class Settings:
    """Base class of experiment settings: field defaults are the CPU profile."""

    @classmethod
    def default(cls):
        return cls()

    @classmethod
    def paper(cls):
        return cls()

    @classmethod
    def current(cls, **overrides):
        """Settings of the active profile, with optional field overrides."""
        base = cls.paper() if profile_name() == "paper" else cls.default()
        return replace(base, **overrides)


def check_int(value, name: str, low: int = 1) -> None:
    """Raise ``ValueError`` unless ``value`` is an integer (not a bool) of at least ``low``:
    the check every settings field that counts something gets."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def differences(cls: type[Settings]) -> list[tuple[str, object, object]]:
    """``(field, default value, paper value)`` for every field of the settings class ``cls``
    whose ``paper()`` value differs from its CPU default, in declaration order."""
    if not (isinstance(cls, type) and issubclass(cls, Settings)):
        raise ValueError(f"expected a Settings subclass, got {cls!r}")
    default, paper = cls.default(), cls.paper()
    return [(f.name, getattr(default, f.name), getattr(paper, f.name)) for f in fields(cls)
            if getattr(default, f.name) != getattr(paper, f.name)]
