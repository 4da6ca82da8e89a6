"""One description of the network a CIFAR section trains: :class:`NetworkSpec` (family, resolved
widths, dtype) with one builder, :meth:`NetworkSpec.build`.

Every CIFAR settings class resolves its network to a :class:`NetworkSpec`
(:meth:`replearn.transfer.MatchedTraining.network_spec`,
:meth:`replearn.personalisation.FederationSettings.network_spec`) and builds it through it, so
the two families of the book (the FedAvg-FT paper's CNN, :class:`replearn.models.FedAvgCNN`,
and the FedRep authors' CNN, :class:`replearn.models.FedRepCNN`) are made in one place.
Results files record the resolved spec (:meth:`NetworkSpec.record`: the widths themselves, not
a name such as ``"narrow"``), so a change of a width makes a committed result stale.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .models import FEDREP_WIDTHS, make_model

__all__ = ["FAMILIES", "NetworkSpec"]

#: The network families and the names of their widths.
FAMILIES = {"fedavg_cnn": ("conv1", "conv2", "conv3", "fc1", "fc2"),
            "fedrep_cnn": ("conv1", "conv2", "fc1", "fc2")}
_DTYPES = {"float32": torch.float32, "float64": torch.float64}


@dataclass(frozen=True)
class NetworkSpec:
    """A network: ``family`` (a key of :data:`FAMILIES`), its ``widths`` (resolved numbers, in
    the order of :data:`FAMILIES`), the FedRep CNN's ``variant`` name those widths come from
    (``None`` for the FedAvg CNN) and the ``dtype`` it trains in (``"float32"`` or
    ``"float64"``)."""

    family: str
    widths: tuple[int, ...]
    dtype: str
    variant: str | None = None

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {tuple(FAMILIES)}, got {self.family!r}")
        if len(self.widths) != len(FAMILIES[self.family]) or not all(
                isinstance(w, int) and not isinstance(w, bool) and w >= 1 for w in self.widths):
            raise ValueError(f"{self.family} needs {len(FAMILIES[self.family])} positive integer widths "
                             f"{FAMILIES[self.family]}, got {self.widths!r}")
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {tuple(_DTYPES)}, got {self.dtype!r}")
        if self.family == "fedrep_cnn" and FEDREP_WIDTHS.get(self.variant) != tuple(self.widths):
            raise ValueError(f"the FedRep CNN's widths come from its variant: {self.variant!r} has "
                             f"{FEDREP_WIDTHS.get(self.variant)}, not {self.widths}")

    @classmethod
    def fedavg_cnn(cls, channels, hidden, dtype: str) -> "NetworkSpec":
        """The FedAvg-FT paper's CNN with conv ``channels`` (3) and MLP ``hidden`` widths (2)."""
        return cls("fedavg_cnn", tuple(channels) + tuple(hidden), dtype)

    @classmethod
    def fedrep_cnn(cls, variant: str, dtype: str) -> "NetworkSpec":
        """The FedRep authors' CNN with the widths of ``variant`` (:data:`replearn.models.FEDREP_WIDTHS`)."""
        if variant not in FEDREP_WIDTHS:
            raise ValueError(f"variant must be one of {tuple(FEDREP_WIDTHS)}, got {variant!r}")
        return cls("fedrep_cnn", FEDREP_WIDTHS[variant], dtype, variant)

    def build(self, n_classes: int, seed: int, device) -> torch.nn.Module:
        """The network for ``n_classes`` classes, initialised from ``seed``, on ``device``."""
        if self.family == "fedavg_cnn":
            kwargs = dict(channels=self.widths[:3], hidden=self.widths[3:])
        else:
            kwargs = dict(variant=self.variant)
        return make_model(self.family, n_classes, seed, device=device, dtype=_DTYPES[self.dtype], **kwargs)

    def record(self) -> dict:
        """The spec as a results file records it: family, named widths, dtype."""
        return {"family": self.family, "widths": dict(zip(FAMILIES[self.family], self.widths)),
                "dtype": self.dtype}
