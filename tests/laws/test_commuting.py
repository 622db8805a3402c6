"""A commuting state integrated by its diagonals (`laws.commuting`, `setting.flow.run`'s stiff path): found
where every matrix is diagonal in one basis and only there, the same flow as the dense one for every kind, and a long
horizon of the scaling-law case at the cost of a short one, right against the exact commuting solution.
"""

import numpy as np
import pytest

from momentgen.dynamics import closures
from momentgen.dynamics.closures import solve_with_closure
from momentgen.evidence.oracles import aligned_tied_average
from momentgen.laws.commuting import diagonal_state
from momentgen.laws.representation import vector_moments
from momentgen.models.tied import TiedMatrices
from momentgen.setting import flow
from momentgen.setting.config import load_config, parse_config
from momentgen.setting.matrices import trace_moments

COMMUTING = "BDF on the diagonals of a commuting state"


def _dense_only(monkeypatch):
    """The flow engine without its commuting path (every state integrated as matrices)."""
    monkeypatch.setattr(flow, "_diagonal_layout", lambda model, dense, source, read: (dense, None))


def test_a_commuting_state_is_found_with_its_weights_and_a_generic_one_is_not():
    """Σ and two functions of it, in a rotated basis: one basis holds them all, with the weights of the state
    functional — 1/m for (1/m) Tr, ⟨e₀, q⟩² for a state vector (each summing to 1, to rounding). A Wishart matrix
    beside Σ does not commute with it: no state (its off-diagonal part is O(1), far above the 1e-10 test)."""
    rng = np.random.default_rng(0)
    m = 12
    rotation, _ = np.linalg.qr(rng.standard_normal((m, m)))
    sigma = rotation @ np.diag(np.linspace(0.1, 2.0, m)) @ rotation.T
    teacher = rotation @ np.diag(np.linspace(0.1, 2.0, m) ** 0.5) @ rotation.T
    for read, weights in ((trace_moments, np.full(m, 1 / m)), (vector_moments, None)):
        state = diagonal_state([sigma, teacher, 0.5 * np.eye(m)], read)
        assert state is not None
        if weights is not None:
            np.testing.assert_allclose(state.weights, weights, rtol=1e-12)
        np.testing.assert_allclose(state.weights.sum(), 1.0, rtol=1e-12)
        np.testing.assert_allclose(state.matrix(state.diagonal(teacher)), teacher, atol=1e-12)
        words = [(0,), (0, 1), (1, 0, 1)]
        letters = [state.diagonal(a) for a in (sigma, teacher)]
        np.testing.assert_allclose(state.moments(words, letters), read(words, [sigma, teacher]), atol=1e-12)
    wishart = rng.standard_normal((m, m)) @ rng.standard_normal((m, m)).T / m
    assert diagonal_state([sigma, wishart], trace_moments) is None


def test_the_scaling_law_to_t1000_against_the_exact_commuting_solution():
    """Issue 46 item 1: the shipped scaling_law configuration (tied mse(h1), power-law Σ a = 1, student 0.5 I,
    teacher 1.2 Σ^{1/2}) to T = 1000 on a log grid — risk 2.5 → 2.9e-7 — against the exact commuting solution
    (`oracles.aligned_tied_average`, each direction a logistic flow): measured relative error of the risk ≤ 1.4e-4
    (tolerance 5e-4; the issue asks 10 % at T = 1000), words ≤ 5.9e-5 (tolerance 2e-4), the risk's relative
    estimate above the error at every t > 0. About 3 s: the commuting path (BDF on the diagonals); by DOP853 on the
    matrices it was 8.5 s to T = 10 and grew about linearly in T (`benchmarks/bench_horizon.py`)."""
    config = load_config("scaling_law", integrate={"T": 1000.0, "points": 41, "grid": "log"})
    result = solve_with_closure(config)
    t = result.t
    assert result.status == "ok" and t[-1] == 1000.0 and result.extra["method"] == COMMUTING
    exact = aligned_tied_average(t, "risk", 1.0, 0.5, 1.2, 0.5)
    relative = np.abs(result.derived["risk"] / exact - 1)
    words = max(
        np.abs(result.series[w] - aligned_tied_average(t, pq, 1.0, 0.5, 1.2, 0.5)).max()
        for w, pq in (("S1", (0, 1)), ("S1 Sigma", (1, 1)), ("S1 S1", (0, 2)))
    )
    estimate = np.array(result.error_series["risk_relative"], dtype=float)
    assert relative.max() <= 5e-4
    assert words <= 2e-4
    assert np.all(estimate[1:] >= relative[1:])


