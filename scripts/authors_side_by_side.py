"""Run the FedRep authors' own training code next to our engine, on the same partition from the
same initial weights, and print both results side by side.

    git clone https://github.com/lgcollins/FedRep /path/to/FedRep      # once, yourself
    REPLEARN_DATA=/path/to/data OMP_NUM_THREADS=1 python scripts/authors_side_by_side.py \\
        --fedrep-repo /path/to/FedRep --alg fedrep fedavg --clients 20 --classes 2 \\
        --train-per-client 100 --rounds 20 --participation 0.5 --seeds 0 1 2 --out record.md

Needs no network and no torchvision, and is not part of ``make test`` (``tests/test_side_by_side.py``
tests the pieces that do not need their code, on a fake repository).

How their code runs, unmodified
-------------------------------
Their ``main_fedrep.py`` is executed as ``__main__`` (``exec`` of its source) in a temporary
working directory holding an empty ``save/`` (their script writes a csv there), with their
repository first on ``sys.path`` and ``np.random``, ``random`` and ``torch`` seeded with the seed.
Before that, ``sys.modules`` receives:

- ``utils.options``: ``args_parser()`` returns :func:`authors_args`, an ``argparse.Namespace``
  with every option of their ``utils/options.py`` at its default, overridden by this run's
  settings (``dataset="cifar10"``, ``model="cnn"``, ``num_users``, ``shard_per_user``, ``frac``,
  ``local_bs=10``, ``lr=0.01``, ``epochs=T``, ``local_ep=11`` for FedRep (10 head epochs + 1
  body epoch, ``local_rep_ep=1``, as in their ``scripts/FedRep_cifar10_*.sh``) or 1 for FedAvg,
  ``local_updates=10**6``, ``gpu=-1`` (``0`` with ``--device cuda``), ``test_freq=1``,
  ``load_fed="n"``, ``save_every`` larger than the run, ``m_tr = m_ft = max(500, largest
  client)`` so that every training image is used, as on our side).
- ``utils.train_utils``: ``get_data(args)`` returns dataset objects built from our offline subset
  (``replearn.neural.data.load_cifar("cifar10")``, uint8 NCHW) with their transforms re-implemented in
  torch (:class:`AuthorsCifar`: for training, zero (black) padding by 4, a random 32x32 crop,
  a random horizontal flip, then ``/255`` and normalisation by their ImageNet mean/std, drawing
  from the global torch RNG in torchvision's order; for testing, the normalisation only), and
  ``dict_users_train`` / ``dict_users_test`` from OUR partition (:func:`partition`);
  ``get_model(args)`` returns their ``CNNCifar`` (from their ``models/Nets.py``) loaded with the
  initial weights of our ``models.make_model("fedrep_cnn", 10, seed, widths=FEDREP_WIDTHS["cifar10"])``, mapped by name
  (:data:`OURS_TO_AUTHORS`); ``read_data`` raises (LEAF data are not used).
- a dummy ``torchvision`` with an empty ``models`` (their ``models/Nets.py`` imports it) when
  torchvision is not installed, and a minimal ``pandas`` (``DataFrame(...).to_csv``, used for their
  final csv) when pandas is not installed.

Their ``models/test.py`` mixes a tab into space indentation (line 108,
``\\tnet_local = copy.deepcopy(net)``), which Python 3 refuses (``TabError``). Their modules are
imported through a loader that, only for a file that fails to compile with a ``TabError`` /
``IndentationError``, compiles ``source.expandtabs(8)`` instead (what Python 2 read; the tab
then stands for the 8 spaces of its neighbours) and records the file; nothing else is changed.
The record lists the files so fixed.

The numbers compared are parsed from their stdout: every ``Round k, ..., Test accuracy: A`` line
(and ``Global test accuracy`` for FedAvg), ``Final Round ...`` and ``Average accuracy final 10
rounds: X`` (``Average global accuracy final 10 rounds`` for FedAvg). Their "final 10 rounds"
number adds ``acc / 10`` over the last 10 rounds, so for fewer than 10 rounds it is the sum
over all rounds divided by 10, not a mean; the comparison therefore uses the mean of their
per-round accuracies over the last ``min(10, T)`` rounds (equal to their number when
``T >= 10``), against our ``FedResult.accuracy`` (``last_rounds=10``). Both are in percent.

Our side: ``replearn.neural.algorithms.run("FedRep" | "FedAvg", model, clients, cfg)`` on
``neural.ClientData`` of the same index lists (our own normalisation), from the same initial
weights, with ``neural.TrainConfig(rounds=T, participation=r, lr=0.01, momentum=0.5,
weight_decay=1e-4, batch_size=10, local_epochs=1, head_epochs=10, augment=True, eval_every=1,
last_rounds=10, seed=seed)``.

What is the same: the network (their ``CNNCifar`` = our ``FedRepCNN`` variant ``cifar10``; their
``log_softmax`` output gives the same cross-entropy and the same argmax as our logits); the
initial weights; the partition and the per-client test sets; SGD with lr 0.01, momentum 0.5,
weight decay 1e-4 on weights only (not biases), batch 10 with a smaller last batch; FedRep's 10
head epochs (body frozen) then 1 body epoch (head frozen) with the body averaged and the head kept
by its client (their single optimiser's momentum does not carry across the two phases because
``zero_grad`` sets gradients to ``None`` in torch >= 2.0 and SGD skips parameters without a
gradient: on older torch the frozen head would keep moving by its momentum buffer and weight
decay during the body epoch); evaluation of every client on its own test set each round, pooled
(their ``test_img_local_all``: ``sum(acc_i * n_i) / sum(n_i)``, our ``Evaluation.average``).

Remaining differences
---------------------
1. Normalisation statistics: theirs the ImageNet mean/std (0.485, 0.456, 0.406) /
   (0.229, 0.224, 0.225); ours the CIFAR-10 mean/std (``replearn.neural.data.CHANNEL_STATS``).
2. Where crops are padded: theirs pad the raw image with black pixels before normalising (the
   border is ``-mean/std``, about -2 per channel); ours pads the normalised image with zeros (the
   border is the mean colour). Their crop and flip draw from the global torch RNG per image;
   ours from the engine's generator per batch. Their batches' order comes from DataLoader
   shuffling (global torch RNG), ours from the engine's generator; their client sampling from
   ``np.random.choice``, ours from ``torch.randperm``: the random streams differ, so single runs
   differ by seed noise even where the protocol is the same.
3. Never-sampled clients: in their ``main_fedrep.py`` every client's entry of ``w_locals`` starts
   as the tensors of ``net_glob.state_dict()``, which share storage with ``net_glob``'s parameters;
   ``net_glob.load_state_dict(w_glob)`` copies in place, so until a client is first sampled its
   "local" parameters are the current global ones. For FedRep ``w_glob`` averages every key,
   the heads included, so a client never sampled yet is evaluated, and starts its first local
   training, with the average of the previous round's trained heads; ours keep the initial head
   until the client is first sampled (and evaluate it with that head).
4. Their final extra round: after the T rounds their loop runs round T with ALL clients, each
   training only its head for 10 epochs (FedAvg: the global model's head fine-tuned, i.e.
   FedAvg+FT), printed as ``Final Round`` and not counted in the final-10 average; ours has no
   such round. The record reports it separately.
5. Which FedAvg accuracy each prints: their ``Test accuracy`` line for FedAvg evaluates each
   client with its own last locally updated model (the global model for a client never sampled),
   their ``Global test accuracy`` the server's model; ours (``FedResult.accuracy``) the server's
   model, so the comparison uses their global line (both are recorded).
6. Aggregation weights: their ``lens`` is all ones for CIFAR, so the server averages the sampled
   clients uniformly; ours weights by n_i. Equal when every client holds the same number of
   training images (the record says whether they do).
7. Clients per round: theirs ``max(int(r M), 1)``, ours ``max(1, round(r M))``; the script refuses
   settings where the two differ.
8. Their evaluation batches are of 10 images and ours of up to 1000 (float rounding only).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.abc
import importlib.machinery
import importlib.util
import io
import json
import math
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "lib") not in sys.path:  # run from a checkout without the package installed
    sys.path.insert(0, str(ROOT / "lib"))

from replearn.neural import algorithms
from replearn import neural  # noqa: E402
from replearn.neural import data as D  # noqa: E402
from replearn.backend import derive_seed  # noqa: E402
from replearn.neural.models import make_model  # noqa: E402
from replearn.neural.specs import FEDREP_WIDTHS

# --------------------------------------------------------------------------------------------
# Weight mapping

#: Our ``models.FedRepCNN`` layer -> their ``CNNCifar`` layer (``models/Nets.py``).
OURS_TO_AUTHORS = {"body.conv1": "conv1", "body.conv2": "conv2", "body.fc1": "fc1", "body.fc2": "fc2",
                   "head": "fc3"}
AUTHORS_TO_OURS = {v: k for k, v in OURS_TO_AUTHORS.items()}

#: Their FedRep's shared (representation) parameters for CIFAR: ``w_glob_keys`` of
#: ``main_fedrep.py``, ``net_glob.weight_keys[i] for i in [0, 1, 3, 4]`` of ``CNNCifar``.
AUTHORS_BODY = frozenset({"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "conv2.weight", "conv2.bias",
                          "conv1.weight", "conv1.bias"})


def _rename(state: dict, table: dict, what: str) -> dict:
    out = {}
    for name, value in state.items():
        layer, _, kind = name.rpartition(".")
        if layer not in table or kind not in ("weight", "bias"):
            raise ValueError(f"{what} parameter {name!r} has no counterpart: the mapping knows the layers "
                             f"{sorted(table)} (weight and bias each)")
        out[f"{table[layer]}.{kind}"] = value.detach().clone()
    missing = {f"{layer}.{kind}" for layer in table for kind in ("weight", "bias")} - set(state)
    if missing:
        raise ValueError(f"{what} state lacks {sorted(missing)}")
    return out


def to_authors(state: dict) -> dict:
    """Our ``FedRepCNN`` state (``body.conv1.weight``, ..., ``head.bias``) renamed for their ``CNNCifar``
    (``conv1.weight``, ..., ``fc3.bias``); tensors cloned."""
    return _rename(state, OURS_TO_AUTHORS, "our")


def from_authors(state: dict) -> dict:
    """The inverse of :func:`to_authors`."""
    return _rename(state, AUTHORS_TO_OURS, "their")


# --------------------------------------------------------------------------------------------
# Their options

#: Every option of their ``utils/options.py`` with its default.
AUTHORS_DEFAULTS = dict(
    epochs=10, num_users=100, shard_per_user=2, frac=0.1, local_ep=5, local_bs=10, bs=128, lr=0.01,
    momentum=0.5, split="user", grad_norm=False, lr_decay=1.0, local_updates=1000000, m_tr=500, m_ft=500,
    model="mlp", kernel_num=9, kernel_sizes="3,4,5", norm="batch_norm", num_filters=32, max_pool="True",
    num_layers_keep=1, alg="fedavg", local_rep_ep=1, lr_g=0.1, mu=0.1, gmf=0.0, alpha_apfl=0.75,
    alpha_l2gd=1.0, lambda_l2gd=0.5, lr_in=0.0001, bs_frac_in=0.8, lam_ditto=1.0, dataset="mnist",
    iid=False, num_classes=10, num_channels=3, gpu=0, seed=1, test_freq=1, load_fed="n", results_save="runA",
    save_every=50)

#: The ``args.`` attributes read by the files this script runs (``main_fedrep.py``,
#: ``models/Update.py``, ``models/test.py``, ``models/Nets.py``; ``device`` is set by their main).
AUTHORS_READS = ("alg", "alpha_apfl", "dataset", "epochs", "frac", "gmf", "gpu", "load_fed", "local_bs",
                 "local_ep", "local_rep_ep", "local_updates", "lr", "m_ft", "m_tr", "model", "mu",
                 "num_classes", "num_users", "save_every", "shard_per_user", "test_freq")

#: The files of their repository whose ``args.`` reads are checked against the namespace.
AUTHORS_FILES = ("main_fedrep.py", "models/Update.py", "models/test.py", "models/Nets.py")


def authors_args(alg: str, *, clients: int, classes: int, rounds: int, participation: float, m_tr: int = 500,
                 seed: int = 0, gpu: int = -1) -> argparse.Namespace:
    """Their ``args_parser()`` result for this run: their defaults, with the settings of their
    ``scripts/{FedRep,FedAvg}_cifar10_*.sh`` and this run's sizes."""
    if alg not in ("fedrep", "fedavg"):
        raise ValueError(f"alg must be 'fedrep' or 'fedavg', got {alg!r}")
    args = dict(AUTHORS_DEFAULTS)
    args.update(alg=alg, dataset="cifar10", model="cnn", num_classes=10, num_users=clients, shard_per_user=classes,
                frac=participation, local_bs=10, lr=0.01, epochs=rounds, local_ep=11 if alg == "fedrep" else 1,
                local_rep_ep=1, local_updates=1000000, m_tr=max(500, m_tr), m_ft=max(500, m_tr), gpu=gpu,
                test_freq=1, load_fed="n", save_every=rounds + 10**6, seed=seed)
    return argparse.Namespace(**args)


