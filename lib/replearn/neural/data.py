"""CIFAR-10/100: loading, client partitions, normalisation and batched augmentation.

Data come from one of two places, looked up in this order under a data directory ``root``
(the ``root`` argument, else the environment variable ``REPLEARN_DATA``, else
``~/.cache/replearn``):

1. the extracted official python-pickle archive (``cifar-10-batches-py/`` or
   ``cifar-100-python/``), Krizhevsky (2009), <https://www.cs.toronto.edu/~kriz/cifar.html>:
   the full dataset (``source == "full"``);
2. the real CIFAR subsets ``cifar10_subset.npz`` / ``cifar100_subset.npz`` (official pixels and
   labels, 2,000 / 500 images per CIFAR-10 class, 250 / 50 per CIFAR-100 class; see the README
   that ships with them): ``source == "subset"``;
3. with ``download=True``, or the environment variable ``REPLEARN_DOWNLOAD=1``, the official
   archive is downloaded, md5-checked and extracted.

When none of them is there, :func:`load_cifar` raises :class:`DataMissingError`, whose message
lists the three fixes; in a notebook it is shown as that message alone and the notebook's later
cells are skipped until the data are found. :func:`make_subsets` (also
``scripts/make_cifar_subsets.py``) rebuilds the offline subsets from the official archives.

Partitions follow the federated-learning papers' code: *shards* with ``C`` classes per client
(McMahan et al. 2017; LG-FedAvg and FedRep code) and Dirichlet(alpha) label skew (Hsu et al.
2019; alpha = 0.6 in the FedAvg fine-tuning paper). Every partition is a list of int64 index
tensors, one per client, drawn from a numpy generator seeded by ``seed``.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import os
import pickle
import tarfile
import tempfile
import time
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from replearn.checks import check_bool, check_count, check_int, check_nonnegative, check_positive

_SPECS = {
    "cifar10": dict(
        title="CIFAR-10", folder="cifar-10-batches-py", subset="cifar10_subset.npz",
        archive="cifar-10-python.tar.gz", md5="c58f30108f718f92721af3b95e74349a", size_mb=163,
        url="https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        train=tuple(f"data_batch_{i}" for i in range(1, 6)), test=("test_batch",),
        meta="batches.meta", label_key=b"labels", names_key=b"label_names", n_classes=10),
    "cifar100": dict(
        title="CIFAR-100", folder="cifar-100-python", subset="cifar100_subset.npz",
        archive="cifar-100-python.tar.gz", md5="eb9058c3a382ffc7106e4002c42a8d85", size_mb=161,
        url="https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
        train=("train",), test=("test",),
        meta="meta", label_key=b"fine_labels", names_key=b"fine_label_names", n_classes=100),
}

#: Per-channel (R, G, B) mean and standard deviation of the pixel values scaled to [0, 1],
#: over the full official training set of each dataset (the values used throughout the
#: CIFAR literature; for CIFAR-10 the population std, not the often-copied 0.2023/0.1994/0.2010).
CHANNEL_STATS = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
}

_SUBSET_KEYS = ("x_train", "y_train", "x_test", "y_test", "class_names")


def _spec(name: str) -> dict:
    if name not in _SPECS:
        raise ValueError(f"unknown dataset {name!r}; use one of {tuple(_SPECS)}")
    return _SPECS[name]


# --------------------------------------------------------------------------- normalise, augment


def normalise(x_uint8: torch.Tensor, name: str) -> torch.Tensor:
    """``(x / 255 - mean) / std`` per channel for dataset ``name`` (see :data:`CHANNEL_STATS`).

    ``x_uint8`` is a uint8 tensor ``(..., 3, H, W)``; the result is float32 on the same device.
    """
    if x_uint8.dtype != torch.uint8:
        raise ValueError(f"normalise expects uint8 pixels, got {x_uint8.dtype}; pass the raw CIFAR images")
    if x_uint8.dim() < 3 or x_uint8.shape[-3] != 3:
        raise ValueError(f"normalise expects images shaped (..., 3, H, W), got {tuple(x_uint8.shape)}")
    _spec(name)
    mean, std = (torch.tensor(v, dtype=torch.float32, device=x_uint8.device).view(3, 1, 1)
                 for v in CHANNEL_STATS[name])
    return (x_uint8.float() / 255.0 - mean) / std


def augment(x: torch.Tensor, generator: torch.Generator, *, pad: int = 4, flip: bool = True) -> torch.Tensor:
    """Random crop after zero padding by ``pad`` plus horizontal flip with probability 1/2.

    The batched equivalent of torchvision's ``RandomCrop(32, padding=4)`` followed by
    ``RandomHorizontalFlip()`` used in the FedRep and LG-FedAvg code. For a batch ``(B, C, H, W)``
    the random numbers are drawn on the CPU from ``generator`` in this order: the crop offsets
    ``torch.randint(0, 2 * pad + 1, (B, 2))`` (row, column), then, if ``flip``, ``torch.rand(B)``
    with image ``b`` flipped when its draw is below 1/2. The crops are gathered with one advanced
    index on ``x``'s device (no loop over images).
    """
    if x.dim() != 4:
        raise ValueError(f"augment expects a batch shaped (B, C, H, W), got {tuple(x.shape)}")
    if pad < 0:
        raise ValueError(f"pad must be non-negative, got {pad}")
    b, _, h, w = x.shape
    offsets = torch.randint(0, 2 * pad + 1, (b, 2), generator=generator).to(x.device)
    cols = torch.arange(w, device=x.device).expand(b, w)
    if flip:
        flipped = (torch.rand(b, generator=generator) < 0.5).to(x.device)
        cols = torch.where(flipped[:, None], w - 1 - cols, cols)
    rows = offsets[:, :1] + torch.arange(h, device=x.device)
    cols = offsets[:, 1:] + cols
    padded = torch.nn.functional.pad(x, (pad, pad, pad, pad)).permute(0, 2, 3, 1)
    batch = torch.arange(b, device=x.device)[:, None, None]
    return padded[batch, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2).contiguous()


# --------------------------------------------------------------------------- loading


@dataclass(frozen=True)
class CifarData:
    """Images as uint8 ``(N, 3, 32, 32)`` tensors (CHW, RGB) and int64 labels.

    ``y_*_coarse`` hold the CIFAR-100 superclass labels (``None`` for CIFAR-10); ``source`` is
    ``"full"`` (official archive) or ``"subset"`` (the shipped npz subsets); ``root`` is the data
    directory the images were read from.
    """

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    class_names: tuple[str, ...]
    source: str
    root: Path
    y_train_coarse: torch.Tensor | None = None
    y_test_coarse: torch.Tensor | None = None
    coarse_class_names: tuple[str, ...] | None = None

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    def describe(self) -> str:
        """One line saying which data were served and how many images, e.g. ``CIFAR-10, offline
        subset of the official images: 20,000 train / 5,000 test images, 2,000 / 500 per class``.

        It names no folder: printed results must read the same on every machine."""
        def per_class(y):
            counts = torch.bincount(y, minlength=self.n_classes)
            lo, hi = int(counts.min()), int(counts.max())
            return f"{lo:,}" if lo == hi else f"{lo:,}-{hi:,}"
        kind = "full official dataset" if self.source == "full" else "offline subset of the official images"
        return (f"{_spec(self.name)['title']}, {kind}: {len(self.y_train):,} train / "
                f"{len(self.y_test):,} test images, {per_class(self.y_train)} / {per_class(self.y_test)} "
                f"per class")


class DataMissingError(FileNotFoundError):
    """No CIFAR data where :func:`load_cifar` looked; the message says exactly what to do.

    Raised uncaught in a notebook (IPython), it is shown as its message alone, without a
    traceback, and the notebook's later cells are skipped (they print nothing) until the data
    can be found: see :meth:`_render_traceback_`. Caught by the caller, it has no such effect.
    """

    def __init__(self, name: str, root: str | os.PathLike | None):
        self.name, self.root = name, root
        spec, base = _spec(name), data_root(root)
        if _is_not_a_folder(base):
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
        spec, base = _spec(self.name), data_root(self.root)
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


#: The names :func:`load_cifar` looks for in the data directory (a data directory named like one
#: of them is most likely that file or folder itself).
_DATA_NAMES = frozenset(spec[k] for spec in _SPECS.values() for k in ("subset", "folder", "archive"))


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


def _is_not_a_folder(path: Path) -> bool:
    """``path`` exists but is no directory (a file, or a link to one)."""
    return path.exists() and not path.is_dir()


def _wrong_kinds(name: str, base: Path) -> list[str]:
    """The data paths of ``name`` under ``base`` that exist as the wrong kind: the subset as a
    directory, the extracted official folder as a file."""
    spec, wrong = _spec(name), []
    subset, folder = base / spec["subset"], base / spec["folder"]
    if subset.is_dir():
        wrong.append(f"{subset} is a directory, expected the file {spec['subset']} (the offline subset): "
                     f"move the file out of that folder into {base}, or remove the folder")
    if _is_not_a_folder(folder):
        wrong.append(f"{folder} is a file, expected the folder {spec['folder']}/ (the extracted official "
                     f"archive): remove or rename that file")
    return wrong


def load_cifar(name: str, *, root: str | os.PathLike | None = None, download: bool | None = None,
               url: str | None = None, md5: str | None = None, retries: int = 3,
               retry_delay: float = 1.0, timeout: float = 60.0) -> CifarData:
    """Load CIFAR-10 (``"cifar10"``) or CIFAR-100 (``"cifar100"``, fine and coarse labels).

    Looks in the data directory (:func:`data_root`) for the extracted official folder, then for
    the npz subset; if neither is there and downloading is on (``download=True``, or
    ``download=None`` and ``REPLEARN_DOWNLOAD=1``, see :func:`download_enabled`), downloads the
    official archive (``url`` and ``md5`` override the official ones, e.g. for a local mirror)
    with :func:`download_archive`, extracts it and loads it. Otherwise raises
    :class:`DataMissingError` (a ``FileNotFoundError``) naming the directory searched and the fixes.
    """
    spec = _spec(name)
    _check_download_args(retries, retry_delay, timeout)
    base = data_root(root)
    if _is_not_a_folder(base):  # nothing can be found in, nor downloaded into, a file
        raise DataMissingError(name, root)
    if (base / spec["folder"]).is_dir():
        return _load_official(name, base)
    if (base / spec["subset"]).is_file():
        return _load_subset(name, base)
    if not (download_enabled() if download is None else download):
        raise DataMissingError(name, root)
    archive = download_archive(url or spec["url"], base / spec["archive"], md5 or spec["md5"],
                               retries=retries, retry_delay=retry_delay, timeout=timeout)
    extract_archive(archive, base, spec["folder"])
    return _load_official(name, base)


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickler that only rebuilds numpy arrays (what the official CIFAR pickles hold)."""

    _allowed = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("numpy.core.multiarray", "_reconstruct"): np.ndarray.__reduce__(np.zeros(1))[0],
        ("numpy._core.multiarray", "_reconstruct"): np.ndarray.__reduce__(np.zeros(1))[0],
        ("_codecs", "encode"): lambda s, enc="utf-8": s.encode(enc),
    }

    def find_class(self, module, name):
        try:
            return self._allowed[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"refusing to load {module}.{name}: not part of the CIFAR format") from None