KINDS = {  # power-law Σ, a student c I and a teacher that commutes with Σ (the untied kind refuses an aligned init)
    "tied": {"1": {"kind": "identity", "c": 0.5}, "2": {"kind": "aligned", "c": 1.2, "exponent": 0.5}},
    "untied": {"1": {"kind": "identity", "c": 0.3}, "2": {"kind": "identity", "c": 1.0}},
    "direct": {"1": {"kind": "identity", "c": 0.3}, "2": {"kind": "aligned", "c": 1.0, "exponent": 1.0}},
    "symmetric": {"1": {"kind": "identity", "c": 0.3}, "2": {"kind": "aligned", "c": 1.0, "exponent": 0.5}},
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_kind_flows_on_its_diagonals_as_on_its_matrices(kind, monkeypatch):
    """The kinds' own velocity code run on matrices held by their diagonals (`Diagonal`: products elementwise) and
    integrated by BDF is the dense matrix flow — the matrix-model closure at n = 24 over τ ∈ [0, 1], against the
    dense run integrated by DOP853 at rtol 1e-13 (in place of the matrix model's Chebyshev stepper): measured
    ≤ 7.5e-10 on every word (values up to 3.2; tolerance 3e-9). The dense run at the engine's rtol 1e-9 is itself
    up to 1.7e-8 off that reference."""
    config = parse_config(
        {
            "model": {"kind": kind, "K": 2, "trainable": [1]},
            "loss": {"builtin": "mse", "activation": "h1"},
            "data": {"covariance": "power-law", "exponent": 1.0},
            "init": KINDS[kind],
            "truncation": {"degree": 4, "closure": "matrix-model", "size": 24},
            "integrate": {"T": 1.0, "points": 6},
        }
    )
    diagonal = solve_with_closure(config, estimate=False)  # the curves alone are compared
    assert diagonal.extra["method"] == COMMUTING
    _dense_only(monkeypatch)
    monkeypatch.setattr(closures, "CHEBYSHEV", {"method": "DOP853", "rtol": 1e-13, "atol": 1e-15})
    dense = solve_with_closure(config, estimate=False)
    assert dense.extra["method"] == "DOP853"
    gap = max(np.abs(diagonal.series[w] - dense.series[w]).max() for w in dense.series)
    assert gap <= 3e-9, gap


def test_a_state_that_does_not_commute_or_a_velocity_that_is_not_a_matrix_expression_stays_dense(monkeypatch):
    """A Gaussian student beside Σ does not commute with it: the quadrature closure's flow runs on the matrices
    (DOP853). And a velocity that is not a
    matrix expression of the factors (a mutation adding 1e-3 × the sum of Σ's entries × W, which depends on the
    basis) fails the start check of the commuting path: the run is integrated densely rather than wrongly."""
    from tests.helpers import sigma_config

    generic = solve_with_closure(sigma_config(init={"1": {"kind": "gaussian", "scale": 0.7}}, integrate={"T": 0.1}))
    assert generic.extra["method"] == "DOP853"
    original = TiedMatrices.factor_velocities

    def basis_dependent(self, model, factors, coefficients, letters=None):
        moved = original(self, model, factors, coefficients, letters)
        return [v + 1e-3 * np.sum(letters[-1]) * W for v, W in zip(moved, factors)]

    monkeypatch.setattr(TiedMatrices, "factor_velocities", basis_dependent)
    assert solve_with_closure(sigma_config(integrate={"T": 0.1})).extra["method"] == "DOP853"