def attributes_read(repo: Path, files=AUTHORS_FILES) -> set[str]:
    """The ``args.NAME`` attributes their files read (``device`` excluded: their main sets it)."""
    names = set()
    for f in files:
        names |= set(re.findall(r"\bargs\.(\w+)", (Path(repo) / f).read_text(errors="replace")))
    return names - {"device"}


# --------------------------------------------------------------------------------------------
# Partition and data

IMAGENET_STATS = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


def partition(cifar: D.CifarData, clients: int, classes: int, train_per_client: int, seed: int):
    """``(train_parts, test_parts)``: each client's indices into ``cifar``'s training and test
    arrays, as :func:`replearn.experiments.ch05_fedrep.cifar_federation.make_federation` (all classes, the authors' shard
    split, ``train_per_client`` images per client, the whole test set spread) builds them, with
    the same seeds (``derive_seed(seed, 10 | 11 | 12)``)."""
    k = cifar.n_classes
    total = train_per_client * clients
    if total % k:
        raise ValueError(f"train_per_client * clients = {total} must be a multiple of the {k} classes "
                         f"(a class-balanced subset)")
    rng = np.random.default_rng(derive_seed(seed, 10))
    ytr_all = cifar.y_train.numpy()
    keep = []
    for c in range(k):
        pos = np.flatnonzero(ytr_all == c)
        if len(pos) < total // k:
            raise ValueError(f"class {c} has {len(pos)} training images, need {total // k} "
                             f"(train_per_client * clients / classes): use fewer clients or images")
        keep.append(rng.choice(pos, total // k, replace=False))
    keep = np.sort(np.concatenate(keep))
    parts = D.shard_partition(cifar.y_train[keep], clients, classes, seed=derive_seed(seed, 11))
    tests = D.client_test_split(parts, cifar.y_train[keep], cifar.y_test, seed=derive_seed(seed, 12))
    train_parts = [torch.from_numpy(keep[p.numpy()]) for p in parts]
    return train_parts, tests


class AuthorsCifar(torch.utils.data.Dataset):
    """CIFAR images (uint8 NCHW) served as their ``torchvision`` CIFAR10 with their transforms:
    ``train=True``: ``RandomCrop(32, padding=4)`` (black padding), ``RandomHorizontalFlip()``,
    ``ToTensor()``, ``Normalize(ImageNet mean, std)``, with torchvision's draws from the global
    torch RNG (crop row, crop column, then the flip); ``train=False``: ``ToTensor()`` and
    ``Normalize`` only. Items are ``(float32 image, int label)``; ``targets`` lists the labels."""

    def __init__(self, x_uint8: torch.Tensor, y: torch.Tensor, *, train: bool):
        if x_uint8.dtype != torch.uint8 or x_uint8.ndim != 4 or x_uint8.shape[1] != 3:
            raise ValueError(f"expected uint8 images (N, 3, H, W), got {x_uint8.dtype} {tuple(x_uint8.shape)}")
        self.x = x_uint8.contiguous()
        self.targets = [int(v) for v in y]
        self.train = train
        self.mean = torch.tensor(IMAGENET_STATS[0]).view(3, 1, 1)
        self.std = torch.tensor(IMAGENET_STATS[1]).view(3, 1, 1)
        if not train:  # normalise once
            self.xn = (self.x.float() / 255.0 - self.mean) / self.std

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, i):
        i = int(i)
        if not self.train:
            return self.xn[i], self.targets[i]
        img = self.x[i]
        h, w = img.shape[1:]
        padded = torch.nn.functional.pad(img, (4, 4, 4, 4))  # black (0) border, before normalising
        top = int(torch.randint(0, padded.shape[1] - h + 1, size=(1,)).item())
        left = int(torch.randint(0, padded.shape[2] - w + 1, size=(1,)).item())
        img = padded[:, top:top + h, left:left + w]
        if torch.rand(1) < 0.5:
            img = img.flip(-1)
        return (img.float() / 255.0 - self.mean) / self.std, self.targets[i]


# --------------------------------------------------------------------------------------------
# Running their code


class _TabFixLoader(importlib.machinery.SourceFileLoader):
    """Their module's loader: compiles the source as is, and only if that fails with an
    ``IndentationError`` (``TabError``), compiles ``source.expandtabs(8)``, noting the file."""

    fixed: list = []

    def source_to_code(self, data, path, *, _optimize=-1):
        try:
            return super().source_to_code(data, path, _optimize=_optimize)
        except IndentationError:
            text = importlib.util.decode_source(data).expandtabs(8)
            code = compile(text, path, "exec", dont_inherit=True, optimize=_optimize)
            self.fixed.append(str(path))
            return code


class _AuthorsFinder(importlib.abc.MetaPathFinder):
    """Finds the top-level modules ``tops`` (and their submodules) in ``repo`` only, loading
    them with :class:`_TabFixLoader`."""

    def __init__(self, repo: Path, tops, fixed: list):
        self.repo, self.tops, self.fixed = Path(repo), set(tops), fixed

    def find_spec(self, fullname, path, target=None):
        if fullname.partition(".")[0] not in self.tops:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, [str(self.repo)] if path is None else path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return spec
        loader = _TabFixLoader(fullname, spec.origin)
        loader.fixed = self.fixed
        spec.loader = loader
        return spec


def compile_authors_file(path: Path, fixed: list):
    """Their script compiled as is, or (``IndentationError``) with ``expandtabs(8)``."""
    text = Path(path).read_text()
    try:
        return compile(text, str(path), "exec", dont_inherit=True)
    except IndentationError:
        fixed.append(str(path))
        return compile(text.expandtabs(8), str(path), "exec", dont_inherit=True)


class _Tee(io.TextIOBase):
    def __init__(self, *streams):
        self.streams = streams

    def write(self, s):
        for st in self.streams:
            st.write(s)
        return len(s)

    def flush(self):
        for st in self.streams:
            st.flush()


def _module(name: str, **attrs) -> types.ModuleType:
    """A stand-in module with a ``__spec__`` (``importlib.util.find_spec`` refuses one without)."""
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package="__path__" in attrs)
    if "__path__" in attrs:
        mod.__spec__.submodule_search_locations = list(attrs["__path__"])
    return mod


