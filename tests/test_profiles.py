import json
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from replearn.settings import PROFILES, Profile, Settings, profile_name, sourced


@dataclass(frozen=True)
class Demo(Settings):
    d: int = 10
    T: int = 5
    PAPER = Profile({"d": 100, "T": 500})


def test_profile_switch(monkeypatch):
    monkeypatch.delenv("REPLEARN_PROFILE", raising=False)
    assert profile_name() == "default" and Demo.current() == Demo()
    monkeypatch.setenv("REPLEARN_PROFILE", "paper")
    assert Demo.current() == Demo(d=100, T=500)
    assert Demo.current(T=7) == Demo(d=100, T=7)
    monkeypatch.setenv("REPLEARN_PROFILE", "long")
    assert Demo.current() == Demo()          # no long() of its own: the CPU default
    assert Demo.profile("paper") == Demo(d=100, T=500)
    with pytest.raises(ValueError, match="unknown profile"):
        Demo.profile("huge")
    monkeypatch.setenv("REPLEARN_PROFILE", "huge")
    with pytest.raises(ValueError, match="REPLEARN_PROFILE='huge'"):
        Demo.current()


def test_differences_lists_the_fields_the_paper_profile_changes():
    from replearn.settings import differences

    assert differences(Demo) == [("d", 10, 100), ("T", 5, 500)]
    with pytest.raises(ValueError, match="Settings subclass"):
        differences(int)


def test_differences_look_inside_composed_configs():
    from replearn.neural import TrainConfig
    from replearn.settings import differences

    @dataclass(frozen=True)
    class WithConfig(Settings):
        n: int = 3
        train: TrainConfig = TrainConfig(lr=0.05, rounds=20)

        PAPER = Profile({"train": TrainConfig(lr=0.01, rounds=20, batch_size=50)})

    assert differences(WithConfig) == [("train.lr", 0.05, 0.01), ("train.batch_size", 10, 50)]


def test_every_experiment_has_a_distinct_paper_profile():
    from replearn.experiments import settings_classes
    from replearn.settings import differences

    classes = settings_classes()
    assert "ch04_fedavg.s04_convergence.ConvergenceSettings" in classes and len(classes) >= 30
    for name, cls in classes.items():
        assert differences(cls), f"{name}: the paper profile equals the CPU default"


def test_settings_show_as_a_table_in_words(monkeypatch):
    # issue 44: settings are shown as a short table of words and rounded values, not a dataclass dump
    from replearn.settings import setting_value

    @dataclass(frozen=True)
    class Worded(Settings):
        WORDS = {"noise_std": "label noise σ", "inner.d": "inner dimension"}
        noise_std: float = 0.03162277660168379
        ms: tuple = (10, 20)
        full: bool = False
        seed: int = 0
        inner: Demo = Demo()

    monkeypatch.delenv("REPLEARN_PROFILE", raising=False)
    table = Worded().table()
    assert table.header == ["setting", "value"] and "CPU default" in table.caption
    assert table.rows == [["label noise σ", "0.0316"], ["ms", "10, 20"], ["full", "no"], ["random seed", "0"],
                          ["inner: inner dimension", "10"], ["inner: T", "5"]]
    assert str(Worded()) == repr(table) and "Worded(" not in str(Worded())
    assert Worded().table("the sweep").caption == "settings of the sweep (the CPU default profile)"
    with pytest.raises(ValueError, match="whose settings"):
        Worded().table("")
    assert [setting_value(v) for v in (1e-5, 2.5e6, None, True, "ANIL", 3, -0.25)] == \
        ["0.00001", "2500000", "—", "yes", "ANIL", "3", "-0.25"]
    assert setting_value({"FedProx": Demo(d=3), "Local only": 2.5e-3}) == "FedProx: d 3, T 5; Local only: 0.0025"
    assert setting_value(1e-12) == "10⁻¹²" and setting_value(2.5e-9) == "2.5 × 10⁻⁹"
    assert setting_value({}) == "none" and setting_value(((1, 2), (3, 4))) == "1, 2; 3, 4"
    with pytest.raises(ValueError, match="no words for a set"):
        setting_value({1, 2})


