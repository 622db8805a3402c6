"""Untied attention: ``M_k = U_k V_kᵀ`` (MATH.md §1, §4).

Letters ``M_k, M_kᵀ, A_k = U_k U_kᵀ, B_k = V_k V_kᵀ``; pre-activations ``G_ijk = x_iᵀ M_k x_j/√d``,
*not* centred: mean ``C_ij m_k`` with ``m_k = Tr(M_k)/√d`` (an O(1) variable), covariance with
``Q1 = q⁽¹⁾ = μ(M_k M_lᵀ)``, ``Q2 = q⁽²⁾ = μ(M_k M_l)``. Two time scales: the fast phase of the
means on ``t = nη`` (moments frozen; it relaxes to the slaved mean m*(q)) and the slow phase
on ``τ = nη/d`` with the substitution table of MATH.md §4 and the effective bias
``β_k = −ψ_k/D_k`` that keeps μ(M_k) constant.

With a data covariance Σ (MATH.md §10) the mean is ``m̃_k = Tr(Σ M_k)/√d`` and the order parameters are
``μ(Σ M_k Σ M_l^{(ᵀ)})``. The gradient's mean part is ``∂Φ/∂m̃ · Σ/√d`` (one contraction of two token
vectors: one Σ) and its fluctuation part ``2 Σ (a⁽¹⁾ M + a⁽²⁾ Mᵀ) Σ`` (Stein with covariance Σ), so
``dU_k = −(β_k Σ + 2 Σ D_k Σ) V_k − γU_k`` and the same for V_k: the bias rules put one Σ beside the
inserted letter (M ↦ Σ B, A Σ), the a⁽ʳ⁾ rules insert Σ M_l Σ, and β keeps μ(Σ M_k) constant:
``D̃_k = μ(Σ² B_k) + μ(A_k Σ²)``, ``ψ̃_k = 2 Σ a⁽ʳ⁾_kl [μ(Σ² M_l⁽ʳ⁾ Σ B_k) + μ(Σ A_k Σ M_l⁽ʳ⁾ Σ)]``.
"""

import numpy as np

from ..core.errors import InfeasibleState, ModelError
from .base import (
    Family,
    KindLaws,
    KindMatrices,
    ModelKind,
    Rule,
    decayed,
    identity_like,
    inserted,
    psd_root,
    sigma_letter,
    token_mix,
    token_pairs,
)

__all__ = ["UNTIED", "Untied", "shift_to_mean"]


