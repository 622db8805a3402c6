"""Large-d, many-seed checks: `make test-slow` (marker `slow`), not in the default run."""

import json

import numpy as np
import pytest

from momentgen.compiler.hierarchy import MAX_BYTES, Model, build
from momentgen.compiler.initial import InitSpec
from momentgen.compiler.potential import Potential
from momentgen.compiler.truncation import CoefficientSource
from momentgen.evidence.oracles import solvable_tied_moments
from momentgen.interface.api import verify
from momentgen.reference import matrix_flow, sgd
from momentgen.setting.losses import builtin
from momentgen.setting.matrices import sample_factors
from momentgen.setting.shipped import names

pytestmark = pytest.mark.slow


MODEL = Model("tied", 2, [1])


LINEAR = builtin("mse", L=1, K=2, activation="h1")


INITS = {1: InitSpec(), 2: InitSpec(kind="identity", c=1.0)}


TIMES = np.linspace(0, 0.5, 11)


def test_sgd_bias_is_proportional_to_eta_d_over_b():
    """d = 200, η = 0.016, B = 128 / 256 / 512, 4 seeds each, SGD and flow from the same
    matrices: the mean bias of q11 over t ∈ (0, 0.5] is c·ηd/B with c stable across B (measured
    0.58, 0.56, 0.51: the Itô term; MATH.md §7 quotes ≈ 1.1 for its sup over the run) and
    halves when B doubles. Asserted: c in [0.3, 1.5] at each B, bias(128)/bias(512) in [2.5, 6]."""
    d, lr, biases = 200, 0.016, {}
    for batch in (128, 256, 512):
        diffs = []
        for seed in range(4):
            factors = sample_factors(MODEL, INITS, d, seed=100 + seed)
            flow = matrix_flow(
                MODEL, factors, CoefficientSource(MODEL, Potential(LINEAR, "tied")), times=TIMES, words=["S1 S1"]
            )
            run = sgd(
                MODEL,
                LINEAR,
                INITS,
                d=d,
                lr=lr,
                batch=batch,
                times=TIMES,
                words=["S1 S1"],
                seed=seed,
                factors=factors,
                progress=False,
            )
            diffs.append(run.series["S1 S1"][1:] - flow.series["S1 S1"][1:])
        biases[batch] = float(np.mean(diffs))
        assert 0.3 < biases[batch] / (lr * d / batch) < 1.5, biases
    assert 2.5 < biases[128] / biases[512] < 6, biases


def test_matrix_flow_approaches_the_closed_form_like_one_over_d():
    """Flow from finite-d matrices vs the d = ∞ closed form: sup error on [0, 0.5] shrinks with d
    (MATH.md §7: ≈ 4/d); averaged over 3 draws, d·error stays below 8 and the error at d = 400
    is below half the one at d = 100."""
    errors = {}
    for d in (100, 200, 400):
        values = []
        for seed in range(3):
            factors = sample_factors(MODEL, INITS, d, seed=seed)
            flow = matrix_flow(
                MODEL,
                factors,
                CoefficientSource(MODEL, Potential(LINEAR, "tied")),
                times=TIMES,
                words=["S1 S1", "S1 S2"],
            )
            exact = solvable_tied_moments(TIMES, 1.0, 1.0, 1.0)
            values.append(max(np.abs(flow.series[w] - exact[w]).max() for w in ("S1 S1", "S1 S2")))
        errors[d] = float(np.mean(values))
    assert all(d * e < 8 for d, e in errors.items()), errors
    assert errors[400] < 0.5 * errors[100], errors


def test_matrix_model_closure_at_n_800_on_the_tied_h2_escape():
    """MATH.md §8 case through the escape: the matrix-model closure at n = 800 (deterministic
    quantiles + Haar rotations; ≈ 70 s) stays within O(1/n) of the exact d = ∞ solution
    (measured 3.2e-3 on q, 1.7e-3 on t1 — its Haar mixing is random at O(1/n), so n = 300
    happened to be closer: 1.4e-3). Asserted: 4/n."""
    from pathlib import Path

    from momentgen.dynamics.closures import solve_with_closure
    from momentgen.evidence.oracles import riccati_tied_moments
    from momentgen.setting.config import load_config

    config = load_config(Path(__file__).resolve().parents[2] / "examples" / "configs" / "fig2_tied_h2.toml")
    config = config.replace(integrate=dict(T=2.5, points=26))
    inits = config.inits()
    exact = riccati_tied_moments(Potential(config.loss(), "tied"), inits[1], inits[2], np.linspace(0, 2.5, 26))
    out = solve_with_closure(config, "matrix-model", size=800)
    error = max(np.abs(np.array(out.series[w]) - exact[w]).max() for w in exact)
    assert error < 4 / 800, error


