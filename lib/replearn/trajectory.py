"""The iterates of a run: representations and heads stacked over rounds."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .linalg import principal_angle_distance


@dataclass(frozen=True)
class Trajectory:
    """``B[t]`` (d x k) and ``w[t]`` (k) for t = 0..T (index 0 is the initialisation)."""

    B: torch.Tensor  # (T + 1, d, k)
    w: torch.Tensor  # (T + 1, k)

    @property
    def rounds(self) -> int:
        return self.B.shape[0] - 1

    @property
    def final(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.B[-1], self.w[-1]

    def dist(self, Bstar: torch.Tensor) -> torch.Tensor:
        """dist(B_t, B_*) for every t, shape (T + 1,)."""
        return principal_angle_distance(self.B, Bstar)