def read_pickle(path: Path) -> dict:
    """Read one official CIFAR pickle (``encoding='bytes'``: keys are byte strings).

    Only numpy arrays, lists, numbers and strings may appear; anything else, or an unreadable
    file, raises ``ValueError``.
    """
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a directory, expected the file {path.name} of the extracted "
                                f"CIFAR folder; delete {path.parent} and extract or download the archive again")
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the extracted CIFAR folder is incomplete; "
                                f"delete {path.parent} and extract or download the archive again")
    try:
        with open(path, "rb") as f:
            obj = _ArrayUnpickler(f, encoding="bytes").load()
    except Exception as exc:  # any unpickling failure means a corrupt or foreign file
        raise ValueError(f"{path} is not a readable CIFAR pickle ({exc}); delete it and extract or "
                         f"download the archive again") from exc
    if not isinstance(obj, dict):
        raise ValueError(f"{path} holds a {type(obj).__name__}, expected the CIFAR dict")
    return obj


def _field(obj: dict, key: bytes, path: Path):
    if key not in obj:
        raise ValueError(f"{path} lacks the key {key!r} (has {sorted(obj)}); the file is corrupt")
    return obj[key]


def _read_batches(paths: list[Path], label_keys: tuple[bytes, ...]):
    images, labels = [], {k: [] for k in label_keys}
    for path in paths:
        obj = read_pickle(path)
        data = np.asarray(_field(obj, b"data", path))
        if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
            raise ValueError(f"{path}: b'data' should be uint8 of shape (N, 3072), got "
                             f"{data.dtype} {data.shape}; the file is corrupt")
        images.append(data.reshape(-1, 3, 32, 32))
        for k in label_keys:
            y = _integer_labels(_field(obj, k, path), f"{path}: {k!r}")
            if y.shape != (len(data),):
                raise ValueError(f"{path}: {k!r} has shape {y.shape}, expected ({len(data)},)")
            labels[k].append(y)
    return (torch.from_numpy(np.concatenate(images)),
            *(torch.from_numpy(np.concatenate(labels[k])) for k in label_keys))


