"""CIFAR data for the tests of the CIFAR library modules and section drivers.

:func:`load_or_skip` loads a real CIFAR subset (the ``cifar10`` / ``cifar100`` fixtures of
``tests/conftest.py`` use it) and skips the test when it is missing; :func:`fake_cifar` is a
small synthetic stand-in for CIFAR-10 (random uint8 images with class-dependent mean colours,
same layout as :class:`replearn.neural.data.CifarData`) on which the FedRep drivers run in seconds;
:data:`RESULTS` is the folder of the committed results files.
"""

from pathlib import Path

import pytest
import torch

from replearn.neural import data as D

#: The committed results files (``book/results``) the drivers' tests read.
RESULTS = Path(__file__).resolve().parents[1] / "book" / "results"


def load_or_skip(name: str) -> D.CifarData:
    """``replearn.neural.data.load_cifar(name)``, or skip the test when the data are not there."""
    try:
        return D.load_cifar(name)
    except FileNotFoundError:
        pytest.skip(f"{name} data not found in {D.data_root()} (set REPLEARN_DATA to the folder holding "
                    f"the CIFAR subsets)")


def fake_cifar(n_classes=10, train=40, test=20, seed=0, *, name="cifar10", source="subset") -> D.CifarData:
    """``train`` training and ``test`` test images of each of ``n_classes`` classes: a class-dependent
    mean colour plus uniform noise, 3 x 32 x 32 uint8, named ``name`` (CIFAR-10 by default) and
    labelled as coming from ``source`` ("subset" or "full")."""
    gen = torch.Generator().manual_seed(seed)
    colours = torch.randint(0, 256, (n_classes, 3, 1, 1), generator=gen)

    def images(per_class):
        y = torch.arange(n_classes).repeat_interleave(per_class)
        noise = torch.randint(-40, 41, (len(y), 3, 32, 32), generator=gen)
        return (colours[y] + noise).clamp(0, 255).to(torch.uint8), y

    xtr, ytr = images(train)
    xte, yte = images(test)
    return D.CifarData(name, xtr, ytr, xte, yte, tuple(f"c{i}" for i in range(n_classes)), source, Path("/fake"))
