"""Loading CIFAR-10/100 into :class:`CifarData`: :func:`load_cifar` serves the extracted official
archive, else the offline npz subset, else downloads the archive (when allowed), else raises
:class:`~replearn.neural.data.DataMissingError`; both formats are read with every array checked
(the official pickles by an unpickler that rebuilds numpy arrays only, the labels in range, the
CIFAR-100 superclasses consistent)."""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from replearn.neural.data.datasets import dataset_spec
from replearn.neural.data.download import check_download_args, download_archive, extract_archive
from replearn.neural.data.location import DataMissingError, data_root, download_enabled, is_not_a_folder

__all__ = ["N_COARSE", "CifarData", "load_cifar", "load_official", "read_pickle"]

_SUBSET_KEYS = ("x_train", "y_train", "x_test", "y_test", "class_names")


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
        return (f"{dataset_spec(self.name)['title']}, {kind}: {len(self.y_train):,} train / "
                f"{len(self.y_test):,} test images, {per_class(self.y_train)} / {per_class(self.y_test)} "
                f"per class")


def load_cifar(name: str, *, root: str | os.PathLike | None = None, download: bool | None = None,
               url: str | None = None, md5: str | None = None, retries: int = 3,
               retry_delay: float = 1.0, timeout: float = 60.0) -> CifarData:
    """Load CIFAR-10 (``"cifar10"``) or CIFAR-100 (``"cifar100"``, fine and coarse labels).

    Looks in the data directory (:func:`~replearn.neural.data.data_root`) for the extracted
    official folder, then for the npz subset; if neither is there and downloading is on
    (``download=True``, or ``download=None`` and ``REPLEARN_DOWNLOAD=1``, see
    :func:`~replearn.neural.data.download_enabled`), downloads the official archive (``url`` and
    ``md5`` override the official ones, e.g. for a local mirror) with
    :func:`~replearn.neural.data.download_archive`, extracts it and loads it. Otherwise raises
    :class:`~replearn.neural.data.DataMissingError` (a ``FileNotFoundError``) naming the
    directory searched and the fixes.
    """
    spec = dataset_spec(name)
    check_download_args(retries, retry_delay, timeout)
    base = data_root(root)
    if is_not_a_folder(base):  # nothing can be found in, nor downloaded into, a file
        raise DataMissingError(name, root)
    if (base / spec["folder"]).is_dir():
        return load_official(name, base)
    if (base / spec["subset"]).is_file():
        return _load_subset(name, base)
    if not (download_enabled() if download is None else download):
        raise DataMissingError(name, root)
    archive = download_archive(url or spec["url"], base / spec["archive"], md5 or spec["md5"],
                               retries=retries, retry_delay=retry_delay, timeout=timeout)
    extract_archive(archive, base, spec["folder"])
    return load_official(name, base)


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


def load_official(name: str, base: Path) -> CifarData:
    """Dataset ``name`` from the extracted official folder under ``base`` (every file checked)."""
    spec = dataset_spec(name)
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
    spec = dataset_spec(name)
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
