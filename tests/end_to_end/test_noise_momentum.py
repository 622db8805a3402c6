"""Label noise, heavy-ball momentum and the schedules people train with (MATH.md §11, §13, §14).

The theory's side is checked against independent values: the closed-form noise floor of §13, and online SGD
(`momentgen.reference`, which draws the label noise and runs the heavy ball itself) from the same matrices.
"""

import numpy as np
import pytest

from momentgen.compiler.potential import Potential
from momentgen.dynamics.closures import solve_with_closure
from momentgen.reference import config_sgd, simulate_config
from momentgen.setting.config import ConfigError, load_config, parse_config
from momentgen.setting.losses import builtin, parse_expression
from momentgen.setting.matrices import initial_factors
from momentgen.setting.schedules import Schedule, effective_lr, lr_for_kappa

#: One small configuration per kind (every kind the finite-learning-rate term exists for), the words compared,
#: and the closure that follows a whole curve from finite matrices.
KIND_CASES = {
    "tied": (
        {
            "model": {"kind": "tied", "K": 2, "trainable": [1]},
            "init": {"1": {}, "2": {"kind": "identity", "c": 1.0}},
            "truncation": {"degree": 4, "observables": ["S1", "S1 S1", "S1 S1 S1"]},
        },
        ["S1", "S1 S1", "S1 S1 S1"],
        "matrix-model",
    ),
    "untied": (
        {
            "model": {"kind": "untied", "K": 2, "trainable": [1]},
            "init": {"1": {}, "2": {}},
            "truncation": {"degree": 4, "observables": ["M1 M1^T", "M1 M1", "A1"]},
        },
        ["M1 M1^T", "M1 M1", "A1"],
        "matrix-model",
    ),
    "direct": (
        {
            "model": {"kind": "direct", "K": 2, "trainable": [1]},
            "init": {"1": {}, "2": {}},
            "truncation": {"degree": 2},
        },
        ["S1 S1^T", "S1 S1"],
        "zero",
    ),
    "symmetric": (
        {
            "model": {"kind": "symmetric", "K": 2, "trainable": [1]},
            "init": {"1": {"scale": 0.5}, "2": {}},
            "truncation": {"degree": 2},
        },
        ["S1 S1", "S1 S2", "S1"],
        "zero",
    ),
}


def _noisy_raw(kind, kappa, sigma, beta, d, batch, T, seeds, loss=None):
    raw, words, closure = KIND_CASES[kind]
    raw = {
        **raw,
        "loss": {**(loss or {"builtin": "mse", "activation": "h1"}), "noise": sigma},
        "integrate": {"T": T, "points": 11},
        "sgd": {"d": d, "lr": lr_for_kappa(kappa, d, batch, beta), "batch": batch, "seeds": list(seeds)},
    }
    raw["sgd"]["momentum"] = beta
    return raw, words, closure


def sgd_versus_theory(kind, kappa, sigma, beta, d=200, batch=64, T=0.1, seeds=(0, 1, 2, 3), loss=None):
    """Mean over seeds of SGD − theory (sup over the time grid), the theory from each run's own matrices: without the
    finite-learning-rate term, with it, and with it but from the noiseless loss; and the standard error of the
    corrected difference. Heavy ball starts with zero velocity, so its displacement trails SGD at η/(1 − β) by
    β/(1 − β) steps (a finite-d shift of the time axis, O(1/d)): SGD at t is compared with the theory at that lag."""
    raw, words, closure = _noisy_raw(kind, kappa, sigma, beta, d, batch, T, seeds, loss)
    config = parse_config(raw)
    noiseless = parse_config({**raw, "loss": {**raw["loss"], "noise": 0.0}})
    lag = beta / (1 - beta) / config.model.definition.steps_per_time(d, config.axis_lr)
    gaps = {"paper": [], "term": [], "noiseless term": []}
    for seed in seeds:
        factors = initial_factors(config.model, config.inits(), d, seed)
        theory = {
            "paper": solve_with_closure(config, closure, factors=factors, kappa=0.0, estimate=False),
            "term": solve_with_closure(config, closure, factors=factors, kappa=kappa, estimate=False),
            "noiseless term": solve_with_closure(noiseless, closure, factors=factors, kappa=kappa, estimate=False),
        }
        t = theory["paper"].t
        run = config_sgd(config, d=d, seed=seed, times=t, words=words, factors=factors, progress=False)
        for name, result in theory.items():
            lagged = [np.interp(np.maximum(t - lag, 0.0), t, result.series[w]) for w in words]
            gaps[name].append([np.asarray(run.series[w]) - y for w, y in zip(words, lagged)])
    errors = {name: np.abs(np.mean(v, axis=0)).max(-1) for name, v in gaps.items()}
    se = np.std(gaps["term"], axis=0, ddof=1).max(-1) / np.sqrt(len(seeds))
    return errors, se


