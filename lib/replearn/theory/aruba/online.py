"""Online convex optimisation within one task: the losses (squared, absolute, logistic) of the
rounds, projection onto the ball Theta (Euclidean, or in the 1/eta-weighted norm that
per-coordinate steps need), the exact least-squares comparator in the ball, online (projected)
gradient descent with a scalar, per-coordinate or AdaGrad rate (:func:`ogd`), its regret and
the regret upper bound U_t(phi, eta) (:func:`regret_upper_bound`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from replearn.checks import check_bool, check_choice, check_int, check_positive, check_same_kind, check_tensor

__all__ = ["LOSSES", "OGDRun", "as_rate", "least_squares_in_ball", "ogd", "ogd_unchecked", "project_ball",
           "project_ball_unchecked", "regret", "regret_from_losses", "regret_upper_bound", "round_losses",
           "round_losses_unchecked"]

LOSSES = ("squared", "absolute", "logistic")
_BLOW_UP = 1e8
_BISECTION_STEPS = 100
_NEWTON_STEPS = 100


def _check_loss(loss: str) -> None:
    check_choice(loss, "loss", LOSSES)


def _check_rounds(X, y) -> torch.Tensor:
    """X (..., m, d) and y (..., m), finite and on one device; returns y in X's dtype (labels of
    another float dtype are converted: the obvious intent)."""
    check_tensor(X, "X", min_ndim=2)
    check_tensor(y, "y")
    if y.shape != X.shape[:-1]:
        raise ValueError(f"need X (..., m, d) and y (..., m); got {tuple(X.shape)} and {tuple(y.shape)}")
    y = y.to(X.dtype)
    check_same_kind(("X", X), ("y", y))
    limit = torch.finfo(X.dtype).max ** 0.25
    for name, t in (("X", X), ("y", y)):
        top = float(t.abs().max()) if t.numel() else 0.0
        if top > limit:
            raise ValueError(f"{name} has entries up to {top:.3g}, beyond {limit:.3g} (the fourth root of the "
                             f"largest {X.dtype}): predictions x.theta and squared gradients would overflow; "
                             f"rescale {name} (the regret scales with it)")
    return y


def _value_and_slope(u: torch.Tensor, y: torch.Tensor, loss: str) -> tuple[torch.Tensor, torch.Tensor]:
    """L(u, y) and dL/du for prediction u = <x, theta>."""
    if loss == "squared":
        r = u - y
        return 0.5 * r * r, r
    if loss == "absolute":
        r = u - y
        return r.abs(), torch.sign(r)
    z = y * u
    return torch.nn.functional.softplus(-z), -y * torch.sigmoid(-z)


def round_losses(X: torch.Tensor, y: torch.Tensor, theta: torch.Tensor, loss: str) -> torch.Tensor:
    """l_{t,i}(theta) for every round, X (..., m, d), y (..., m), theta (..., d) -> (..., m)."""
    _check_loss(loss)
    y = _check_rounds(X, y)
    check_tensor(theta, "theta")
    if theta.shape[-1:] != X.shape[-1:]:
        raise ValueError(f"theta must end in d = {X.shape[-1]} coordinates, got shape {tuple(theta.shape)}")
    check_same_kind(("X", X), ("theta", theta))
    return round_losses_unchecked(X, y, theta, loss)


def project_ball(v: torch.Tensor, radius: float | None, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Projection onto {||theta|| <= radius} (identity when ``radius`` is None).

    Without ``weights`` (or with one weight per row) this is the Euclidean projection. With
    per-coordinate weights eta (..., d) it is the projection in the norm ||.||_{1/eta} that
    preconditioned OGD needs: theta_j = v_j / (1 + mu eta_j), with mu >= 0 the root of
    psi(mu) = 1/radius - 1/||theta(mu)|| (convex, decreasing and nearly linear; Moré and
    Sorensen's secular equation), found by Newton's method from mu = 0 (monotone, no overshoot).
    Norms are computed without overflow, so entries up to the largest float project correctly.
    """
    check_tensor(v, "v")
    if radius is not None:
        check_positive(radius, "radius")
    if weights is not None:
        check_tensor(weights, "weights")
        if weights.shape[-1] not in (1, v.shape[-1]) or not bool((weights > 0).all()):
            raise ValueError(f"weights must be positive with a last axis of 1 or d = {v.shape[-1]}, got shape "
                             f"{tuple(weights.shape)}")
        check_same_kind(("v", v), ("weights", weights))
    return project_ball_unchecked(v, radius, weights, safe=True)


