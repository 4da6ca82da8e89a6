"""The convolutional networks of the CIFAR experiments, each split into a body and a head.

Two families:

- :class:`FedAvgCNN`: the network of Collins et al. (2022), *FedAvg with fine tuning: local
  updates lead to representation learning*, Section 5.2: three convolutional blocks, each two
  3x3 convolutions (padding 1) with ReLU followed by 2x2 max-pooling, then a three-layer MLP.
  The paper's text gives no widths; we use 32, 64 and 128 channels in the three blocks and an
  MLP 2048 -> 256 -> 128 -> classes (constructor arguments change them).
- :class:`FedRepCNN`: the LG-FedAvg/FedRep CIFAR network in the authors' FedRep code
  (``CNNCifar``): conv 5x5 (3 -> 64) -> ReLU -> pool -> conv 5x5 (64 -> 64) -> ReLU -> pool ->
  fc 1600 -> 120 -> fc 120 -> 64 -> fc 64 -> classes. For CIFAR-100 their code uses wider
  layers (``CNNCifar100``): conv 64 and 128 channels, fc 3200 -> 256 -> 128 -> classes, and in
  training drops fc2's outputs with probability 0.6 before the last layer. It takes its widths
  (and that dropout probability, default none) as numbers (:class:`replearn.neural.specs.NetworkSpec`
  resolves a name to them, the one place that does). Our dropout draws its masks from the run's
  seeded generator, only in the engine's training steps (:class:`DropoutLinear`).

Every model has ``body`` (everything up to the penultimate features, ReLU included) and
``head`` (the last linear layer, as in FedRep, where the head is the last layer), with
``forward(x) = head(body(x))`` and ``features(x) = body(x)``. Activation capture points are
named modules listed by ``layer_names()`` (use ``model.get_submodule(name)`` to hook them).
"""

from __future__ import annotations

from collections import OrderedDict
from contextlib import contextmanager
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from replearn.backend import default_device
from replearn.checks import check_seed

MODEL_NAMES = ("fedavg_cnn", "fedrep_cnn")


class SplitModel(nn.Module):
    """A ``body`` followed by a linear ``head``; ``_capture`` lists the activation modules."""

    _capture: tuple[str, ...] = ()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """The representation h^rep(x): the body's output (input of the head). Inputs are cast
        to the model's dtype, so a float64 model takes the float32 images of the data module."""
        return self.body(x.to(self.head.weight.dtype))

    def layer_names(self) -> tuple[str, ...]:
        """Names (for ``get_submodule``) of the modules whose outputs are the layers'
        activations, from the input to the output: each convolution and hidden linear layer
        after its ReLU, then ``head`` (the logits)."""
        return self._capture + ("head",)

    def head_parameter_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.named_parameters() if name.startswith("head."))

    def body_parameter_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.named_parameters() if name.startswith("body."))


MAX_PARAMETERS = 10**9
"""Largest number of parameters a model may have (4 GB in float32, 8 GB in float64); a larger
one is refused before any layer is allocated. The book's largest has about 1.1e6."""


def _check_widths(**widths) -> None:
    for name, value in widths.items():
        values = value if isinstance(value, tuple) else (value,)
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values):
            raise ValueError(f"{name} must be positive ints, got {value!r}")


def _check_parameters(count: int, what: str) -> None:
    if count > MAX_PARAMETERS:
        raise ValueError(f"{what} give a model of {count:.3g} parameters, more than MAX_PARAMETERS = "
                         f"{MAX_PARAMETERS:.0e} (memory no machine of the book has); use smaller values")