def _names(meta: dict, key: bytes, path: Path) -> tuple[str, ...]:
    return tuple(n.decode() if isinstance(n, bytes) else str(n) for n in _field(meta, key, path))


def _integer_labels(values, what: str) -> np.ndarray:
    """``values`` as int64, refusing non-integer dtypes (a float label such as 6.9 would
    otherwise be truncated to 6 without notice)."""
    y = np.asarray(values)
    if not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"{what}: labels must be integers, got dtype {y.dtype}; the data are corrupt")
    return y.astype(np.int64)


def _check_labels(y: torch.Tensor, n: int, what: str) -> None:
    if not len(y):
        raise ValueError(f"{what}: no images; the data are corrupt or incomplete")
    if int(y.min()) < 0 or int(y.max()) >= n:
        raise ValueError(f"{what}: labels outside 0..{n - 1} (got {int(y.min())}..{int(y.max())}); the data "
                         f"are corrupt")


N_COARSE = 20
"""CIFAR-100's superclasses: each of the 100 classes belongs to exactly one of 20."""


def _check_coarse(coarse: dict, y_train: torch.Tensor, y_test: torch.Tensor, where: str) -> None:
    """CIFAR-100's coarse labels: 20 names, one label per image in 0..19, and every fine class
    in exactly one superclass (on both splits together); else the data are corrupt."""
    names = coarse["coarse_class_names"]
    if len(names) != N_COARSE:
        raise ValueError(f"{where} lists {len(names)} coarse class names, expected {N_COARSE}; the data are "
                         f"corrupt: replace them with a fresh copy")
    for split, fine in (("train", y_train), ("test", y_test)):
        y = coarse[f"y_{split}_coarse"]
        if y.shape != fine.shape:
            raise ValueError(f"{where}: y_{split}_coarse has shape {tuple(y.shape)} but y_{split} has "
                             f"{tuple(fine.shape)} (one coarse label per image); the data are corrupt")
        _check_labels(y, N_COARSE, f"{where} y_{split}_coarse")
    fine = torch.cat([y_train, y_test])
    pairs = torch.unique(fine * N_COARSE + torch.cat([coarse["y_train_coarse"], coarse["y_test_coarse"]]))
    if len(pairs) != len(torch.unique(fine)):
        raise ValueError(f"{where}: a fine class carries two different coarse labels (each CIFAR-100 class "
                         f"belongs to one superclass); the data are corrupt: replace them with a fresh copy")


def _load_official(name: str, base: Path) -> CifarData:
    spec = _spec(name)
    folder = base / spec["folder"]
    keys = (spec["label_key"],) + ((b"coarse_labels",) if name == "cifar100" else ())
    train = _read_batches([folder / f for f in spec["train"]], keys)
    test = _read_batches([folder / f for f in spec["test"]], keys)
    meta = read_pickle(folder / spec["meta"])
    names = _names(meta, spec["names_key"], folder / spec["meta"])
    if len(names) != spec["n_classes"]:
        raise ValueError(f"{folder / spec['meta']} lists {len(names)} classes, expected {spec['n_classes']}")
    for y, what in ((train[1], "train"), (test[1], "test")):
        _check_labels(y, spec["n_classes"], f"{folder} {what}")
    coarse = {}
    if name == "cifar100":
        coarse = dict(y_train_coarse=train[2], y_test_coarse=test[2],
                      coarse_class_names=_names(meta, b"coarse_label_names", folder / spec["meta"]))
        _check_coarse(coarse, train[1], test[1], f"{folder}")
    return CifarData(name=name, x_train=train[0], y_train=train[1], x_test=test[0], y_test=test[1],
                     class_names=names, source="full", root=base, **coarse)


def _load_subset(name: str, base: Path) -> CifarData:
    spec = _spec(name)
    path = base / spec["subset"]
    coarse_keys = ("y_train_coarse", "y_test_coarse", "coarse_class_names")
    keys = _SUBSET_KEYS + (coarse_keys if name == "cifar100" else ())
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in keys if k not in npz.files]
            if missing:
                raise ValueError(f"missing keys {missing}")
            arr = {k: npz[k] for k in keys}
    except Exception as exc:  # zip, format or key errors all mean a damaged file
        raise ValueError(f"{path} is not a valid {spec['title']} subset ({exc}); replace it with a "
                         f"fresh copy (see the README next to the subsets)") from exc
    for split in ("train", "test"):
        x, y = arr[f"x_{split}"], arr[f"y_{split}"]
        if x.dtype != np.uint8 or x.ndim != 4 or x.shape[1:] != (32, 32, 3) or y.shape != (len(x),):
            raise ValueError(f"{path}: x_{split} {x.dtype} {x.shape} / y_{split} {y.shape} do not have "
                             f"the expected uint8 (N, 32, 32, 3) / (N,) layout; the file is corrupt")
    if len(arr["class_names"]) != spec["n_classes"]:
        raise ValueError(f"{path} lists {len(arr['class_names'])} classes, expected {spec['n_classes']}")
    t = {k: torch.from_numpy(np.ascontiguousarray(arr[k].transpose(0, 3, 1, 2)))  # HWC -> CHW
         for k in ("x_train", "x_test")}
    t.update({k: torch.from_numpy(_integer_labels(arr[k], f"{path} {k}"))
              for k in keys if k.startswith("y_")})
    for k in ("y_train", "y_test"):
        _check_labels(t[k], spec["n_classes"], f"{path} {k}")
    extra = {}
    if name == "cifar100":
        extra = dict(y_train_coarse=t["y_train_coarse"], y_test_coarse=t["y_test_coarse"],
                     coarse_class_names=tuple(str(s) for s in arr["coarse_class_names"]))
        _check_coarse(extra, t["y_train"], t["y_test"], f"{path}")
    return CifarData(name=name, x_train=t["x_train"], y_train=t["y_train"], x_test=t["x_test"],
                     y_test=t["y_test"], class_names=tuple(str(s) for s in arr["class_names"]),
                     source="subset", root=base, **extra)


# --------------------------------------------------------------------------- download, extract


