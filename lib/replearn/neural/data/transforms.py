"""Batched image transforms of the CIFAR pixels: per-channel normalisation of the uint8 images
(:func:`normalise`) and the random crop and flip of the FedRep and LG-FedAvg code
(:func:`augment`), applied to a whole batch on its device."""

from __future__ import annotations

import torch

from replearn.neural.data.datasets import CHANNEL_STATS, dataset_spec

__all__ = ["augment", "normalise"]


def normalise(x_uint8: torch.Tensor, name: str) -> torch.Tensor:
    """``(x / 255 - mean) / std`` per channel for dataset ``name`` (see
    :data:`~replearn.neural.data.CHANNEL_STATS`).

    ``x_uint8`` is a uint8 tensor ``(..., 3, H, W)``; the result is float32 on the same device.
    """
    if x_uint8.dtype != torch.uint8:
        raise ValueError(f"normalise expects uint8 pixels, got {x_uint8.dtype}; pass the raw CIFAR images")
    if x_uint8.dim() < 3 or x_uint8.shape[-3] != 3:
        raise ValueError(f"normalise expects images shaped (..., 3, H, W), got {tuple(x_uint8.shape)}")
    dataset_spec(name)
    mean, std = (torch.tensor(v, dtype=torch.float32, device=x_uint8.device).view(3, 1, 1)
                 for v in CHANNEL_STATS[name])
    return (x_uint8.float() / 255.0 - mean) / std


def augment(x: torch.Tensor, generator: torch.Generator, *, pad: int = 4, flip: bool = True) -> torch.Tensor:
    """Random crop after zero padding by ``pad`` plus horizontal flip with probability 1/2.

    The batched equivalent of torchvision's ``RandomCrop(32, padding=4)`` followed by
    ``RandomHorizontalFlip()`` used in the FedRep and LG-FedAvg code. For a batch ``(B, C, H, W)``
    the random numbers are drawn on the CPU from ``generator`` in this order: the crop offsets
    ``torch.randint(0, 2 * pad + 1, (B, 2))`` (row, column), then, if ``flip``, ``torch.rand(B)``
    with image ``b`` flipped when its draw is below 1/2. The crops are gathered with one advanced
    index on ``x``'s device (no loop over images).
    """
    if x.dim() != 4:
        raise ValueError(f"augment expects a batch shaped (B, C, H, W), got {tuple(x.shape)}")
    if pad < 0:
        raise ValueError(f"pad must be non-negative, got {pad}")
    b, _, h, w = x.shape
    offsets = torch.randint(0, 2 * pad + 1, (b, 2), generator=generator).to(x.device)
    cols = torch.arange(w, device=x.device).expand(b, w)
    if flip:
        flipped = (torch.rand(b, generator=generator) < 0.5).to(x.device)
        cols = torch.where(flipped[:, None], w - 1 - cols, cols)
    rows = offsets[:, :1] + torch.arange(h, device=x.device)
    cols = offsets[:, 1:] + cols
    padded = torch.nn.functional.pad(x, (pad, pad, pad, pad)).permute(0, 2, 3, 1)
    batch = torch.arange(b, device=x.device)[:, None, None]
    return padded[batch, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2).contiguous()
