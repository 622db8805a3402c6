"""Tied attention: ``S_k = W_k W_kᵀ`` (MATH.md §1, §3).

Letters ``S_k`` (symmetric, PSD); pre-activations ``G_ijk = (x_iᵀ S_k x_j − C_ij Tr S_k)/√d``
(centred) with ``Q1 = Q2 = q``, ``q_kl = μ(S_k S_l)``. Time ``t = 4nη/d``. The matrix flow
``dW_k/dt = −Σ_l Γ_kl S_l W_k − (γ/4) W_k`` gives ``dS_k/dt = −Σ_l Γ_kl (S_l S_k + S_k S_l) −
(γ/2) S_k``, whose trace image is the hierarchy (11) with ``Γ = ∂Φ/∂Q1 + ∂Φ/∂Q2``.

With a data covariance Σ (MATH.md §10) the centring is ``C_ij Tr(Σ S_k)/√d``, ``q̃_kl = μ(Σ S_k Σ S_l)``
and every inserted ``S_l`` becomes ``Σ S_l Σ``: ``dW_k/dt = −Σ_l Γ_kl Σ S_l Σ W_k − (γ/4) W_k``.
"""

import numpy as np

from ..core.errors import ModelError
from ..laws.edge import free_poisson_law
from ..laws.representation import free_poisson_component
from .base import (
    Family,
    KindLaws,
    KindMatrices,
    ModelKind,
    Rule,
    decayed,
    inserted,
    psd_root,
    sigma_letter,
    single_letter_overlap,
    single_letter_words,
    symmetric_file_matrix,
    token_mix,
    token_pairs,
)

__all__ = ["TIED", "Tied"]

RANK_TOL = 1e-12  # an eigenvalue of S = W Wᵀ below this fraction of the largest counts as 0


class TiedMatrices(KindMatrices):
    """The tied kind on finite matrices: the letters of factors, the matrix flow, one SGD step, noise increments,
    means, sampled, identity, aligned and file factors (the reference side and the flow engine)."""

    symmetric_noise = True  # ΔW = −(H + Hᵀ) W

    def index_letters(self, factor):
        return [factor @ factor.T]

    def factor_velocities(self, model, factors, coefficients, letters=None):
        Gamma, gamma = coefficients["Gamma"], coefficients["gamma"]
        S = self.letter_matrices(factors) if letters is None else letters
        sigma = sigma_letter(model, S)
        return [
            decayed(inserted(sigma, [(-Gamma[k - 1, l], S[l]) for l in range(model.K)]) @ W, gamma / 4, W)
            if k in model.trainable
            else np.zeros_like(W)
            for k, W in enumerate(factors, start=1)
        ]

    def sgd_step(self, model, factors, batch, lr, gamma):
        """∇_W ℓ = (2/√d) Xᵀ(sym(g) P) − (2/√d) ⟨g, C⟩ Σ W with P = X W (BLAS-shaped, no loop over samples)."""
        flat, d, B = batch.flat, factors[0].shape[0], batch.X.shape[0]
        root_d, decay = np.sqrt(d), 1 - lr * gamma / d
        P = [batch.rows(flat @ W) for W in factors]  # P_bi = Wᵀ x_bi
        weighted = [batch.covariance_times(W) for W in factors]  # Σ W
        traces = [np.sum(W * SW) for W, SW in zip(factors, weighted)]  # Tr(Σ S)
        G = np.stack([(token_pairs(p, p) - batch.C * t) / root_d for p, t in zip(P, traces)], axis=-1)

        def update(k, gk):
            grad = flat.T @ token_mix(gk + gk.transpose(0, 2, 1), P[k - 1]) / (root_d * B)
            grad -= 2 * np.einsum("bij,ij->", gk, batch.C) / (root_d * B) * weighted[k - 1]
            return decay * factors[k - 1] - lr * grad

        return batch.descend(factors, model.trainable, G, update)

    def noise_increments(self, model, factors, H):
        return [
            -(H[k - 1] + H[k - 1].T) @ W if k in model.trainable else np.zeros_like(W)
            for k, W in enumerate(factors, start=1)
        ]

    def sample_factor(self, spec, d, rng):
        width = max(1, int(round(spec.width_ratio * d)))
        return rng.standard_normal((d, width)) * spec.scale / np.sqrt(d)

    def identity_factor(self, c, d):
        return np.sqrt(c) * np.eye(d)

    def aligned_factor(self, c, root):
        return np.sqrt(c) * root

    def file_factor(self, arrays, path):
        if "W" in arrays:
            return arrays["W"]
        S = symmetric_file_matrix(arrays["S"], path, "tied")
        w, V = np.linalg.eigh(S)
        if w.min() < -1e-10 * max(1.0, abs(w).max()):
            raise ModelError(f"{path}: S must be positive semi-definite for the tied model (eigenvalue {w.min():.3g})")
        return V * np.sqrt(np.clip(w, 0, None))


