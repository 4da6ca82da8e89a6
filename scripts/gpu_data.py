"""Carry the offline CIFAR subsets to a lent GPU machine in pieces small enough for its transfer limit.

A device call sends the working tree and the paths it names in ``carry``, 64 MiB in all; the two
subsets (``cifar10_subset.npz``, ``cifar100_subset.npz``: 155 MB of already deflated images) do
not fit in one call. ``pack`` stores their arrays losslessly in one xz stream (a delta filter on
the pixel bytes, then LZMA2: about 115 MB) cut into parts of at most ``--part-mib`` MiB (a
finite number >= 1; at most 1000 parts), each in its own folder ``.gpudata/1``, ``.gpudata/2``,
... with a copy of the manifest (every array's name, dtype, shape and sha256). A machine keeps
the ignored paths of earlier calls while it stays warm, so consecutive calls each carry one
folder, and the last one rebuilds the subsets and runs:

    python scripts/gpu_data.py pack                      # here, once: .gpudata/1 .. .gpudata/N
    # device calls, each within the machine's warm time of the previous one:
    #   carry [".gpudata/1"], command "python3 scripts/gpu_data.py status"
    #   ...
    #   carry [".gpudata/N"], command "python3 scripts/gpu_data.py unpack && REPLEARN_DATA=.gpudata/data bash scripts/gpu_run.sh"

``unpack`` joins the parts in order, decompresses, checks every array against the manifest's
sha256 and writes ``.gpudata/data/<subset>.npz`` (uncompressed; the loader reads it like the
original); a missing or altered part, or a damaged manifest, is an error naming it. ``status``
says which parts the machine holds. Test here:
``python scripts/gpu_data.py pack && python scripts/gpu_data.py unpack``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import lzma
import math
import numbers
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SUBSETS = ("cifar10_subset.npz", "cifar100_subset.npz")
#: delta over 3 bytes (the channels of one HWC pixel), then LZMA2: about 0.67 of the raw pixels
FILTERS = [{"id": lzma.FILTER_DELTA, "dist": 3}, {"id": lzma.FILTER_LZMA2, "preset": 6}]
MANIFEST = "manifest.json"
#: ``--part-mib`` below this is refused (the real subsets would need over a hundred device calls)
MIN_PART_MIB = 1.0
#: ``pack`` refuses to cut the stream into more parts than this (one device call each)
MAX_PARTS = 1000
_MANIFEST_KEYS = {"arrays": list, "parts": int, "bytes": int, "sha256": str}
_ARRAY_KEYS = {"subset": str, "key": str, "dtype": str, "shape": list, "offset": int, "nbytes": int,
               "sha256": str}


def _sha(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def pack(source: Path, dest: Path, part_mib: float) -> list[Path]:
    """The arrays of ``SUBSETS`` in ``source`` as parts of at most ``part_mib`` MiB under ``dest``.

    ``part_mib`` must be a finite number with at least one byte per part (``ValueError``), and
    the stream may be cut into at most :data:`MAX_PARTS` parts; the command line further asks
    for at least :data:`MIN_PART_MIB`."""
    if isinstance(part_mib, bool) or not isinstance(part_mib, numbers.Real) \
            or not math.isfinite(part_mib) or not part_mib * 2**20 >= 1:
        raise ValueError(f"part_mib must be a positive finite number of MiB (at least one byte), got "
                         f"{part_mib!r}")
    arrays, raw = [], io.BytesIO()
    for subset in SUBSETS:
        path = source / subset
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist: point --source (or REPLEARN_DATA) at the folder "
                                    f"holding {', '.join(SUBSETS)}")
        with np.load(path) as z:
            for key in z.files:
                a = np.ascontiguousarray(z[key])
                if a.dtype.hasobject:
                    raise ValueError(f"{path}: array {key!r} holds Python objects; only plain arrays are packed")
                arrays.append({"subset": subset, "key": key, "dtype": a.dtype.str, "shape": list(a.shape),
                               "offset": raw.tell(), "nbytes": a.nbytes, "sha256": _sha(a)})
                raw.write(a.tobytes())
    blob = lzma.compress(raw.getvalue(), format=lzma.FORMAT_XZ, filters=FILTERS)
    size = int(min(part_mib * 2**20, max(len(blob), 1)))  # a part larger than the stream is the stream
    n_parts = -(-len(blob) // size)
    if n_parts > MAX_PARTS:
        raise ValueError(f"part_mib = {part_mib:g} would cut the {len(blob) / 2**20:.1f} MiB stream into "
                         f"{n_parts} parts, more than {MAX_PARTS} (one device call each): use larger parts")
    manifest = {"arrays": arrays, "parts": n_parts, "bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}
    folders = []
    for k in range(n_parts):
        folder = dest / str(k + 1)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "part").write_bytes(blob[k * size:(k + 1) * size])
        (folder / MANIFEST).write_text(json.dumps(manifest, indent=1))
        folders.append(folder)
    return folders


def _read_manifest(path: Path) -> dict:
    """One part's manifest, checked for the fields ``status`` and ``unpack`` use (ValueError
    naming the file otherwise)."""
    redo = (f"re-run `python scripts/gpu_data.py pack` here and carry every part again (or copy "
            f"{path.parent.name}/ again if only this copy is damaged)")
    try:
        manifest = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise ValueError(f"{path} is not a readable manifest ({exc}): a truncated or damaged copy; "
                         f"{redo}") from exc
    problems = []
    if not isinstance(manifest, dict):
        problems.append(f"it holds a {type(manifest).__name__}, not an object")
    else:
        problems += [f"{key!r} is missing or not a {kind.__name__}" for key, kind in _MANIFEST_KEYS.items()
                     if not isinstance(manifest.get(key), kind) or isinstance(manifest.get(key), bool)]
        if not problems:
            if manifest["parts"] < 1 or manifest["bytes"] < 1:
                problems.append(f"'parts' = {manifest['parts']} and 'bytes' = {manifest['bytes']} must be "
                                f"positive")
            for i, entry in enumerate(manifest["arrays"]):
                if not isinstance(entry, dict) or any(not isinstance(entry.get(k), kind)
                                                      or isinstance(entry.get(k), bool)
                                                      for k, kind in _ARRAY_KEYS.items()):
                    problems.append(f"array entry {i} lacks one of {sorted(_ARRAY_KEYS)} or has a wrong type")
                    break
    if problems:
        raise ValueError(f"{path} is not a complete manifest ({'; '.join(problems)}); {redo}")
    return manifest


def _manifest(dest: Path) -> dict:
    """The manifest of the parts under ``dest`` (that of the lowest-numbered part; the other parts
    it counts must carry the same one, folders beyond its count are ignored)."""
    found = sorted((p for p in dest.glob(f"*/{MANIFEST}") if p.parent.name.isdigit()),
                   key=lambda p: int(p.parent.name))
    if not found:
        raise FileNotFoundError(f"no part of the packed data under {dest}: carry .gpudata/1 (made here by "
                                f"`python scripts/gpu_data.py pack`) in a device call first")
    manifest = _read_manifest(found[0])
    for path in found[1:]:
        if int(path.parent.name) <= manifest["parts"] and _read_manifest(path) != manifest:
            raise ValueError(f"{path} and {found[0]} come from different runs of `pack`: re-run "
                             f"`python scripts/gpu_data.py pack` here and carry every part again")
    return manifest


def status(dest: Path) -> tuple[list[int], int]:
    """The parts present under ``dest`` and how many there are in all."""
    manifest = _manifest(dest)
    return [k for k in range(1, manifest["parts"] + 1) if (dest / str(k) / "part").is_file()], manifest["parts"]


def unpack(dest: Path, out: Path) -> list[Path]:
    """Join, check and decompress the parts under ``dest``; write the subsets to ``out``."""
    manifest = _manifest(dest)
    have, n = status(dest)
    missing = [k for k in range(1, n + 1) if k not in have]
    if missing:
        raise FileNotFoundError(f"parts {missing} of {n} are missing under {dest}: carry "
                                f"{', '.join(f'.gpudata/{k}' for k in missing)} in calls made while the machine is "
                                f"still warm (a machine given back forgets the parts it had)")
    blob = b"".join((dest / str(k) / "part").read_bytes() for k in range(1, n + 1))
    if len(blob) != manifest["bytes"] or hashlib.sha256(blob).hexdigest() != manifest["sha256"]:
        raise ValueError(f"the joined parts under {dest} are not the packed stream (size or sha256 differs): "
                         f"re-run `python scripts/gpu_data.py pack` here and carry every part again")
    raw = lzma.decompress(blob, format=lzma.FORMAT_XZ, filters=None)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for subset in SUBSETS:
        contents = {}
        for entry in (a for a in manifest["arrays"] if a["subset"] == subset):
            buf = raw[entry["offset"]:entry["offset"] + entry["nbytes"]]
            a = np.frombuffer(buf, dtype=np.dtype(entry["dtype"])).reshape(entry["shape"])
            if _sha(a) != entry["sha256"]:
                raise ValueError(f"{subset}: array {entry['key']!r} does not match its sha256 after unpacking")
            contents[entry["key"]] = a
        np.savez(out / subset, **contents)
        written.append(out / subset)
    return written


def _part_mib(text: str) -> float:
    """``--part-mib``: a finite number of MiB, at least :data:`MIN_PART_MIB` (argparse's error otherwise)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of MiB") from None
    if not math.isfinite(value) or value < MIN_PART_MIB:
        raise argparse.ArgumentTypeError(f"{text} must be a finite number of MiB >= {MIN_PART_MIB:g}")
    return value


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("pack", "unpack", "status"))
    parser.add_argument("--source", type=Path, default=Path(os.environ.get("REPLEARN_DATA", ROOT / "data")),
                        help="pack: the folder holding the subsets (default: $REPLEARN_DATA)")
    parser.add_argument("--dest", type=Path, default=ROOT / ".gpudata", help="the parts' folder (default: .gpudata)")
    parser.add_argument("--out", type=Path, default=None, help="unpack: where the subsets go (default: DEST/data)")
    parser.add_argument("--part-mib", type=_part_mib, default=46.0,
                        help=f"largest part in MiB, a finite number >= {MIN_PART_MIB:g} (default 46: with "
                             f"the working tree, under a call's 64 MiB)")
    args = parser.parse_args(argv)
    try:
        _run(args)
    except (OSError, ValueError) as exc:  # the messages say what to do; no traceback
        print(f"gpu_data.py {args.command}: {exc}", file=sys.stderr)
        return 1
    return 0


def _run(args: argparse.Namespace) -> None:
    if args.command == "pack":
        folders = pack(args.source, args.dest, args.part_mib)
        for f in folders:
            print(f"{f}: {(f / 'part').stat().st_size / 2**20:.1f} MiB")
        print("carry each folder in its own device call, in order; the last call runs "
              "`python3 scripts/gpu_data.py unpack` before the GPU run")
    elif args.command == "status":
        have, n = status(args.dest)
        print(f"parts present: {have} of {n}")
    else:
        for path in unpack(args.dest, args.out or args.dest / "data"):
            print(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB), every array checked against its sha256")


if __name__ == "__main__":
    sys.exit(main())
