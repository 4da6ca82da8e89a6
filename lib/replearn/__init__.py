"""replearn: the library behind *Adaptivity & Shared Representations*.

Modules (one idea each):

- :mod:`replearn.linalg`: principal-angle distance, orthonormal bases, condition numbers
- :mod:`replearn.linear`: the multi-task linear representation model (data, losses, heads)
- :mod:`replearn.federated`: FedAvg and distributed GD (D-GD)
- :mod:`replearn.meta`: average-risk minimisation (ARM), its update decomposition and subspace floor
- :mod:`replearn.maml`: MAML, FO-MAML, ANIL, FO-ANIL (exact meta-gradients), the inductive-hypothesis tracker
- :mod:`replearn.fedrep`: FedRep (shared representation, local heads), method-of-moments init, baselines
- :mod:`replearn.aruba`: online learning, regret upper bounds, meta-learned initialisations and ARUBA step sizes
- :mod:`replearn.data`: CIFAR-10/100 (full archives or offline subsets), client partitions, augmentation
- :mod:`replearn.models`: the papers' CIFAR CNNs with a body/head split
- :mod:`replearn.neural`: federated training of neural networks (FedAvg, D-SGD, FedRep, FedPer, LG-FedAvg, ...)
- :mod:`replearn.similarity`: HSIC, CKA, class cosine-similarity matrices, activation capture
- :mod:`replearn.lower_bound`: ground truths that ARM / D-GD cannot recover
- :mod:`replearn.trajectory`: stacked iterates of a run
- :mod:`replearn.profiles`: CPU-sized default vs paper-sized experiment settings
- :mod:`replearn.plotting`: the book's figure style and plot helpers
- :mod:`replearn.widgets`: the interactive explorers (pure curve functions + ipywidgets panels)
- :mod:`replearn.experiments`: one driver per book section (settings with CPU and paper profiles)
- :mod:`replearn.backend`: dtype, device and seeding helpers
"""

from .backend import DTYPE, default_device, make_generator

__version__ = "0.1.0"
__all__ = ["DTYPE", "default_device", "make_generator", "__version__"]
