from dataclasses import dataclass

import pytest

from replearn.profiles import Settings, profile_name


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
    monkeypatch.setenv("REPLEARN_PROFILE", "huge")
    with pytest.raises(ValueError, match="REPLEARN_PROFILE='huge'"):
        Demo.current()
