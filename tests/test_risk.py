"""The population risk (MATH.md §12): the theory's Φ along a curve, and SGD's fresh-sample estimate.

Independent values: the logistic closed form of the solvable tied case (`momentgen.evidence.oracles`) for the
theory, and Gaussian identities on finite matrices for the SGD side (for symmetric A and x ~ N(0, I),
``Var(xᵀAx) = 2 Tr A²``; for any A, ``E[(xᵀAx)²] = (Tr A)² + Tr(AAᵀ) + Tr(A²)``).
"""

import numpy as np
import pytest

import momentgen as mg
from momentgen.evidence.oracles import solvable_tied_average as exact_moment
from momentgen.evidence.oracles import solvable_tied_risk as exact_risk
from momentgen.models import Model
from momentgen.reference import RiskProbe
from momentgen.setting.config import parse_config
from momentgen.setting.losses import builtin

from .test_quadrature import SOLVABLE as QUADRATURE_SOLVABLE

SOLVABLE = {  # MATH.md §6's solvable case (tests/test_quadrature.py) at degree 25 on t ∈ [0, 1]
    **QUADRATURE_SOLVABLE,
    "truncation": {**QUADRATURE_SOLVABLE["truncation"], "degree": 25},
    "integrate": {"T": 1.0, "points": 11},
}


#: MATH.md §12's hard-edge case: a square Wishart student of scale 0.8, teacher 1.5 I.
HARD_EDGE = {
    **SOLVABLE,
    "init": {"1": {"kind": "gaussian", "scale": 0.8}, "2": {"kind": "identity", "c": 1.5}},
    "integrate": {"T": 5.0, "points": 26},
}


def test_the_theory_risk_is_phi_along_the_curve_on_the_solvable_case():
    """Quadrature closure at degree 25 on t ∈ [0, 0.5] (risk 2.0 → 0.6): relative error ≤ 3e-3 (measured
    8.7e-4 at t = 0.5); at t = 0 the risk is Φ at the Marchenko–Pastur moments, 2(q11 − 2 t1 + 1) = 2."""
    result = mg.solve(parse_config(SOLVABLE))
    risk, exact = np.asarray(result.derived["risk"]), exact_risk(result.t)
    assert risk[0] == pytest.approx(2.0, rel=1e-12)
    relative = np.abs(risk / exact - 1)[result.t <= 0.5]
    assert relative.max() < 3e-3, relative
    frame = result.to_pandas()
    assert "risk" in frame and frame["risk"].iloc[-1] == pytest.approx(risk[-1])


def _hard_edge(degree, rate=1.0, T=5.0):
    init = {**HARD_EDGE["init"], "1": {"kind": "gaussian", "scale": 0.8, "width_ratio": rate}}
    truncation = {**SOLVABLE["truncation"], "degree": degree}
    integrate = {"T": T, "points": int(round(5 * T)) + 1}
    return mg.solve(parse_config({**HARD_EDGE, "init": init, "truncation": truncation, "integrate": integrate}))


