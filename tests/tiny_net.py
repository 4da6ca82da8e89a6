"""The tiny body/head CNN shared by the neural-engine and Flower tests."""

from torch import nn


class Tiny(nn.Module):
    """A small body/head network on 3x8x8 images."""

    def __init__(self, n_classes=3):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                                  nn.Linear(4 * 16, 8), nn.ReLU())
        self.head = nn.Linear(8, n_classes)

    def forward(self, x):
        return self.head(self.body(x))


def authors_sgd(params, *, lr, momentum, weight_decay=0.0):
    """``torch.optim.SGD`` as the FedRep authors configure it (``models/Update.py``): weight
    decay on the weights (tensors of two or more dimensions), none on the biases."""
    import torch

    params = list(params)
    groups = [{"params": [p for p in params if p.ndim > 1], "weight_decay": weight_decay},
              {"params": [p for p in params if p.ndim <= 1], "weight_decay": 0.0}]
    return torch.optim.SGD([g for g in groups if g["params"]], lr=lr, momentum=momentum)