#: verify's budget per shipped example (seconds of the whole run since issue 46: the theory's legs, then SGD): 120 s,
#: and more where the theory is itself costly — the schedules example's closure is an ensemble of 8 stochastic matrix
#: models per size (its closure check alone took 20–40 s, which the plan counts per seed), so 120 s leaves no plan of
#: 3 seeds; noise_floors' theory legs (the stochastic matrix model over t ≤ 10, its zero-closure cross-check, one
#: own-start pair) took over 5 minutes, and 600 s left no plan.
BUDGETS = {"schedules": 300, "noise_floors": 1200}


@pytest.mark.parametrize("name", names())
def test_every_shipped_example_verifies(name):
    """Issue 26 / 40: every shipped configuration verifies `agree` at verify's defaults (d = 100, 200; 8 seeds;
    2000 drift steps) within its budget (`BUDGETS`, else 120 s). Measured: `agree` for all nine; noise_floors (tied
    softmax with label noise, the stochastic matrix model over t ∈ [0, 10]; at budget 300 no plan fits) agrees in
    906 s at budget 600 alone, 1 334 s with the default suite beside, when the budget covered SGD only; since issue
    46 the budget covers the theory's legs too (over 5 minutes here), so it is 1 200 s; schedules (an
    ensemble of stochastic matrix models whose estimate carries 3 standard errors) 96 s, scaling_law (κ = 0.004 since
    issue 40, T = 5) 64 s, on 2 cores with another run beside it. Until issue 40 two were strict xfails: schedules'
    seed-difference estimate was not a bound (the cross-check found 0.0046 where it allowed 0.0015), scaling_law ran
    SGD at κ = 0.0156 without the finite-learning-rate term (drift 8.9 SE off)."""
    result = verify(name, progress=False, budget=BUDGETS.get(name, 120))
    assert result.verdict == "agree", result.message


def test_the_schedules_example_answers_its_question(tmp_path, monkeypatch):
    """examples/schedules.py (about 40 s): at equal samples the decaying schedules end with a lower risk than
    the constant rate, in the theory and in SGD (measured excess over the floor: constant 0.25, cosine
    0.095, steps 0.098; SGD within 0.05 of the theory on every curve)."""
    from .test_examples import run_example

    run_example("schedules.py", tmp_path, monkeypatch, "--seeds", "2")
    data = json.loads((tmp_path / "schedules.json").read_text())
    assert data["figure_checks"] == []
    rows = {row["schedule"]: row for row in data["summary"]}
    constant = rows.pop("constant")
    for row in rows.values():
        assert row["excess_theory"] < 0.6 * constant["excess_theory"]
        assert row["final_risk_sgd"] < constant["final_risk_sgd"]
    assert max(row["sup_sgd_minus_theory"] for row in [constant, *rows.values()]) < 0.1