@pytest.mark.parametrize("degree", [7, 13, 25])
def test_the_risk_tail_is_right_in_relative_terms_on_the_hard_edge(degree):
    """The issue's target on MATH.md §12's case (exact risk 2.3 → 1.1e-6 on t ∈ [0, 5]): ≤ 10 % relative error,
    asserted at 1e-3. Measured with the edge layer (`momentgen.laws.edge`): 3.3e-4 at degrees 7, 13 and 25 (the layer's
    O(step⁴), the same at every order). Before it, at degree 13: 0.016 / 1.6e-4 / 1.3e-7 / 7.7e-13 at
    t = 1 / 1.5 / 2 / 3, relative error 0.91 / 1.0 / 1.0 from t = 1 (degree 25: first above 10 % at t = 0.8).
    The risk's estimate is relative and never below the true error (measured 1.3e-3 against 3.3e-4), so the risk
    is vouched for over the whole horizon. The per-word estimate, in the scale it states (|error| / max(1, |μ|)),
    is never below the error of μ(S1²) and μ(S1 S2) = c μ(S1) against every eigenvalue's logistic flow
    (smallest ratio measured 6.3 / 2.3 / 1.6 at degrees 7 / 13 / 25; true ≤ 2e-5)."""
    result = _hard_edge(degree)
    true = np.abs(np.asarray(result.derived["risk"]) / exact_risk(result.t, 1.5, 0.8) - 1)
    estimate = np.array([np.inf if e is None else e for e in result.error_series["risk_relative"]])
    assert true.max() <= 1e-3, true
    assert np.all(true <= estimate + 1e-12)
    assert result.extra["risk_valid_until"] == 5.0
    assert result.extra["error_scale"] == "max(1, |mu|)"
    exact = {"S1 S1": exact_moment(result.t, 2, 1.5, 0.8), "S1 S2": 1.5 * exact_moment(result.t, 1, 1.5, 0.8)}
    true = np.max([np.abs(result.series[w] - v) / np.maximum(1.0, np.abs(v)) for w, v in exact.items()], axis=0)
    estimate = np.array([np.inf if e is None else e for e in result.error_series["estimate"]])
    assert np.all(true <= estimate), np.min(estimate / np.maximum(true, 1e-300))
    assert result.status in ("ok", "partial") and "edge layer" in result.message


@pytest.mark.parametrize("rate", [1.1, 2.0])
def test_the_tail_is_right_near_a_soft_edge(rate):
    """Students of width ratio 1.1 and 2: the spectrum starts at σ²(1 − √r)² (1.5e-3, 0.11) > 0, every
    eigenvalue escapes in finite time, and the tail is a 1/x² moment dominated by the eigenvalues near that
    edge. On t ∈ [0, 2.4] (risk 2.2 → 8e-9 and 1.6 → 3e-11; later, a risk formed from O(1) moments is below
    double precision) at degree 13: relative error ≤ 1e-3 (measured 2.8e-4, 2.1e-4; the plain Gauss rule is
    8 % off at r = 2, 33 % at r = 1.5), the estimate never below it."""
    result = _hard_edge(13, rate=rate, T=2.4)
    true = np.abs(np.asarray(result.derived["risk"]) / exact_risk(result.t, 1.5, 0.8, rate=rate) - 1)
    estimate = np.array([np.inf if e is None else e for e in result.error_series["risk_relative"]])
    assert true.max() <= 1e-3 and np.all(true <= estimate + 1e-12), true


def test_the_zero_closure_reports_partial_past_its_window():
    """MATH.md §12's example of a status that lied: the zero closure run past valid_until said "ok". It now
    says "partial", and to_pandas marks the rows it does not vouch for. (The closure is named in the call: where
    none is named, `solve` runs the closure that vouches for the horizon instead — issue 45.)"""
    truncation = {"degree": 8, "closure": "zero", "observables": ["S1 S1"]}
    integrate = {"T": 0.06, "points": 61, "validity_tol": 1e-2}
    result = mg.solve(parse_config({**SOLVABLE, "truncation": truncation, "integrate": integrate}), closure="zero")
    frame = result.to_pandas()
    assert result.status == "partial" and 0 < result.valid_until < 0.06
    assert list(frame["vouched"]) == [t <= result.valid_until + 1e-12 for t in frame.index]
    assert "vouched for until" in result.message


def _probe(kind, seed):
    model = Model(kind, 2, [1])
    return RiskProbe(model, builtin("mse", 1, 2, activation="h1"), None, np.random.default_rng(seed), 40_000)


def test_the_sgd_risk_probe_estimates_the_population_risk_of_tied_matrices(rng):
    """Tied, L = 1, ℓ = (G1 − G2)² with G_k = (xᵀS_k x − Tr S_k)/√d: E[ℓ] = 2 Tr((S1 − S2)²)/d. 40 000
    samples: within 4 standard errors of it (the SE is itself checked against the exact variance's scale)."""
    d = 60
    W1, W2 = (rng.standard_normal((d, d)) / np.sqrt(d) for _ in range(2))
    D = W1 @ W1.T - W2 @ W2.T
    exact = 2 * np.trace(D @ D) / d
    mean, se = _probe("tied", 1).measure([W1, W2])
    assert abs(mean - exact) < 4 * se and 0 < se < 0.05 * exact, (mean, exact, se)