class TiedLaws(KindLaws):
    """The tied kind at d = ∞: law factors, Gaussian letter factors, the quadrature state's components, spectral
    laws and edges, factor parts (exact initial moments and the quadrature closure)."""

    def law_factor(self, spec, n, rng, gaussian):
        return gaussian(spec.scale, max(1, int(round(spec.width_ratio * n))))

    def _gaussian_letter_factors(self, k):
        W = ("W", k)
        return {"S": (1.0, ((W, False), (W, True)))}

    def matrix_laws(self, k, spec):
        return {("W", k): (spec.scale**2, spec.width_ratio, False)}

    def representation_component(self, k, spec, n, exact_oracle, generators, tol):
        """The free Poisson letter by its Jacobi matrix, its kernel split off when rate < 1."""
        return free_poisson_component(self.kind.code("S", k), n, spec.width_ratio, spec.scale**2)

    def spectral_law(self, k, spec):
        """Free Poisson of rate = width ratio and jump = scale² (rate < 1 has an atom at 0: None)."""
        return free_poisson_law(spec.width_ratio, spec.scale**2) if spec.width_ratio >= 1 else None

    def kernel_projectors(self, factors):
        """S_k = W_k W_kᵀ of rank < d: the congruence flow keeps the kernel (and its dimension) for ever."""
        out = {}
        for code, W in enumerate(factors):
            left, singular, _ = np.linalg.svd(W, full_matrices=False)
            eigenvalues = singular**2
            rank = int(np.sum(eigenvalues > RANK_TOL * max(eigenvalues.max(initial=0.0), 1e-300)))
            if rank < len(W):
                basis = left[:, :rank]
                out[code] = np.eye(len(W)) - basis @ basis.T
        return out

    def spectral_edges(self, factors):
        out = {}
        for code, W in enumerate(factors):
            eigenvalues = np.linalg.svd(W, compute_uv=False) ** 2
            alive = eigenvalues[eigenvalues > RANK_TOL * max(eigenvalues.max(initial=0.0), 1e-300)]
            out[code] = float(alive.min()) if alive.size else 0.0
        return out

    def factor_parts(self, letters, tol, roots=None):
        roots = roots or {}
        return [roots[code] if code in roots else psd_root(X, tol) for code, X in enumerate(letters)]


class Tied(ModelKind):
    matrices_role = TiedMatrices
    laws_role = TiedLaws
    name = "tied"
    letter_kinds = ("S",)
    transposes = (0,)
    time_scale = "t = 4 n eta / d"
    time_symbol = "t"
    centred = True
    families = (Family("Gamma", -1.0, "dPhi/dq", latex=r"\Gamma"),)
    weight_decay_factor = -0.5
    file_arrays = (("W",), ("S",))

    positive_letters = True
    state_names = {"q": ("Q1", "Q2")}
    # SGD noise: ΔW_k = −η (h + hᵀ) W_k, so ΔS_k = −η(h S + hᵀS + S h + S hᵀ) + η² (h + hᵀ) S (h + hᵀ);
    # 4η/d of t per step: scale (d/4η)·η/d = 1/4.
    noise_first = {"S": (((), "+", ("S",)), ((), "-", ("S",)), (("S",), "+", ()), (("S",), "-", ()))}
    noise_second = {"S": tuple(((), e1, ("S",), e2, ()) for e1 in "+-" for e2 in "+-")}
    noise_scale = 0.25

    def steps_per_time(self, d, lr):
        return d / (4 * lr)

    def order_words(self, k, l):
        return f"S{k} S{l}", f"S{k} S{l}"

    def potential_families(self, value):
        return {"Gamma": value.dQ1 + value.dQ2}

    def rules(self, model):
        """dS_k/dt = −Σ_l Γ_kl (S_l S_k + S_k S_l): S_k ↦ S_l S_k and S_k ↦ S_k S_l (S_l ↦ Σ S_l Σ with Σ)."""
        out = []
        for k in model.trainable:
            Sk = self.code("S", k)
            for l in range(1, model.K + 1):
                Sl = self.weighted(model, self.code("S", l))
                out += [Rule(Sk, "Gamma", k, l, (*Sl, Sk)), Rule(Sk, "Gamma", k, l, (Sk, *Sl))]
        return out

    def required_words(self, model):
        return single_letter_words(model)

    def derived(self, series, K):
        return single_letter_overlap(series)

    # ---- finite matrices ---------------------------------------------------------------------------
    # ---- d = ∞ laws ---------------------------------------------------------------------------------
    # ---- quadrature states --------------------------------------------------------------------


TIED = Tied()