def _pandas_stub() -> types.ModuleType:
    class DataFrame:
        def __init__(self, data, columns):
            self.data, self.columns = np.asarray(data).reshape(len(data), -1), list(columns)

        def to_csv(self, path, index=False):
            lines = [",".join(self.columns)] + [",".join(repr(float(v)) for v in row) for row in self.data]
            Path(path).write_text("\n".join(lines) + "\n")

    return _module("pandas", DataFrame=DataFrame, __stub__=True)


#: Top-level modules of their repository that this harness imports from it (fresh every run).
AUTHORS_TOPS = ("models", "utils", "FedProx", "comm_helpers")


@contextlib.contextmanager
def authors_environment(repo: Path, stubs: dict, workdir: Path):
    """Their repository first on ``sys.path`` and found by :class:`_AuthorsFinder`,
    ``sys.modules`` with ``stubs`` (name -> module) and no earlier copy of their modules, the
    working directory ``workdir``, no bytecode written into their repository; everything
    restored on exit. Yields the list of files compiled with ``expandtabs``."""
    repo = Path(repo).resolve()
    managed = set(AUTHORS_TOPS) | {n.partition(".")[0] for n in stubs}
    saved = {n: m for n, m in sys.modules.items() if n.partition(".")[0] in managed}
    fixed: list = []
    finder = _AuthorsFinder(repo, AUTHORS_TOPS, fixed)
    old_cwd, old_path, old_bytecode = os.getcwd(), list(sys.path), sys.dont_write_bytecode
    try:
        for n in saved:
            del sys.modules[n]
        sys.modules.update(stubs)
        sys.path.insert(0, str(repo))
        sys.meta_path.insert(0, finder)
        sys.dont_write_bytecode = True
        os.chdir(workdir)
        yield fixed
    finally:
        os.chdir(old_cwd)
        sys.dont_write_bytecode = old_bytecode
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
        sys.path[:] = old_path
        for n in [n for n in sys.modules if n.partition(".")[0] in managed]:
            del sys.modules[n]
        sys.modules.update(saved)


