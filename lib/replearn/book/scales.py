"""What the CIFAR sections' larger profiles need and cost: the data a profile requires
(:func:`require_data`), the number of operator launches a run makes (:func:`launch_estimate`)
and the settings table of Appendix B (:func:`settings_table`).

A profile that reproduces a paper's setting trains on the full official dataset (the papers'
50,000 CIFAR training images); on the offline subsets (20,000 CIFAR-10 / 25,000 CIFAR-100
images) it would silently train every client on 40-50% of the paper's images. Settings with
``full_data = True`` therefore stop before anything is trained when the data are a subset
(:func:`require_data`), and every request for more images than the data hold (a probe set, a
test set spread over the clients, new clients' training samples) is refused by name.
"""

from __future__ import annotations

import math
from dataclasses import fields, is_dataclass

from torch.utils._python_dispatch import TorchDispatchMode

from replearn.settings import setting_value
from replearn.checks import check_int
from replearn.table import Table

__all__ = ["OperatorCount", "TRAIN_IMAGES", "batching", "combine", "federated_steps", "launch_estimate", "require_data", "require_images", "settings_table"]


def require_data(cifar, full_data: bool, what: str) -> None:
    """Raise ``ValueError`` when ``full_data`` is set and ``cifar`` is not the full official
    dataset (``cifar.source != "full"``); ``what`` names the settings asking for it."""
    if full_data and cifar.source != "full":
        raise ValueError(
            f"{what} trains on the full official {cifar.name} dataset (full_data = True: the paper's setting), "
            f"but the data loaded are {cifar.describe()}; download the full dataset (load_cifar(..., "
            f"download=True), or REPLEARN_DOWNLOAD=1) or use a profile made for the subset (long or default)")


def require_images(needed: int, available: int, what: str, fix: str) -> None:
    """Raise ``ValueError`` when a run needs ``needed`` images and the data hold ``available``:
    a profile never trains or evaluates on fewer images than it asks for."""
    check_int(needed, "needed images", 0)
    if needed > available:
        raise ValueError(f"{what} needs {needed:,} images but the data hold {available:,}; {fix}")


# --------------------------------------------------------------------------- launch estimates


#: Operators that only make a new view or alias of a tensor: no kernel runs for them.
METADATA_OPS = frozenset({"aten.detach", "aten.t", "aten.view", "aten._unsafe_view", "aten.alias", "aten.expand",
                          "aten.permute", "aten.transpose", "aten.as_strided", "aten.reshape", "aten.unsqueeze",
                          "aten.squeeze", "aten.select", "aten.slice", "aten.split", "aten.split_with_sizes",
                          "aten.unbind", "aten.lift_fresh"})
#: Operators whose result the host must wait for (a device-to-host copy of a value).
SYNC_OPS = frozenset({"aten._local_scalar_dense", "aten.item", "aten.nonzero", "aten.equal", "aten.is_nonzero"})


class OperatorCount(TorchDispatchMode):
    """Counts the operators torch dispatches inside ``with OperatorCount() as c:``:
    ``c.launches`` (operators that run a kernel: all but :data:`METADATA_OPS`), ``c.syncs``
    (operators in :data:`SYNC_OPS`, each a host sync on a GPU) and ``c.by_name``."""

    def __init__(self):
        super().__init__()
        self.by_name: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        self.by_name[name] = self.by_name.get(name, 0) + 1
        return func(*args, **(kwargs or {}))

    @property
    def launches(self) -> int:
        return sum(n for name, n in self.by_name.items() if name not in METADATA_OPS)

    @property
    def syncs(self) -> int:
        return sum(n for name, n in self.by_name.items() if name in SYNC_OPS)


#: Kernel launches of one local SGD step of one client on the paper's CNN (FedAvg-FT paper:
#: six convolutions, three linear layers) at batch 10 with momentum: forward, backward and the
#: foreach update, counted with :class:`OperatorCount` on :class:`replearn.neural.LocalSGD`
#: (``tests/test_paper_profiles.py`` re-counts it); evaluating a batch costs about a third.
LAUNCHES_PER_STEP = 60
LAUNCHES_PER_EVAL_BATCH = 20
#: Seconds per launch on one H100 with one client per launch sequence (launch-bound: about
#: 10 microseconds per kernel from Python, including the dispatcher).
SECONDS_PER_LAUNCH = 10e-6


