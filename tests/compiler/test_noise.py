"""The finite-learning-rate term (docs/FINITE_LR.md): derivation, data, interface, and SGD."""

import json

import numpy as np
import pytest

from momentgen.compiler.hierarchy import build
from momentgen.compiler.truncation import from_config
from momentgen.core.errors import ModelError, PotentialError
from momentgen.dynamics.closures import solve_with_closure
from momentgen.dynamics.results import REACHED
from momentgen.models import Model
from momentgen.reference import sgd
from momentgen.setting.config import ConfigError, parse_config
from momentgen.setting.flow import _noise_matrices
from momentgen.setting.matrices import initial_factors, letter_matrices, trace_moments
from tests.conftest import random_factors

#: (kind, K, trainable, degree): every word up to the degree.
KINDS = [
    ("tied", 2, [1], 4),
    ("tied", 2, [1, 2], 3),
    ("untied", 2, [1], 3),
    ("direct", 2, [1], 3),
    ("symmetric", 2, [1, 2], 3),
]


def ito_term(model, factors, codes, N1, N2, rng, samples=40, epsilon=1e-4, sigma=None):
    """E over Gaussian noise matrices H (E[H_ab H_cd] = (N1 δ_ac δ_bd + N2 δ_ad δ_bc)/d; with a data covariance
    ``sigma``, R H Rᵀ with R Rᵀ = Σ) of the second-order change of each word's (1/d) Tr when the factors move by the
    kind's `noise_increments(F, εH)` — by antithetic differences on the matrices themselves, no hierarchy code."""
    family, d = model.definition, model.definition.matrices.dimension(factors[0])
    base = trace_moments(codes, letter_matrices(model.kind, factors, sigma))
    root = None if sigma is None else np.linalg.cholesky(sigma)
    total = np.zeros(len(codes))
    for _ in range(samples):
        H = _noise_matrices(N1, N2, d, 1 / np.sqrt(d), rng)
        if root is not None:
            H = [root @ h @ root.T for h in H]
        moved = []
        for sign in (1, -1):
            step = family.matrices.noise_increments(model, factors, [sign * epsilon * h for h in H])
            shifted = [
                tuple(a + b for a, b in zip(f, s)) if isinstance(f, tuple) else f + s for f, s in zip(factors, step)
            ]
            moved.append(trace_moments(codes, letter_matrices(model.kind, shifted, sigma)))
        total += (moved[0] + moved[1] - 2 * base) / (2 * epsilon**2)
    return total / samples


@pytest.mark.parametrize("kind,K,trainable,degree", KINDS)
def test_program_noise_terms_are_the_ito_terms_of_the_noise(kind, K, trainable, degree, rng):
    """The quadratic terms the program derives from the kind's declared first- and second-order letter
    changes (`noise_first`, `noise_second`) equal the Itô term measured on d = 120 matrices moved by
    the kind's own map h → Δfactor (`noise_increments`), per unit of the noise covariance (the
    program's value divided by ρ, the kind's SGD steps per unit time × η/d). They agree to O(1/d) —
    (1/d)Tr(A H B H) = N2 τ(A)τ(B) + N1 τ(ABᵀ)/d — plus the Monte Carlo noise of 40 samples.
    Measured worst relative gaps at d = 120: 1.5e-2 (tied [1]), 1.9e-2 (tied [1, 2]), 4.2e-2
    (untied), 9.5e-3 (direct), 4.7e-3 (symmetric); tied [1] at d = 60 / 120 / 240: 4.1e-2 / 2.2e-2 /
    6.8e-3 (O(1/d)). Tolerance 0.12, 3× the largest. A missing or misplaced term is off by O(1)."""
    d = 120
    model = Model(kind, K, trainable)
    program = build(model, degree, "all", noise=True)
    factors = random_factors(kind, K, d, rng)
    A, B = (X @ X.T / K for X in rng.standard_normal((2, K, K)))
    N1, N2 = A + B, A - B
    mu = trace_moments(program.word_codes, letter_matrices(kind, factors))
    values = {s.name: 0.0 for s in program.symbols}
    for c in program.symbols:
        if c.family in ("N1", "N2"):
            values[c.name] = (N1 if c.family == "N1" else N2)[c.k - 1, c.l - 1]
    rho = model.definition.steps_per_time(1.0, 1.0)
    expected = program.evaluate(mu, values) / rho
    measured = ito_term(model, factors, program.word_codes, N1, N2, rng)
    gap = np.abs(measured - expected) / np.maximum(1.0, np.abs(expected))
    assert np.abs(expected).max() > 0.1  # the term is there
    assert gap.max() < 0.12


