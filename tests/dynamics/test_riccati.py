"""The riccati closure (MATH.md §15): one trainable tied letter against one fixed letter, exact at d = ∞.

References, each independent of the closure's subordination: the Marchenko–Pastur density integrated by adaptive
quadrature (the student's φ), the solvable case's eigenvalue-wise closed form (`oracles.solvable_tied_risk`, teacher
cI), the finite-d matrix Riccati equation solved in closed form (mse(h1): Γ₁₁ = 2, Γ₁₂ = −2, so Y = S⁻¹ is
``e^{At}Y₀e^{At} + 4∫e^{2A(t−s)}`` in S*'s eigenbasis; `finite_riccati`), and the quadrature closure at degree 13
(fig. 1's softmax loss, where Γ moves).
"""

import numpy as np
import pytest

from momentgen.core.errors import ModelError
from momentgen.dynamics.closures import solve_with_closure, whole_curve_closure
from momentgen.dynamics.riccati import FixedLaw, outside_riccati
from momentgen.evidence.oracles import solvable_tied_risk
from momentgen.setting.config import parse_config

HARD_EDGE = {  # the case: square student (hard edge at 0), Wishart teacher of width 1.5 d, mse(h1)
    "model": {"kind": "tied", "K": 2, "trainable": [1]},
    "loss": {"builtin": "mse", "activation": "h1"},
    "init": {"1": {"kind": "gaussian", "scale": 0.8}, "2": {"kind": "gaussian", "width_ratio": 1.5}},
    "truncation": {
        "degree": 13,
        "closure": "riccati",
        "size": 64,
        "observables": ["S1", "S1 S1", "S1 S2", "S1 S1 S1", "S1 S2 S1 S2", "S1 S1 S2 S1 S2 S2"],
    },
    "integrate": {"T": 3.0, "points": 7},
}


def config_of(base=HARD_EDGE, **tables):
    raw = {key: dict(value) for key, value in base.items()}
    for table, values in tables.items():
        raw[table] = {**raw.get(table, {}), **values}
    return parse_config(raw)


def draw(d, seed, scale=0.8, width=1.5):
    """The factors [W, V] of a square Gaussian student (entries N(0, scale²/d)) and a Wishart teacher (d × width·d)."""
    rng = np.random.default_rng(seed)
    return [rng.normal(0, scale / np.sqrt(d), (d, d)), rng.normal(0, 1 / np.sqrt(d), (d, int(width * d)))]


def finite_riccati(factors, times, gamma=0.0):
    """Traces of the finite-d mse(h1) flow from ``factors`` (`draw`): {word: array over times} for the words the
    tests read, and the risk 2τ((S − S*)²)."""
    W, V = factors
    d = len(W)
    lam, Q = np.linalg.eigh(V @ V.T)
    s0, P = np.linalg.eigh(Q.T @ (W @ W.T) @ Q)
    Y0 = (P / s0) @ P.T  # S₀⁻¹ in S*'s eigenbasis
    alpha = -2 * lam + gamma / 4
    out = {k: [] for k in ("S1", "S1 S1", "S1 S2", "S1 S1 S1", "S1 S2 S1 S2", "S1 S1 S2 S1 S2 S2", "risk")}
    for t in times:
        E = np.exp(alpha * t)
        Y = E[:, None] * Y0 * E[None, :] + np.diag(4 * np.expm1(2 * alpha * t) / (2 * alpha))
        y, R = np.linalg.eigh(Y)
        S = (R / y) @ R.T
        X = S * lam[None, :]  # S S*
        out["S1"].append(np.trace(S) / d)
        out["S1 S1"].append(np.sum(S * S) / d)
        out["S1 S2"].append(np.trace(X) / d)
        out["S1 S1 S1"].append(np.trace(S @ S @ S) / d)
        out["S1 S2 S1 S2"].append(np.sum(X * X.T) / d)
        out["S1 S1 S2 S1 S2 S2"].append(np.trace(S @ X @ X @ np.diag(lam)) / d)
        out["risk"].append(2 * np.sum((S - np.diag(lam)) ** 2) / d)
    return {k: np.array(v) for k, v in out.items()}


def test_the_fixed_letters_rule_has_the_wishart_moments():
    """The Gauss rule of a Wishart law (with its atom below rate 1) reproduces its moments τ(S^k), k ≤ 4."""
    for rate, jump in ((1.5, 1.0), (0.5, 0.7)):
        law = FixedLaw.wishart(rate, jump, 12)
        moments = [law.weights @ law.nodes**k for k in range(1, 5)]
        # free Poisson moments: Σ_j Narayana(k, j) rate^j jump^k
        narayana = {1: [1], 2: [1, 1], 3: [1, 3, 1], 4: [1, 6, 6, 1]}
        exact = [sum(n * rate ** (j + 1) for j, n in enumerate(narayana[k])) * jump**k for k in range(1, 5)]
        assert moments == pytest.approx(exact, rel=1e-12)


