"""The stochastic matrix model's stepping (`setting.flow.run_stochastic`, docs/FINITE_LR.md §3): a stiff linear mode
keeps its exact stationary variance at steps the stiffness allows, the drift is first-order accurate on a transient,
the noise matrices have the law they claim, and the steps follow the stiffness, not a fixed step."""

import pathlib
import runpy

import numpy as np
import pytest

from momentgen.compiler.initial import law_factors
from momentgen.core.chebyshev import RHO_SAFETY, power_radius
from momentgen.dynamics.problem import Problem
from momentgen.dynamics.risk import theory_risk
from momentgen.interface.api import solve
from momentgen.reference import initial_factors
from momentgen.setting import flow
from momentgen.setting.config import load_config, parse_config

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
DIRECT = {
    "model": {"kind": "direct", "K": 2, "trainable": [1]},
    "loss": {"builtin": "mse", "activation": "h1"},
    "init": {"1": {}, "2": {}},
    "truncation": {"degree": 2, "observables": ["S1 S1^T"]},
    "integrate": {"T": 5.0, "points": 101},
}


class _LinearSource:
    """Coefficients that make the direct kind's trainable S an Ornstein–Uhlenbeck matrix: dS = −2a S dt − dH,
    E[dH_ab dH_cd] = (κN dt / n)(δ_ac δ_bd + δ_ad δ_bc) (N1 = N2 = N)."""

    words, state, errors = [], None, ()

    def __init__(self, a, kappa_n, swap=1.0):
        self.a, self.kappa_n, self.swap = a, kappa_n, swap  # N2 = swap × N1

    def coefficients(self, mu, noise=True, t=None, state=None):
        arrays = {"A": np.array([[self.a, 0.0], [0.0, 0.0]]), "B": np.zeros((2, 2)), "gamma": 0.0}
        if noise:
            arrays["N1"] = np.array([[self.kappa_n, 0.0], [0.0, 0.0]])
            arrays["N2"] = self.swap * arrays["N1"]
        return arrays

    def advanced(self, mu, state):
        return state

    def kappa_at(self, t):
        return 1.0


def test_a_stiff_linear_mode_keeps_its_exact_stationary_variance():
    """S symmetric OU with rate λ = 2a = 500, n = 32, from S = 0, t ∈ [0, 5]: the exact stationary
    (1/n) Tr(S Sᵀ) is κN (n + 1) / (2 λ n) (off-diagonal entries of variance κN/(2λn), diagonal twice that). Past
    t ≈ 1.5 the step is held by the stiffness, at hλ = 1.25 (where Euler–Maruyama's variance would be 1.7× too large,
    and the scheme before, Heun's drift with the noise at the step's start, 2.7× at its fixed step 2e-3, hλ = 1).
    Averaged over the 50 outputs in t ∈ [2.5, 5] (each 25 correlation times apart): measured −1.5 / +0.8 / +0.9 % from
    exact at noise seeds 3 / 4 / 5 (spread 1.3 %). Asserted: within 4 % (3× the spread; Euler–Maruyama's +67 % or
    the scheme before would fail it); 2 325 steps in all (≈ 900 growing, then 3.5 / 0.0025), asserted ≤ 2 600."""
    problem = Problem.from_config(parse_config(DIRECT))
    n, a, kappa_n = 32, 250.0, 1.0
    factors = [np.zeros((n, n)), np.eye(n)]
    run = flow.run_stochastic(problem.model, factors, _LinearSource(a, kappa_n), times=problem.times,
                              codes=[(0, 1)], texts=["q"], seed=3)  # fmt: skip
    exact = kappa_n * (n + 1) / (2 * (2 * a) * n)
    late = run.t >= 2.5
    assert abs(np.mean(run.series["q"][late]) / exact - 1) <= 0.04
    assert run.info["steps"] <= 2600