@pytest.mark.parametrize("kind,K,trainable,degree", KINDS)
def test_noise_terms_with_a_data_covariance_are_the_ito_terms(kind, K, trainable, degree, rng):
    """MATH.md §10 for the finite-learning-rate term: with tokens of covariance Σ the noise matrices have covariance
    N1 Σ⊗Σ + N2 (swapped), and each contraction of two of them in a word carries one Σ. The program's quadratic
    terms (built with the letter Σ) against the Itô term measured on d = 120 matrices with a random Σ (eigenvalues
    in [0.5, 1.7]) moved by R H Rᵀ, as the isotropic test: measured worst gaps 2.7e-2 (tied [1]), 2.8e-2
    (tied [1, 2]), 7.0e-2 (untied: its β's words are of degree 5), 3.5e-2 (direct), 2.0e-2 (symmetric); the same
    tolerance 0.12 (other seeds: ≤ 8e-2, one 0.2 for tied [1, 2], as the isotropic test's at that seed: Monte Carlo
    and O(1/d)). Without the Σ of each contraction the gaps are 0.63 / 0.57 / 0.57 / 0.45 / 0.22."""
    d = 120
    model = Model(kind, K, trainable, sigma=True)
    observables = ["M1 M1^T", "M1 Sigma M2^T A1", "A1 Sigma B1"] if kind == "untied" else "all"  # untied: its β reads
    program = build(model, max(degree + 1, model.definition.state_degree(model)), observables, noise=True)  # degree 5
    factors = random_factors(kind, K, d, rng)
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    sigma = (Q * rng.uniform(0.5, 1.7, d)) @ Q.T
    A, B = (X @ X.T / K for X in rng.standard_normal((2, K, K)))
    N1, N2 = A + B, A - B
    mu = trace_moments(program.word_codes, letter_matrices(kind, factors, sigma))
    values = {s.name: 0.0 for s in program.symbols}
    for c in program.symbols:
        if c.family in ("N1", "N2"):
            values[c.name] = (N1 if c.family == "N1" else N2)[c.k - 1, c.l - 1]
    expected = program.evaluate(mu, values) / model.definition.steps_per_time(1.0, 1.0)
    measured = ito_term(model, factors, program.word_codes, N1, N2, rng, sigma=sigma)
    gap = np.abs(measured - expected) / np.maximum(1.0, np.abs(expected))
    assert np.abs(expected).max() > 0.1
    assert gap.max() < 0.12