def make_stubs(repo: Path, args: argparse.Namespace, cifar: D.CifarData, train_parts, test_parts,
               initial_state: dict, probe=None) -> dict:
    """The modules their ``main_fedrep.py`` imports in place of its own ``utils`` (see the module
    docstring); ``initial_state`` is OUR model's state, mapped by :func:`to_authors`. ``probe``:
    ``(x, expected)``, images and the log-softmax our model gives them; ``get_model`` then
    checks that their network with the mapped weights computes the same (else ``RuntimeError``)."""

    def args_parser():
        return argparse.Namespace(**vars(args))

    def get_data(a):
        dataset_train = AuthorsCifar(cifar.x_train, cifar.y_train, train=True)
        dataset_test = AuthorsCifar(cifar.x_test, cifar.y_test, train=False)
        dict_users_train = {i: np.array(p.numpy(), dtype="int64") for i, p in enumerate(train_parts)}
        dict_users_test = {i: np.array(p.numpy(), dtype="int64") for i, p in enumerate(test_parts)}
        return dataset_train, dataset_test, dict_users_train, dict_users_test

    def get_model(a):
        from models.Nets import CNNCifar  # their network, from their repository
        net = CNNCifar(args=a)
        net.load_state_dict(to_authors(initial_state))
        net = net.to(a.device)
        if probe is not None:
            x, expected = probe
            with torch.no_grad():
                got = net(x.to(a.device)).cpu()
            if not torch.allclose(got, expected.cpu(), rtol=1e-4, atol=1e-5):
                raise RuntimeError(f"their CNNCifar with our mapped weights computes another function (largest "
                                   f"log-probability difference {float((got - expected.cpu()).abs().max()):.3g})")
        print(net)
        return net

    def read_data(*_a, **_k):
        raise NotImplementedError("this harness serves CIFAR-10 only (no LEAF data)")

    utils = _module("utils", __path__=[str(Path(repo) / "utils")])
    options = _module("utils.options", args_parser=args_parser)
    train_utils = _module("utils.train_utils", get_data=get_data, get_model=get_model, read_data=read_data)
    utils.options, utils.train_utils = options, train_utils
    stubs = {"utils": utils, "utils.options": options, "utils.train_utils": train_utils}
    if importlib.util.find_spec("torchvision") is None:
        tv_models = _module("torchvision.models")
        stubs["torchvision"] = _module("torchvision", models=tv_models, __path__=[])
        stubs["torchvision.models"] = tv_models
    if importlib.util.find_spec("pandas") is None:
        stubs["pandas"] = _pandas_stub()
    return stubs


