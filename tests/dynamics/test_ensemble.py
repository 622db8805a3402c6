"""Matrix-model ensembles with control variates (`momentgen.dynamics.ensemble`)."""

import numpy as np
import pytest

import momentgen as mg
from momentgen.compiler.initial import law_factors
from momentgen.compiler.potential import Potential
from momentgen.core.errors import ModelError
from momentgen.dynamics.closures import (
    CLOSURES,
    GENERIC_SIGMA_ENSEMBLE,
    generic_sigma,
    gives_way,
    solve_with_closure,
    vouching_ensemble,
    whole_curve_closure,
    with_noise,
)
from momentgen.dynamics.ensemble import control_variate_mean, main_branch
from momentgen.dynamics.problem import Problem
from momentgen.dynamics.risk import theory_risk
from momentgen.dynamics.stepper_check import stepper_error
from momentgen.evidence.oracles import riccati_tied_moments
from momentgen.setting import flow
from momentgen.setting.config import load_config, parse_config
from tests.helpers import sigma_config


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


def _generic_sigma(**integrate):
    """Tied mse(h1), power-law Σ with a = 2, a Gaussian student, teacher 1.2 Σ^{1/2}, on a log grid to ``T``."""
    return sigma_config(
        data={"exponent": 2.0},
        init={"1": {"kind": "gaussian"}},
        integrate={"grid": "log", "points": 31, "log_first": 0.1, "validity_tol": 0.02, **integrate},
    )


def test_the_chebyshev_steppers_move_a_dense_matrix_model_as_dop853_does_in_a_fraction_of_the_evaluations():
    """A Gaussian student against a power-law Σ (a = 2) to t = 50, one flat-mixed draw of n = 32, from the same
    matrices: a single draw's stepper (`flow.CHEBYSHEV`, RKC at rtol 1e-5) and an ensemble draw's (`CHEBYSHEV_DRAWS`,
    1e-3) against DOP853 at the engine's rtol 1e-9 — the risk 3.3e-5 / 6.7e-4 relative apart at worst, within 3×
    the stepper error an estimate carries for this problem (`stepper_check.stepper_error`: measured on the same draw
    here), in 1 454 / 553 evaluations where DOP853 takes 7 409 (asserted ≥ 3× / ≥ 5× fewer). With the draws'
    velocity in single precision (`flow.SINGLE`): 7.5e-4 in 543."""
    problem = Problem.from_config(_generic_sigma(T=50.0))
    factors = law_factors(problem.model, problem.specs, 32, data=problem.data, flat=True)
    exact = problem.law_run(factors)
    assert exact.info["method"] == "DOP853"
    risk = theory_risk(problem, exact.series)
    for stepper, fewer in ((flow.CHEBYSHEV, 3), (flow.CHEBYSHEV_DRAWS, 5)):
        fast = problem.law_run(factors, stepper=stepper)
        assert fast.info["method"] == "RKC"
        gap = np.abs(theory_risk(problem, fast.series) / risk - 1)
        assert np.all(gap <= 3 * stepper_error(problem, None, stepper)["risk"]), gap
        assert fewer * fast.info["nfev"] <= exact.info["nfev"]


def _untied_sigma():
    """fig. 3's untied h1 (Gaussian student and teacher) against a power-law Σ (a = 0.5), τ ∈ [0.05, 5]."""
    return parse_config(
        {
            **load_config("fig3_untied_h1").raw,
            "data": {"covariance": "power-law", "exponent": 0.5},
            "truncation": {"degree": 4, "closure": "matrix-model"},
            "integrate": {"T": 5.0, "points": 13, "grid": "log", "log_first": 0.05},
        }
    )


