"""Experiment settings and their scales: a CPU-sized ``default`` and the papers' ``paper`` settings
(the library's base layer: the theory, the engine and the book's sections all configure with it).

Each experiment's settings are a frozen dataclass whose field defaults are the CPU profile (what
CI runs and what the stored notebook outputs show). Every other profile is data: a
:class:`Profile`, the changes it makes to a base profile, written as a class attribute named
after it (``PAPER``, ``LONG``, ``GPU``). Readers switch every experiment at once with the
environment variable ``REPLEARN_PROFILE=paper`` (``default`` when unset). ``long`` is a CPU run of
up to about half an hour per section, for the committed results files of ``make results`` (the
CPU default unless a class says otherwise); ``gpu`` sizes the CIFAR sections for a few minutes of
one GPU (the paper profile unless a class says otherwise)::

    @dataclass(frozen=True)
    class StallSettings(Settings):
        d: int = 30
        PAPER = Profile({"d": 100}, doc="Fig. 2's dimension")

    cfg = StallSettings.current()
    StallSettings.profile("paper")      # StallSettings(d=100)

A change names a field (``"d"``) or a field of a composed dataclass (``"train.lr"``); a subclass's
profile applies its base classes' changes first, then its own. Where the sources state a value,
:func:`sourced` builds the paper profile from the table of those values and where each is stated,
so every value is written once.
"""

from __future__ import annotations


import math
import numbers
import os
import sys
import types
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import ClassVar, Mapping

from replearn.table import Table
from replearn.checks import (check_bool, check_choice, check_count, check_int, check_nonnegative,
                             check_number, check_positive, check_seed, check_sequence)

__all__ = ["COMMON_WORDS", "Distinct", "Each", "Ge", "Gt", "Le", "Lt", "OneOf", "PROFILES", "Pair", "Profile",
           "Settings", "check_bounds", "differences", "field_bounds", "profile_name", "setting_value",
           "sourced"]

PROFILES = ("default", "long", "paper", "gpu")


def profile_name() -> str:
    """The active profile from ``REPLEARN_PROFILE`` (``default`` when unset)."""
    name = os.environ.get("REPLEARN_PROFILE", "default").strip().lower() or "default"
    if name not in PROFILES:
        raise ValueError(f"REPLEARN_PROFILE={name!r} is not a known profile; use one of {PROFILES}")
    return name


def public_name(kind: type) -> str:
    """``kind``'s dotted name through the shortest package that exports it (e.g.
    ``replearn.neural.TrainConfig`` for the engine's class re-exported by ``replearn.neural``)."""
    parts = kind.__module__.split(".")
    for k in range(1, len(parts) + 1):
        module = sys.modules.get(".".join(parts[:k]))
        if module is not None and getattr(module, kind.__qualname__, None) is kind:
            return f"{'.'.join(parts[:k])}.{kind.__qualname__}"
    return f"{kind.__module__}.{kind.__qualname__}"


def _label(name: str, why: str) -> str:
    """The field's name as a message shows it: ``tau (FedAvg's local steps)`` with a bound's ``why``."""
    return f"{name} ({why})" if why else name


@dataclass(frozen=True)
class Ge:
    """A field's lower bound, written beside it: ``T: Annotated[int, Ge(1)] = 20`` (an integer
    >= 1), ``noise: Annotated[float, Ge(0)] = 0.1`` (a finite number >= 0). ``why``: what the
    field is or why the bound holds, shown after its name in the message (``Ge(2, why="FedAvg's
    local steps; tau = 1 is D-SGD")`` fails as "tau (FedAvg's local steps; tau = 1 is D-SGD) must
    be an integer >= 2, got 1"); every bound type takes it too, but :class:`Each`, whose
    ``entry`` names its entries."""

    low: float
    why: str = ""

    def check(self, value, name: str, kinds: set[str]):
        name = _label(name, self.why)
        if kinds == {"int"}:
            return check_int(value, name, math.ceil(self.low))
        if self.low == 0:
            return check_nonnegative(value, name)
        return check_number(value, name, low=float(self.low))


@dataclass(frozen=True)
class Gt:
    """A field's strict lower bound: ``lr: Annotated[float, Gt(0)] = 0.1`` (a finite number > 0)."""

    low: float
    why: str = ""

    def check(self, value, name: str, kinds: set[str]):
        name = _label(name, self.why)
        if self.low == 0:
            return check_positive(value, name)
        return check_number(value, name, low=float(self.low), low_open=True)