def test_the_solvable_case_is_exact_deep_into_the_tail():
    """Teacher 1.5·I, square student 0.8²: the risk against the eigenvalue-wise closed form over 10 decades
    (5.3 → 1.05e-6 at t = 5): measured 3e-10 relative to t = 4, 4e-7 at t = 5 (the integration's rtol 1e-9 over a
    risk 2e-6 of the order parameters),
    and the estimate (2.2e-3 at t = 5: the integration floor relative to the risk) is above it."""
    config = config_of(init={"2": {"kind": "identity", "c": 1.5}}, integrate={"T": 5.0, "points": 11})
    result = solve_with_closure(config)
    exact = solvable_tied_risk(result.t, c=1.5, sigma=0.8)
    relative = np.abs(result.derived["risk"] / exact - 1)
    assert result.status == "ok" and result.estimate_is_bound
    assert relative.max() < 3e-6, relative
    assert np.all(relative <= np.array(result.error_series["risk_relative"])), relative


def test_every_word_against_the_finite_d_riccati_flow_of_the_same_spectra():
    """The subordination for words to 6 letters (up to 4 student letters with the teacher between them): the
    closure started from a draw's own spectra (d = 600, taken in generic position) against that draw's finite-d
    flow — what is left is the O(1/d) of asymptotic freeness. Measured: words ≤ 1.8e-3 relative, the risk 1.0e-2
    (small at late times: relative to it); asserted 5e-3 and 3e-2."""
    factors = draw(600, 0)
    result = solve_with_closure(config_of(), factors=factors)
    finite = finite_riccati(factors, result.t)
    for word in HARD_EDGE["truncation"]["observables"]:
        assert np.abs(finite[word] / result.series[word] - 1).max() < 5e-3, word
    assert np.abs(finite["risk"] / result.derived["risk"] - 1).max() < 3e-2


def test_the_hard_edge_wishart_case_against_the_finite_d_riccati_flow():
    """The issue's case (square student, teacher of width 1.5 d) from the d = ∞ laws: the degree-2 words and the
    risk against the finite-d closed-form flow, mean of 3 draws at d = 500. Measured: words 3e-3, the risk 6e-3
    relative (finite-d fluctuations; `slow` checks d = 1500 extrapolated); asserted 1 % and 2 %."""
    result = solve_with_closure(config_of())
    draws = [finite_riccati(draw(500, seed), result.t) for seed in range(3)]
    for word in ("S1", "S1 S1", "S1 S2"):
        finite = np.mean([one[word] for one in draws], axis=0)
        assert np.abs(finite / result.series[word] - 1).max() < 0.01, word
    finite_risk = np.mean([one["risk"] for one in draws], axis=0)
    assert np.abs(finite_risk / result.derived["risk"] - 1).max() < 0.02


def test_weight_decay_moves_the_exponent_as_the_finite_flow_does():
    """γ = 0.5: A = −2S* + γ/4 in the Riccati equation; the risk against the finite-d flow with the same γ from the
    same spectra (d = 500; measured 5.6e-3 relative, asserted 1.5e-2)."""
    factors = draw(500, 1)
    result = solve_with_closure(config_of(model={"gamma": 0.5}), factors=factors)
    finite = finite_riccati(factors, result.t, gamma=0.5)["risk"]
    assert np.abs(finite / result.derived["risk"] - 1).max() < 1.5e-2


def test_softmax_with_two_tokens_agrees_with_the_quadrature_closure():
    """Fig. 1's loss (softmax, L = 2) with a Wishart teacher of width 1.5 d, t ≤ 1: Γ moves with the state. Against
    the quadrature closure at degree 13 (an independent closure): measured 2e-5 on words, 4e-5 relative on the risk,
    inside the quadrature closure's own estimate (9e-5), which is asserted."""
    config = config_of(
        model={"L": 2},
        loss={"builtin": "softmax-mse", "activation": None, "rtol": 1e-8},
        init={"1": {"kind": "gaussian", "scale": 1.0}},
        truncation={"observables": ["S1", "S1 S1", "S1 S2"]},
        integrate={"T": 1.0, "points": 6},
    )
    exact = solve_with_closure(config)
    other = solve_with_closure(config, closure="quadrature")
    bound = other.error_estimate
    for word in ("S1", "S1 S1", "S1 S2"):
        assert np.abs(np.asarray(other.series[word]) - exact.series[word]).max() <= bound
    assert np.abs(other.derived["risk"] / exact.derived["risk"] - 1).max() <= 3 * bound


