"""What augmentation costs: random crops and flips of a batch against the SGD step they feed.

The FedRep authors augment every training batch (RandomCrop(32, padding=4) and a horizontal flip,
``utils/train_utils.py`` of lgcollins/FedRep); ``replearn.neural.data.augment`` does the same for a whole
batch with one gather. This bench times, on the authors' CIFAR-10 CNN (``models.FedRepCNN``, float32,
one thread, batches of 10 as in their code):

* ``augment``: crops and flips of one batch;
* ``step``: one SGD step of the whole network on one batch (forward, backward, update);
* ``head step, cached``: one step of FedRep's head phase on cached body features, what the engine
  does without augmentation (``neural.LocalSGD``: the body's features of the client's images are
  computed once per phase);

and prints augment / step (target: a few percent, issue 34) and what a FedRep round with
augmentation costs against one without, at the paper's 10 head epochs and 1 body epoch: with
augmentation every head step needs the whole forward pass, because each epoch sees other crops.

Run: ``python bench/augment.py`` (CPU, one thread).
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from replearn.neural import data, models
from replearn.neural.specs import FEDREP_WIDTHS

TARGET = 0.05  # augment at most 5% of a step


def best_of(fn, repeats: int = 5, number: int = 50) -> float:
    """The best mean time of ``number`` calls of ``fn`` over ``repeats`` runs (seconds)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number)
    return min(times)


def main() -> None:
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    model = models.make_model("fedrep_cnn", 10, seed=0, device="cpu", widths=FEDREP_WIDTHS["cifar10"])
    x = torch.randn(10, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (10,), generator=g)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    feats = model.body(x).detach()

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    def head_step():
        opt.zero_grad()
        F.cross_entropy(model.head(feats), y).backward()
        opt.step()

    aug = best_of(lambda: data.augment(x, g))
    full = best_of(step)
    head = best_of(head_step)
    print(f"augment one batch of 10: {1e3 * aug:.3f} ms; SGD step of the whole CNN: {1e3 * full:.3f} ms; "
          f"head step on cached features: {1e3 * head:.3f} ms")
    ratio = aug / full
    print(f"augment / step = {ratio:.3f} ({'target met' if ratio <= TARGET else 'TARGET MISSED'}: <= {TARGET})")
    head_epochs, body_epochs = 10, 1
    plain = head_epochs * head + body_epochs * full
    augmented = (head_epochs + body_epochs) * (full + aug)
    print(f"a FedRep round (10 head epochs, 1 body epoch), per batch of the client's data: "
          f"{1e3 * plain:.2f} ms without augmentation, {1e3 * augmented:.2f} ms with it "
          f"({augmented / plain:.1f}x: the head epochs lose their cached features)")


if __name__ == "__main__":
    main()
