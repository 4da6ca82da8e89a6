"""One driver per book section: ``book/NN_chapter/MM_section.ipynb`` is driven by
``replearn.experiments.chNN_chapter.sMM_section`` (its settings with a CPU default and
the paper profile, validated when constructed, and the functions from settings to arrays). A chapter
folder also holds the set-ups its drivers share: the CIFAR studies that several sections run
(``ch04_fedavg.cifar_transfer``: FedAvg against D-SGD pre-trained on CIFAR-100, for 4.7-4.9;
``ch05_fedrep.cifar_federation``: the personalised CIFAR federation of 5.7-5.9). A driver imports
the library and its chapter's set-ups, never another driver.

:func:`settings_classes` and :func:`settings_by_section` list every driver's settings;
:func:`paper_settings` the sections whose driver states the sources' settings."""

from __future__ import annotations

import importlib
import pkgutil
import re

from replearn.settings import Settings


def settings_classes() -> dict[str, type[Settings]]:
    """Every public settings class of a section's driver, keyed ``"module.ClassName"`` (sorted;
    the chapters' set-ups hold the bases the drivers extend)."""
    found = {}
    for info in pkgutil.walk_packages(__path__, prefix=f"{__name__}."):
        if not re.fullmatch(r"s\d\d_\w+", info.name.rsplit(".", 1)[-1]):
            continue
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
        if len(parts) != 2 or not (parts[0].startswith("ch") and re.fullmatch(r"s\d\d_\w+", parts[1])):
            continue
        module = importlib.import_module(info.name)
        key = (int(parts[0][2:4]), int(parts[1][1:3]))
        found[key] = [obj for name, obj in vars(module).items()
                      if isinstance(obj, type) and issubclass(obj, Settings) and obj.__module__ == module.__name__
                      and not name.startswith("_")]
    return {f"{c}.{s}": classes for (c, s), classes in sorted(found.items()) if classes}


def paper_settings() -> dict[str, tuple[type[Settings], dict, dict | None, dict]]:
    """The sections whose driver states the sources' settings, keyed by section number:
    ``(settings class, PAPER_SETTINGS, AUTHORS_CODE, DEPARTURES)``, the class being the driver's
    first settings class: what the paper's text states, what the authors' code does (None: no
    public code) and where the paper profile departs from the paper on purpose, with the reason ({} when
    nowhere); see :func:`replearn.book.scales.settings_table`. In book order. A driver with
    ``PAPER_SETTINGS`` must say ``AUTHORS_CODE`` too."""
    found = {}
    for section, classes in settings_by_section().items():
        module = importlib.import_module(classes[0].__module__)
        if hasattr(module, "PAPER_SETTINGS"):
            if not hasattr(module, "AUTHORS_CODE"):
                raise ValueError(f"{module.__name__} states PAPER_SETTINGS but not AUTHORS_CODE (None when the "
                                 f"paper has no public code)")
            found[section] = (classes[0], module.PAPER_SETTINGS, module.AUTHORS_CODE,
                              getattr(module, "DEPARTURES", {}))
    return found


def results_sections() -> dict:
    """Every results section the drivers declare (each driver's ``RESULTS``, a tuple of
    :class:`replearn.book.results.Section`), by name, in book order: what
    ``scripts/run_results.py`` runs and checks. A name declared twice is a ValueError."""
    found = {}
    for info in pkgutil.walk_packages(__path__, prefix=f"{__name__}."):
        if not re.fullmatch(r"s\d\d_\w+", info.name.rsplit(".", 1)[-1]):
            continue
        for section in getattr(importlib.import_module(info.name), "RESULTS", ()):
            if section.name in found:
                raise ValueError(f"results section {section.name!r} is declared twice (again in {info.name})")
            found[section.name] = section
    return found
