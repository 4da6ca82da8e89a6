"""Device, dtype, seeding and machine helpers shared by every module of :mod:`replearn`.

The linear-model theory is checked to many digits, so the default dtype is float64.
Random numbers are always drawn from an explicit :class:`torch.Generator` on the CPU and
then moved to the working device, so a seed gives the same numbers on a laptop and on a GPU.
"""

from __future__ import annotations

import platform
from pathlib import Path

import numpy as np
import torch

DTYPE = torch.float64

SeedLike = int | torch.Generator | None


def default_device() -> torch.device:
    """``cuda`` when a GPU is visible, else ``cpu``."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def cpu_name() -> str:
    """The CPU model (the ``model name`` of /proc/cpuinfo where there is one), as the results
    files' provenance and the notebooks' execution records name the machine."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def make_generator(seed: SeedLike = 0) -> torch.Generator:
    """A CPU generator from an integer seed (a generator is passed through unchanged)."""
    if isinstance(seed, torch.Generator):
        return seed
    if seed is None:
        raise ValueError("a seed is required: pass an int or a torch.Generator (results must be reproducible)")
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, (bool, np.bool_)) or seed < 0:
        raise ValueError(f"seed must be a non-negative int or a torch.Generator, got {seed!r}")
    if seed > 2**64 - 1:
        raise ValueError(f"seed must be at most 2**64 - 1 (a torch generator's seed is an unsigned 64-bit "
                         f"integer), got {seed!r}; pass a smaller seed")
    gen = torch.Generator(device="cpu")
    gen.manual_seed(int(seed))
    return gen


def derive_seed(*keys: int) -> int:
    """An independent seed in [0, 2^31) for a tuple of integer keys (``numpy.random.SeedSequence``),
    e.g. ``derive_seed(seed, trial, client)`` for one trial of one client of a seeded experiment."""
    return int(np.random.SeedSequence([int(k) for k in keys]).generate_state(1)[0] % (2**31))


def randn(*shape: int, generator: torch.Generator, device: torch.device | str | None = None,
          dtype: torch.dtype = DTYPE) -> torch.Tensor:
    """Standard normal samples drawn on the CPU from ``generator`` and moved to ``device``."""
    out = torch.randn(*shape, generator=generator, dtype=dtype)
    return out.to(device) if device is not None else out


def as_tensor(x, *, dtype: torch.dtype = DTYPE, device: torch.device | str | None = None,
              name: str = "input") -> torch.Tensor:
    """Convert ``x`` to a tensor of ``dtype`` and check that every entry is finite."""
    t = torch.as_tensor(x, dtype=dtype, device=device)
    check_finite(t, name)
    return t


def check_finite(t: torch.Tensor, name: str) -> None:
    """Raise ``ValueError`` naming ``name`` if ``t`` holds NaN or infinite entries (or no data at
    all: a tensor on the ``meta`` device)."""
    if t.device.type == "meta":
        raise ValueError(f"{name} is on the meta device (a shape without data): create it on cpu or cuda, "
                         f"e.g. with torch.zeros(..., device='cpu')")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} contains NaN or infinite values; check how it was computed")