@pytest.mark.parametrize("points", [94, 120])
def test_the_recorded_state_keeps_its_stationary_variance_between_steps(points):
    """The OU mode above recorded on grids that do not fall on its steps (``points`` outputs on [0, 5]: 21.5 and 16.8
    stiff steps of 0.0025 apart). A last step h' before an output, shorter than the steps h before it, leaves the
    recorded state off its stationary law: on a linear mode of rate λ its variance moves by 2λ(h − h')(3/4 − λh'/2)
    of itself, +54 % at hλ = 1.25, h' = 0.504 h (94 points). Measured with the last step shortened (the stepping
    before): +54 / +54 / +54 % (94 points) and +12 / +13 / +11 % (120) at noise seeds 3 / 4 / 5; in equal steps: −2.1
    / −0.2 / +0.7 % and −0.8 / +0.4 / −0.6 %. Asserted: within 4 %, as the aligned grid above (the stepping before
    fails both)."""
    problem = Problem.from_config(parse_config(DIRECT))
    n, a, kappa_n = 32, 250.0, 1.0
    run = flow.run_stochastic(problem.model, [np.zeros((n, n)), np.eye(n)], _LinearSource(a, kappa_n),
                              times=np.linspace(0.0, 5.0, points), codes=[(0, 1)], texts=["q"], seed=3)  # fmt: skip
    exact = kappa_n * (n + 1) / (2 * (2 * a) * n)
    assert abs(np.mean(run.series["q"][run.t >= 2.5]) / exact - 1) <= 0.04


class _DecayingSource(_LinearSource):
    """`_LinearSource` whose κ falls as e^{−t/τ} (a schedule's decay): its noise arrays carry κ(t)N."""

    def __init__(self, a, kappa_n, tau):
        super().__init__(a, kappa_n)
        self.tau = tau

    def kappa_at(self, t):
        return float(np.exp(-t / self.tau))

    def coefficients(self, mu, noise=True, t=None, state=None):
        arrays = super().coefficients(mu, noise, t, state)
        if noise:
            arrays["N1"], arrays["N2"] = arrays["N1"] * self.kappa_at(t), arrays["N2"] * self.kappa_at(t)
        return arrays


def test_a_falling_kappa_leaves_the_noise_the_exact_equation_says(monkeypatch):
    """The OU mode with λ = 20, n = 64, from S = 0, under κ(t) = e^{−t/τ}, τ = 0.05: (1/n) E Tr(S Sᵀ) solves
    m' = −2λ m + κ(t) N (n + 1)/n, so m = N (n + 1)/n (e^{−t/τ} − e^{−2λt}) / (2λ − 1/τ). At ten times the step growth
    (h ≈ τ/5, hλ = 0.2: the lag is then visible above the noise), summed over the outputs t ∈ [2τ, 6τ], noise seeds
    0–5: measured +0.2 ± 0.9 % from exact; κ read at each step's start (the stepping before) +10.7 ± 1.0 %, κ's mean
    over the step itself +5.4 ± 0.9 % (the split applies each increment half a step late on average); κ's window cut
    at each output time instead of the run's end +1.0 ± 0.9 %. Asserted: within 3 % (3 standard errors), which the
    first two fail."""
    monkeypatch.setattr(flow, "STEP_GROWTH", 10 * flow.STEP_GROWTH)
    problem = Problem.from_config(parse_config(DIRECT))
    n, a, tau = 64, 10.0, 0.05
    times = np.linspace(0.0, 6 * tau, 61)
    exact = (n + 1) / n * (np.exp(-times / tau) - np.exp(-4 * a * times)) / (4 * a - 1 / tau)
    late = times >= 2 * tau
    errors = [
        np.sum(flow.run_stochastic(problem.model, [np.zeros((n, n)), np.eye(n)], _DecayingSource(a, 1.0, tau),
                                   times=times, codes=[(0, 1)], texts=["q"], seed=seed).series["q"][late])
        / np.sum(exact[late]) - 1
        for seed in range(6)
    ]  # fmt: skip
    assert abs(np.mean(errors)) <= 0.03, errors


def test_an_increment_reads_kappa_across_an_output_time(monkeypatch):
    """The increment of a step that ends on an output time acts half in the step after it, so its κ window runs past
    that time: `_split_kappa` is read up to the run's end, never cut at an interior output (cut there, the falling-κ
    case above measured +1.0 ± 0.9 % instead of +0.2 ± 0.9 %: small, so checked here on the calls themselves)."""
    calls = []

    def spy(kappa_at, t, h, end):
        calls.append((t, h, end))
        return split(kappa_at, t, h, end)

    split = flow._split_kappa
    monkeypatch.setattr(flow, "_split_kappa", spy)
    problem = Problem.from_config(parse_config(DIRECT))
    flow.run_stochastic(problem.model, [np.zeros((8, 8)), np.eye(8)], _DecayingSource(10.0, 1.0, 0.05),
                        times=[0.0, 0.01, 0.02], codes=[(0, 1)], texts=["q"], seed=0)  # fmt: skip
    assert calls and all(end == 0.02 for _, _, end in calls)
    assert any(t < 0.01 < t + 1.5 * h for t, h, _ in calls)  # a window across the interior output time


