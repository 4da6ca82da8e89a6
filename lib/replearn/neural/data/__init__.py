"""CIFAR-10/100: loading, client partitions, normalisation and batched augmentation.

Data come from one of two places, looked up in this order under a data directory ``root``
(the ``root`` argument, else the environment variable ``REPLEARN_DATA``, else
``~/.cache/replearn``):

1. the extracted official python-pickle archive (``cifar-10-batches-py/`` or
   ``cifar-100-python/``), Krizhevsky (2009), <https://www.cs.toronto.edu/~kriz/cifar.html>:
   the full dataset (``source == "full"``);
2. the real CIFAR subsets ``cifar10_subset.npz`` / ``cifar100_subset.npz`` (official pixels and
   labels, 2,000 / 500 images per CIFAR-10 class, 250 / 50 per CIFAR-100 class; see the README
   that ships with them): ``source == "subset"``;
3. with ``download=True``, or the environment variable ``REPLEARN_DOWNLOAD=1``, the official
   archive is downloaded, md5-checked and extracted.

When none of them is there, :func:`load_cifar` raises :class:`DataMissingError`, whose message
lists the three fixes; in a notebook it is shown as that message alone and the notebook's later
cells are skipped until the data are found. :func:`make_subsets` (also
``scripts/make_cifar_subsets.py``) rebuilds the offline subsets from the official archives.

Partitions follow the federated-learning papers' code: *shards* with ``C`` classes per client
(McMahan et al. 2017; LG-FedAvg and FedRep code) and Dirichlet(alpha) label skew (Hsu et al.
2019; alpha = 0.6 in the FedAvg fine-tuning paper). Every partition is a list of int64 index
tensors, one per client, drawn from a numpy generator seeded by ``seed``.

Modules, one idea each: :mod:`~replearn.neural.data.datasets` (the datasets' archives, files
and channel statistics), :mod:`~replearn.neural.data.location` (the data directory, the download
switch, :class:`DataMissingError`), :mod:`~replearn.neural.data.cifar` (:func:`load_cifar` and
the readers of both formats), :mod:`~replearn.neural.data.download` (downloading and extracting
the official archives), :mod:`~replearn.neural.data.subsets` (the offline subsets and
:func:`make_subsets`), :mod:`~replearn.neural.data.transforms` (:func:`normalise`,
:func:`augment`) and :mod:`~replearn.neural.data.partition` (client partitions). Their public
names are re-exported here.
"""

from replearn.neural.data.cifar import N_COARSE, CifarData, load_cifar, read_pickle
from replearn.neural.data.datasets import CHANNEL_STATS
from replearn.neural.data.download import MAX_TIMEOUT, download_archive, extract_archive, file_digest
from replearn.neural.data.location import DataMissingError, data_root, download_enabled
from replearn.neural.data.partition import (MAX_DIRICHLET_ATTEMPTS, SHARD_SPLITS, class_split, client_test_split,
                                            dirichlet_partition, disjoint_shard_partition, restrict_classes,
                                            shard_partition)
from replearn.neural.data.subsets import SUBSET_DIGESTS, content_digest, make_subsets, subset_index
from replearn.neural.data.transforms import augment, normalise

__all__ = ["CHANNEL_STATS", "MAX_DIRICHLET_ATTEMPTS", "MAX_TIMEOUT", "N_COARSE", "SHARD_SPLITS", "SUBSET_DIGESTS",
           "CifarData", "DataMissingError", "augment", "class_split", "client_test_split", "content_digest",
           "data_root", "dirichlet_partition", "disjoint_shard_partition", "download_archive", "download_enabled",
           "extract_archive", "file_digest", "load_cifar", "make_subsets", "normalise", "read_pickle",
           "restrict_classes", "shard_partition", "subset_index"]
