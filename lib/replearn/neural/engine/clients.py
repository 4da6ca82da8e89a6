"""Client data: every client's training and test images and labels as tensors on one device,
and the checks that they fit a model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn

from replearn.backend import default_device, make_generator
from replearn.checks import check_int
from replearn.neural.data import normalise

MAX_INPUT = 1e4
"""Largest absolute image value the engine accepts: normalised images lie within a few units,
raw 0-255 pixels below 256; larger values (e.g. 1e30) make the first step overflow and would
otherwise be blamed on the learning rate."""



@dataclass(frozen=True)
class ClientData:
    """Per-client train and test tensors on one device: images float32 or float64 (n_i, C, H,
    W), already normalised and finite, all of one dtype and one image shape; labels int64
    (n_i,), non-negative. Every client needs training data; a client may have no test data
    (it is then left out of the test averages, see :class:`Evaluation`), and so may all of
    them (one Flower node's data), but a run needs at least one client with some (it checks).
    The training runs cast the images to the model's dtype."""

    x_train: tuple[torch.Tensor, ...]
    y_train: tuple[torch.Tensor, ...]
    x_test: tuple[torch.Tensor, ...]
    y_test: tuple[torch.Tensor, ...]

    def __post_init__(self):
        lists = (self.x_train, self.y_train, self.x_test, self.y_test)
        if not all(isinstance(t, tuple) for t in lists):
            raise ValueError("x_train, y_train, x_test and y_test must be tuples of tensors (one per client)")
        if len({len(t) for t in lists}) != 1 or not self.x_train:
            raise ValueError("x_train, y_train, x_test and y_test need one entry per client "
                             "(at least one client)")
        first = self.x_train[0]
        for i, (xa, ya, xb, yb) in enumerate(zip(*lists)):
            for x, y, split in ((xa, ya, "train"), (xb, yb, "test")):
                if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
                    raise ValueError(f"client {i} {split} images and labels must be tensors")
                if x.ndim != 4 or x.dtype not in (torch.float32, torch.float64):
                    raise ValueError(f"client {i} {split} images must be float32 or float64 (n, C, H, W), "
                                     f"got {x.dtype} {tuple(x.shape)}; normalise uint8 images first "
                                     f"(ClientData.from_partition does)")
                if x.dtype != first.dtype or x.shape[1:] != first.shape[1:] or x.device != first.device:
                    raise ValueError(f"client {i} {split} images are {x.dtype} {tuple(x.shape[1:])} on "
                                     f"{x.device}, client 0's train images {first.dtype} "
                                     f"{tuple(first.shape[1:])} on {first.device}: all must agree")
                if y.shape != (x.shape[0],) or y.dtype != torch.int64 or y.device != x.device:
                    raise ValueError(f"client {i} {split} labels must be int64 of shape ({x.shape[0]},) on "
                                     f"{x.device}, got {y.dtype} {tuple(y.shape)} on {y.device}")
                if x.shape[0] and not bool(torch.isfinite(x).all()):
                    raise ValueError(f"client {i} {split} images contain NaN or infinite values")
                if y.numel() and int(y.min()) < 0:
                    raise ValueError(f"client {i} {split} labels must be >= 0, got {int(y.min())}")
            if xa.shape[0] == 0:
                raise ValueError(f"client {i} has no training data; drop it or change the partition")

    @property
    def dtype(self) -> torch.dtype:
        return self.x_train[0].dtype

    def to(self, dtype: torch.dtype) -> "ClientData":
        """The same clients with images of ``dtype`` (float32 or float64); ``self`` if equal."""
        if dtype == self.dtype:
            return self
        return ClientData(tuple(x.to(dtype) for x in self.x_train), self.y_train,
                          tuple(x.to(dtype) for x in self.x_test), self.y_test)

    @classmethod
    def from_partition(cls, x_train: torch.Tensor, y_train: torch.Tensor, train_parts: Sequence[torch.Tensor],
                       x_test: torch.Tensor, y_test: torch.Tensor, test_parts: Sequence[torch.Tensor], *,
                       dataset: str | None = None, device: torch.device | str | None = None,
                       dtype: torch.dtype = torch.float32) -> "ClientData":
        """Clients from whole arrays and index lists (one index tensor per client).

        uint8 images are normalised with :func:`replearn.neural.data.normalise` (``dataset`` names
        the channel statistics, e.g. ``"cifar10"``); float images are taken as they are. The
        images are stored as ``dtype`` (float32 or float64: the dtype of the model to train).
        """
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}")
        if len(train_parts) != len(test_parts):
            raise ValueError(f"{len(train_parts)} train index lists but {len(test_parts)} test index lists")
        device = torch.device(device) if device is not None else default_device()

        def prepare(x):
            if x.dtype == torch.uint8:
                if dataset is None:
                    raise ValueError("uint8 images need dataset= (e.g. 'cifar10') to pick the normalisation")
                x = normalise(x, dataset)
            return x.to(device=device, dtype=dtype)

        def take(x, y, parts):
            xs, ys = [], []
            for idx in parts:
                idx = torch.as_tensor(idx, dtype=torch.int64)
                xs.append(prepare(x[idx]))
                ys.append(y[idx].to(device=device, dtype=torch.int64))
            return tuple(xs), tuple(ys)

        xtr, ytr = take(x_train, y_train, train_parts)
        xte, yte = take(x_test, y_test, test_parts)
        return cls(xtr, ytr, xte, yte)

    @property
    def n_clients(self) -> int:
        return len(self.x_train)

    @property
    def train_sizes(self) -> torch.Tensor:
        return torch.tensor([x.shape[0] for x in self.x_train], dtype=torch.int64)

    @property
    def test_sizes(self) -> torch.Tensor:
        return torch.tensor([x.shape[0] for x in self.x_test], dtype=torch.int64)

    @property
    def device(self) -> torch.device:
        return self.x_train[0].device

    def subset(self, clients: Sequence[int]) -> "ClientData":
        """The clients with the given indices, in that order."""
        idx = list(clients)
        return ClientData(*(tuple(part[i] for i in idx) for part in
                            (self.x_train, self.y_train, self.x_test, self.y_test)))

    def take_train(self, n: int, *, seed: int, option: str = "n") -> "ClientData":
        """Each client keeps ``n`` random training samples; for fine-tuning with a given number
        of samples per client. A ``ValueError`` names ``option`` (the caller's name for ``n``,
        e.g. ``"kept_per_client"``) and the client's size if a client holds fewer than ``n``
        (it could not keep them: the run would train on fewer than asked)."""
        check_int(n, option, 1)
        sizes = self.train_sizes.tolist()
        if min(sizes) < n:
            i = sizes.index(min(sizes))
            raise ValueError(f"{option} = {n} training images per client, but client {i} holds {sizes[i]} "
                             f"training images (the smallest client); lower {option} to at most {sizes[i]}")
        gen = make_generator(seed)
        xs, ys = [], []
        for x, y in zip(self.x_train, self.y_train):
            keep = torch.randperm(x.shape[0], generator=gen)[:n].to(x.device)
            xs.append(x[keep])
            ys.append(y[keep])
        return ClientData(tuple(xs), tuple(ys), self.x_test, self.y_test)