def _norm(v: torch.Tensor) -> torch.Tensor:
    """||v|| over the last axis (kept), without overflow or underflow of the squares: where the
    plain norm is not finite (or zero for a nonzero v) it is recomputed from v / max |v_j|."""
    norm = v.norm(dim=-1, keepdim=True)
    bad = ~torch.isfinite(norm) | ((norm == 0) & (v != 0).any(dim=-1, keepdim=True))
    if bool(bad.any()):
        top = v.abs().amax(dim=-1, keepdim=True)
        top = torch.where(top > 0, top, torch.ones_like(top))
        norm = torch.where(bad, (v / top).norm(dim=-1, keepdim=True) * top, norm)
    return norm


def project_ball_unchecked(v: torch.Tensor, radius: float | None, weights: torch.Tensor | None = None, *,
                  safe: bool = False) -> torch.Tensor:
    """:func:`project_ball` without the argument checks. ``safe`` guards the norms against
    overflow (public calls); OGD's rounds, whose iterates stay in the ball, skip that cost."""
    if radius is None:
        return v
    norm = _norm(v) if safe else v.norm(dim=-1, keepdim=True)
    outside = norm > radius
    if weights is None or weights.shape[-1] == 1:
        return torch.where(outside, v * (radius / norm.clamp_min(radius)), v)
    if not bool(outside.any()):
        return v
    w = weights.expand_as(v)
    # Entries beyond ~1e100 (or below 1e-100) would overflow (underflow) the squares of the
    # slope; for those the same Newton step is written with the unit vector a = theta / ||theta||:
    # step = psi / slope = -(||theta|| / radius - 1) / sum_j a_j^2 w_j / (1 + mu w_j).
    top = float(v.abs().max()) if safe else 1.0
    extreme = top > 1e100 or 0 < top < 1e-100
    mu = torch.zeros_like(norm)
    for _ in range(_NEWTON_STEPS):
        scaled = v / (1 + mu * w)
        length = _norm(scaled) if extreme else scaled.norm(dim=-1, keepdim=True)
        if extreme:
            a = scaled / length
            step = -(length / radius - 1) / (a.pow(2) * w / (1 + mu * w)).sum(-1, keepdim=True)
        else:
            psi = 1 / radius - 1 / length
            step = psi / (-(scaled.pow(2) * w / (1 + mu * w)).sum(-1, keepdim=True) / length ** 3)
        step = torch.where(outside, step, torch.zeros_like(mu))
        mu = mu - step
        if not bool((step.abs() > 1e-13 * mu).any()):
            break
    return torch.where(outside, v / (1 + mu * w), v)


def least_squares_in_ball(X: torch.Tensor, y: torch.Tensor, radius: float | None) -> torch.Tensor:
    """argmin_{||theta|| <= radius} 1/2 ||X theta - y||^2, exactly, batched over leading axes.

    With H = X^T X = Q diag(lambda) Q^T and b = X^T y: if the minimum-norm unconstrained solution
    H^+ b lies in the ball it is returned (the minimiser is unique when rank X = d; otherwise
    this picks the minimum-norm one). Otherwise the KKT conditions give theta = (H + mu I)^{-1} b
    with ||theta|| = radius; since b lies in range(H), ||theta(mu)|| decreases from ||H^+ b|| to
    0 and mu in (0, ||b|| / radius] is found by bisection to machine precision.
    """
    y = _check_rounds(X, y)
    lam, Q = torch.linalg.eigh(X.mT @ X)
    c = (Q.mT @ (X.mT @ y.unsqueeze(-1))).squeeze(-1)
    tol = lam.amax(dim=-1, keepdim=True).clamp_min(1e-300) * X.shape[-1] * torch.finfo(X.dtype).eps
    coef = torch.where(lam > tol, c / lam.clamp_min(1e-300), torch.zeros_like(c))
    if radius is not None:
        inside = coef.norm(dim=-1, keepdim=True) <= radius
        if not bool(inside.all()):
            lam_pos = lam.clamp_min(0)
            lo = torch.zeros_like(inside, dtype=X.dtype)
            hi = c.norm(dim=-1, keepdim=True) / radius
            for _ in range(_BISECTION_STEPS):
                mid = 0.5 * (lo + hi)
                too_long = (c / (lam_pos + mid)).norm(dim=-1, keepdim=True) > radius
                lo, hi = torch.where(too_long, mid, lo), torch.where(too_long, hi, mid)
            coef = torch.where(inside, coef, c / (lam_pos + hi))
    return (Q @ coef.unsqueeze(-1)).squeeze(-1)