@pytest.mark.parametrize("kind", sorted(KIND_CASES))
def test_noise_and_momentum_predict_sgd_for_every_kind(kind):
    """Label noise σ = 1 and heavy ball β = 0.9 at κ_eff = ηd/((1 − β)B) = 0.05 (d = 200, B = 64, 4 seeds, t ∈ [0, 0.1],
    312 steps; τ ∈ [0, 0.05] untied): online SGD against the theory at η/(1 − β) from each run's matrices (at heavy
    ball's start-up lag). Measured sup |mean SGD − theory| per word, without the term / with it / with the noiseless
    loss's term (SE): tied [0.012, 0.10, 0.35] / [0.0044, 0.013, 0.048] / [0.0046, 0.041, 0.15] (SE [0.0026, 0.0080,
    0.027]); untied [0.065, 0.053, 0.0077] / [0.0016, 0.0018, 0.0004] / [0.030, 0.023, 0.0035] (SE [0.0050, 0.0011,
    0.0013]); direct 0.032 / 0.0011 / 0.014 (SE 0.0008); symmetric [0.037, ·, ·] / [0.0007, ·, ·] / [0.015, ·, ·] (SE
    0.0007): within 1.7 SE (re-measured after the stochastic model's equal steps, issue 48). Asserted: with the noise
    the term is within 3 SE + 2e-3 (the O(κ²) and O(1/d) rest, as in test_finite_lr); without the term, or with the
    noiseless loss's term, SGD is off by more than that on some word. (At κ_eff = 0.1 the same holds but for the tied
    S1³ at β = 0.9: 0.18 against 3 SE + 2e-3 = 0.16 — momentum's second order, which is why the status stops vouching
    above κ_eff = 0.05; plain SGD at 0.1: 0.10, 1.8 SE.)"""
    errors, se = sgd_versus_theory(kind, 0.05, 1.0, 0.9, T=0.05 if kind == "untied" else 0.1)
    allowed = 3 * se + 2e-3
    assert np.all(errors["term"] <= allowed), (errors, se)
    assert np.any(errors["noiseless term"] > allowed), (errors, se)
    assert np.any(errors["paper"] > allowed), (errors, se)


def test_noise_that_is_not_additive_predicts_sgd():
    """A loss whose noise multiplies the state, ``(G₁ − G₂ − xi)² + ½ xi² G₁²`` (σ = 0.7): the moment matrix of its
    noise monomials {1, ξ, ξ²} is not diagonal, so its noise parts come from the general factorisation. Tied, κ = 0.1,
    the same comparison as above. Measured sup |mean SGD − theory| per word (S1, S1², S1³), without the term / with it
    / with the noiseless loss's term (SE): [0.033, 0.23, 0.80] / [0.0041, 0.018, 0.055] / [0.066, 0.13, 0.24] (SE
    [0.0034, 0.011, 0.038]): within 2 SE. Asserted as above."""
    loss = {"expression": "(G[1,1,1] - G[1,1,2] - xi)**2 + 0.5 * xi**2 * G[1,1,1]**2"}
    errors, se = sgd_versus_theory("tied", 0.1, 0.7, 0.0, loss=loss)
    allowed = 3 * se + 2e-3
    assert np.all(errors["term"] <= allowed), (errors, se)
    assert np.any(errors["noiseless term"] > allowed), (errors, se)


