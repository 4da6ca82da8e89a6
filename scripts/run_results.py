"""Run the neural sections' drivers at a larger profile and write results files with provenance.

    python scripts/run_results.py --profile long            # every section, CPU (20-90 min each on one core)
    python scripts/run_results.py --profile paper 4.7 5.7   # chosen sections, the papers' settings (GPU)
    python scripts/run_results.py --profile long --check 5.9  # re-run one seed, compare with the committed file
    python scripts/run_results.py --profile long 5.7-seeds    # 5.7's six main methods over seeds 1 and 2
    python scripts/run_results.py --profile long 5.7-m200 5.7-m500  # 40 clients with 200, then 500 images each
    python scripts/run_results.py --profile long 5.7-fedavg-local    # 5.7's FedAvg tested with the local copies
    python scripts/run_results.py --profile long --helper 5.7-c10-100-5  # beside the run above: a second core

``make results PROFILE=long|paper`` calls this. For each section the driver runs once per seed of
the profile's settings (:meth:`replearn.settings.Settings.profile`); every finished seed is
checkpointed under ``<out>/<profile>/.checkpoints/``, so an interrupted run resumes where it
stopped; within a seed, every finished engine run is stored there too
(:func:`replearn.neural.checkpoints.resumable`), so a seed cut short resumes from the runs it finished
(its recorded wall time then counts only the runs computed after the restart). ``--helper``, started
beside a running section whose settings list rows (``methods``), trains the same seed's rows in the
reverse order into the same store and writes no results file: the two processes meet in the middle,
each row is trained once (a run's key is everything it depends on, so the main process loads the
helper's), and a section of many rows takes about half the wall time on two cores. When all seeds are done, ``<out>/<profile>/<section>.json`` holds the per-seed results
and their provenance: commit, settings, seeds, device, torch version, date, wall time and the
arithmetic fingerprint (:func:`arithmetic_fingerprint`: what decides the bits of a float run).
``--check`` re-runs one seed and compares it bit for bit when the fingerprint now equals the
file's, and within a tolerance derived from the file's own seed spread otherwise
(:func:`check_section`).
:func:`stale_files` lists committed files whose settings no longer equal their profile's
settings (``tests/test_run_results.py`` fails on them).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import hashlib
import json
import math
import re
import statistics
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

from replearn.neural import checkpoints
from replearn.book import results as results_lib
from replearn.backend import cpu_name, default_device
from replearn.experiments import results_sections
from replearn.book.seeds import check_seeds

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "book" / "results"
PROFILES = ("long", "paper", "gpu")


#: section -> its declaration (:class:`replearn.book.results.Section`: settings class, run, summary,
#: launch estimate, variant, run group), read from the drivers' ``RESULTS``
SECTIONS = results_sections()
#: sections whose settings are not their class's profile (``name(profile) -> settings``), run only when named
VARIANTS = {name: sec.variant for name, sec in SECTIONS.items() if sec.variant is not None}
#: what runs when no section is named
DEFAULT_SECTIONS = tuple(s for s in SECTIONS if s not in VARIANTS)


def section_settings(section: str, profile: str):
    """The settings ``section`` runs at ``profile``."""
    return SECTIONS[section].settings_at(profile)


def launch_line(section: str, profile: str) -> str:
    """The estimate printed before a section runs: client SGD steps, operator launches and the
    launch-bound seconds per seed on a GPU, clients batched and one after another."""
    s = section_settings(section, profile)
    work = SECTIONS[section].work
    fast, slow = work(s), work(s, batched=False)
    line = f"{profile} profile, per seed: {fast['steps']:,} client SGD steps, {fast['launches']:,} operator launches"
    if fast["batched_clients"] == 1:
        return f"{line} with one client at a time (about {fast['seconds']:.0f} s launch-bound on a GPU)"
    return (f"{line} with {fast['batched_clients']} clients batched (about {fast['seconds']:.0f} s launch-bound on "
            f"a GPU; {slow['seconds']:.0f} s one client at a time)")


def network_json(s) -> dict:
    """The resolved network of the settings by dataset (:meth:`replearn.neural.specs.NetworkSpec.record`:
    widths, not variant names), as a results file records it."""
    return {dataset: spec.record() for dataset, spec in s.networks().items()}


def settings_json(s) -> dict:
    """The settings dataclass as JSON values (tuples become lists), comparable with a file's."""
    return json.loads(json.dumps(dataclasses.asdict(s)))