def test_the_estimate_bounds_the_error_of_a_coarse_rule():
    """N = 12 nodes (coarse leg 6) against N = 128: the estimate is above the true error at every time."""
    fine = solve_with_closure(config_of(truncation={"size": 128}))
    coarse = solve_with_closure(config_of(truncation={"size": 12}))
    for word in ("S1 S1", "S1 S2"):
        error = np.abs(coarse.series[word] - fine.series[word]) / np.maximum(1, np.abs(fine.series[word]))
        assert np.all(error <= np.array(coarse.error_series["estimate"])), word
    risk_error = np.abs(coarse.derived["risk"] / fine.derived["risk"] - 1)
    assert np.all(risk_error <= np.array(coarse.error_series["risk_relative"]))


def test_the_spectrum_is_the_finite_d_one():
    """S(t = 1)'s spectral CDF (`Result.spectrum`, from the Stieltjes transform) against the eigenvalues of the
    finite-d flow at d = 800 (one draw): Kolmogorov distance measured 2.9e-3 (3.0e-3 with another draw; the finite-d
    fluctuation and the cells' width); asserted 0.01, the issue's target."""
    result = solve_with_closure(config_of(integrate={"T": 1.0, "points": 2}), spectra=True)
    curve = result.spectrum("S1", 1.0, points=600)
    d = 800
    W, V = draw(d, 7)
    lam, Q = np.linalg.eigh(V @ V.T)
    s0, P = np.linalg.eigh(Q.T @ (W @ W.T) @ Q)
    alpha = -2 * lam
    E = np.exp(alpha)
    Y = E[:, None] * ((P / s0) @ P.T) * E[None, :] + np.diag(4 * np.expm1(2 * alpha) / (2 * alpha))
    eigenvalues = np.sort(1 / np.linalg.eigvalsh(Y))
    empirical = np.searchsorted(eigenvalues, curve["x"], side="right") / d
    assert np.abs(empirical - curve["cdf"]).max() < 0.01


@pytest.mark.parametrize(
    "change, named",
    [
        ({"model": {"kind": "direct"}}, "direct"),
        ({"model": {"trainable": [1, 2]}}, "2 trainable"),
        ({"model": {"K": 3}, "init": {"3": {"kind": "identity"}}}, "K = 3"),
        ({"integrate": {"finite_lr": True}, "sgd": {"d": 100, "lr": 0.05, "batch": 10}}, "finite-learning-rate"),
        ({"data": {"covariance": "power-law", "exponent": 1.0}}, "anisotropic"),
    ],
)
def test_outside_its_class_it_refuses_in_one_line_and_names_the_closures_that_serve(change, named):
    config = config_of(**change)
    why = outside_riccati(config, config.kappa)
    assert why is not None and named in why and "\n" not in why
    with pytest.raises(ModelError, match="quadrature"):
        solve_with_closure(config)


def test_a_rule_too_large_is_refused_before_it_is_built():
    """`size` is the fixed letter's node count: 20 000 (the matrix model's largest n) would hold a 3.2 GB
    eigenvector matrix in Golub–Welsch; refused in one line, naming the limit."""
    with pytest.raises(ModelError, match="at most 4096"):
        solve_with_closure(config_of(truncation={"size": 20_000}))


def test_it_is_the_whole_curve_closure_where_it_applies():
    """`whole_curve_closure` (what `solve` runs when the zero closure's window ends and `verify` checks with) is
    the riccati closure inside its class and the quadrature closure outside it."""
    assert whole_curve_closure(config_of(), 0.0).name == "riccati"
    assert whole_curve_closure(config_of(model={"trainable": [1, 2]}), 0.0).name == "quadrature"
    assert whole_curve_closure(config_of(), 0.01).name != "riccati"


@pytest.mark.slow
def test_the_hard_edge_risk_is_within_one_percent_at_large_d():
    """The issue's acceptance: the risk on t ∈ [0, 3] against the finite-d flow at d = 750 and 1500 (2 draws each),
    extrapolated linearly in 1/d: measured ≤ 0.4 % relative; asserted 1 %."""
    result = solve_with_closure(config_of(integrate={"T": 3.0, "points": 13}))
    means = {
        d: np.mean([finite_riccati(draw(d, seed), result.t)["risk"] for seed in range(2)], axis=0) for d in (750, 1500)
    }
    extrapolated = 2 * means[1500] - means[750]
    assert np.abs(extrapolated / result.derived["risk"] - 1).max() < 0.01


