"""Run the neural sections' drivers at a larger profile and write results files with provenance.

    python scripts/run_results.py --profile long            # every section, CPU (20-90 min each on one core)
    python scripts/run_results.py --profile paper 4.7 5.7   # chosen sections, the papers' settings (GPU)
    python scripts/run_results.py --profile long --check 5.9  # re-run one seed, compare with the committed file
    python scripts/run_results.py --profile long 5.7-seeds    # 5.7's six main methods over seeds 1 and 2

``make results PROFILE=long|paper`` calls this. For each section the driver runs once per seed of
the profile's settings (:meth:`replearn.profiles.Settings.profile`); every finished seed is
checkpointed under ``<out>/<profile>/.checkpoints/``, so an interrupted run resumes where it
stopped; within a seed, every finished engine run is stored there too
(:func:`replearn.checkpoints.resumable`), so a seed cut short resumes from the runs it finished
(its recorded wall time then counts only the runs computed after the restart). When all seeds are done, ``<out>/<profile>/<section>.json`` holds the per-seed results
and their provenance: commit, settings, seeds, device, torch version, date and wall time.
:func:`stale_files` lists committed files whose settings no longer equal their profile's
settings (``tests/test_run_results.py`` fails on them).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import json
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

from replearn import checkpoints
from replearn import results as results_lib
from replearn.backend import default_device
from replearn.experiments.ch04_fedavg import s07_feature_similarity as s47
from replearn.experiments.ch04_fedavg import s08_transfer as s48
from replearn.experiments.ch04_fedavg import s09_cka as s49
from replearn.experiments.ch05_fedrep import s07_cifar_personalisation as s57
from replearn.experiments.ch05_fedrep import s08_local_epochs as s58
from replearn.experiments.ch05_fedrep import s09_new_clients_cifar as s59
from replearn.seeds import check_seeds

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "book" / "results"
PROFILES = ("long", "paper", "gpu")


def _floats(t) -> list:
    return [float(v) for v in torch.as_tensor(t).flatten().tolist()]


def _similarity(r: s47.SimilarityResult) -> dict:
    return {"gap": {str(t): r.gap[t] for t in r.taus}, "intra": {str(t): r.intra(t) for t in r.taus},
            "inter": {str(t): r.inter(t) for t in r.taus}, "probe_accuracy": {str(t): r.probe_accuracy[t] for t in r.taus},
            "client_accuracy": {str(t): r.client_accuracy[t] for t in r.taus}}


def _transfer(r: s48.TransferResult) -> dict:
    return {"pretrain_accuracy": {str(t): v for t, v in r.pretrain_accuracy.items()},
            "samples": {k: list(v) for k, v in r.samples.items()},
            "mean_accuracy": {f"{target}/{tau}": _floats(r.mean(target, tau)) for target, tau in r.accuracy}}


def _cka(r: s49.CKALayerResult) -> dict:
    return {"layers": list(r.layers), "before_after": {str(t): _floats(r.mean(t)) for t in r.before_after},
            "between": _floats(r.between), "ft_accuracy": {str(t): v for t, v in r.ft_accuracy.items()},
            "pretrain_accuracy": {str(t): v for t, v in r.pretrain_accuracy.items()}}


def _table(r: s57.TableResult) -> dict:
    key = {p: "/".join(map(str, p)) for p in r.partitions}
    return {"accuracy": {key[p]: dict(r.accuracy[p]) for p in r.partitions},
            "client_accuracy": {key[p]: {m: _floats(v) for m, v in r.client_accuracy[p].items()}
                                for p in r.partitions}}


def _epochs(r: s58.EpochResult) -> dict:
    return {"epochs": list(r.epochs), "accuracy": {m: _floats(v) for m, v in r.accuracy.items()}}


def _new_clients(r: s59.NewClientResult) -> dict:
    return {"new_classes": list(r.new_classes), "accuracy": {m: _floats(v) for m, v in r.accuracy.items()},
            "trained": dict(r.trained)}


#: section -> (settings class, driver, summary of one seed's result as JSON-able dict)
SECTIONS = {
    "4.7": (s47.SimilaritySettings, s47.run_similarity, _similarity),
    "4.8": (s48.TransferSettings, s48.run_transfer, _transfer),
    "4.9": (s49.CKASettings, s49.run_cka, _cka),
    "5.7": (s57.TableSettings, s57.run_table, _table),
    "5.8": (s58.EpochSettings, s58.run_epochs, _epochs),
    "5.9": (s59.NewClientSettings, s59.run_new_clients, _new_clients),
    "5.7-seeds": (s57.TableSettings, s57.run_table, _table),
}
#: sections whose settings are not their class's profile (``name(profile) -> settings``): 5.7's six
#: main methods over seeds 1 and 2, beside 5.7's one-seed run of all 15; run only when named.
VARIANTS = {"5.7-seeds": s57.TableSettings.more_seeds}
#: what runs when no section is named
DEFAULT_SECTIONS = tuple(s for s in SECTIONS if s not in VARIANTS)


def section_settings(section: str, profile: str):
    """The settings ``section`` runs at ``profile``."""
    return VARIANTS[section](profile) if section in VARIANTS else SECTIONS[section][0].profile(profile)


#: sections whose seeds share engine runs (4.8 and 4.9: the same pre-training per seed) keep them in
#: one folder per seed, ``<group>-seed<N>-runs``, until every section of the group has finished that
#: seed, so that the second section reuses the first one's runs even in another process.
RUN_GROUPS = {"4.8": ("4.8", "4.9"), "4.9": ("4.8", "4.9")}


#: section -> the driver's launch estimate of one seed (:func:`replearn.scales.launch_estimate`)
WORK = {"4.7": s47.work, "4.8": s48.work, "4.9": s49.work, "5.7": s57.work, "5.8": s58.work, "5.9": s59.work,
        "5.7-seeds": s57.work}


def launch_line(section: str, profile: str) -> str:
    """The estimate printed before a section runs: client SGD steps, operator launches and the
    launch-bound seconds per seed on a GPU, clients batched and one after another."""
    s = section_settings(section, profile)
    fast, slow = WORK[section](s), WORK[section](s, batched=False)
    line = f"{profile} profile, per seed: {fast['steps']:,} client SGD steps, {fast['launches']:,} operator launches"
    if fast["batched_clients"] == 1:
        return f"{line} with one client at a time (about {fast['seconds']:.0f} s launch-bound on a GPU)"
    return (f"{line} with {fast['batched_clients']} clients batched (about {fast['seconds']:.0f} s launch-bound on "
            f"a GPU; {slow['seconds']:.0f} s one client at a time)")


def network_json(s) -> dict:
    """The resolved network of the settings by dataset (:meth:`replearn.specs.NetworkSpec.record`:
    widths, not variant names), as a results file records it."""
    return {dataset: spec.record() for dataset, spec in s.networks().items()}


def settings_json(s) -> dict:
    """The settings dataclass as JSON values (tuples become lists), comparable with a file's."""
    return json.loads(json.dumps(dataclasses.asdict(s)))