def test_the_sgd_risk_probe_sees_the_untied_mean(rng):
    """Untied: G_k = xᵀ U_k V_kᵀ x/√d is not centred; with D = M1 − M2, E[ℓ] = ((Tr D)² + Tr(DDᵀ) + Tr(D²))/d —
    the mean's square (Tr D)²/d included."""
    d = 60
    factors = [(rng.standard_normal((d, d)) / np.sqrt(d), rng.standard_normal((d, d)) / np.sqrt(d)) for _ in range(2)]
    factors[0] = (factors[0][0] + np.eye(d) / d**0.25, factors[0][1] + np.eye(d) / d**0.25)  # a mean of order 1
    D = factors[0][0] @ factors[0][1].T - factors[1][0] @ factors[1][1].T
    exact = (np.trace(D) ** 2 + np.trace(D @ D.T) + np.trace(D @ D)) / d
    mean, se = _probe("untied", 2).measure(factors)
    assert abs(mean - exact) < 4 * se and np.trace(D) ** 2 / d > 0.5, (mean, exact, se)


def test_simulate_reports_the_risk_with_its_standard_error():
    """SGD's risk at t = 0 on the solvable case at d = 80: the student's exact finite-d risk
    2 Tr((S − I)²)/d averaged over two seeds is ≈ 2 (Marchenko–Pastur: 2(2 − 2 + 1)); the estimate is within
    4 standard errors of 2 + O(1/d)."""
    config = parse_config({**SOLVABLE, "integrate": {"T": 0.05, "points": 3}, "sgd": {"d": 80, "seeds": [0, 1]}})
    result = mg.simulate(config)
    risk, se = np.asarray(result.derived["risk"]), np.asarray(result.extra["risk_se"])
    assert risk.shape == se.shape == (3,) and np.all(se > 0)
    assert abs(risk[0] - 2.0) < 4 * se[0] + 0.1, (risk[0], se[0])
    assert risk[-1] < risk[0]  # it learns


def test_the_risk_is_plotted_on_a_log_axis_and_written_to_the_csv(tmp_path):
    """`plot(words=["risk"], log=True)` draws Φ on a log axis; `solve --json` writes the risk column beside the
    words in its CSV, equal to the JSON's derived risk."""
    import csv
    import json

    from momentgen.interface.cli import main

    result = mg.solve(parse_config({**SOLVABLE, "integrate": {"T": 0.5, "points": 6}}))
    ax = result.plot(words=["risk"], log=True)
    assert ax.get_yscale() == "log" and ax.get_ylabel() == "population risk"
    config = tmp_path / "c.toml"
    config.write_text(
        '[model]\nkind = "tied"\nK = 2\ntrainable = [1]\n[loss]\nbuiltin = "mse"\n[init.1]\n[init.2]\n'
        'kind = "identity"\n[truncation]\ndegree = 9\nclosure = "quadrature"\nobservables = ["S1 S1"]\n'
        "[integrate]\nT = 0.2\npoints = 5\n"
    )
    assert main(["solve", str(config), "--json", str(tmp_path / "r.json")]) == 0
    rows = list(csv.DictReader((tmp_path / "r.csv").open()))
    risk = json.loads((tmp_path / "r.json").read_text())["derived"]["risk"]
    assert [float(r["risk"]) for r in rows] == pytest.approx(risk)