@pytest.mark.parametrize("chapter", ["ch01_arm", "ch02_maml_anil", "ch03_aruba"])
def test_every_setting_of_chapters_1_to_3_has_words(chapter):
    # a field without words would show its Python name on the page
    from dataclasses import fields, is_dataclass

    from replearn.settings import COMMON_WORDS
    from replearn.experiments import settings_classes

    for name, cls in settings_classes().items():
        if not name.startswith(chapter):
            continue
        cfg = cls()
        for f in fields(cfg):
            value = getattr(cfg, f.name)
            keys = [f.name] + ([f"{f.name}.{g.name}" for g in fields(value)] if is_dataclass(value) else [])
            described = {w for kind in cls.__mro__ for w in vars(kind).get("WORDS", {})} | set(COMMON_WORDS)
            for key in keys:
                assert key in described or key.rsplit(".", 1)[-1] in COMMON_WORDS, \
                    f"{name}: field {key!r} has no words (add it to the class's WORDS)"


def test_bounds_written_beside_the_fields_are_checked_and_inherited():
    """Issue 42: a field's range sits beside it (``Annotated[int, Ge(1)]``) and the base check
    reads it, with the messages of :mod:`replearn.checks`; a subclass that redeclares the field
    with another default keeps its base's bound."""
    from dataclasses import dataclass
    from typing import Annotated

    from replearn.settings import Each, Ge, Gt, Settings, field_bounds

    @dataclass(frozen=True)
    class Base(Settings):
        T: Annotated[int, Ge(1)] = 5
        lr: Annotated[float, Gt(0)] = 0.1
        noise: Annotated[float | None, Ge(0)] = None
        rates: Annotated[tuple[float, ...], Each(Gt(0))] = (0.1, 0.2)

    @dataclass(frozen=True)
    class Child(Base):
        T: int = 7  # a new default; Base's bound still holds

    assert field_bounds(Child)["T"] == [Ge(1)]
    for cls in (Base, Child):
        with pytest.raises(ValueError, match=r"^T must be an integer >= 1 \(a positive integer\), got 0$"):
            cls(T=0)
    with pytest.raises(ValueError, match=r"^lr must be > 0.0, got 0.0$"):
        Base(lr=0.0)
    with pytest.raises(ValueError, match=r"^noise must be >= 0.0, got -1.0$"):
        Base(noise=-1.0)
    with pytest.raises(ValueError, match=r"every entry of rates must be > 0.0, got -0.2"):
        Base(rates=(0.1, -0.2))
    assert Base(noise=None).noise is None and Child().T == 7


def test_upper_bounds_make_one_range_with_the_lower_bound_and_keep_their_why():
    """Issue 42 ("settings as data"): :class:`Le` and :class:`Lt` beside a lower bound are one
    range in the message; ``why=`` words follow the field's name; a subclass keeps the bounds."""
    from typing import Annotated

    from replearn.settings import Ge, Gt, Le, Lt, field_bounds

    @dataclass(frozen=True)
    class Base(Settings):
        r: Annotated[float, Gt(0, why="participation rate"), Le(1)] = 1.0
        delta0: Annotated[float, Ge(0), Lt(1, why="a distance")] = 0.5
        cap: Annotated[float, Le(2)] = 1.0
        top: Annotated[int, Lt(5)] = 3
        tau: Annotated[int, Ge(2, why="FedAvg's local steps; tau = 1 is D-SGD")] = 2

    @dataclass(frozen=True)
    class Child(Base):
        r: float = 0.5  # a new default; Base's range still holds

    assert field_bounds(Child)["r"] == [Gt(0, why="participation rate"), Le(1)]
    for cls in (Base, Child):
        for bad in (0.0, 1.5):
            with pytest.raises(ValueError, match=rf"^r \(participation rate\) must be > 0.0 and <= 1.0, got {bad}$"):
                cls(r=bad)
    assert Base(r=1.0).r == 1.0 and Base(delta0=0.0).delta0 == 0.0       # the closed ends
    with pytest.raises(ValueError, match=r"^delta0 \(a distance\) must be >= 0.0 and < 1.0, got 1.0$"):
        Base(delta0=1.0)
    with pytest.raises(ValueError, match=r"^cap must be <= 2.0, got 2.5$"):
        Base(cap=2.5)
    with pytest.raises(ValueError, match=r"^top must be an integer <= 4, got 5$"):
        Base(top=5)
    with pytest.raises(ValueError, match=r"^tau \(FedAvg's local steps; tau = 1 is D-SGD\) must be an integer >= 2, "
                                         r"got 1$"):
        Base(tau=1)


