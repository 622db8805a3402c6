"""Anisotropic tokens (MATH.md §10): the letter Σ in the configuration, the initial law, SGD, the flow and the
exact commuting case. The derivation itself (the program equals the product rule with Σ) is in
`test_hierarchy.py::test_derivation_with_a_data_covariance_is_exact`.
"""

import numpy as np
import pytest

from momentgen.compiler.initial import exact_moments
from momentgen.compiler.potential import Potential
from momentgen.dynamics.closures import solve_with_closure
from momentgen.evidence.oracles import aligned_tied_average
from momentgen.models import Model
from momentgen.models.words import parse
from momentgen.reference import SGDRun
from momentgen.setting.config import ConfigError, parse_config
from momentgen.setting.data import DataCovariance
from momentgen.setting.inits import InitSpec
from momentgen.setting.losses import builtin
from momentgen.setting.matrices import letter_matrices, sample_factors, trace_moments
from tests.helpers import sigma_config

LINEAR = builtin("mse", L=1, K=2, activation="h1")


POWER = DataCovariance("power-law", 1.0)


@pytest.mark.parametrize(
    "tables,message",
    [
        ({"data": {"covariance": "gaussian"}}, "data covariance"),
        ({"data": {"covariance": "power-law", "exponent": -1.0}}, "exponent"),
        ({"data": {"covariance": "power-law", "exponent": float("nan")}}, "exponent"),
        ({"data": {"covariance": "from-file"}}, "needs `path`"),
        ({"data": {"covariance": "isotropic", "exponent": 2.0}}, "not read"),
        ({"data": {"covariance": "isotropic", "exponent": 1.0}}, "aligned"),
        ({"model": {"kind": "untied", "K": 2, "trainable": [1]}}, "O\\(√d\\)"),
        ({"truncation": {"degree": 7, "observables": ["S1 Sigma", "Sigma2"]}}, "Sigma2"),
    ],
)
def test_bad_data_tables_are_one_line_errors(tables, message):
    with pytest.raises(ConfigError, match=message) as error:
        sigma_config(**tables)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("case", ["not-positive", "asymmetric", "wrong-length", "nan"])
def test_a_bad_covariance_file_is_a_one_line_error(tmp_path, case):
    """from-file Σ: checked when the configuration is read (non-PD, asymmetric, NaN), and its length against d."""
    path = tmp_path / "sigma.npz"
    arrays = {
        "not-positive": {"eigenvalues": np.array([1.0, 0.0, 2.0])},
        "asymmetric": {"Sigma": np.array([[1.0, 0.5], [0.0, 1.0]])},
        "wrong-length": {"eigenvalues": np.ones(5)},
        "nan": {"eigenvalues": np.array([1.0, np.nan, 2.0])},
    }[case]
    np.savez(path, **arrays)
    raw = {
        "model": {"kind": "tied", "K": 2, "trainable": [1]},
        "loss": {"builtin": "mse", "activation": "h1"},
        "data": {"covariance": "from-file", "path": str(path)},
        "init": {"1": {"kind": "gaussian"}, "2": {"kind": "identity"}},
        "truncation": {"degree": 5},
        "integrate": {"T": 0.1},
        "sgd": {"d": 8},
    }
    if case == "wrong-length":
        config = parse_config(raw)
        with pytest.raises(Exception, match="dimension 5, the run d = 8"):
            config.data().eigenvalues(8)
        return
    with pytest.raises(ConfigError) as error:
        parse_config(raw)
    assert "\n" not in str(error.value) and "sigma.npz" in str(error.value)


def test_power_law_moments_and_finite_spectrum():
    """τ(Σ^p) = (1 + a)^p/(1 + ap) (the quantile (1 + a)u^a integrated), against the mean of the finite-d midpoint
    quantiles (error O(1/d) for a = 1: measured 2e-6 at d = 4000 for p = 2; tolerance 1e-4); Tr Σ/d = 1 at every d."""
    data = DataCovariance("power-law", 1.0)
    values = data.eigenvalues(4000)
    assert values.mean() == pytest.approx(1.0, abs=1e-12)
    for p in (0.5, 2.0, 3.0):
        assert np.mean(values**p) == pytest.approx(data.moment(p), rel=1e-4)