@pytest.mark.parametrize(("config", "risk_gap"), [(lambda: _generic_sigma(T=50.0), 2.4e-4), (_untied_sigma, 7e-5)])
def test_an_ensemble_draw_multiplies_in_single_precision_and_moves_as_in_double(config, risk_gap, monkeypatch):
    """`flow.CHEBYSHEV_DRAWS` evaluates a draw's velocity in single precision (`flow.SINGLE`: about 1.6× faster at
    n = 256, where the products are most of a draw), its stepper in double. One flat-mixed draw of n = 32, seeds 0–2,
    against the same stepper in double precision: the tied scaling-law case (a = 2, t ≤ 50) 2.0e-5–7.8e-5 relative
    apart on the risk, the untied a = 0.5 case 1.2e-6–2.2e-5 — a tenth of the draws' stepper error or less (tied 6e-4
    –7.5e-4, untied 4e-3–1.2e-2 against DOP853 at 1e-9), which the stepper check measures against a double-precision
    reference. Evaluations: 543–575 against 553–581, 182–192 against 182–188 (a radius differenced at double
    precision's √eps in a single-precision velocity made it 811 against 557 at n = 256). Asserted on seed 0: every
    velocity the kind returns is single precision, the risk within 3× the largest gap measured, the evaluations
    within 5 %."""
    config = config()
    problem = Problem.from_config(config)
    means = problem.fast_phase().get("m_star", problem.means)
    factors = law_factors(problem.model, problem.specs, 32, data=problem.data, flat=True)
    matrices = type(problem.model.definition.matrices)
    dtypes, velocities = set(), matrices.factor_velocities

    def recorded(self, *args, **kwargs):
        out = velocities(self, *args, **kwargs)
        dtypes.update(np.asarray(p).dtype for v in out for p in (v if isinstance(v, tuple) else (v,)))
        return out

    monkeypatch.setattr(matrices, "factor_velocities", recorded)
    single = problem.law_run(factors, means, stepper=flow.CHEBYSHEV_DRAWS)
    assert dtypes == {np.dtype(np.float32)}
    double = problem.law_run(factors, means, stepper={**flow.CHEBYSHEV_DRAWS, "precision": flow.DOUBLE})
    assert np.dtype(float) in dtypes
    gap = np.abs(theory_risk(problem, single.series, means) / theory_risk(problem, double.series, means) - 1)
    assert np.all(gap <= 3 * risk_gap), gap
    assert abs(single.info["nfev"] / double.info["nfev"] - 1) <= 0.05


def test_single_precision_is_for_the_chebyshev_stepper_only():
    """A dense stepper other than RKC has no way to be told its evaluations' precision: asked for single, the flow
    refuses in one line; an unknown precision too."""
    problem = Problem.from_config(_generic_sigma(T=0.5))
    factors = law_factors(problem.model, problem.specs, 8, data=problem.data, flat=True)
    for stepper in ({"method": "DOP853", "rtol": 1e-6, "atol": 1e-9, "precision": flow.SINGLE},
                    {**flow.CHEBYSHEV_DRAWS, "precision": "half"}):  # fmt: skip
        with pytest.raises(ValueError, match="precision"):
            problem.law_run(factors, stepper=stepper)


def test_a_gaussian_student_beside_sigma_gets_the_vouching_ensemble():
    """Issue 48: a Gaussian student against a power-law Σ is two non-commuting letters at Σ's edge (`generic_sigma`):
    the whole-curve closure is the matrix-model ensemble at `GENERIC_SIGMA_ENSEMBLE` (what `solve` without a closure
    and `verify` run when the zero closure's window ends early); the commuting scaling-law case keeps the
    quadrature closure with Σ's edge layer, and an isotropic Gaussian case is not generic."""
    generic, commuting = _generic_sigma(T=1.0), sigma_config()
    assert generic_sigma(generic) and not generic_sigma(commuting)
    assert not generic_sigma(load_config("fig2_tied_h2"))
    whole = whole_curve_closure(generic, 0.0)
    assert whole.name == "matrix-model" and whole.checked_resolution(generic) == GENERIC_SIGMA_ENSEMBLE
    assert whole_curve_closure(commuting, 0.0).name == "quadrature"
    assert CLOSURES["matrix-model"].checked_resolution(commuting) == {}


def test_a_flat_mixed_ensemble_vouches_for_its_estimate_on_the_exact_tied_escape():
    """The vouching ensemble's estimate (sizes n and n/2 plus 3 standard errors; flat mixing, 8 draws, κ = 0) against
    the exact Riccati solution of the tied h2 escape (t ∈ [0, 2.5]), at n = 64: error 1.05e-2, estimate ≥ 1.87×
    it at every t > 0 (measured; n = 128: 6.7e-3, ≥ 2.1×) — a statistical bound, and the status says so (not
    "unverified"); a Haar-mixed size (n = 100) keeps the unverified status. The risk's own standard error is
    reported (``error_series["risk_standard_error"]``), and 3 of it, relative, are inside the risk's estimate."""
    config = load_config("fig2_tied_h2").replace(integrate={"T": 2.5, "points": 26})
    t = np.linspace(0, 2.5, 26)
    inits = config.inits()
    exact = riccati_tied_moments(Potential(config.loss(), "tied"), inits[1], inits[2], t)
    result = solve_with_closure(config.replace(truncation={"size": 64, "draws": 8}), "matrix-model")
    error = np.max([np.abs(np.asarray(result.series[w]) - exact[w]) for w in ("S1", "S1 S1", "S1 S2")], axis=0)
    estimate = np.array(result.error_series["estimate"], float)
    assert result.estimate_is_bound and "statistical bound" in result.message
    assert result.status != "unverified"
    assert np.all(estimate[1:] >= error[1:])
    assert error.max() <= 0.03
    noise = 3 * np.asarray(result.error_series["risk_standard_error"]) / np.asarray(result.derived["risk"])
    assert np.all(noise > 0) and np.all(np.array(result.error_series["risk_relative"], float) >= noise)