def test_the_noise_against_a_dense_sigma_has_the_covariance_of_sigma():
    """No drift, N1 = 1, N2 = 0, a dense Σ (n = 2, eigenvalues 2.987 and 0.013): the noise matrices Σ^{1/2} H Σ^{1/2}
    have E[X_ab X_cd] ∝ Σ_ac Σ_bd, so E Tr(S S) / E Tr(S Sᵀ) = Tr Σ² / (Tr Σ)² = 0.991 whatever the steps were, and
    E (1/n) Tr(S Sᵀ) = T (Tr Σ)² / n² (to the first and last steps' halves, O(h/T) = 2 %). A root of Σ that is not
    symmetric (`psd_root`'s V√w, the model before) gives the ratio Tr(Σ V²)/(Tr Σ)² = 0.34. Measured over 150 noise
    seeds: ratio 0.9934 (300 seeds, two sets: 0.9920, 0.9908; standard error 0.0014), level 1.035 (standard error
    0.12). Asserted: the ratio within 0.006 (≈ 3× the largest measured gap), the level within 0.35 (3 SE)."""
    problem = Problem.from_config(parse_config(DIRECT))
    sigma, T = np.array([[2.0, 1.4], [1.4, 1.0]]), 0.05
    factors, source = [np.zeros((2, 2)), np.eye(2)], _LinearSource(0.0, 1.0, swap=0.0)
    runs = [
        flow.run_stochastic(problem.model, factors, source, times=[0.0, T], codes=[(0, 1), (0, 0)],
                            texts=["S Sᵀ", "S S"], seed=seed, sigma=sigma).series
        for seed in range(150)
    ]  # fmt: skip
    outer, inner = (np.mean([run[w][-1] for run in runs]) for w in ("S Sᵀ", "S S"))
    assert abs(inner / outer - np.trace(sigma @ sigma) / np.trace(sigma) ** 2) <= 0.006, (inner, outer)
    assert abs(outer / (T * np.trace(sigma) ** 2 / 4) - 1) <= 0.35, outer


def test_the_drift_is_first_order_accurate_on_a_transient():
    """κ = 0 (no noise): the model's Euler steps against DOP853 at rtol 1e-10, tied mse(h1), Gaussian student,
    teacher I, t ∈ [0, 0.1] at d = 64 (S1, S1², S1³ fall by 8–40 %). Measured worst relative error 2.9e-4 / 7.9e-4 /
    1.4e-3 (d = 200: 3.0e-4 / 8.1e-4 / 1.5e-3); at `STEP_GROWTH` × 5 it is 5× larger (first order). Asserted: ≤ 3×
    the measurement, and > 3× it at 5× the step growth (the accuracy comes from the step, not from luck)."""
    raw = {
        "model": {"kind": "tied", "K": 2, "trainable": [1]},
        "loss": {"builtin": "mse", "activation": "h1"},
        "init": {"1": {}, "2": {"kind": "identity", "c": 1.0}},
        "truncation": {"degree": 4, "observables": ["S1", "S1 S1", "S1 S1 S1"]},
        "integrate": {"T": 0.1, "points": 11},
    }
    config = parse_config(raw)
    problem = Problem.from_config(config)
    factors = initial_factors(config.model, config.inits(), 64, 0)
    exact = problem.matrix_flow(factors, stepper={"method": "DOP853", "rtol": 1e-10, "atol": 1e-12})
    measured = {"S1": 2.9e-4, "S1 S1": 7.9e-4, "S1 S1 S1": 1.4e-3}

    def errors():
        run = flow.run_stochastic(problem.model, factors, problem.source(), times=problem.times,
                                  codes=problem.word_codes, texts=problem.words)  # fmt: skip
        return {w: np.max(np.abs(run.series[w] / exact.series[w] - 1)) for w in measured}

    fine = errors()
    assert all(fine[w] <= 3 * measured[w] for w in measured), fine
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(flow, "STEP_GROWTH", 5 * flow.STEP_GROWTH)
        coarse = errors()
    assert all(coarse[w] > 3 * measured[w] for w in measured), coarse


