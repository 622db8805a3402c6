"""An SGD self-check independent of every kind's gradient code (issue 26 item 5).

Each kind's `sgd_step` differentiates the loss by hand (BLAS-shaped formulas). Here the same step is
checked against a finite difference of the *empirical population loss* on the same tokens, computed
from the definition of the pre-activations in MATH.md §1 with plain numpy (no code of the kinds):
with all N tokens in one minibatch, ``(P − step(P))/η − (γ/d) P`` is exactly ``∇_P (1/N) Σ_n ℓ(G_n)``,
so its inner product with any direction V equals the central difference of the loss along V.

Losses with ``E[∂ℓ/∂G] ≠ 0`` (h2, tanh with a teacher mean, softmax) are used on purpose: with mse(h1)
the centring term of the tied gradient averages to 0, and flipping its sign went unnoticed by
every SGD test and by `verify` (the mutation tests below keep that in the suite).

Online SGD and the finite-d matrix flow: determinism, the expected gradient, agreement.
"""

import numpy as np
import pytest
import sympy

from momentgen.compiler.initial import InitSpec
from momentgen.compiler.potential import Potential
from momentgen.compiler.truncation import CoefficientSource
from momentgen.dynamics.closures import solve_with_closure
from momentgen.evidence.oracles import solvable_tied_moments
from momentgen.evidence.verification import verify
from momentgen.models import Batch, Model
from momentgen.models import tied as tied_module
from momentgen.reference import RiskProbe, SGDRun, loss_gradient, matrix_flow, sgd, simulate_config, steps_for
from momentgen.setting.config import parse_config
from momentgen.setting.losses import builtin
from momentgen.setting.matrices import initial_factors, letter_matrices, sample_factors, trace_moments
from tests.helpers import verify_solvable


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


D, N, LR, GAMMA = 12, 400, 1e-3, 0.1


LOSSES = {
    "h2": {"builtin": "mse", "activation": "h2"},
    "tanh": {"builtin": "mse", "activation": "tanh"},
    "softmax": {"builtin": "softmax-mse"},
}


def attention(kind, factor):
    """S_k of one factor, by its definition (MATH.md §1)."""
    if kind == "tied":
        return factor @ factor.T
    if kind == "untied":
        return factor[0] @ factor[1].T
    return factor


def empirical_loss(kind, loss, factors, X, C):
    """(1/N) Σ_n ℓ(G_n) with G_ijk = (x_iᵀ S_k x_j − [centred] C_ij Tr S_k)/√d, in plain numpy."""
    d = X.shape[-1]
    columns = []
    for factor in factors:
        S = attention(kind, factor)
        G = np.einsum("nia,ab,njb->nij", X, S, X) / np.sqrt(d)
        if kind != "untied":
            G = G - C * np.trace(S) / np.sqrt(d)
        columns.append(G)
    G = np.stack(columns, axis=-1)  # (N, L, L, K), flattened as Loss.variables
    f = sympy.lambdify(loss.variables, loss.expr, "numpy")
    return float(np.mean(f(*G.reshape(len(G), -1).T)))


def direction(kind, factor, rng):
    if kind == "untied":
        return tuple(rng.standard_normal(f.shape) for f in factor)
    V = rng.standard_normal(factor.shape)
    return (V + V.T) / 2 if kind == "symmetric" else V


def moved(factor, V, eps):
    if isinstance(factor, tuple):
        return tuple(f + eps * v for f, v in zip(factor, V))
    return factor + eps * V


def inner(a, b):
    if isinstance(a, tuple):
        return sum(float(np.sum(x * y)) for x, y in zip(a, b))
    return float(np.sum(a * b))