#: /proc/cpuinfo flags that choose the kernels of torch, MKL and oneDNN (FMA contracts a*b+c into
#: one rounding; the vector width changes the order of a reduction's additions)
KERNEL_FLAGS = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                "amx_tile", "amx_bf16", "amx_int8", "asimd", "sve", "sve2")


def cpu_flags() -> list[str]:
    """The :data:`KERNEL_FLAGS` this CPU has (the ``flags`` or, on ARM, ``Features`` line of
    /proc/cpuinfo; an empty list where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                have = set(line.split(":", 1)[1].split())
                return [f for f in KERNEL_FLAGS if f in have]
    except OSError:
        pass
    return []


def _build_setting(name: str) -> str | None:
    match = re.search(rf"\b{name}=([^,\s]+)", torch.__config__.show())
    return match.group(1) if match else None


def arithmetic_fingerprint(dtype: str | None) -> dict:
    """What decides the bits of a run beyond the code and the settings: the CPU model and its kernel
    flags (:func:`cpu_flags`), torch's CPU capability (the vector kernels it dispatches to), torch's
    version and BLAS/LAPACK build, MKL, oneDNN and OpenMP, the thread count, the device (with the GPU,
    CUDA, cuDNN and TF32 switches on a GPU) and the settings' dtype. Two runs with the same code,
    settings and fingerprint are expected to agree bit for bit; with another fingerprint a float32
    run of thousands of SGD steps is not (another vector width sums in another order)."""
    device = default_device()
    fp = {"cpu": cpu_name(), "cpu_flags": cpu_flags(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
          "torch": torch.__version__, "blas": _build_setting("BLAS_INFO"), "lapack": _build_setting("LAPACK_INFO"),
          "mkl": torch.backends.mkl.is_available(), "mkldnn": torch.backends.mkldnn.is_available(),
          "openmp": torch.backends.openmp.is_available(), "threads": torch.get_num_threads(),
          "device": str(device), "dtype": None if dtype is None else str(dtype)}
    if device.type == "cuda":
        fp.update(gpu=torch.cuda.get_device_name(), cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version(),
                  tf32_matmul=torch.backends.cuda.matmul.allow_tf32, tf32_cudnn=torch.backends.cudnn.allow_tf32)
    return fp


def fingerprint_digest(fp: dict | None) -> str | None:
    """A short digest (12 hex digits of SHA-256 over the sorted JSON) of a fingerprint, or None."""
    if not isinstance(fp, dict):
        return None
    return hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()[:12]


def fingerprint_changes(recorded, now: dict) -> list[str]:
    """``"key recorded vs now"`` for every entry of two fingerprints that differs (a key only one of
    them has counts, shown as ``None``)."""
    return [f"{k} {recorded.get(k)!r} vs {now.get(k)!r}".replace("'", "")
            for k in sorted(set(recorded) | set(now)) if recorded.get(k) != now.get(k)]


def commit() -> str:
    """The current git commit (with ``-dirty`` when tracked files other than the results files
    differ from it), or ``unknown``. The results files are left out: a session that runs several
    sections one after another rewrites them, and they are this script's output, not its code."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                f":(exclude){RESULTS.relative_to(ROOT).as_posix()}"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


@functools.cache
def process_commit() -> str:
    """:func:`commit` when this process first asks, i.e. when its first section starts: the code it
    imported then is the code every section of the process runs, even if the checkout moves on
    during a run of hours."""
    return commit()


