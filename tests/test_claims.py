import numpy as np
import pytest
import torch

from replearn.claims import ClaimFailed, claim, format_value


def test_claim_prints_values_when_it_holds(capsys):
    claim("FedAvg beats D-GD", True, fedavg=0.012345, dgd=torch.tensor(0.87123), n=3)
    assert capsys.readouterr().out == "FedAvg beats D-GD: holds (fedavg = 0.0123, dgd = 0.871, n = 3)\n"


def test_claim_raises_with_values_when_false(capsys):
    with pytest.raises(ClaimFailed, match=r"x below y: does NOT hold \(x = 2, y = 1\)"):
        claim("x below y", bool(2 < 1), x=2.0, y=1.0)
    assert capsys.readouterr().out == ""
    assert issubclass(ClaimFailed, AssertionError)


def test_claim_accepts_zero_dim_booleans_only():
    claim("numpy bool", np.bool_(True))
    claim("torch bool", torch.tensor(True))
    with pytest.raises(ValueError, match="must be a bool"):
        claim("array", np.array([True, False]))
    with pytest.raises(ValueError, match="must be a bool"):
        claim("number", 1)
    with pytest.raises(ValueError, match="non-empty label"):
        claim("", True)


def test_format_value():
    assert format_value(np.float64(0.123456), digits=2) == "0.12"
    assert format_value(np.int64(7)) == "7"
    assert format_value(True) == "True"
    assert format_value("1.0 ± 0.1") == "1.0 ± 0.1"
    assert format_value(float("nan")) == "nan"
    with pytest.raises(ValueError, match="must be numbers"):
        format_value([1, 2])


def test_round_significant():
    from replearn.claims import round_significant
    assert round_significant(5.132895215833068) == 5.13
    assert round_significant(0.053518619444278936, 2) == 0.054
    assert round_significant(np.float64(1234.5678), 2) == 1200.0
    assert round_significant(torch.tensor(-0.00123456)) == -0.00123
    assert round_significant(7) == 7 and round_significant(0.0) == 0.0
    with pytest.raises(ValueError, match="digits"):
        round_significant(1.0, 0)
    with pytest.raises(ValueError, match="real number"):
        round_significant("1.0")


def test_glue_number_stores_the_rounded_value(capsys):
    from IPython.core.interactiveshell import InteractiveShell

    from replearn.claims import glue_number
    InteractiveShell.instance()
    assert glue_number("x", 5.132895215833068) == 5.13
