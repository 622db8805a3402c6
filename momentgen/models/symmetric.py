"""Direct optimisation of a *symmetric* ``S_k`` — the fourth kind, added through the kind protocol alone.

Parameters: ``S_k = S_kᵀ ∈ R^{d×d}``, updated by online SGD with the symmetrised gradient
``S ← S − η sym(∇_S ℓ) − (ηγ/d) S``. Letters ``S_k`` (self-transposed); pre-activations
``G_ijk = (x_iᵀ S_k x_j − C_ij Tr S_k)/√d`` (centred). Because ``S_kᵀ = S_k``, the direct model's
two order parameters coincide, ``Ω = Ψ = q`` with ``q_kl = μ(S_k S_l)``, so
``Cov(G_ijk, G_i'j'l) = (C_ii'C_jj' + C_ij'C_ji') q_kl`` (as tied) and the flow of MATH.md §5
becomes, with ``Γ = ∂Φ/∂Ω + ∂Φ/∂Ψ = ∂Φ/∂Q1 + ∂Φ/∂Q2``,

    dS_k/dτ = −2 Σ_l Γ_kl S_l − γ S_k,      τ = nη/d.

Derivation (L = 1 for brevity; Stein's identity E[f(x)(xxᵀ − I)] = E[∇²f]): with
``∇_S G = (xxᵀ − I)/√d``, ``E[∇_S ℓ] = E[ℓ''(G)] (S + Sᵀ)/d + O(d^{-3/2})`` and Price's theorem
``∂Φ/∂Ω = ∂Φ/∂Ψ = ½ E[ℓ'']``, so ``d·E[∇_S ℓ] = 2(A S + B Sᵀ) = 2ΓS``; symmetrising the
per-sample gradient leaves this mean unchanged. A letter is substituted by one letter, so the
hierarchy closes on degree ≤ 2 (Theorem 4 with Ω = Ψ):

    dt_k/dτ  = −[k] (2 Σ_m Γ_km t_m + γ t_k)
    dq_kl/dτ = −2[k] (Γq)_kl − 2[l] (Γq)_lk − γ([k] + [l]) q_kl

The Gaussian initialisation is the GOE scaled so that off-diagonal entries are N(0, σ²/d): its
d = ∞ law is the semicircle of radius 2σ (μ(S²) = σ²), independent indices are free.

With a data covariance Σ (MATH.md §10): centring ``C_ij Tr(Σ S_k)/√d``, ``q̃ = μ(Σ S_k Σ S_l)`` and
``dS_k/dτ = −2 Σ_l Γ_kl Σ S_l Σ − γ S_k`` (Stein with covariance Σ); the powers of Σ do not close.
"""

import numpy as np

from ..laws.representation import jacobi_component
from .base import (
    Family,
    KindLaws,
    KindMatrices,
    ModelKind,
    Rule,
    decayed,
    inserted,
    sigma_letter,
    single_letter_overlap,
    single_letter_words,
    symmetric_file_matrix,
    token_mix,
    token_pairs,
)

__all__ = ["SYMMETRIC", "Symmetric", "semicircle_quantiles"]


class SymmetricMatrices(KindMatrices):
    """The symmetric kind on finite matrices: the letters of factors, the matrix flow, one SGD step, noise increments,
    means, sampled, identity, aligned and file factors (the reference side and the flow engine)."""

    symmetric_noise = True  # ΔS = −(H + Hᵀ)/2

    def index_letters(self, factor):
        return [factor]

    def factor_velocities(self, model, factors, coefficients, letters=None):
        Gamma, gamma = coefficients["Gamma"], coefficients["gamma"]
        sigma = sigma_letter(model, self.letter_matrices(factors) if letters is None else letters)
        return [
            decayed(inserted(sigma, [(-2 * Gamma[k - 1, l], factors[l]) for l in range(model.K)]), gamma, S)
            if k in model.trainable
            else np.zeros_like(S)
            for k, S in enumerate(factors, start=1)
        ]

    def sgd_step(self, model, factors, batch, lr, gamma):
        """As the direct model, with the gradient symmetrised: sym(Xᵀ(g X))/√d − ⟨g, C⟩ I/√d."""
        flat, d, B = batch.flat, factors[0].shape[0], batch.X.shape[0]
        root_d, decay = np.sqrt(d), 1 - lr * gamma / d
        SX = [batch.rows(flat @ S) for S in factors]
        traces = [batch.trace_with(S) for S in factors]  # Tr(Σ S)
        G = np.stack([(token_pairs(batch.X, sx) - batch.C * t) / root_d for sx, t in zip(SX, traces)], axis=-1)

        def update(k, gk):
            grad = flat.T @ token_mix(gk, batch.X) / (root_d * B)
            grad = 0.5 * (grad + grad.T) - np.einsum("bij,ij->", gk, batch.C) / (root_d * B) * batch.covariance(d)
            return decay * factors[k - 1] - lr * grad

        return batch.descend(factors, model.trainable, G, update)

    def noise_increments(self, model, factors, H):
        return [
            -0.5 * (H[k - 1] + H[k - 1].T) if k in model.trainable else np.zeros_like(S)
            for k, S in enumerate(factors, start=1)
        ]

    def sample_factor(self, spec, d, rng):
        Z = rng.standard_normal((d, d))
        return (Z + Z.T) / np.sqrt(2) * spec.scale / np.sqrt(d)

    def identity_factor(self, c, d):
        return c * np.eye(d)

    def aligned_factor(self, c, root):
        return c * root @ root

    def file_factor(self, arrays, path):
        return symmetric_file_matrix(arrays["S"], path, "symmetric")