@pytest.mark.parametrize(
    "data",
    [
        DataCovariance("power-law", 0.5),
        DataCovariance("power-law", 2.0),
        DataCovariance("from-file", values=tuple(np.linspace(0.2, 1.8, 40) ** 2)),
    ],
    ids=["power-law 0.5", "power-law 2", "from-file"],
)
def test_stratified_eigenvalues_draw_each_quantile_bin_once(data):
    """`stratified_eigenvalues`: the i-th of n lies in the law's i-th quantile bin [Q(i/n), Q((i + 1)/n)] (Q the
    quantile function: (1 + a)u^a, or the file's sorted eigenvalues as a step function), and `bin_means` is each
    one's expectation — against Q integrated over the bin by a 20 000-point midpoint rule per bin (measured 3.2e-8
    relative at a = 0.5, where u^a is not smooth at u = 0; tolerance 1e-6; the step function is exact)."""
    n, ordered = 12, np.sort(data.values or [0.0])

    def quantile(u):
        if data.covariance == "power-law":
            return (1 + data.exponent) * u**data.exponent
        return ordered[np.minimum((u * len(ordered)).astype(int), len(ordered) - 1)]

    draw = data.stratified_eigenvalues(n, np.random.default_rng(3))
    edges = np.arange(n + 1) / n
    assert np.all(draw >= quantile(edges[:-1]) - 1e-15) and np.all(draw <= quantile(edges[1:] - 1e-12) + 1e-15)
    fine = (np.arange(20000) + 0.5) / 20000
    by_rule = np.array([quantile(lo + (hi - lo) * fine).mean() for lo, hi in zip(edges[:-1], edges[1:])])
    assert np.allclose(data.bin_means(n), by_rule, rtol=1e-6)


def test_stratified_spectra_average_to_the_law_where_midpoint_quantiles_do_not():
    """Over draws, a linear statistic of `stratified_eigenvalues` averages to the law's own value: τ(Σ^p) =
    (1 + a)^p/(1 + ap) (`moment`, closed form), here at n = 8 for a = 0.5 and p ∈ {1, 2, −1} (p = −1 reads the lower
    edge). Measured over 4 000 draws: within 0.25 standard errors; asserted within 4. The midpoint quantiles
    (renormalised to τ(Σ) = 1) are off for p = −1 by 10 %, 16 of those standard errors (asserted: more than 10): that
    edge bias is what an ensemble's draws avoid."""
    data, n = DataCovariance("power-law", 0.5), 8
    rng = np.random.default_rng(0)
    draws = np.array([data.stratified_eigenvalues(n, rng) for _ in range(4000)])
    for p in (1.0, 2.0, -1.0):
        statistic = (draws**p).mean(axis=1)
        standard_error = statistic.std(ddof=1) / np.sqrt(len(statistic))
        assert abs(statistic.mean() - data.moment(p)) <= 4 * standard_error, p
    midpoint = np.mean(data.law_eigenvalues(n) ** -1.0)
    assert abs(midpoint - data.moment(-1.0)) > 10 * ((draws**-1.0).mean(axis=1).std(ddof=1) / np.sqrt(4000))


def test_exact_initial_moments_with_sigma_match_large_matrices():
    """Σ free from Gaussian students, aligned letters c Σ^b on Σ's component: the planar sum with faces at τ(Σ^e)
    against finite matrices at d = 1000 (fluctuations O(1/d): measured ≤ 0.0056 over seeds 0–2; tolerance 0.02)."""
    data = DataCovariance("power-law", 1.5)
    model = Model("tied", 3, (1,), sigma=True)
    specs = {
        1: InitSpec(width_ratio=0.7, scale=0.8),
        2: InitSpec("aligned", c=1.3, exponent=0.5),
        3: InitSpec("identity", c=0.5),
    }
    words = ["Sigma S1 Sigma S1", "Sigma S1 S2 S1", "S1 S1 Sigma S1 Sigma Sigma", "S1 S3 S1 Sigma S1 S2"]
    codes = [parse(w, model) for w in words]
    factors = sample_factors(model, specs, 1000, 0, data)
    finite = trace_moments(codes, letter_matrices("tied", factors, data.matrix(1000)))
    np.testing.assert_allclose(exact_moments(model, specs, codes, data), finite, atol=0.02)


