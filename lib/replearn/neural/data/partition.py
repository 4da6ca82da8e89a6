"""Client partitions of a labelled data set, as the federated-learning papers' code makes them:
*shards* with ``C`` classes per client (McMahan et al. 2017; LG-FedAvg and FedRep code; the
authors' split and a disjoint one, :data:`SHARD_SPLITS`) and Dirichlet(alpha) label skew (Hsu et
al. 2019; alpha = 0.6 in the FedAvg fine-tuning paper); per-client test sets with each client's
label proportions, and class splits for new clients. Every partition is a list of int64 index
tensors, one per client, drawn from a numpy generator seeded by ``seed``."""

from __future__ import annotations

import numpy as np
import torch

from replearn.checks import check_bool, check_count, check_int, check_positive

__all__ = ["MAX_DIRICHLET_ATTEMPTS", "SHARD_SPLITS", "class_split", "client_test_split",
           "dirichlet_partition", "disjoint_shard_partition", "restrict_classes", "shard_partition"]


def _rng(seed: int) -> np.random.Generator:
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r} (partitions must be reproducible)")
    return np.random.default_rng(int(seed))


def _labels(labels, what: str = "labels") -> np.ndarray:
    y = labels.cpu().numpy() if isinstance(labels, torch.Tensor) else np.asarray(labels)
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer) or (len(y) and y.min() < 0):
        raise ValueError(f"{what} must be a 1-D array of non-negative integer class labels, "
                         f"got dtype {y.dtype} and shape {y.shape}")
    if not len(y):
        raise ValueError(f"{what} is empty: pass the labels of at least one sample")
    return y.astype(np.int64)


def _n_clients(n_clients, y: np.ndarray) -> int:
    """``n_clients`` as an int in [1, len(y)] (a client needs a sample)."""
    check_count(n_clients, "n_clients", 1)
    if n_clients > len(y):
        raise ValueError(f"n_clients = {n_clients} exceeds the {len(y)} samples (every client needs at "
                         f"least one): use at most {len(y)} clients or more data")
    return int(n_clients)


def _partition_indices(partition, n: int) -> list[np.ndarray]:
    """Each client's training indices as a 1-D int array in [0, n) (ValueError naming the client)."""
    if isinstance(partition, (str, bytes, torch.Tensor, np.ndarray)) or not hasattr(partition, "__len__") \
            or not len(partition):
        raise ValueError(f"partition must be a non-empty list of index tensors (one per client), got "
                         f"{type(partition).__name__}")
    out = []
    for i, ix in enumerate(partition):
        a = ix.cpu().numpy() if isinstance(ix, torch.Tensor) else np.asarray(ix)
        if a.ndim != 1 or (len(a) and not np.issubdtype(a.dtype, np.integer)):
            raise ValueError(f"partition[{i}] must be a 1-D integer index array, got dtype {a.dtype} and "
                             f"shape {a.shape}")
        if len(a) and (int(a.min()) < 0 or int(a.max()) >= n):
            raise ValueError(f"partition[{i}] holds indices in [{int(a.min())}, {int(a.max())}] but "
                             f"train_labels has {n} entries: the partition was made for other data")
        out.append(a.astype(np.int64))
    return out


def _index_tensors(parts) -> list[torch.Tensor]:
    return [torch.from_numpy(np.sort(np.asarray(p, dtype=np.int64))) for p in parts]


def _shard_setup(labels, n_clients: int, classes_per_client: int):
    """The labels, the number of clients, the classes and the shards per class of a shard
    partition (checked: ``n_clients * classes_per_client`` a multiple of the number of classes,
    every class with at least that many samples)."""
    y = _labels(labels)
    n_clients = _n_clients(n_clients, y)
    check_count(classes_per_client, "classes_per_client", 1)
    classes = np.unique(y)
    k = len(classes)
    if n_clients < 1 or not 1 <= classes_per_client <= k:
        raise ValueError(f"need n_clients >= 1 and 1 <= classes_per_client <= {k} (the number of "
                         f"classes), got {n_clients} and {classes_per_client}")
    n_shards = n_clients * classes_per_client
    if n_shards % k:
        raise ValueError(f"n_clients * classes_per_client = {n_shards} must be a multiple of the "
                         f"number of classes {k}, so that every class is cut into the same number of shards")
    per_class = n_shards // k
    smallest = int(np.bincount(y)[classes].min())
    if smallest < per_class:
        raise ValueError(f"a class has only {smallest} samples but must be cut into {per_class} shards; "
                         f"use fewer clients or fewer classes per client")
    return y, n_clients, classes, per_class


