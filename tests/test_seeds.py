"""replearn.book.seeds: runs over seeds, mean ± sd with the decimals the spread supports, separation."""

from dataclasses import dataclass

import pytest

from replearn.book import seeds as S
from replearn.neural.transfer import MatchedTraining


def test_mean_sd_decimals_and_pm():
    m, sd = S.mean_sd([0.5, 0.6, 0.7])
    assert m == pytest.approx(0.6) and sd == pytest.approx(0.1)
    assert S.mean_sd([0.3]) == (0.3, 0.0)
    assert S.decimals(0.023) == 2 and S.decimals(0.004) == 3 and S.decimals(0.3) == 1 and S.decimals(2.6) == 0
    assert S.decimals(0.0) == 3 and S.decimals(1e-6) == 3
    assert S.pm([0.5, 0.6, 0.7]) == "0.6 ± 0.1"
    assert S.pm([0.51, 0.52, 0.56], scale=100) == "53 ± 3"
    with pytest.raises(ValueError, match="finite"):
        S.mean_sd([float("nan")])
    with pytest.raises(ValueError, match="finite"):
        S.mean_sd([])


def test_separated_needs_the_means_apart_by_more_than_the_spreads():
    assert S.separated([0.8, 0.81, 0.82], [0.5, 0.52, 0.51])
    assert not S.separated([0.8, 0.6, 0.7], [0.65, 0.55, 0.6])


def test_check_seeds():
    assert S.check_seeds((0, 3, 1)) == (0, 3, 1)
    for bad in ((), (1, 1), [0, 1], (-1,), (True,)):
        with pytest.raises(ValueError, match="seeds"):
            S.check_seeds(bad)


@dataclass(frozen=True)
class _Unchecked:
    """Settings that do not validate their seeds (a bare dataclass, not a replearn Settings)."""

    seeds: tuple = (1, 1)
    seed: int = 0


def test_over_seeds_runs_once_per_seed():
    seen = S.over_seeds(lambda s, x: (s.seed, x), MatchedTraining(seeds=(4, 7)), x=1)
    assert seen == [(4, 1), (7, 1)]
    # settings classes reject repeated seeds when built; over_seeds checks them again
    with pytest.raises(ValueError, match="seeds"):
        MatchedTraining(seeds=(1, 1))
    with pytest.raises(ValueError, match="seeds"):
        S.over_seeds(lambda s: s, _Unchecked())