def cpu_name() -> str:
    """The CPU model (from /proc/cpuinfo where there is one)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def commit() -> str:
    """The current git commit (with ``-dirty`` when tracked files differ from it), or ``unknown``."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
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


def _checkpoint(path: Path, section: str, seed: int, settings: dict) -> tuple[dict, float] | None:
    """The result and wall time checkpointed in ``path`` for these settings (None when it was
    written for other settings); a corrupt checkpoint or one holding NaN/inf is a ValueError."""
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
    return saved["result"], float(wall)


def run_section(section: str, profile: str, out: Path = RESULTS, *, settings=None) -> Path:
    """Run ``section`` at ``profile`` (``settings`` overrides the profile's, for tests), one
    checkpoint per seed, and write ``out/profile/section.json``; returns its path. A seed whose
    result holds NaN or infinite values stops the run (nothing of it is written), and so does
    a corrupt checkpoint (delete it to re-run its seed)."""
    if section not in SECTIONS:
        raise ValueError(f"unknown section {section!r}; use one of {tuple(SECTIONS)}")
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; use one of {PROFILES}")
    cls, run, summary = SECTIONS[section]
    s = settings if settings is not None else section_settings(section, profile)
    check_seeds(s.seeds)
    code = process_commit()  # the code this process runs, not the commit checked out when the run ends
    folder = Path(out) / profile
    ckpt = folder / ".checkpoints"
    ckpt.mkdir(parents=True, exist_ok=True)
    per_seed, wall = {}, 0.0
    for seed in s.seeds:
        path = ckpt / f"{section}-seed{seed}.json"
        if path.is_file():
            saved = _checkpoint(path, section, seed, settings_json(s))
            if saved is not None:
                per_seed[str(seed)], wall = saved[0], wall + saved[1]
                continue
        start = time.perf_counter()
        group = RUN_GROUPS.get(section, (section,))
        runs = ckpt / f"{'+'.join(group)}-seed{seed}-runs"  # the seed's finished engine runs: a seed cut short resumes
        with checkpoints.resumable(runs):
            result = json.loads(json.dumps(summary(run(dataclasses.replace(s, seed=seed)))))
        elapsed = time.perf_counter() - start
        bad = results_lib.nonfinite(result)
        if bad:
            raise ValueError(f"section {section}, seed {seed}: the result holds NaN or infinite values at "
                             f"{bad[:5]}; nothing was written for this seed (fix the run, then re-run)")
        path.write_text(json.dumps({"settings": settings_json(s), "result": result, "wall_s": elapsed}))
        if all((ckpt / f"{other}-seed{seed}.json").is_file() for other in group):
            shutil.rmtree(runs, ignore_errors=True)  # the group's seed checkpoints now hold its results
        per_seed[str(seed)], wall = result, wall + elapsed
    record = {"section": section, "profile": profile, "settings_class": cls.__name__, "settings": settings_json(s),
              "network": network_json(s),
              "seeds": list(s.seeds), "results": per_seed, "provenance": {
                  "commit": code, "device": str(default_device()), "cpu": cpu_name(),
                  "threads": torch.get_num_threads(), "torch": torch.__version__,
                  "python": sys.version.split()[0],
                  "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "wall_s": round(wall, 1)}}
    target = folder / f"{section}.json"
    target.write_text(json.dumps(record, indent=1) + "\n")
    return target


def _committed(path: Path) -> results_lib.ResultsFile:
    """The results file at ``path`` (``<profile>/<section>.json``), read and checked by
    :func:`replearn.results.load`; a file of a section without a driver is a ValueError."""
    section, profile = path.stem, path.parent.name
    if section not in SECTIONS:
        raise ValueError(f"{path} is a results file of an unknown section {section!r} (sections with a driver: "
                         f"{tuple(SECTIONS)}); remove it or add its driver to SECTIONS")
    if profile not in PROFILES:
        raise ValueError(f"{path} lies in the folder of an unknown profile {profile!r} (profiles: {PROFILES}); "
                         f"move or remove it")
    return results_lib.load(section, profile, path.parent.parent)


def stale_files(out: Path = RESULTS) -> list[str]:
    """Results files whose settings or resolved network (:func:`network_json`) differ from their
    profile's current ones (a file that
    is corrupt, names another section or profile than its path, or belongs to no known
    section is a ValueError naming it)."""
    stale = []
    for path in sorted(Path(out).glob("*/*.json")):
        rf = _committed(path)
        now = section_settings(rf.section, rf.profile)
        recorded = json.loads(path.read_text()).get("network")
        if rf.settings != settings_json(now) or recorded != network_json(now):
            stale.append(str(path))
    return stale


def differences(now, committed, path: str = "") -> list[tuple[str, object, object]]:
    """``(where, committed value, new value)`` for every leaf of two JSON results that differs."""
    if isinstance(now, dict) and isinstance(committed, dict):
        keys = sorted(set(now) | set(committed))
        return [d for k in keys for d in differences(now.get(k), committed.get(k), f"{path}/{k}")]
    if isinstance(now, list) and isinstance(committed, list) and len(now) == len(committed):
        return [d for i, (a, b) in enumerate(zip(now, committed)) for d in differences(a, b, f"{path}[{i}]")]
    return [] if now == committed else [(path or "/", committed, now)]


def check_section(section: str, profile: str, out: Path = RESULTS, *, seed: int | None = None) -> dict:
    """Re-run one seed (default: the first) of the committed ``out/profile/section.json`` with the
    current code and compare it with the committed result; returns the seed, the wall time and
    the list of :func:`differences` (empty: the committed result re-derives bit for bit)."""
    if section not in SECTIONS:
        raise ValueError(f"unknown section {section!r}; use one of {tuple(SECTIONS)}")
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; use one of {PROFILES}")
    path = Path(out) / profile / f"{section}.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist; run `make results PROFILE={profile}` first")
    record = _committed(path)
    cls, run, summary = SECTIONS[section]
    s = section_settings(section, profile)
    if record.settings != settings_json(s):
        raise ValueError(f"{path} is stale (its settings differ from the {profile} profile's); re-run the section")
    seed = record.seeds[0] if seed is None else seed
    if isinstance(seed, bool) or not isinstance(seed, int) or str(seed) not in record.results:
        raise ValueError(f"seed {seed!r} is not in {path} (its seeds: {list(record.seeds)}); pass one of them")
    start = time.perf_counter()
    result = summary(run(dataclasses.replace(s, seed=seed)))
    return {"seed": seed, "wall_s": time.perf_counter() - start,
            "differences": differences(json.loads(json.dumps(result)), record.results[str(seed)])}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", required=True, choices=PROFILES)
    parser.add_argument("sections", nargs="*", help=f"sections to run (default: {', '.join(DEFAULT_SECTIONS)}; "
                                                    f"also {', '.join(VARIANTS)})")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--check", action="store_true",
                        help="re-run one seed of each committed file and compare instead of writing files")
    parser.add_argument("--seed", type=int, default=None, help="with --check: the seed (default: the file's first)")
    args = parser.parse_args(argv)
    if args.seed is not None and not args.check:
        parser.error("--seed only chooses the seed that --check re-runs; add --check, or drop --seed (a run "
                     "writes every seed of the profile's settings)")
    unknown = [s for s in args.sections if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {unknown}; use some of {', '.join(SECTIONS)}")
    failed = 0
    for section in args.sections or list(DEFAULT_SECTIONS):
        if not args.check:
            print(f"{section}: {launch_line(section, args.profile)}", flush=True)
            print(f"{section}: wrote {run_section(section, args.profile, args.out)}", flush=True)
            continue
        c = check_section(section, args.profile, args.out, seed=args.seed)
        verdict = "re-derived bit for bit" if not c["differences"] else f"{len(c['differences'])} values differ"
        print(f"{section}, seed {c['seed']}: {verdict} ({c['wall_s']:.0f} s, {torch.get_num_threads()} threads)",
              flush=True)
        for where, old, new in c["differences"][:10]:
            print(f"    {where}: committed {old!r}, now {new!r}")
        failed += bool(c["differences"])
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
