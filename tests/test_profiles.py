from dataclasses import dataclass

import pytest

from replearn.book.profiles import Settings, profile_name


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
    from replearn.book.profiles import differences

    assert differences(Demo) == [("d", 10, 100), ("T", 5, 500)]
    with pytest.raises(ValueError, match="Settings subclass"):
        differences(int)


def test_differences_look_inside_composed_configs():
    from replearn.neural import TrainConfig
    from replearn.book.profiles import differences

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
    from replearn.book.profiles import differences

    classes = settings_classes()
    assert "ch04_fedavg.s04_convergence.ConvergenceSettings" in classes and len(classes) >= 30
    for name, cls in classes.items():
        assert differences(cls), f"{name}: paper() equals the CPU default"