def file_digest(path: Path, algorithm: str = "sha256") -> str:
    """Hex digest of a file (``hashlib`` algorithm name: ``"sha256"``, ``"md5"``), read in 1 MiB chunks."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _fetch_once(url: str, tmp, timeout: float) -> str:
    """Stream ``url`` into the open file ``tmp``; return the md5; raise on a short body."""
    digest, received = hashlib.md5(), 0
    with urllib.request.urlopen(url, timeout=timeout) as response:
        expected = response.headers.get("Content-Length")
        for chunk in iter(lambda: response.read(1 << 16), b""):
            tmp.write(chunk)
            digest.update(chunk)
            received += len(chunk)
    if expected is not None and received != int(expected):
        raise http.client.IncompleteRead(b"", int(expected) - received)
    return digest.hexdigest()


MAX_TIMEOUT = 3600.0
"""Largest ``timeout`` (seconds without data from the server before a try fails) and
``retry_delay`` of a download: a stalled connection must fail within an hour, not hang."""


def _check_download_args(retries, retry_delay, timeout) -> None:
    check_int(retries, "retries", 1, 100)
    check_nonnegative(retry_delay, "retry_delay")
    check_positive(timeout, "timeout")
    for name, value in (("retry_delay", retry_delay), ("timeout", timeout)):
        if value > MAX_TIMEOUT:
            raise ValueError(f"{name} must be at most MAX_TIMEOUT = {MAX_TIMEOUT:g} s (a stalled download must "
                             f"fail, not hang), got {value!r}")


def download_archive(url: str, dest: str | os.PathLike, md5: str, *, retries: int = 3,
                     retry_delay: float = 1.0, timeout: float = 60.0) -> Path:
    """Download ``url`` to ``dest`` and check its md5; return ``dest``.

    An existing ``dest`` with the right md5 is reused. The body is streamed into a temporary
    file next to ``dest`` and renamed into place (atomically) only once complete and verified.
    A dropped or short connection, or ``timeout`` seconds without data, is retried up to
    ``retries`` times in all (1..100; waiting ``retry_delay * attempt`` seconds between tries;
    ``timeout > 0`` and ``retry_delay >= 0``, both at most :data:`MAX_TIMEOUT`), then
    ``ConnectionError`` is raised; an md5
    mismatch raises ``ValueError``. In every failure case no partial file is left behind.
    """
    dest = Path(dest)
    _check_download_args(retries, retry_delay, timeout)
    if dest.is_file() and file_digest(dest, "md5") == md5:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    last = None
    for attempt in range(1, retries + 1):
        fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as tmp:
                got = _fetch_once(url, tmp, timeout)
            if got != md5:
                raise ValueError(f"md5 of {url} is {got}, expected {md5}: the download is corrupt or "
                                 f"not the official archive; nothing was kept, try again later")
            os.replace(tmp_name, dest)
            return dest
        except (OSError, http.client.HTTPException) as exc:
            last = exc
        finally:
            if os.path.exists(tmp_name):
                os.unlink(tmp_name)
        if attempt < retries:
            time.sleep(retry_delay * attempt)
    raise ConnectionError(f"downloading {url} failed {retries} times (last error: {last!r}); check the "
                          f"connection or set REPLEARN_DATA to a folder holding the CIFAR subsets") from last


def extract_archive(archive: str | os.PathLike, root: str | os.PathLike, folder: str) -> Path:
    """Extract the tar.gz ``archive`` into ``root`` and return ``root / folder``.

    Refuses (``ValueError``) members that are links, devices or would land outside ``root``, and
    archives without ``folder``. Members are extracted with tarfile's ``"data"`` filter: no
    setuid/setgid/sticky bits, no group/other write permission, and files owned by the caller,
    whatever uids the archive records. Extraction goes to a temporary directory first, so an
    interrupted or refused extraction leaves nothing in ``root``; an existing ``root / folder``
    is replaced by the fresh copy only once that is complete, so extracting twice gives the same
    result as once (and repairs a damaged folder).
    """
    root = Path(root).resolve()
    with tempfile.TemporaryDirectory(dir=root, prefix=".extract-") as tmp:
        try:
            with tarfile.open(archive, "r:gz") as tar:
                members = tar.getmembers()
                for m in members:
                    target = (Path(tmp) / m.name).resolve()
                    if not (m.isfile() or m.isdir()) or not target.is_relative_to(Path(tmp).resolve()):
                        raise ValueError(f"{archive}: unsafe member {m.name!r} (link, device or path "
                                         f"outside the target folder); refusing to extract")
                tar.extractall(tmp, members=members, filter="data")
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise ValueError(f"{archive} is not a readable tar.gz archive ({exc}); delete it and "
                             f"download again") from exc
        fresh, dest = Path(tmp) / folder, root / folder
        if not fresh.is_dir():
            raise ValueError(f"{archive} does not contain the folder {folder}/; is it the right archive?")
        if dest.exists() or dest.is_symlink():
            os.replace(dest, Path(tmp) / ".previous")  # removed with the temporary directory
        os.replace(fresh, dest)
    return root / folder


# --------------------------------------------------------------------------- offline subsets

#: Official positions of the images in the offline subsets (``train_index`` / ``test_index`` of
#: the shipped ``cifar*_subset.npz``), as zlib-compressed, base64-encoded bit masks over the
#: official train (50,000) and test (10,000) sets. The rule: the first 2,000 train / 500 test
#: images of each CIFAR-10 class and the first 250 / 50 of each CIFAR-100 fine class, in official
#: order, except that CIFAR-10 skips the images its makers could recover only as JPEG (see the
#: README next to the subsets); the masks record the outcome exactly.
_SUBSET_MASKS = {
    "cifar10": dict(
        train=("eNr7/3+wg/c4Ze5Tz5K//4c5qCfVr/eHlfd/DyK33MfuwHqaplg6JfB/+BIeZQYNVfB+uBYp92leVNz/PwpGwYgB"
               "wDI6H0jlAWuDnb/+70//+eXz+vP/l+77///c9fW77t59V/U//vO8/1+81te9XM0YsryoIslFerLszVfsnAtFv/Jc"
               "0LOUXukSoKjkxMEgoTtjSYDoQTGm1gaPBQwNrAwcDQ4CCxgYOBRcGLgiFBSY+yQYWAQ4GNgkWBkYGhgYmBgYFBiA"
               "QICRQYCBk4GBpYGjA8hj4AFihoYGBgVHhlEwCkbBKBgFo2AUjIJRMApGwSgYBaOAGAAAR4W7FA=="),
        test=("eNr7/38Qg/covP1g8i+6ou80sfo3Rbr34xD/R5tw+osw/i/NfVlPfCjc/3//vfzr/W+AWtT/z82sP9+8P+95XU+I"
              "rTQn14F/CVNVGhhGwSigLQAAGVVtaQ==")),
    "cifar100": dict(
        train=("eNrtz+9LU1EYB/BnY8ptQdx+gBqI9wbVyiCDoDTCsISoGMs/wBczSXqzRokx2e6UBa0X5WBmmFBEP0ir9cq9GHg0"
               "aPqqQVAGi920InDaeTHa7e5u93Suc8kG9rrgfOCee89znu855xLCMAzDMAzDMP8Y3RgwIfJGDcrf82jj3OrWqfWK"
               "VrkpMg6mk0JZKlesJo3402JRlkrrF0tXpp0a6tM7SWqFZGd1SbnvldKklUiKbjTQ39F0D6GTNJHoQcilJuUMJhEk"
               "4R/aCqZ30RV8UPHRFTnhw660qhZGUL9LvycVsgQrkqwoKDaMvX2xRZxVSCbTn0UykUam8i0IL+XlyZ8o2vztSiJh"
               "982ffYkaUtGW72+11uhrnLy6V0/Gtdmot6t38pMr414O26o89bnscfPzUe/Wx2Ohxs7bb9rn1aW7ZOrIyUxBjeQn"
               "Ptx6MdMQSVlHv8R459zXXsg1LndUne+ID9XXHfK8n34XfDTeFZ64+XkOntnbnMHh3UQE0Ro/MNB85+gvddw+VrMQ"
               "2B4N+YIXQlAD4jHYzAcHH4rc5R2natv3Qbd5C2ziQAgLbmvbdceA6UlgD98zKF6qBTdA0yvLjWvnDjvBXyfu2un4"
               "CH7wC0NmEIBGegQ6AxOYbNXcaYD9AAGBg+4z1WCwTYOF9llghuN5gRb8aw8PNAzbeNH4AnAYAy0Iqy8zwAP4gzNa"
               "mgQo4y9tYbCUqiYotp1Ym1eEKq0vm41sWT8PDMMwDMMwDPM/+g0Nayug"),
        test=("eNr7/38UjETw9x+M8f/9/9sgxufzIA4QfH/8vx4s9fz//8d///z/ff8/UGD7/+/////b///9/t319n+/2f7/X3p/"
              "////3+rervn//ur19j97a+v23C9v3lpes/z0QfX7aW8eut2brjF/Y9XupLgNb69b/n4/6cfrOQ9NHxx9+5Bhg6ba"
              "dNdLDuIvxVzL2/+smlmWpMScN4GVYYKClBCDkIbDMTcGzhWMHswCSkxMAgxMLHMYjBgYNRokHFwcDjEIKDAwiDg0"
              "8TA0MDA4MjgwcCgAGSDAwsDAxMAFZjIpgGQXMMCAAgMjEwMRwAGJzcGApH0UDFEAAOWIcYw=")),
}

#: :func:`content_digest` of the shipped subsets; :func:`make_subsets` checks what it builds from
#: the official archives against these.
SUBSET_DIGESTS = {
    "cifar10": "d6785f1d66a67a1a799ddbc0d4bf7f4c997bd7a75b0bc110ded2e5fd42ded43d",
    "cifar100": "9bdbd12f5ab343888d219c947cc5d904a14804ef29b9ce41b280b58240798e36",
}

_OFFICIAL_SIZES = {"train": 50_000, "test": 10_000}


def subset_index(name: str) -> dict[str, np.ndarray]:
    """``{"train": ..., "test": ...}``: the official positions (increasing int64) of the images
    in the offline subset of ``name`` (see :data:`_SUBSET_MASKS`)."""
    _spec(name)
    masks = _SUBSET_MASKS[name]
    out = {}
    for split, n in _OFFICIAL_SIZES.items():
        bits = np.frombuffer(zlib.decompress(base64.b64decode(masks[split])), dtype=np.uint8)
        out[split] = np.flatnonzero(np.unpackbits(bits, count=n)).astype(np.int64)
    return out


def content_digest(arrays) -> str:
    """SHA-256 over the arrays of a subset file, in sorted key order: each key, dtype and shape,
    then the raw bytes (string arrays as their UTF-8, newline-joined entries). Unlike a checksum
    of the npz file, it does not depend on how the zip was compressed."""
    h = hashlib.sha256()
    for key in sorted(arrays):
        a = np.ascontiguousarray(arrays[key])
        if a.dtype.kind == "U":
            h.update(f"{key} str {a.shape}\n".encode())
            h.update("\n".join(a.tolist()).encode())
        else:
            h.update(f"{key} {a.dtype.str} {a.shape}\n".encode())
            h.update(a.tobytes())
    return h.hexdigest()


def _write_npz(path: Path, arrays: dict) -> None:
    """A deflate-compressed ``.npz`` (as ``np.savez_compressed``, read by ``np.load``) with fixed
    zip timestamps and member order, so the same arrays give the same bytes (for a given zlib)."""
    tmp = path.with_name(f".{path.name}.part")
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            for key in sorted(arrays):
                info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                with zf.open(info, "w", force_zip64=True) as f:
                    np.lib.format.write_array(f, np.asanyarray(arrays[key]), allow_pickle=False)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def make_subsets(source: str | os.PathLike, out: str | os.PathLike, *, names=("cifar10", "cifar100"),
                 download: bool = False, index: dict | None = None, digests: dict | None = None,
                 archive_md5: dict | None = None) -> dict[str, Path]:
    """Build the offline subset files ``out / cifar*_subset.npz`` from the official archives.

    ``source`` holds the official archives (``cifar-10-python.tar.gz`` ...) or their extracted
    folders; an archive is md5-checked (against ``archive_md5[name]`` if given, else the official
    md5; ``ValueError`` on a mismatch) and extracted there, and with ``download=True`` a missing
    archive is first downloaded into it. For each of ``names`` the images at the official
    positions ``index[name]`` (default :func:`subset_index`: the subsets the book was executed
    with) are written in the shipped layout (HWC uint8 images, int64 labels, class names,
    ``train_index`` / ``test_index``, for CIFAR-100 the coarse labels and names), after their
    :func:`content_digest` was compared with ``digests[name]`` (default :data:`SUBSET_DIGESTS`
    when ``index`` is the default; ``ValueError`` on a mismatch, and no file is written). With
    the default ``index``, an archive (or extracted folder) whose train or test set is not the
    official size is refused first (``ValueError`` naming it): its contents are not the official
    archive's, whatever ``archive_md5`` vouched for. Returns the paths written;
    ``out / "SHA256SUMS"`` records their SHA-256 checksums.
    """
    source, out = Path(source), Path(out)
    recorded = index is None  # the recorded selection, made from the official archives
    if index is None:
        index, digests = {n: subset_index(n) for n in names}, (SUBSET_DIGESTS if digests is None else digests)
    digests = digests or {}
    written = {}
    for name in names:
        spec = _spec(name)
        origin = source / spec["folder"]  # what the images come from, for messages
        if not (source / spec["folder"]).is_dir():
            archive, want = source / spec["archive"], (archive_md5 or {}).get(name, spec["md5"])
            if _is_not_a_folder(source):
                raise NotADirectoryError(f"{source} is a file, not a directory: pass the folder that holds "
                                         f"{spec['archive']} or {spec['folder']}/")
            if archive.is_dir():
                raise IsADirectoryError(f"{archive} is a directory, expected the file {spec['archive']} "
                                        f"(the official archive): remove that folder or put the archive there")
            if archive.is_file():
                if (got := file_digest(archive, "md5")) != want:
                    raise ValueError(f"{archive} has md5 {got}, expected {want}: not the official archive "
                                     f"or a damaged copy; delete it and download it again")
            elif download:
                download_archive(spec["url"], archive, want)
            else:
                raise FileNotFoundError(
                    f"neither {spec['archive']} nor {spec['folder']}/ is in {source}; download the archive "
                    f"from {spec['url']} into that folder, or pass download=True (--download)")
            extract_archive(archive, source, spec["folder"])
            origin = archive
        full = _load_official(name, source)
        if recorded:  # positions of the official sets: a set of another size is not the official archive
            for split, n in _OFFICIAL_SIZES.items():
                if (got := len(getattr(full, f"y_{split}"))) != n:
                    vouched = (" (its md5 was accepted because archive_md5 names it)"
                               if (archive_md5 or {}).get(name) not in (None, spec["md5"]) else "")
                    raise ValueError(
                        f"{origin} does not hold the official {spec['title']} archive's contents: {got:,} "
                        f"{split} images where the official one has {n:,}{vouched}, so the recorded subset "
                        f"selection cannot be taken from it. Use the official {spec['archive']} "
                        f"({spec['url']}), or pass index= with positions into this archive; {spec['subset']} "
                        f"was not written")
        arrays = {"class_names": np.array(full.class_names)}
        for split in ("train", "test"):
            ix = np.asarray(index[name][split], dtype=np.int64)
            x, y = getattr(full, f"x_{split}"), getattr(full, f"y_{split}")
            if ix.ndim != 1 or not len(ix) or np.any(np.diff(ix) <= 0) or ix[0] < 0 or ix[-1] >= len(y):
                raise ValueError(f"index[{name!r}][{split!r}] must be increasing positions in "
                                 f"0..{len(y) - 1}, got {len(ix)} entries")
            take = torch.from_numpy(ix)
            arrays[f"x_{split}"] = x[take].permute(0, 2, 3, 1).contiguous().numpy()  # CHW -> HWC
            arrays[f"y_{split}"] = y[take].numpy()
            arrays[f"{split}_index"] = ix
            if name == "cifar100":
                arrays[f"y_{split}_coarse"] = getattr(full, f"y_{split}_coarse")[take].numpy()
        if name == "cifar100":
            arrays["coarse_class_names"] = np.array(full.coarse_class_names)
        got = content_digest(arrays)
        if name in digests and got != digests[name]:
            raise ValueError(f"the {spec['title']} subset built from {origin} has content digest {got}, "
                             f"expected {digests[name]}: the archive is not the official one (or was "
                             f"extracted from a damaged copy); no file was written")
        out.mkdir(parents=True, exist_ok=True)
        written[name] = out / spec["subset"]
        _write_npz(written[name], arrays)
    sums_file = out / "SHA256SUMS"
    sums = dict(line.split()[::-1] for line in sums_file.read_text().splitlines()
                if len(line.split()) == 2) if sums_file.is_file() else {}
    sums.update({p.name: file_digest(p) for p in written.values()})
    sums_file.write_text("".join(f"{h}  {n}\n" for n, h in sorted(sums.items())))
    return written


# --------------------------------------------------------------------------- partitions


def _rng(seed: int) -> np.random.Generator:
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r} (partitions must be reproducible)")
    return np.random.default_rng(int(seed))


def _labels(labels, what: str = "labels") -> np.ndarray:
    y = labels.cpu().numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer) or (len(y) and y.min() < 0):
        raise ValueError(f"{what} must be a 1-D array of non-negative integer class labels, "
                         f"got dtype {y.dtype} and shape {y.shape}")
    if not len(y):
        raise ValueError(f"{what} is empty: pass the labels of at least one sample")
    return y.astype(np.int64)


def _n_clients(n_clients, y: np.ndarray) -> int:
    """``n_clients`` as an int in [1, len(y)] (a client needs a sample)."""
    check_count(n_clients, "n_clients", 1)
    if n_clients > len(y):
        raise ValueError(f"n_clients = {n_clients} exceeds the {len(y)} samples (every client needs at "
                         f"least one): use at most {len(y)} clients or more data")
    return int(n_clients)


def _partition_indices(partition, n: int) -> list[np.ndarray]:
    """Each client's training indices as a 1-D int array in [0, n) (ValueError naming the client)."""
    if isinstance(partition, (str, bytes, torch.Tensor, np.ndarray)) or not hasattr(partition, "__len__") \
            or not len(partition):
        raise ValueError(f"partition must be a non-empty list of index tensors (one per client), got "
                         f"{type(partition).__name__}")
    out = []
    for i, ix in enumerate(partition):
        a = ix.cpu().numpy() if isinstance(ix, torch.Tensor) else np.asarray(ix)
        if a.ndim != 1 or (len(a) and not np.issubdtype(a.dtype, np.integer)):
            raise ValueError(f"partition[{i}] must be a 1-D integer index array, got dtype {a.dtype} and "
                             f"shape {a.shape}")
        if len(a) and (int(a.min()) < 0 or int(a.max()) >= n):
            raise ValueError(f"partition[{i}] holds indices in [{int(a.min())}, {int(a.max())}] but "
                             f"train_labels has {n} entries: the partition was made for other data")
        out.append(a.astype(np.int64))
    return out