def launch_estimate(steps: int, eval_batches: int, *, batched_clients: int = 1) -> dict:
    """Operator launches and the launch-bound seconds of a run that makes ``steps`` client SGD
    steps and evaluates ``eval_batches`` batches, when ``batched_clients`` clients' steps are
    fused into one batched launch sequence (the batched engine; 1: one client at a time).
    A rough model (:data:`LAUNCHES_PER_STEP`, :data:`SECONDS_PER_LAUNCH`), printed before a
    GPU run starts so that a run that cannot fit its budget is not started."""
    check_int(steps, "steps", 0)
    check_int(eval_batches, "eval_batches", 0)
    check_int(batched_clients, "batched_clients", 1)
    launches = math.ceil(steps / batched_clients) * LAUNCHES_PER_STEP + eval_batches * LAUNCHES_PER_EVAL_BATCH
    return {"steps": steps, "eval_batches": eval_batches, "batched_clients": batched_clients,
            "launches": launches, "seconds": launches * SECONDS_PER_LAUNCH}


#: Training images of the full datasets and of the offline subsets (``../shared/data``).
TRAIN_IMAGES = {("cifar10", True): 50_000, ("cifar100", True): 50_000,
                ("cifar10", False): 20_000, ("cifar100", False): 25_000}


def federated_steps(dataset: str, full_data: bool, clients: int, train_per_client: int | None, cfg,
                    epochs_per_round: float, *, classes_used: float = 1.0) -> tuple[int, int]:
    """Client SGD steps of a federated run on CIFAR and its participating clients per round:
    ``cfg.rounds`` rounds of ``m = max(1, round(r n))`` clients, each making
    ``epochs_per_round`` epochs over its ``train_per_client`` images (``None``: its share of the
    dataset's ``classes_used`` fraction of training images) in batches of ``cfg.batch_size``."""
    n_i = train_per_client or TRAIN_IMAGES[(dataset, full_data)] * classes_used / clients
    m = max(1, round(cfg.participation * clients))
    return int(cfg.rounds * m * epochs_per_round * math.ceil(n_i / cfg.batch_size)), m


def combine(*estimates: dict) -> dict:
    """The sum of several :func:`launch_estimate` results (parts of one run batched differently);
    ``batched_clients`` is the largest of them."""
    keys = ("steps", "eval_batches", "launches", "seconds")
    out = {k: sum(e[k] for e in estimates) for k in keys}
    out["batched_clients"] = max(e["batched_clients"] for e in estimates)
    return out


def batching(cfg, participating: int, batched: bool) -> int:
    """Clients per batched launch sequence of a run with ``cfg``: ``cfg.vmap_clients`` (at most
    the round's ``participating`` clients) when ``batched``, else 1 (one client at a time)."""
    return max(1, min(cfg.vmap_clients, participating)) if batched else 1


# --------------------------------------------------------------------------- Appendix B's table


def _flat(s, prefix: str = "") -> dict:
    """The settings' fields as ``{"train.lr": 0.01, ...}`` (composed dataclasses flattened)."""
    out = {}
    for f in fields(s):
        v = getattr(s, f.name)
        if is_dataclass(v):
            out.update(_flat(v, f"{prefix}{f.name}."))
        else:
            out[prefix + f.name] = v
    return out


#: The authors'-code column of a section whose paper has no public code.
NO_PUBLIC_CODE = "no public code"


