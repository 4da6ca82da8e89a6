import pytest

from replearn.experiments.ch02_maml_anil import s05_finite_samples as s05


pytestmark = pytest.mark.usefixtures("one_thread")


def test_finite_samples_error_falls_with_m():
    cfg = s05.FiniteSampleSettings(d=20, k=2, iterations=60, tail=10, ms=(4, 64), ns=(5,), seeds=1,
                                   algorithms=("FO-ANIL",))
    res = s05.run_finite_samples(cfg)
    assert res.by_m["FO-ANIL"].shape == (2, 1) and res.by_n["FO-ANIL"].shape == (1, 1)
    assert res.by_m["FO-ANIL"][1, 0] < res.by_m["FO-ANIL"][0, 0]
    with pytest.raises(ValueError, match="tail"):
        s05.run_finite_samples(s05.FiniteSampleSettings(iterations=5, tail=10))


def test_finite_sample_distance_is_one_seeded_run():
    cfg = s05.FiniteSampleSettings(d=10, k=2, iterations=20, tail=5)
    dist = s05.finite_sample_distance(cfg, "FO-ANIL", 8, 6, seed=3)
    assert dist.shape == (21,) and abs(dist[0] - cfg.delta0) < 1e-10
    assert (dist == s05.finite_sample_distance(cfg, "FO-ANIL", 8, 6, seed=3)).all()
    with pytest.raises(ValueError, match="unknown algorithm"):
        s05.finite_sample_distance(cfg, "ARM", 8, 6, seed=3)
    with pytest.raises(ValueError, match="algorithms"):
        s05.FiniteSampleSettings(algorithms=("MAML",))
