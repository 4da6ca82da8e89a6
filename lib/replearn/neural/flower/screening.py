"""The screening of one Flower reply (the fault contract of :mod:`replearn.neural.flower`):
its arrays decoded and checked against the server's parameters, its metrics, and the
plausible-magnitude rule over a round's uploads; :class:`Dropped` records a reply left out."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from flwr.app import ArrayRecord, Message, MetricRecord

__all__ = ["Dropped", "Upload", "decoded", "implausible", "number"]


class Dropped(NamedTuple):
    """A reply left out: the client (None if the sender is unknown), the stage ("train",
    "evaluate", "state": a state a broadcast reads, "fetch": the parameters and state fetched
    after the last round) and why."""

    client: int | None
    stage: str
    reason: str


def number(metrics: MetricRecord, key: str) -> float:
    """``metrics[key]`` as a finite float (ValueError naming the key otherwise)."""
    value = metrics.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"metric {key!r} must be a finite number, got {value!r}")
    return float(value)


class Upload(NamedTuple):
    """A training reply that passed the per-reply screening."""

    client: int
    msg: Message
    record: ArrayRecord
    arrays: dict[str, np.ndarray]
    train_loss: float
    loss_sum: float
    n_steps: int

    @property
    def signature(self) -> tuple:
        return tuple(sorted((n, str(a.dtype), a.shape) for n, a in self.arrays.items()))


def decoded(record: ArrayRecord, sent: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The arrays of an upload ``record``, decoded: metadata and payload agreeing, named like a
    global parameter (``sent``: the server's parameters as sent) only with its dtype and shape,
    integer, boolean or floating, and finite (``ValueError`` naming the array otherwise)."""
    values = {}
    for name, array in record.items():
        glob = sent.get(name)
        if glob is not None and (tuple(array.shape), array.dtype) != (glob.shape, str(glob.dtype)):
            raise ValueError(f"{name}: metadata {array.dtype} {tuple(array.shape)} does not match the "
                             f"global parameter ({glob.dtype} {glob.shape})")
        try:
            value = array.numpy()
        except Exception as ex:  # noqa: BLE001 -- whatever the bytes are, they are not the array
            raise ValueError(f"{name}: the payload cannot be decoded ({type(ex).__name__}: {ex})") from ex
        if value.shape != tuple(array.shape) or str(value.dtype) != array.dtype:
            raise ValueError(f"{name}: the payload holds {value.dtype} {value.shape}, its metadata says "
                             f"{array.dtype} {tuple(array.shape)}")
        if value.dtype.kind not in "biuf":
            raise ValueError(f"{name}: unsupported dtype {value.dtype}")
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            raise ValueError(f"{name}: non-finite values (NaN or inf)")
        values[name] = value
    return values


def implausible(uploads: Sequence[Upload], sent: dict[str, np.ndarray], ratio: float) -> dict[int, str]:
    """The plausible-magnitude rule (module docstring of :mod:`replearn.neural.flower`) over a
    round's screened ``uploads`` (``sent``: the server's parameters as sent, ``ratio``:
    ``max_update_ratio``): client -> why its upload is implausible, for those that are."""
    bad: dict[int, str] = {}
    for name in uploads[0].arrays:
        values = [u.arrays[name].astype(np.float64) for u in uploads]
        if name in sent:
            glob = sent[name].astype(np.float64)
            bound = ratio * max(float(np.linalg.norm(glob)), 1.0)
            for u, v in zip(uploads, values):
                change = float(np.linalg.norm(v - glob))
                if not change <= bound and u.client not in bad:
                    bad[u.client] = (f"{name}: implausible magnitude: the update moves it by {change:.3g}, "
                                     f"more than max_update_ratio * max(|global|, 1) = {bound:.3g}")
        elif len(uploads) >= 3:
            center = np.median(np.stack(values), axis=0)
            distances = [float(np.linalg.norm(v - center)) for v in values]
            bound = ratio * max(float(np.linalg.norm(center)), float(np.median(distances)), 1.0)
            for u, d in zip(uploads, distances):
                if not d <= bound and u.client not in bad:
                    bad[u.client] = (f"{name}: implausible magnitude: {d:.3g} from the replies' "
                                     f"coordinate-wise median, more than max_update_ratio * max(|median|, "
                                     f"median distance, 1) = {bound:.3g}")
    return bad