_NUM = r"([-+0-9.eEnaifNAIF]+)"
_PATTERNS = {
    "local": re.compile(r"^Round\s+(\d+), Train loss: \S+, Test loss: \S+, Test accuracy: " + _NUM, re.M),
    "global": re.compile(r"^Round\s+(\d+), Global train loss: \S+, Global test loss: \S+, "
                         r"Global test accuracy: " + _NUM, re.M),
    "final_local": re.compile(r"^Final Round, Train loss: \S+, Test loss: \S+, Test accuracy: " + _NUM, re.M),
    "final_global": re.compile(r"^Final Round, Global train loss: \S+, Global test loss: \S+, "
                               r"Global test accuracy: " + _NUM, re.M),
    "printed_final10": re.compile(r"^Average accuracy final 10 rounds: " + _NUM, re.M),
    "printed_final10_global": re.compile(r"^Average global accuracy final 10 rounds: " + _NUM, re.M),
}


def parse_authors_output(text: str, rounds: int) -> dict:
    """Their printed numbers (percent): per-round ``local`` (``Test accuracy``) and, for FedAvg,
    ``global`` accuracies, the ``Final Round`` ones, their printed final-10 averages, and
    ``mean_last`` / ``mean_last_global``: the mean of the per-round values over the last
    ``min(10, rounds)`` rounds. ``ValueError`` if a round's line is missing."""
    out: dict = {}
    for key in ("local", "global"):
        found = {int(r): float(a) for r, a in _PATTERNS[key].findall(text)}
        if found or key == "local":
            missing = [t for t in range(rounds) if t not in found]
            if missing:
                raise ValueError(f"their output has no '{'Global test' if key == 'global' else 'Test'} accuracy' "
                                 f"line for rounds {missing}; last lines:\n" + "\n".join(text.splitlines()[-15:]))
            out[key] = [found[t] for t in range(rounds)]
            last = out[key][-min(10, rounds):]
            out["mean_last" if key == "local" else "mean_last_global"] = sum(last) / len(last)
    for key in ("final_local", "final_global", "printed_final10", "printed_final10_global"):
        m = _PATTERNS[key].findall(text)
        if m:
            out[key] = float(m[-1])
    return out