def _cut_shards(y: np.ndarray, classes: np.ndarray, per_class: int, rng) -> dict:
    """Each class's samples, shuffled and cut into ``per_class`` shards of (nearly) equal size."""
    return {c: list(np.array_split(rng.permutation(np.flatnonzero(y == c)), per_class)) for c in classes}


def shard_partition(labels, n_clients: int, classes_per_client: int, *, seed: int) -> list[torch.Tensor]:
    """The pathological non-IID split of the LG-FedAvg and FedRep code (``noniid`` in the
    authors' ``utils/sampling.py``, lgcollins/FedRep): ``classes_per_client`` shards per client.

    The samples of each of the ``K`` classes are shuffled and cut into ``per_class = n_clients *
    classes_per_client / K`` shards of (nearly) equal size. The list of classes, each repeated
    ``per_class`` times, is shuffled and reshaped to ``(n_clients, classes_per_client)``: row
    ``i`` is client ``i``'s label list. Client by client, each label of its list takes a shard of
    that class chosen at random among those left. So clients hold random label sets that overlap
    (about 47 distinct sets for 100 clients with 2 of 10 classes), and a client can draw the same
    class twice (then it holds one class). Every sample is used exactly once. As in the authors'
    code the samples of a class are cut in order; here they are shuffled first (the order of the
    official files is already random, that of a class-balanced subset is not). For the split
    that hands every class's shards to disjoint client groups see :func:`disjoint_shard_partition`.
    """
    y, n_clients, classes, per_class = _shard_setup(labels, n_clients, classes_per_client)
    rng = _rng(seed)
    shards = _cut_shards(y, classes, per_class, rng)
    label_lists = rng.permutation(np.tile(classes, per_class)).reshape(n_clients, classes_per_client)
    parts = []
    for row in label_lists:
        parts.append(np.concatenate([shards[c].pop(int(rng.integers(len(shards[c])))) for c in row]))
    return _index_tensors(parts)


def disjoint_shard_partition(labels, n_clients: int, classes_per_client: int, *,
                             seed: int) -> list[torch.Tensor]:
    """``classes_per_client`` shards of distinct classes per client, dealt so that the clients
    fall into ``K / classes_per_client`` groups with disjoint label sets (when that divides).

    Shards are cut as in :func:`shard_partition`, listed class by class (classes in random
    order) and the ``p``-th shard goes to client ``p mod n_clients``; the clients are then
    shuffled. For 100 clients with 2 of the 10 CIFAR-10 classes this gives exactly 5 disjoint
    class pairs, each held by 20 clients, on every seed: not the authors' split (a global model
    then fails group by group). The book uses it for new clients that must hold distinct classes
    (4.8, 4.9 and 5.9's held-out clients: chance is then exactly 1/S). Every sample is used exactly once.
    """
    y, n_clients, classes, per_class = _shard_setup(labels, n_clients, classes_per_client)
    rng = _rng(seed)
    shards = {c: np.array_split(rng.permutation(np.flatnonzero(y == c)), per_class) for c in classes}
    dealt = np.repeat(rng.permutation(classes), per_class).reshape(classes_per_client, n_clients).T
    assign = dealt[rng.permutation(n_clients)]
    used = dict.fromkeys(classes, 0)
    parts = []
    for row in assign:
        client = []
        for c in row:
            client.append(shards[c][used[c]])
            used[c] += 1
        parts.append(np.concatenate(client))
    return _index_tensors(parts)


#: The shard splits by name (``split`` of :class:`replearn.neural.specs.FederationSpec`).
SHARD_SPLITS = {"authors": shard_partition, "disjoint": disjoint_shard_partition}


#: The most draws :func:`dirichlet_partition` may be allowed (``max_attempts``): each is a full
#: draw over the data (milliseconds for CIFAR), so this bounds a failing call to seconds.
MAX_DIRICHLET_ATTEMPTS = 10_000


