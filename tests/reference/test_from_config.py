"""An SGD reference from a configuration (`momentgen.reference.from_config`): the risk and its standard error."""

import numpy as np

import momentgen as mg
from momentgen.setting.config import parse_config
from tests.helpers import RISK_SOLVABLE


def test_simulate_reports_the_risk_with_its_standard_error():
    """SGD's risk at t = 0 on the solvable case at d = 80: the student's exact finite-d risk
    2 Tr((S − I)²)/d averaged over two seeds is ≈ 2 (Marchenko–Pastur: 2(2 − 2 + 1)); the estimate is within
    4 standard errors of 2 + O(1/d)."""
    config = parse_config({**RISK_SOLVABLE, "integrate": {"T": 0.05, "points": 3}, "sgd": {"d": 80, "seeds": [0, 1]}})
    result = mg.simulate(config)
    risk, se = np.asarray(result.derived["risk"]), np.asarray(result.extra["risk_se"])
    assert risk.shape == se.shape == (3,) and np.all(se > 0)
    assert abs(risk[0] - 2.0) < 4 * se[0] + 0.1, (risk[0], se[0])
    assert risk[-1] < risk[0]  # it learns
