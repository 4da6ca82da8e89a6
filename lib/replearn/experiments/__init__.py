"""One driver per book section: ``book/NN_chapter/MM_section.ipynb`` is driven by
``replearn.experiments.chNN_chapter.sMM_section`` (its settings with a CPU default and
``paper()``, validated when constructed, and the functions from settings to arrays).

:func:`settings_classes` and :func:`settings_by_section` list every driver's settings;
:func:`paper_settings` the sections whose driver states the sources' settings."""

from __future__ import annotations

import importlib
import pkgutil

from replearn.book.profiles import Settings


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


def settings_by_section() -> dict[str, list[type[Settings]]]:
    """The public settings classes of each section's driver, keyed by the section number: the
    driver ``chNN_chapter.sMM_section`` drives section ``N.M``. In book order; classes in the
    order the driver defines them."""
    found = {}
    for info in pkgutil.walk_packages(__path__, prefix=f"{__name__}."):
        parts = info.name.split(".")[-2:]
        if len(parts) != 2 or not (parts[0].startswith("ch") and parts[1].startswith("s")):
            continue
        module = importlib.import_module(info.name)
        key = (int(parts[0][2:4]), int(parts[1][1:3]))
        found[key] = [obj for name, obj in vars(module).items()
                      if isinstance(obj, type) and issubclass(obj, Settings) and obj.__module__ == module.__name__
                      and not name.startswith("_")]
    return {f"{c}.{s}": classes for (c, s), classes in sorted(found.items()) if classes}


def paper_settings() -> dict[str, tuple[type[Settings], dict, dict | None]]:
    """The sections whose driver states the sources' settings, keyed by section number:
    ``(settings class, PAPER_SETTINGS, AUTHORS_CODE)``, the class being the driver's first
    settings class: what the paper's text states and what the authors' code does (None: no
    public code; see :func:`replearn.book.scales.settings_table`). In book order. A driver with
    ``PAPER_SETTINGS`` must say ``AUTHORS_CODE`` too."""
    found = {}
    for section, classes in settings_by_section().items():
        module = importlib.import_module(classes[0].__module__)
        if hasattr(module, "PAPER_SETTINGS"):
            if not hasattr(module, "AUTHORS_CODE"):
                raise ValueError(f"{module.__name__} states PAPER_SETTINGS but not AUTHORS_CODE (None when the "
                                 f"paper has no public code)")
            found[section] = (classes[0], module.PAPER_SETTINGS, module.AUTHORS_CODE)
    return found