def dirichlet_partition(labels, n_clients: int, alpha: float, *, seed: int, min_size: int = 10,
                        equal_sizes: bool = False, max_attempts: int = 100) -> list[torch.Tensor]:
    """Dirichlet(``alpha``) label skew; smaller ``alpha`` means more heterogeneous clients.

    ``equal_sizes=False`` (Yurochkin et al. 2019; the FedAvg fine-tuning paper uses alpha = 0.6):
    for each class, the proportions of its samples given to the clients are drawn from
    Dir(alpha * 1) over clients; the whole draw is repeated until every client holds at least
    ``min_size`` samples, at most ``max_attempts`` times (at most
    :data:`MAX_DIRICHLET_ATTEMPTS`; then ``ValueError`` saying how unlikely a success was). An
    impossible ``min_size`` (``n_clients * min_size`` more than the samples) is refused before
    any draw. Every sample is used.

    ``equal_sizes=True`` (Hsu et al. 2019): each client gets ``len(labels) // n_clients`` samples
    with class proportions drawn from Dir(alpha * 1) over classes; clients are filled in turn and
    when a class runs out its share goes to the client's other classes still available (then to
    any class left), so later clients can be less skewed than their draw.
    """
    y = _labels(labels)
    n_clients = _n_clients(n_clients, y)
    if n_clients < 1 or not alpha > 0:
        raise ValueError(f"need n_clients >= 1 and alpha > 0, got {n_clients} and {alpha}")
    alpha = check_positive(alpha, "alpha")
    check_count(min_size, "min_size", 0)
    if (isinstance(max_attempts, (int, np.integer)) and not isinstance(max_attempts, (bool, np.bool_))
            and max_attempts > MAX_DIRICHLET_ATTEMPTS):
        raise ValueError(f"max_attempts = {max_attempts} exceeds MAX_DIRICHLET_ATTEMPTS = "
                         f"{MAX_DIRICHLET_ATTEMPTS} (each attempt is a full draw; a min_size that fails that "
                         f"often is too strict): lower min_size, raise alpha or use fewer clients")
    check_count(max_attempts, "max_attempts", 1)
    check_bool(equal_sizes, "equal_sizes")
    rng = _rng(seed)
    classes = np.unique(y)
    by_class = [np.flatnonzero(y == c) for c in classes]
    if equal_sizes:
        size = len(y) // n_clients
        if size < max(min_size, 1):
            raise ValueError(f"{len(y)} samples give {size} per client, fewer than min_size={min_size}")
        remaining = np.array([len(ix) for ix in by_class])
        counts = np.zeros((n_clients, len(classes)), dtype=np.int64)
        for i in range(n_clients):
            props = rng.dirichlet(np.full(len(classes), float(alpha)))
            while (need := size - counts[i].sum()) > 0:
                left = remaining - counts[i]
                weights = props * (left > 0)
                weights = weights if weights.sum() > 0 else (left > 0).astype(float)
                counts[i] += np.minimum(rng.multinomial(need, weights / weights.sum()), left)
            remaining -= counts[i]
        perms = [rng.permutation(ix) for ix in by_class]
        return _index_tensors(_take_consecutive(perms, counts))
    if n_clients * min_size > len(y):  # no draw can succeed: do not draw max_attempts times to find out
        raise ValueError(f"min_size={min_size} samples for each of the {n_clients} clients needs "
                         f"{n_clients * min_size} samples, but labels has {len(y)}: no Dirichlet draw can "
                         f"give every client that many; use min_size <= {len(y) // n_clients} or at most "
                         f"{len(y) // min_size} clients")
    best = 0  # the largest smallest-client size over the draws (for the message)
    for _ in range(max_attempts):
        parts = [[] for _ in range(n_clients)]
        for ix in by_class:
            props = rng.dirichlet(np.full(n_clients, float(alpha)))
            cuts = (np.cumsum(props)[:-1] * len(ix)).astype(np.int64)
            for client, piece in zip(parts, np.split(rng.permutation(ix), cuts)):
                client.append(piece)
        parts = [np.concatenate(p) for p in parts]
        smallest = min(len(p) for p in parts)
        if smallest >= min_size:
            return _index_tensors(parts)
        best = max(best, smallest)
    raise ValueError(f"no Dirichlet({alpha}) draw in {max_attempts} attempts gave every one of the "
                     f"{n_clients} clients at least min_size={min_size} samples (the best draw's smallest "
                     f"client had {best}), so a draw succeeds with probability below about "
                     f"{min(1.0, 3 / max_attempts):.2g} (95% bound from {max_attempts} failures); lower "
                     f"min_size, raise alpha, use fewer clients or raise max_attempts (at most "
                     f"MAX_DIRICHLET_ATTEMPTS = {MAX_DIRICHLET_ATTEMPTS})")


