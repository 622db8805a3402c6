"""The code that judges (issue 40): verdicts, estimates, windows and statuses, checked on constructed inputs
whose right answer is known by hand — not by running the same code beside itself.

Each test names the one-line mutant it kills (the closing note has the table mutant → test); the mutants were
applied by hand to the module and the test was seen to fail.
"""

import types

import numpy as np
import pytest

from momentgen.dynamics.integrate import last_time_within, validity_horizon
from momentgen.dynamics.risk import relative_risk_estimate
from momentgen.evidence.verification import DRIFT_REST, SIGMAS, Verification, _verdict, drift_judgement
from momentgen.setting.config import load_config
from momentgen.setting.data import DataCovariance


def _records(sgd_minus_theory, se, theory):
    """Drift records at d₁ and d₂ with the same SGD − theory gap (so the extrapolated gap is that gap)."""
    theory = np.asarray(theory, float)
    return [{"sgd": theory + np.asarray(sgd_minus_theory, float), "se": np.asarray(se, float), "theory": theory}] * 2


# ---- verify's drift check ---------------------------------------------------------------------------------------


def test_the_drift_check_passes_only_when_every_observable_is_within_tolerance():
    """Two observables, one exactly on the theory and one 10 SE off: the check fails and names the second
    (kills `all` → `any` in `drift_judgement`; before, every verify test perturbed all observables at once)."""
    a, b = _records([0.0, 10.0], [1.0, 1.0], [0.0, 0.0])
    gap, se, tolerance, passed, worst = drift_judgement(a, b, 1 / 100, 1 / 200)
    assert not passed and worst == 1
    a, b = _records([0.0, 0.0], [1.0, 1.0], [0.0, 0.0])
    assert drift_judgement(a, b, 1 / 100, 1 / 200)[3]


def test_the_drift_tolerance_is_four_standard_errors_plus_one_percent():
    """The documented rule (README, MATH.md §7): |gap| ≤ 4 SE + 1 % |drift|. With equal per-d SEs s the
    extrapolated SE is s·√(x₁² + x₂²)/(x₁ − x₂) = s·√5 for d = 100, 200; a gap just inside passes, just outside
    fails (kills a changed SIGMAS, DRIFT_REST, a max for the hypot, or the theory's scale taken at d₁)."""
    assert SIGMAS == 4.0 and DRIFT_REST == 0.01
    x1, x2 = 1 / 100, 1 / 200
    se_ext = np.sqrt(x1**2 + x2**2) / (x1 - x2)  # √5
    theory = np.array([3.0])
    edge = 4 * se_ext + 0.01 * 3.0
    for factor, expected in ((0.999, True), (1.001, False)):
        a, b = _records([edge * factor], [1.0], theory)
        gap, se, tolerance, passed, _ = drift_judgement(a, b, x1, x2)
        assert se[0] == pytest.approx(se_ext, rel=1e-12) and tolerance[0] == pytest.approx(edge, rel=1e-12)
        assert passed is expected


def test_the_drift_gap_is_extrapolated_linearly_in_x_to_zero():
    """SGD − theory = 5 + 300 x at both d (a pure O(1/d) correction on top of a d = ∞ gap of 5): the extrapolation
    returns 5 (kills swapped x₁/x₂ or a missing sign)."""
    x1, x2 = 1 / 100, 1 / 200
    theory = np.array([1.0])
    a = {"sgd": theory + 5 + 300 * x1, "se": np.array([0.1]), "theory": theory}
    b = {"sgd": theory + 5 + 300 * x2, "se": np.array([0.1]), "theory": theory}
    assert drift_judgement(a, b, x1, x2)[0][0] == pytest.approx(5.0, rel=1e-12)


# ---- verify's verdict ---------------------------------------------------------------------------------------------


CONFIG = load_config("fig4_linear")


@pytest.mark.parametrize(
    "passes, verdict",
    [
        ({"drift": True, "closure": True, "cross-check": None, "finite-d": True}, "agree"),
        ({"drift": True, "closure": True, "cross-check": True, "finite-d": False}, "disagree"),
        ({"drift": False, "closure": True, "cross-check": True, "finite-d": True}, "disagree"),
        ({"drift": True, "closure": True, "cross-check": False, "finite-d": None}, "disagree"),
        ({"drift": False, "closure": True, "cross-check": True, "finite-d": False}, "disagree"),
    ],
)
def test_the_verdict_is_agree_only_without_a_failed_check(passes, verdict):
    """A check not run (None) is not a failure; any False is `disagree`, and the message is that check's (kills
    `is False` → `not`, `failing[0]` → `failing[-1]`, an `any` over passes)."""
    checks = {name: {"passed": passed, "message": f"{name} said so"} for name, passed in passes.items()}
    result = _verdict(CONFIG, checks, kappa=0.001, curve_kappa=0.0)
    assert isinstance(result, Verification) and result.verdict == verdict
    if verdict == "disagree":
        first = next(name for name, passed in passes.items() if passed is False)
        assert result.message.startswith(f"{first}: {first} said so")