def test_one_of_distinct_and_pair_bounds():
    """Issue 42: a value among choices (:class:`OneOf`), a tuple without repeats
    (:class:`Distinct`) and a ``(low, high)`` pair in order (:class:`Pair`) are bounds beside the
    field, kept by a subclass that redeclares it; each message names the field, what it must be
    and what it got."""
    from typing import Annotated

    from replearn.settings import Distinct, Each, Ge, OneOf, Pair, field_bounds

    @dataclass(frozen=True)
    class Base(Settings):
        dtype: Annotated[str, OneOf("float32", "float64")] = "float64"
        taus: Annotated[tuple[int, ...], Distinct(), Each(Ge(1))] = (1, 5)
        sizes: Annotated[tuple[int, int], Pair(), Each(Ge(1))] = (10, 200)
        window: Annotated[tuple[float, float], Pair(strict=True, why="distances")] = (0.0, 0.1)

    @dataclass(frozen=True)
    class Child(Base):
        dtype: str = "float32"
        taus: tuple[int, ...] = (2, 3)
        sizes: tuple[int, int] = (1, 2)

    assert field_bounds(Child)["dtype"] == [OneOf("float32", "float64")]
    for cls in (Base, Child):
        with pytest.raises(ValueError, match=r"^dtype must be one of \('float32', 'float64'\), got 'float16'$"):
            cls(dtype="float16")
        with pytest.raises(ValueError, match=r"^taus must be distinct, got \(1, 5, 1\) \(1 more than once\); "
                                             r"drop the repeats$"):
            cls(taus=(1, 5, 1))
        with pytest.raises(ValueError, match=r"^sizes must be a pair \(low, high\) with low <= high, got \(5, 3\)$"):
            cls(sizes=(5, 3))
    with pytest.raises(ValueError, match=r"^sizes must be a pair \(low, high\) with low <= high, got \(10,\)$"):
        Base(sizes=(10,))
    with pytest.raises(ValueError, match=r"^every entry of sizes must be an integer >= 1 \(a positive integer\), "
                                         r"got 0$"):
        Base(sizes=(0, 3))
    with pytest.raises(ValueError, match=r"^window \(distances\) must be a pair \(low, high\) with low < high, "
                                         r"got \(0.1, 0.1\)$"):
        Base(window=(0.1, 0.1))
    ok = Base(dtype="float32", taus=[5, 1], sizes=(4, 4), window=(0.0, 1.0))
    assert ok.taus == (5, 1) and ok.sizes == (4, 4)                       # a list is converted; low == high
    with pytest.raises(ValueError, match="OneOf needs the choices"):
        OneOf()