@pytest.mark.slow
def test_outside_the_class_the_quadrature_closure_says_from_when_the_tail_is_not_resolved():
    """Issue 44, item 3: two trainable heads (square Gaussian, scale 0.6) against a Wishart teacher (width 1.5 d),
    loss (G₁ + G₂ − G₃)² — two non-commuting letters at an edge, outside the riccati closure's class. The quadrature
    closure (degree 9) against the matrix model at n = 200 and 400 extrapolated in 1/n (a reference that follows
    the edge; its own noise is 0.3 % at t = 0, where the closure is exact, and n = 200 and 400 part by up to 2.6 %):
    measured relative error of the risk 2.1 % / 6.9 % / 18 % / 77 % at t = 0.3 / 0.6 / 0.9 / 3 under an estimate of
    5.6 % / 38 % / 2.7 / 10 — asserted wherever the error is above the reference's noise (3 %); `risk_valid_until`
    0.3, the error below 10 % until then, and the message says so."""
    config = parse_config(
        {
            "model": {"kind": "tied", "K": 3, "trainable": [1, 2], "L": 1},
            "loss": {"expression": "(G[1,1,1] + G[1,1,2] - G[1,1,3])**2"},
            "init": {"1": {"scale": 0.6}, "2": {"scale": 0.6}, "3": {"width_ratio": 1.5}},
            "truncation": {"degree": 9, "observables": ["S1 S1", "S1 S3"], "closure": "quadrature"},
            "integrate": {"T": 3.0, "points": 31},
        }
    )
    result = solve_with_closure(config)
    risks = {n: solve_with_closure(config, "matrix-model", size=n).derived["risk"] for n in (200, 400)}
    reference = 2 * risks[400] - risks[200]
    error = np.abs(result.derived["risk"] / reference - 1)
    estimate = np.array(result.error_series["risk_relative"], float)
    resolved = error > 0.03
    assert resolved.sum() > 20 and np.all(error[resolved] <= estimate[resolved]), (error, estimate)
    until = result.extra["risk_valid_until"]
    assert 0 < until < 1 and np.all(error[result.t <= until] < 0.1)
    assert f"the risk's tail is resolved to 10% relative until t = {until:.4g} only" in result.message


@pytest.mark.parametrize("rate", [0.5, 2.0])
def test_students_of_every_width_against_the_closed_form(rate):
    """A student of width ratio r (an atom 1 − r at 0 below 1, which stays a kernel) against teacher 1.5·I: each
    eigenvalue on its logistic flow. r = 2 (no hard edge: the risk falls to 8e-15 by t = 3) against
    `oracles.solvable_tied_risk`: measured 9e-6 relative while the risk is above 1e-9 (the integration's rtol 1e-9
    relative to q ≈ 2), then the cancellation of
    τ(S²) − 2cτ(S) + c² at 1e-14 of q (0.17 at t = 3), which the risk's estimate covers (it is 2e5 there);
    r = 0.5 against the same closed form on the nonzero part plus the kernel's 2(1 − r)c² (measured 1e-12).
    Asserted: 3e-5 where the risk is above 1e-9, and the estimate above the error everywhere."""
    config = config_of(
        init={"1": {"scale": 0.8, "width_ratio": rate}, "2": {"kind": "identity", "c": 1.5}},
        integrate={"T": 3.0, "points": 7},
    )
    result = solve_with_closure(config)
    if rate >= 1:
        exact = solvable_tied_risk(result.t, c=1.5, sigma=0.8, rate=rate)
    else:  # W of width r d: the nonzero eigenvalues are those of a Wishart of rate 1/r and jump r σ²
        nonzero = solvable_tied_risk(result.t, c=1.5, sigma=0.8 * np.sqrt(rate), rate=1 / rate)
        exact = rate * nonzero + 2 * (1 - rate) * 1.5**2
    error = np.abs(result.derived["risk"] / exact - 1)
    assert error[exact > 1e-9].max() < 3e-5
    assert np.all(error <= np.array(result.error_series["risk_relative"]))


def test_a_student_from_a_file_is_read_by_its_spectrum(tmp_path):
    """``[init.1] kind = "from-file"``: the file's W (d = 400) enters by its spectrum, the teacher drawn at the file's
    d by the first SGD seed, the pair taken in generic position; against the finite-d flow of those matrices
    (asymptotic freeness at d = 400: measured ≤ 3.1e-4 relative on μ(S1), μ(S1 S1), μ(S1 S2) and 2.5e-2 on the risk,
    small at late times; asserted 1e-3 and 8e-2)."""
    W = draw(400, 3)[0]
    np.savez(tmp_path / "student.npz", W=W)
    config = config_of(init={"1": {"kind": "from-file", "path": str(tmp_path / "student.npz")}})
    result = solve_with_closure(config)
    assert result.status == "ok" and "exact spectrum" in result.message and "generic position" in result.message
    finite = finite_riccati(config.start_factors(), result.t)
    for word in ("S1", "S1 S1", "S1 S2"):
        assert np.abs(finite[word] / result.series[word] - 1).max() < 1e-3, word
    assert np.abs(finite["risk"] / result.derived["risk"] - 1).max() < 8e-2