def read_json(path: Path, what: str, fix: str) -> dict:
    """The JSON object in ``path`` (a results file or a checkpoint); a file that cannot be read,
    is truncated or corrupt, or holds no JSON object is a ``ValueError`` naming it and ``fix``."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ValueError(f"{path} is not a readable {what} ({type(err).__name__}: {err}); {fix}") from err
    if not isinstance(record, dict):
        raise ValueError(f"{path} is not a {what}: it holds a JSON {type(record).__name__}, not an object; {fix}")
    return record


def _checkpoint(path: Path, section: str, seed: int, settings: dict) -> tuple[dict, float, dict | None] | None:
    """The result, wall time and arithmetic fingerprint (None in a checkpoint written before
    fingerprints) checkpointed in ``path`` for these settings (None when it was written for other
    settings); a corrupt checkpoint or one holding NaN/inf is a ValueError."""
    fix = f"delete it to re-run seed {seed} of section {section}"
    saved = read_json(path, "checkpoint of scripts/run_results.py", fix)
    if not {"settings", "result", "wall_s"} <= set(saved):
        raise ValueError(f"{path} is not a checkpoint of scripts/run_results.py (keys {sorted(saved)}, need "
                         f"settings, result and wall_s); {fix}")
    if saved["settings"] != settings:
        return None
    wall = saved["wall_s"]
    if isinstance(wall, bool) or not isinstance(wall, (int, float)) or not 0 <= wall < float("inf"):
        raise ValueError(f"{path}: wall_s must be a finite number of seconds >= 0, got {wall!r}; {fix}")
    bad = results_lib.nonfinite(saved["result"])
    if bad:
        raise ValueError(f"{path}: the checkpointed result holds NaN or infinite values at {bad[:5]}; {fix}")
    arithmetic = saved.get("arithmetic")
    return saved["result"], float(wall), arithmetic if isinstance(arithmetic, dict) else None


def run_section(section: str, profile: str, out: Path = RESULTS, *, settings=None) -> Path:
    """Run ``section`` at ``profile`` (``settings`` overrides the profile's, for tests), one
    checkpoint per seed, and write ``out/profile/section.json``; returns its path. A seed whose
    result holds NaN or infinite values stops the run (nothing of it is written), and so does
    a corrupt checkpoint (delete it to re-run its seed). The provenance records the
    :func:`arithmetic_fingerprint` (``arithmetic``) and its digest (``arithmetic_digest``); when
    the seeds ran under different fingerprints (a run resumed on another machine), both are None
    and ``arithmetic_by_seed`` holds each seed's (None: a checkpoint without one)."""
    if section not in SECTIONS:
        raise ValueError(f"unknown section {section!r}; use one of {tuple(SECTIONS)}")
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; use one of {PROFILES}")
    sec = SECTIONS[section]
    cls, run, summary = sec.settings, sec.run, sec.summary
    s = settings if settings is not None else section_settings(section, profile)
    check_seeds(s.seeds)
    code = process_commit()  # the code this process runs, not the commit checked out when the run ends
    folder = Path(out) / profile
    ckpt = folder / ".checkpoints"
    ckpt.mkdir(parents=True, exist_ok=True)
    per_seed, wall, arithmetic = {}, 0.0, {}
    here = arithmetic_fingerprint(getattr(s, "dtype", None))
    for seed in s.seeds:
        path = ckpt / f"{section}-seed{seed}.json"
        if path.is_file():
            saved = _checkpoint(path, section, seed, settings_json(s))
            if saved is not None:
                per_seed[str(seed)], wall, arithmetic[str(seed)] = saved[0], wall + saved[1], saved[2]
                continue
        start = time.perf_counter()
        group = sec.group
        runs = ckpt / f"{'+'.join(group)}-seed{seed}-runs"  # the seed's finished engine runs: a seed cut short resumes
        with checkpoints.resumable(runs):
            result = json.loads(json.dumps(summary(run(dataclasses.replace(s, seed=seed)))))
        elapsed = time.perf_counter() - start
        bad = results_lib.nonfinite(result)
        if bad:
            raise ValueError(f"section {section}, seed {seed}: the result holds NaN or infinite values at "
                             f"{bad[:5]}; nothing was written for this seed (fix the run, then re-run)")
        path.write_text(json.dumps({"settings": settings_json(s), "result": result, "wall_s": elapsed,
                                    "arithmetic": here}))
        if all((ckpt / f"{other}-seed{seed}.json").is_file() for other in group):
            shutil.rmtree(runs, ignore_errors=True)  # the group's seed checkpoints now hold its results
        per_seed[str(seed)], wall, arithmetic[str(seed)] = result, wall + elapsed, here
    prints = list(arithmetic.values())
    common = prints[0] if all(fp is not None and fp == prints[0] for fp in prints) else None
    record = {"section": section, "profile": profile, "settings_class": cls.__name__, "settings": settings_json(s),
              "network": network_json(s),
              "seeds": list(s.seeds), "results": per_seed, "provenance": {
                  "commit": code, "device": str(default_device()), "cpu": cpu_name(),
                  "threads": torch.get_num_threads(), "torch": torch.__version__,
                  "python": sys.version.split()[0],
                  "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "wall_s": round(wall, 1),
                  "arithmetic": common, "arithmetic_digest": fingerprint_digest(common)}}
    if common is None:
        record["provenance"]["arithmetic_by_seed"] = arithmetic
    target = folder / f"{section}.json"
    target.write_text(json.dumps(record, indent=1) + "\n")
    return target


def _committed(path: Path) -> results_lib.ResultsFile:
    """The results file at ``path`` (``<profile>/<section>.json``), read and checked by
    :func:`replearn.book.results.load`; a file of a section without a driver is a ValueError."""
    section, profile = path.stem, path.parent.name
    if section not in SECTIONS:
        raise ValueError(f"{path} is a results file of an unknown section {section!r} (sections with a driver: "
                         f"{tuple(SECTIONS)}); remove it or declare the section in its driver's RESULTS")
    if profile not in PROFILES:
        raise ValueError(f"{path} lies in the folder of an unknown profile {profile!r} (profiles: {PROFILES}); "
                         f"move or remove it")
    return results_lib.load(section, profile, path.parent.parent)


#: settings fields whose only effect is the resolved network, which a results file records and
#: :func:`staleness` compares on its own: a file recorded before such a field existed lacks it, and
#: its recorded network decides (``authors_dropout``: a file without it ran without dropout, and its
#: network says so)
NETWORK_ONLY_FIELDS = ("authors_dropout",)


def staleness(path: Path, rf: results_lib.ResultsFile) -> list[str]:
    """What of the results file ``rf`` (read from ``path``) differs from its profile's current
    settings: ``"settings"`` (:func:`settings_json`; a field of :data:`NETWORK_ONLY_FIELDS` that
    the file lacks is left out) and/or ``"network"`` (the resolved network, :func:`network_json`);
    empty when the file is current. :func:`stale_files` and :func:`check_section` both ask it, so
    they call the same files stale."""
    now = section_settings(rf.section, rf.profile)
    recorded = json.loads(path.read_text()).get("network")
    settings = {k: v for k, v in settings_json(now).items() if k in rf.settings or k not in NETWORK_ONLY_FIELDS}
    return [what for what, differs in (("settings", rf.settings != settings),
                                       ("network", recorded != network_json(now))) if differs]


def stale_files(out: Path = RESULTS) -> list[str]:
    """Results files whose settings or resolved network differ from their profile's current
    ones (:func:`staleness`; a file that is corrupt, names another section or profile than its
    path, or belongs to no known section is a ValueError naming it)."""
    return [str(path) for path in sorted(Path(out).glob("*/*.json")) if staleness(path, _committed(path))]


def differences(now, committed, path: str = "") -> list[tuple[str, object, object]]:
    """``(where, committed value, new value)`` for every leaf of two JSON results that differs."""
    if isinstance(now, dict) and isinstance(committed, dict):
        keys = sorted(set(now) | set(committed))
        return [d for k in keys for d in differences(now.get(k), committed.get(k), f"{path}/{k}")]
    if isinstance(now, list) and isinstance(committed, list) and len(now) == len(committed):
        return [d for i, (a, b) in enumerate(zip(now, committed)) for d in differences(a, b, f"{path}[{i}]")]
    return [] if now == committed else [(path or "/", committed, now)]


#: the tolerance check (:func:`check_section`, another or an unknown arithmetic fingerprint): each
#: float of the re-run seed within ``SPREAD_K`` times the larger of its own sd over the file's seeds
#: and the file's pooled sd (the root mean square of those sds), and never under ``SPREAD_FLOOR``
SPREAD_K = 3.0
SPREAD_FLOOR = 0.01
#: a file with one seed has no spread over seeds: each float within this absolute tolerance
ONE_SEED_TOLERANCE = 0.03
#: keys whose lists hold one value per client (one client's accuracy moves by whole test samples):
#: the tolerance check compares such a list by its mean
PER_CLIENT_KEYS = ("client_accuracy",)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def leaves(node, path: str = "", per_client: bool = False) -> dict:
    """``{key path: value}`` of every leaf of a JSON result, a list of numbers under one of
    :data:`PER_CLIENT_KEYS` collapsed to one ``<path> (mean of N clients)`` leaf."""
    if isinstance(node, dict):
        return {p: v for k, sub in node.items()
                for p, v in leaves(sub, f"{path}/{k}", per_client or k in PER_CLIENT_KEYS).items()}
    if isinstance(node, list):
        if per_client and node and all(_number(v) for v in node):
            return {f"{path} (mean of {len(node)} clients)": statistics.fmean(node)}
        return {p: v for i, sub in enumerate(node) for p, v in leaves(sub, f"{path}[{i}]", per_client).items()}
    return {path or "/": node}


def seed_tolerance(record: results_lib.ResultsFile):
    """``(tolerance(path), statement)``: the tolerance of each float leaf (:func:`leaves`) in the
    tolerance check, from the file's own spread over seeds (:data:`SPREAD_K`, :data:`SPREAD_FLOOR`;
    :data:`ONE_SEED_TOLERANCE` for a file with one seed), and the sentence that states it."""
    flats = [leaves(record.results[str(k)]) for k in record.seeds]
    if len(flats) < 2:
        return (lambda path: ONE_SEED_TOLERANCE), (
            f"each float within {ONE_SEED_TOLERANCE:g} (the file has one seed, so no spread over seeds); "
            f"per-client lists by their mean; every other value exactly")
    sd = {}
    for path in flats[0]:
        vals = [f.get(path) for f in flats]
        if all(_number(v) for v in vals) and any(isinstance(v, float) for v in vals):
            sd[path] = statistics.stdev(vals)
    pooled = math.sqrt(statistics.fmean(v * v for v in sd.values())) if sd else 0.0

    def tolerance(path: str) -> float:
        return max(SPREAD_K * max(sd.get(path, 0.0), pooled), SPREAD_FLOOR)

    return tolerance, (f"each float within max({SPREAD_K:g} x its sd over the file's {len(flats)} seeds, "
                       f"{SPREAD_K:g} x their pooled sd {pooled:.3g}, {SPREAD_FLOOR:g}); per-client lists by "
                       f"their mean; every other value exactly")


def _recorded_fingerprint(provenance: dict, seed: int):
    by_seed = provenance.get("arithmetic_by_seed")
    if isinstance(by_seed, dict) and str(seed) in by_seed:
        return by_seed[str(seed)]
    return provenance.get("arithmetic")


def help_section(section: str, profile: str, out: Path = RESULTS, *, check: bool = False,
                 seed: int | None = None) -> int:
    """``--helper``: train every seed of ``section`` at ``profile`` with its rows (``methods``) in the
    reverse order, into the engine-run store that :func:`run_section` uses, and write nothing else;
    the number of seeds helped. A seed whose results are already checkpointed is skipped. With
    ``check`` (``--helper --check``): the one seed :func:`check_section` re-runs (``seed``, default
    the committed file's first), into its store (:func:`check_store`)."""
    sec = SECTIONS[section]
    s = section_settings(section, profile)
    if not getattr(s, "methods", None):
        raise ValueError(f"section {section} lists no rows (its settings have no 'methods'); --helper "
                         f"trains a section's rows from the end, so it cannot help this one")
    ckpt = Path(out) / profile / ".checkpoints"
    if check:
        record = _committed(Path(out) / profile / f"{section}.json")
        seed = record.seeds[0] if seed is None else seed
        with checkpoints.resumable(check_store(section, profile, out, seed)):
            sec.run(dataclasses.replace(s, seed=seed, methods=tuple(reversed(s.methods))))
        return 1
    helped = 0
    for seed in s.seeds:
        if (ckpt / f"{section}-seed{seed}.json").is_file():
            continue
        with checkpoints.resumable(ckpt / f"{'+'.join(sec.group)}-seed{seed}-runs"):
            sec.run(dataclasses.replace(s, seed=seed, methods=tuple(reversed(s.methods))))
        helped += 1
    return helped


def check_store(section: str, profile: str, out: Path, seed: int) -> Path:
    """The engine-run store of :func:`check_section`'s re-run of ``seed``: apart from the store that
    wrote the file (a check recomputes, it does not reload the original runs), so that a check cut
    short resumes from the runs it finished and a ``--helper --check`` can train the rows from the
    end beside it; deleted when the check is done. Its keys are everything a run depends on but the
    engine's own code: after changing the engine, delete it."""
    return Path(out) / profile / ".checkpoints" / f"{section}-check-seed{seed}-runs"


def check_section(section: str, profile: str, out: Path = RESULTS, *, seed: int | None = None) -> dict:
    """Re-run one seed (default: the first) of the committed ``out/profile/section.json`` with the
    current code and compare it with the committed result. A file whose settings or recorded
    network differ from the profile's (:func:`staleness`, as :func:`stale_files`) is a
    ValueError: it is not a run of these settings.

    Where this machine's :func:`arithmetic_fingerprint` equals the one the file records for that
    seed, the comparison is bit for bit: any difference fails. Elsewhere (another fingerprint, or
    none recorded: ``fingerprint unknown``) float32 runs are not bit-portable, and the comparison
    is a tolerance check (:func:`seed_tolerance`): each float within 3 x the larger of its own sd
    over the file's seeds and the file's pooled sd, at least 0.01 (a file with one seed: within
    0.03); a per-client list by its mean; every integer, string and the result's shape exactly.

    The re-run trains inside its own engine-run store (:func:`check_store`), so a check cut short
    resumes and ``--helper --check`` can train the rows from the end beside it.

    Returns ``seed``, ``wall_s``, ``differences`` (every leaf that differs, :func:`differences`;
    empty: re-derived bit for bit), ``mode`` (``"exact"`` or ``"tolerance"``), ``reason`` (which
    comparison and why), ``tolerance`` (its statement, None when exact), ``failures`` (``(where,
    committed, now, tolerance)`` that fail the comparison; empty: the check passes) and
    ``largest`` (the float difference nearest its tolerance, or None)."""
    if section not in SECTIONS:
        raise ValueError(f"unknown section {section!r}; use one of {tuple(SECTIONS)}")
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; use one of {PROFILES}")
    path = Path(out) / profile / f"{section}.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; run `make results PROFILE={profile}` first")
    record = _committed(path)
    sec = SECTIONS[section]
    run, summary = sec.run, sec.summary
    s = section_settings(section, profile)
    stale = staleness(path, record)
    if stale:
        raise ValueError(f"{path} is stale (its {' and '.join(stale)} differ{'s' * (len(stale) == 1)} from the "
                         f"{profile} profile's); re-run the section")
    seed = record.seeds[0] if seed is None else seed
    if isinstance(seed, bool) or not isinstance(seed, int) or str(seed) not in record.results:
        raise ValueError(f"seed {seed!r} is not in {path} (its seeds: {list(record.seeds)}); pass one of them")
    now_fp = arithmetic_fingerprint(getattr(s, "dtype", None))
    then_fp = _recorded_fingerprint(record.provenance, seed)
    if not isinstance(then_fp, dict):
        mode, reason = "tolerance", "fingerprint unknown (the file records none for this seed) -> tolerance check"
    elif then_fp == now_fp:
        mode, reason = "exact", f"fingerprint matches ({fingerprint_digest(now_fp)}) -> bit-for-bit check"
    else:
        changes = "; ".join(fingerprint_changes(then_fp, now_fp))
        mode, reason = "tolerance", f"fingerprint differs: {changes} -> tolerance check"
    start = time.perf_counter()
    store = check_store(section, profile, out, seed)
    with checkpoints.resumable(store):
        result = json.loads(json.dumps(summary(run(dataclasses.replace(s, seed=seed)))))
    shutil.rmtree(store, ignore_errors=True)
    wall = time.perf_counter() - start
    committed = record.results[str(seed)]
    report = {"seed": seed, "wall_s": wall, "differences": differences(result, committed), "mode": mode,
              "reason": reason, "tolerance": None, "failures": [], "largest": None}
    if mode == "exact":
        report["failures"] = [(where, old, new, None) for where, old, new in report["differences"]]
        return report
    tolerance, report["tolerance"] = seed_tolerance(record)
    now, then = leaves(result), leaves(committed)
    worst = -1.0
    for where in sorted(set(now) | set(then)):
        old, new = then.get(where), now.get(where)
        if _number(old) and _number(new) and (isinstance(old, float) or isinstance(new, float)):
            tol = tolerance(where)
            if abs(new - old) > tol:
                report["failures"].append((where, old, new, tol))
            if new != old and abs(new - old) / tol > worst:
                worst, report["largest"] = abs(new - old) / tol, (where, old, new, tol)
        elif where not in now or where not in then or old != new:
            report["failures"].append((where, old, new, None))
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", required=True, choices=PROFILES)
    parser.add_argument("sections", nargs="*", help=f"sections to run (default: {', '.join(DEFAULT_SECTIONS)}; "
                                                    f"also {', '.join(VARIANTS)})")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--check", action="store_true",
                        help="re-run one seed of each committed file and compare instead of writing files")
    parser.add_argument("--seed", type=int, default=None, help="with --check: the seed (default: the file's first)")
    parser.add_argument("--helper", action="store_true",
                        help="beside a running section: train its rows from the end into the same engine-run "
                             "store, writing no results file (a second core); with --check, beside a running "
                             "check of it")
    args = parser.parse_args(argv)
    if args.seed is not None and not args.check:
        parser.error("--seed only chooses the seed that --check re-runs; add --check, or drop --seed (a run "
                     "writes every seed of the profile's settings)")
    unknown = [s for s in args.sections if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {unknown}; use some of {', '.join(SECTIONS)}")
    if args.helper and not args.sections:
        parser.error("--helper helps the sections it names (run beside their main process, or beside their "
                     "--check with --check)")
    failed = 0
    for section in args.sections or list(DEFAULT_SECTIONS):
        if args.helper:
            helped = help_section(section, args.profile, args.out, check=args.check, seed=args.seed)
            print(f"{section}: helped {helped} seed(s){' of its check' * args.check}", flush=True)
            continue
        if not args.check:
            print(f"{section}: {launch_line(section, args.profile)}", flush=True)
            print(f"{section}: wrote {run_section(section, args.profile, args.out)}", flush=True)
            continue
        c = check_section(section, args.profile, args.out, seed=args.seed)
        n = len(c["differences"])
        if not n:
            verdict = "re-derived bit for bit"
        elif c["mode"] == "exact":
            verdict = f"{n} values differ (the fingerprint matches, so none should)"
        elif c["failures"]:
            verdict = f"{n} values differ, {len(c['failures'])} beyond the tolerance"
        else:
            verdict = f"{n} values differ, all within the tolerance"
        print(f"{section}, seed {c['seed']}: {c['reason']}", flush=True)
        print(f"{section}, seed {c['seed']}: {verdict} ({c['wall_s']:.0f} s, {torch.get_num_threads()} threads)",
              flush=True)
        if c["mode"] == "tolerance" and n:
            print(f"    tolerance: {c['tolerance']}")
            if c["largest"] is not None:
                where, old, new, tol = c["largest"]
                print(f"    nearest its tolerance: {where}: committed {old!r}, now {new!r} (|difference| "
                      f"{abs(new - old):.3g}, tolerance {tol:.3g})")
        for where, old, new, tol in c["failures"][:10]:
            bound = f" (tolerance {tol:.3g})" if tol is not None else ""
            print(f"    {where}: committed {old!r}, now {new!r}{bound}")
        failed += bool(c["failures"])
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
