"""Spectra of the attention matrices (issue 28, item 3): the closures' reconstructions against the exact
pulled-back distribution of the solvable tied case, and the ``spectrum`` command.

Independent value: on the solvable case (teacher I, Wishart student of ratio 1) every eigenvalue follows the
monotone logistic map λ(t) = λ₀/(λ₀ + (1 − λ₀)e^{−4t}), so the CDF at t is the Marchenko–Pastur CDF
pulled back, F_t(x) = F_0(λ₀(x, t)), with F_0(x) = (1/π)[(v/2)√(4 − v²) + 2 arcsin(v/2)], v = √x.
"""

import numpy as np
import pytest

import momentgen as mg
from momentgen.core.errors import MomentgenError
from momentgen.setting.config import parse_config
from tests.helpers import RISK_SOLVABLE as SOLVABLE


def exact_cdf(x, t):
    """F_t(x) of the solvable case (see the module docstring)."""
    x = np.asarray(x, dtype=float)
    E = np.exp(-4.0 * t)
    top = np.inf if t == 0 else 1.0 / (1.0 - E)
    with np.errstate(divide="ignore", invalid="ignore"):
        lam0 = np.where((x > 0) & (x < top), x * E / (1.0 - x + x * E), 0.0)
    v = np.sqrt(np.clip(lam0, 0.0, 4.0))
    F = (v / 2 * np.sqrt(4 - v**2) + 2 * np.arcsin(v / 2)) / np.pi
    return np.where(x >= top, 1.0, np.where(x <= 0, 0.0, F))


def kolmogorov(result, t):
    """sup |F_model − F_t| on a grid fine everywhere and finer still around 1, where the spectrum piles up."""
    near = 1 + np.concatenate([-np.logspace(-9, -1, 400), np.logspace(-9, -1, 400)])
    x = np.union1d(np.linspace(0.0, 4.5, 9001), near)
    return np.abs(result.spectrum("S1", t, x=x)["cdf"] - exact_cdf(x, t)).max()


def test_the_exact_cdf_is_the_marchenko_pastur_law_at_t0():
    """F_0 is a CDF on [0, 4] whose mean is 1 (the Wishart moment μ(S1) = 1) — the closed form checked."""
    x = np.linspace(0, 4, 40001)
    F = exact_cdf(x, 0.0)
    assert F[0] == 0 and F[-1] == pytest.approx(1.0, abs=1e-12) and np.all(np.diff(F) >= -1e-15)
    assert np.trapezoid(1 - F, x) == pytest.approx(1.0, abs=1e-4)


def test_the_quadrature_spectrum_is_within_kolmogorov_003_of_the_exact_law():
    """Degree 25 (order n = 12): Kolmogorov distance at t = 0, 0.5, 1, 2 measured 0.0056, 0.0062, 0.0063, 0.0062
    with the edge layer of `momentgen.laws.edge` (asserted ≤ 0.02; the issue's target is 0.03). Without it (the plain
    Gauss rule) 0.016, 0.016, 0.017, 0.024: the largest gap was at the hard edge, where the smallest node's mass
    was spread down to 0."""
    config = parse_config({**SOLVABLE, "integrate": {"T": 2.0, "points": 5}})
    result = mg.solve(config, spectra=True)
    distances = [kolmogorov(result, t) for t in (0.0, 0.5, 1.0, 2.0)]
    assert max(distances) <= 0.02, distances


def test_the_matrix_model_spectrum_is_close_to_the_exact_law():
    """The matrix model at n = 400 (eigenvalues at the law's quantiles, each on its own logistic flow here):
    Kolmogorov distance measured 1.4e-3 at t = 0.5 (≤ 1.7e-3 on t ∈ [0, 2]; most of it the smoothing of
    `reconstruct`, which thins knots closer than 2 % in mass); asserted ≤ 4e-3."""
    config = parse_config({**SOLVABLE, "truncation": {"degree": 9, "closure": "matrix-model", "size": 400,
                                                      "observables": ["S1 S1"]},
                           "integrate": {"T": 0.5, "points": 3}})  # fmt: skip
    result = mg.solve(config, spectra=True)
    assert kolmogorov(result, 0.5) <= 4e-3


def test_the_band_of_the_gauss_rule_holds_the_exact_cdf_at_t0():
    """At t = 0 the quadrature state is the exact Gauss rule of the Marchenko–Pastur law, so the
    Chebyshev–Markov–Stieltjes band it reports contains the exact CDF everywhere."""
    result = mg.solve(parse_config({**SOLVABLE, "integrate": {"T": 0.1, "points": 2}}), spectra=True)
    curve = result.spectrum("S1", 0.0)
    exact = exact_cdf(curve["x"], 0.0)
    assert np.all(curve["cdf_low"] <= exact + 1e-9) and np.all(exact <= curve["cdf_high"] + 1e-9)


def test_spectrum_asks_for_what_the_result_has():
    result = mg.solve(parse_config({**SOLVABLE, "integrate": {"T": 0.1, "points": 3}}), spectra=True)
    with pytest.raises(MomentgenError, match="not an output time"):
        result.spectrum("S1", 0.07)
    with pytest.raises(MomentgenError, match="no spectrum of 'S2'"):
        result.spectrum("S2", 0.05)
    added = mg.solve(parse_config({**SOLVABLE, "integrate": {"T": 0.1, "points": 3}}), times=[0.07], spectra=True)
    assert added.spectrum("S1", 0.07)["t"] == pytest.approx(0.07)
    zero = mg.solve(parse_config({**SOLVABLE, "truncation": {"degree": 6, "closure": "zero"},
                                  "integrate": {"T": 0.01, "points": 3}}))  # fmt: skip
    with pytest.raises(MomentgenError, match="the zero closure has no state"):
        zero.spectrum("S1", 0.0)
    with pytest.raises(MomentgenError, match="solve with spectra=True"):
        mg.solve(parse_config({**SOLVABLE, "integrate": {"T": 0.1, "points": 3}})).spectrum("S1", 0.0)
