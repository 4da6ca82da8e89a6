"""The local-SGD workers: :class:`LocalSGD` (one working copy of the network, into which each
client's parameters are loaded in turn) and :class:`FunctionalSGD` (the same steps written with
``torch.func``, for the batched path), and the working layout they train in."""

from __future__ import annotations

import copy
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad_and_value

from replearn.neural.data import augment
from replearn.neural.models import dropout_draws, dropout_layers
from replearn.neural.engine.config import TrainConfig
from replearn.neural.engine.sgd import Momentum, add_weight_decay, clip_total_norm, foreach_add

Params = dict[str, torch.Tensor]


def augment_batch(x: torch.Tensor, cfg: TrainConfig, generator: torch.Generator | None) -> torch.Tensor:
    if not cfg.augment:
        return x
    if generator is None:
        raise ValueError("cfg.augment is on: pass the generator the augmentation draws from")
    return augment(x.flatten(0, x.ndim - 4), generator).view_as(x)


def work_layout(dtype: torch.dtype) -> torch.memory_format:
    """The memory layout of the engine's working copies and images for ``dtype``:
    ``channels_last`` (NHWC, oneDNN's native layout, which saves the layout conversions of
    every convolution and pooling) except in float64, which oneDNN does not run: there ATen's
    ``slow_conv2d`` runs both layouts and is 5-25% slower on ``channels_last`` (measured with
    ``bench/algorithm_rounds.py``), so float64 keeps the plain layout."""
    return torch.contiguous_format if dtype == torch.float64 else torch.channels_last


def fast_copy(model: nn.Module) -> nn.Module:
    """A copy of ``model`` that computes the same function and the same gradients faster on
    the CPU (a private working copy for training):

    - in every ``nn.Sequential``, a ``ReLU`` directly followed by a ``MaxPool2d`` is swapped
      with it: ``maxpool(relu(x)) = relu(maxpool(x))`` exactly (ReLU is non-decreasing), and
      the gradients agree too (both pass the gradient to the window's first maximum when it
      is positive, and 0 otherwise), but the ReLU and its backward then touch a quarter of
      the elements;
    - the parameters of 4-d weights are stored in :func:`work_layout` of the model's dtype
      (``channels_last`` except in float64).

    Only the floating-point summation order of the convolutions changes (in float32), so the
    iterates agree with the plain model's to rounding error, not bit for bit."""
    work = copy.deepcopy(model)
    for seq in work.modules():
        if isinstance(seq, nn.Sequential):
            keys = list(seq._modules)
            for a, b in zip(keys, keys[1:]):
                first, second = seq._modules[a], seq._modules[b]
                if (type(first) is nn.ReLU and type(second) is nn.MaxPool2d
                        and not second.return_indices):
                    seq._modules[a], seq._modules[b] = second, first
    dtype = next((p.dtype for p in work.parameters() if p.is_floating_point()), torch.float32)
    return work.to(memory_format=work_layout(dtype))