def test_a_batch_schedule_moves_kappa_as_sgd_feels_it(monkeypatch):
    """[sgd] batch_schedule: the batch ×4 at 30 % of the run (κ = ηd/B from 0.25 to 0.0625), d = 300, B = 64,
    t ∈ [0, 0.3], 3 seeds, the stochastic matrix model of each run's matrices with κ(s) = κ₀/b(u). Measured sup
    over t of |SGD − theory| on μ(S1), μ(S1²): 0.0020, 0.0088 (SE 0.0029, 0.010); with κ held at κ₀ 0.030,
    0.244. Asserted: within 3 SE + 0.01, and the constant κ₀ ≥ 5× worse (measured 28×)."""
    from momentgen.dynamics.closures import solve_with_closure
    from momentgen.setting.config import parse_config
    from momentgen.setting.schedules import TimeChange
    from tests.setting.test_schedules import SOLVABLE, sgd_minus_theory

    batch_schedule = {"schedule": "step", "milestones": [0.3], "factor": 4.0}
    sgd_table = {"d": 300, "lr": 0.25 * 64 / 300, "batch": 64, "batch_schedule": batch_schedule}
    raw = {**SOLVABLE, "integrate": {"T": 0.3, "points": 7, "finite_lr": True}, "sgd": sgd_table}
    config = parse_config(raw)

    def constant_kappa(factors):
        with monkeypatch.context() as patch:
            patch.setattr(TimeChange, "kappa_factor", lambda self, s: 1.0)
            return solve_with_closure(config, "matrix-model", factors=factors, kappa=0.25, estimate=False)

    gap, se, (constant,) = sgd_minus_theory(raw, "matrix-model", 0.25, 300, range(3), [constant_kappa])
    assert np.all(gap <= 3 * se + 0.01), (gap, se)
    assert constant.max() >= 5 * gap.max(), (constant, gap)


def test_degree_20_with_the_finite_lr_term_builds_within_the_default_limit():
    """Issue 31: tied K = 2 at degree 20 with the finite-learning-rate term was refused (estimated 13.6 GiB);
    with the quadratic terms merged within each word as they are derived it builds under the default 8 GiB
    guard. Measured: 58 218 words, 5.8e6 quadratic terms over 3.2e5 distinct pairs, 22 s, 1.7 GB peak RSS;
    the estimate says 1.7 GiB."""
    from momentgen.compiler.hierarchy import estimate

    model = MODEL
    assert estimate(model, 20, "all", noise=True)["bytes"] < MAX_BYTES
    program = build(model, 20, "all", noise=True)
    assert len(program.words) == 58218 and program.has_noise


def _finite_d_risks(raw, d, seeds):
    """The risk along the population flow of finite-d Gaussian students (`sample_factors` at d, seed by seed: the
    reference side's draws, not the matrix model's law factors), stepped by RKC at rtol 1e-6 (≈ 7e-7 from DOP853 at
    1e-9 on this case) — one process's share of `test_a_gaussian_student_against_a_power_law_sigma_over_decades`."""
    from momentgen.dynamics.problem import Problem
    from momentgen.dynamics.risk import theory_risk
    from momentgen.setting.config import parse_config

    config = parse_config(raw)
    out = []
    for seed in seeds:
        factors = sample_factors(config.model, config.inits(), d, seed, data=config.data())
        problem = Problem.from_config(config, factors=factors)
        run = problem.matrix_flow(factors, stepper={"method": "RKC", "rtol": 1e-6, "atol": 1e-9})
        out.append(theory_risk(problem, run.series))
    return out


def _extrapolated_risk(raw, draws):
    """(the d → ∞ risk, 3 of its standard errors relative to it) at the configuration's output times: the mean risks of
    finite-d flows of Gaussian draws (`_finite_d_risks`; ``draws``: {d: seeds}, on two processes) extrapolated linearly
    in 1/d by least squares weighted by each d's sampling variance."""
    from momentgen.core.parallel import run_tasks

    tasks = [(_finite_d_risks, (raw, d, range(i, seeds, 2))) for d, seeds in draws.items() for i in range(2)]
    parts = run_tasks(tasks, n_jobs=2, progress=False)
    risks = [np.array(parts[2 * k] + parts[2 * k + 1]) for k in range(len(draws))]
    design = np.column_stack([np.ones(len(draws)), [1.0 / d for d in draws]])
    reference, standard_error = [], []
    for j in range(risks[0].shape[1]):
        w = np.array([len(r) / r[:, j].var(ddof=1) for r in risks])
        covariance = np.linalg.inv(design.T @ (design * w[:, None]))
        reference.append((covariance @ design.T @ (w * np.array([r[:, j].mean() for r in risks])))[0])
        standard_error.append(np.sqrt(covariance[0, 0]))
    reference = np.array(reference)
    return reference, 3 * np.array(standard_error) / reference


