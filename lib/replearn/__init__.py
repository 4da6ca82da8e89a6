"""replearn: the library behind *Adaptivity & Shared Representations*.

Modules (one idea each):

- :mod:`replearn.linalg`: principal-angle distance, orthonormal bases, condition numbers
- :mod:`replearn.linear`: the multi-task linear representation model (data, losses, heads)
- :mod:`replearn.federated`: FedAvg and distributed GD (D-GD)
- :mod:`replearn.meta`: average-risk minimisation (ARM) and its update decomposition
- :mod:`replearn.lower_bound`: ground truths that ARM / D-GD cannot recover
- :mod:`replearn.trajectory`: stacked iterates of a run
- :mod:`replearn.profiles`: CPU-sized default vs paper-sized experiment settings
- :mod:`replearn.plotting`: the book's figure style and plot helpers
- :mod:`replearn.backend`: dtype, device and seeding helpers
"""

from .backend import DTYPE, default_device, make_generator

__version__ = "0.1.0"
__all__ = ["DTYPE", "default_device", "make_generator", "__version__"]
