"""The population problems of FedAvg's convergence analysis (Collins et al. 2022, Sec. 3 and 5.1;
shared by book 4.3 and 4.4).

M clients with population losses f_i(B, w) = 1/2 ||B w - B_* w_*_i||^2, a Haar-random B_* in
O^{d x k}, an initial representation scaled so that alpha B_0^T B_0 = I_k (condition (ii) of
Theorem 1 with zero error) and w_0 = 0 (condition (iii)). :func:`make_problem` draws two kinds:

* **Fig. 1 problems** (``cond=None, delta0=None``): Gaussian heads (i.i.d. N(0, I_k), as in the
  paper's Sec. 5.1; ``make_heads(exact=False)``) and a Haar-random B_0, so dist(B_0, B_*) is
  close to 1;
* **rate problems** (``cond``, ``delta0``): heads whose centred covariance has condition number
  exactly ``cond`` and eigenvalues in [1/cond, 1] (``make_heads(exact=True)``, so the diversity
  constant of Assumption 2 is mu^2 = 1/cond), started at distance ``delta0`` from B_*
  (condition (i) with E_0 = 1 - delta0^2).

:class:`FedAvgProblemSettings` holds the problem (d, k, M, step alpha) and the FedAvg run on it
(tau local steps, rounds, seed); the settings of book 4.3 and 4.4 extend it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated

import torch

from replearn.theory import linalg, linear
from replearn.backend import default_device
from replearn.checks import check_int
from replearn.settings import Ge, Gt, Profile, Settings

__all__ = ["FedAvgProblemSettings", "make_problem"]


@dataclass(frozen=True)
class FedAvgProblemSettings(Settings):
    """Dimension ``d``, representation size ``k``, ``M`` clients; FedAvg step ``alpha`` with
    ``tau`` local steps for ``rounds`` rounds; the ``seed`` of the problem instance(s)."""

    d: int = 50
    k: Annotated[int, Ge(1)] = 5
    M: int = 20
    alpha: Annotated[float, Gt(0)] = 0.2
    tau: Annotated[int, Ge(1)] = 2
    rounds: Annotated[int, Ge(1)] = 600
    seed: int = 0

    PAPER = Profile({"d": 100, "k": 5, "M": 40, "tau": 2, "rounds": 1000},
                    doc="Collins et al. (2022), Fig. 1: d = 100, k = 5, M = 40, all clients, tau = 2.")

    def validate(self) -> None:
        """The relations between the fields (each field's own range is beside it): k < d and
        M >= k + 1 clients."""
        super().validate()
        check_int(self.d, "d (needs 1 <= k < d)", self.k + 1)
        check_int(self.M, "M (clients; diverse heads need M >= k + 1)", self.k + 1)


def make_problem(cfg: FedAvgProblemSettings, seed: int, *, cond: float | None = None,
                 delta0: float | None = None, device=None) -> linear.Problem:
    """A Fig. 1 problem (``cond=None``: Gaussian heads; ``delta0=None``: random B_0) or a rate
    problem (exact heads of condition number ``cond``; B_0 at distance ``delta0`` from B_*) of
    the sizes ``cfg.d``, ``cfg.k``, ``cfg.M``. In both cases alpha B_0^T B_0 = I_k (alpha =
    ``cfg.alpha``) and w_0 = 0. B_*, the heads and B_0 are drawn from ``seed``, ``seed + 1``
    and ``seed + 2`` (:func:`replearn.theory.linear.random_problem`)."""
    device = default_device() if device is None else torch.device(device)
    exact = cond is not None
    pb = linear.random_problem(cfg.d, cfg.k, cfg.M, step=cfg.alpha, cond=cond if exact else 1.0, exact=exact,
                               seed=seed, device=device)
    if delta0 is None:
        return pb
    return replace(pb, B0=linalg.basis_at_distance(pb.Bstar, delta0, seed=seed + 2) / cfg.alpha**0.5)