@pytest.mark.parametrize("kind", ["tied", "direct", "symmetric"])
def test_expected_sgd_step_with_sigma_is_the_matrix_flow(kind):
    """MATH.md §10: with x = Σ^{1/2} z (diagonal power-law Σ) the mean SGD step equals the flow velocity with every
    inserted letter X → ΣXΣ and the Σ-weighted order parameters in Φ. Linear loss: Stein is exact at finite d; with
    B = 400 000 at d = 12 the batch noise is ≤ 2 % (measured 1.5–1.8 %): tolerance 5 %, as the isotropic test."""
    d, lr = 12, 1e-3
    model = Model(kind, 2, [1], sigma=True)
    teacher = InitSpec("aligned", c=1.2, exponent=0.5) if kind == "tied" else InitSpec(scale=1.0)
    factors = sample_factors(model, {1: InitSpec(scale=0.7), 2: teacher}, d, seed=4, data=POWER)
    run = SGDRun(model, LINEAR, None, factors, lr, 400_000, 0.0, np.random.default_rng(0), data=POWER)
    run.step()
    step = (run.factors[0] - factors[0]) / lr
    letters = letter_matrices(kind, factors, POWER.matrix(d))
    family = model.definition
    Q = [
        np.array(
            [
                [trace_moments([parse(family.order_texts(model, k, l)[r], model)], letters)[0] for l in (1, 2)]
                for k in (1, 2)
            ]
        )  # fmt: skip
        for r in (0, 1)
    ]
    coefficients = {**family.potential_families(Potential(LINEAR, kind).at(*Q)), "gamma": 0.0}
    velocity = family.matrices.factor_velocities(model, factors, coefficients, letters)[0] * (
        4 / d if kind == "tied" else 1 / d
    )
    assert np.linalg.norm(step - velocity) <= 0.05 * np.linalg.norm(velocity)


def _commuting_errors(config):
    result = solve_with_closure(config)
    t, a, b, c, c0 = result.t, 1.0, 0.5, 1.2, 0.5
    words = max(
        np.abs(result.series[w] - aligned_tied_average(t, pq, a, b, c, c0)).max()
        for w, pq in (("S1", (0, 1)), ("S1 Sigma", (1, 1)), ("S1 S1", (0, 2)))
    )
    exact = aligned_tied_average(t, "risk", a, b, c, c0)
    relative = np.abs(result.derived["risk"] / exact - 1)
    estimate = np.array(result.error_series["risk_relative"], dtype=float)
    return result, words, relative, estimate


def test_exact_commuting_case_with_a_power_law_tail():
    """Student c₀I, teacher c Σ^b aligned with a power-law Σ (a = 1, b = ½): each direction is a logistic flow
    (`evidence.oracles.aligned_tied_average`, checked against a 4000-point Gauss rule to 1e-12). The quadrature
    closure puts Σ's edge-adapted rule under every letter (`layered_index` 0). Degree 7, t ∈ [0, 2] (risk 2.5 → 7.2e-4;
    the largest errors are early, the far tail is `test_exact_commuting_case_to_t50`):
    measured words ≤ 1.2e-4 (tolerance 5e-4), risk relative error ≤ 4.2e-3 (tolerance 1.5e-2; the issue asks 10 %),
    its relative estimate never below the true error (measured ≥ 10×)."""
    result, words, relative, estimate = _commuting_errors(sigma_config(integrate={"T": 2.0, "points": 11}))
    assert result.extra["estimate_legs"] == ["coarse", "fine", "layer"]
    ax = result.plot(words=["Sigma S1", "risk"], log=True)  # a word with Σ in any spelling
    assert [line.get_label() for line in ax.get_lines()][0].startswith("μ(S1 Sigma)")
    assert words <= 5e-4
    assert relative.max() <= 1.5e-2
    assert np.all(estimate[1:] >= relative[1:])