class FedAvgCNN(SplitModel):
    """FedAvg-FT CNN (Collins et al., 2022, Sec. 5.2) for 3x32x32 inputs: three blocks of two 3x3
    convolutions and a max-pool, then a two-layer MLP body and a linear head; no normalisation.

    Every convolution and linear layer starts from He (Kaiming) normal weights for ReLU (fan in)
    and zero biases (He et al., 2015). The paper does not say how it initialises (our copy lacks its
    appendix); PyTorch's default (uniform with gain 1/sqrt(3)) shrinks the signal by about half a
    layer at a time through these nine layers, so the initial logits hardly depend on the input
    (their spread across random images is about 0.3% of their size, against about 18% with He
    initialisation), and SGD at the paper profile's step 0.01 stayed at chance for the first 750 local
    updates (measured, CIFAR-10 and CIFAR-100); with He initialisation 600 steps of batch 10 on the
    CIFAR-10 subset reach 0.37 test accuracy."""

    def __init__(self, n_classes: int = 10, *, channels: tuple[int, int, int] = (32, 64, 128),
                 hidden: tuple[int, int] = (256, 128)):
        super().__init__()
        _check_widths(n_classes=n_classes, channels=tuple(channels), hidden=tuple(hidden))
        if len(channels) != 3 or len(hidden) != 2:
            raise ValueError(f"need 3 block widths and 2 hidden widths, got {channels!r}, {hidden!r}")
        widths = (3, *channels)
        convs = sum(9 * a * b + b for a, b in zip(widths[:-1], widths[1:])) + sum(9 * c * c + c for c in channels)
        dims = (channels[-1] * 16, *hidden, n_classes)
        _check_parameters(convs + sum(a * b + b for a, b in zip(dims[:-1], dims[1:])),
                          f"channels={tuple(channels)}, hidden={tuple(hidden)} and n_classes={n_classes}")
        layers: list[tuple[str, nn.Module]] = []
        capture = []
        c_in = 3
        for b, c in enumerate(channels, start=1):
            for j in (1, 2):
                layers += [(f"conv{b}_{j}", nn.Conv2d(c_in, c, 3, padding=1)), (f"relu{b}_{j}", nn.ReLU())]
                capture.append(f"body.relu{b}_{j}")
                c_in = c
            layers.append((f"pool{b}", nn.MaxPool2d(2)))
        layers.append(("flatten", nn.Flatten()))
        width = c_in * 4 * 4
        for j, h in enumerate(hidden, start=1):
            layers += [(f"fc{j}", nn.Linear(width, h)), (f"relu_fc{j}", nn.ReLU())]
            capture.append(f"body.relu_fc{j}")
            width = h
        self.body = nn.Sequential(OrderedDict(layers))
        self.head = nn.Linear(width, n_classes)
        for layer in self.modules():
            if isinstance(layer, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
                nn.init.zeros_(layer.bias)
        self._capture = tuple(capture)
        self.n_classes = n_classes
        self.feature_dim = width


class DropoutLinear(nn.Linear):
    """A linear layer that, in training, zeroes each input with probability ``p`` and scales the
    others by ``1 / (1 - p)`` (inverted dropout, as ``nn.Dropout`` before ``nn.Linear``): the head of
    the FedRep authors' CIFAR-100 network, ``fc3(drop(relu(fc2(x))))`` with p = 0.6.

    The masks are drawn on the CPU from a generator, and only inside :func:`dropout_draws` (the
    engine's training steps, from the run's seeded generator); anywhere else (evaluation, feature
    extraction, the CKA probes) the layer is the plain linear map, whatever ``model.training`` says.
    Its parameters are those of ``nn.Linear`` (``weight``, ``bias``), so a head with dropout has the
    same names as one without."""

    def __init__(self, in_features: int, out_features: int, p: float):
        super().__init__(in_features, out_features)
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 < p < 1.0:
            raise ValueError(f"the dropout probability p must be a number in (0, 1), got {p!r}")
        self.p = float(p)
        self.generator: torch.Generator | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.generator is not None:
            keep = torch.rand(x.shape, generator=self.generator) >= self.p
            x = x * keep.to(device=x.device, dtype=x.dtype).div_(1.0 - self.p)
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, p={self.p}"


def dropout_layers(model: nn.Module) -> tuple[DropoutLinear, ...]:
    """The :class:`DropoutLinear` layers of ``model`` (empty for a network without dropout)."""
    return tuple(m for m in model.modules() if isinstance(m, DropoutLinear))


@contextmanager
def dropout_draws(layers: tuple[DropoutLinear, ...], generator: torch.Generator | None) -> Iterator[None]:
    """Inside, the dropout ``layers`` (:func:`dropout_layers`) draw their masks from ``generator``
    (in the order of the forward passes); nothing to do without layers. A generator is required
    when there are layers: dropout in training without one would be unseeded."""
    if not layers:
        yield
        return
    if generator is None:
        raise ValueError("this network drops inputs in training (DropoutLinear) and needs the run's generator "
                         "for its masks; train on one thread (workers=1, cfg.vmap_clients = 1)")
    for layer in layers:
        layer.generator = generator
    try:
        yield
    finally:
        for layer in layers:
            layer.generator = None


class FedRepCNN(SplitModel):
    """LG-FedAvg/FedRep CIFAR CNN (authors' ``CNNCifar`` / ``CNNCifar100``) with the given
    ``widths`` (conv1, conv2, fc1, fc2) and, with ``dropout`` > 0, a head that drops fc2's outputs
    in training with that probability (:class:`DropoutLinear`; their ``CNNCifar100``: 0.6). The
    widths and the dropout are resolved from a name in one place,
    :class:`replearn.neural.specs.NetworkSpec` (:data:`replearn.neural.specs.FEDREP_WIDTHS`: the
    authors' ``"cifar10"`` (64, 64, 120, 64) and ``"cifar100"`` (64, 128, 256, 128), and the book's
    CPU-sized ``"narrow"`` (16, 32, 120, 64)); the network takes the numbers.
    """

    def __init__(self, n_classes: int, widths: tuple[int, int, int, int], dropout: float = 0.0):
        super().__init__()
        if not isinstance(widths, tuple) or len(widths) != 4:
            raise ValueError(f"widths must be a tuple (conv1, conv2, fc1, fc2) of positive ints, got {widths!r}; "
                             f"NetworkSpec.fedrep_cnn resolves a name such as 'cifar10' to them")
        _check_widths(n_classes=n_classes, widths=widths)
        c1, c2, f1, f2 = widths
        _check_parameters(f2 * n_classes + n_classes, f"n_classes={n_classes}")
        self.body = nn.Sequential(OrderedDict([
            ("conv1", nn.Conv2d(3, c1, 5)), ("relu1", nn.ReLU()), ("pool1", nn.MaxPool2d(2)),
            ("conv2", nn.Conv2d(c1, c2, 5)), ("relu2", nn.ReLU()), ("pool2", nn.MaxPool2d(2)),
            ("flatten", nn.Flatten()),
            ("fc1", nn.Linear(c2 * 5 * 5, f1)), ("relu_fc1", nn.ReLU()),
            ("fc2", nn.Linear(f1, f2)), ("relu_fc2", nn.ReLU()),
        ]))
        self.head = DropoutLinear(f2, n_classes, dropout) if dropout else nn.Linear(f2, n_classes)
        self._capture = ("body.relu1", "body.relu2", "body.relu_fc1", "body.relu_fc2")
        self.n_classes = n_classes
        self.widths = widths
        self.feature_dim = f2


def make_model(name: str, n_classes: int, seed: int, *, device: torch.device | str | None = None,
               dtype: torch.dtype = torch.float32, **kwargs) -> SplitModel:
    """Build ``name`` ("fedavg_cnn" or "fedrep_cnn") with PyTorch's default initialisation
    drawn from ``seed`` (inside ``torch.random.fork_rng``, so the global RNG is untouched);
    ``dtype`` (float32, or float64 for CPU runs whose printed results must not depend on the
    CPU's kernels or thread count) on ``device`` (default: :func:`~replearn.backend.default_device`)."""
    if name not in MODEL_NAMES:
        raise ValueError(f"unknown model {name!r}; use one of {MODEL_NAMES}")
    check_seed(seed)
    cls = FedAvgCNN if name == "fedavg_cnn" else FedRepCNN
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = cls(n_classes, **kwargs)
    if dtype not in (torch.float32, torch.float64):
        raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}")
    return model.to(device=device if device is not None else default_device(), dtype=dtype)


def head_parameter_names(model: nn.Module) -> tuple[str, ...]:
    """Names of the head's parameters (``head.weight``, ``head.bias``)."""
    return tuple(name for name, _ in model.named_parameters() if name.startswith("head."))