def step_direction_and_difference(kind, loss_name, mean=None):
    """(⟨implied gradient, V⟩ from the kind's sgd_step, central difference of the empirical loss along V)."""
    L = 2 if loss_name == "softmax" else 1
    raw = {
        "model": {"kind": kind, "L": L, "K": 2, "trainable": [1], "gamma": GAMMA},
        "loss": LOSSES[loss_name],
        "init": {"1": {"kind": "gaussian"}, "2": {"kind": "gaussian", **({"mean": mean} if mean else {})}},
        "truncation": {"degree": 4},
        "integrate": {"T": 0.1},
    }
    if L == 2:
        raw["model"]["C"] = [[1.0, 0.3], [0.3, 1.0]]
    config = parse_config(raw)
    model, loss = Model(kind, 2, [1]), config.loss()
    C = np.asarray(config.settings.model.C or np.eye(L))
    rng = np.random.default_rng(7)
    factors = initial_factors(model, config.inits(), D, seed=3)
    root = np.linalg.cholesky(C)
    X = np.einsum("ij,njd->nid", root, rng.standard_normal((N, L, D)))
    new = model.definition.matrices.sgd_step(model, factors, Batch(X, loss_gradient(loss), C), LR, GAMMA)
    P, P_new = factors[0], new[0]
    decay = GAMMA / D
    if kind == "untied":
        implied = tuple((p - q) / LR - decay * p for p, q in zip(P, P_new))
    else:
        implied = (P - P_new) / LR - decay * P
    V = direction(kind, P, rng)
    eps = 1e-5

    def at(shift):
        return empirical_loss(kind, loss, [moved(P, V, shift), *factors[1:]], X, C)

    return inner(implied, V), (at(eps) - at(-eps)) / (2 * eps)


CASES = [
    (kind, loss, mean)
    for kind in ("tied", "untied", "direct", "symmetric")
    for loss, mean in (("h2", None), ("tanh", 0.5 if kind == "untied" else None), ("softmax", None))
]


@pytest.mark.parametrize(("kind", "loss", "mean"), CASES)
def test_every_kinds_sgd_step_is_the_gradient_of_the_empirical_loss(kind, loss, mean):
    """Measured: the two agree to ≤ 3e-9 relative (the central difference's ε² and rounding); asserted
    1e-6 relative. A sign or factor error in any term of a step is O(1) off."""
    from_step, from_difference = step_direction_and_difference(kind, loss, mean)
    assert from_step == pytest.approx(from_difference, rel=1e-6, abs=1e-9)


class FlippedCentring:
    """numpy, except the tied step's centring contraction ⟨g, C⟩ comes out with the opposite sign."""

    def __getattr__(self, name):
        return getattr(np, name)

    def einsum(self, subscripts, *operands, **options):
        value = np.einsum(subscripts, *operands, **options)
        return -value if subscripts == "bij,ij->" else value


def test_the_self_check_catches_a_flipped_centring_term(monkeypatch):
    """Mutation: the sign of the centring term of the tied gradient flipped. With h2 (E[∂ℓ/∂G] ≠ 0) the
    self-check sees it (measured: off by 40 % of the directional derivative)."""
    monkeypatch.setattr(tied_module, "np", FlippedCentring())
    from_step, from_difference = step_direction_and_difference("tied", "h2")
    assert from_step != pytest.approx(from_difference, rel=1e-2)


def test_verify_catches_a_flipped_centring_term_in_sgd(monkeypatch):
    """Mutation on the reference side: with the same flipped sign, `verify` on a tied h2 configuration
    says disagree (the drift check: SGD's mean step is no longer the theory's). Before issue 26 the
    mse(h1) configuration of test_verify said agree with this broken SGD."""
    config = parse_config(
        {
            "model": {"kind": "tied", "K": 2, "trainable": [1]},
            "loss": {"builtin": "mse", "activation": "h2"},
            "init": {"1": {"kind": "gaussian"}, "2": {"kind": "identity", "c": 1.0}},
            "truncation": {"degree": 9, "observables": ["S1", "S1 S1"], "closure": "quadrature"},
            "integrate": {"T": 0.1, "points": 5},
            "sgd": {"d": 60, "lr": 0.0078 * 256 / 60, "batch": 256},
        }
    )
    monkeypatch.setattr(tied_module, "np", FlippedCentring())
    result = verify(config, dims=(60, 120), seeds=3, steps=400, progress=False, n_jobs=1)
    assert result.verdict == "disagree" and result.message.startswith("drift:"), result.message


LINEAR = builtin("mse", L=1, K=2, activation="h1")


INITS = {
    "tied": {1: InitSpec(), 2: InitSpec(kind="identity", c=1.0)},
    "direct": {1: InitSpec(scale=0.7), 2: InitSpec(scale=1.0)},
    "symmetric": {1: InitSpec(scale=0.7), 2: InitSpec(scale=1.0)},
}


