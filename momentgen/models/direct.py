"""Direct optimisation of ``S_k`` (any d × d matrix): MATH.md §1, §5 (Theorem 4).

Letters ``S_k, S_kᵀ``; pre-activations ``G_ijk = (x_iᵀ S_k x_j − C_ij Tr S_k)/√d`` (centred) with
``Q1 = Ω = μ(S_k S_lᵀ)``, ``Q2 = Ψ = μ(S_k S_l)``. Time ``τ = nη/d``; the flow
``dS_k/dτ = −2 Σ_l (A_kl S_l + B_kl S_lᵀ) − γ S_k`` (A = ∂Φ/∂Ω, B = ∂Φ/∂Ψ) substitutes a letter by
one letter, so the hierarchy closes on (t, Ψ, Ω): the zero closure is exact.

With a data covariance Σ (MATH.md §10): centring ``C_ij Tr(Σ S_k)/√d``, ``Ω̃ = μ(Σ S_k Σ S_lᵀ)``,
``Ψ̃ = μ(Σ S_k Σ S_l)`` and ``dS_k/dτ = −2 Σ_l Σ (A_kl S_l + B_kl S_lᵀ) Σ − γ S_k``; the powers of Σ do
not close, so neither does the hierarchy.
"""

import numpy as np

from ..core.errors import ModelError
from .base import (
    Family,
    KindLaws,
    KindMatrices,
    ModelKind,
    Rule,
    decayed,
    inserted,
    sigma_letter,
    token_mix,
    token_pairs,
)

__all__ = ["DIRECT", "Direct"]


class DirectMatrices(KindMatrices):
    """The direct kind on finite matrices: the letters of factors, the matrix flow, one SGD step, noise increments,
    means, sampled, identity, aligned and file factors (the reference side and the flow engine)."""

    def index_letters(self, factor):
        return [factor, factor.T]

    def factor_velocities(self, model, factors, coefficients, letters=None):
        A, B, gamma = coefficients["A"], coefficients["B"], coefficients["gamma"]
        sigma = sigma_letter(model, self.letter_matrices(factors) if letters is None else letters)

        def drive(k):
            """Σ(−2 Σ_l (A_kl S_l + B_kl S_lᵀ))Σ."""
            return inserted(sigma, [t for l, X in enumerate(factors) for t in ((-2 * A[k, l], X), (-2 * B[k, l], X.T))])

        return [
            decayed(drive(k - 1), gamma, S) if k in model.trainable else np.zeros_like(S)
            for k, S in enumerate(factors, start=1)
        ]

    def sgd_step(self, model, factors, batch, lr, gamma):
        """G_ij = x_iᵀ S x_j: ∇_S ℓ = Xᵀ(g X)/√d − ⟨g, C⟩ I/√d."""
        flat, d, B = batch.flat, factors[0].shape[0], batch.X.shape[0]
        root_d, decay = np.sqrt(d), 1 - lr * gamma / d
        SX = [batch.rows(flat @ S.T) for S in factors]  # row b, i: (S x_bi)ᵀ
        traces = [batch.trace_with(S) for S in factors]  # Tr(Σ S)
        G = np.stack([(token_pairs(batch.X, sx) - batch.C * t) / root_d for sx, t in zip(SX, traces)], axis=-1)

        def update(k, gk):
            grad = flat.T @ token_mix(gk, batch.X) / (root_d * B)
            grad -= np.einsum("bij,ij->", gk, batch.C) / (root_d * B) * batch.covariance(d)
            return decay * factors[k - 1] - lr * grad

        return batch.descend(factors, model.trainable, G, update)

    def noise_increments(self, model, factors, H):
        return [-H[k - 1] if k in model.trainable else np.zeros_like(S) for k, S in enumerate(factors, start=1)]

    def sample_factor(self, spec, d, rng):
        return rng.standard_normal((d, d)) * spec.scale / np.sqrt(d)

    def identity_factor(self, c, d):
        return c * np.eye(d)

    def aligned_factor(self, c, root):
        return c * root @ root

    def file_factor(self, arrays, path):
        S = arrays["S"]
        if S.shape[0] != S.shape[1]:
            raise ModelError(f"{path}: array S must be square for the direct model, got shape {S.shape}")
        return S


