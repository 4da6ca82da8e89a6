"""Where the CIFAR data are looked for and what the reader is told when they are not there: the
data directory (:func:`data_root`: the ``root`` argument, else ``$REPLEARN_DATA``, else
``~/.cache/replearn``), the download switch ``REPLEARN_DOWNLOAD`` (:func:`download_enabled`),
and :class:`DataMissingError`, whose message names the directory searched and the three fixes
and which, uncaught in a notebook, skips the later cells until the data are found."""

from __future__ import annotations

import os
from pathlib import Path

from replearn.neural.data.datasets import SPECS, dataset_spec

__all__ = ["DataMissingError", "data_root", "download_enabled", "is_not_a_folder"]


class DataMissingError(FileNotFoundError):
    """No CIFAR data where :func:`~replearn.neural.data.load_cifar` looked; the message says
    exactly what to do.

    Raised uncaught in a notebook (IPython), it is shown as its message alone, without a
    traceback, and the notebook's later cells are skipped (they print nothing) until the data
    can be found: see :meth:`_render_traceback_`. Caught by the caller, it has no such effect.
    """

    def __init__(self, name: str, root: str | os.PathLike | None):
        self.name, self.root = name, root
        spec, base = dataset_spec(name), data_root(root)
        if is_not_a_folder(base):
            setting = _root_setting(root) or "REPLEARN_DATA"
            own = (f" {base.name} is one of the data files itself: set {setting}={base.parent} if that "
                   f"folder holds the data." if base.name in _DATA_NAMES else "")
            super().__init__(
                f"{_root_label(root)} is a file, not a directory: point it at the folder that holds "
                f"{spec['subset']} or the extracted official folder {spec['folder']}/ (or at an empty or new "
                f"folder, to download the official archive into).{own} The README, section \"Data\", "
                f"explains where the data go.")
            return
        wrong = _wrong_kinds(name, base)
        what = ("; ".join(wrong) if wrong else
                f"neither the folder {spec['folder']}/ (extracted official archive) nor the offline subset "
                f"{spec['subset']} is there")
        super().__init__(
            f"no {spec['title']} data in {base}: {what}. Do one of:\n"
            f"  1. download the official archive ({spec['size_mb']} MB, md5-checked) into that folder: "
            f"set the environment variable REPLEARN_DOWNLOAD=1 (in a notebook: run "
            f"%env REPLEARN_DOWNLOAD=1 in a cell, then re-run this one);\n"
            f"  2. set REPLEARN_DATA to a folder that holds {spec['subset']} or {spec['folder']}/;\n"
            f"  3. build the offline subsets from the official archives: "
            f"python scripts/make_cifar_subsets.py ARCHIVE_DIR OUT_DIR, then REPLEARN_DATA=OUT_DIR.\n"
            f"The README, section \"Data\", explains each.")

    def __reduce__(self):  # pickle by (name, root), e.g. across worker processes
        return type(self), (self.name, self.root)

    def available(self) -> bool:
        """True once the data can be loaded: found under the (re-read) data directory, or
        downloading switched on."""
        spec, base = dataset_spec(self.name), data_root(self.root)
        return ((base / spec["folder"]).is_dir() or (base / spec["subset"]).is_file()
                or download_enabled())

    def _render_traceback_(self) -> list[str]:
        """IPython's hook for displaying an uncaught exception: show this message only, and skip
        the later cells of the notebook, which would all fail for the same reason (``NameError``
        on results never computed). A cell is still run when the data have become available
        (:meth:`available`) -- then skipping ends for good -- or when it mentions ``REPLEARN_``
        (the reader setting the variables of the fixes)."""
        try:
            from IPython import get_ipython
        except ImportError:  # rendered by something else that knows the hook
            get_ipython = None
        shell = get_ipython() if get_ipython is not None else None
        if shell is not None:
            transformers = shell.input_transformers_post
            transformers[:] = [t for t in transformers if not isinstance(t, _SkipCellsWithoutData)]
            transformers.append(_SkipCellsWithoutData(self, transformers))
        return [f"{type(self).__name__}: {self}",
                "The rest of this notebook is skipped until the data are found; fix it as above, then "
                "re-run this cell and the ones below."]


class _SkipCellsWithoutData:
    """IPython input transformer installed by :meth:`DataMissingError._render_traceback_`."""

    def __init__(self, error: DataMissingError, transformers: list):
        self.error, self.transformers = error, transformers

    def __call__(self, lines: list[str]) -> list[str]:
        try:
            ready = self.error.available()
        except ValueError:  # REPLEARN_DOWNLOAD set to nonsense: run the cell, so that the error shows
            return lines
        if ready:
            if self in self.transformers:
                self.transformers.remove(self)
            return lines
        if any("REPLEARN_" in line for line in lines):
            return lines
        return []


def download_enabled() -> bool:
    """Whether ``REPLEARN_DOWNLOAD`` switches downloading on: ``1``/``true``/``yes``/``on`` yes,
    unset/empty/``0``/``false``/``no``/``off`` no (case-insensitive); anything else is an error."""
    value = os.environ.get("REPLEARN_DOWNLOAD", "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("", "0", "false", "no", "off"):
        return False
    raise ValueError(f"REPLEARN_DOWNLOAD={os.environ['REPLEARN_DOWNLOAD']!r} is not understood; "
                     f"set it to 1 to download the CIFAR archives or to 0 (or unset it) not to")


def data_root(root: str | os.PathLike | None = None) -> Path:
    """The data directory: ``root``, else ``$REPLEARN_DATA``, else ``~/.cache/replearn``."""
    if root is not None:
        return Path(root).expanduser()
    env = os.environ.get("REPLEARN_DATA", "").strip()
    return Path(env).expanduser() if env else Path.home() / ".cache" / "replearn"


#: The names :func:`~replearn.neural.data.load_cifar` looks for in the data directory (a data
#: directory named like one of them is most likely that file or folder itself).
_DATA_NAMES = frozenset(spec[k] for spec in SPECS.values() for k in ("subset", "folder", "archive"))


def _root_setting(root: str | os.PathLike | None) -> str | None:
    """Which setting chose the data directory: ``"root"``, ``"REPLEARN_DATA"`` or None (the default)."""
    if root is not None:
        return "root"
    return "REPLEARN_DATA" if os.environ.get("REPLEARN_DATA", "").strip() else None


def _root_label(root: str | os.PathLike | None) -> str:
    """The data directory as the reader set it, for messages: ``REPLEARN_DATA=<path>``,
    ``root=<path>`` or ``the default data directory <path>``."""
    setting, base = _root_setting(root), data_root(root)
    return f"{setting}={base}" if setting else f"the default data directory {base}"


def is_not_a_folder(path: Path) -> bool:
    """``path`` exists but is no directory (a file, or a link to one)."""
    return path.exists() and not path.is_dir()


def _wrong_kinds(name: str, base: Path) -> list[str]:
    """The data paths of ``name`` under ``base`` that exist as the wrong kind: the subset as a
    directory, the extracted official folder as a file."""
    spec, wrong = dataset_spec(name), []
    subset, folder = base / spec["subset"], base / spec["folder"]
    if subset.is_dir():
        wrong.append(f"{subset} is a directory, expected the file {spec['subset']} (the offline subset): "
                     f"move the file out of that folder into {base}, or remove the folder")
    if is_not_a_folder(folder):
        wrong.append(f"{folder} is a file, expected the folder {spec['folder']}/ (the extracted official "
                     f"archive): remove or rename that file")
    return wrong