def test_same_seed_is_bit_identical_and_seeds_differ():
    model = Model("tied", 2, [1])

    def run(seed):
        return sgd(
            model,
            LINEAR,
            INITS["tied"],
            d=30,
            lr=0.02,
            batch=16,
            times=[0, 0.05, 0.1],  # noqa: E731
            words=["S1 S1", "S2 S1"],
            seed=seed,
            progress=False,
        )

    a, b, c = run(0), run(0), run(1)
    assert set(a.series) == {"S1 S1", "S1 S2"}
    assert all(np.array_equal(a.series[w], b.series[w]) for w in a.series)
    assert not np.array_equal(a.series["S1 S1"], c.series["S1 S1"])
    assert list(a.steps) == list(steps_for("tied", [0, 0.05, 0.1], 30, 0.02)) == [0, 19, 38]


@pytest.mark.parametrize("kind", ["tied", "direct", "symmetric"])
def test_expected_sgd_step_is_the_matrix_flow(kind):
    """For the linear loss Stein's identities are exact at finite d, so the mean SGD step is
    exactly the flow velocity times the time per step (tied 4η/d, direct and symmetric η/d; the
    symmetric kind's −2ΓS is derived in its module docstring, the SGD side differentiates the
    loss). With B = 400 000
    samples at d = 12 the batch gradient's relative noise is ≤ 2 % (measured: it halves with
    every 4× in B, no bias): tolerance 5 %."""
    d, lr = 12, 1e-3
    model = Model(kind, 2, [1])
    factors = sample_factors(model, INITS[kind], d, seed=4)
    run = SGDRun(model, LINEAR, None, factors, lr, 400_000, 0.0, np.random.default_rng(0))
    run.step()
    step = (run.factors[0] - factors[0]) / lr
    one_letter = kind in ("tied", "symmetric")  # q_kl = μ(Z_k Z_l) with one letter per index
    mu_words = [(0, 0), (0, 1), (1, 1)] if one_letter else [(0, 1), (0, 3), (2, 3), (0, 0), (0, 2), (2, 2)]
    potential = Potential(LINEAR, kind)
    mu = trace_moments(mu_words, letter_matrices(kind, factors))
    if one_letter:
        q = np.array([[mu[0], mu[1]], [mu[1], mu[2]]])
        value = potential.evaluate(q=q)
    else:
        Omega = np.array([[mu[0], mu[1]], [mu[1], mu[2]]])
        Psi = np.array([[mu[3], mu[4]], [mu[4], mu[5]]])
        value = potential.evaluate(Omega=Omega, Psi=Psi)
    coefficients = {**model.definition.potential_families(value), "gamma": 0.0}
    velocity = model.definition.matrices.factor_velocities(model, factors, coefficients)[0] * (
        4 / d if kind == "tied" else 1 / d
    )
    assert np.linalg.norm(step - velocity) <= 0.05 * np.linalg.norm(velocity)


def test_tied_sgd_follows_the_matrix_flow_which_follows_the_closed_form():
    """Exactly solvable case, d = 100, η = 0.016, B = 256 (ηd/B = 0.006): SGD vs the matrix flow
    from the same matrices within 0.03 on [0, 0.5] (Itô bias ≈ 1.1ηd/B ≈ 0.007 plus seed
    scatter ≈ 0.01), and the flow vs the d = ∞ closed form within 6/d (measured ≈ 1.3/d here;
    MATH.md §7: ≈ 4/d)."""
    d = 100
    model = Model("tied", 2, [1])
    times, words = np.linspace(0, 0.5, 11), ["S1 S1", "S1 S2", "S1"]
    factors = sample_factors(model, INITS["tied"], d, seed=1)
    flow = matrix_flow(model, factors, CoefficientSource(model, Potential(LINEAR, "tied")), times=times, words=words)
    run = sgd(
        model,
        LINEAR,
        INITS["tied"],
        d=d,
        lr=0.016,
        batch=256,
        times=times,
        words=words,
        seed=0,
        factors=factors,
        progress=False,
    )
    exact = solvable_tied_moments(times, 1.0, 1.0, 1.0)
    assert max(np.abs(run.series[w] - flow.series[w]).max() for w in words) < 0.03
    assert max(np.abs(flow.series[w] - exact[w]).max() for w in words) < 6 / d
    assert flow.series["S1 S1"][-1] < 0.8 * flow.series["S1 S1"][0]  # it learned: q11 → c² = 1 from 2