@dataclass(frozen=True)
class Le:
    """A field's upper bound: ``r: Annotated[float, Gt(0), Le(1)] = 1.0`` (a fraction in (0, 1]);
    beside a lower bound (:class:`Ge`, :class:`Gt`) the two are checked together, so that the
    message states the whole range ("r must be > 0.0 and <= 1.0, got 2.0")."""

    high: float
    why: str = ""

    def check(self, value, name: str, kinds: set[str]):
        name = _label(name, self.why)
        if kinds == {"int"}:
            return check_int(value, name, None, math.floor(self.high))
        return check_number(value, name, high=float(self.high))


@dataclass(frozen=True)
class Lt:
    """A field's strict upper bound: ``delta0: Annotated[float, Ge(0), Lt(1)] = 0.5`` (in [0, 1)),
    checked with a lower bound beside it as one range (see :class:`Le`)."""

    high: float
    why: str = ""

    def check(self, value, name: str, kinds: set[str]):
        name = _label(name, self.why)
        if kinds == {"int"}:
            return check_int(value, name, None, math.ceil(self.high) - 1)
        return check_number(value, name, high=float(self.high), high_open=True)


@dataclass(frozen=True, init=False)
class OneOf:
    """A value among ``choices``: ``dataset: Annotated[str, OneOf("cifar10", "cifar100")]``,
    ``dtype: Annotated[str, OneOf(*DTYPES)]`` (the keys of a table of choices); the message lists
    the choices to use instead ("dtype must be one of ('float32', 'float64'), got 'float16'")."""

    choices: tuple
    why: str = ""

    def __init__(self, *choices, why: str = ""):
        if not choices:
            raise ValueError("OneOf needs the choices, e.g. OneOf('cifar10', 'cifar100')")
        object.__setattr__(self, "choices", choices)
        object.__setattr__(self, "why", why)

    def check(self, value, name: str, kinds: set[str]):
        return check_choice(value, _label(name, self.why), self.choices)


@dataclass(frozen=True)
class Distinct:
    """A tuple without repeats: ``taus: Annotated[tuple[int, ...], Distinct()]`` (one run per
    entry: a repeat would run and show the same entry twice); the message names the repeats."""

    why: str = ""

    def check(self, value, name: str, kinds: set[str]):
        repeated = [v for i, v in enumerate(value) if v in value[:i]]
        if repeated:
            again = ", ".join(dict.fromkeys(repr(v) for v in repeated))
            raise ValueError(f"{_label(name, self.why)} must be distinct, got {value!r} ({again} more than "
                             f"once); drop the repeats")
        return value


@dataclass(frozen=True)
class Pair:
    """A ``(low, high)`` pair with low <= high (``strict``: low < high), e.g. a range of sizes:
    ``sizes: Annotated[tuple[int, int], Pair(), Each(Ge(1))] = (10, 200)``; bounds on both ends
    are written with :class:`Each`."""

    strict: bool = False
    why: str = ""

    def check(self, value, name: str, kinds: set[str]):
        op = "<" if self.strict else "<="
        if not (isinstance(value, tuple) and len(value) == 2
                and (value[0] < value[1] if self.strict else value[0] <= value[1])):
            raise ValueError(f"{_label(name, self.why)} must be a pair (low, high) with low {op} high, "
                             f"got {value!r}")
        return value


@dataclass(frozen=True, init=False)
class Each:
    """Bounds on every entry of a tuple field: ``rates: Annotated[tuple, Each(Gt(0))]``,
    ``fractions: Annotated[tuple, Each(Gt(0), Le(1))]`` (every entry in (0, 1]),
    ``algorithms: Annotated[tuple, Each(OneOf("ANIL", "FO-ANIL"))]``. The entries of a tuple
    whose default holds ints are checked as integers, those of a tuple of numbers as real numbers
    (else each by its own type). The message names "every entry of <field>", or ``entry`` where given
    (``Each(Ge(1), entry="every m in ms (samples of the new task)")``)."""

    bounds: tuple
    entry: str = ""

    def __init__(self, *bounds, entry: str = ""):
        if not bounds:
            raise ValueError("Each needs the bounds of every entry, e.g. Each(Gt(0))")
        object.__setattr__(self, "bounds", bounds)
        object.__setattr__(self, "entry", entry)

    def check(self, value, name: str, kinds: set[str]):
        entries = kinds - {"tuple"}   # {"tuple", "int"}: a tuple of ints (see Settings.validate)
        def one(v, n):
            own = _value_kinds(v)
            check_bounds(v, n, entries if entries and own <= {"int", "float"} else own, self.bounds)
            return v
        return check_sequence(value, name, one, each_name=self.entry or None)