def _floor_config(kappa, sigma, beta=0.0, d=100, batch=50, T=3.0, seeds=(0,)):
    """MATH.md §13's case: tied, L = 1, mse(h1), teacher I (c = 1), the student started at the teacher (the excess
    risk then builds up to the floor from 0, with no slow transient of its own)."""
    return {
        "model": {"kind": "tied", "L": 1, "K": 2, "trainable": [1]},
        "loss": {"builtin": "mse", "activation": "h1", "noise": sigma},
        "init": {"1": {"kind": "identity", "c": 1.0}, "2": {"kind": "identity", "c": 1.0}},
        "truncation": {"degree": 5, "closure": "matrix-model", "size": 100},
        "integrate": {"T": T, "points": 31, "finite_lr": True},
        "sgd": {
            "d": d,
            "lr": lr_for_kappa(kappa, d, batch, beta),
            "batch": batch,
            "seeds": list(seeds),
            "momentum": beta,
        },
    }


def closed_form_floor(kappa, sigma, c=1.0):
    """MATH.md §13: Φ₀(∞) = 4κcσ²/(1 − 4κc)."""
    return 4 * kappa * c * sigma**2 / (1 - 4 * kappa * c)


@pytest.mark.parametrize("kappa,sigma", [(0.025, 1.0), (0.05, 0.5)])
def test_the_theory_reaches_the_closed_form_noise_floor(kappa, sigma):
    """The stochastic matrix model (n = 100, the closure that carries the term over a whole curve) averaged over the
    second half of t ∈ [0, 3]: its excess risk against MATH.md §13's first-order closed form. Measured relative
    residual −0.4 % / −2.6 % / −11 % at κ = 0.025 / 0.05 / 0.1 (σ = 1) and +0.4 % at κ = 0.05, σ = 0.5: about
    −11 κ², the O(κ²) the closed form leaves out. Asserted: within 30 κ² (3× that), and the excess is the risk
    less σ² (additive noise)."""
    result = solve_with_closure(parse_config(_floor_config(kappa, sigma)))
    excess = np.asarray(result.derived["excess_risk"])
    np.testing.assert_allclose(np.asarray(result.derived["risk"]) - excess, sigma**2, rtol=1e-12)
    late = excess[len(excess) // 2 :].mean()
    assert abs(late / closed_form_floor(kappa, sigma) - 1) <= 30 * kappa**2, late


@pytest.mark.slow
@pytest.mark.parametrize("kappa,beta", [(0.05, 0.0), (0.1, 0.0), (0.05, 0.9)])
def test_sgd_reaches_the_floor_the_theory_predicts(kappa, beta):
    """Online SGD at d = 200 (B = 100, 3 seeds, σ = 1), plain and heavy ball, started at the teacher: its excess risk
    averaged over t ∈ [1.5, 3] against the theory's (the stochastic matrix model, n = 200). Measured (κ, β) = (0.05, 0):
    SGD 0.2438 ± 0.0038, theory 0.2425; (0.1, 0): 0.5979 ± 0.0129 vs 0.5857; (0.05, 0.9): 0.2436 ± 0.0039 vs 0.2425 —
    within 1 SE (before the stochastic model's equal steps, issue 48, the theory read 0.2441 / 0.5901 / 0.2441; MATH.md
    §13–14 had 0.260 / 0.653 / 0.248 at d = 100). Asserted: within 3 SE + 2e-3, and the SGD
    risk less the excess is σ² (the noise's share, measured on the same samples)."""
    raw = _floor_config(kappa, 1.0, beta, d=200, batch=100, seeds=(0, 1, 2))
    raw["truncation"]["size"] = 200
    config = parse_config(raw)
    theory = solve_with_closure(config)
    run = simulate_config(config, progress=False)
    half = len(run["t"]) // 2
    predicted = np.mean(np.asarray(theory.derived["excess_risk"])[half:])
    measured = np.mean(run["excess_risk"][half:])
    se = np.mean(run["excess_risk_se"][half:])
    assert abs(measured - predicted) <= 3 * se + 2e-3, (measured, predicted, se)
    np.testing.assert_allclose(np.subtract(run["risk"], run["excess_risk"])[half:], 1.0, rtol=1e-9)


def test_label_noise_moves_phi_not_gamma_and_adds_to_the_sgd_noise():
    """MATH.md §13 for mse(h1), L = 1: Φ = Φ₀ + σ², Γ unchanged, and the SGD-noise moment E[c²] = 4(Φ₀ + σ²) — here
    N1 = Σ C C E[c_k c_l] at q: with c = 2(G₁ − G₂ − σξ), E[c₁²] = 4(2q₁₁ − 4q₁₂ + 2q₂₂ ... ) by Wick, written out."""
    q = np.array([[1.3, 0.4], [0.4, 0.9]])
    sigma = 0.7
    clean = Potential(builtin("mse", L=1, K=2), "tied")
    noisy = Potential(builtin("mse", L=1, K=2, noise=sigma), "tied")
    a, b = clean.evaluate(q=q), noisy.evaluate(q=q)
    assert b.phi == pytest.approx(a.phi + sigma**2, rel=1e-12)
    np.testing.assert_allclose(b.dQ1, a.dQ1, rtol=1e-12)
    N1_clean, _ = clean.noise_at(q, q)
    N1_noisy, _ = noisy.noise_at(q, q)
    # c_k = ±2(G1 − G2 − σξ): E[c_k c_l] = ±4(Var(G1 − G2) + σ²), Var(G1 − G2) = 2(q11 − 2q12 + q22)
    variance = 2 * (q[0, 0] - 2 * q[0, 1] + q[1, 1])
    signs = np.array([[1, -1], [-1, 1]])
    np.testing.assert_allclose(N1_clean, 4 * signs * variance, rtol=1e-12)
    np.testing.assert_allclose(N1_noisy, 4 * signs * (variance + sigma**2), rtol=1e-12)


def test_an_expression_reads_the_noise_as_xi_like_the_builtin():
    """``(G[1,1,1] - G[1,1,2] - xi)**2`` with noise σ is the built-in mse(h1) with noise σ: the same Φ and noise moments
    (two independent constructions: the parser's polynomial in xi and the built-in's residual)."""
    q = np.array([[1.1, 0.3], [0.3, 0.8]])
    expression = Potential(parse_expression("(G[1,1,1] - G[1,1,2] - xi)**2", 1, 2, noise=0.6), "tied")
    built = Potential(builtin("mse", L=1, K=2, noise=0.6), "tied")
    assert expression.evaluate(q=q).phi == pytest.approx(built.evaluate(q=q).phi, rel=1e-12)
    np.testing.assert_allclose(expression.noise_at(q, q)[0], built.noise_at(q, q)[0], rtol=1e-12)


def test_softmax_noise_is_one_draw_per_attention_entry():
    """softmax-mse at L = 2 with noise σ: L² = 4 outputs, so Φ gains 4σ², and SGD draws 4 noise values per sample."""
    loss = builtin("softmax-mse", L=2, K=2, noise=0.1)
    assert len(loss.noise_variables) == 4
    assert loss.noise_offset == pytest.approx(4 * 0.01)


def test_noise_zero_and_momentum_zero_change_nothing():
    """The keys at their defaults leave a configuration's digest (shipped figures, generated modules) and its run as
    they were: the same SGD series bit for bit, the same theory."""
    base = load_config("fig4_linear", integrate={"T": 0.01, "points": 3}, sgd={"d": 40})
    explicit = base.replace(loss={"noise": 0.0}, sgd={"momentum": 0.0, "nesterov": False})
    assert explicit.digest == base.digest
    a, b = (simulate_config(c, progress=False) for c in (base, explicit))
    assert a["series"] == b["series"] and "excess_risk" not in a


def test_momentum_runs_on_the_effective_time_axis():
    """A heavy-ball run at (η, β) takes as many steps to reach t as SGD at η/(1 − β) (MATH.md §14), and κ is the
    effective one."""
    config = load_config("fig4_linear", sgd={"lr": 0.002, "momentum": 0.8})
    assert config.axis_lr == pytest.approx(effective_lr(0.002, 0.8)) == pytest.approx(0.01)
    assert config.sgd_kappa() == pytest.approx(0.01 * 400 / 512)


def test_nesterov_and_heavy_ball_differ_but_agree_to_first_order():
    """Nesterov's look-ahead is a different run (not the heavy ball under another name) with the same first order:
    at κ_eff = 0.01 their words agree to 1e-3 while differing from each other."""
    base = {
        "model": {"kind": "tied", "K": 2, "trainable": [1]},
        "loss": {"builtin": "mse", "activation": "h1"},
        "init": {"1": {}, "2": {"kind": "identity"}},
        "truncation": {"degree": 2},
        "integrate": {"T": 0.05, "points": 3},
    }
    runs = []
    for nesterov in (False, True):
        sgd = {"d": 60, "lr": lr_for_kappa(0.01, 60, 32, 0.5), "batch": 32, "momentum": 0.5, "nesterov": nesterov}
        runs.append(simulate_config(parse_config({**base, "sgd": sgd}), progress=False)["series"]["S1 S1"])
    gap = np.abs(np.subtract(*runs)).max()
    assert 0 < gap < 1e-3


def test_wsd_and_power_schedules_have_their_shape_and_integral():
    """WSD: warm-up to 1 over 0.1, 1 until 0.8, linear to `final` = 0.1 at the end; power: (1 − v)^2 after the
    warm-up. Their integrals F(1) against the areas of those shapes written out (trapezoids; ∫(1 − v)² = 1/3)."""
    wsd = Schedule("wsd", warmup=0.1, decay=0.2, final=0.1)
    np.testing.assert_allclose(wsd([0.05, 0.5, 0.8, 0.9, 1.0]), [0.5, 1.0, 1.0, 0.55, 0.1], atol=1e-12)
    assert wsd.integral(1.0) == pytest.approx(0.05 + 0.7 + 0.2 * 0.55, abs=1e-9)
    power = Schedule("power", warmup=0.0, exponent=2.0)
    np.testing.assert_allclose(power([0.0, 0.5, 1.0]), [1.0, 0.25, 0.0], atol=1e-12)
    assert power.integral(1.0) == pytest.approx(1 / 3, abs=1e-8)


def test_a_python_callable_is_a_schedule_in_the_api():
    """``sgd={"schedule": f}`` tabulates f on 1 025 fractions of the run: the configuration then holds numbers (its
    digest, its files), and the schedule is f between the table's points."""
    config = load_config("fig4_linear", sgd={"schedule": lambda u: 1 - 0.5 * u})
    lr, _ = config.schedules()
    assert config.settings.sgd.schedule == "table"
    np.testing.assert_allclose(lr([0.0, 0.25, 1.0]), [1.0, 0.875, 0.5], atol=1e-12)
    again = load_config("fig4_linear", sgd={"schedule": lambda u: 1 - 0.5 * u})
    assert again.digest == config.digest


def test_a_wsd_schedule_predicts_sgd():
    """The tied case at κ = 0.1 with noise σ = 1 and a WSD schedule (warm-up 0.1, decay 0.3 to 0.1): online SGD (d =
    200, B = 64, 4 seeds) against the term's theory on the integrated axis from each run's matrices. Measured sup
    error per word (S1, S1², S1³) [0.0038, 0.019, 0.070] (SE [0.0038, 0.014, 0.049]): within 1.4 SE (before the
    stochastic model's equal steps and κ's mean per increment, issue 48: [0.0072, 0.034, 0.11], within 2 SE).
    Asserted within 3 SE + 2e-3."""
    raw, words, closure = _noisy_raw("tied", 0.1, 1.0, 0.0, 200, 64, 0.1, (0, 1, 2, 3))
    raw["sgd"].update(schedule="wsd", warmup=0.1, decay=0.3, final=0.1)
    config = parse_config(raw)
    gaps = []
    for seed in raw["sgd"]["seeds"]:
        factors = initial_factors(config.model, config.inits(), 200, seed)
        theory = solve_with_closure(config, closure, factors=factors, kappa=0.1, estimate=False)
        run = config_sgd(config, d=200, seed=seed, times=theory.t, words=words, factors=factors, progress=False)
        gaps.append([np.asarray(run.series[w]) - theory.series[w] for w in words])
    error = np.abs(np.mean(gaps, axis=0)).max(-1)
    se = np.std(gaps, axis=0, ddof=1).max(-1) / 2
    assert np.all(error <= 3 * se + 2e-3), (error, se)


BASE = {
    "model": {"kind": "tied", "K": 2, "trainable": [1]},
    "loss": {"builtin": "mse", "activation": "h1"},
    "init": {"1": {}, "2": {"kind": "identity"}},
    "truncation": {"degree": 2},
    "integrate": {"T": 0.01},
}


def _with(section, **keys):
    raw = {name: dict(values) for name, values in BASE.items()}
    raw.setdefault(section, {}).update(keys)
    return raw


def _expression(expression, noise):
    raw = _with("loss")
    raw["loss"] = {"expression": expression, "noise": noise}
    return raw


@pytest.mark.parametrize(
    "raw,match",
    [
        (_with("loss", noise=-0.1), r"\[loss\] noise must be a number ≥ 0"),
        (_with("loss", noise=float("inf")), r"noise must be finite"),
        (_with("loss", noise=float("nan")), r"noise must be finite"),
        (_with("loss", noise="1"), r"noise must be a number"),
        (_with("loss", noise=True), r"noise must be a number"),
        (_with("loss", noise=1e4), r"noise must be at most 1000"),
        (_with("sgd", momentum=1.0), r"momentum must be a number in \[0, 0.999\]"),
        (_with("sgd", momentum=-0.1), r"momentum must be a number in \[0, 0.999\]"),
        (_with("sgd", momentum="0.9"), r"momentum must be a number"),
        (_with("sgd", momentum=float("nan")), r"momentum must be finite"),
        (_with("sgd", nesterov=True), r"nesterov = true needs momentum > 0"),
        (_with("sgd", nesterov="yes"), r"nesterov must be true or false"),
        (_with("sgd", schedule="wsd", warmup=0.5, decay=0.6), r"warmup \+ decay = 1.1 > 1"),
        (_with("sgd", schedule="wsd", decay=0.0), r"decay must be a fraction of the run in \(0, 1\]"),
        (_with("sgd", schedule="power", exponent=0.0), r"exponent must be a positive number"),
        (_with("sgd", schedule="power", exponent=0.001), r"exponent must be at least 0.01"),
        (_with("sgd", schedule="power", exponent=11.0), r"exponent must be at most 10"),
        (_with("sgd", schedule="cosine", decay=0.5), r"`decay` does not apply to schedule = 'cosine'"),
        (_with("sgd", schedule="wsd", exponent=2.0), r"`exponent` does not apply to schedule = 'wsd'"),
        (_with("sgd", schedule="table"), r"schedule = 'table' needs `table`"),
        (_with("sgd", schedule="table", table={"u": [0, 1], "f": [1, 1, 1]}), r"u and f must have the same length"),
        (_with("sgd", schedule="table", table={"u": [0, 0.5], "f": [1, 1]}), r"u must increase strictly from 0 to 1"),
        (_with("sgd", schedule="table", table={"u": [0, 1], "f": [1, -1]}), r"f must be multipliers ≥ 0"),
        (_with("sgd", schedule="table", table={"u": [0, 1], "f": [1, float("inf")]}), r"must be finite"),
        (_with("sgd", schedule="table", table={"u": [0, 1]}), r"must be an inline table"),
        (_with("sgd", schedule="table", table=[[0, 1], [1, 1]]), r"must be an inline table"),
        (
            _with("sgd", schedule="table", table={"u": list(np.linspace(0, 1, 20_000)), "f": [1.0] * 20_000}),
            r"2 to 10001 numbers",
        ),
        (_with("sgd", schedule=lambda u: float("nan")), r"returned nan at u = 0"),
        (_with("sgd", schedule=lambda u: -1.0), r"returned -1.0 at u = 0"),
        (_with("sgd", schedule=lambda u: "fast"), r"failed at u = 0: ValueError"),
        (_with("sgd", schedule=lambda u: 1.0 if u < 0.5 else 1 / 0), r"failed at u = 0.5: ZeroDivisionError"),
        (_expression("(G[1,1,1] - G[1,1,2])**2", 0.5), r"does not say where the noise"),
        (_expression("tanh(G[1,1,1] - xi)**2 + G[1,1,2]", 0.5), r"polynomial"),
        (_expression("(G[1,1,1] - xi)**6 + G[1,1,2]", 0.5), r"degree ≤ 4"),
        (_expression("xi(G[1,1,1]) + G[1,1,2]", 0.5), r"not allowed"),
    ],
)
def test_bad_noise_momentum_and_schedule_keys_are_one_line_errors(raw, match):
    with pytest.raises(ConfigError, match=match) as error:
        parse_config(raw)
    assert "\n" not in str(error.value)


def test_the_kappa_check_counts_the_momentum():
    """finite_lr refuses κ_eff = ηd/((1 − β)B) ≥ 1 — a raw κ of 0.2 with β = 0.9 is κ_eff = 2."""
    raw = _with("sgd", d=100, lr=0.1, batch=50, momentum=0.9)
    raw["integrate"] = {"T": 0.01, "finite_lr": True}
    with pytest.raises(ConfigError, match=r"/\(1 − 0.9\) = 2 ≥ 1"):
        parse_config(raw)


def test_large_effective_kappa_with_momentum_is_not_vouched_for():
    """Above κ_eff = 0.05 (MATH.md §14: heavy ball and its first order part by 7.6 % on the floor at 0.1) the status
    says so."""
    config = parse_config(_with("sgd", d=100, lr=lr_for_kappa(0.2, 100, 50, 0.9), batch=50, momentum=0.9))
    result = solve_with_closure(config)
    assert result.status == "unverified" and "momentum β = 0.9 at κ_eff" in result.message
    quiet = parse_config(_with("sgd", d=100, lr=lr_for_kappa(0.02, 100, 50, 0.9), batch=50, momentum=0.9))
    assert "momentum" not in solve_with_closure(quiet).message


def test_a_constant_in_the_loss_is_part_of_phi_on_the_quadrature_path():
    """A non-polynomial loss plus 1 has Φ larger by exactly 1 (the quadrature path's additive groups dropped constant
    terms before label noise made them common: softmax-mse with noise lost its 4σ²)."""
    q = np.array([[1.0, 0.2], [0.2, 0.7]])
    plain = Potential(parse_expression("tanh(G[1,1,1] - G[1,1,2])**2", 1, 2), "tied").evaluate(q=q).phi
    shifted = Potential(parse_expression("tanh(G[1,1,1] - G[1,1,2])**2 + 1", 1, 2), "tied").evaluate(q=q).phi
    assert shifted - plain == pytest.approx(1.0, abs=1e-9)
    noisy = Potential(builtin("softmax-mse", L=2, K=2, noise=0.1), "tied").evaluate(q=q).phi
    clean = Potential(builtin("softmax-mse", L=2, K=2), "tied").evaluate(q=q).phi
    assert noisy - clean == pytest.approx(4 * 0.1**2, abs=1e-9)


@pytest.mark.parametrize(
    "options,blamed",
    [
        (["--momentum", "1.0"], "--momentum 1.0: must be a number in [0, 0.999]"),
        (["--noise", "-1"], "--noise -1.0: must be a number ≥ 0"),
        (["--noise", "nan"], "--noise nan: must be finite"),
    ],
)
def test_the_cli_options_are_blamed_by_name(options, blamed, capsys):
    """``--momentum`` and ``--noise`` are checked as the keys they set; the error names the option."""
    from momentgen.interface.cli import main

    assert main(["solve", "examples/configs/fig4_linear.toml", *options, "--json", "/nonexistent/x.json"]) == 2
    err = capsys.readouterr().err
    assert blamed in err and err.count("\n") == 1


def test_the_cli_runs_a_noisy_heavy_ball(tmp_path):
    """``simulate --noise 0.5 --momentum 0.5`` writes the excess risk beside the risk (their difference σ² = 0.25)."""
    import json

    from momentgen.interface.cli import main

    out = tmp_path / "run.json"
    argv = ["simulate", "examples/configs/fig4_linear.toml", "--noise", "0.5", "--momentum", "0.5", "--d", "200"]
    assert main([*argv, "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["momentum"] == 0.5
    np.testing.assert_allclose(np.subtract(data["risk"], data["excess_risk"]), 0.25, rtol=1e-9)
