"""A law-based matrix model's estimate carries its stepper's error, measured on its own problem (`stepper_check`)."""

import numpy as np
import pytest

from momentgen.compiler.initial import law_factors
from momentgen.dynamics.closures import solve_with_closure
from momentgen.dynamics.problem import Problem
from momentgen.dynamics.risk import theory_risk
from momentgen.dynamics.stepper_check import CHECK_SIZE, stepper_error
from momentgen.setting.config import parse_config
from momentgen.setting.flow import CHEBYSHEV, CHEBYSHEV_DRAWS

EXACT = {"method": "DOP853", "rtol": 1e-10, "atol": 1e-12}


def _sigma_case(kind, T=1.0, **truncation):
    """A Gaussian student (scale 0.8) against a power-law Σ (a = 1), teacher Σ^{1/2}: the slow tests' direct and
    symmetric case on a shorter log grid (its stepper error sits early, at t ≈ 0.1)."""
    return parse_config(
        {
            "model": {"kind": kind, "K": 2, "trainable": [1]},
            "loss": {"builtin": "mse", "activation": "h1"},
            "data": {"covariance": "power-law", "exponent": 1.0},
            "init": {"1": {"kind": "gaussian", "scale": 0.8}, "2": {"kind": "aligned", "c": 1.0, "exponent": 0.5}},
            "truncation": {"degree": 4, "closure": "matrix-model", **truncation},
            "integrate": {"T": T, "points": 11, "grid": "log", "log_first": 0.05},
        }
    )


@pytest.mark.parametrize(("kind", "stepper"), [("symmetric", CHEBYSHEV_DRAWS), ("tied", CHEBYSHEV_DRAWS),
                                               ("symmetric", CHEBYSHEV)])  # fmt: skip
def test_the_measured_stepper_error_covers_the_steppers_error_at_another_size(kind, stepper):
    """The check (one draw of n = 32 against the same stepper 100× tighter) against the true error of the same
    stepper on another draw, of n = 64, measured against DOP853 at rtol 1e-10 — an independent integrator. Measured
    (the check's peak / the truth's, words relative to max(1, |w|), risk relative): symmetric at the draws' rtol
    1e-3 4.5e-3 / 4.8e-3 on the words, 4.8e-3 / 5.0e-3 on the risk; tied 8.9e-4 / 7.6e-4, 4.4e-4 / 3.9e-4;
    symmetric at a single draw's rtol 1e-5 1.8e-4 / 2.1e-4, 2.0e-4 / 2.1e-4. Asserted: 3× the check (what the
    estimate carries) covers the truth at every t, and the check is not vacuous (its peak above a third of the
    truth's). The constants carried before (2e-3 for the draws, 1e-4 for a single draw, measured on the tied kind
    alone) under-covered the symmetric kind's words by 2.4× and 2.1×."""
    config = _sigma_case(kind)
    problem = Problem.from_config(config)
    means = problem.fast_phase().get("m_star", problem.means)
    check = stepper_error(problem, means, stepper)
    factors = law_factors(problem.model, problem.specs, 2 * CHECK_SIZE, seed=3, data=problem.data, flat=True)
    moved, exact = (problem.matrix_flow(factors, means, stepper=each) for each in (stepper, EXACT))
    words = np.array([moved.series[w] for w in problem.words])
    truth = np.array([exact.series[w] for w in problem.words])
    word_error = np.max(np.abs(words - truth) / np.maximum(1.0, np.abs(truth)), axis=0)
    risk_error = np.abs(theory_risk(problem, moved.series, means) / theory_risk(problem, exact.series, means) - 1)
    assert np.all(word_error <= 3 * check["words"]), (word_error, check["words"])
    assert np.all(risk_error <= 3 * check["risk"]), (risk_error, check["risk"])
    assert check["words"][-1] >= word_error.max() / 3 and check["risk"][-1] >= risk_error.max() / 3


def test_an_ensembles_estimate_carries_three_times_its_measured_stepper_error(monkeypatch):
    """The symmetric kind's ensemble (4 draws of n = 16, 4 of 8), solved twice from the same seeds — with its
    measured stepper error and with the measurement replaced by zeros: the words' estimate differs by exactly 3×
    the measurement (a floor under every time), the risk's is the running maximum of the other plus 3× the risk's
    measurement. A closure that dropped the term, or carried it once, fails. Without an estimate no check runs, and
    a stochastic ensemble (κ > 0, not stepped by Chebyshev) has none."""
    from momentgen.dynamics import ensemble

    config = _sigma_case("symmetric", T=0.3, size=16, draws=4)
    result = solve_with_closure(config)
    measured = result.extra["stepper_error"]
    assert measured["words"] > 1e-3  # the symmetric kind's stepper error is not negligible: the check has work
    check = stepper_error(Problem.from_config(config), None, CHEBYSHEV_DRAWS)
    monkeypatch.setattr(ensemble, "compared", lambda problem, loose, exact: {k: 0.0 * v for k, v in check.items()})
    without = solve_with_closure(config)
    n = len(result.t)
    words = np.array(result.error_series["estimate"], float) - np.array(without.error_series["estimate"], float)
    assert np.allclose(words, 3 * check["words"][:n], rtol=1e-9, atol=1e-12)
    risk, bare = (np.array(r.error_series["risk_relative"], float) for r in (result, without))
    assert np.allclose(risk, np.maximum.accumulate(bare + 3 * check["risk"][:n]), rtol=1e-9)
    monkeypatch.undo()
    assert "stepper_error" not in solve_with_closure(config, estimate=False).extra
    assert "stepper_error" not in solve_with_closure(config, kappa=0.05).extra
