"""Which parameters form which part of a network: its body and head, its layers, its top layers."""

from __future__ import annotations

from torch import nn

from replearn.checks import check_int


def split_body_head(model: nn.Module) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The parameter names of the model's body and of its head (the names starting with
    ``head.``), in ``named_parameters`` order. FedRep's head is the last layer (Collins et
    al., 2021, Sec. 3); the models of :mod:`replearn.neural.models` have a ``head`` submodule."""
    names = [n for n, _ in model.named_parameters()]
    head = tuple(n for n in names if n.startswith("head."))
    body = tuple(n for n in names if not n.startswith("head."))
    if not head or not body:
        raise ValueError("the model needs a `head` submodule (last layer) and a body; use replearn.neural.models")
    return body, head


def layers(model: nn.Module) -> list[tuple[str, ...]]:
    """The model's layers in ``named_parameters`` order, each as the names of its parameters
    (a layer is the module that owns them, e.g. ``body.fc2`` with its weight and bias)."""
    found: dict[str, list[str]] = {}
    for n, _ in model.named_parameters():
        found.setdefault(n.rpartition(".")[0], []).append(n)
    return [tuple(v) for v in found.values()]


def top_layers(model: nn.Module, k: int) -> tuple[str, ...]:
    """The parameter names of the model's last ``k`` layers (:func:`layers`); ``k = 1`` is the
    head of :func:`split_body_head`."""
    check_int(k, "k (layers)", 1)
    all_layers = layers(model)
    if k >= len(all_layers):
        raise ValueError(f"k = {k} layers would leave no layer below them: the model has {len(all_layers)}")
    return tuple(n for layer in all_layers[-k:] for n in layer)

