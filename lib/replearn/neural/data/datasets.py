"""What the book knows of CIFAR-10 and CIFAR-100 before reading any file: for each dataset its
title, the official archive (name, URL, md5, size) and the folder it extracts to, the offline
subset's file name, the files and keys of the official pickles, the number of classes, and the
per-channel pixel statistics used to normalise the images."""

from __future__ import annotations

__all__ = ["CHANNEL_STATS", "SPECS", "dataset_spec"]

#: Each dataset's official archive, folder and files, offline subset and label keys.
SPECS = {
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


def dataset_spec(name: str) -> dict:
    """The facts of dataset ``name`` (``"cifar10"`` or ``"cifar100"``; ``ValueError`` naming
    both for any other name)."""
    if name not in SPECS:
        raise ValueError(f"unknown dataset {name!r}; use one of {tuple(SPECS)}")
    return SPECS[name]
