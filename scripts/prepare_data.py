"""Put the CIFAR subsets the book was executed on into the data directory (``make data``).

Usage: python scripts/prepare_data.py [--preflight] [--data DIR] [--archives DIR] [--mirror URL]

The CIFAR sections (4.7-4.9, 5.7-5.9) read ``cifar10_subset.npz`` / ``cifar100_subset.npz`` from
the data directory ``DIR`` (default: ``$REPLEARN_DATA``, else ``~/.cache/replearn``, as
``replearn.neural.data.data_root``), and their stored outputs were computed on exactly these files.
``make test`` runs ``make data`` before any test or notebook, which runs this script:

* both subsets in ``DIR``: each is checked against the SHA-256 recorded in
  ``scripts/cifar_subsets.sha256`` (a file whose bytes differ, e.g. written with another zlib,
  passes if its content has the digest recorded in ``replearn.neural.data.SUBSET_DIGESTS``); done.
* a subset missing: the official python-pickle archive (https://www.cs.toronto.edu/~kriz/cifar.html,
  163 / 161 MB) is downloaded into ``ARCHIVES`` (default ``DIR/archives``) and md5-checked; the
  subset is rebuilt from it with ``replearn.neural.data.make_subsets`` (the recorded official positions;
  content digest checked) and written into ``DIR`` byte for byte as the shipped file (SHA-256
  checked against ``scripts/cifar_subsets.sha256``). The extracted archive is removed again, so
  ``DIR`` holds only the subsets (with the extracted archive there, the full dataset would be
  served, on which the stored outputs differ).
* a subset missing and the archives cannot be reached (no network): it stops at once, with one
  message that names the two ways to get the data (download, or ``REPLEARN_DATA``).

``--preflight`` uses the standard library only (``make`` runs it before the virtual environment
is set up, so that a machine without the data and without a network stops in seconds): it checks
that the subsets are there, or that the archives are in ``ARCHIVES`` with their official md5 (a
partial or empty download is no archive) or can be downloaded, and prints the message
otherwise. ``--probe-timeout`` must be a positive number of seconds. ``--mirror URL`` downloads ``URL/cifar-10-python.tar.gz`` ... instead (a local copy of
the official archives; their md5 is checked all the same).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import os
import shutil
import sys
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: SHA-256 of the subset files the book's notebooks were executed with (the shipped files).
SUMS_FILE = HERE / "cifar_subsets.sha256"
OFFICIAL_BASE = "https://www.cs.toronto.edu/~kriz/"
NAMES = ("cifar10", "cifar100")
#: What this script needs of ``replearn.neural.data.datasets.SPECS`` (repeated so that --preflight
#: needs no numpy).
SPECS = {
    "cifar10": dict(title="CIFAR-10", subset="cifar10_subset.npz", archive="cifar-10-python.tar.gz",
                    folder="cifar-10-batches-py", md5="c58f30108f718f92721af3b95e74349a", size_mb=163),
    "cifar100": dict(title="CIFAR-100", subset="cifar100_subset.npz", archive="cifar-100-python.tar.gz",
                     folder="cifar-100-python", md5="eb9058c3a382ffc7106e4002c42a8d85", size_mb=161),
}
#: Member order of the shipped npz files: writing the arrays in this order with
#: ``replearn.neural.data``'s zip settings (deflate, fixed 1980 timestamps) gives the shipped bytes.
MEMBER_ORDER = {
    "cifar10": ("x_train", "y_train", "x_test", "y_test", "class_names", "train_index", "test_index"),
    "cifar100": ("x_train", "y_train", "y_train_coarse", "x_test", "y_test", "y_test_coarse",
                 "class_names", "coarse_class_names", "train_index", "test_index"),
}


class DataError(RuntimeError):
    """The data cannot be prepared; the message says why and what to do."""


def data_dir(arg: str | None = None) -> Path:
    """``arg``, else ``$REPLEARN_DATA``, else ``~/.cache/replearn`` (``replearn.neural.data.data_root``)."""
    if arg:
        return Path(arg).expanduser()
    env = os.environ.get("REPLEARN_DATA", "").strip()
    return Path(env).expanduser() if env else Path.home() / ".cache" / "replearn"


def read_sums(path: Path = SUMS_FILE) -> dict[str, str]:
    """``{file name: sha256}`` from a ``sha256sum``-style file."""
    sums = {}
    for line in path.read_text().splitlines():
        if line.strip():
            digest, name = line.split()
            sums[name.lstrip("*")] = digest
    return sums


def sha256(path: Path, algorithm: str = "sha256") -> str:
    """The hex digest of ``path``'s bytes (``algorithm``: ``"sha256"``, or ``"md5"`` for the archives)."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def official_sources(mirror: str | None = None) -> dict[str, tuple[str, str]]:
    """``{name: (url, md5)}`` of the official archives (or of their copies under ``mirror``)."""
    base = (mirror or OFFICIAL_BASE).rstrip("/") + "/"
    return {n: (base + SPECS[n]["archive"], SPECS[n]["md5"]) for n in NAMES}


