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
