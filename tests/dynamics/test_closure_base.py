"""What every closure shares (`momentgen.dynamics.closure_base`): the risk window and how a result that vouches
for less than its horizon is reported.
"""

import numpy as np

from tests.helpers import CONFIG, bare_result


def test_the_risk_window_ends_where_the_estimate_passes_ten_percent():
    """`closure_base.risk_columns`: the estimate per time, and risk_valid_until the last time within `RISK_TOL`."""
    from momentgen.dynamics.closure_base import risk_columns as _risk_columns

    columns, extra = _risk_columns(np.array([0.0, 1.0, 2.0]), np.array([0.01, 0.1, 0.2]))
    assert columns["risk_relative"] == [0.01, 0.1, 0.2] and extra["risk_valid_until"] == 1.0
    assert _risk_columns(np.array([0.0, 1.0]), None)[1]["risk_valid_until"] == 0.0


def test_a_result_that_vouches_for_less_than_its_horizon_is_partial():
    """`closure_base.reported`: status ok with valid_until < t[-1] becomes partial and says until when; at the horizon
    it stays ok (kills the comparison reversed or the status left at ok)."""
    from momentgen.dynamics.closure_base import reported as _reported
    from momentgen.dynamics.problem import Problem

    problem = Problem(CONFIG)
    for valid_until, status in ((0.5, "partial"), (1.0, "ok")):
        result = bare_result(np.array([0.0, 0.5, 1.0]), "ok", "fine", valid_until)
        reported = _reported(problem, result)
        assert reported.status == status
    assert (
        "vouched for until 0.5 of 1"
        in _reported(
            problem,
            bare_result(np.array([0.0, 0.5, 1.0]), "ok", "fine", 0.5),
        ).message
    )