def test_a_closure_that_cannot_be_verified_is_not_agree():
    """The closure leg's `cannot` (no whole-curve closure for this curve) gives `cannot verify`, never `agree`."""
    checks = {"drift": {"passed": True, "message": ""}, "closure": {"passed": None, "cannot": True, "message": "no"}}
    assert _verdict(CONFIG, checks, 0.001, 0.0).verdict == "cannot verify"


# ---- windows and estimates ------------------------------------------------------------------------------------------


def test_last_time_within_is_the_last_grid_time_before_the_first_excess():
    """A difference equal to the tolerance is within; the window ends at the grid time before the first excess,
    even when later times come back under it (kills `>` → `>=`, `bad[0]` → `bad[-1]`, and the off-by-one)."""
    t = np.array([0.0, 1.0, 2.0, 3.0, 4.0])
    assert last_time_within(t, [0.0, 0.1, 0.1, 0.2, 0.0], 0.1) == 2.0
    assert last_time_within(t, [0.0, 0.1, 0.1, 0.1, 0.1], 0.1) == 4.0
    assert last_time_within(t, [0.5, 0.0, 0.0, 0.0, 0.0], 0.1) == 0.0


def _run(t, y, words, t_stop):
    return types.SimpleNamespace(t=np.asarray(t, float), y=np.asarray(y, float), words=words, t_stop=t_stop)


def test_the_validity_horizon_is_relative_and_never_past_either_run():
    """Degrees M and M − 2 on a word of size 100: a difference of 0.5 is 0.005 relative (within 0.01); the fine
    run stopped at 1.5, so the horizon is 1.5 although the two agree to t = 3 (kills `min` → `max` over the stops,
    and the relative scale max(1, |μ|) dropped)."""
    t = [0.0, 1.0, 2.0, 3.0]
    fine = _run(t, [[100.0], [100.5], [100.5], [100.5]], ["S1"], 1.5)
    coarse = _run(t, [[100.0], [100.0], [100.0], [100.0]], ["S1"], 3.0)
    assert validity_horizon(fine, coarse, ["S1"], 0.01) == 1.5
    fine.t_stop = 3.0
    assert validity_horizon(fine, coarse, ["S1"], 0.01) == 3.0
    assert validity_horizon(fine, coarse, ["S1"], 0.004) == 0.0
    assert validity_horizon(fine, None, ["S1"], 0.01) == 0.0  # nothing vouches without a coarser run


def test_the_relative_risk_estimate_divides_by_the_smaller_leg_and_never_decreases():
    """Legs 1 and 10: the relative error is 9 (|1 − 10|/1), not 0.9; a 10.5 % gap reads 0.105 > `RISK_TOL`; once
    large the estimate stays large (kills min → max in the denominator, and the running maximum dropped)."""
    from momentgen.dynamics.risk import RISK_TOL

    estimate = relative_risk_estimate(np.array([1.0, 1.0, 1.0]), [np.array([1.0, 10.0, 1.0])])
    assert np.allclose(estimate, [0.0, 9.0, 9.0])
    estimate = relative_risk_estimate(np.array([1.0]), [np.array([1.105])])
    assert estimate[0] == pytest.approx(0.105, rel=1e-12) and estimate[0] > RISK_TOL
    assert relative_risk_estimate(np.array([1.0]), []) is None


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
    from momentgen.dynamics.results import Result

    problem = Problem(CONFIG)
    for valid_until, status in ((0.5, "partial"), (1.0, "ok")):
        result = Result(
            np.array([0.0, 0.5, 1.0]),
            "ok",
            "fine",
            model="tied",
            closure="zero",
            time_scale="t",
            series={},
            derived={},
            valid_until=valid_until,
        )
        reported = _reported(problem, result)
        assert reported.status == status
    assert (
        "vouched for until 0.5 of 1"
        in _reported(
            problem,
            Result(
                np.array([0.0, 0.5, 1.0]),
                "ok",
                "fine",
                model="tied",
                closure="zero",
                time_scale="t",
                series={},
                derived={},
                valid_until=0.5,
            ),
        ).message
    )


# ---- the finite-d leg's extrapolation --------------------------------------------------------------------------


def test_the_finite_d_leg_fails_when_one_observable_is_out():
    """`_extrapolate` on constructed per-d gaps: one word on the theory, one 50 SE off at every time — the verdict
    fails and names it (kills `max` → `min` over the words' ratios, or `<=` flipped)."""
    from momentgen.evidence.verification import _extrapolate

    config = types.SimpleNamespace(model=CONFIG.model)
    t = np.linspace(0.0, 1.0, 5)
    theory = types.SimpleNamespace(t=t, series={"A": np.zeros(5), "B": np.zeros(5)})

    def gaps(offset):
        return {"mean": {"A": np.zeros(5), "B": np.full(5, offset)}, "se": {"A": np.full(5, 0.01),
                "B": np.full(5, 0.01)}, "bound": np.zeros(5)}  # fmt: skip

    check, _ = _extrapolate(config, theory, {100: gaps(0.5), 200: gaps(0.5)}, (100, 200), 0.0, 8, t)
    assert not check["passed"] and "μ(B)" in check["message"]
    check, _ = _extrapolate(config, theory, {100: gaps(0.0), 200: gaps(0.0)}, (100, 200), 0.0, 8, t)
    assert check["passed"]


