"""The features a similarity is measured on: the outputs of named submodules of a network on a
set of inputs (:func:`capture_activations`), collected by forward hooks in eval mode without
gradients, each flattened to one row per example."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["capture_activations"]


def capture_activations(model: nn.Module, x: torch.Tensor, layer_names, *,
                        batch_size: int = 256) -> dict[str, torch.Tensor]:
    """Outputs of the named submodules of ``model`` on ``x``, each flattened to (n, p).

    Names are those of ``model.named_modules()`` (e.g. ``"body.conv1"``). Forward hooks are
    registered on the modules, ``x`` (already on the model's device) is run through in
    batches of ``batch_size`` in eval mode under ``torch.no_grad()``, and afterwards the
    hooks are removed and every submodule's train/eval mode restored, even on error. The
    activations stay on the device the model produced them on, in the model's float dtype.
    A module that runs more than once per forward pass (a reused activation module) is
    rejected, since its output would be ambiguous.
    """
    names = [layer_names] if isinstance(layer_names, str) else list(layer_names)
    modules = dict(model.named_modules())
    if not names:
        raise ValueError("layer_names is empty: name at least one module of model.named_modules()")
    unknown = [name for name in names if name not in modules]
    if unknown:
        available = [name for name in modules if name]
        raise ValueError(f"unknown layer name(s) {unknown}; available modules: {available}")
    if len(set(names)) != len(names):
        raise ValueError(f"layer_names has duplicates: {names}")
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int; got {batch_size!r}")
    if not isinstance(x, torch.Tensor) or x.ndim < 1 or x.shape[0] == 0:
        raise ValueError("x must be a non-empty tensor with the examples along dimension 0")

    chunks: dict[str, list[torch.Tensor]] = {name: [] for name in names}

    def make_hook(name: str):
        def hook(_module, _inputs, output):
            if not isinstance(output, torch.Tensor):
                raise ValueError(f"layer {name!r} returned {type(output).__name__}, not a tensor; "
                                 f"capture one of its tensor-valued submodules instead")
            chunks[name].append(output.detach().reshape(output.shape[0], -1))
        return hook

    modes = [(m, m.training) for m in model.modules()]
    handles = []
    try:
        handles = [modules[name].register_forward_hook(make_hook(name)) for name in names]
        model.eval()
        with torch.no_grad():
            for b, start in enumerate(range(0, x.shape[0], batch_size)):
                xb = x[start:start + batch_size]
                model(xb)
                for name in names:
                    if len(chunks[name]) != b + 1:
                        raise ValueError(f"layer {name!r} ran {len(chunks[name]) - b} times in one forward pass "
                                         f"(a reused module?); capture a module that runs exactly once")
                    if chunks[name][-1].shape[0] != xb.shape[0]:
                        raise ValueError(f"layer {name!r} output has {chunks[name][-1].shape[0]} rows for a "
                                         f"batch of {xb.shape[0]}; dimension 0 must index the examples")
    finally:
        for handle in handles:
            handle.remove()
        for module, mode in modes:
            module.training = mode
    return {name: torch.cat(chunks[name]) for name in names}
