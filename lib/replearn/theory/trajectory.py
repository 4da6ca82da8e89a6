"""The iterates of a run: representations and heads stacked over rounds."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from replearn.checks import check_same_kind, check_tensor
from replearn.theory.linalg import principal_angle_distance


@dataclass(frozen=True)
class Trajectory:
    """``B[t]`` (d x k) and ``w[t]`` (k) for t = 0..T (index 0 is the initialisation)."""

    B: torch.Tensor  # (T + 1, d, k)
    w: torch.Tensor  # (T + 1, k)

    def __post_init__(self):
        check_tensor(self.B, "B (the representations)", ndim=3, finite=False)
        check_tensor(self.w, "w (the heads)", ndim=2, finite=False)
        if self.w.shape != (self.B.shape[0], self.B.shape[2]) or self.B.shape[0] == 0:
            raise ValueError(f"need B (T + 1, d, k) and w (T + 1, k) with T >= 0, got {tuple(self.B.shape)} "
                             f"and {tuple(self.w.shape)}")
        check_same_kind(("B (the representations)", self.B), ("w (the heads)", self.w))

    @property
    def rounds(self) -> int:
        return self.B.shape[0] - 1

    @property
    def final(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.B[-1], self.w[-1]

    def dist(self, Bstar: torch.Tensor) -> torch.Tensor:
        """dist(B_t, B_*) for every t, shape (T + 1,)."""
        return principal_angle_distance(self.B, Bstar)