def no_data_message(root: Path, missing, reason: str) -> str:
    files = " and ".join(SPECS[n]["subset"] for n in missing)
    return (
        f"No CIFAR data for the book: {files} {'is' if len(missing) == 1 else 'are'} not in {root}, "
        f"and the official archives cannot be downloaded ({reason}). The CIFAR sections (4.7-4.9, "
        f"5.7-5.9) need these subsets: their stored outputs were computed on them. Get them in one "
        f"of two ways, then run the command again:\n"
        f"  1. download: run `make data` (or `make test`, which runs it first) with network access; it "
        f"downloads the official CIFAR-10/100 archives (163 + 161 MB, md5-checked) from "
        f"{OFFICIAL_BASE}cifar.html and rebuilds the exact subsets into {root} (SHA-256-checked);\n"
        f"  2. or set REPLEARN_DATA to a folder that already holds cifar10_subset.npz and "
        f"cifar100_subset.npz, e.g. `REPLEARN_DATA=/path/to/subsets make test`.\n"
        f"README, section \"Data\", explains both.")


def full_dataset_message(root: Path, names) -> str:
    folders = ", ".join(SPECS[n]["folder"] + "/" for n in names)
    return (f"{root} holds the extracted official archive ({folders}), so replearn.neural.data.load_cifar serves "
            f"the full dataset there, while the book's stored outputs were computed on the offline subsets "
            f"(strict nbval of the CIFAR sections would fail). Set REPLEARN_DATA to another folder: one that "
            f"holds cifar10_subset.npz and cifar100_subset.npz, or an empty one that `make data` fills.")


def probe(url: str, timeout: float) -> str | None:
    """None if ``url`` answers (its headers are read, the body is not), else the reason it does not."""
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return None
    except Exception as exc:  # URLError, HTTPError, socket timeout, ...
        return f"{url}: {exc}"


def root_label(root: Path) -> str:
    """``root`` as the reader set it, for messages: ``REPLEARN_DATA=<path>`` when the variable
    names it, else ``the data directory <path>``."""
    env = os.environ.get("REPLEARN_DATA", "").strip()
    return f"REPLEARN_DATA={root}" if env and Path(env).expanduser() == root else f"the data directory {root}"


def _is_not_a_folder(path: Path) -> bool:
    """``path`` exists but is no directory (a file, or a link to one)."""
    return path.exists() and not path.is_dir()


def check_kinds(root: Path, archives: Path | None = None) -> None:
    """Raise :class:`DataError` when a path ``make data`` reads or writes exists as the wrong kind:
    ``root`` or ``archives`` a file, a subset file or a downloaded archive a directory."""
    if _is_not_a_folder(root):
        own = (f" {root.name} is one of the subset files itself: set REPLEARN_DATA={root.parent} if that "
               f"folder holds both." if root.name in {s["subset"] for s in SPECS.values()} else "")
        raise DataError(f"{root_label(root)} is a file, not a directory: point REPLEARN_DATA (or --data) "
                        f"at the folder that holds cifar10_subset.npz and cifar100_subset.npz, or at an "
                        f"empty or new folder that `make data` fills.{own}")
    for name in NAMES:
        path = root / SPECS[name]["subset"]
        if path.is_dir():
            raise DataError(f"{path} is a directory, expected the file {SPECS[name]['subset']} (the "
                            f"{SPECS[name]['title']} subset): move the file out of that folder into {root}, "
                            f"or remove the folder and run `make data` again to rebuild the file.")
    if archives is not None:
        if _is_not_a_folder(archives):
            raise DataError(f"the archives folder {archives} is a file, not a directory: remove it, or pass "
                            f"--archives with a folder for the downloaded archives.")
        for name in NAMES:
            path = archives / SPECS[name]["archive"]
            if path.is_dir():
                raise DataError(f"{path} is a directory, expected the file {SPECS[name]['archive']} (the "
                                f"official archive): remove that folder and run `make data` again.")


