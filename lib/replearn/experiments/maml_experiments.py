"""Old home of the drivers of book 2.4-2.6, kept only for :func:`replearn.widgets.maml_explorer_curves`
(which imports :func:`make_tightness_problem` from here): the drivers are now
``experiments/ch02_maml_anil/s04_tightness.py``, ``s05_finite_samples.py`` and
``s06_global_optimality.py``. Remove this module together with the MAML explorer of ``widgets.py``.
"""

from __future__ import annotations

from .ch02_maml_anil.s04_tightness import make_tightness_problem

__all__ = ["make_tightness_problem"]
