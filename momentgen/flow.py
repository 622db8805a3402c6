"""The deterministic matrix flow at finite d (MATH.md §3–§5), given coefficient values.

The hierarchy is the trace image of this flow; here it acts on the actual factors:

* tied, time ``t = 4nη/d``:   ``dW_k/dt = −Σ_l Γ_kl S_l W_k − (γ/4) W_k``, so that
  ``dS_k/dt = −Σ_l Γ_kl (S_l S_k + S_k S_l) − (γ/2) S_k``;
* untied (slow phase), time ``τ = nη/d``:
  ``dU_k/dτ = −(β_k I + 2 Σ_{l,r} a⁽ʳ⁾_kl M_l⁽ʳ⁾) V_k − γ U_k`` and
  ``dV_k/dτ = −(β_k I + 2 Σ_{l,r} a⁽ʳ⁾_kl M_l⁽ʳ̄⁾) U_k − γ V_k``;
* direct, time ``τ = nη/d``:  ``dS_k/dτ = −2 Σ_l (A_kl S_l + B_kl S_lᵀ) − γ S_k``.

The quadrature closure moves factors of its compressed letters by the same laws
(`momentgen.representation.factor_parts`), so that a kernel stays exact.

Fixed (non-trainable) indices do not move. Coefficients are a mapping from the symbol
names of `momentgen.hierarchy` (``"Gamma[1,2]"``, ``"beta[1]"``, ``"a2[1,2]"``,
``"A[1,1]"``, ``"gamma"``) to values.
"""

import numpy as np

from .matrices import letter_matrices

__all__ = ["factor_velocities", "letter_velocities", "driving_letters"]


def factor_velocities(model, factors, coefficients):
    """Time derivatives of the factors, in the layout of ``factors`` (see `momentgen.matrices`)."""
    c, K, gamma = coefficients, model.K, coefficients["gamma"]
    if model.kind == "tied":
        S = [W @ W.T for W in factors]
        return [
            -sum(c[f"Gamma[{k},{l}]"] * S[l - 1] for l in range(1, K + 1)) @ W - gamma / 4 * W
            if k in model.trainable else np.zeros_like(W)
            for k, W in enumerate(factors, start=1)
        ]  # fmt: skip
    if model.kind == "untied":
        M = [U @ V.T for U, V in factors]
        out = []
        for k, (U, V) in enumerate(factors, start=1):
            if k not in model.trainable:
                out.append((np.zeros_like(U), np.zeros_like(V)))
                continue
            bias = c[f"beta[{k}]"] * np.eye(len(U))
            drive = sum(c[f"a1[{k},{l}]"] * M[l - 1] + c[f"a2[{k},{l}]"] * M[l - 1].T for l in range(1, K + 1))
            drive_bar = sum(c[f"a1[{k},{l}]"] * M[l - 1].T + c[f"a2[{k},{l}]"] * M[l - 1] for l in range(1, K + 1))
            out.append((-(bias + 2 * drive) @ V - gamma * U, -(bias + 2 * drive_bar) @ U - gamma * V))
        return out
    return [
        -2 * sum(c[f"A[{k},{l}]"] * factors[l - 1] + c[f"B[{k},{l}]"] * factors[l - 1].T for l in range(1, K + 1))
        - gamma * S if k in model.trainable else np.zeros_like(S)
        for k, S in enumerate(factors, start=1)
    ]  # fmt: skip


def letter_velocities(model, factors, coefficients):
    """Time derivatives of the letter matrices (letter-code order), by the product rule."""
    velocities = factor_velocities(model, factors, coefficients)
    if model.kind == "tied":
        return [dW @ W.T + W @ dW.T for W, dW in zip(factors, velocities)]
    if model.kind == "untied":
        out = []
        for (U, V), (dU, dV) in zip(factors, velocities):
            dM = dU @ V.T + U @ dV.T
            out += [dM, dM.T, dU @ U.T + U @ dU.T, dV @ V.T + V @ dV.T]
        return out
    return letter_matrices("direct", velocities)


def driving_letters(model):
    """Codes of the letters that enter the velocities: every letter of a trainable index and,
    of a fixed index, those in the drive — tied ``S_l``, untied ``M_l, M_lᵀ`` (``A_l, B_l``
    never enter), direct ``S_l, S_lᵀ``."""
    a = model.alphabet
    fixed_kinds = {"tied": ("S",), "untied": ("M", "M^T"), "direct": ("S", "S^T")}[model.kind]
    return [c for c in range(a.size)
            if a.index(c) in model.trainable or a.kinds[c % len(a.kinds)] in fixed_kinds]  # fmt: skip