def test_each_checks_every_entry_with_its_kind_and_words():
    """Issue 42: :class:`Each` applies several bounds to every entry (a lower and an upper one
    as one range, a choice), names the entries as ``entry`` says, and checks the entries of a
    tuple of numbers as numbers (an int entry too) and those of a tuple of ints as integers."""
    from typing import Annotated

    from replearn.settings import Each, Ge, Gt, Le, OneOf

    @dataclass(frozen=True)
    class Grid(Settings):
        fractions: Annotated[tuple, Each(Gt(0), Le(1))] = (1.0, 0.5)
        conds: Annotated[tuple, Each(Ge(1, why="condition numbers"))] = (1.0, 2.0)
        ms: Annotated[tuple[int, ...], Each(Ge(1), entry="every m in ms (samples)")] = (2, 5)
        algorithms: Annotated[tuple[str, ...], Each(OneOf("ANIL", "FO-ANIL"))] = ("ANIL",)

    with pytest.raises(ValueError, match=r"^every entry of fractions must be > 0.0 and <= 1.0, got 1.5$"):
        Grid(fractions=(0.5, 1.5))
    with pytest.raises(ValueError, match=r"^every entry of conds \(condition numbers\) must be >= 1.0, got 0$"):
        Grid(conds=(1, 0))
    with pytest.raises(ValueError, match=r"^every m in ms \(samples\) must be an integer >= 1 \(a positive integer\), "
                                         r"got 0$"):
        Grid(ms=(2, 0))
    with pytest.raises(ValueError, match=r"^every entry of algorithms must be one of \('ANIL', 'FO-ANIL'\), "
                                         r"got 'MAML'$"):
        Grid(algorithms=("ANIL", "MAML"))
    assert Grid(conds=(1, 3), fractions=(1, 0.25)).conds == (1, 3)
    with pytest.raises(ValueError, match="Each needs the bounds"):
        Each()


def test_a_number_of_seeds_is_a_count_and_a_seed_field_a_seed():
    """An int field ``seed`` or ``..._seed`` is a seed (up to 2**64 - 1); any other int field,
    ``seeds`` (a number of seeds) included, is a count up to MAX_COUNT, bounds beside it or not."""
    from typing import Annotated

    from replearn.settings import Ge

    @dataclass(frozen=True)
    class Seeded(Settings):
        seed: int = 0
        data_seed: int = 0
        seeds: Annotated[int, Ge(1, why="independent repetitions")] = 3

    assert Seeded(seed=2**63, data_seed=2**63).seed == 2**63
    with pytest.raises(ValueError, match=r"^seeds = 100000000 is more work .*MAX_COUNT"):
        Seeded(seeds=10**8)
    with pytest.raises(ValueError, match=r"^seeds \(independent repetitions\) must be an integer >= 1"):
        Seeded(seeds=0)


def single_field_checks(cls) -> list[str]:
    """The statements of ``cls``'s own ``validate`` that read a single field (a check of one field
    against constants, which belongs beside the field as a bound), as source text. A statement
    that calls a method of ``self`` or passes ``self`` on may relate fields and is not counted;
    a local variable reads the fields its assignment read."""
    import ast
    import inspect
    import textwrap
    from dataclasses import fields

    if "validate" not in vars(cls):
        return []
    source = textwrap.dedent(inspect.getsource(vars(cls)["validate"]))
    names, local, found = {f.name for f in fields(cls)}, {}, []

    def reads(node):
        out, owned = set(), set()
        for n in ast.walk(node):
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
                if n.attr not in names:
                    return None        # a method of self: may relate fields
                out.add(n.attr)
                owned.add(id(n.value))
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "getattr" \
                    and n.args and isinstance(n.args[0], ast.Name) and n.args[0].id == "self":
                out.add("getattr(self, ...)")
                owned.add(id(n.args[0]))
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in local:
                out |= local[n.id]
        selves = [n for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == "self"]
        return None if any(id(n) not in owned for n in selves) else out   # self passed on

    def assign(target, value):
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
            for t, v in zip(target.elts, value.elts):   # (a, b), (c, d) = self.x, self.y: pairwise
                assign(t, v)
            return
        read = reads(value)
        for n in ast.walk(target):
            if isinstance(n, ast.Name):
                local[n.id] = read or set()

    for stmt in ast.parse(source).body[0].body:
        read = reads(stmt)
        if isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                assign(target, stmt.value)
        elif read is not None and len(read) == 1:
            found.append(ast.get_source_segment(source, stmt).splitlines()[0].split("  #")[0].rstrip())
    return found


#: settings classes whose ``validate`` still reads single fields, and why
SINGLE_FIELD_CHECKS_KEPT = {
    "replearn.experiments.ch05_fedrep.s07_cifar_personalisation.TableSettings":
        "its methods and variants are checked against the registry of methods, which grows at run time (a "
        "reader's own method), so not against fixed choices; its distinct methods and partition entries are "
        "still to move beside the fields",
}