def model_dtype(model: nn.Module) -> torch.dtype:
    """The one floating dtype of ``model``'s parameters (the dtype the engine trains in)."""
    dtypes = {p.dtype for p in model.parameters()}
    if len(dtypes) != 1 or next(iter(dtypes)) not in (torch.float32, torch.float64):
        raise ValueError(f"the model's parameters must have one floating dtype, float32 or float64, got "
                         f"{sorted(map(str, dtypes))}; use model.to(torch.float32) or model.to(torch.float64)")
    return next(iter(dtypes))


def check_client_data(clients) -> ClientData:
    """``clients``, which must be a :class:`ClientData` (``ValueError`` naming the type it is)."""
    if not isinstance(clients, ClientData):
        raise ValueError(f"clients must be a neural.ClientData (ClientData(x_train, y_train, x_test, y_test), "
                         f"four tuples of tensors, one per client, or ClientData.from_partition), got a "
                         f"{type(clients).__name__}")
    return clients


@torch.no_grad()
def check_inputs(model: nn.Module, clients: ClientData) -> ClientData:
    """Check that ``clients`` fit ``model`` and return them in the model's dtype.

    The images are cast to :func:`model_dtype` (float32 <-> float64: the dtype follows the
    model). One training image is passed through the model: a ``ValueError`` names the image
    shape if the model rejects it, and every client's labels must lie in ``[0, C)`` for the
    model's ``C`` outputs. Anything but a :class:`ClientData` is a ``ValueError`` naming it."""
    check_client_data(clients)
    clients = clients.to(model_dtype(model))
    for split, xs in (("train", clients.x_train), ("test", clients.x_test)):
        for i, x in enumerate(xs):
            big = float(x.abs().max()) if x.numel() else 0.0
            if big > MAX_INPUT:
                raise ValueError(f"client {i} {split} images have a value of magnitude {big:.3g}, more than "
                                 f"MAX_INPUT = {MAX_INPUT:g}: normalise the images first "
                                 f"(replearn.neural.data.normalise; ClientData.from_partition does it for uint8)")
    devices = {p.device for p in model.parameters()}
    if devices != {clients.device}:
        raise ValueError(f"the model is on {sorted(map(str, devices))} but the clients' data on {clients.device}; "
                         f"move one of them (model.to(device) or ClientData.from_partition(device=...))")
    probe = clients.x_train[0][:1]
    try:
        out = model(probe)
    except RuntimeError as err:
        raise ValueError(f"images of shape {tuple(probe.shape[1:])} do not fit the model ({err}); "
                         f"resize the images or build the model for this input size") from err
    if out.ndim != 2:
        raise ValueError(f"the model must return logits (batch, classes), got shape {tuple(out.shape)}")
    n_classes = out.shape[1]
    for split, ys in (("train", clients.y_train), ("test", clients.y_test)):
        for i, y in enumerate(ys):
            if y.numel() and int(y.max()) >= n_classes:
                raise ValueError(f"client {i} {split} labels go up to {int(y.max())}, but the model's head has "
                                 f"{n_classes} outputs (labels 0..{n_classes - 1}); build the model with "
                                 f"n_classes > {int(y.max())} or relabel the data")
    return clients