def _index_tensors(parts) -> list[torch.Tensor]:
    return [torch.from_numpy(np.sort(np.asarray(p, dtype=np.int64))) for p in parts]


def _shard_setup(labels, n_clients: int, classes_per_client: int):
    """The labels, the number of clients, the classes and the shards per class of a shard
    partition (checked: ``n_clients * classes_per_client`` a multiple of the number of classes,
    every class with at least that many samples)."""
    y = _labels(labels)
    n_clients = _n_clients(n_clients, y)
    check_count(classes_per_client, "classes_per_client", 1)
    classes = np.unique(y)
    k = len(classes)
    if n_clients < 1 or not 1 <= classes_per_client <= k:
        raise ValueError(f"need n_clients >= 1 and 1 <= classes_per_client <= {k} (the number of "
                         f"classes), got {n_clients} and {classes_per_client}")
    n_shards = n_clients * classes_per_client
    if n_shards % k:
        raise ValueError(f"n_clients * classes_per_client = {n_shards} must be a multiple of the "
                         f"number of classes {k}, so that every class is cut into the same number of shards")
    per_class = n_shards // k
    smallest = int(np.bincount(y)[classes].min())
    if smallest < per_class:
        raise ValueError(f"a class has only {smallest} samples but must be cut into {per_class} shards; "
                         f"use fewer clients or fewer classes per client")
    return y, n_clients, classes, per_class


