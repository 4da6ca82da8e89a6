from dataclasses import dataclass

import pytest

from replearn.settings import Settings, profile_name


@dataclass(frozen=True)
class Demo(Settings):
    d: int = 10
    T: int = 5

    @classmethod
    def paper(cls):
        return cls(d=100, T=500)


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

        @classmethod
        def paper(cls):
            return cls(train=TrainConfig(lr=0.01, rounds=20, batch_size=50))

    assert differences(WithConfig) == [("train.lr", 0.05, 0.01), ("train.batch_size", 10, 50)]


def test_every_experiment_has_a_distinct_paper_profile():
    from replearn.experiments import settings_classes
    from replearn.settings import differences

    classes = settings_classes()
    assert "ch04_fedavg.s04_convergence.ConvergenceSettings" in classes and len(classes) >= 30
    for name, cls in classes.items():
        assert differences(cls), f"{name}: paper() equals the CPU default"


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
