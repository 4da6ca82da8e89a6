"""Committed results of the long CPU and paper-scale GPU runs, read back for the book.

``make results PROFILE=long|paper`` (``scripts/run_results.py``) runs a neural section's driver
at a larger profile, once per seed, and writes ``book/results/<profile>/<section>.json``: the
settings, a summary of every seed's result and the provenance (commit, device, CPU, threads,
torch and Python versions, date, wall time). :func:`load` reads such a file;
:meth:`ResultsFile.values` collects one number per seed, ready for
:func:`replearn.book.seeds.pm` / :func:`replearn.book.seeds.separated`; :meth:`ResultsFile.describe`
is the label a notebook prints above the numbers, so that a reader can tell them from the CPU
run the notebook itself executes.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

__all__ = ["ResultsFile", "Section", "default_root", "floats", "load", "nonfinite", "wall_time"]


@dataclass(frozen=True)
class Section:
    """A results section, as its driver declares it in its module's ``RESULTS`` (a tuple of these;
    :func:`replearn.experiments.results_sections` collects them and ``scripts/run_results.py`` runs
    them): ``name`` (the file's name, ``"5.7"``, ``"5.7-m500"``), the ``settings`` class, ``run``
    (settings -> one seed's result), ``summary`` (that result -> the JSON-able dict the file keeps
    per seed), ``work`` (``work(settings, batched=...)``: the launch estimate printed before a run,
    :func:`replearn.book.scales.launch_estimate`), ``variant`` (``profile -> settings`` for a
    section whose settings are not its class's profile, run only when named; None: the class's
    profile, run by default) and ``run_group`` (sections whose seeds reuse each other's engine runs,
    e.g. 4.8 and 4.9's one pre-training; ``()``: the section alone)."""

    name: str
    settings: type
    run: Callable
    summary: Callable
    work: Callable
    variant: Callable | None = None
    run_group: tuple[str, ...] = ()

    def settings_at(self, profile: str):
        """The settings this section runs at ``profile``."""
        return self.variant(profile) if self.variant is not None else self.settings.profile(profile)

    @property
    def group(self) -> tuple[str, ...]:
        """The sections sharing this one's engine runs (itself when it shares with none)."""
        return self.run_group or (self.name,)


def floats(t) -> list[float]:
    """A tensor's (or a number's, or a sequence's) values as a flat list of Python floats, as a
    results file stores them."""
    return [float(v) for v in torch.as_tensor(t).flatten().tolist()]


def nonfinite(node, where: str = "") -> list[str]:
    """The key paths (``/0/accuracy/FedRep``) of every NaN or infinite number in a JSON value
    (``json`` reads ``NaN`` and ``Infinity`` without complaint)."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in nonfinite(v, f"{where}/{k}")]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in nonfinite(v, f"{where}[{i}]")]
    if isinstance(node, float) and not math.isfinite(node):
        return [where or "/"]
    return []


def default_root() -> Path:
    """The folder holding ``<profile>/<section>.json``: ``$REPLEARN_RESULTS`` when set, else the
    first of ``./results``, ``../results``, ``../../results`` and ``./book/results`` that exists (a
    notebook runs in its own folder: a chapter's, next to ``book/results``, or an appendix page's
    ``book/appendix/reproduction``), else ``../results``."""
    env = os.environ.get("REPLEARN_RESULTS")
    if env:
        return Path(env).expanduser()
    here = Path.cwd()
    for candidate in (here / "results", here.parent / "results", here.parent.parent / "results",
                      here / "book" / "results"):
        if candidate.is_dir():
            return candidate
    return here.parent / "results"


@dataclass(frozen=True)
class ResultsFile:
    """One section's committed results: ``results[seed]`` is the summary of that seed's run."""

    section: str
    profile: str
    settings: dict
    seeds: tuple[int, ...]
    results: dict
    provenance: dict
    path: Path

    def values(self, *keys: str | int) -> list[float]:
        """The number at ``results[seed][keys[0]][keys[1]]...`` for every seed, in seed order
        (an int key indexes a list). A key path that does not exist raises a ``KeyError`` naming
        what is available there."""
        out = []
        for seed in self.seeds:
            node = self.results[str(seed)]
            for depth, key in enumerate(keys):
                if isinstance(node, list) and isinstance(key, int) and -len(node) <= key < len(node):
                    node = node[key]
                    continue
                if not isinstance(node, dict) or key not in node:
                    have = sorted(node) if isinstance(node, dict) else f"a list of {len(node)}" \
                        if isinstance(node, list) else type(node).__name__
                    raise KeyError(f"{self.path.name}: no key {key!r} under {list(keys[:depth])}; "
                                   f"available: {have}")
                node = node[key]
            if isinstance(node, bool) or not isinstance(node, (int, float)):
                raise ValueError(f"{self.path.name}: seed {seed} holds {type(node).__name__} at {list(keys)}, "
                                 f"not a number; extend the key path"
                                 + (f" (keys there: {sorted(node)})" if isinstance(node, dict) else ""))
            out.append(float(node))
        return out

    def describe(self) -> str:
        """``profile`` run, seeds, device, CPU, threads, torch, commit, date and wall time (and, where
        the provenance has a ``wall_note`` saying how the runs were computed, a pointer to it)."""
        p = self.provenance
        where = p.get("device", "?")
        if where == "cpu":
            threads = p.get("threads")
            where = f"CPU {p.get('cpu', '?')}" + (f", {threads} thread{'s' * (threads != 1)}" if threads else "")
        seeds = (f"seed {self.seeds[0]}" if len(self.seeds) == 1 else       # in words, not a Python tuple
                 f"{len(self.seeds)} seeds ({', '.join(map(str, self.seeds[:-1]))} and {self.seeds[-1]})")
        return (f"{self.profile} profile, {seeds}; {where}; torch {p.get('torch', '?')}; "
                f"commit {str(p.get('commit', '?'))[:12]}; {str(p.get('date', '?'))[:10]}; "
                f"{wall_time(p.get('wall_s'))}" + ("; see its wall_note" if p.get("wall_note") else ""))


def wall_time(wall_s) -> str:
    """``"N min in all"`` for a recorded wall time in seconds; ``"wall time unknown"`` when there is
    none to show: missing (None), not a number (a string, a bool), NaN, infinite or negative."""
    if isinstance(wall_s, bool) or not isinstance(wall_s, (int, float)) or not 0 <= wall_s < math.inf:
        return "wall time unknown"
    return f"{wall_s / 60:.0f} min in all"


def _name_argument(what: str, value) -> str:
    """``value`` as a section or profile name: a non-empty string that names one file or folder
    (no path separator, not ``.`` or ``..``); anything else is an error about the argument."""
    if not isinstance(value, str):
        raise TypeError(f"results.load: {what} must be a string such as "
                        f"{'4.7' if what == 'section' else 'long'!r}, got {type(value).__name__} {value!r}")
    seps = {"/", "\\", os.sep} | ({os.altsep} if os.altsep else set())
    if not value.strip() or value in (".", "..") or any(sep in value for sep in seps) or "\0" in value:
        raise ValueError(f"results.load: {what} must be a plain name such as "
                         f"{'4.7' if what == 'section' else 'long'!r} (non-empty, no path separator), "
                         f"got {value!r}")
    return value


def load(section: str, profile: str = "long", root: str | Path | None = None) -> ResultsFile:
    """The committed results of ``section`` (e.g. ``"4.7"``) at ``profile`` under ``root``
    (default :func:`default_root`). Raises ``FileNotFoundError`` saying how to produce them; a
    ``section`` or ``profile`` that is not a plain name (not a string, empty, a path) is a
    ``TypeError``/``ValueError`` about that argument, before any file is read."""
    section, profile = _name_argument("section", section), _name_argument("profile", profile)
    root = Path(root) if root is not None else default_root()
    path = root / profile / f"{section}.json"
    if not path.is_file():
        raise FileNotFoundError(f"no {profile}-profile results for section {section} at {path}; produce them with "
                                f"`make results PROFILE={profile} SECTIONS={section}` (or set REPLEARN_RESULTS to "
                                f"the folder holding <profile>/<section>.json)")
    fix = f"re-run `make results PROFILE={profile}`"
    try:
        record = json.loads(path.read_text())
        rf = ResultsFile(record["section"], record["profile"], record["settings"], tuple(record["seeds"]),
                         record["results"], record["provenance"], path)
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path} is not a results file of scripts/run_results.py ({err}); {fix}") from err
    if (rf.section, rf.profile) != (section, profile):
        raise ValueError(f"{path} holds the results of section {rf.section!r} at profile {rf.profile!r}, not of "
                         f"section {section!r} at profile {profile!r} as its name says: the file was copied or "
                         f"renamed; {fix}")
    if (not rf.seeds or not all(isinstance(k, int) and not isinstance(k, bool) for k in rf.seeds)
            or len(set(rf.seeds)) != len(rf.seeds)):
        raise ValueError(f"{path}: seeds must be distinct integers (each seed counts once in every mean and "
                         f"sd), got {list(rf.seeds)}; {fix}")
    if not isinstance(rf.results, dict) or sorted(rf.results) != sorted(str(k) for k in rf.seeds):
        have = sorted(rf.results) if isinstance(rf.results, dict) else type(rf.results).__name__
        raise ValueError(f"{path}: results must hold exactly one entry per seed {list(rf.seeds)}, got {have}; "
                         f"{fix}")
    if not isinstance(rf.settings, dict) or not isinstance(rf.provenance, dict):
        raise ValueError(f"{path}: settings and provenance must be JSON objects; {fix}")
    bad = nonfinite(rf.results)
    if bad:
        raise ValueError(f"{path}: the results hold NaN or infinite values at {bad[:5]}; {fix}")
    return rf