@pytest.mark.parametrize("antisymmetric", [True, False])
def test_the_noise_matrices_have_the_law_they_claim(antisymmetric, rng):
    """`_noise_matrices` with N1 ≠ N2 (two indices, correlated): the empirical covariance of H + Hᵀ over 20 000 draws
    of 3 × 3 matrices against the analytic 2 scale² (N1 + N2)_kl (δ_ac δ_bd + δ_ad δ_bc) — with or without the
    antisymmetric part, which H + Hᵀ does not see. Measured worst deviation 0.14 over the 324 entries (sampling error
    ≈ 5.6 √(2 / 20 000) = 0.056 on the largest, 5.6). Asserted: within 0.25 (a wrong constant is off by ≥ 2.8);
    and with the antisymmetric part E[H_ab H_ab] = N1, E[H_ab H_ba] = N2 (within 0.05: sampling error ≈ 0.01)."""
    N1, N2 = np.array([[1.0, 0.3], [0.3, 0.5]]), np.array([[0.4, 0.1], [0.1, 0.2]])
    draws = np.array([flow._noise_matrices(N1, N2, 3, 1.0, rng, antisymmetric) for _ in range(20000)])
    sym = draws + draws.transpose(0, 1, 3, 2)
    for k in range(2):
        for l in range(2):
            got = np.mean(sym[:, k][:, :, :, None, None] * sym[:, l][:, None, None, :, :], axis=0)
            pairs = np.einsum("ac,bd->abcd", np.eye(3), np.eye(3))
            want = 2 * (N1 + N2)[k, l] * (pairs + pairs.transpose(0, 1, 3, 2))
            assert np.max(np.abs(got - want)) <= 0.25
    if antisymmetric:  # E[H_ab H_ab] = N1, E[H_ab H_ba] = N2 (a ≠ b)
        assert np.mean(draws[:, 0, 0, 1] ** 2) == pytest.approx(N1[0, 0], abs=0.05)
        assert np.mean(draws[:, 0, 0, 1] * draws[:, 0, 1, 0]) == pytest.approx(N2[0, 0], abs=0.05)


def test_the_steps_follow_the_stiffness_over_decades():
    """A Gaussian student against a power-law Σ (tied, a = 2, n = 32, κ = 0.05, t ∈ [0, 50]): the step count is a
    few thousand where the fixed step before needed 25 000 (measured 3 000–7 000 here; the late steps sit at 1.5 / (1.2
    ρ), ρ ≈ 40–75), the run ends ok, and the risk lies above the κ = 0 curve of the same factors late (the floor)."""
    config = load_config("scaling_law", data={"exponent": 2.0}, init={"1": {"kind": "gaussian"}},
                         integrate={"T": 50.0, "points": 11, "grid": "log", "log_first": 0.1})  # fmt: skip
    problem = Problem.from_config(config, kappa=0.05)
    factors = law_factors(problem.model, problem.specs, 32, data=problem.data, flat=True)
    run = problem.law_run(factors)
    plain = Problem.from_config(config).matrix_flow(factors, stepper=flow.CHEBYSHEV)
    assert run.status == "ok" and run.info["steps"] < 10_000
    risk, floorless = theory_risk(problem, run.series), theory_risk(problem, plain.series)
    assert np.all(np.asarray(risk)[-3:] > 1.2 * np.asarray(floorless)[-3:])


def test_power_radius_finds_the_largest_rate():
    """`power_radius` on y' = −A y, A symmetric in a random basis: with the top rate 100 apart from the rest (≤ 50)
    measured 99.92, asserted within 0.5 %; with 40 rates evenly in [1, 100] (top gap 2.5 %) it stops at its 1 %
    convergence test, measured 95.6: asserted ≥ 100 / `RHO_SAFETY` (the margin the steppers add) and ≤ 100."""
    rng = np.random.default_rng(0)
    Q, _ = np.linalg.qr(rng.standard_normal((40, 40)))
    y = rng.standard_normal(40)
    for rates, low in ((np.r_[np.linspace(1, 50, 39), 100], 99.5), (np.linspace(1, 100, 40), 100 / RHO_SAFETY)):
        A = Q @ np.diag(rates) @ Q.T
        rho, _ = power_radius(lambda x, A=A: -A @ x, y, -A @ y)
        assert low <= rho <= 100 * (1 + 1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["constant", "WSD"])