def test_solve_gives_a_configured_quadrature_closure_up_for_the_ensemble_on_a_from_file_sigma(tmp_path):
    """A from-file Σ (the power law's 2 000 eigenvalues) beside a Gaussian student, the quadrature closure configured
    and no closure named: the quadrature closure vouches for nothing there (t = 0 of 1), so `solve` runs the vouching
    ensemble instead and says so (`vouching_closure`, `gives_way`) — status ok, its risk estimate within 10 %."""
    path = tmp_path / "sigma.npz"
    np.savez(path, eigenvalues=3 * ((np.arange(2000) + 0.5) / 2000) ** 2)
    raw = _generic_sigma(T=1.0, points=11).raw
    raw["data"] = {"covariance": "from-file", "path": str(path)}
    result = mg.solve(parse_config(raw))
    assert result.closure == "matrix-model" and "so the matrix-model closure was run" in result.message
    assert result.status == "ok" and result.extra["risk_valid_until"] == 1.0


def test_only_measured_ensembles_vouch_for_their_estimate():
    """`vouching_ensemble`: 8 flat-mixed draws at both sizes, κ = 0, all on one branch, in every kind (the untied one
    too, since its draws are centred: tests/end_to_end/test_slow.py) — yes; the same legs with 4 draws, Haar mixing,
    κ > 0, or draws left out on another branch — no."""

    class Leg:
        def __init__(self, draws=8, flat=True, other_branch=0):
            self.info = {"draws": draws, "flat": flat, "standard_error": {}}
            if other_branch:
                self.info["other_branch"] = other_branch

    tied = Problem.from_config(_generic_sigma(T=1.0))
    untied = Problem.from_config(load_config("fig3_untied_h1"))
    assert vouching_ensemble(tied, {"fine": Leg(), "coarse": Leg(4)})
    assert vouching_ensemble(untied, {"fine": Leg(), "coarse": Leg()})
    assert not vouching_ensemble(tied, {"fine": Leg(4), "coarse": Leg(4)})
    assert not vouching_ensemble(tied, {"fine": Leg(flat=False), "coarse": Leg()})
    assert not vouching_ensemble(untied, {"fine": Leg(), "coarse": Leg(other_branch=1)})
    assert not vouching_ensemble(
        Problem.from_config(_generic_sigma(T=1.0), kappa=0.05), {"fine": Leg(), "coarse": Leg()}
    )


def test_a_draw_a_few_thousandths_off_is_a_fluctuation_not_another_branch():
    """`main_branch` with `BRANCH_GAP`: among 8 draws whose values agree to 1e-4, one 2e-3 away is 15+ robust
    deviations off — a fluctuation of a Gaussian student against a power-law Σ at n = 128 that was once left out —
    and is kept; 0.5 away (an O(1) branch) it is left out."""
    rng = np.random.default_rng(4)
    values = 1.35 + 1e-4 * rng.standard_normal((8, 2, 3))
    values[3, 0, 1] -= 2e-3
    assert main_branch(values).all()
    values[3, 0, 1] -= 0.5
    assert np.flatnonzero(~main_branch(values)).tolist() == [3]


def test_the_risk_estimate_carries_three_standard_errors_of_the_ensemble():
    """`with_noise`: the size gap's relative estimate plus 3 standard errors of the risk relative to it, as a running
    maximum (hand-computed: gaps 0.01, 0.02, 0.01 and SE 0.001, 0.002, 0.0005 of risks 1, 0.5, 0.1 give 0.013, 0.032,
    0.032); without an ensemble's standard error the estimate is unchanged."""
    estimate = np.array([0.01, 0.02, 0.01])
    risk = np.array([1.0, 0.5, 0.1])
    info = {"risk_standard_error": np.array([0.001, 0.002, 0.0005])}
    np.testing.assert_allclose(with_noise(estimate, risk, info), [0.013, 0.032, 0.032])
    assert with_noise(estimate, risk, {}) is estimate


