"""Transitional (issue 15): book 1.3's driver is now
:mod:`replearn.experiments.ch01_arm.s03_lower_bound` and its instances come from
:func:`replearn.lower_bound.make_instance` (a :class:`replearn.linear.Problem`). This module only
re-exports ``make_instance`` for ``widgets.py``; remove it together with the ARM explorer there."""

from ..lower_bound import make_instance

__all__ = ["make_instance"]