def _take_consecutive(perms: list[np.ndarray], counts: np.ndarray) -> list[np.ndarray]:
    """Client ``i`` takes the next ``counts[i, c]`` entries of ``perms[c]`` for every class ``c``."""
    ends = np.cumsum(counts, axis=0)
    starts = ends - counts
    return [np.concatenate([perms[c][starts[i, c]:ends[i, c]] for c in range(len(perms))])
            for i in range(len(counts))]


def client_test_split(partition: list[torch.Tensor], train_labels, test_labels, *, seed: int,
                      n_per_client: int | None = None) -> list[torch.Tensor]:
    """Disjoint per-client test sets with the label set and proportions of each client's training data.

    Client ``i`` wants ``want[i, c]`` test images of class ``c``: by default its share of the
    class's training samples times the number of test images of that class (so a partition of
    the whole training set spreads the whole test set); with ``n_per_client``, that many images
    in the proportions of the client's training labels. Wants are rounded, and at least 1 for
    every class the client holds, 0 for the others. Images are drawn without replacement and no
    test image goes to two clients. When a class's test images run out, every client's want of
    that class above 1 is scaled down proportionally (largest remainders, so the class's test
    images are all used); if fewer test images of a class exist than
    clients holding it, ``ValueError``.
    """
    ytr, yte = _labels(train_labels, "train_labels"), _labels(test_labels, "test_labels")
    parts = _partition_indices(partition, len(ytr))
    if n_per_client is not None:
        check_count(n_per_client, "n_per_client", 1)
    k = int(max(ytr.max(initial=0), yte.max(initial=0))) + 1
    counts = np.stack([np.bincount(ytr[ix], minlength=k) for ix in parts])
    avail = np.bincount(yte, minlength=k)
    if n_per_client is None:
        quota = counts * (avail / np.maximum(counts.sum(0), 1))
    else:
        if n_per_client < 1:
            raise ValueError(f"n_per_client must be positive, got {n_per_client}")
        quota = n_per_client * counts / np.maximum(counts.sum(1, keepdims=True), 1)
    want = np.where(counts > 0, np.maximum(1, np.rint(quota)), 0).astype(np.int64)
    present = (counts > 0).sum(0)
    short = np.flatnonzero(present > avail)
    if len(short):
        c = short[0]
        raise ValueError(f"class {c} has {avail[c]} test images but {present[c]} clients hold it; "
                         f"every client needs at least one test image of each of its classes")
    for c in np.flatnonzero(want.sum(0) > avail):
        has = counts[:, c] > 0
        share = (want[:, c] - has) * (avail[c] - present[c]) / (want[:, c] - has).sum()
        extra = np.floor(share).astype(np.int64)
        leftover = avail[c] - present[c] - extra.sum()
        extra[np.argsort(extra - share, kind="stable")[:leftover]] += 1  # largest remainders
        want[:, c] = has + extra
    rng = _rng(seed)
    perms = [rng.permutation(np.flatnonzero(yte == c)) for c in range(k)]
    return _index_tensors(_take_consecutive(perms, want))


def class_split(n_classes: int, n_new: int, *, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Disjoint random ``(train_classes, new_classes)``, sorted int64 tensors, e.g. 80 / 20
    CIFAR-100 classes for training clients and for new clients."""
    check_count(n_classes, "n_classes", 1)
    check_int(n_new, "n_new", 1)
    if not 0 < n_new < n_classes:
        raise ValueError(f"need 0 < n_new < n_classes, got n_new={n_new}, n_classes={n_classes}")
    perm = _rng(seed).permutation(n_classes)
    return tuple(torch.from_numpy(np.sort(p)) for p in (perm[n_new:], perm[:n_new]))


def restrict_classes(labels, classes) -> tuple[torch.Tensor, torch.Tensor]:
    """``(index, new_labels)``: positions of the samples whose label is in ``classes`` and their
    labels renumbered ``0..len(classes)-1`` in the order of ``classes``."""
    y = _labels(labels)
    cls = _labels(classes, "classes")
    if len(np.unique(cls)) != len(cls) or not len(cls):
        raise ValueError(f"classes must be a non-empty list of distinct labels, got {cls.tolist()}")
    lookup = np.full(max(int(y.max(initial=0)), int(cls.max())) + 1, -1)
    lookup[cls] = np.arange(len(cls))
    index = np.flatnonzero(lookup[y] >= 0)
    return torch.from_numpy(index), torch.from_numpy(lookup[y[index]])