def check_bounds(value, name: str, kinds: set[str], bounds) -> None:
    """``value`` of the field ``name`` (of the simple types ``kinds``: ``{"int"}``, ``{"float"}``,
    ...) checked against ``bounds`` in order; a field's one lower bound (:class:`Ge`, :class:`Gt`)
    and one upper bound (:class:`Le`, :class:`Lt`) are checked together, so that the message
    states the whole range ("delta0 (a distance) must be >= 0.0 and < 1.0, got 1.0")."""
    bounds = tuple(bounds)
    lower = [b for b in bounds if isinstance(b, (Ge, Gt))]
    upper = [b for b in bounds if isinstance(b, (Le, Lt))]
    ranged, done = len(lower) == 1 and len(upper) == 1, False
    for bound in bounds:
        if ranged and (bound is lower[0] or bound is upper[0]):
            if not done:
                _check_range(value, name, kinds, lower[0], upper[0])
                done = True
        else:
            bound.check(value, name, kinds)


def _check_range(value, name: str, kinds: set[str], lower: Ge | Gt, upper: Le | Lt):
    """A lower and an upper bound as one range (see :func:`check_bounds`); their ``why`` texts joined."""
    name = _label(name, "; ".join(dict.fromkeys(b.why for b in (lower, upper) if b.why)))
    low_open, high_open = isinstance(lower, Gt), isinstance(upper, Lt)
    if kinds == {"int"}:
        low = math.floor(lower.low) + 1 if low_open else math.ceil(lower.low)
        high = math.ceil(upper.high) - 1 if high_open else math.floor(upper.high)
        return check_int(value, name, low, high)
    return check_number(value, name, low=float(lower.low), high=float(upper.high), low_open=low_open,
                        high_open=high_open)


def _entry_kinds(default: tuple) -> set[str]:
    """The kind of the entries of a tuple field, from its default: ``{"int"}`` (all ints),
    ``{"float"}`` (numbers, not all ints), else an empty set (each entry by its own type)."""
    kinds = [_value_kinds(v) for v in default]
    if kinds and all(k == {"int"} for k in kinds):
        return {"int"}
    return {"float"} if kinds and all(k <= {"int", "float"} for k in kinds) else set()


def _value_kinds(value) -> set[str]:
    """The simple type of one value, as :func:`_annotated_kinds` names types (an entry of a tuple)."""
    if isinstance(value, bool):
        return {"bool"}
    if isinstance(value, numbers.Integral):
        return {"int"}
    if isinstance(value, numbers.Real):
        return {"float"}
    return {"str"} if isinstance(value, str) else set()


@dataclass(frozen=True)
class Profile:
    """A profile as data: the settings of profile ``base`` with ``changes`` applied. A change maps
    a field (``"d"``) or a field of a composed dataclass (``"train.lr"``) to its value; whole
    fields are set before dotted ones, so ``{"train": cfg, "train.lr": 0.01}`` is ``cfg`` with
    ``lr = 0.01``. ``base``: another profile's name (None: ``"paper"`` for the ``gpu`` profile,
    ``"default"`` for the others); ``doc``: what the profile is and where its values come from."""

    changes: Mapping[str, object] = field(default_factory=dict)
    base: str | None = None
    doc: str = ""

    def __post_init__(self):
        if not isinstance(self.changes, Mapping) or not all(isinstance(k, str) and k for k in self.changes):
            raise ValueError(f"Profile changes must map field names ('d', 'train.lr') to values, got {self.changes!r}")
        if self.base is not None and self.base not in PROFILES:
            raise ValueError(f"Profile base must be one of {PROFILES}, got {self.base!r}")


#: the base of a profile whose :class:`Profile` names none
USUAL_BASE = {"long": "default", "paper": "default", "gpu": "paper"}