# --------------------------------------------------------------------------------------------
# within-task online gradient descent


@dataclass(frozen=True)
class OGDRun:
    """One OGD pass per task: ``losses`` l_{t,i}(theta_{t,i}) (..., m), ``grad_sq`` the summed
    squared gradients sum_i grad_{t,i,j}^2 (..., d), ``last`` theta_{t,m+1} (..., d) and, when
    asked for, ``iterates`` theta_{t,1..m+1} (..., m + 1, d)."""

    losses: torch.Tensor
    grad_sq: torch.Tensor
    last: torch.Tensor
    iterates: torch.Tensor | None = None


def as_rate(eta, d: int, like: torch.Tensor, name: str = "eta") -> torch.Tensor:
    """A rate as a tensor whose last axis is 1 (scalar rate) or d (per coordinate), in the dtype
    and on the device of ``like`` (``ValueError`` for another shape or a rate not positive and finite)."""
    e = torch.as_tensor(eta, dtype=like.dtype, device=like.device)
    if e.ndim == 0:
        e = e.reshape(1)
    if e.shape[-1] not in (1, d):
        raise ValueError(f"{name} must be a number or a tensor whose last axis is 1 (scalar rate) or "
                         f"d = {d} (per coordinate), got shape {tuple(e.shape)}")
    if not bool(torch.isfinite(e).all()) or not bool((e > 0).all()):
        raise ValueError(f"{name} must be positive and finite")
    return e


def ogd(X: torch.Tensor, y: torch.Tensor, phi: torch.Tensor, eta, *, loss: str = "squared",
        radius: float | None = None, adagrad_delta: float | None = None,
        keep_iterates: bool = False) -> OGDRun:
    """Online (projected) gradient descent on every task of the batch at once.

    theta_1 = phi; round i: suffer l_i(theta_i), g_i = grad l_i(theta_i),
    theta_{i+1} = Proj(theta_i - eta * g_i). ``eta`` is a number or a tensor whose last axis is
    1 (scalar rate) or d (per-coordinate rate), broadcast against the leading axes of X. With
    ``adagrad_delta`` delta the step of round i is eta / sqrt(delta + sum_{i' <= i} g_{i'}^2)
    per coordinate (AdaGrad restarted on each task, base rate eta). Per-coordinate steps use
    the projection in the 1/eta-weighted norm (:func:`project_ball`), which keeps U_t valid.
    Raises ValueError on malformed inputs and when an unconstrained run blows up.
    """
    _check_loss(loss)
    y = _check_rounds(X, y)
    m, d = X.shape[-2:]
    check_tensor(phi, "phi")
    if phi.shape[-1] != d:
        raise ValueError(f"phi must end in d = {d} coordinates, got shape {tuple(phi.shape)}")
    check_same_kind(("X", X), ("phi", phi))
    if radius is not None:
        check_positive(radius, "radius (or None)")
        if bool((_norm(phi).squeeze(-1) > radius * (1 + 1e-9)).any()):
            raise ValueError(f"the initialisation phi lies outside the ball of radius {radius}; project it first")
    if adagrad_delta is not None:
        check_positive(adagrad_delta, "adagrad_delta")
    check_bool(keep_iterates, "keep_iterates")
    return ogd_unchecked(X, y, phi, as_rate(eta, d, X), loss, radius, adagrad_delta, keep_iterates)


