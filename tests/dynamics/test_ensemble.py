"""Matrix-model ensembles with control variates (`momentgen.dynamics.ensemble`)."""

import numpy as np
import pytest

from momentgen.compiler.potential import Potential
from momentgen.core.errors import ModelError
from momentgen.dynamics.closures import solve_with_closure
from momentgen.dynamics.ensemble import control_variate_mean, main_branch
from momentgen.evidence.oracles import riccati_tied_moments
from momentgen.setting.config import load_config


def test_control_variates_recover_the_mean_with_a_calibrated_standard_error():
    """Synthetic draws ``y = f + β·x + ε`` with E[x] = 0: the intercept is unbiased, its |error| / SE
    follows a t law (2 000 repetitions of 40 draws: one word inside 2 SE in 0.946 of them, both words in
    0.894 ≈ 0.95²; asserted ≥ 0.855), and it is closer to f than the plain mean when x explains most
    of the spread (ratio of RMS errors measured 5.8; asserted ≥ 3)."""
    rng = np.random.default_rng(0)
    f, beta = np.array([1.0, -2.0]), np.array([[0.8, -0.3], [0.5, 1.2], [0.0, 0.7]])
    inside, cv_sq, plain_sq, reps = 0, 0.0, 0.0, 2000
    for _ in range(reps):
        x = rng.standard_normal((40, 3))
        y = f + x @ beta + 0.2 * rng.standard_normal((40, 2))
        mean, error = control_variate_mean(y, x)
        inside += np.all(np.abs(mean - f) <= 2 * error)
        cv_sq += np.sum((mean - f) ** 2)
        plain_sq += np.sum((y.mean(axis=0) - f) ** 2)
    assert inside / reps >= 0.90 * 0.95  # two words: P(both inside) ≈ 0.95² ≈ 0.90
    assert np.sqrt(plain_sq / cv_sq) >= 3.0


def test_control_variates_keep_degrees_of_freedom():
    """More controls than draws allow: only the largest-variance ones are used, four residual degrees of
    freedom stay, and constant controls are ignored (the intercept of 10 draws is finite and the SE > 0)."""
    rng = np.random.default_rng(1)
    x = np.column_stack([rng.standard_normal((10, 20)), np.ones(10)])
    y = 3.0 + x[:, 0] + 0.1 * rng.standard_normal(10)
    mean, error = control_variate_mean(y, x)
    assert np.isfinite(mean) and error > 0
    assert abs(mean - 3.0) < 5 * error + 0.5  # a loose sanity bound: 10 draws, 5 controls


def test_control_variates_do_not_extrapolate_a_systematic_offset():
    """A control whose draws all sit off its d = ∞ value (mean 3 spreads away: a finite-d untied μ(M) = m/√d)
    is not used: the intercept stays the plain mean of the draws (the regression would move it by
    β × offset = 0.6, here 23 SE), and the others still reduce the noise."""
    rng = np.random.default_rng(2)
    x = np.column_stack([rng.standard_normal(40), 0.2 + 0.05 * rng.standard_normal(40)])
    y = 1.0 + 0.8 * x[:, 0] + 3.0 * x[:, 1] + 0.02 * rng.standard_normal(40)
    mean, error = control_variate_mean(y, x)
    with_offset = 1.0 + 3.0 * 0.2  # what the draws estimate
    assert abs(mean - with_offset) <= 3 * error and error < 0.05
    plain = y.std(ddof=1) / np.sqrt(40)
    assert error < 0.5 * plain  # the first control is used: error 0.026 vs plain 0.125 (measured)


def test_main_branch_leaves_out_draws_on_another_attractor_only():
    """Synthetic trajectories: 14 draws near +0.5 and 2 near −0.5 (untied h2 at n = 50) — the two are
    left out; 2 000 ensembles of 40 Gaussian draws (20 words × times each) — none ever loses a draw
    (10 robust deviations: a Gaussian tail of 1e-23); an even 8/8 split is bimodal and kept whole."""
    rng = np.random.default_rng(3)
    values = 0.5 + 0.02 * rng.standard_normal((16, 3, 5))
    values[[3, 12]] *= -1
    assert np.flatnonzero(~main_branch(values)).tolist() == [3, 12]
    assert all(main_branch(rng.standard_normal((40, 4, 5))).all() for _ in range(2000))
    values[:8] *= -1
    assert main_branch(values).all()


def test_ensemble_beats_one_draw_on_the_tied_escape():
    """Tied h2 escape over t ∈ [0, 2.5] against the exact Riccati oracle, matrix model n = 100:
    one draw 2.2e-2 off, 16 draws with control variates 2.1e-3 (measured; asserted ≤ 6e-3 and
    ≤ ½ of one draw's error), and the ensemble's estimate (2.2e-2) is not below its error."""
    config = load_config("fig2_tied_h2").replace(integrate={"T": 2.5, "points": 26}, truncation={"size": 100})
    t = np.linspace(0, 2.5, 26)
    inits = config.inits()
    exact = riccati_tied_moments(Potential(config.loss(), "tied"), inits[1], inits[2], t)

    def error(result):
        return max(np.abs(np.asarray(result.series[w]) - exact[w]).max() for w in ("S1", "S1 S1", "S1 S2"))

    one = solve_with_closure(config, "matrix-model")
    ensemble = solve_with_closure(config.replace(truncation={"draws": 16}), "matrix-model")
    assert error(ensemble) <= 6e-3
    assert error(ensemble) <= 0.5 * error(one)
    assert ensemble.error_estimate >= error(ensemble)
    assert ensemble.status == "unverified" and "3 standard errors" in ensemble.message


@pytest.mark.parametrize("draws", [2, 3])
def test_an_ensemble_needs_four_draws(draws):
    config = load_config("fig2_tied_h2").replace(integrate={"T": 0.1, "points": 3}, truncation={"draws": draws})
    with pytest.raises(ModelError, match="draws"):
        solve_with_closure(config, "matrix-model")