def test_a_gaussian_student_against_a_power_law_sigma_over_decades():
    """Issue 48: tied mse(h1), power-law Σ (a = 2), a Gaussian student, teacher 1.2 Σ^{1/2}, t ∈ [0.1, 50] (risk 0.7
    → 3e-4). The vouching whole-curve closure (the matrix-model ensemble `GENERIC_SIGMA_ENSEMBLE`, Σ sampled by
    quantile strata, a Latin hypercube over the draws; about 1.3 s) against the d → ∞ curve: finite-d flows of
    Gaussian students at d = 100 / 200 / 400 / 800 (32 / 16 / 8 / 4 seeds), extrapolated linearly in 1/d by weighted
    least squares (3 standard errors 0.4–1.1 % of the risk; without d = 800 the extrapolation sat up to 0.8 % lower
    late, where the flows at d = 400 and 800 agree). Measured: the ensemble (``[truncation] seed`` 0) is ≤ 1.60 % off
    at every t (1.60 % at t = 0.45, 1.51 % at t = 50), its relative risk estimate 1.2–6.4 % and ≥ 2.3× the error at
    every t; its draws are a statistical estimate — seeds 1–8 are 1.27–2.96 % off at worst (3 of them above 2 %),
    and every one's estimate covers its error (≥ 1.9× it at every t; the estimate less the error plus the
    reference's noise ≥ 0.013). Asserted: seed 0 off by ≤ 2 % + 3 standard errors of the reference at every t;
    for seeds 0–8 status ok and the estimate not below the error less 3 standard errors.

    The robust design against the same reference: 8 draws of n = 256 (`ROBUST_SIGMA_ENSEMBLE`, its coarse leg 4 of
    128; 1/15.7 of the n = 400 model's wall time and 1/8.4 of its CPU time, `benchmarks/bench_generic_sigma.py`) —
    seeds 0–8 are 0.64–1.34 % off at worst (seed 0: 0.87 %, estimate 1.1–5.0 %), every estimate ≥ 1.5× the error.
    (Measured with the draws' velocity in single precision, `CHEBYSHEV_DRAWS`; in double every seed's error of
    both designs was the same to 0.01 %.)
    Asserted for seeds 0–3: off by ≤ 2 % + the reference's 3 standard errors at every t, the estimate covering the
    error as above, status ok. About 6 minutes on 2 cores in all."""
    from momentgen.dynamics.closures import GENERIC_SIGMA_ENSEMBLE, ROBUST_SIGMA_ENSEMBLE, solve_with_closure
    from tests.helpers import sigma_config

    config = sigma_config(
        data={"exponent": 2.0},
        init={"1": {"kind": "gaussian"}},
        truncation={"closure": "matrix-model", **GENERIC_SIGMA_ENSEMBLE},
        integrate={"T": 50.0, "points": 31, "grid": "log", "log_first": 0.1, "validity_tol": 0.02},
    )
    reference, noise = _extrapolated_risk(config.raw, {100: 32, 200: 16, 400: 8, 800: 4})
    later = np.asarray(config.output_times()) >= 0.1
    cases = [(GENERIC_SIGMA_ENSEMBLE, seed, seed == 0) for seed in range(9)]
    cases += [(ROBUST_SIGMA_ENSEMBLE, seed, True) for seed in range(4)]
    for design, seed, within_two_percent in cases:
        result = solve_with_closure(config.replace(truncation={**design, "seed": seed}))
        error = np.abs(np.asarray(result.derived["risk"]) / reference - 1)[later]
        estimate = np.array(result.error_series["risk_relative"], float)[later]
        assert result.status == "ok", (design, seed, result.message)
        assert np.all(estimate >= error - noise[later]), (design, seed, estimate, error)
        assert not within_two_percent or np.all(error <= 0.02 + noise[later]), (design, seed, error, noise)


