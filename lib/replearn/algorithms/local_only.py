"""Local only: every client trains its own copy of the initial model on its own data; nothing
is communicated (Table 1's first row). A "round" is one local phase for the sampled clients.
Runs on :func:`replearn.neural.run_spec` (``algorithm_spec("local_only")``).
"""

from .base import SpecAlgorithm


class LocalOnly(SpecAlgorithm):
    name, row, key = "Local only", 0, "local_only"


ALGORITHM = LocalOnly()