class UntiedMatrices(KindMatrices):
    """The untied kind on finite matrices: the letters of factors, the matrix flow, one SGD step, noise increments,
    means, sampled, identity, aligned and file factors (the reference side and the flow engine)."""

    def index_letters(self, factor):
        """[M, Mᵀ, A, B] = [U Vᵀ, V Uᵀ, U Uᵀ, V Vᵀ]; Mᵀ held contiguous, one copy, so that `trace_moments` reads the
        second halves whose mirror is Mᵀ from it (an untied flow with Σ made about 7 copies an evaluation there)."""
        U, V = factor
        M = U @ V.T
        return [M, np.ascontiguousarray(M.T), U @ U.T, V @ V.T]

    def factor_velocities(self, model, factors, coefficients, letters=None):
        """dU_k = −(β_k I + 2 Σ_{l,r} a⁽ʳ⁾_kl M_l⁽ʳ⁾) V_k − γU_k, dV_k = −(β_k I + 2 Σ a⁽ʳ⁾_kl M_l⁽ʳ̄⁾) U_k − γV_k;
        with Σ: β_k Σ and Σ (…) Σ (module docstring)."""
        beta, a1, a2, gamma = (coefficients[n] for n in ("beta", "a1", "a2", "gamma"))
        n = len(self.kind.letter_kinds)
        M = [U @ V.T for U, V in factors] if letters is None else letters[: n * model.K : n]
        sigma = None if letters is None else sigma_letter(model, letters)
        out = []
        for k, (U, V) in enumerate(factors, start=1):
            if k not in model.trainable:
                out.append((np.zeros_like(U), np.zeros_like(V)))
                continue
            bias = beta[k - 1] * (identity_like(U) if sigma is None else sigma)
            pairs = [(-2 * a1[k - 1, l], -2 * a2[k - 1, l], M[l]) for l in range(model.K)]
            drive = inserted(sigma, [t for c1, c2, X in pairs for t in ((c1, X), (c2, X.T))])
            drive -= bias
            # V's drive Σ(Σ_l c1 M_lᵀ + c2 M_l)Σ − bias is U's transposed (Σ and the bias are symmetric): a view
            out.append((decayed(drive @ V, gamma, U), decayed(drive.T @ U, gamma, V)))
        return out

    def sgd_step(self, model, factors, batch, lr, gamma):
        """∇_U ℓ = Xᵀ(g R)/√d, ∇_V ℓ = Xᵀ(gᵀ P)/√d with P = X U, R = X V."""
        flat, d, B = batch.flat, factors[0][0].shape[0], batch.X.shape[0]
        root_d, decay = np.sqrt(d), 1 - lr * gamma / d
        P = [batch.rows(flat @ U) for U, _ in factors]
        R = [batch.rows(flat @ V) for _, V in factors]
        G = np.stack([token_pairs(p, r) / root_d for p, r in zip(P, R)], axis=-1)  # x_iᵀ U Vᵀ x_j / √d

        def update(k, gk):
            U, V = factors[k - 1]
            grad_U = flat.T @ token_mix(gk, R[k - 1]) / (root_d * B)
            grad_V = flat.T @ token_mix(gk.transpose(0, 2, 1), P[k - 1]) / (root_d * B)
            return (decay * U - lr * grad_U, decay * V - lr * grad_V)

        return batch.descend(factors, model.trainable, G, update)

    def noise_increments(self, model, factors, H):
        return [
            (-H[k - 1] @ V, -H[k - 1].T @ U) if k in model.trainable else (np.zeros_like(U), np.zeros_like(V))
            for k, (U, V) in enumerate(factors, start=1)
        ]

    def means(self, factors, sigma=None):
        """Tr(Σ M_k)/√d (Σ = I when ``sigma`` is None)."""
        return np.array([np.sum(U * (V if sigma is None else sigma @ V)) / np.sqrt(len(U)) for U, V in factors])

    def shifted_to_mean(self, factor, mean, sigma=None):
        return shift_to_mean(*factor, mean, sigma)

    def dimension(self, factor):
        return factor[0].shape[0]

    def sample_factor(self, spec, d, rng):
        width = max(1, int(round(spec.width_ratio * d)))
        U = rng.standard_normal((d, width)) * spec.scale_U / np.sqrt(d)
        V = rng.standard_normal((d, width)) * spec.scale_V / np.sqrt(d)
        return U, V

    def identity_factor(self, c, d):
        root = np.sqrt(c) * np.eye(d)
        return root, root

    def file_factor(self, arrays, path):
        if arrays["U"].shape != arrays["V"].shape:
            raise ModelError(
                f"{path}: U and V must have the same shape, got {arrays['U'].shape} and {arrays['V'].shape}"
            )
        return arrays["U"], arrays["V"]


class UntiedLaws(KindLaws):
    """The untied kind at d = ∞: law factors, Gaussian letter factors, the quadrature state's components, spectral
    laws and edges, factor parts (exact initial moments and the quadrature closure)."""

    def configured_means(self, inits):
        return np.array([spec.configured_mean for _, spec in sorted(inits.items())])

    def law_factor(self, spec, n, rng, gaussian):
        """Not shifted to a configured mean: at d = ∞ the mean is the separate variable m (the coefficients read
        m*(q)), every word odd in M has moment 0, and `shift_to_mean` would add its O(m²/n) to the even words."""
        width = max(1, int(round(spec.width_ratio * n)))
        return gaussian(spec.scale_U, width), gaussian(spec.scale_V, width)

    def centred(self, factor, sigma=None):
        """``Tr(Σ U Vᵀ) = 0`` exactly (`shift_to_mean` to 0): a draw's own Tr(ΣM) is O(1), and the slaving bias keeps
        it, so a teacher's could never be learnt — an excess risk O(Tr(ΣM)²/n²) that a late, small risk feels
        (README, Anisotropic data). The move is O(1/n) on odd words, O(1/n²) on even ones."""
        return shift_to_mean(*factor, 0.0, sigma)

    def _gaussian_letter_factors(self, k):
        U, V = ("U", k), ("V", k)
        return {
            "M": (1.0, ((U, False), (V, True))),
            "M^T": (1.0, ((V, False), (U, True))),
            "A": (1.0, ((U, False), (U, True))),
            "B": (1.0, ((V, False), (V, True))),
        }

    def matrix_laws(self, k, spec):
        return {
            ("U", k): (spec.scale_U**2, spec.width_ratio, False),
            ("V", k): (spec.scale_V**2, spec.width_ratio, False),
        }

    def driving_letters(self, model):
        """Every letter of a trainable index; of a fixed one M_l, M_lᵀ (its A_l, B_l never enter)."""
        return [
            c
            for k in range(1, model.K + 1)
            for c in self.kind.letter_codes(k)
            if k in model.trainable or self.kind.letter_kinds[c % 4] in ("M", "M^T")
        ]

    def factor_parts(self, letters, tol, roots=None):
        """(U, V) with [[A, M], [Mᵀ, B]] = [U; V][U; V]ᵀ: the compressed block is PSD like the true one.
        An untied letter has no exact root (``roots`` is for one-letter laws, `KindLaws.spectral_law`)."""
        parts = []
        for i in range(0, len(letters), 4):
            M, A, B = letters[i], letters[i + 2], letters[i + 3]
            Z = psd_root(np.block([[A, M], [M.T, B]]), tol)
            parts.append((Z[: len(M)], Z[len(M) :]))
        return parts