def run_authors(repo: Path, args: argparse.Namespace, cifar: D.CifarData, train_parts, test_parts,
                initial_state: dict, seed: int, *, echo: bool = False, probe=None) -> dict:
    """Run their ``main_fedrep.py`` once (see the module docstring); returns the parsed numbers
    (:func:`parse_authors_output`), ``wall_s``, ``tab_fixed`` (files compiled with
    ``expandtabs``), ``stubs`` (stand-in modules used) and the ``output`` they printed."""
    repo = Path(repo).resolve()
    stubs = make_stubs(repo, args, cifar, train_parts, test_parts, initial_state, probe)
    code_fixed: list = []
    code = compile_authors_file(repo / "main_fedrep.py", code_fixed)
    buf = io.StringIO()
    with tempfile.TemporaryDirectory(prefix="fedrep_authors_") as tmp:
        (Path(tmp) / "save").mkdir()
        with authors_environment(repo, stubs, Path(tmp)) as fixed:
            np.random.seed(seed)
            random.seed(seed)
            torch.manual_seed(seed)
            start = time.perf_counter()
            stream = _Tee(buf, sys.stderr) if echo else buf
            try:
                with contextlib.redirect_stdout(stream):
                    exec(code, {"__name__": "__main__", "__file__": str(repo / "main_fedrep.py"),
                                "__builtins__": __builtins__})
            except BaseException as e:
                tail = "\n".join(buf.getvalue().splitlines()[-20:])
                raise RuntimeError(f"their main_fedrep.py failed ({type(e).__name__}: {e}); its last output:\n"
                                   f"{tail}") from e
            wall = time.perf_counter() - start
            fixed = list(dict.fromkeys(code_fixed + fixed))
    text = buf.getvalue()
    out = parse_authors_output(text, args.epochs)
    out.update(wall_s=wall, tab_fixed=[str(Path(f).resolve().relative_to(repo)) if Path(f).resolve().is_relative_to(repo)
                                       else f for f in fixed],
               stubs=sorted(n for n in stubs if "." not in n), output=text)
    return out


# --------------------------------------------------------------------------------------------
# Our side


def our_config(rounds: int, participation: float, seed: int) -> neural.TrainConfig:
    return neural.TrainConfig(rounds=rounds, participation=participation, lr=0.01, momentum=0.5, weight_decay=1e-4,
                              batch_size=10, local_epochs=1, head_epochs=10, augment=True, eval_every=1,
                              last_rounds=10, seed=seed)


def run_ours(alg: str, cifar: D.CifarData, train_parts, test_parts, model, cfg, device) -> dict:
    clients = neural.ClientData.from_partition(cifar.x_train, cifar.y_train, train_parts, cifar.x_test, cifar.y_test,
                                               test_parts, dataset="cifar10", device=device)
    start = time.perf_counter()
    res = algorithms.run({"fedrep": "FedRep", "fedavg": "FedAvg"}[alg], model, clients, cfg)
    wall = time.perf_counter() - start
    return {"per_round": [100 * float(a) for a in res.test_accuracy], "accuracy": 100 * res.accuracy,
            "participants": [list(p) for p in res.participants], "wall_s": wall}


# --------------------------------------------------------------------------------------------
# Command line


def _seed(text: str) -> int:
    v = int(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"seeds must be non-negative integers, got {v}")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fedrep-repo", required=True, type=Path,
                   help="a clone of github.com/lgcollins/FedRep (holding main_fedrep.py)")
    p.add_argument("--alg", nargs="+", default=["fedrep"], choices=["fedrep", "fedavg"])
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--classes", type=int, default=2, help="classes (shards) per client")
    p.add_argument("--train-per-client", type=int, default=100)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--participation", type=float, default=0.5)
    p.add_argument("--seeds", nargs="+", type=_seed, default=[0, 1, 2])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="both codes run here (default cpu)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument("--out", type=Path, help="write the record: FILE.json (JSON) or FILE.md (markdown)")
    p.add_argument("--note", default="", help="a sentence put at the top of the markdown record")
    p.add_argument("--show-their-output", action="store_true", help="echo their stdout to stderr while it runs")
    return p