def _cut_shards(y: np.ndarray, classes: np.ndarray, per_class: int, rng) -> dict:
    """Each class's samples, shuffled and cut into ``per_class`` shards of (nearly) equal size."""
    return {c: list(np.array_split(rng.permutation(np.flatnonzero(y == c)), per_class)) for c in classes}


def shard_partition(labels, n_clients: int, classes_per_client: int, *, seed: int) -> list[torch.Tensor]:
    """The pathological non-IID split of the LG-FedAvg and FedRep code (``noniid`` in the
    authors' ``utils/sampling.py``, lgcollins/FedRep): ``classes_per_client`` shards per client.

    The samples of each of the ``K`` classes are shuffled and cut into ``per_class = n_clients *
    classes_per_client / K`` shards of (nearly) equal size. The list of classes, each repeated
    ``per_class`` times, is shuffled and reshaped to ``(n_clients, classes_per_client)``: row
    ``i`` is client ``i``'s label list. Client by client, each label of its list takes a shard of
    that class chosen at random among those left. So clients hold random label sets that overlap
    (about 47 distinct sets for 100 clients with 2 of 10 classes), and a client can draw the same
    class twice (then it holds one class). Every sample is used exactly once. As in the authors'
    code the samples of a class are cut in order; here they are shuffled first (the order of the
    official files is already random, that of a class-balanced subset is not). For the split
    that hands every class's shards to disjoint client groups see :func:`disjoint_shard_partition`.
    """
    y, n_clients, classes, per_class = _shard_setup(labels, n_clients, classes_per_client)
    rng = _rng(seed)
    shards = _cut_shards(y, classes, per_class, rng)
    label_lists = rng.permutation(np.tile(classes, per_class)).reshape(n_clients, classes_per_client)
    parts = []
    for row in label_lists:
        parts.append(np.concatenate([shards[c].pop(int(rng.integers(len(shards[c])))) for c in row]))
    return _index_tensors(parts)


