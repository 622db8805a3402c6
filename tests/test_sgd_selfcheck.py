"""An SGD self-check independent of every kind's gradient code (issue 26 item 5).

Each kind's `sgd_step` differentiates the loss by hand (BLAS-shaped formulas). Here the same step is
checked against a finite difference of the *empirical population loss* on the same tokens, computed
from the definition of the pre-activations in MATH.md §1 with plain numpy (no code of the kinds):
with all N tokens in one minibatch, ``(P − step(P))/η − (γ/d) P`` is exactly ``∇_P (1/N) Σ_n ℓ(G_n)``,
so its inner product with any direction V equals the central difference of the loss along V.

Losses with ``E[∂ℓ/∂G] ≠ 0`` (h2, tanh with a teacher mean, softmax) are used on purpose: with mse(h1)
the centring term of the tied gradient averages to 0, and flipping its sign went unnoticed by
every SGD test and by `verify` (the mutation tests below keep that in the suite).
"""

import numpy as np
import pytest
import sympy

from momentgen.evidence.verification import verify
from momentgen.models import Batch, Model
from momentgen.models import tied as tied_module
from momentgen.reference import loss_gradient
from momentgen.setting.config import parse_config
from momentgen.setting.matrices import initial_factors

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