def test_tied_single_letter_terms_are_the_spec_formula():
    """MATH.md §9 for L = 1 and the word S^w (written out here from the spec, not from the program):
    dμ_w/dt += κ E[c²] ( w t μ_{w−1} + Σ_{i<j} [2 μ_{a+1} μ_{b+1} + μ_a μ_{b+2} + μ_{a+2} μ_b] ),
    a = j − i − 1 letters between the pair, b = w − 2 − a outside, μ_0 = 1. For L = 1, C = 1 the
    contractions N1 = N2 = E[c²]. Arbitrary moment values: the identity is algebraic (exact)."""
    degree, kappa, c2 = 8, 0.3, 1.7
    program = build(Model("tied", 1, [1]), degree, "all", noise=True)
    mu = np.concatenate([[1.0], np.linspace(0.9, 3.0, degree)])  # μ_0 … μ_M, any values
    values = {s.name: 0.0 for s in program.symbols} | {"N1[1,1]": kappa * c2, "N2[1,1]": kappa * c2}
    got = program.evaluate(mu[1:], values)
    for w in range(1, degree + 1):
        expected = w * mu[1] * mu[w - 1]
        for i in range(w):
            for j in range(i + 1, w):
                a = j - i - 1
                b = w - 2 - a
                expected += 2 * mu[a + 1] * mu[b + 1] + mu[a] * mu[b + 2] + mu[a + 2] * mu[b]
        assert got[program.index(" ".join(["S1"] * w))] == pytest.approx(kappa * c2 * expected, rel=1e-13)