def disjoint_shard_partition(labels, n_clients: int, classes_per_client: int, *,
                             seed: int) -> list[torch.Tensor]:
    """``classes_per_client`` shards of distinct classes per client, dealt so that the clients
    fall into ``K / classes_per_client`` groups with disjoint label sets (when that divides).

    Shards are cut as in :func:`shard_partition`, listed class by class (classes in random
    order) and the ``p``-th shard goes to client ``p mod n_clients``; the clients are then
    shuffled. For 100 clients with 2 of the 10 CIFAR-10 classes this gives exactly 5 disjoint
    class pairs, each held by 20 clients, on every seed: not the authors' split (a global model
    then fails group by group). The book uses it for new clients that must hold distinct classes
    (4.8, 4.9 and 5.9's held-out clients: chance is then exactly 1/S). Every sample is used exactly once.
    """
    y, n_clients, classes, per_class = _shard_setup(labels, n_clients, classes_per_client)
    rng = _rng(seed)
    shards = {c: np.array_split(rng.permutation(np.flatnonzero(y == c)), per_class) for c in classes}
    dealt = np.repeat(rng.permutation(classes), per_class).reshape(classes_per_client, n_clients).T
    assign = dealt[rng.permutation(n_clients)]
    used = dict.fromkeys(classes, 0)
    parts = []
    for row in assign:
        client = []
        for c in row:
            client.append(shards[c][used[c]])
            used[c] += 1
        parts.append(np.concatenate(client))
    return _index_tensors(parts)


#: The shard splits by name (``split`` of :class:`replearn.neural.specs.FederationSpec`).
SHARD_SPLITS = {"authors": shard_partition, "disjoint": disjoint_shard_partition}


#: The most draws :func:`dirichlet_partition` may be allowed (``max_attempts``): each is a full
#: draw over the data (milliseconds for CIFAR), so this bounds a failing call to seconds.
MAX_DIRICHLET_ATTEMPTS = 10_000


def dirichlet_partition(labels, n_clients: int, alpha: float, *, seed: int, min_size: int = 10,
                        equal_sizes: bool = False, max_attempts: int = 100) -> list[torch.Tensor]:
    """Dirichlet(``alpha``) label skew; smaller ``alpha`` means more heterogeneous clients.

    ``equal_sizes=False`` (Yurochkin et al. 2019; the FedAvg fine-tuning paper uses alpha = 0.6):
    for each class, the proportions of its samples given to the clients are drawn from
    Dir(alpha * 1) over clients; the whole draw is repeated until every client holds at least
    ``min_size`` samples, at most ``max_attempts`` times (at most
    :data:`MAX_DIRICHLET_ATTEMPTS`; then ``ValueError`` saying how unlikely a success was). An
    impossible ``min_size`` (``n_clients * min_size`` more than the samples) is refused before
    any draw. Every sample is used.

    ``equal_sizes=True`` (Hsu et al. 2019): each client gets ``len(labels) // n_clients`` samples
    with class proportions drawn from Dir(alpha * 1) over classes; clients are filled in turn and
    when a class runs out its share goes to the client's other classes still available (then to
    any class left), so later clients can be less skewed than their draw.
    """
    y = _labels(labels)
    n_clients = _n_clients(n_clients, y)
    if n_clients < 1 or not alpha > 0:
        raise ValueError(f"need n_clients >= 1 and alpha > 0, got {n_clients} and {alpha}")
    alpha = check_positive(alpha, "alpha")
    check_count(min_size, "min_size", 0)
    if (isinstance(max_attempts, (int, np.integer)) and not isinstance(max_attempts, (bool, np.bool_))
            and max_attempts > MAX_DIRICHLET_ATTEMPTS):
        raise ValueError(f"max_attempts = {max_attempts} exceeds MAX_DIRICHLET_ATTEMPTS = "
                         f"{MAX_DIRICHLET_ATTEMPTS} (each attempt is a full draw; a min_size that fails that "
                         f"often is too strict): lower min_size, raise alpha or use fewer clients")
    check_count(max_attempts, "max_attempts", 1)
    check_bool(equal_sizes, "equal_sizes")
    rng = _rng(seed)
    classes = np.unique(y)
    by_class = [np.flatnonzero(y == c) for c in classes]
    if equal_sizes:
        size = len(y) // n_clients
        if size < max(min_size, 1):
            raise ValueError(f"{len(y)} samples give {size} per client, fewer than min_size={min_size}")
        remaining = np.array([len(ix) for ix in by_class])
        counts = np.zeros((n_clients, len(classes)), dtype=np.int64)
        for i in range(n_clients):
            props = rng.dirichlet(np.full(len(classes), float(alpha)))
            while (need := size - counts[i].sum()) > 0:
                left = remaining - counts[i]
                weights = props * (left > 0)
                weights = weights if weights.sum() > 0 else (left > 0).astype(float)
                counts[i] += np.minimum(rng.multinomial(need, weights / weights.sum()), left)
            remaining -= counts[i]
        perms = [rng.permutation(ix) for ix in by_class]
        return _index_tensors(_take_consecutive(perms, counts))
    if n_clients * min_size > len(y):  # no draw can succeed: do not draw max_attempts times to find out
        raise ValueError(f"min_size={min_size} samples for each of the {n_clients} clients needs "
                         f"{n_clients * min_size} samples, but labels has {len(y)}: no Dirichlet draw can "
                         f"give every client that many; use min_size <= {len(y) // n_clients} or at most "
                         f"{len(y) // min_size} clients")
    best = 0  # the largest smallest-client size over the draws (for the message)
    for _ in range(max_attempts):
        parts = [[] for _ in range(n_clients)]
        for ix in by_class:
            props = rng.dirichlet(np.full(n_clients, float(alpha)))
            cuts = (np.cumsum(props)[:-1] * len(ix)).astype(np.int64)
            for client, piece in zip(parts, np.split(rng.permutation(ix), cuts)):
                client.append(piece)
        parts = [np.concatenate(p) for p in parts]
        smallest = min(len(p) for p in parts)
        if smallest >= min_size:
            return _index_tensors(parts)
        best = max(best, smallest)
    raise ValueError(f"no Dirichlet({alpha}) draw in {max_attempts} attempts gave every one of the "
                     f"{n_clients} clients at least min_size={min_size} samples (the best draw's smallest "
                     f"client had {best}), so a draw succeeds with probability below about "
                     f"{min(1.0, 3 / max_attempts):.2g} (95% bound from {max_attempts} failures); lower "
                     f"min_size, raise alpha, use fewer clients or raise max_attempts (at most "
                     f"MAX_DIRICHLET_ATTEMPTS = {MAX_DIRICHLET_ATTEMPTS})")