def test_validate_keeps_only_relations_between_fields():
    """Issue 42: every bound of a single field is written beside it and checked from its
    annotation; a subclass's ``validate`` keeps only relations between fields (``k < d``, ``tau``
    divides ``total_steps``), so no statement of it reads a single field."""
    from typing import Annotated

    from replearn.checks import check_int
    from replearn.settings import Ge

    @dataclass(frozen=True)
    class Mixed(Settings):
        d: int = 5
        k: Annotated[int, Ge(1)] = 2
        m: int = 3
        pair: tuple = (1, 2)

        def validate(self) -> None:
            super().validate()
            check_int(self.d, "d (needs k < d)", self.k + 1)       # a relation
            check_int(self.m, "m", 1)                               # one field
            for name in ("d", "m"):
                check_int(getattr(self, name), name, 1)             # one field each
            (lo, hi), k = self.pair, self.k
            if not lo < hi:                                         # one field, through locals
                raise ValueError("pair")
            if not hi < k:                                          # a relation, through locals
                raise ValueError("pair and k")

    assert single_field_checks(Mixed) == ['check_int(self.m, "m", 1)', 'for name in ("d", "m"):', "if not lo < hi:"]
    flagged = {key: single_field_checks(cls) for key, cls in all_settings_classes().items()}
    flagged = {key: lines for key, lines in flagged.items() if lines}
    assert set(flagged) - set(SINGLE_FIELD_CHECKS_KEPT) == set(), \
        f"move these checks of one field beside it as a bound (replearn.settings.Ge, OneOf, ...): {flagged}"
    assert set(SINGLE_FIELD_CHECKS_KEPT) <= set(flagged), "a class of SINGLE_FIELD_CHECKS_KEPT no longer needs it"


def test_profiles_are_data_on_a_base_with_dotted_changes_merged_down_the_classes():
    """Issue 42: a profile is a :class:`Profile` (changes to a base profile) written as a class
    attribute; dotted names reach into a composed dataclass, whole fields are set first, a
    subclass applies its bases' changes before its own, and mistakes are refused by name."""
    from replearn.neural import TrainConfig

    @dataclass(frozen=True)
    class Base(Settings):
        n: int = 3
        m: int = 4
        train: TrainConfig = TrainConfig(lr=0.05, rounds=20)
        PAPER = Profile({"n": 30, "train.lr": 0.01})
        LONG = Profile({"m": 8}, base="paper")

    @dataclass(frozen=True)
    class Child(Base):
        k: int = 1
        PAPER = Profile({"k": 2, "train": TrainConfig(rounds=7), "train.batch_size": 50})
        GPU = Profile({"train.vmap_clients": 5})

    assert Base.profile("paper") == Base(n=30, train=TrainConfig(lr=0.01, rounds=20))
    assert Base.profile("long") == Base(n=30, m=8, train=TrainConfig(lr=0.01, rounds=20))
    assert Base.profile("gpu") == Base.profile("paper")        # gpu: the paper profile unless said
    # Child: Base's paper changes, then its own (a whole train, then the dotted ones on it, Base's lr included)
    paper = Child.profile("paper")
    assert paper == Child(n=30, k=2, train=TrainConfig(rounds=7, lr=0.01, batch_size=50))
    assert Child.profile("long") == replace(paper, m=8)
    assert Child.profile("gpu") == replace(paper, train=replace(paper.train, vmap_clients=5))
    assert Child.profile("default") == Child()

    @dataclass(frozen=True)
    class Wrong(Settings):
        n: int = 3
        PAPER = Profile({"nn": 4})
        LONG = Profile({"n.x": 4})
    with pytest.raises(ValueError, match=r"Wrong has no settings \['nn'\]"):
        Wrong.profile("paper")
    with pytest.raises(ValueError, match="n is not a composed dataclass"):
        Wrong.profile("long")

    @dataclass(frozen=True)
    class Loop(Settings):
        n: int = 3
        PAPER = Profile({"n": 4}, base="gpu")
    with pytest.raises(ValueError, match="each other's base"):
        Loop.profile("paper")
    with pytest.raises(ValueError, match="must be one of"):
        Profile({}, base="huge")
    with pytest.raises(ValueError, match="map field names"):
        Profile(["n"])
    # a changed value is validated like any other
    @dataclass(frozen=True)
    class Bad(Settings):
        n: int = 3
        PAPER = Profile({"n": -1})
    with pytest.raises(ValueError, match="n must be"):
        Bad.profile("paper")


