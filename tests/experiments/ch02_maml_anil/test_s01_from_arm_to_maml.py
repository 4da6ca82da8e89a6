from dataclasses import replace

import pytest
import torch

from replearn.experiments.ch02_maml_anil import s01_from_arm_to_maml as s01

SMALL = s01.HessianTermSettings(d=8, k=2, n=6, iterations=120, hessian_alphas=(0.05, 0.2))


def test_hessian_term():
    hess = s01.hessian_term(replace(SMALL, iterations=20), at=5)
    assert hess["alphas"]["MAML"].shape == (2,) and bool(torch.isnan(hess["trajectory"]["MAML"][0]))
    assert float(hess["alphas"]["MAML"][0]) < float(hess["alphas"]["MAML"][1])
    with pytest.raises(ValueError, match="positive integer"):
        s01.hessian_term(SMALL, at=0)


def test_settings_extend_the_population_instance():
    paper = s01.HessianTermSettings.profile("paper")
    assert paper.d == 100 and paper.hessian_alphas == s01.HessianTermSettings().hessian_alphas
    with pytest.raises(ValueError, match="hessian_alphas"):
        replace(SMALL, hessian_alphas=(0.1, 0.0))