def _take_consecutive(perms: list[np.ndarray], counts: np.ndarray) -> list[np.ndarray]:
    """Client ``i`` takes the next ``counts[i, c]`` entries of ``perms[c]`` for every class ``c``."""
    ends = np.cumsum(counts, axis=0)
    starts = ends - counts
    return [np.concatenate([perms[c][starts[i, c]:ends[i, c]] for c in range(len(perms))])
            for i in range(len(counts))]


def client_test_split(partition: list[torch.Tensor], train_labels, test_labels, *, seed: int,
                      n_per_client: int | None = None) -> list[torch.Tensor]:
    """Disjoint per-client test sets with the label set and proportions of each client's training data.

    Client ``i`` wants ``want[i, c]`` test images of class ``c``: by default its share of the
    class's training samples times the number of test images of that class (so a partition of
    the whole training set spreads the whole test set); with ``n_per_client``, that many images
    in the proportions of the client's training labels. Wants are rounded, and at least 1 for
    every class the client holds, 0 for the others. Images are drawn without replacement and no
    test image goes to two clients. When a class's test images run out, every client's want of
    that class above 1 is scaled down proportionally (largest remainders, so the class's test
    images are all used); if fewer test images of a class exist than
    clients holding it, ``ValueError``.
    """
    ytr, yte = _labels(train_labels, "train_labels"), _labels(test_labels, "test_labels")
    parts = _partition_indices(partition, len(ytr))
    if n_per_client is not None:
        check_count(n_per_client, "n_per_client", 1)
    k = int(max(ytr.max(initial=0), yte.max(initial=0))) + 1
    counts = np.stack([np.bincount(ytr[ix], minlength=k) for ix in parts])
    avail = np.bincount(yte, minlength=k)
    if n_per_client is None:
        quota = counts * (avail / np.maximum(counts.sum(0), 1))
    else:
        if n_per_client < 1:
            raise ValueError(f"n_per_client must be positive, got {n_per_client}")
        quota = n_per_client * counts / np.maximum(counts.sum(1, keepdims=True), 1)
    want = np.where(counts > 0, np.maximum(1, np.rint(quota)), 0).astype(np.int64)
    present = (counts > 0).sum(0)
    short = np.flatnonzero(present > avail)
    if len(short):
        c = short[0]
        raise ValueError(f"class {c} has {avail[c]} test images but {present[c]} clients hold it; "
                         f"every client needs at least one test image of each of its classes")
    for c in np.flatnonzero(want.sum(0) > avail):
        has = counts[:, c] > 0
        share = (want[:, c] - has) * (avail[c] - present[c]) / (want[:, c] - has).sum()
        extra = np.floor(share).astype(np.int64)
        leftover = avail[c] - present[c] - extra.sum()
        extra[np.argsort(extra - share, kind="stable")[:leftover]] += 1  # largest remainders
        want[:, c] = has + extra
    rng = _rng(seed)
    perms = [rng.permutation(np.flatnonzero(yte == c)) for c in range(k)]
    return _index_tensors(_take_consecutive(perms, want))


def class_split(n_classes: int, n_new: int, *, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Disjoint random ``(train_classes, new_classes)``, sorted int64 tensors, e.g. 80 / 20
    CIFAR-100 classes for training clients and for new clients."""
    check_count(n_classes, "n_classes", 1)
    check_int(n_new, "n_new", 1)
    if not 0 < n_new < n_classes:
        raise ValueError(f"need 0 < n_new < n_classes, got n_new={n_new}, n_classes={n_classes}")
    perm = _rng(seed).permutation(n_classes)
    return tuple(torch.from_numpy(np.sort(p)) for p in (perm[n_new:], perm[:n_new]))


def restrict_classes(labels, classes) -> tuple[torch.Tensor, torch.Tensor]:
    """``(index, new_labels)``: positions of the samples whose label is in ``classes`` and their
    labels renumbered ``0..len(classes)-1`` in the order of ``classes``."""
    y = _labels(labels)
    cls = _labels(classes, "classes")
    if len(np.unique(cls)) != len(cls) or not len(cls):
        raise ValueError(f"classes must be a non-empty list of distinct labels, got {cls.tolist()}")
    lookup = np.full(max(int(y.max(initial=0)), int(cls.max())) + 1, -1)
    lookup[cls] = np.arange(len(cls))
    index = np.flatnonzero(lookup[y] >= 0)
    return torch.from_numpy(index), torch.from_numpy(lookup[y[index]])