def test_the_riccati_power_law_tail_is_right_in_relative_terms():
    """MATH.md §8's Riccati case with a rank-½ teacher (Wishart of ratio 0.5) and a rectangular student
    (ratio 2, spectrum away from 0): the student's directions in the teacher's kernel decay like 1/t, the risk
    like 1/t² (9.5 → 1.5e-4 on t ∈ [0, 20]). Each node of the closure's rule follows its own 1/t, so the
    quadrature closure at degree 11 gets the tail right: relative error ≤ 4e-3 against the exact
    subordination oracle (measured 1.3e-3; 6.5e-4 at degree 13), and it vouches for the whole horizon
    (risk_valid_until = 20).
    (With a *square* student the hard edge at 0 adds MATH.md §12's problem: measured 3–10 % relative error and
    an estimate that vouches for nothing. The edge layer that fixes it on the hard-edge tests above needs every
    other letter to be a scalar; here the teacher is not.)"""
    from momentgen.compiler.potential import Potential
    from momentgen.evidence.oracles import riccati_tied_moments

    raw = {
        "model": {"kind": "tied", "K": 2, "trainable": [1]},
        "loss": {"builtin": "mse", "activation": "h1"},
        "init": {"1": {"kind": "gaussian", "width_ratio": 2.0}, "2": {"kind": "gaussian", "width_ratio": 0.5}},
        "truncation": {"degree": 11, "observables": ["S1 S1", "S1 S2", "S1"], "closure": "quadrature"},
        "integrate": {"T": 20.0, "points": 11},
    }
    config = parse_config(raw)
    result = mg.solve(config)
    potential, inits = Potential(config.loss(), "tied"), config.inits()
    exact = riccati_tied_moments(potential, inits[1], inits[2], result.t, n=60)
    q22 = result.series["S2 S2"][0]
    risk = [potential.at(*(np.array([[a, b], [b, q22]]),) * 2).phi for a, b in zip(exact["S1 S1"], exact["S1 S2"])]
    assert risk[-1] < 2e-4 and risk[5] / risk[-1] == pytest.approx(4, rel=0.15)  # the 1/t² tail
    assert np.max(np.abs(np.asarray(result.derived["risk"]) / risk - 1)) <= 4e-3
    assert result.extra["risk_valid_until"] == 20.0


def test_the_local_slope_column_follows_the_exact_commuting_solution():
    """Issue 45: the derived column ``risk_slope`` (d log risk / d log t on the output grid) against the exact local
    slope of the commuting power-law case (`oracles.aligned_tied_average`, a = 1, teacher 1.2 Σ^{1/2}, student 0.5 I;
    central differences of its log at t e^{±0.001}, independent of the grid). Measured on t ∈ [0.5, 2] (21 points):
    within 0.015 (the grid's second-order differences in log t); tolerance 0.04. On this window the slope still moves
    (−2.2 → −2.5), and `settled_slope` says so."""
    import momentgen as mg
    from momentgen.dynamics.risk import settled_slope
    from momentgen.evidence.oracles import aligned_tied_average

    result = mg.solve("scaling_law", integrate={"T": 2.0, "points": 21})
    t, slope = np.asarray(result.t), np.asarray(result.derived["risk_slope"])

    def exact(x, h=1e-3):
        risk = [aligned_tied_average(x * np.exp(s * h), "risk", 1.0, 0.5, 1.2, 0.5)[0] for s in (1, -1)]
        return (np.log(risk[0]) - np.log(risk[1])) / (2 * h)

    late = t >= 0.5
    gap = np.abs(slope[late] - np.array([exact(x) for x in t[late]]))
    assert gap.max() < 0.04, gap.max()
    assert np.isnan(slope[0])  # t = 0 has no log
    exponent, since, message = settled_slope(t, slope)
    assert exponent is None and "not settled" in message


def test_settled_slope_reads_an_exponent_only_once_the_slope_is_flat():
    """A pure power law t^−1.5 has settled (−1.5 over the last decade); t^−1.5 (1 + 10/t) has not on t ≤ 100 (its
    slope still moves by 0.08 there), nor does a run shorter than a decade."""
    from momentgen.dynamics.risk import local_slope, settled_slope

    t = np.geomspace(0.1, 100, 80)
    exponent, since, message = settled_slope(t, local_slope(t, t**-1.5))
    assert exponent == pytest.approx(-1.5, abs=1e-9) and since == pytest.approx(10.0) and "settled" in message
    moving = local_slope(t, t**-1.5 * (1 + 10 / t))
    assert settled_slope(t, moving)[0] is None
    assert settled_slope(t[t > 20], local_slope(t[t > 20], t[t > 20] ** -1.5))[0] is None