class Untied(ModelKind):
    matrices_role = UntiedMatrices
    laws_role = UntiedLaws
    name = "untied"
    letter_kinds = ("M", "M^T", "A", "B")
    transposes = (1, 0, 2, 3)
    time_scale = "tau = n eta / d (slow phase; fast phase on t = n eta)"
    time_symbol = "tau"
    centred = False
    finite_d_power = 0.5
    families = (
        Family("beta", -1.0, "effective bias (slaving force)", pairs=False, latex=r"\beta"),
        Family("a1", -2.0, "dPhi/dq1", latex=r"a^{(1)}"),
        Family("a2", -2.0, "dPhi/dq2", latex=r"a^{(2)}"),
    )
    weight_decay_factor = -2.0
    file_arrays = (("U", "V"),)

    positive_letters = True
    aligned_refused = (
        "M = c Σ^b has the mean Tr(Σ M)/√d = O(√d), not O(1); use a gaussian init (with `mean`) for a teacher of "
        "this kind"
    )
    state_names = {"m": ("m",), "q1": ("Q1",), "q2": ("Q2",)}
    # SGD noise: ΔU_k = −η h V_k, ΔV_k = −η hᵀ U_k (the slow phase's τ = nη/d: scale 1), so
    # ΔM = −η(h B + A h) + η² h Mᵀ h,  ΔA = −η(h Mᵀ + M hᵀ) + η² h B hᵀ,  ΔB = −η(hᵀM + Mᵀh) + η² hᵀ A h.
    noise_first = {
        "M": (((), "+", ("B",)), (("A",), "+", ())),
        "M^T": ((("B",), "-", ()), ((), "-", ("A",))),
        "A": (((), "+", ("M^T",)), (("M",), "-", ())),
        "B": (((), "-", ("M",)), (("M^T",), "+", ())),
    }
    noise_second = {
        "M": (((), "+", ("M^T",), "+", ()),),
        "M^T": (((), "-", ("M",), "-", ()),),
        "A": (((), "+", ("B",), "-", ()),),
        "B": (((), "-", ("A",), "+", ()),),
    }
    noise_scale = 1.0

    def steps_per_time(self, d, lr):
        return d / lr

    def order_words(self, k, l):
        return f"M{k} M{l}^T", f"M{k} M{l}"

    # ---- coefficients ---------------------------------------------------------------------------
    def potential_families(self, value):
        return {"a1": value.dQ1, "a2": value.dQ2}

    def slaving_rates(self, moments, model):
        """D_k = t^A_k + t^B_k for every k (β ∝ 1/D_k; the fast phase's rate; μ(Σ²B_k) + μ(A_kΣ²) with Σ)."""
        return np.array([self._rate(moments, model, k) for k in range(1, model.K + 1)])

    @staticmethod
    def _words(model, k):
        """The texts of the words β_k reads: (A-part of D_k, B-part of D_k, μ(M_k) of β′, {M_l^(r): (ψ word with B_k,
        ψ word with A_k)}) — Σ-weighted with a data covariance (module docstring)."""
        s = "Sigma " if model.sigma else ""
        psi = {
            Ml: (f"{s}{s}{Ml} {s}B{k}", f"{s}A{k} {s}{Ml} {s}".strip())
            for l in range(1, model.K + 1)
            for Ml in (f"M{l}", f"M{l}^T")
        }
        return f"A{k} {s}{s}".strip(), f"{s}{s}B{k}", f"{s}M{k}", psi

    def _rate(self, moments, model, k):
        a_part, b_part, _, _ = self._words(model, k)
        return moments(a_part) + moments(b_part)

    def sensitivity(self, model, dQ, value, moments, column):
        """a⁽ʳ⁾ map dQ; ∂β_k/∂y for β_k = −ψ_k/D_k through a⁽ʳ⁾ and the words ψ_k and D_k read."""
        out = {"a1": dQ[0], "a2": dQ[1], "beta": np.zeros((model.K, dQ.shape[-1]))}
        a = (value.dQ1, value.dQ2)
        for k in model.trainable:
            a_part, b_part, _, psi_words = self._words(model, k)
            D = moments(a_part) + moments(b_part)
            dpsi, psi = np.zeros(dQ.shape[-1]), 0.0
            for l in range(1, model.K + 1):
                for r, Ml in enumerate((f"M{l}", f"M{l}^T")):
                    mb, am = psi_words[Ml]
                    words = moments(mb) + moments(am)
                    psi += 2 * a[r][k - 1, l - 1] * words
                    dpsi += 2 * dQ[r, k - 1, l - 1] * words
                    dpsi[column(mb)] += 2 * a[r][k - 1, l - 1]
                    dpsi[column(am)] += 2 * a[r][k - 1, l - 1]
            dD = np.zeros(dQ.shape[-1])
            dD[column(a_part)] += 1
            dD[column(b_part)] += 1
            out["beta"][k - 1] = -dpsi / D + psi / D**2 * dD
        return out

    def coefficient_arrays(self, value, moments, model, trace_conserving=False, gamma=0.0):
        """a⁽¹⁾ = ∂Φ/∂Q1, a⁽²⁾ = ∂Φ/∂Q2, and β_k = −ψ_k/D_k with
        ψ_k = 2 Σ_{l,r} a⁽ʳ⁾_kl [μ(M_l⁽ʳ⁾ B_k) + μ(A_k M_l⁽ʳ⁾)] — at finite d (``trace_conserving``) the
        β′_k = −(ψ_k + 2γ μ(M_k))/D_k that keeps μ(M_k) constant with weight decay (MATH.md §4)."""
        a = (value.dQ1, value.dQ2)
        beta = np.zeros(model.K)
        for k in model.trainable:
            _, _, mean_word, psi_words = self._words(model, k)
            D = self._rate(moments, model, k)
            if not D > 1e-12:
                raise InfeasibleState(
                    f"D_{k} = t^A_{k} + t^B_{k} = {D:.3g} <= 0: the student has collapsed "
                    "(beta is singular); lower the weight decay"
                )
            psi = 2 * sum(
                a[r][k - 1, l - 1] * sum(moments(w) for w in psi_words[Ml])
                for l in range(1, model.K + 1)
                for r, Ml in enumerate((f"M{l}", f"M{l}^T"))
            )
            if trace_conserving:
                psi += 2 * gamma * moments(mean_word)
            beta[k - 1] = -psi / D
        return {"beta": beta, **self.potential_families(value)}

    # ---- the hierarchy -----------------------------------------------------------------------------
    def rules(self, model):
        """MATH.md §4 slow phase: T^bias (β_k) and T^diff (a⁽ʳ⁾_kl)."""
        out = []
        s = () if model.sigma_code is None else (model.sigma_code,)  # the bias's one Σ (module docstring)
        for k in model.trainable:
            M, MT, A, B = (self.code(kind, k) for kind in self.letter_kinds)
            out += [Rule(Z, "beta", k, None, (*s, X)) for Z, X in ((M, B), (MT, A), (A, MT), (B, M))]
            out += [Rule(Z, "beta", k, None, (X, *s)) for Z, X in ((M, A), (MT, B), (A, M), (B, MT))]
            for l in range(1, model.K + 1):
                for r in (1, 2):
                    family = f"a{r}"
                    Mr = self.weighted(model, self.code("M" if r == 1 else "M^T", l))  # (Σ) M_l^(r) (Σ)
                    Mrbar = self.weighted(model, self.code("M^T" if r == 1 else "M", l))  # (Σ) M_l^(r̄) (Σ)
                    out += [
                        Rule(M, family, k, l, (*Mr, B)),
                        Rule(M, family, k, l, (A, *Mr)),
                        Rule(MT, family, k, l, (B, *Mrbar)),
                        Rule(MT, family, k, l, (*Mrbar, A)),
                        Rule(A, family, k, l, (*Mr, MT)),
                        Rule(A, family, k, l, (M, *Mrbar)),
                        Rule(B, family, k, l, (*Mrbar, M)),
                        Rule(B, family, k, l, (MT, *Mr)),
                    ]
        return out

    def required_words(self, model):
        K = model.K
        pairs = [(k, l) for k in range(1, K + 1) for l in range(k, K + 1)]
        out = []
        for k in range(1, K + 1):
            a_part, b_part, mean_word, psi_words = self._words(model, k)
            out += [(a_part, f"t^A_{k} (D_{k} in beta)"), (b_part, f"t^B_{k} (D_{k} in beta)")]
            out += [(mean_word, f"mu(M_{k}) (trace-conserving beta')")]
        for k, l in pairs:
            out += [
                (f"M{k} M{l}^T", f"q1_{k}{l} (Phi depends on it)"),
                (f"M{k} M{l}", f"q2_{k}{l} (Phi depends on it)"),
            ]
        for k in model.trainable:
            out += [(word, f"psi_{k} in beta_{k}") for pair in self._words(model, k)[3].values() for word in pair]
        return out

    def derived(self, series, K):
        q1, q2 = series("M1 M2^T"), series("M1 M2")
        return {"q1_12": q1, "q2_12": q2, "symmetric_overlap": 2 * q1 + 2 * q2}

    # ---- finite matrices ---------------------------------------------------------------------------
    def mean_weights(self, C):
        return np.asarray(C, float).reshape(-1)

    # ---- d = ∞ laws ---------------------------------------------------------------------------------
    # ---- quadrature states --------------------------------------------------------------------