def test_a_power_law_noise_floor_does_not_move_with_the_step(schedule, monkeypatch):
    """`examples/noise_floors.py`'s power-law Σ case, its own configuration (tied mse(h1), a = 1, σ = 0.5, peak
    κ = 0.05, t ∈ [0, 10]; the ensemble of 8 stochastic draws of n = 128): its final excess risk at the default step
    against a third of it (`STEP_GROWTH` and `STIFF_STEP` / 3; the draws' workers fork from this process, so they step
    alike). Measured 0.09385 ± 0.00053 → 0.09353 ± 0.00053 (constant) and 0.01900 ± 0.00011 → 0.01883 ± 0.00015
    (WSD): −0.4 and −0.9 standard errors of the difference, so the time step is not what puts these floors 3.4 % from
    SGD at d = 200 (README, Noise floors). Asserted: within 3 standard errors of the difference, which the κ read at
    each step's start (docs/FINITE_LR.md §3) fails on WSD: 0.0013 apart, 6.6 of them."""
    config = runpy.run_path(str(EXAMPLES / "noise_floors.py"))["cases"](1, False)[("power-law Σ, β = 0", schedule)]

    def final():
        result = solve(config, finite_lr=True)
        return result.derived["excess_risk"][-1], result.error_series["risk_standard_error"][-1]

    default = final()
    monkeypatch.setattr(flow, "STEP_GROWTH", flow.STEP_GROWTH / 3)
    monkeypatch.setattr(flow, "STIFF_STEP", flow.STIFF_STEP / 3)
    finer = final()
    assert abs(default[0] - finer[0]) <= 3 * np.hypot(default[1], finer[1]), (default, finer)


def test_the_stochastic_model_evaluates_in_single_precision_and_moves_as_in_double(monkeypatch):
    """`flow.NOISE_PRECISION`: the drift (letters, moments, coefficients, products) and the noise increments are
    evaluated in single precision; the state summed, the output words measured and the drift's spectral radius
    estimated (the power method) in double. A Gaussian student against a power-law Σ (tied, a = 2, n = 32, κ = 0.05,
    t ∈ [0.1, 2]) against the same run, same noise seed, evaluated in double precision: over 3 draws × 2 noise seeds
    measured 2.6e-6–1.3e-5 relative on the risk and 5e-8–2.1e-7 on the words (draw 0, seed 1: 7.9e-6, 5.1e-8), in the
    same number of steps — far below what the noise itself moves (two noise seeds of one n = 200 draw are 3.3 % apart
    on the risk, README). Asserted on draw 0, seed 1:
    the drift of every step single precision, the power method's double (all double when told), the gaps within 3×
    the largest measured, the steps the same."""
    config = load_config("scaling_law", data={"exponent": 2.0}, init={"1": {"kind": "gaussian"}},
                         integrate={"T": 2.0, "points": 7, "grid": "log", "log_first": 0.1})  # fmt: skip
    problem = Problem.from_config(config, kappa=0.05)
    factors = law_factors(problem.model, problem.specs, 32, data=problem.data, flat=True)
    matrices = type(problem.model.definition.matrices)
    dtypes, velocities = [], matrices.factor_velocities

    def recorded(self, *args, **kwargs):
        out = velocities(self, *args, **kwargs)
        (dtype,) = {np.asarray(v).dtype for v in out}
        dtypes.append(dtype)
        return out

    monkeypatch.setattr(matrices, "factor_velocities", recorded)
    single = problem.law_run(factors, seed=1)
    count = {dtype: dtypes.count(dtype) for dtype in (np.dtype(np.float32), np.dtype(np.float64))}
    assert count[np.dtype(np.float32)] >= single.info["steps"] > 5 * count[np.dtype(np.float64)] > 0, count
    dtypes.clear()
    monkeypatch.setattr(flow, "NOISE_PRECISION", np.float64)
    double = problem.law_run(factors, seed=1)
    assert set(dtypes) == {np.dtype(np.float64)}
    risk_gap = np.abs(theory_risk(problem, single.series) / theory_risk(problem, double.series) - 1)
    word_gap = max(np.max(np.abs(single.series[w] / double.series[w] - 1)) for w in problem.words)
    assert np.all(risk_gap <= 3 * 1.3e-5) and word_gap <= 3 * 2.1e-7, (risk_gap, word_gap)
    assert single.info["steps"] == double.info["steps"]