def test_which_configured_closures_give_way_to_the_whole_curve_one():
    """`gives_way`: the zero closure always (its window comes from its degrees); on a generic Σ case any closure but
    the matrix model; on the commuting scaling-law case the quadrature closure is kept."""
    generic, commuting = _generic_sigma(T=1.0), sigma_config()
    assert gives_way(generic, "quadrature") and gives_way(generic, "zero") and gives_way(commuting, "zero")
    assert not gives_way(generic, "matrix-model") and not gives_way(commuting, "quadrature")


def test_a_draw_task_builds_its_problem_once_per_ensemble():
    """`ensemble._problem`: the draws of one ensemble in one process share one `Problem` (built once, not per draw);
    another configuration, κ or set of output times gets its own, and only the latest is kept."""
    from momentgen.dynamics import ensemble

    raw = load_config("fig3_untied_h1").raw
    first = ensemble._problem(raw, None, 0.0, ())
    assert ensemble._problem(dict(raw), None, 0.0, ()) is first
    assert ensemble._problem(raw, None, 0.01, ()).kappa == 0.01
    assert ensemble._problem(raw, None, 0.0, (0.05,)).output_times == (0.05,)
    other = {**raw, "integrate": {**raw["integrate"], "T": 0.05}}
    assert ensemble._problem(other, None, 0.0, ()).integrate.T == 0.05
    assert len(ensemble._PROBLEMS) == 1 and ensemble._problem(raw, None, 0.0, ()) is not first


def test_the_draws_of_a_leg_are_a_latin_hypercube_over_sigmas_strata():
    """In every quantile bin of Σ the 8 draws of a leg (seeds 20–27) fall in 8 distinct eighths of it — one each —
    while each draw alone is still one uniform point per bin (its positions reproducible, and another leg orders
    them otherwise)."""
    from momentgen.dynamics.ensemble import draw_spectrum

    problem = Problem.from_config(sigma_config(data={"exponent": 0.5}))
    leg, n = (20, 8), 16
    spectra = np.array([draw_spectrum(problem, n, seed, leg)[0] for seed in range(20, 28)])
    u = (spectra / 1.5) ** 2 * n - np.arange(n)  # the power law's quantile function inverted: position in each bin
    assert np.all((u >= 0) & (u < 1))
    assert all(sorted(column) == list(range(8)) for column in np.floor(u * 8).astype(int).T)
    assert np.array_equal(spectra[3], draw_spectrum(problem, n, 23, leg)[0])
    assert not np.array_equal(spectra[3], draw_spectrum(problem, n, 23, (16, 8))[0])


def test_an_ensemble_samples_sigma_by_strata_and_so_has_no_edge_bias():
    """The exact commuting case (student 0.5 I, teacher 1.2 Σ^½, power-law Σ with a = ½: each direction of Σ a
    logistic flow, `aligned_tied_average`; the risk is a linear statistic of Σ's spectrum, so its late tail is read
    at Σ's lower edge, and Σ's sampling is all the noise). An ensemble of 32 draws of size 8, its stratified Σ a Latin
    hypercube over the draws (`draw_spectrum`, the edge the control variate), against the exact d = ∞ risk on
    t ∈ [0.5, 5] (risk 2.6e-2 → 3.3e-5): measured ≤ 0.68 % relative, 0.063 of its standard error (14 % at t = 5:
    that of independent draws, an over-estimate under the hypercube); with independent strata per draw 12.5 %, 1.2
    standard errors. Asserted: within 3 standard errors and 2 % relative. The midpoint quantiles of one n = 8 model
    are 46–85 % high for t ≥ 2.6, 5.8–8.0 of those standard errors (asserted: above 4 somewhere) — the bias the draws
    no longer have. A draw's spectrum is reproducible from its seed and its edge control is its smallest eigenvalue
    less that one's expectation (computed here by hand)."""
    from momentgen.dynamics.ensemble import draw_spectrum, run_ensembles
    from momentgen.evidence.oracles import aligned_tied_average

    config = sigma_config(data={"exponent": 0.5}, integrate={"T": 5.0, "points": 9, "grid": "log", "log_first": 0.5})
    problem = Problem.from_config(config)
    spectrum, edge = draw_spectrum(problem, 8, 3)
    assert np.array_equal(spectrum, draw_spectrum(problem, 8, 3)[0])
    assert not np.array_equal(spectrum, draw_spectrum(problem, 8, 4)[0])
    assert edge == pytest.approx(spectrum[0] - 8**-0.5, rel=1e-12)  # n ∫₀^{1/n} (1 + a)u^a du = n^{−a}
    run = run_ensembles(problem, {"draws": (8, range(32))}, None)["draws"]
    risk, standard_error = theory_risk(problem, run.series), run.info["risk_standard_error"]
    exact = aligned_tied_average(run.t, "risk", 0.5, 0.5, 1.2, 0.5)
    assert np.all(np.abs(risk - exact)[1:] <= 3 * standard_error[1:]), (risk / exact - 1, standard_error / risk)
    assert np.all(np.abs(risk / exact - 1)[1:] <= 0.02), risk / exact - 1
    midpoint_model = law_factors(problem.model, problem.specs, 8, data=problem.data)
    midpoint = theory_risk(problem, problem.law_run(midpoint_model).series)
    assert np.max(np.abs(midpoint - exact)[1:] / standard_error[1:]) > 4