def test_kappa_is_a_coefficient_no_rebuild(rng):
    """One program, κ changed on the truncation: the vector field is affine in κ (the term is first
    order), κ = 0 is the paper's hierarchy exactly, and no rebuild happens."""
    config = parse_config(_solvable(finite_lr=True, lr=0.02))
    truncation, y0 = from_config(config)
    program = truncation.program
    assert program.has_noise and truncation.kappa == pytest.approx(0.02 * 300 / 64)
    plain, plain_y0 = from_config(config.replace(integrate={"finite_lr": False}))
    rhs = {}
    for kappa in (0.0, 0.1, 0.2):
        truncation.kappa = kappa
        rhs[kappa] = truncation.rhs(0.0, y0)
    assert truncation.program is program
    at = [program.index(w) for w in plain.program.words]  # the noise pieces may add words: compare by word
    np.testing.assert_allclose(rhs[0.0][at], plain.rhs(0.0, plain_y0), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(rhs[0.2] - rhs[0.0], 2 * (rhs[0.1] - rhs[0.0]), rtol=1e-12, atol=1e-12)
    assert np.abs(rhs[0.1] - rhs[0.0]).max() > 1e-3


def _solvable(finite_lr=False, lr=0.02, sgd=True, T=0.015, degree=8):
    raw = {
        "model": {"kind": "tied", "K": 2, "trainable": [1]},
        "loss": {"builtin": "mse", "activation": "h1"},
        "init": {"1": {}, "2": {"kind": "identity", "c": 1.0}},
        "truncation": {"degree": degree, "observables": ["S1", "S1 S1", "S1 S1 S1", "S1 S1 S1 S1"]},
        "integrate": {"T": T, "points": 4, "finite_lr": finite_lr},
    }
    if sgd:
        raw["sgd"] = {"d": 300, "lr": lr, "batch": 64, "seeds": [0]}
    return raw


@pytest.mark.parametrize(
    "change,match",
    [
        (lambda raw: raw.pop("sgd"), r"set \[sgd\] d, \[sgd\] lr, \[sgd\] batch"),
        (lambda raw: raw["sgd"].pop("batch"), r"set \[sgd\] batch"),
        (lambda raw: raw["sgd"].update(lr=0.5), "outside the expansion"),
        (lambda raw: raw["integrate"].update(finite_lr="yes"), "true or false"),
    ],
)
def test_bad_finite_lr_configs_say_what_to_change(change, match):
    raw = _solvable(finite_lr=True)
    change(raw)
    with pytest.raises(ConfigError, match=match):
        parse_config(raw)


def test_kappa_outside_the_expansion_and_the_quadrature_closure_are_refused():
    config = parse_config(_solvable())
    with pytest.raises(PotentialError, match="outside"):
        solve_with_closure(config, "zero", kappa=1.5)
    with pytest.raises(ModelError, match="matrix-model"):
        solve_with_closure(config, "quadrature", kappa=0.1)


def sgd_versus_theory(raw, words, kappa, d=200, batch=64, seeds=(0, 1, 2, 3), closure="zero"):
    """Mean over seeds of SGD − theory, sup over the time grid, theory from each run's own initial
    matrices, with κ = 0 (the paper's hierarchy) and with the term at the run's κ; and the largest
    standard error of the corrected difference. Returns (paper error, corrected error, SE), arrays
    over ``words``. ``closure``: "zero" (the hierarchy) or "matrix-model" (the matrix flow of the
    run's matrices, and with κ the stochastic matrix model)."""
    lr = kappa * batch / d
    config = parse_config({**raw, "sgd": {"d": d, "lr": lr, "batch": batch, "seeds": list(seeds)}})
    paper, corrected = [], []
    for seed in seeds:
        factors = initial_factors(config.model, config.inits(), d, seed)
        plain = solve_with_closure(config, closure, factors=factors, kappa=0.0, estimate=False)
        term = solve_with_closure(config, closure, factors=factors, kappa=kappa, estimate=False)
        assert {plain.status, term.status} <= set(REACHED), (plain.message, term.message)
        run = sgd(
            config.model,
            config.loss(),
            config.inits(),
            d=d,
            lr=lr,
            batch=batch,
            times=plain.t,
            words=words,
            seed=seed,
            factors=factors,
            progress=False,
        )
        paper.append([np.asarray(run.series[w]) - plain.series[w] for w in words])
        corrected.append([np.asarray(run.series[w]) - term.series[w] for w in words])
    paper, corrected = np.array(paper), np.array(corrected)  # (seed, word, time)
    se = corrected.std(0, ddof=1).max(-1) / np.sqrt(len(seeds))
    return np.abs(paper.mean(0)).max(-1), np.abs(corrected.mean(0)).max(-1), se


SGD_CASES = {
    "tied": (_solvable(sgd=False), ["S1 S1", "S1 S1 S1", "S1 S1 S1 S1"]),
    "untied": (
        {
            "model": {"kind": "untied", "K": 2, "trainable": [1]},
            "loss": {"builtin": "mse", "activation": "h1"},
            "init": {"1": {}, "2": {}},
            "truncation": {"degree": 4, "observables": ["M1 M1^T", "M1 M1", "A1"]},
            "integrate": {"T": 0.015, "points": 4},
        },
        ["M1 M1^T", "M1 M1", "A1"],
    ),
    "direct": (
        {
            "model": {"kind": "direct", "K": 2, "trainable": [1]},
            "loss": {"builtin": "mse", "activation": "h1"},
            "init": {"1": {}, "2": {}},
            "truncation": {"degree": 2},
            "integrate": {"T": 0.015, "points": 4},
        },
        ["S1 S1^T", "S1 S1"],
    ),
}


@pytest.mark.parametrize("kind", sorted(SGD_CASES))
def test_the_term_predicts_sgd_at_kappa_03(kind):
    """Online SGD at κ = ηd/B = 0.3 (d = 200, B = 64, 4 seeds), theory from each run's own matrices:
    the paper's hierarchy is off by the Itô bias, the corrected one within a few standard errors.
    Measured |mean SGD − theory| at T, per word (paper → corrected, standard error):
    tied [0.23, 1.03, 4.03] → [0.007, 0.025, 0.021] (SE [0.007, 0.030, 0.13]);
    untied [0.152, 0.105, 0.027] → [0.0068, 0.0051, 0.0020] (SE [0.0020, 0.0019, 0.0009]);
    direct [0.034, ·] → [0.0014, ·] (SE 0.0004). Asserted: the error falls ≥ 5× (measured 30–190×)
    and the corrected residual is below 3 SE + 2e-3, the 2e-3 for the O(κ²) and O(1/d) rest. (The
    untied q1 keeps a residual ≈ 0.013 at d = 300 that does not depend on κ (0.01 to 0.3) nor on d
    (150, 300): the κ = 0 theory has it too, so it is not the term; open, see docs/FINITE_LR.md.)"""
    raw, words = SGD_CASES[kind]
    paper, corrected, se = sgd_versus_theory(raw, words, 0.3)
    assert paper.max() >= 5 * corrected.max()
    assert np.all(corrected <= 3 * se + 2e-3)


def _whole_curve(d, batch, seeds):
    raw = _solvable(sgd=False, T=0.3)
    raw["truncation"]["observables"] = ["S1", "S1 S1"]
    return sgd_versus_theory(raw, ["S1", "S1 S1"], 0.3, d=d, batch=batch, seeds=seeds, closure="matrix-model")


def test_the_stochastic_matrix_model_carries_the_term_over_the_curve():
    """Whole learning curve (t ∈ [0, 0.3], where q11 falls from 2 to ≈ 1.1): online SGD at κ = 0.3
    (d = 300, B = 64, 3 seeds) against the matrix flow of each run's own matrices (the paper's
    hierarchy at this d, exact: no closure) and the stochastic matrix model of the same matrices
    (the term, independent noise). Measured sup over t, paper → corrected (SE), these 3 seeds:
    μ1 0.067 → 0.0030 (0.0041), q11 0.56 → 0.033 (0.014) (before the model's equal steps, issue 48: 0.0036 and
    0.023). Asserted: the error falls ≥ 5× and the
    corrected one is within 3 SE + 0.01 (the model's O(κ dt) stepping bias and the O(κ²) rest)."""
    paper, corrected, se = _whole_curve(300, 64, (0, 1, 2))
    assert paper.max() >= 5 * corrected.max()
    assert np.all(corrected <= 3 * se + 0.01)


@pytest.mark.xfail(strict=True, reason="open: the stochastic matrix model's residual grows fast below d ≈ 300")
def test_the_stochastic_matrix_model_at_small_d():
    """The same at d = 120 (B = 32): measured q11 0.64 → 0.12 (SE 0.024; μ1 0.081 → 0.021, SE 0.0054, which
    passes) — before the model's equal steps (issue 48) 0.22 (SE 0.044), and d = 200: 0.59 → 0.080 (0.016),
    d = 300: 0.56 → 0.023 (0.014; now 0.033) — falling much faster than 1/d, while SGD itself moves by 0.08
    between d = 120 and 300. Not understood yet (docs/FINITE_LR.md, open questions)."""
    paper, corrected, se = _whole_curve(120, 32, (0, 1, 2, 3))
    assert np.all(corrected <= 3 * se + 0.01)


def test_the_commands_take_kappa_from_the_sgd_section(tmp_path):
    """`solve --finite-lr` records κ = lr·d/batch (here 0.02·40/64 = 0.0125) and changes the
    curve by the term; `compare --finite-lr` draws each theory at κ = 0 and at the SGD run's own κ
    and tables both against SGD."""
    from momentgen.interface.cli import main
    from tests.helpers import write_config

    path = write_config(tmp_path)
    for flag, name in (([], "plain.json"), (["--finite-lr"], "term.json")):
        assert main(["solve", str(path), "--json", str(tmp_path / name), *flag]) == 0
    plain, term = (json.loads((tmp_path / n).read_text()) for n in ("plain.json", "term.json"))
    assert plain["kappa"] == 0.0 and term["kappa"] == pytest.approx(0.02 * 40 / 64)
    assert term["series"]["S1 S1"][-1] > plain["series"]["S1 S1"][-1]  # the term slows the fall of q11
    out = tmp_path / "cmp"
    assert main(["compare", str(path), "--finite-lr", "--degrees", "4", "--d", "40", "--out", str(out)]) == 0
    data = json.loads((out / "compare.json").read_text())
    kappas = sorted({row["kappa"] for row in data["table"] if row["comparison"] == "theory-sgd"})
    assert kappas == pytest.approx([0.0, 0.0125])