def ogd_unchecked(X, y, phi, eta: torch.Tensor, loss: str, radius, adagrad_delta,
                  keep_iterates: bool = False) -> OGDRun:
    """:func:`ogd` on checked inputs (``eta`` already a rate tensor): the meta-learners call it once per task."""
    m, d = X.shape[-2:]
    batch = X.shape[:-2]
    theta = phi.expand(*batch, d).clone()
    acc = torch.zeros(*batch, d, dtype=X.dtype, device=X.device)
    losses = X.new_empty(*batch, m)
    iterates = [theta] if keep_iterates else None
    for i in range(m):
        x = X[..., i, :]
        value, slope = _value_and_slope((x * theta).sum(-1), y[..., i], loss)
        g = slope.unsqueeze(-1) * x
        losses[..., i] = value
        acc = acc + g * g
        step = eta / (adagrad_delta + acc).sqrt() if adagrad_delta is not None else eta
        theta = project_ball_unchecked(theta - step * g, radius, step)
        if keep_iterates:
            iterates.append(theta)
    limit = _BLOW_UP * (1.0 + float(phi.abs().max()))
    if not float(theta.abs().max().nan_to_num(math.inf)) <= limit:
        raise ValueError(f"OGD diverged (max |theta| = {float(theta.abs().max()):.3g}): the step size is "
                         "too large for this loss; use a smaller eta or a bounded domain (radius)")
    return OGDRun(losses, acc, theta, torch.stack(iterates, dim=-2) if keep_iterates else None)


def regret(X: torch.Tensor, y: torch.Tensor, losses: torch.Tensor, comparator: torch.Tensor,
           loss: str = "squared") -> torch.Tensor:
    """R_t = sum_i l_{t,i}(theta_{t,i}) - sum_i l_{t,i}(comparator), shape (...)."""
    check_tensor(losses, "losses")
    if losses.shape != X.shape[:-1]:
        raise ValueError(f"losses must have one entry per round, shape {tuple(X.shape[:-1])}, got "
                         f"{tuple(losses.shape)}")
    return regret_from_losses(X, y, losses, round_losses(X, y, comparator, loss))


def regret_from_losses(X, y, losses: torch.Tensor, comparator_losses: torch.Tensor) -> torch.Tensor:
    """:func:`regret` from the comparator's per-round losses (inputs already checked)."""
    return losses.sum(-1) - comparator_losses.sum(-1)


def round_losses_unchecked(X, y, theta, loss: str) -> torch.Tensor:
    """:func:`round_losses` on checked inputs."""
    return _value_and_slope((X * theta.unsqueeze(-2)).sum(-1), y, loss)[0]


def regret_upper_bound(phi: torch.Tensor, theta_star: torch.Tensor, eta, *, grad_sq: torch.Tensor | None = None,
                       G=None, m: int | None = None) -> torch.Tensor:
    """U_t(phi, eta) = sum_j (phi_j - theta*_j)^2 / (2 eta_j) + gradient term, shape (...).

    Data-dependent (``grad_sq`` (..., d) = sum_i grad_{t,i,j}^2): gradient term
    sum_j eta_j grad_sq_j (blog, preconditioned OGD). Worst case (``G`` and ``m``): G's last axis
    is 1 for a norm bound ||grad|| <= G or d for |grad_j| <= G_j; the term is eta G^2 m (scalar
    rate), sum_j eta_j G_j^2 m (per coordinate), max_j eta_j G^2 m or eta m sum_j G_j^2 (mixed).
    eta: a number or tensor with last axis 1 (scalar) or d (per coordinate).
    """
    check_tensor(phi, "phi", min_ndim=1)
    check_tensor(theta_star, "theta_star", min_ndim=1)
    check_same_kind(("phi", phi), ("theta_star", theta_star))
    d = phi.shape[-1]
    if theta_star.shape[-1] != d:
        raise ValueError(f"phi and theta_star must have the same last axis, got {tuple(phi.shape)} "
                         f"and {tuple(theta_star.shape)}")
    eta = as_rate(eta, d, phi)
    distance = ((phi - theta_star) ** 2 / (2 * eta)).sum(-1)
    if (grad_sq is None) == (G is None):
        raise ValueError("pass exactly one of grad_sq (data-dependent bound) or G with m (worst case)")
    if grad_sq is not None:
        check_tensor(grad_sq, "grad_sq")
        if grad_sq.shape[-1] != d:
            raise ValueError(f"grad_sq must end in d = {d} coordinates, got {tuple(grad_sq.shape)}")
        return distance + (eta * grad_sq).sum(-1)
    check_int(m, "m (the worst-case bound's number of rounds)", 1)
    G = as_rate(G, d, phi, "G")
    if G.shape[-1] == eta.shape[-1]:
        return distance + m * (eta * G * G).sum(-1)
    if G.shape[-1] == 1:
        return distance + m * eta.amax(-1) * (G * G).squeeze(-1)
    return distance + m * eta.squeeze(-1) * (G * G).sum(-1)