def sourced(stated: Mapping[str, tuple], code: Mapping[str, tuple] | None = None, *,
            ours: Mapping[str, object] | None = None, departures: Mapping[str, str] | None = None,
            doc: str = "") -> Profile:
    """The paper profile as the table of the sources' values: ``ours`` (the values no source
    states: widths, dtype, scale), then every value the authors' code sets (``code[field] =
    (value, file)``; a ``str`` with a space describes rather than states and is skipped), then
    every value the paper's text states (``stated[field] = (value, where)``), except the fields of
    ``departures`` (``{field: reason}``: where the profile departs from the sources on purpose,
    its value then given in ``ours``). A field of ``ours`` that a source states and that is not a
    departure is a ValueError: each value is written once. The same tables feed Appendix B
    (:func:`replearn.book.scales.settings_table`)."""
    ours, departures, code = dict(ours or {}), dict(departures or {}), dict(code or {})
    twice = sorted((set(ours) & (set(stated) | set(code))) - set(departures))
    if twice:
        raise ValueError(f"sourced: {twice} are stated by a source and again in ours; drop them from ours, "
                         f"or name them in departures with the reason")
    missing = sorted(set(departures) - set(ours))
    if missing:
        raise ValueError(f"sourced: the departures {missing} need their value in ours")
    changes = {}
    for table in code, stated:
        changes.update({name: value for name, (value, _) in table.items()
                        if not (isinstance(value, str) and " " in value) and name not in departures})
    return Profile({**ours, **changes}, doc=doc)


def apply_changes(settings, changes: Mapping[str, object]):
    """``settings`` (a dataclass) with ``changes`` (field or dotted field -> value) applied in one
    ``replace`` per dataclass, whole fields before dotted ones; an unknown name is a ValueError."""
    names = {f.name for f in fields(settings)}
    top = {k: v for k, v in changes.items() if "." not in k}
    nested: dict[str, dict] = {}
    for key, value in changes.items():
        if "." in key:
            head, rest = key.split(".", 1)
            nested.setdefault(head, {})[rest] = value
    unknown = sorted((set(top) | set(nested)) - names)
    if unknown:
        raise ValueError(f"{type(settings).__name__} has no settings {unknown}; a profile names fields "
                         f"(composed ones as 'train.lr')")
    for head, sub in nested.items():
        inner = top.get(head, getattr(settings, head))
        if not is_dataclass(inner):
            raise ValueError(f"{type(settings).__name__}.{head} is not a composed dataclass; cannot set {sorted(sub)}")
        top[head] = apply_changes(inner, sub)
    return replace(settings, **top)


def field_bounds(cls) -> dict[str, list]:
    """The bounds written beside the fields of the settings class ``cls`` (``Annotated[kind,
    bound, ...]``), by field, from every class of its MRO that annotates the field: a subclass
    that redeclares a field (a new default) keeps its base's bounds. The bounds: :class:`Ge`,
    :class:`Gt` (lower), :class:`Le`, :class:`Lt` (upper; a lower and an upper bound make one
    range), :class:`OneOf` (a value among choices), :class:`Distinct` (a tuple without repeats),
    :class:`Pair` (a ``(low, high)`` pair in order) and :class:`Each` (bounds on every entry of
    a tuple, named ``entry=`` in its messages); the others take ``why=``, words that their message
    shows after the field's name."""
    found: dict[str, list] = {}
    for klass in reversed(cls.__mro__):
        for name, annotation in vars(klass).get("__annotations__", {}).items():
            if isinstance(annotation, str) and annotation.startswith("Annotated["):
                annotation = eval(annotation, vars(sys.modules[klass.__module__]))  # noqa: S307 (the class's own source)
            for bound in getattr(annotation, "__metadata__", ()):
                if bound not in found.setdefault(name, []):
                    found[name].append(bound)
    return found


