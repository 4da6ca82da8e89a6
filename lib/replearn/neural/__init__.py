"""The neural federated engine: CIFAR data and client partitions (:mod:`~replearn.neural.data`,
:mod:`~replearn.neural.specs`), the convolutional networks (:mod:`~replearn.neural.models`),
the federated algorithms, one file each (:mod:`~replearn.neural.algorithms`), the round loop
that runs them all (:mod:`~replearn.neural.engine`), Flower (:mod:`~replearn.neural.flower`),
resumable runs (:mod:`~replearn.neural.checkpoints`) and representation similarity
(:mod:`~replearn.neural.similarity`). It imports nothing from the book (:mod:`replearn.book`)
or its sections (:mod:`replearn.experiments`, where the CIFAR studies built on it live).

The engine's public names are re-exported here, so ``from replearn import neural`` then
``neural.TrainConfig``, ``neural.ClientData``, ``neural.run(...)``.
"""

from replearn.neural.engine import *  # noqa: F401,F403  (the engine's __all__)
from replearn.neural.engine import __all__  # noqa: F401