@pytest.mark.parametrize("kind", ["direct", "symmetric"])
def test_the_ensemble_vouches_for_a_gaussian_student_against_sigma_in_the_kinds_without_a_mean(kind):
    """Issue 48, every kind: mse(h1), power-law Σ (a = 1), a Gaussian student of scale 0.8, teacher Σ^{1/2},
    t ∈ [0.05, 10] (risk 2 → 3e-4). The vouching ensemble against finite-d flows of Gaussian students at d = 256
    (4 seeds; d = 128's 8 seeds agree within their noise: the finite-d bias is below it). Measured: 0.13–1.9 %
    (direct), 0.16–1.9 % (symmetric) off (with independent strata per draw: 0.05–2.1 % direct), the reference's 3
    standard errors 0.7–5.8 %, the risk estimate 3.0–10.7 % and 4.0–15.6 % (with the stepper's
    measured error on top: 4e-3 of the risk here, about 8× the tied kind's). Asserted: the estimate vouched for (a
    statistical bound; both statuses are partial — the words' estimate passes validity_tol = 0.02 before the
    horizon), off by ≤ 3 % + 3 standard errors, the estimate not below the error less 3 standard errors. Other draws
    (``[truncation] seed`` 1–8) are 1.2–3.8 % (direct) and 1.5–4.3 % (symmetric) off at worst, every estimate ≥ 1.3×
    and ≥ 2.3× its error: asserted, the estimate covering the error for each. About 30 s each."""
    from momentgen.dynamics.closures import GENERIC_SIGMA_ENSEMBLE, solve_with_closure
    from momentgen.setting.config import parse_config

    raw = {
        "model": {"kind": kind, "K": 2, "trainable": [1]},
        "loss": {"builtin": "mse", "activation": "h1"},
        "data": {"covariance": "power-law", "exponent": 1.0},
        "init": {"1": {"kind": "gaussian", "scale": 0.8}, "2": {"kind": "aligned", "c": 1.0, "exponent": 0.5}},
        "truncation": {"degree": 4, "closure": "matrix-model", **GENERIC_SIGMA_ENSEMBLE},
        "integrate": {"T": 10.0, "points": 21, "grid": "log", "log_first": 0.05, "validity_tol": 0.02},
    }
    result = solve_with_closure(parse_config(raw))
    risks = np.array(_finite_d_risks(raw, 256, range(4)))
    reference = risks.mean(axis=0)
    noise = 3 * risks.std(axis=0, ddof=1) / np.sqrt(len(risks)) / reference
    error = np.abs(np.asarray(result.derived["risk"]) / reference - 1)[1:]
    estimate = np.array(result.error_series["risk_relative"], float)[1:]
    assert result.estimate_is_bound, result.message
    assert np.all(error <= 0.03 + noise[1:]), (error, noise)
    assert np.all(estimate >= error - noise[1:]), (estimate, error)
    for seed in range(1, 9):  # other draws: each estimate covers its own error
        other = solve_with_closure(parse_config({**raw, "truncation": {**raw["truncation"], "seed": seed}}))
        error = np.abs(np.asarray(other.derived["risk"]) / reference - 1)[1:]
        estimate = np.array(other.error_series["risk_relative"], float)[1:]
        assert other.estimate_is_bound and np.all(estimate >= error - noise[1:]), (seed, estimate, error)