def settings_table(cls, paper_values: dict, *, code_values: dict | None = None, departures: dict | None = None,
                   profiles=("paper", "long", "default"), skip=("seed",)) -> list[dict]:
    """One row per setting of the settings class ``cls``: the value the paper's text states
    (``stated``) and where (``source``; ``paper_values[field] = (value, source)``, a source like
    "FedRep paper, Sec. 5.2"; fields it does not state are ``"not stated"``), what the authors'
    code does (``code`` and ``code_source``: ``code_values[field] = (value, repository path)``;
    ``"not in the code"`` for a field it does not set, :data:`NO_PUBLIC_CODE` for every field when
    ``code_values`` is None), beside the value of every profile in ``profiles`` (columns
    ``"paper()"``, ``"long()"``, ``"default()"``), whether the paper profile differs from the paper's
    value (``deviation``) and from the code's (``code_deviation``; a code value given as a
    sentence, a ``str`` with a space, describes and is not compared); ``departure``: why the paper profile
    departs from the paper on purpose (``departures[field]``, e.g. an analogue on another dataset;
    "" otherwise). Rows are the fields that
    differ between profiles or that the paper or the code state, in declaration order; ``skip``
    fields are left out. The table Appendix B renders is built from this, so it cannot drift
    from the code."""
    values = {p: _flat(cls.profile(p)) for p in profiles}
    for what, given in (("paper_values", paper_values), ("code_values", code_values or {}),
                        ("departures", departures or {})):
        unknown = sorted(set(given) - set(values[profiles[0]]))
        if unknown:
            raise ValueError(f"{cls.__name__} has no settings {unknown}; {what} must name its fields "
                             f"(composed ones as 'train.lr')")
    rows = []
    for name in values[profiles[0]]:
        if name in skip:
            continue
        vals = {p: values[p][name] for p in profiles}
        stated = name in paper_values
        in_code = code_values is not None and name in code_values
        if not stated and not in_code and len({repr(v) for v in vals.values()}) == 1:
            continue
        paper_value, source = paper_values.get(name, (None, "not stated"))
        if code_values is None:
            code_value, code_source = None, NO_PUBLIC_CODE
        else:
            code_value, code_source = code_values.get(name, (None, "not in the code"))
        row = {"setting": name, "stated": paper_value if stated else "—", "source": source,
               "code": code_value if in_code else "—", "code_source": code_source,
               **{f"{p}()": v for p, v in vals.items()}}
        row["deviation"] = stated and "paper" in vals and _differs(vals["paper"], paper_value)
        comparable = in_code and not (isinstance(code_value, str) and " " in code_value)  # not a sentence
        row["code_deviation"] = comparable and "paper" in vals and _differs(vals["paper"], code_value)
        row["departure"] = (departures or {}).get(name, "")
        rows.append(row)
    return rows


def _differs(ours, theirs) -> bool:
    if isinstance(ours, (int, float)) and isinstance(theirs, (int, float)) and not isinstance(ours, bool):
        return not math.isclose(ours, theirs, rel_tol=1e-12)
    if isinstance(ours, (tuple, list)) and isinstance(theirs, (tuple, list)):
        return tuple(ours) != tuple(theirs)
    return ours != theirs




def show_value(v) -> str:
    """A settings value as the comparison tables show it: None (a count or choice left to its
    default: the whole dataset, the authors' widths, epochs instead of steps) as "unset", a tuple
    of partitions as ``cifar10 (100, 2)``-style items, a tuple of more than eight entries by its
    length, anything else in words by :func:`replearn.settings.setting_value`."""
    if v is None:
        return "unset"
    if isinstance(v, (tuple, list)):
        if v and all(isinstance(p, (tuple, list)) and len(p) == 3 and isinstance(p[0], str) for p in v):
            return "; ".join(f"{p[0]} ({p[1]:,}, {p[2]})" for p in v)
        if len(v) > 8:
            return f"{len(v)} entries"
    return setting_value(v)


def settings_display(cls, paper_values: dict, caption: str, *, code_values: dict | None = None,
                     departures: dict | None = None):
    """:func:`settings_table` as one :class:`replearn.table.Table`: what the paper's text
    states, what the authors' code does, the paper profile, the long profile, the CPU default, and last,
    where each source states it (the longest text, so that the values stand side by side); a
    paper-profile value that deviates from the paper's text or the authors' code is marked "≠", a
    setting the code does not set shows "—"; a departure on purpose (``departures``) says why in the
    last column."""
    rows = []
    for r in settings_table(cls, paper_values, code_values=code_values, departures=departures):
        where = [f"paper: {r['source']}" if r["source"] != "not stated" else "",
                 f"code: {r['code_source']}" if r["code"] != "—" else "",
                 f"ours: {r['departure']}" if r["departure"] else ""]
        rows.append([r["setting"], show_value(r["stated"]) if r["source"] != "not stated" else "not stated",
                     show_value(r["code"]) if r["code"] != "—" else (
                         "—" if r["code_source"] == "not in the code" else r["code_source"]),
                     ("≠ " if r["deviation"] or r["code_deviation"] else "") + show_value(r["paper()"]),
                     show_value(r["long()"]), show_value(r["default()"]), "; ".join(w for w in where if w) or "—"])
    return Table(["setting", "paper", "authors' code", "paper profile", "long profile", "CPU default", "where stated"], rows,
                 caption=caption, align="lllllll")
