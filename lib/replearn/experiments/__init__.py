"""Experiment drivers behind the book's notebooks: one module per section, each a frozen
settings dataclass (CPU default + ``paper()``) and functions from settings to arrays."""

from __future__ import annotations

import importlib
import pkgutil

from ..profiles import Settings


def settings_classes() -> dict[str, type[Settings]]:
    """Every public experiment settings class, keyed ``"module.ClassName"`` (sorted)."""
    found = {}
    for info in pkgutil.walk_packages(__path__, prefix=f"{__name__}."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (isinstance(obj, type) and issubclass(obj, Settings) and obj.__module__ == module.__name__
                    and not name.startswith("_")):
                found[f"{info.name.removeprefix(__name__ + '.')}.{name}"] = obj
    return dict(sorted(found.items()))