def test_the_ensemble_vouches_for_an_untied_gaussian_student_and_teacher_against_sigma():
    """Issue 48, the untied kind: fig. 3's h1 (Gaussian student and teacher, no mean) against a power-law Σ (a = 0.5),
    τ ∈ [0.05, 5] (risk 0.8 → 8e-5). The vouching ensemble — its draws centred, Tr(Σ M) = 0 as at d = ∞
    (`UntiedLaws.centred`), Σ sampled by quantile strata, a Latin hypercube over the draws — against finite-d flows
    of Gaussian draws with
    ``mean = 0`` (shifted to Tr(Σ M) = 0 too: a draw's own Tr(Σ M) is a finite-d offset the slaving bias holds,
    which 1/d extrapolates away only slowly) at d = 128 / 256 / 512 (16 / 8 / 8 seeds), extrapolated in 1/d (3
    standard errors: 1.0–3.1 % of the risk to τ = 1.4, 7 % at τ = 5). Measured: +0.9…+4.4 % off to τ = 3.3, −1.3 %
    at τ = 5; the relative risk estimate 6.6–57 % and ≥ 1.9× the error at every τ (with independent strata per draw,
    before the hypercube: up to +15 % at τ = 5, estimate 7.3–24 %). These draws are a statistical estimate: over 32
    sets of 8 draws the error at τ = 0.62 scatters by 1.3 % about +0.5 %, at τ = 5 by 6.7 % about −0.8 % (with
    independent strata: 8.6 % about −2.8 %). With the midpoint quantiles of Σ (before)
    the draws were low late, 22 % at τ = 5 over 32 of them — as low as the d = 128 flows: the lowest quantile bin's
    midpoint misrepresents Σ's edge. Asserted: the estimate vouched for (a statistical bound; the status is partial
    — the words' estimate, 7.3 % at τ = 0, passes validity_tol = 0.02 from the start), off by ≤ 2 % + 3 standard
    errors of the reference and the ensemble together at every τ, the estimate not below the error less 3 standard
    errors of the reference; and that the draws carry no bias: the mean of 64 of them (seeds 1000–1063) is within 3
    standard errors of its own and the reference's together at every τ (measured: −3.9…+0.8 %, its SE 0.2–3.0 %;
    the midpoint quantiles' 32 draws were 22 % low at τ = 5, 11 SE). Other draws (``[truncation] seed`` 1–8) are
    −5.6…+10.2 % off, and each one's estimate (1.8–85 %) covers its error less the reference's noise (the closest:
    seed 2, 0.97× the error at one τ, by a margin of 0.009 once the noise is counted): asserted for seeds 0–8. About
    6.5 minutes on 2 cores."""
    from momentgen.dynamics.closures import GENERIC_SIGMA_ENSEMBLE, solve_with_closure
    from momentgen.setting.config import load_config, parse_config

    raw = {
        **load_config("fig3_untied_h1").raw,
        "data": {"covariance": "power-law", "exponent": 0.5},
        "truncation": {"degree": 4, "closure": "matrix-model", **GENERIC_SIGMA_ENSEMBLE},
        "integrate": {"T": 5.0, "points": 13, "grid": "log", "log_first": 0.05, "validity_tol": 0.02},
    }
    result = solve_with_closure(parse_config(raw))
    centred = {**raw, "init": {k: {**spec, "mean": 0.0} for k, spec in raw["init"].items()}}
    reference, noise = _extrapolated_risk(centred, {128: 16, 256: 8, 512: 8})
    risk = np.asarray(result.derived["risk"])
    error = np.abs(risk / reference - 1)[1:]
    estimate = np.array(result.error_series["risk_relative"], float)[1:]
    own = 3 * np.asarray(result.error_series["risk_standard_error"]) / risk
    assert result.estimate_is_bound, result.message
    assert np.all(error <= 0.02 + np.hypot(noise, own)[1:]), (error, noise, own)
    assert np.all(estimate >= error - noise[1:]), (estimate, error)
    many = _many_draws(parse_config(raw), 64)  # the ensemble's mean itself, to its own 3 SE: no bias left late
    assert np.all(np.abs(many[0] / reference - 1) <= np.hypot(noise, 3 * many[1] / many[0])), (many, reference)
    for seed in range(1, 9):  # other draws: each estimate covers its own error
        other = solve_with_closure(parse_config({**raw, "truncation": {**raw["truncation"], "seed": seed}}))
        error = np.abs(np.asarray(other.derived["risk"]) / reference - 1)[1:]
        estimate = np.array(other.error_series["risk_relative"], float)[1:]
        assert other.estimate_is_bound and np.all(estimate >= error - noise[1:]), (seed, estimate, error)


def _many_draws(config, draws):
    """(risk, its standard error) of one ensemble of ``draws`` draws of n = 128 (seeds 1000…), as the closure averages
    them (`run_ensembles`: Σ sampled by strata, a Latin hypercube over the draws, the control variate its lowest
    eigenvalue)."""
    from momentgen.dynamics.ensemble import run_ensembles
    from momentgen.dynamics.problem import Problem
    from momentgen.dynamics.risk import theory_risk

    problem = Problem.from_config(config)
    means = problem.fast_phase().get("m_star", problem.means)
    run = run_ensembles(problem, {"many": (128, range(1000, 1000 + draws))}, means)["many"]
    return theory_risk(problem, run.series, means), run.info["risk_standard_error"]