def test_the_paper_profile_is_the_table_of_the_sources_values():
    """:func:`replearn.settings.sourced`: the code's values, then the paper's, then ours, each
    written once; a departure on purpose takes its value from ours; a description is not a value."""
    stated = {"d": (100, "Fig. 1"), "T": (200, "Sec. 5")}
    code = {"T": (200, "main.py (--epochs 200)"), "d": ("the paper's", "README")}
    p = sourced(stated, code, ours={"T": 50}, departures={"T": "fewer rounds on a CPU"})
    assert dict(p.changes) == {"T": 50, "d": 100}
    with pytest.raises(ValueError, match=r"\['d'\] are stated by a source and again in ours"):
        sourced(stated, ours={"d": 100})
    with pytest.raises(ValueError, match="need their value in ours"):
        sourced(stated, departures={"T": "why"})


def test_no_settings_class_writes_a_profile_as_code():
    """Every profile is data: no settings class defines ``paper``, ``long``, ``gpu`` or ``default``
    methods, and every profile attribute it writes is a :class:`Profile`."""
    for key, cls in all_settings_classes().items():
        for name in (*PROFILES, "authors"):
            assert name not in vars(cls), f"{key} defines {name}(): write it as {name.upper()} = Profile(...)"
        for name in ("PAPER", "LONG", "GPU"):
            assert isinstance(getattr(cls, name), Profile), f"{key}.{name} is not a Profile"


def all_settings_classes() -> dict:
    """Every settings class of the library (drivers, chapter set-ups, theory), by dotted name."""
    import importlib
    import pkgutil

    import replearn
    found = {}
    for info in pkgutil.walk_packages(replearn.__path__, prefix="replearn."):
        if ".flower" in info.name:
            continue  # an optional dependency; it holds no settings
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, Settings) and obj is not Settings \
                    and obj.__module__ == module.__name__:
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return found


SNAPSHOT = Path(__file__).parent / "data" / "settings_snapshot.json"


def test_every_profile_and_results_section_builds_the_recorded_settings():
    """Issue 42: the profiles moved from classmethods to data without changing one value.
    ``tests/data/settings_snapshot.json`` holds the ``repr`` of every settings class at every
    profile and of every results section's settings at every profile, recorded from the
    classmethods before they went (the one intended change: the federation base class
    ``FederationSettings`` gained the paper profile its subclasses share). A change of a profile
    that is meant must update the snapshot and re-run the results files it touches: since then,
    ``authors_dropout`` (the authors' CIFAR-100 dropout, on in the profiles built on the paper's;
    of the committed files it changes only 5.9's network, which was re-run)."""
    import sys
    sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))
    import run_results as rr

    recorded = json.loads(SNAPSHOT.read_text())
    classes = all_settings_classes()
    built = {f"{key}:{p}": repr(cls.profile(p)) for key, cls in classes.items() for p in PROFILES}
    assert built.keys() == recorded["profiles"].keys()
    assert [k for k in built if built[k] != recorded["profiles"][k]] == []
    sections = {}
    for name in rr.SECTIONS:
        for p in PROFILES:
            try:
                sections[f"{name}:{p}"] = repr(rr.section_settings(name, p))
            except ValueError as e:
                sections[f"{name}:{p}"] = f"error ValueError: {e}"
    assert sections.keys() == recorded["sections"].keys()
    assert [k for k in sections if sections[k] != recorded["sections"][k]] == []