def in_work_layout(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous(memory_format=work_layout(x.dtype)) if x.ndim == 4 else x


def forward_chunk(x: torch.Tensor, largest: int) -> int:
    """Images per gradient-free forward pass over ``x`` (caching body features, evaluation):
    ``largest``, except on a CPU in float64, where at most 16: ATen's ``slow_conv2d`` gets slower per
    image as the batch grows (measured on one thread, the FedRep CNN's forward pass over 400
    images: 0.7 s in chunks of 16 against 1.4 s in one batch at the authors' widths, 0.22 s
    against 0.37 s at the narrow widths). The chunks change no value beyond rounding."""
    return min(16, largest) if x.dtype == torch.float64 and x.device.type == "cpu" else largest


class LocalSGD:
    """The local-SGD worker: one working copy of the model (:func:`fast_copy`), into which
    each client's parameters are loaded in turn (instead of a ``deepcopy`` per client).

    A phase that trains only the head of a model with ``body`` and ``head`` submodules and
    ``forward(x) = head(body(x))`` (checked on the first images it sees) without augmentation
    (FedRep's head phase, head fine-tuning) passes the phase's images through the frozen body
    once and runs the head's SGD steps on these features: the same steps, without a body
    forward per step.

    A network with dropout (:class:`~replearn.neural.models.DropoutLinear`, in the head) drops in
    every minibatch step of :meth:`train` and of :meth:`gradient`, with masks drawn from the
    ``generator`` passed (after the minibatch's augmentation draws); :meth:`train` without a generator
    is an error, while a :meth:`gradient` without one (a loss measured, not a step: L2GD's round of
    aggregation steps only) or over the full batch (``idx=None``: Per-FedAvg's evaluation step) does
    not drop. On cached features the head's dropout acts on the features, as it would after the
    body's forward pass."""

    _FEATURE_CHUNK = 512  # images per body forward when caching features (at most; :func:`forward_chunk`)

    def __init__(self, model: nn.Module):
        self.model = fast_copy(model)
        self.params = dict(self.model.named_parameters())
        self._dropout = dropout_layers(self.model)
        self.first_loss: torch.Tensor | None = None  # see watch()
        self.peak_loss: torch.Tensor | None = None
        body, head = getattr(self.model, "body", None), getattr(self.model, "head", None)
        self._head_names: frozenset[str] = frozenset()
        self._split_checked = False
        if isinstance(body, nn.Module) and isinstance(head, nn.Module):
            own = {n for n, _ in self.model.named_parameters()}
            split = {f"body.{n}" for n, _ in body.named_parameters()} | {f"head.{n}" for n, _ in head.named_parameters()}
            if own == split:
                self._head_names = frozenset(f"head.{n}" for n, _ in head.named_parameters())

    def _features_suffice(self, trainable: Sequence[str], x: torch.Tensor, cfg: TrainConfig) -> bool:
        """Whether this phase can run on cached body features (see the class docstring)."""
        if cfg.augment or not self._head_names or not set(trainable) <= self._head_names:
            return False
        if not self._split_checked:
            with torch.no_grad():
                probe = x[:2]
                same = torch.equal(self.model(probe), self.model.head(self.model.body(probe.to(x.dtype))))
            if not same:
                self._head_names = frozenset()
                return False
            self._split_checked = True
        return True

    def watch(self) -> None:
        """Start recording the minibatch losses of :meth:`train` and :meth:`gradient`:
        ``first_loss`` (the first one) and ``peak_loss`` (the largest), 0-d tensors (the engine
        compares them with :data:`DIVERGENCE_FACTOR`); None until a loss is computed."""
        self.first_loss = self.peak_loss = None

    def _record(self, loss: torch.Tensor) -> None:
        loss = loss.detach()
        if self.first_loss is None:
            self.first_loss = self.peak_loss = loss
        else:
            self.peak_loss = torch.maximum(self.peak_loss, loss)

    def gradient(self, params: Params, trainable: Sequence[str], x: torch.Tensor, y: torch.Tensor,
                 idx: torch.Tensor | None, cfg: TrainConfig,
                 generator: torch.Generator | None = None) -> tuple[torch.Tensor, Params]:
        """The mean cross-entropy on rows ``idx`` of ``x``, ``y`` (all rows when None; augmented
        when ``cfg.augment``) of the model with parameters ``params``, and its gradient with
        respect to the names in ``trainable`` (copies): the building block of algorithms with
        their own local steps (:mod:`replearn.neural.algorithms`)."""
        with torch.no_grad():
            for n, p in self.params.items():
                p.copy_(params[n])
                p.requires_grad_(n in trainable)
                p.grad = None
        x = in_work_layout(x)
        xb, yb = (x, y) if idx is None else (x[idx.to(x.device)], y[idx.to(y.device)])
        with dropout_draws(self._dropout if idx is not None and generator is not None else (), generator):
            loss = F.cross_entropy(self.model(augment_batch(xb, cfg, generator) if idx is not None else xb), yb)
        loss.backward()
        self._record(loss)
        return loss.detach(), {n: self.params[n].grad.clone(memory_format=torch.contiguous_format)
                               for n in trainable}

    def train(self, params: Params, trainable: Sequence[str], x: torch.Tensor, y: torch.Tensor,
              batches: Sequence[torch.Tensor], cfg: TrainConfig,
              generator: torch.Generator | None = None, *,
              extra_grad: Callable[[list[torch.Tensor]], Sequence[torch.Tensor]] | None = None,
              max_grad_norm: float | None = None) -> tuple[Params, torch.Tensor]:
        """One local phase on one client: SGD on the mean cross-entropy of each index batch
        of ``batches`` (rows of ``x``, ``y``), updating only the names in ``trainable``
        (``params`` gives every parameter's starting value), with ``torch.optim.SGD``
        semantics and a fresh momentum buffer: ``g <- grad + weight_decay * theta`` for the weights, not the biases (:func:`decays`);
        ``buf <- g`` at the first step, else ``momentum * buf + g``; ``theta <- theta - lr * buf``.
        ``generator`` is needed only when ``cfg.augment`` is on (augmentation draws per batch).
        ``extra_grad(theta)``: terms added to the minibatch gradient at every step, given the
        current trainable tensors in ``trainable``'s order (an objective's extra terms, e.g.
        FedProx's ``mu (theta - theta_global)``); ``g <- grad + extra + weight_decay * theta``.
        ``max_grad_norm``: when set, ``grad + extra`` is scaled to at most this Euclidean norm
        (all trainable tensors together, :func:`~replearn.neural.engine.sgd.clip_total_norm`)
        before the weight decay is added, as ``clip_grad_norm_`` between ``backward()`` and
        ``optimizer.step()`` does (the FedRep authors' SCAFFOLD).
        Returns the trained parameters (copies, names in ``trainable``) and the summed
        minibatch loss (a 0-d tensor)."""
        with torch.no_grad():
            for n, p in self.params.items():
                p.copy_(params[n])
                p.requires_grad_(n in trainable)
        tp = [self.params[n] for n in trainable]
        buf = None
        x = in_work_layout(x)  # no copy when the engine already stores it so
        loss_sum = torch.zeros((), device=x.device, dtype=x.dtype)
        net = self.model
        if batches and self._features_suffice(trainable, x, cfg):
            used, where = torch.unique(torch.cat(list(batches)), return_inverse=True)
            used = used.to(x.device)
            with torch.no_grad():
                x = torch.cat([self.model.body(x[part]) for part in used.split(forward_chunk(x, self._FEATURE_CHUNK))])
            y = y[used]
            batches = where.split([len(b) for b in batches])
            net = self.model.head
        for idx in batches:
            idx = idx.to(x.device)
            for p in tp:
                p.grad = None
            with dropout_draws(self._dropout, generator):
                loss = F.cross_entropy(net(augment_batch(x[idx], cfg, generator)), y[idx])
            loss.backward()
            with torch.no_grad():
                loss_sum += loss
                self._record(loss)
                grads = [p.grad for p in tp]
                if extra_grad is not None:
                    grads = torch._foreach_add(grads, list(extra_grad(tp)))
                if max_grad_norm is not None:
                    grads = clip_total_norm(grads, max_grad_norm)
                if cfg.weight_decay:
                    grads = add_weight_decay(grads, tp, cfg.weight_decay)
                if cfg.momentum:
                    if buf is None:
                        buf = [g.clone() for g in grads]
                    else:
                        torch._foreach_mul_(buf, cfg.momentum)
                        torch._foreach_add_(buf, grads)
                    grads = buf
                torch._foreach_add_(tp, grads, alpha=-cfg.lr)
        return {n: self.params[n].detach().clone(memory_format=torch.contiguous_format) for n in trainable}, loss_sum



def loss_fn(model: nn.Module):
    def loss(train: Params, frozen: Params, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(functional_call(model, {**train, **frozen}, (x,)), y)
    return loss



class FunctionalSGD:
    """The worker of the batched path of :func:`replearn.neural.run`: :class:`LocalSGD`'s :meth:`train`,
    :meth:`gradient` and :meth:`watch` (same arguments, steps and ``torch.optim.SGD``
    semantics) written with ``torch.func`` (gradients by ``grad_and_value`` of a
    ``functional_call``; nothing updated in place), so that an algorithm's ``client_update``,
    written for one client, runs under ``torch.func.vmap`` for a group of clients at once:
    stacked parameters, states and images, one batched forward/backward per step for the
    group (``cfg.vmap_clients > 1``; meant for GPUs). No feature caching, no augmentation and no
    dropout.
    ``first_loss``/``peak_loss`` are recorded as in :class:`LocalSGD` (per client under vmap)."""

    def __init__(self, model: nn.Module):
        self.model = model
        self._dropout = dropout_layers(model)
        self._grad = grad_and_value(loss_fn(model))
        self.first_loss: torch.Tensor | None = None
        self.peak_loss: torch.Tensor | None = None

    def watch(self) -> None:
        """As :meth:`LocalSGD.watch`."""
        self.first_loss = self.peak_loss = None

    def _record(self, loss: torch.Tensor) -> None:
        loss = loss.detach()
        self.first_loss = loss if self.first_loss is None else self.first_loss
        self.peak_loss = loss if self.peak_loss is None else torch.maximum(self.peak_loss, loss)

    def _check(self, cfg: TrainConfig) -> None:
        if self._dropout:
            raise ValueError("the batched path (cfg.vmap_clients > 1) does not run dropout; "
                             "use cfg.vmap_clients = 1 for a network with a DropoutLinear head")
        if cfg.augment:
            raise ValueError("the batched path (cfg.vmap_clients > 1) does not augment; "
                             "use cfg.vmap_clients = 1 with cfg.augment = True")

    def gradient(self, params: Params, trainable: Sequence[str], x: torch.Tensor, y: torch.Tensor,
                 idx: torch.Tensor | None, cfg: TrainConfig,
                 generator: torch.Generator | None = None) -> tuple[torch.Tensor, Params]:
        """As :meth:`LocalSGD.gradient`."""
        self._check(cfg)
        train = {n: params[n] for n in trainable}
        frozen = {n: p for n, p in params.items() if n not in train}
        xb, yb = (x, y) if idx is None else (x[idx.to(x.device)], y[idx.to(y.device)])
        grads, loss = self._grad(train, frozen, xb, yb)
        self._record(loss)
        return loss.detach(), grads

    def train(self, params: Params, trainable: Sequence[str], x: torch.Tensor, y: torch.Tensor,
              batches: Sequence[torch.Tensor], cfg: TrainConfig,
              generator: torch.Generator | None = None, *,
              extra_grad: Callable[[list[torch.Tensor]], Sequence[torch.Tensor]] | None = None,
              max_grad_norm: float | None = None) -> tuple[Params, torch.Tensor]:
        """As :meth:`LocalSGD.train`: ``g <- clip(grad + extra) + weight_decay * theta``; ``buf <- g``
        at the first step, else ``momentum * buf + g``; ``theta <- theta - lr * buf``."""
        self._check(cfg)
        names = list(trainable)
        theta = [params[n] for n in names]
        frozen = {n: p for n, p in params.items() if n not in set(names)}
        sgd = Momentum(cfg.momentum, cfg.weight_decay)
        loss_sum = torch.zeros((), device=x.device, dtype=x.dtype)
        for idx in batches:
            idx = idx.to(x.device)
            g, loss = self._grad(dict(zip(names, theta)), frozen, x[idx], y[idx])
            loss_sum = loss_sum + loss.detach()
            self._record(loss)
            grads = [g[n] for n in names]
            if extra_grad is not None:
                grads = foreach_add(grads, list(extra_grad(theta)))
            if max_grad_norm is not None:
                grads = clip_total_norm(grads, max_grad_norm)
            theta = sgd.step(theta, grads, cfg.lr)
        return dict(zip(names, theta)), loss_sum