@dataclass(frozen=True)
class Settings:
    """Base class of experiment settings: field defaults are the CPU profile.

    Construction validates (``__post_init__`` calls :meth:`validate`), so a bad setting fails
    where it is written, not rounds later inside an experiment. The base :meth:`validate`
    checks every field that is not None against its annotation (``int``: an integer >= 0,
    bools rejected, at most :data:`replearn.checks.MAX_COUNT` (a seed field, ``seed`` or
    ``..._seed``: a seed a torch generator accepts, :func:`replearn.checks.check_seed`; an int
    ``seeds``, a number of seeds, is a count); ``float``: a finite real number;
    ``bool``; ``str``; ``tuple``: a non-empty tuple, a list is converted, whose entries have the
    types of the default's entries, integer entries at most ``MAX_COUNT`` except seeds; a field
    whose default is a dataclass, such as a composed ``neural.TrainConfig``: an instance of
    that class, which validated itself when it was built).
    A field's own range is written beside it and checked here after its type (every bound of
    a field from its annotation, :func:`field_bounds`)::

        T: Annotated[int, Ge(1)] = 20                                     # an integer >= 1
        lr: Annotated[float, Gt(0)] = 0.1                                 # a number > 0
        r: Annotated[float, Gt(0, why="participation rate"), Le(1)] = 1.0  # in (0, 1]
        dtype: Annotated[str, OneOf("float32", "float64")] = "float64"
        taus: Annotated[tuple[int, ...], Distinct(), Each(Ge(1))] = (1, 5, 20)
        sizes: Annotated[tuple[int, int], Pair(), Each(Ge(1))] = (10, 200)  # 1 <= low <= high

    (:class:`Ge`, :class:`Gt`, :class:`Le`, :class:`Lt`, :class:`OneOf`, :class:`Distinct`,
    :class:`Pair`, :class:`Each`; ``why=`` words shown after the field's name in the message,
    "tau (FedAvg's local steps; tau = 1 is D-SGD) must be an integer >= 2, got 1"). Subclasses
    extend :meth:`validate` only with relations between fields, such as ``k < d`` (calling
    ``super().validate()``); a check of one field against constants is a bound beside it.

    A notebook shows its settings with ``display(cfg.table())``: a two-column table of what each
    setting is, in words, and its value, rounded (:meth:`table`); ``print(cfg)`` prints the same
    table as text. The words come from the class attribute ``WORDS`` (field name -> words; a
    field that holds a dataclass is described field by field under ``"field.sub"``), merged over
    the base classes, then from :data:`COMMON_WORDS`.
    """

    #: words for the fields in :meth:`table`, e.g. ``{"d": "dimension d"}`` (see the class docstring)
    WORDS: ClassVar[dict[str, str]] = {}
    #: the profiles as data (see the module docstring): none changes anything unless a class says so
    PAPER: ClassVar[Profile] = Profile()
    LONG: ClassVar[Profile] = Profile()
    GPU: ClassVar[Profile] = Profile()

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Type checks of every field from its annotation and default, then the bounds written
        beside it (see the class docstring)."""
        bounds = field_bounds(type(self))
        for f in fields(self):
            value = getattr(self, f.name)
            if is_dataclass(f.default) and not isinstance(value, type(f.default)):
                kind = type(f.default)
                raise ValueError(f"{f.name} must be a {public_name(kind)}, got {value!r}")
            if value is None:
                continue  # None stands for "not set" / "use all" where a subclass allows it
            kinds = _annotated_kinds(f.type)
            if kinds == {"bool"}:
                check_bool(value, f.name)
            elif kinds == {"int"}:
                (check_seed if f.name == "seed" or f.name.endswith("_seed") else check_count)(value, f.name)
            elif kinds <= {"int", "float"} and "float" in kinds:
                check_number(value, f.name)
            elif kinds == {"str"}:
                if not isinstance(value, str):
                    raise ValueError(f"{f.name} must be a string, got {value!r}")
            elif kinds == {"tuple"} and isinstance(f.default, tuple) and f.default:
                object.__setattr__(self, f.name, _check_tuple(value, f.name, f.default))
                if "seed" in f.name:
                    for k in getattr(self, f.name):
                        check_seed(k, f"every entry of {f.name}")
            if kinds == {"tuple"} and isinstance(f.default, tuple):
                kinds = kinds | _entry_kinds(f.default)   # for Each: how to check the entries
            check_bounds(getattr(self, f.name), f.name, kinds, bounds.get(f.name, ()))


    def words(self, name: str) -> str:
        """The words :meth:`table` shows for the field (or ``"field.sub"``) ``name``: this class's
        ``WORDS`` (or a base class's), else :data:`COMMON_WORDS`, else the name with spaces."""
        for kind in type(self).__mro__:
            words = vars(kind).get("WORDS", {})
            if name in words:
                return words[name]
        return COMMON_WORDS.get(name.rsplit(".", 1)[-1], name.rsplit(".", 1)[-1].replace("_", " "))

    def rows(self) -> list[list[str]]:
        """``[words, value]`` for every field, in declaration order; a field that holds a
        dataclass gives one row per field of it (:func:`setting_value` formats the values)."""
        out = []
        for f in fields(self):
            value = getattr(self, f.name)
            if is_dataclass(value) and not isinstance(value, type):
                label = self.words(f.name)
                out += [[f"{label}: {self.words(f'{f.name}.{g.name}')}", setting_value(getattr(value, g.name))]
                        for g in fields(value)]
            else:
                out.append([self.words(f.name), setting_value(value)])
        return out

    def table(self, what: str = "this run"):
        """The settings as a short table in words (:class:`replearn.table.Table`: setting |
        value) captioned "settings of ``what`` (the active profile)"; for ``display(cfg.table())``
        in a notebook."""
        if not isinstance(what, str) or not what.strip():
            raise ValueError(f"table: what must say whose settings these are (e.g. 'this run'), got {what!r}")
        return Table(["setting", "value"], self.rows(), caption=f"settings of {what} ({PROFILE_WORDS[profile_name()]})",
                     align="ll")

    def __str__(self) -> str:
        """The settings as ``print`` shows them: :meth:`table` as aligned text (words and rounded
        values, not the dataclass's ``repr``)."""
        return repr(self.table())

    @classmethod
    def profile(cls, name: str):
        """The settings of profile ``name`` (one of :data:`PROFILES`): the CPU default for
        ``"default"``; otherwise the base profile with the changes of every class of the MRO that
        writes this profile (``PAPER``, ``LONG``, ``GPU``), base classes first."""
        if name not in PROFILES:
            raise ValueError(f"unknown profile {name!r}; use one of {PROFILES}")
        return _build(cls, name, ())

    @classmethod
    def current(cls, **overrides):
        """Settings of the active profile, with optional field overrides."""
        return replace(cls.profile(profile_name()), **overrides)


def _build(cls, name: str, seen: tuple):
    """Profile ``name`` of ``cls`` (see :meth:`Settings.profile`); ``seen``: the profiles whose
    base is being built, to refuse a cycle."""
    if name == "default":
        return cls()
    if name in seen:
        raise ValueError(f"{cls.__name__}: the profiles {seen + (name,)} are each other's base")
    written = [vars(k)[name.upper()] for k in reversed(cls.__mro__) if name.upper() in vars(k)]
    for p in written:
        if not isinstance(p, Profile):
            raise ValueError(f"{cls.__name__}.{name.upper()} must be a Profile, got {p!r}")
    base = next((p.base for p in reversed(written) if p.base is not None), USUAL_BASE[name])
    changes = {}
    for p in written:
        changes.update(p.changes)
    return apply_changes(_build(cls, base, seen + (name,)), changes)


#: how the caption of :meth:`Settings.table` names each profile
PROFILE_WORDS = {"default": "the CPU default profile", "long": "the long CPU profile",
                 "paper": "the paper profile", "gpu": "the GPU profile"}

#: words for field names that mean the same in every section (a class's ``WORDS`` overrides them)
COMMON_WORDS = {
    "d": "dimension d",
    "k": "representation size k",
    "seed": "random seed",
    "seeds": "seeds",
    "noise_std": "label noise standard deviation",
    "trials": "Monte-Carlo trials",
    "batch": "trials solved in one batched call",
    "iterations": "iterations",
    "rounds": "rounds",
    "runs": "independent runs",
    "dtype": "floating-point type",
}


#: digits and the minus sign as superscripts, for powers of ten
SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def setting_value(value) -> str:
    """A setting's value as the settings table shows it: a real number with 3 significant digits
    (powers of ten written out, ``0.0316`` not ``0.03162277660168379``), integers exactly, a
    bool as "yes" / "no", None as "—", a string as it is, a tuple or list as its entries
    separated by commas (a tuple of tuples: by semicolons; an empty one: "none"), a dict as
    "key: value" separated by semicolons, a dataclass (e.g. a method's options) as "field value"
    pairs, a torch dtype by its name."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        x = float(value)
        if x == 0 or not math.isfinite(x):
            return "0" if x == 0 else str(x)
        text = f"{x:.3g}"
        if abs(x) < 1e-6:   # 1e-12 -> "10⁻¹²", 2.5e-09 -> "2.5 × 10⁻⁹": a run of zeros is unreadable
            mantissa, exponent = text.split("e")
            power = "10" + exponent.replace("+", "").replace("-0", "-").translate(SUPERSCRIPT)
            return power if mantissa == "1" else f"{mantissa} × {power}"
        if "e" in text:   # 1e-05 -> 0.00001, 1.5e+06 -> 1500000: no exponent notation on the page
            digits = 2 - math.floor(math.log10(abs(x)))
            text = f"{round(x, digits):.{max(digits, 0)}f}"
            text = text.rstrip("0").rstrip(".") if "." in text else text
        return text
    if isinstance(value, str):
        return value
    if isinstance(value, (tuple, list)):
        return "; ".join(setting_value(v) for v in value) if value and all(
            isinstance(v, (tuple, list)) for v in value) else ", ".join(setting_value(v) for v in value) or "none"
    if isinstance(value, dict):   # e.g. per-method options: "FedProx: mu 0.1; Ditto: lam 1"
        return "; ".join(f"{k}: {setting_value(v)}" for k, v in value.items()) or "none"
    if is_dataclass(value) and not isinstance(value, type):
        return ", ".join(f"{f.name.replace('_', ' ')} {setting_value(getattr(value, f.name))}" for f in fields(value))
    if type(value).__module__ == "torch" and type(value).__name__ == "dtype":
        return str(value).removeprefix("torch.")
    raise ValueError(f"setting_value: no words for a {type(value).__name__} ({value!r}); "
                     "give the settings field a number, string, bool, tuple or dataclass")


def _annotation_text(annotation) -> str:
    """An evaluated annotation (a class without ``from __future__ import annotations``) as the text
    it would be written as, enough for :func:`_annotated_kinds`: ``int | None``, ``tuple``."""
    if hasattr(annotation, "__metadata__"):  # Annotated[kind, ...]: the kind
        return _annotation_text(annotation.__origin__)
    args = getattr(annotation, "__args__", None)
    if isinstance(annotation, types.UnionType) and args:
        return " | ".join(_annotation_text(a) for a in args)
    if annotation is type(None):
        return "None"
    origin = getattr(annotation, "__origin__", None)
    return getattr(origin or annotation, "__name__", "")


def _annotated_kinds(annotation) -> set[str]:
    """The simple types a field annotation allows, e.g. ``"float | None"`` -> {"float"},
    ``"tuple[int, ...]"`` -> {"tuple"}; an empty set for anything else (then unchecked)."""
    text = annotation if isinstance(annotation, str) else _annotation_text(annotation)
    if text.startswith("Annotated["):  # the kind is its first argument: "Annotated[int | None, Ge(1)]"
        depth, end = 0, len(text) - 1
        for i, ch in enumerate(text[len("Annotated["):], start=len("Annotated[")):
            depth += ch == "["
            depth -= ch == "]"
            if ch == "," and depth == 0:
                end = i
                break
        text = text[len("Annotated["):end]
    kinds = {part.strip().split("[")[0] for part in text.split("|")} - {"None"}
    return kinds if kinds <= {"bool", "int", "float", "str", "tuple"} else set()


def _check_tuple(value, name: str, default: tuple) -> tuple:
    """A non-empty tuple whose entries have the types of ``default``'s entries (ints stay ints)."""
    kinds, label = {type(v) for v in default}, f"{name} (a tuple)"
    if kinds <= {int}:
        return check_sequence(value, label, lambda v, n: check_int(v, n, None) if "seed" in name
                              else check_count(v, n, None))
    if kinds <= {int, float}:
        return check_sequence(value, label, lambda v, n: v if isinstance(v, int) and not isinstance(v, bool)
                              else check_number(v, n))
    return check_sequence(value, label, lambda v, n: v)


def differences(cls: type[Settings]) -> list[tuple[str, object, object]]:
    """``(field, default value, paper value)`` for every field of the settings class ``cls``
    whose paper-profile value differs from its CPU default, in declaration order; a field that
    holds a dataclass (e.g. a ``neural.TrainConfig``) is compared field by field, named
    ``"train.lr"`` and so on."""
    if not (isinstance(cls, type) and issubclass(cls, Settings)):
        raise ValueError(f"expected a Settings subclass, got {cls!r}")
    return _differences(cls(), cls.profile("paper"), "")


def _differences(default, paper, prefix: str) -> list[tuple[str, object, object]]:
    out = []
    for f in fields(default):
        a, b = getattr(default, f.name), getattr(paper, f.name)
        if is_dataclass(a) and type(a) is type(b):
            out += _differences(a, b, f"{prefix}{f.name}.")
        elif a != b:
            out.append((prefix + f.name, a, b))
    return out