def check_args(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """Refuse bad settings with ``p.error`` (exit status 2) and a message naming the option."""
    repo = a.fedrep_repo
    if not repo.is_dir():
        p.error(f"--fedrep-repo {repo}: no such directory (clone https://github.com/lgcollins/FedRep there)")
    for f in ("main_fedrep.py",) + AUTHORS_FILES[1:]:
        if not (repo / f).is_file():
            p.error(f"--fedrep-repo {repo}: {repo / f} not found; pass the root of a clone of "
                    f"lgcollins/FedRep (the folder holding main_fedrep.py and models/)")
    for name, lo in (("clients", 1), ("classes", 1), ("train_per_client", 1), ("rounds", 1), ("threads", 1)):
        if getattr(a, name) < lo:
            p.error(f"--{name.replace('_', '-')} must be at least {lo}, got {getattr(a, name)}")
    if a.classes > 10:
        p.error(f"--classes must be at most 10 (CIFAR-10 has 10 classes), got {a.classes}")
    if (a.clients * a.classes) % 10:
        p.error(f"--clients * --classes = {a.clients * a.classes} must be a multiple of 10 (every class is cut "
                f"into the same number of shards)")
    if not (math.isfinite(a.participation) and 0 < a.participation <= 1):
        p.error(f"--participation must be in (0, 1], got {a.participation}")
    theirs = max(int(a.participation * a.clients), 1)
    ours = min(a.clients, max(1, round(a.participation * a.clients)))
    if theirs != ours:
        p.error(f"--participation {a.participation} with {a.clients} clients samples {theirs} clients per round "
                f"in their code (int) but {ours} in ours (round): pick r with r * clients a whole number")
    if len(set(a.seeds)) != len(a.seeds):
        p.error(f"--seeds must be distinct, got {a.seeds}")
    if len(set(a.alg)) != len(a.alg):
        p.error(f"--alg lists an algorithm twice: {a.alg}")
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is visible")
    if a.out is not None:
        if a.out.suffix not in (".json", ".md"):
            p.error(f"--out {a.out}: use a .json or .md file name")
        if not a.out.parent.is_dir():
            p.error(f"--out {a.out}: folder {a.out.parent} does not exist")


def _mean_sd(xs):
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    if not xs:
        return float("nan"), float("nan")
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else float("nan"))


def comparison_rows(record: dict) -> list[list[str]]:
    rows = []
    for alg, per_seed in record["results"].items():
        for seed, r in per_seed.items():
            a, o = r["authors"], r["ours"]
            theirs = a["mean_last_global"] if alg == "fedavg" else a["mean_last"]
            rows.append([alg, str(seed), f"{theirs:.2f}", f"{o['accuracy']:.2f}", f"{o['accuracy'] - theirs:+.2f}",
                         f"{a.get('printed_final10_global' if alg == 'fedavg' else 'printed_final10', float('nan')):.2f}",
                         f"{a.get('final_local', float('nan')):.2f}",
                         f"{a['wall_s']:.0f}", f"{o['wall_s']:.0f}"])
        if len(per_seed) > 1:
            th = _mean_sd([(r["authors"]["mean_last_global"] if alg == "fedavg" else r["authors"]["mean_last"])
                           for r in per_seed.values()])
            ou = _mean_sd([r["ours"]["accuracy"] for r in per_seed.values()])
            rows.append([alg, "mean (sd)", f"{th[0]:.2f} ({th[1]:.2f})", f"{ou[0]:.2f} ({ou[1]:.2f})",
                         f"{ou[0] - th[0]:+.2f}", "", "", "", ""])
    return rows


HEADER = ["alg", "seed", "authors (last k mean)", "ours (last k mean)", "ours - authors",
          "authors printed final-10", "authors Final Round (all clients, head 10 ep)", "authors s", "ours s"]


def format_table(rows, header=HEADER, markdown=False) -> str:
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    fmt = lambda r: "  ".join(c.rjust(w) for c, w in zip(r, widths))  # noqa: E731
    return "\n".join([fmt(header)] + [fmt(r) for r in rows])


def per_round_lines(record: dict) -> list[str]:
    out = []
    for alg, per_seed in record["results"].items():
        for seed, r in per_seed.items():
            key = "global" if alg == "fedavg" else "local"
            out.append(f"{alg} seed {seed} authors: " + " ".join(f"{v:.1f}" for v in r["authors"][key]))
            out.append(f"{alg} seed {seed} ours:    " + " ".join(f"{v:.1f}" for v in r["ours"]["per_round"]))
            if alg == "fedavg":
                out.append(f"{alg} seed {seed} authors (clients' own local models): "
                           + " ".join(f"{v:.1f}" for v in r["authors"]["local"]))
    return out


def _differences() -> str:
    doc = __doc__ or ""
    start = doc.find("Remaining differences")
    return doc[start:].split("\n", 2)[2].strip() if start >= 0 else ""


def write_record(record: dict, path: Path) -> None:
    slim = json.loads(json.dumps(record))
    for per_seed in slim["results"].values():
        for r in per_seed.values():
            r["authors"].pop("output", None)
    if path.suffix == ".json":
        path.write_text(json.dumps(slim, indent=1) + "\n")
        return
    s = slim["settings"]
    k = min(10, s["rounds"])
    lines = ["# The FedRep authors' code and ours, side by side", ""]
    if record.get("note"):
        lines += [record["note"], ""]
    lines += [f"Made by `scripts/authors_side_by_side.py` on {slim['provenance']['date']}: their `main_fedrep.py` "
              f"(lgcollins/FedRep, commit {slim['provenance']['fedrep_commit']}) run unmodified on our partition "
              f"and initial weights, and `replearn.neural.algorithms.run` on the same clients.", "",
              "Settings: " + ", ".join(f"`{n}` = {v}" for n, v in s.items()) + ".", "",
              f"Accuracies in percent. The compared numbers are the mean of the per-round test accuracy over the "
              f"last k = {k} rounds (FedAvg: their global model's line). Their printed 'final 10 rounds' "
              f"number divides the sum of the last 10 rounds by 10, so for fewer than 10 rounds it is not a mean. "
              f"'Final Round' is their extra round after the last (every client trains its head for 10 epochs), "
              f"which ours does not run.", "",
              format_table(comparison_rows(slim), markdown=True), "", "Per-round test accuracy (%):", "", "```"]
    lines += per_round_lines(slim) + ["```", "", "Workarounds in running their code: "
                                      + (", ".join(f"`{f}` compiled with `expandtabs(8)` (a tab in space indentation)"
                                                   for f in slim["provenance"]["tab_fixed"]) or "none needed")
                                      + "; stand-in modules: " + ", ".join(f"`{m}`" for m in
                                                                          slim["provenance"]["stubs"]) + ".", "",
              "Remaining differences (from the script's docstring):", "", _differences(), "",
              "Full record:", "", "```json", json.dumps(slim, indent=1), "```", ""]
    path.write_text("\n".join(lines))