class DirectLaws(KindLaws):
    """The direct kind at d = ∞: law factors, Gaussian letter factors, the quadrature state's components, spectral
    laws and edges, factor parts (exact initial moments and the quadrature closure)."""

    def law_factor(self, spec, n, rng, gaussian):
        return gaussian(spec.scale, n)

    def _gaussian_letter_factors(self, k):
        S = ("S", k)
        return {"S": (1.0, ((S, False),)), "S^T": (1.0, ((S, True),))}

    def matrix_laws(self, k, spec):
        return {("S", k): (spec.scale**2, 1.0, False)}

    def factor_parts(self, letters, tol, roots=None):
        return list(letters[0::2])  # S_k (its transpose is S_kᵀ)


class Direct(ModelKind):
    matrices_role = DirectMatrices
    laws_role = DirectLaws
    name = "direct"
    letter_kinds = ("S", "S^T")
    transposes = (1, 0)
    time_scale = "tau = n eta / d"
    time_symbol = "tau"
    centred = True
    closed = True
    families = (Family("A", -2.0, "dPhi/dOmega", latex="A"), Family("B", -2.0, "dPhi/dPsi", latex="B"))
    weight_decay_factor = -1.0
    file_arrays = (("S",),)

    positive_letters = False
    state_names = {"Omega": ("Q1",), "Psi": ("Q2",)}
    # SGD noise: ΔS_k = −η h (τ = nη/d: scale 1); no second order.
    noise_first = {"S": (((), "+", ()),), "S^T": (((), "-", ()),)}
    noise_scale = 1.0

    def steps_per_time(self, d, lr):
        return d / lr

    def order_words(self, k, l):
        return f"S{k} S{l}^T", f"S{k} S{l}"

    def potential_families(self, value):
        return {"A": value.dQ1, "B": value.dQ2}

    def rules(self, model):
        """dS_k/dτ = −2 Σ_l (A_kl S_l + B_kl S_lᵀ): S_k ↦ S_l (A), S_lᵀ (B); S_kᵀ ↦ S_lᵀ (A), S_l (B)."""
        out = []
        for k in model.trainable:
            S, ST = self.code("S", k), self.code("S^T", k)
            for l in range(1, model.K + 1):
                Sl, SlT = self.weighted(model, self.code("S", l)), self.weighted(model, self.code("S^T", l))
                out += [
                    Rule(S, "A", k, l, Sl),
                    Rule(S, "B", k, l, SlT),
                    Rule(ST, "A", k, l, SlT),
                    Rule(ST, "B", k, l, Sl),
                ]
        return out

    def required_words(self, model):
        K = model.K
        pairs = [(k, l) for k in range(1, K + 1) for l in range(k, K + 1)]
        return (
            [(f"S{k}", f"t_{k} (mean trace)") for k in range(1, K + 1)]
            + [(f"S{k} S{l}", f"Psi_{k}{l} (Phi depends on it)") for k, l in pairs]
            + [(f"S{k} S{l}^T", f"Omega_{k}{l} (Phi depends on it)") for k in range(1, K + 1) for l in range(1, K + 1)]
        )

    def derived(self, series, K):
        t = series("S1") * series("S2")
        return {"p12": series("S1 S2") - t, "p12_Omega": series("S1 S2^T") - t}

    # ---- finite matrices ---------------------------------------------------------------------------
    # ---- d = ∞ laws ---------------------------------------------------------------------------------
    # ---- quadrature states (a hierarchy with the letter Σ does not close) -----------------------------


DIRECT = Direct()