def shift_to_mean(U, V, mean, sigma=None):
    """Untied factors moved to the pre-activation mean ``Tr(Σ U Vᵀ)/√d = mean`` (Σ = ``sigma``, I when None).

    The move is the fast phase's own direction (MATH.md §4): ``U ← U + εV``, ``V ← V + εU``
    shifts ``M = U Vᵀ`` by ``ε(A + B) + ε² Mᵀ``, with ε the root of that quadratic nearest 0;
    ε = O(mean/√d): words odd in M change by O(mean/√d) (μ(M) = mean/√d itself), even words by
    O(mean²/d) (measured at m = 1.5: μ(MMᵀ) +3.3/d, μ(MM) +5.4/d). That is how a *finite-d* state
    carries the mean (SGD's draw and the finite-d flow: `sample_factor`). The d = ∞ state carries
    it as the separate variable m, so the matrix-model closure's `law_factor` is not shifted: its
    O(mean²/n) would be a bias (untied h2, teacher mean 1.5: ensembles 1.5e-2 off the d → ∞
    reference shifted, 4.1e-3 centred, at n = 200 × 16 draws; `make bench`). With Σ the direction is the fast phase's
    with Σ, ``U ← U + εΣV``, ``V ← V + εΣU``: Tr(ΣM) moves by ε(Tr(Σ²B) + Tr(AΣ²)) + ε² Tr(Σ³VUᵀ).
    """
    d = len(U)
    SU, SV = (U, V) if sigma is None else (sigma @ U, sigma @ V)
    current, spread = np.sum(U * SV), np.sum(SU * SU) + np.sum(SV * SV)
    curvature = current if sigma is None else np.sum(SU * (sigma @ SV))
    target = mean * np.sqrt(d)
    if current == target:
        return U, V
    roots = np.roots([curvature, spread, current - target])
    real = roots[np.abs(roots.imag) < 1e-12 * max(1.0, np.abs(roots).max())].real
    if not real.size:
        raise ModelError(
            f"cannot shift untied factors to mean {mean}: Tr(ΣM)/√d can reach "
            f"{(current - spread**2 / (4 * curvature)) / np.sqrt(d):.3g} at most; lower |mean| or "
            "raise the scales"
        )
    epsilon = real[np.argmin(np.abs(real))]
    return U + epsilon * SV, V + epsilon * SU


UNTIED = Untied()