def test_direct_sgd_follows_the_matrix_flow():
    d, times, words = 60, np.linspace(0, 0.3, 7), ["S1 S1^T", "S1 S2", "S1 S2^T"]
    model = Model("direct", 2, [1])
    factors = sample_factors(model, INITS["direct"], d, seed=2)
    flow = matrix_flow(model, factors, CoefficientSource(model, Potential(LINEAR, "direct")), times=times, words=words)
    run = sgd(
        model,
        LINEAR,
        INITS["direct"],
        d=d,
        lr=0.005,
        batch=256,
        times=times,
        words=words,
        seed=3,
        factors=factors,
        progress=False,
    )
    assert max(np.abs(run.series[w] - flow.series[w]).max() for w in words) < 0.03
    assert flow.series["S1 S2^T"][-1] > flow.series["S1 S2^T"][0] + 0.2  # the overlap grew


def test_symmetric_theory_follows_sgd():
    """The fourth kind end to end: its closed degree-2 system (models/symmetric.py) started from
    the moments of the d = 80 matrices the SGD run starts from, against SGD (η = 0.01, B = 128,
    ηd/B = 0.006, one seed) on τ ∈ [0, 0.4]. Measured sup error over the words 2.2e-3 (seed 0;
    3.7e-3, 4.4e-3, 4.0e-3 for seeds 1–3: SGD noise and the Itô bias at this d): tolerance 0.012,
    about 3× the typical seed. The overlap q12 grows from ≈ 0 to
    ≈ 0.5, so a wrong sign or factor in the Γ family would be off by O(0.1)."""
    raw = {
        "model": {"kind": "symmetric", "L": 1, "K": 2, "trainable": [1]},
        "loss": {"builtin": "mse", "activation": "h1"},
        "init": {"1": {"scale": 0.5}, "2": {"scale": 1.0}},
        "truncation": {"degree": 2},
        "integrate": {"T": 0.4, "points": 9},
        "sgd": {"d": 80, "lr": 0.01, "batch": 128, "seeds": [0]},
    }
    config = parse_config(raw, "symmetric test")
    factors = initial_factors(config.model, config.inits(), 80, 0)
    theory = solve_with_closure(config, "zero", factors=factors)
    run = simulate_config(config, progress=False)
    words = ["S1 S1", "S1 S2", "S1"]
    error = max(np.abs(np.asarray(theory.series[w]) - np.asarray(run["series"][w])).max() for w in words)
    assert error < 0.012, error
    assert theory.series["S1 S2"][-1] > 0.4


def test_mean_increments_is_the_eigenvalue_flow_at_small_lr():
    """Independent of the theory's code: for the tied h1 case with teacher cI every eigenvalue of S1
    follows λ̇ = 4λ(c − λ) (MATH.md §7), so dμ(S1)/dt at t = 0 is 4(c μ1 − μ2) of the matrices
    themselves. The mean SGD step (η = 1e-3, B = 256: κ ≈ 1e-3, the Itô term negligible) per unit
    of t = 4nη/d matches it within 4 SE + 2 % (the O(1/d) of a finite-d Φ; measured 0.3 SE)."""
    from momentgen.models.words import parse
    from momentgen.reference import mean_increments
    from momentgen.setting.matrices import initial_factors, letter_matrices, trace_moments

    config, d = verify_solvable(), 200
    factors = initial_factors(config.model, config.inits(), d, 0)
    mean, se = mean_increments(config.model, config.loss(), factors, lr=1e-3, batch=256, words=["S1"], steps=400)
    mu1, mu2 = trace_moments([parse(w, "tied", 2) for w in ("S1", "S1 S1")], letter_matrices("tied", factors))
    expected = 4 * (1.0 * mu1 - mu2)
    assert abs(mean[0] - expected) <= 4 * se[0] + 0.02 * abs(expected)