class SymmetricLaws(KindLaws):
    """The symmetric kind at d = ∞: law factors, Gaussian letter factors, the quadrature state's components, spectral
    laws and edges, factor parts (exact initial moments and the quadrature closure)."""

    def law_factor(self, spec, n, rng, gaussian):
        Q, R = np.linalg.qr(rng.standard_normal((n, n)))
        Q = Q * np.sign(np.diag(R))
        return (Q * semicircle_quantiles(n, spec.scale)) @ Q.T

    def _gaussian_letter_factors(self, k):
        return {"S": (1.0, ((("S", k), False),))}

    def matrix_laws(self, k, spec):
        return {("S", k): (spec.scale**2, 1.0, True)}

    def representation_component(self, k, spec, n, exact_oracle, generators, tol):
        """The semicircle letter by its Jacobi matrix (diagonal 0, off-diagonal σ)."""
        return jacobi_component(self.kind.code("S", k), np.zeros(n + 1), np.full(n, spec.scale))

    def factor_parts(self, letters, tol, roots=None):
        return list(letters)


class Symmetric(ModelKind):
    matrices_role = SymmetricMatrices
    laws_role = SymmetricLaws
    name = "symmetric"
    letter_kinds = ("S",)
    transposes = (0,)
    time_scale = "tau = n eta / d"
    time_symbol = "tau"
    centred = True
    closed = True
    families = (Family("Gamma", -2.0, "dPhi/dq", latex=r"\Gamma"),)
    weight_decay_factor = -1.0
    file_arrays = (("S",),)

    positive_letters = False
    state_names = {"q": ("Q1", "Q2")}
    # SGD noise: ΔS_k = −η (h + hᵀ)/2 (τ = nη/d): written with unit signs, the ½·½ goes to the scale.
    noise_first = {"S": (((), "+", ()), ((), "-", ()))}
    noise_scale = 0.25

    def steps_per_time(self, d, lr):
        return d / lr

    def order_words(self, k, l):
        return f"S{k} S{l}", f"S{k} S{l}"

    def potential_families(self, value):
        return {"Gamma": value.dQ1 + value.dQ2}

    def rules(self, model):
        """dS_k/dτ = −2 Σ_l Γ_kl S_l: S_k ↦ S_l (Σ S_l Σ with Σ)."""
        return [
            Rule(self.code("S", k), "Gamma", k, l, self.weighted(model, self.code("S", l)))
            for k in model.trainable
            for l in range(1, model.K + 1)
        ]

    def required_words(self, model):
        return single_letter_words(model)

    def derived(self, series, K):
        return single_letter_overlap(series)

    # ---- finite matrices ---------------------------------------------------------------------------
    # ---- d = ∞ laws ---------------------------------------------------------------------------------
    # ---- quadrature states (a hierarchy with the letter Σ does not close) -----------------------------


def semicircle_quantiles(n, scale):
    """``n`` midpoint quantiles of the semicircle law of radius 2·scale (variance scale²)."""
    x = np.linspace(-2.0, 2.0, 20001)
    cumulative = 0.5 + (x * np.sqrt(4 - x**2) / 4 + np.arcsin(x / 2)) / np.pi
    return scale * np.interp((np.arange(n) + 0.5) / n, cumulative, x)


SYMMETRIC = Symmetric()
