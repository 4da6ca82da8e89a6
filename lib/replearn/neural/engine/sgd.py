"""Local SGD arithmetic: ``torch.optim.SGD``'s step (momentum, weight decay on the weights)
and foreach helpers that also run under ``torch.func.vmap``."""

from __future__ import annotations

from typing import Sequence

import torch


def _in_transform(tensors: Sequence[torch.Tensor]) -> bool:
    return any(torch._C._functorch.is_functorch_wrapped_tensor(t) for t in tensors)


def foreach_add(xs: Sequence[torch.Tensor], ys: Sequence[torch.Tensor], *, alpha: float = 1.0) -> list[torch.Tensor]:
    """``[x + alpha * y]`` (new tensors): one ``torch._foreach_add`` call, or, inside a
    ``torch.func`` transform (which has no batching rule for foreach operators), the same
    arithmetic tensor by tensor. The building block of client steps that must also run on the
    batched path (:class:`FunctionalSGD`)."""
    xs, ys = list(xs), list(ys)
    if _in_transform(xs + ys):
        return [torch.add(x, y, alpha=alpha) for x, y in zip(xs, ys)]
    return torch._foreach_add(xs, ys, alpha=alpha)


def foreach_sub(xs: Sequence[torch.Tensor], ys: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """``[x - y]`` (new tensors), as :func:`foreach_add`."""
    xs, ys = list(xs), list(ys)
    if _in_transform(xs + ys):
        return [torch.sub(x, y) for x, y in zip(xs, ys)]
    return torch._foreach_sub(xs, ys)


def foreach_mul(xs: Sequence[torch.Tensor], scalar: float) -> list[torch.Tensor]:
    """``[scalar * x]`` (new tensors), as :func:`foreach_add`."""
    xs = list(xs)
    if _in_transform(xs):
        return [torch.mul(x, scalar) for x in xs]
    return torch._foreach_mul(xs, scalar)


def clip_total_norm(grads: Sequence[torch.Tensor], max_norm: float) -> list[torch.Tensor]:
    """``grads`` scaled by ``min(1, max_norm / (||grads|| + 1e-6))``, where ``||grads||`` is the
    Euclidean norm of all of them together: ``torch.nn.utils.clip_grad_norm_``'s arithmetic
    (new tensors; the factor is applied even when it is 1, as there, so an unclipped step is
    bit for bit the unclipped gradient). No Python decision on a tensor, so it also runs under
    ``torch.func.vmap`` (one factor per client)."""
    grads = list(grads)
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    factor = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    return [g * factor for g in grads]


def decays(p: torch.Tensor) -> bool:
    """Whether weight decay applies to parameter ``p``: to weights (matrices, convolution
    kernels), not to biases (vectors), as the FedRep authors' optimiser does (``models/Update.py``
    of lgcollins/FedRep: ``weight_decay`` 1e-4 for the ``weight_p`` group, 0 for ``bias_p``)."""
    return p.ndim > 1


def add_weight_decay(grads: Sequence[torch.Tensor], params: Sequence[torch.Tensor],
                     weight_decay: float) -> list[torch.Tensor]:
    """``g + weight_decay * theta`` for the weights (:func:`decays`), ``g`` for the biases."""
    return [g + weight_decay * p if decays(p) else g for g, p in zip(grads, params)]


class Momentum:
    """``torch.optim.SGD``'s step direction (momentum without dampening, weight decay added to
    the gradient of the weights, :func:`decays`) for a fixed list of tensors, with a fresh
    buffer: ``g <- grad + weight_decay * theta``; ``buf <- g`` at the first step, else
    ``momentum * buf + g``; :meth:`step` returns ``theta - lr * buf`` (new tensors)."""

    def __init__(self, momentum: float, weight_decay: float):
        self.momentum, self.weight_decay, self.buf = momentum, weight_decay, None

    def step(self, params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], lr: float) -> list[torch.Tensor]:
        grads = list(grads)
        if self.weight_decay:
            grads = add_weight_decay(grads, params, self.weight_decay)
        if self.momentum:
            if self.buf is None:
                self.buf = [g.clone() for g in grads]
            else:
                self.buf = foreach_add(foreach_mul(self.buf, self.momentum), grads)
            grads = self.buf
        return foreach_add(params, grads, alpha=-lr)

