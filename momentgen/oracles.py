"""Closed-form d = ∞ solutions that the truncations are measured against (MATH.md §6–§7).

The exactly solvable tied case: L = 1, ``ℓ = (G_1 − G_2)²`` (Γ₁₁ = 2, Γ₁₂ = −2), teacher
``S_2 = cI``, Wishart student ``S_1 = W Wᵀ`` (``W`` of shape d × rd, entries N(0, σ²/d)).
Every eigenvalue follows the logistic flow ``λ' = 4λ(c′ − λ)``, ``c′ = c − γ/8``, on the time
axis ``t = 4nη/d``: ``λ(t) = c′λ₀ / (λ₀ + (c′ − λ₀) e^{−4c′t})``, and the moments are its
averages over the Marchenko–Pastur (free Poisson) law of λ₀.
"""

import numpy as np

__all__ = ["marchenko_pastur_rule", "solvable_tied_moments"]


def marchenko_pastur_rule(r, sigma, n=400):
    """Nodes and weights integrating against the free Poisson law (rate r, jump σ²).

    Uses ``x = m + h cos θ`` on the support ``[σ²(1−√r)², σ²(1+√r)²]``, which turns the
    square-root edges into a smooth periodic integrand (exponential convergence in n);
    for ``r < 1`` an atom of mass ``1 − r`` sits at 0.
    """
    a, b = sigma**2 * (1 - np.sqrt(r)) ** 2, sigma**2 * (1 + np.sqrt(r)) ** 2
    theta = (np.arange(n) + 0.5) * np.pi / n
    x = (a + b) / 2 + (b - a) / 2 * np.cos(theta)
    w = ((b - a) / 2) ** 2 * np.sin(theta) ** 2 / x / (2 * np.pi * sigma**2) * (np.pi / n)
    if r < 1:
        x, w = np.append(x, 0.0), np.append(w, 1 - r)
    return x, w


def solvable_tied_moments(t, r, sigma, c, gamma=0.0, n=400):
    """``t₁ = μ(S₁)``, ``q₁₁ = μ(S₁²)``, ``q₁₂ = μ(S₁S₂) = c t₁`` at times ``t`` (array), d = ∞."""
    x, w = marchenko_pastur_rule(r, sigma, n)
    cp = c - gamma / 8
    t = np.asarray(t, dtype=float)[:, None]
    lam = cp * x / (x + (cp - x) * np.exp(-4 * cp * t))
    t1, q11 = lam @ w, lam**2 @ w
    return {"S1": t1, "S1 S1": q11, "S1 S2": c * t1}
