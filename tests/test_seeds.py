"""replearn.book.seeds: runs over seeds, mean ± sd with the decimals the spread supports, separation."""

from dataclasses import dataclass

import pytest

from replearn.book import seeds as S
from replearn.experiments.ch04_fedavg.cifar_transfer import MatchedTraining


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


def test_comparison_words_are_the_books_vocabulary():
    up, down = S.compare([0.5, 0.6, 0.8], [0.1, 0.2, 0.3]), S.compare([0.1, 0.2, 0.3], [0.5, 0.6, 0.8])
    null = S.compare([0.1, 0.2, 0.3], [0.2, 0.2, 0.35])
    assert (up.outcome, down.outcome, null.outcome) == ("holds", "opposite", "not separated")
    assert (up.word, down.word, null.word) == ("holds", "opposite", "not separated (n = 3)")
    assert set(S.OUTCOMES) == {up.outcome, down.outcome, null.outcome}
    assert bool(up) and not down and not null


def test_comparisons_are_in_the_unit_of_their_table():
    c = S.points([0.5, 0.6, 0.8], [0.1, 0.2, 0.3])
    assert c == S.compare([0.5, 0.6, 0.8], [0.1, 0.2, 0.3], scale=100, unit="points")
    assert c.text == "+43 [+29, +58] points" and c.full == "+43 [+29, +58] points (95% interval, n = 3)"
    assert c.signed(40.0) == "+40 points"
    assert S.compare([0.5, 0.6], [0.1, 0.3]).text == "+0.3 [-0.3, +1.0]"         # a plain number has no unit
    with pytest.raises(ValueError, match="unit"):
        S.compare([1.0], [0.0], unit=100)


def test_every_printed_bound_shows_its_sign():
    # differences 0.01, 0.02, 0.03: the interval [-0.0048, +0.0448] has half-width 0.025 (2 decimals),
    # at which its lower bound would print "-0.00" beside "not separated"; widened, it shows its sign
    assert S.compare([0.11, 0.22, 0.33], [0.1, 0.2, 0.3]).text == "+0.020 [-0.005, +0.045]"
    assert S.compare([0.11, 0.22, 0.33], [0.1, 0.2, 0.3], scale=100, unit="points").text == "+2.0 [-0.5, +4.5] points"
    for a, b in (([0.0, 0.1, -0.09], [0.0, 0.0, 0.0]), ([0.51, 0.5, 0.52], [0.5, 0.5, 0.5]),
                 ([0.3, 0.31, 0.2], [0.3, 0.3, 0.3]), ([1e-6, 2e-6, 3e-6], [0.0, 0.0, 0.0])):
        c = S.compare(a, b)
        numbers = [c.text.split(" [")[0], *c.text.split("[")[1].rstrip("]").split(", ")]
        for text, x in zip(numbers, (c.mean, c.lo, c.hi)):
            assert (text == "0") == (x == 0) and float(text) * x >= 0, (c, text)   # nonzero -> signed digit
            assert text == "0" or text[0] in "+-"
        assert ("holds" if float(numbers[1]) > 0 else "opposite" if float(numbers[2]) < 0
                else "not separated") == c.outcome
    assert S.compare([0.2, 0.2], [0.2, 0.2]).text == "0 [0, 0]"                 # an exact zero is "0"
    assert S.Comparison(3, 1e-17, -1e-17, 3e-17).text == "0 [0, 0]"             # rounding noise too
    # a mean of float noise beside a wide interval (two identical trainings): zero at the interval's
    # precision, not "+0.0000001 [-0.0797684, +0.0797686]"
    assert S.Comparison(100, 1e-7, -0.0797684, 0.0797686, "points").text == "0 [-0.08, +0.08] points"
    assert S.Comparison(100, 0.004, -0.0797684, 0.0877686).text == "+0.004 [-0.080, +0.088]"  # one more digit


def test_joint_comparisons():
    up, null, down = (S.compare([0.5, 0.6, 0.8], [0.1, 0.2, 0.3]), S.compare([0.1, 0.2, 0.3], [0.2, 0.2, 0.35]),
                      S.compare([0.1, 0.2, 0.3], [0.5, 0.6, 0.8]))
    assert S.every([up, up]).outcome == "holds" and S.every([up, null]).word == "not separated (n = 3)"
    assert S.every([up, null, down]).outcome == "opposite"
    assert S.some([null, up]).outcome == "holds" and S.some([null, down]).outcome == "not separated"
    assert S.some([down, down]).outcome == "opposite" and bool(S.some([null, up])) and not S.every([up, null])
    with pytest.raises(ValueError, match="Comparison"):
        S.every([True])
    with pytest.raises(ValueError, match="Comparison"):
        S.some([])


def test_no_sd_is_printed_as_zero_without_a_word():
    assert S.pm([0.9701, 0.9702, 0.9703]) == "0.970 (sd < 0.001)"
    assert S.pm([0.97, 0.97]) == "0.970 (no spread)" and S.pm([0.97]) == "0.970 (one value)"
    assert S.pm_parts([0.9701, 0.9702, 0.9703]) == ("0.970", "< 0.001", "0.970 (sd < 0.001)")
    assert S.pm([-0.0001, 0.0002, -0.0001]) == "0.000 (sd < 0.001)"             # no negative zero