def survey(root: Path) -> tuple[list[str], list[str]]:
    """``(present, missing)`` subsets in ``root``; raises :class:`DataError` when the extracted
    official archive sits there (the full dataset would be served instead of the subsets), or when
    ``root`` is a file or a subset a directory (:func:`check_kinds`)."""
    check_kinds(root)
    full = [n for n in NAMES if (root / SPECS[n]["folder"]).is_dir()]
    if full:
        raise DataError(full_dataset_message(root, full))
    present = [n for n in NAMES if (root / SPECS[n]["subset"]).is_file()]
    return present, [n for n in NAMES if n not in present]


def check_reachable(root: Path, archives: Path, missing, sources, timeout: float) -> None:
    """Raise :class:`DataError` (the two-ways message) when an archive that is needed is neither in
    ``archives`` (with its official md5: a partial or damaged download is no archive) nor
    reachable, or when ``archives`` cannot hold it (:func:`check_kinds`)."""
    check_kinds(root, archives)
    for name in missing:
        path, (url, md5) = archives / SPECS[name]["archive"], sources[name]
        held = None
        if path.is_file():
            got = sha256(path, "md5")
            if got == md5:
                continue
            held = f"{path} ({path.stat().st_size} bytes) has md5 {got}, not the official {md5}"
        reason = probe(url, timeout)
        if reason is not None:
            raise DataError(no_data_message(root, missing, reason if held is None else f"{held}; {reason}"))


def preflight(root: Path, archives: Path, sources, timeout: float = 10.0) -> str:
    """Standard library only: fail fast (:class:`DataError`) when the data cannot be had."""
    present, missing = survey(root)
    if not missing:
        return f"CIFAR subsets found in {root}"
    check_reachable(root, archives, missing, sources, timeout)
    return (f"{', '.join(SPECS[n]['subset'] for n in missing)} missing in {root}: they will be rebuilt "
            f"from the official archives once the environment is set up")


# ----------------------------------------------------------------- with the environment (numpy, replearn)