# ---- Σ from a file, the run state, the edge layer -------------------------------------------------------------------


def test_a_file_sigmas_moments_are_means_of_powers():
    """τ(Σ^p) of a file's spectrum is mean(λ^p) (kills mean(λ)^p: here 0.911 vs 0.819 at p = 2 — the zero closure's
    start was 10 % off and only the quadrature path was tested). Independent value: numpy on the input."""
    values = np.array([0.2, 0.5, 0.9, 1.3, 1.6])
    sigma = DataCovariance("from-file", path="x", values=tuple(values))
    for p in (1, 2, 3, 0.5, -1):
        assert sigma.moment(p) == pytest.approx(np.mean(values**p), rel=1e-14)
    nodes, weights = sigma.rule(2)  # the Gauss rule of the file's measure: exact to degree 5
    for p in range(6):
        assert np.sum(weights * nodes**p) == pytest.approx(np.mean(values**p), rel=1e-12)


def test_the_zero_closure_starts_from_the_files_moments(tmp_path):
    """End to end: the zero closure's μ(S1 Sigma S1 Sigma) at t = 0 is σ⁴(τ(Σ)² + τ(Σ²)) of the file (square Wishart
    student, σ = 0.8) — the zero closure reads the exact moments, not the quadrature rule."""
    from momentgen.dynamics.closures import solve_with_closure
    from momentgen.setting.config import parse_config

    values = np.array([0.2, 0.5, 0.9, 1.3, 1.6])
    np.savez(tmp_path / "s.npz", eigenvalues=values)
    raw = {
        "model": {"kind": "tied", "K": 2, "trainable": [1]},
        "loss": {"builtin": "mse", "activation": "h1"},
        "data": {"covariance": "from-file", "path": str(tmp_path / "s.npz")},
        "init": {"1": {"kind": "gaussian", "scale": 0.8}, "2": {"kind": "aligned"}},
        "truncation": {"degree": 4, "closure": "zero", "observables": ["S1 Sigma S1 Sigma"]},
        "integrate": {"T": 0.01, "points": 2},
        "sgd": {"d": 5},
    }
    result = solve_with_closure(parse_config(raw))
    m1, m2 = values.mean(), np.mean(values**2)
    assert result.series["S1 Sigma S1 Sigma"][0] == pytest.approx(0.8**4 * (m1**2 + m2), rel=1e-12)


def test_solve_advances_the_run_state_after_every_accepted_step(monkeypatch):
    """`integrate.solve` threads the run's `RunState`: `Truncation.advanced` is called after each accepted step of a
    kind with a mean, from the state the previous call returned, and the truncation is left holding the last one
    (kills a solve that never advances the state — the slaved mean's branch would then be the start's forever)."""
    from momentgen.compiler.truncation import Truncation, from_config
    from momentgen.dynamics.integrate import solve

    config = load_config("fig3_untied_h1", truncation={"degree": 3}, integrate={"T": 0.05, "points": 3})
    truncation, y0 = from_config(config)
    calls, real = [], Truncation.advanced

    def spy(self, y, state=None):
        calls.append((state, real(self, y, state)))
        return calls[-1][1]

    monkeypatch.setattr(Truncation, "advanced", spy)
    solve(truncation, y0, 0.05, points=3)
    assert len(calls) >= 2
    assert all(state is previous for (state, _), (_, previous) in zip(calls[1:], calls[:-1]))
    assert truncation.state is calls[-1][1]


def test_the_edge_layer_has_every_cell_and_the_laws_mass():
    """The layer is cut into ⌈depth/step⌉ cells of width `EDGE_STEP` in log x plus the last one reaching the edge,
    `CELL_POINTS` nodes each, and carries exactly the law's mass on [a, a + window] (scipy's quad of the density,
    independent). Kills the layer one cell short (at the top: 2 % of the mass; at the bottom: a node count off by 2 —
    `test_edge` allowed ±4 nodes)."""
    from scipy.integrate import quad

    from momentgen.laws.edge import CELL_POINTS, EDGE_DEPTH, EDGE_STEP, _layer, free_poisson_law

    law = free_poisson_law(1.0, 0.64)
    window = 0.05
    nodes, weights = _layer(law, window, EDGE_STEP, EDGE_DEPTH)
    cells = int(np.ceil(EDGE_DEPTH / EDGE_STEP)) + 1
    assert len(nodes) == CELL_POINTS * cells
    mass = quad(lambda v: law.density(v * v) * 2 * v, 0.0, np.sqrt(window), epsabs=0.0, epsrel=1e-13)[0]
    assert weights.sum() == pytest.approx(mass, rel=1e-10)
    assert nodes.min() < window * np.exp(-EDGE_DEPTH)
