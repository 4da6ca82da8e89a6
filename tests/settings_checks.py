"""Checks shared by the tests of the CIFAR settings classes (tests/test_transfer.py for the FedAvg
side, tests/test_personalisation.py for the FedRep side).

The CIFAR settings compose a :class:`replearn.neural.TrainConfig` in their field ``train`` instead
of copying its fields: :func:`check_composes_train` asserts that, and :func:`settings_with_train`
finds every settings class of the CIFAR library modules and the drivers that has a ``train``
field, so that a new one cannot escape the check. :func:`check_fields_type_checked` is the
construction-time type check of ``tests/test_bad_input.py``, for the classes that
:func:`replearn.experiments.settings_classes` does not list (those of the drivers' subpackages
and of the library modules).
"""

import dataclasses
import importlib
import math
import pkgutil

import pytest

from replearn import experiments
from replearn.neural import TrainConfig
from replearn.settings import Settings, _annotated_kinds

#: The TrainConfig fields a settings class must not re-declare. ``seed`` is the exception: a
#: settings' ``seed`` is the experiment's seed (partition, initial network, new clients), from which
#: :meth:`config` sets or derives the seed of the TrainConfig of each run.
TRAIN_FIELDS = frozenset(f.name for f in dataclasses.fields(TrainConfig)) - {"seed"}


def settings_with_train() -> set[type]:
    """Every :class:`~replearn.settings.Settings` subclass with a field named ``train`` in the
    library's CIFAR modules and in the drivers (``replearn.experiments``, subpackages included)."""
    names = ["replearn.experiments.ch04_fedavg.cifar_transfer", "replearn.experiments.ch05_fedrep.cifar_federation"]
    names += [info.name for info in pkgutil.walk_packages(experiments.__path__, "replearn.experiments.")]
    found = set()
    for name in names:
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if (isinstance(obj, type) and issubclass(obj, Settings) and obj.__module__ == module.__name__
                    and "train" in {f.name for f in dataclasses.fields(obj)}):
                found.add(obj)
    return found


def check_composes_train(cls) -> None:
    """``cls.train`` is a TrainConfig in every profile, and ``cls`` declares no TrainConfig field
    of its own."""
    own = {f.name for f in dataclasses.fields(cls)}
    assert "train" in own, f"{cls.__name__} has no train field"
    copied = sorted(own & TRAIN_FIELDS)
    assert not copied, f"{cls.__name__} re-declares TrainConfig fields {copied}"
    train = {f.name: f for f in dataclasses.fields(cls)}["train"]
    assert isinstance(train.default, TrainConfig) and "TrainConfig" in str(train.type)
    for profile in ("default", "long", "paper"):
        assert isinstance(cls.profile(profile).train, TrainConfig), f"{cls.__name__}.{profile}()"


def check_fields_type_checked(cls) -> None:
    """A bool for a count, a string or NaN for a float and an empty grid fail when ``cls`` is
    built, naming the field (the check of tests/test_bad_input.py)."""
    base = cls.profile("default")
    for f in dataclasses.fields(cls):
        kinds = _annotated_kinds(f.type)
        real = "float" in kinds and kinds <= {"int", "float"}
        bad = ([True] if kinds == {"int"} else ["0.1", math.nan] if real
               else [()] if kinds == {"tuple"} and isinstance(f.default, tuple) and f.default else [])
        for value in bad:
            with pytest.raises(ValueError, match=rf"\b{f.name}\b"):
                dataclasses.replace(base, **{f.name: value})