def test_an_ensemble_is_the_same_on_one_process_or_two(monkeypatch):
    """``n_jobs`` (`mg.solve`, ``--jobs``) only divides an ensemble's draws among processes: a small generic-Σ
    ensemble (8 draws of n = 16 and 4 of n = 8, t ∈ [0.1, 1]) gives the same curve, estimate and status to the last
    bit on one process and on two (each draw is a function of its seed alone; two, not more, so that the suite's
    shared worker is not resized), the batch is asked for that many processes (the default: `ENSEMBLE_JOBS`), and
    a bad ``n_jobs`` is a one-line error before anything runs."""
    from momentgen.core.errors import MomentgenError
    from momentgen.dynamics import ensemble

    asked = []

    def recorded(tasks, n_jobs=None, **options):
        asked.append(n_jobs)
        return run_tasks(tasks, n_jobs=n_jobs, **options)

    run_tasks = ensemble.run_tasks
    monkeypatch.setattr(ensemble, "run_tasks", recorded)
    config = _generic_sigma(T=1.0, points=7).replace(truncation={"closure": "matrix-model", "size": 16, "draws": 8})
    one, two, default = (mg.solve(config, n_jobs=jobs) for jobs in (1, 2, None))
    assert asked == [1, 2, ensemble.ENSEMBLE_JOBS]
    for other in (two, default):
        assert other.status == one.status and other.message == one.message
        for name in one.series:
            assert np.array_equal(other.series[name], one.series[name]), name
        assert np.array_equal(other.error_series["risk_relative"], one.error_series["risk_relative"])
    for bad in (0, 2.5, True):
        with pytest.raises(MomentgenError, match="n_jobs must be a whole number"):
            mg.solve(config, n_jobs=bad)
    assert asked == [1, 2, ensemble.ENSEMBLE_JOBS]


def test_the_truncation_seed_picks_disjoint_draws_whose_curves_agree_within_their_estimates():
    """``[truncation] seed``: every random thing of the matrix model takes a seed. Seed 0 is the draws it always took
    (fine seeds 0…S−1, coarse S…); seeds 0, 1, 2 draw disjoint seed ranges; and the three ensembles of a generic-Σ
    case (8 draws of n = 16, 4 of n = 8, t ∈ [0.1, 1]) differ — other draws — by no more than their relative risk
    estimates together (measured: at most 0.32 of that sum; the estimates 19–27 % at worst)."""
    config = _generic_sigma(T=1.0, points=7).replace(truncation={"closure": "matrix-model", "size": 16, "draws": 8})
    seeded = [config.replace(truncation={"seed": s}) for s in range(3)]
    legs = [CLOSURES["matrix-model"].legs(Problem.from_config(c), None, None)[1] for c in seeded]
    assert legs[0] == {"fine": (16, range(0, 8)), "coarse": (8, range(8, 12))}
    seeds = [set(leg["fine"][1]) | set(leg["coarse"][1]) for leg in legs]
    assert all(not a & b for i, a in enumerate(seeds) for b in seeds[i + 1 :])
    runs = [solve_with_closure(c) for c in seeded]
    estimates = [np.array(run.error_series["risk_relative"], float)[1:] for run in runs]
    risks = [np.asarray(run.derived["risk"])[1:] for run in runs]
    for i in range(3):
        for j in range(i + 1, 3):
            gap = np.abs(risks[i] / risks[j] - 1)
            assert np.any(gap > 0) and np.all(gap <= estimates[i] + estimates[j]), (gap, estimates[i] + estimates[j])