def write_npz(path: Path, arrays: dict, order) -> None:
    """Write ``arrays`` as a deflated ``.npz`` with members in ``order`` and fixed timestamps
    (``replearn.neural.data``'s zip settings), atomically."""
    import zipfile

    import numpy as np

    tmp = path.with_name(f".{path.name}.part")
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for key in order:
                info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                with zf.open(info, "w", force_zip64=True) as f:
                    np.lib.format.write_array(f, np.asanyarray(arrays[key]), allow_pickle=False)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def load_arrays(path: Path) -> dict:
    import numpy as np

    with np.load(path, allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


def verify(path: Path, name: str, sums: dict, digests: dict | None = None) -> str:
    """Check a subset file: its SHA-256 against ``sums``, else its content against ``digests``.
    Returns how it was verified; raises :class:`DataError` when it is not the book's subset."""
    if sums.get(path.name) == sha256(path):
        return "SHA-256 as recorded"
    from replearn.neural import data

    digests = data.SUBSET_DIGESTS if digests is None else digests

    try:
        got = data.content_digest(load_arrays(path))
    except Exception as exc:  # an unreadable file is as wrong as a foreign one
        got = f"unreadable ({exc})"
    if got == digests.get(name):
        return "content digest as recorded (the file's bytes differ from the shipped file's: another zlib)"
    raise DataError(f"{path} is not the subset the book was executed on: neither its SHA-256 nor its "
                    f"content digest is the recorded one ({SUMS_FILE.name}, replearn.neural.data.SUBSET_DIGESTS). "
                    f"Delete it and run `make data` again to rebuild it from the official archive, or set "
                    f"REPLEARN_DATA to a folder with the right files.")


def build(root: Path, archives: Path, names, sources, *, sums: dict, digests: dict | None = None, index=None,
          timeout: float = 60.0, log=print) -> dict[str, Path]:
    """Download (md5-checked) the archives of ``names`` into ``archives`` and write their subsets
    into ``root``: content digest checked by ``replearn.neural.data.make_subsets``, bytes in the shipped
    layout, SHA-256 checked against ``sums`` (a mismatch there only warns, the content being
    verified). ``index`` / ``digests`` default to the book's recorded ones."""
    from replearn.neural import data

    if digests is None and index is None:
        digests = data.SUBSET_DIGESTS

    archives.mkdir(parents=True, exist_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    for name in names:
        url, md5 = sources[name]
        dest = archives / SPECS[name]["archive"]
        if not (dest.is_file() and data.file_digest(dest, "md5") == md5):
            log(f"downloading {url} ({SPECS[name]['size_mb']} MB) into {archives} ...")
        try:
            data.download_archive(url, dest, md5, timeout=timeout)
        except ConnectionError as exc:
            raise DataError(no_data_message(root, names, str(exc))) from exc
    staging = root / ".staging-subsets"
    written = {}
    try:
        try:
            built = data.make_subsets(archives, staging, names=tuple(names), index=index, digests=digests,
                                      archive_md5={n: sources[n][1] for n in names})
        except ValueError as exc:  # an archive or a subset whose checksum is not the recorded one
            raise DataError(str(exc)) from exc
        for name, path in built.items():
            arrays = load_arrays(path)
            order = MEMBER_ORDER[name] if set(MEMBER_ORDER[name]) == set(arrays) else sorted(arrays)
            written[name] = root / SPECS[name]["subset"]
            write_npz(written[name], arrays, order)
            got = sha256(written[name])
            if got == sums.get(written[name].name):
                log(f"{written[name]}: rebuilt, SHA-256 as recorded")
            else:
                log(f"{written[name]}: rebuilt, content digest as recorded, but SHA-256 {got} differs from "
                    f"the recorded one (the zip was compressed by another zlib); the images are the same")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        for name in names:
            shutil.rmtree(archives / SPECS[name]["folder"], ignore_errors=True)
    sums_file = root / "SHA256SUMS"
    old = read_sums(sums_file) if sums_file.is_file() else {}
    old.update({p.name: sha256(p) for p in written.values()})
    sums_file.write_text("".join(f"{h}  {n}\n" for n, h in sorted(old.items())))
    return written


def prepare(root: Path, archives: Path, sources, *, sums: dict | None = None, digests: dict | None = None,
            index=None, probe_timeout: float = 10.0, timeout: float = 60.0, log=print) -> None:
    """``make data``: verify the subsets in ``root``, or rebuild the missing ones (see the module
    docstring). Raises :class:`DataError` with the message to show."""
    if sums is None:
        sums = read_sums()
    present, missing = survey(root)
    for name in present:
        path = root / SPECS[name]["subset"]
        log(f"{path}: {verify(path, name, sums, digests)}")
    if missing:
        check_reachable(root, archives, missing, sources, probe_timeout)
        build(root, archives, missing, sources, sums=sums, digests=digests, index=index, timeout=timeout,
              log=log)
        survey(root)


def seconds(text: str) -> float:
    """``--probe-timeout``: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"need a positive, finite number of seconds, got {text!r}")
    return value


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="data directory (default: $REPLEARN_DATA, else ~/.cache/replearn)")
    parser.add_argument("--archives", help="folder for the downloaded archives (default: DATA/archives)")
    parser.add_argument("--mirror", help=f"base URL of the archives (default {OFFICIAL_BASE})")
    parser.add_argument("--preflight", action="store_true",
                        help="standard library only: fail fast when the data can be neither found nor downloaded")
    parser.add_argument("--probe-timeout", type=seconds, default=10.0,
                        help="seconds to wait for the archive host to answer, a positive number (default 10)")
    args = parser.parse_args(argv)
    root = data_dir(args.data)
    archives = Path(args.archives).expanduser() if args.archives else root / "archives"
    sources = official_sources(args.mirror)
    try:
        if args.preflight:
            print(f"make data: {preflight(root, archives, sources, args.probe_timeout)}")
        else:
            prepare(root, archives, sources, probe_timeout=args.probe_timeout,
                    log=lambda msg: print(f"make data: {msg}"))
    except DataError as exc:
        print(f"make data: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