def test_exact_commuting_case_to_t50():
    """The same at degree 13 up to t = 50 (risk 2.5 → 5.6e-6, a power law ~ t^{-0.6} at the end; 3 s on the flow
    engine's commuting path, 27 s before it): measured
    words ≤ 7.9e-5 (tolerance 3e-4; the issue asks 1e-3), risk ≤ 1.1e-2 relative (tolerance 3.5e-2; the issue asks
    10 %), estimate ≥ 3.6× the true error."""
    config = sigma_config(truncation={"degree": 13}, integrate={"T": 50.0, "points": 101})
    result, words, relative, estimate = _commuting_errors(config)
    assert words <= 3e-4
    assert relative.max() <= 3.5e-2
    assert np.all(estimate[1:] >= relative[1:])


def test_a_covariance_file_runs_end_to_end(tmp_path):
    """A from-file Σ (its eigenvalues) is the law of the theory's Σ and the matrix of SGD's tokens: at t = 0 the
    quadrature closure's q̃₁₁ = μ(ΣS₁ΣS₁) is σ⁴(τ(Σ)² + τ(Σ²)) of the file's eigenvalues (Wick, square Wishart student;
    measured to 1e-15, tolerance 1e-12: the Gauss rule of the file's measure is exact for these degrees), and SGD
    reads the same file (its Tr Σ/d is the file's)."""
    values = np.linspace(0.2, 1.8, 40)
    np.savez(tmp_path / "sigma.npz", eigenvalues=values)
    raw = {
        "model": {"kind": "tied", "K": 2, "trainable": [1]},
        "loss": {"builtin": "mse", "activation": "h1"},
        "data": {"covariance": "from-file", "path": "sigma.npz"},
        "init": {"1": {"kind": "gaussian", "scale": 0.8}, "2": {"kind": "aligned", "c": 1.0, "exponent": 1.0}},
        "truncation": {"degree": 5, "closure": "quadrature", "observables": ["S1", "S1 Sigma"]},
        "integrate": {"T": 0.2, "points": 3},
        "sgd": {"d": 40, "lr": 0.01, "batch": 32},
    }
    path = tmp_path / "c.toml"
    path.write_text("")  # the configuration's folder is where its files are read from
    config = parse_config(raw, source=str(path))
    result = solve_with_closure(config)
    m1, m2 = values.mean(), np.mean(values**2)
    assert result.series["S1 Sigma S1 Sigma"][0] == pytest.approx(0.8**4 * (m1**2 + m2), abs=1e-12)
    assert result.status in ("ok", "partial", "unverified")
    from momentgen.reference import simulate_config

    sgd = simulate_config(config, seeds=[0], progress=False)
    assert sgd["status"] == "ok" and sgd["series"]["S2 Sigma S2 Sigma"][0] == pytest.approx(np.mean(values**4))


def _verify_config(kind, finite_lr):
    teacher = {"kind": "gaussian", "mean": 1.0} if kind == "untied" else {"kind": "aligned", "c": 1.0, "exponent": 1.0}
    return {
        "model": {"kind": kind, "K": 2, "trainable": [1]},
        "loss": {"builtin": "mse", "activation": "h1"},
        "data": {"covariance": "power-law", "exponent": 1.0},
        "init": {"1": {"kind": "gaussian", "scale": 0.5}, "2": teacher},
        "truncation": {"degree": 6, "closure": "matrix-model", "size": 300, "observables": ["S1", "S1 S2"]}
        if kind != "untied"
        else {"degree": 5, "closure": "matrix-model", "size": 200, "observables": ["M1 M2^T", "M1 M2"]},
        "integrate": {"T": 0.5 if kind != "untied" else 0.1, "points": 11, "finite_lr": finite_lr},
        "sgd": {"d": 100 if kind != "untied" else 200, "lr": 0.01, "batch": 200 if kind != "untied" else 160},
    }


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["tied", "untied", "direct", "symmetric"])
def test_verify_agrees_with_sgd_for_every_kind_with_sigma(kind):
    """MATH.md §10's check, per kind: `verify` (drift at t = 0 against SGD's one-step change extrapolated in d, and
    SGD against the theory from each run's own start, extrapolated in 1/d or 1/√d) agrees on a power-law Σ with the
    finite-learning-rate term on (κ = 0.005; untied 0.0125). Measured: `agree` for each kind, about 2 min each (the
    per-word numbers of the same check on the configurations of issue 29's table: drift within 0.7–2.7 SE, the
    finite-d leg at 0.2–0.5× its tolerance)."""
    from momentgen.interface.api import verify

    result = verify(parse_config(_verify_config(kind, True)), budget=200, progress=False, closure="matrix-model")
    assert result.verdict == "agree", result.message


