"""The truncation's vector field (`momentgen.compiler.truncation`): a pure function of its explicit state, and
its Jacobian the derivative of the field.
"""

import numpy as np
import pytest

from momentgen.compiler.truncation import from_config
from momentgen.setting.config import parse_config
from tests.helpers import untied_config


@pytest.mark.parametrize("gamma,activation", [(0.3, "h1"), (0.0, "h2")])
def test_untied_jacobian_is_the_derivative_of_the_vector_field(gamma, activation):
    """Analytic Jacobian (second derivatives of Φ, m*(q) and β by the chain rule) vs central
    differences of rhs: 1e-6 of the largest entry (FD error ~h² and Newton tolerance / h)."""
    truncation, y0 = from_config(untied_config(gamma=gamma, activation=activation), 3)
    truncation.fast_phase(y0, T=30.0)
    J = truncation.jac(0.0, y0).toarray()
    h = 1e-6
    F = np.array([(truncation.rhs(0, y0 + h * e) - truncation.rhs(0, y0 - h * e)) / (2 * h) for e in np.eye(len(y0))]).T
    assert np.abs(J - F).max() <= 1e-6 * np.abs(F).max()


def test_rhs_is_a_pure_function_of_the_state():
    """Untied h2 with a teacher mean (m* is found by Newton from a warm start): the same state gives a
    bit-identical derivative after two different histories of calls (before, rhs moved the warm
    start on every call)."""
    config = parse_config(
        {
            "model": {"kind": "untied", "K": 2, "trainable": [1]},
            "loss": {"builtin": "mse", "activation": "h2"},
            "init": {"1": {"kind": "gaussian", "mean": 0.1}, "2": {"kind": "gaussian", "mean": 1.5}},
            "truncation": {"degree": 3, "observables": ["M1 M2^T"]},
            "integrate": {"T": 0.1},
        }
    )
    truncation, y0 = from_config(config)
    truncation.fast_phase(y0, 20.0)
    far = y0 * 1.3
    first = truncation.rhs(0.0, y0)
    truncation.rhs(0.0, far)
    truncation.rhs(0.0, 0.7 * y0)
    assert np.array_equal(truncation.rhs(0.0, y0), first)


def test_rhs_is_a_pure_function_of_its_explicit_state_for_a_non_polynomial_loss():
    """Untied softplus (a quadrature potential, rule calibrated at level 15) with a teacher mean:
    ``rhs(t, y, state)`` at a `RunState` captured after the fast phase is bit-identical after the run's
    state moved — `track` followed the branch of m* elsewhere, far states were evaluated at the frozen
    rule and `refine` raised its level (measured 15 → 31) — while the current state's derivative at the
    same y has changed (measured by 7.8e-9: the state is what differs). Before, ``rhs(t, y)`` read
    the branch and the level from the truncation, and moved by 1e-11 after `track`."""
    config = parse_config(
        {
            "model": {"kind": "untied", "K": 2, "trainable": [1]},
            "loss": {"builtin": "mse", "activation": "softplus", "rtol": 1e-8},
            "init": {"1": {"kind": "gaussian", "mean": 0.1}, "2": {"kind": "gaussian", "mean": 1.5}},
            "truncation": {"degree": 3, "observables": ["M1 M2^T"]},
            "integrate": {"T": 0.1},
        }
    )
    truncation, y0 = from_config(config)
    truncation.fast_phase(y0, 20.0)
    state = truncation.state
    assert truncation.potential.method == "quadrature" and state.level is not None
    first = truncation.rhs(0.0, y0, state)
    truncation.track(1.3 * y0)
    for factor in (2.0, 4.0, 8.0):
        truncation.rhs(0.0, factor * y0)
    assert truncation.potential.accuracy_report()["met_rtol"] is False  # far states not yet checked
    assert truncation.refine() is False and truncation.state.level > state.level
    assert not np.array_equal(truncation.state.m, state.m)
    assert np.array_equal(truncation.rhs(0.0, y0, state), first)
    assert not np.array_equal(truncation.rhs(0.0, y0), first)