def _repo_commit(repo: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip() or "unknown (not a git checkout)"
    except (OSError, subprocess.SubprocessError):
        return "unknown (git not available)"


def main(argv=None) -> dict:
    p = build_parser()
    a = p.parse_args(argv)
    check_args(p, a)
    torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    try:
        cifar = D.load_cifar("cifar10", download=False)
    except FileNotFoundError as e:
        p.error(f"CIFAR-10 not found ({e}); set REPLEARN_DATA to the folder holding cifar10_subset.npz")
    try:  # check the partition settings before any run
        partition(cifar, a.clients, a.classes, a.train_per_client, a.seeds[0])
    except ValueError as e:
        p.error(f"--clients {a.clients} --classes {a.classes} --train-per-client {a.train_per_client}: {e}")
    missing = sorted(attributes_read(a.fedrep_repo) - set(AUTHORS_DEFAULTS))
    if missing:
        p.error(f"their code reads args attributes this harness does not set: {missing} (a newer version of their "
                f"code?); add them to AUTHORS_DEFAULTS")
    settings = {"clients": a.clients, "classes_per_client": a.classes, "train_per_client": a.train_per_client,
                "rounds": a.rounds, "participation": a.participation, "seeds": a.seeds, "algs": a.alg,
                "device": a.device, "threads": a.threads,
                "clients_per_round": max(int(a.participation * a.clients), 1)}
    record = {"note": a.note, "settings": settings, "results": {alg: {} for alg in a.alg},
              "provenance": {"date": datetime.datetime.now().isoformat(timespec="seconds"),
                             "torch": torch.__version__, "numpy": np.__version__, "python": platform.python_version(),
                             "platform": platform.platform(), "fedrep_repo": str(a.fedrep_repo.resolve()),
                             "fedrep_commit": _repo_commit(a.fedrep_repo), "tab_fixed": [], "stubs": []}}
    start_all = time.perf_counter()
    for seed in a.seeds:
        train_parts, test_parts = partition(cifar, a.clients, a.classes, a.train_per_client, seed)
        sizes = [len(t) for t in train_parts]
        for alg in a.alg:
            model = make_model("fedrep_cnn", 10, seed, device=device, dtype=torch.float32, widths=FEDREP_WIDTHS["cifar10"])
            initial = {n: p_.detach().clone() for n, p_ in model.state_dict().items()}
            x_probe = AuthorsCifar(cifar.x_test[:8], cifar.y_test[:8], train=False).xn.to(device)
            with torch.no_grad():
                probe = (x_probe, torch.log_softmax(model(x_probe), dim=1))
            args = authors_args(alg, clients=a.clients, classes=a.classes, rounds=a.rounds,
                                participation=a.participation, m_tr=max(sizes), seed=seed,
                                gpu=0 if a.device == "cuda" else -1)
            print(f"[{alg} seed {seed}] their main_fedrep.py ...", file=sys.stderr, flush=True)
            theirs = run_authors(a.fedrep_repo, args, cifar, train_parts, test_parts, initial, seed,
                                 echo=a.show_their_output, probe=probe)
            print(f"[{alg} seed {seed}] ours ...", file=sys.stderr, flush=True)
            ours = run_ours(alg, cifar, train_parts, test_parts, model, our_config(a.rounds, a.participation, seed),
                            device)
            record["results"][alg][str(seed)] = {
                "authors": theirs, "ours": ours,
                "train_sizes": sizes, "test_sizes": [len(t) for t in test_parts],
                "equal_train_sizes": len(set(sizes)) == 1}
            prov = record["provenance"]
            prov["tab_fixed"] = sorted(set(prov["tab_fixed"]) | set(theirs.pop("tab_fixed")))
            prov["stubs"] = sorted(set(prov["stubs"]) | set(theirs.pop("stubs")))
    record["provenance"]["wall_s"] = time.perf_counter() - start_all
    k = min(10, a.rounds)
    print(f"\nTest accuracy (%), mean over the last {k} rounds; their code vs ours "
          f"({a.clients} clients, {a.classes} classes each, {a.train_per_client} images each, {a.rounds} rounds, "
          f"r = {a.participation}, torch {torch.__version__}, {a.device}):\n")
    print(format_table(comparison_rows(record)))
    print("\nPer-round test accuracy (%):")
    print("\n".join(per_round_lines(record)))
    fixed = record["provenance"]["tab_fixed"]
    print("\nTheir files compiled with expandtabs(8): " + (", ".join(fixed) or "none")
          + "; stand-in modules: " + ", ".join(record["provenance"]["stubs"]))
    if a.out is not None:
        write_record(record, a.out)
        print(f"record written to {a.out}")
    return record


if __name__ == "__main__":
    main()