@pytest.mark.parametrize("kind", ["direct", "symmetric"])
def test_direct_and_symmetric_with_sigma_have_a_quadrature_closure(kind):
    """With Σ their hierarchies no longer close, so the quadrature closure represents them: the symmetric letter by
    the semicircle's Jacobi matrix, the direct one by Gram–Schmidt on its exact moments, free from Σ's component. It
    follows the matrix model (an independent construction: n = 300 matrices at the laws' quantiles, Haar rotations)
    over the curve: measured sup difference 2.6e-3 (symmetric: the degree-9 Gauss rule of Σ, 1.5e-3 from its
    converged value, and the matrix model's O(1/n)), 1.05e-2 (direct: the n = 300 matrix model's random start, already
    1.05e-2 at t = 0; 1e-3 at n = 1200) on words of size up to 3 — tolerance 3e-2; a wrong Jacobi matrix or a
    missing Σ is off by O(1)."""
    raw = _verify_config(kind, False)
    raw["truncation"] = {"degree": 9, "closure": "quadrature", "size": 300, "observables": ["S1", "S1 S1", "S1 S2"]}
    raw["integrate"]["T"] = 0.25
    config = parse_config(raw)
    quadrature, matrix = solve_with_closure(config), solve_with_closure(config, "matrix-model")
    assert quadrature.status in ("ok", "unverified", "partial") and len(quadrature.t) == len(matrix.t)
    gap = max(np.abs(quadrature.series[w] - matrix.series[w]).max() for w in quadrature.series)
    assert gap <= 3e-2


def test_the_zero_closure_reports_the_words_its_risk_reads():
    """With Σ, Φ reads the Σ-weighted words (degree 4); the zero closure reports them and its risk at t = 0 is the exact
    2∫λ²(c₀ − cλ^b)² of the commuting case (`aligned_tied_average` at t = 0; measured 2.5476809, equal to 1e-12 —
    before, those words were left out and the risk read them as 0)."""
    result = solve_with_closure(
        sigma_config(truncation={"degree": 9, "closure": "zero"}, integrate={"T": 0.2, "points": 5})
    )
    assert "S1 Sigma S1 Sigma" in result.series
    exact = aligned_tied_average([0.0], "risk", 1.0, 0.5, 1.2, 0.5)[0]
    assert result.derived["risk"][0] == pytest.approx(exact, rel=1e-10)


@pytest.mark.slow
def test_verify_agrees_on_a_from_file_sigma(tmp_path):
    """Issue 41: a from-file Σ fixes d, and verify needs two: it now runs SGD at d_file and 2·d_file (Σ ⊗ I₂, the
    same spectral law, so the same d = ∞ curve) and extrapolates in 1/d. Tied mse(h1) on a 100-dimensional Σ
    (eigenvalues at the power law's quantiles, shuffled: the file's order is the coordinates'), aligned teacher."""
    from momentgen.interface.api import verify

    values = DataCovariance("power-law", 1.0).eigenvalues(100)
    np.savez(tmp_path / "sigma.npz", eigenvalues=np.random.default_rng(0).permutation(values))
    raw = _verify_config("tied", False)
    raw["data"] = {"covariance": "from-file", "path": str(tmp_path / "sigma.npz")}
    result = verify(parse_config(raw), budget=200, progress=False, closure="matrix-model")
    assert result.checks["finite-d"]["d"] == [100, 200]
    assert result.verdict == "agree", result.message
