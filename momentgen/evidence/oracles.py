"""Closed-form d = ∞ solutions that the truncations are measured against (MATH.md §6–§7).

The exactly solvable tied case: L = 1, ``ℓ = (G_1 − G_2)²`` (Γ₁₁ = 2, Γ₁₂ = −2), teacher
``S_2 = cI``, Wishart student ``S_1 = W Wᵀ`` (``W`` of shape d × rd, entries N(0, σ²/d)).
Every eigenvalue follows the logistic flow ``λ' = 4λ(c′ − λ)``, ``c′ = c − γ/8``, on the time
axis ``t = 4nη/d``: ``λ(t) = c′λ₀ / (λ₀ + (c′ − λ₀) e^{−4c′t})``, and the moments are its
averages over the Marchenko–Pastur (free Poisson) law of λ₀.

The Riccati case (`riccati_tied_moments`, MATH.md §8): tied, L = 1, one trainable student
``S`` and a fixed teacher ``T`` free from it, γ = 0, any loss. The flow
``dS/dt = −2Γ₁₁ S² − Γ₁₂ (TS + ST)`` is a matrix Riccati equation: ``S⁻¹`` evolves linearly,
``S(t) = E⁻¹ (S₀⁻¹ + G(T))⁻¹ E⁻¹`` with ``E = exp(B(t) T)``, ``B′ = Γ₁₂`` and
``G(x, t) = 2∫₀ᵗ Γ₁₁(s) e^{−2B(s)x} ds``. Free subordination of ``R = (S₀⁻¹ + G(T))⁻¹``
(``S₀`` free from ``T``) gives ``E_T[R] = (G(T) + w)⁻¹``, where the scalar ``w`` solves
``g = ∫ dν_T/(G + w) = τ((S₀⁻¹ + 1/g − w)⁻¹)``; then ``t₁ = τ(R F)``, ``q₁₂ = τ(R T F)`` and
``q₁₁ = τ(R F R F) = ∂_ε τ((S₀⁻¹ + G − εF)⁻¹ F)`` with ``F = e^{−2BT}``: one-dimensional
integrals over the two spectra, integrated as an ODE for ``B`` and ``G`` at the teacher's
quadrature nodes, Γ from Φ at the current ``q``. Exact at d = ∞ up to quadrature and
integrator tolerances — no truncation, no closure.
"""

import warnings

import numpy as np
from scipy.integrate import IntegrationWarning, quad, solve_ivp
from scipy.optimize import brentq

__all__ = [
    "marchenko_pastur_rule",
    "solvable_tied_moments",
    "solvable_tied_average",
    "solvable_tied_risk",
    "riccati_tied_moments",
    "aligned_tied_average",
]


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
    """``t₁ = μ(S₁)``, ``q₁₁ = μ(S₁²)``, ``q₁₂ = μ(S₁S₂) = c t₁`` at times ``t`` (array, on the tied
    axis t = 4nη/d), d = ∞."""
    x, w = marchenko_pastur_rule(r, sigma, n)
    cp = c - gamma / 8
    t = np.asarray(t, dtype=float)[:, None]
    lam = cp * x / (x + (cp - x) * np.exp(-4 * cp * t))
    t1, q11 = lam @ w, lam**2 @ w
    return {"S1": t1, "S1 S1": q11, "S1 S2": c * t1}


def _spectrum(spec, n):
    """Nodes and weights of the d = ∞ spectrum of a tied letter (Gaussian or identity init)."""
    if spec.kind == "identity":
        return np.array([spec.c]), np.array([1.0])
    return marchenko_pastur_rule(spec.width_ratio, spec.scale, n)


def riccati_tied_moments(potential, student, teacher, times, n=200, rtol=1e-11):
    """Exact d = ∞ ``t₁``, ``q₁₁``, ``q₁₂`` of the tied Riccati case at ``times`` (tied axis
    t = 4nη/d; see the module docstring). ``potential``: a tied `potential.Potential` with K = 2, L = 1;
    ``student``, ``teacher``: their `momentgen.compiler.initial.InitSpec` (Gaussian or identity).
    Returns {"S1": …, "S1 S1": …, "S1 S2": …} (arrays over ``times``)."""
    lam, p = _spectrum(student, n)  # student spectrum at t = 0
    x, nu = _spectrum(teacher, n)
    q22 = (x**2) @ nu

    def tau_A(u):  # τ((S₀⁻¹ + u)⁻¹) and its u-derivative
        return (lam / (1 + u * lam)) @ p, -(lam**2 / (1 + u * lam) ** 2) @ p

    def moments(state):
        B, G = state[0], state[1:]
        F = np.exp(-2 * B * x)

        def residual(w):  # < 0 below the root (g large), > 0 above it
            g = nu @ (1 / (G + w))
            u = 1 / g - w
            return tau_A(u)[0] - g if 1 + u * lam.max() > 0 else -np.inf

        lower = -G.min()  # G + w > 0 on the teacher's spectrum
        step = 1.0
        while residual(lower + step) <= 0:
            step *= 2
        w = brentq(residual, lower + 1e-15 * step, lower + step, xtol=1e-15, rtol=1e-15)
        h = 1 / (G + w)
        g = nu @ h
        dA = tau_A(1 / g - w)[1]
        g_eps, g_w = nu @ (F * h**2), -(nu @ h**2)
        rho_eps = dA * (-g_eps / g**2) - g_eps
        rho_w = dA * (-g_w / g**2 - 1) - g_w
        w_eps = -rho_eps / rho_w  # implicit differentiation of the subordination equation
        return nu @ (F * h), nu @ (F * (F - w_eps) * h**2), nu @ (x * F * h)

    def rates(t, state):
        t1, q11, q12 = moments(state)
        value = potential.at(*(np.array([[q11, q12], [q12, q22]]),) * 2)
        Gamma = value.dQ1 + value.dQ2  # Γ = ∂Φ/∂Q1 + ∂Φ/∂Q2 with Q1 = Q2 = q
        return np.concatenate([[Gamma[0, 1]], 2 * Gamma[0, 0] * np.exp(-2 * state[0] * x)])

    times = np.asarray(times, dtype=float)
    run = solve_ivp(rates, (0.0, times[-1]), np.zeros(1 + len(x)), t_eval=times, method="DOP853", rtol=rtol, atol=1e-13)
    if not run.success:
        raise RuntimeError(f"Riccati oracle failed: {run.message}")
    values = np.array([moments(run.y[:, i]) for i in range(len(run.t))])
    return {"S1": values[:, 0], "S1 S1": values[:, 1], "S1 S2": values[:, 2]}


def solvable_tied_average(t, power, c=1.0, sigma=1.0, rate=1.0):
    """τ(f(S(t))) with f = (x − c)² (``power = "risk"``, times 2: the risk) or x^power, each Marchenko–Pastur
    eigenvalue (rate ≥ 1, jump σ²) on its logistic flow (MATH.md §6, §12), integrated in v = √(x − a) (the
    density ∝ (x − a)^{∓1/2} at the edge a becomes smooth) by adaptive quadrature with breakpoints around the
    edge layer x − a ~ c e^{−4ct}, where the last eigenvalues escape — a fixed rule has a smallest node and
    misses the e^{−2ct} tail (`solvable_tied_moments`' fixed rule too, past t ≈ 1). Reproduces MATH.md §12's
    0.171 / 3.8e-2 / 8.5e-3 / 4.3e-4 / 1.1e-6 at t = 1 / 1.5 / 2 / 3 / 5 (c = 1.5, σ = 0.8), on t = 4nη/d.
    ``t``: times (array); the constant-rate flow without weight decay."""
    jump = sigma**2
    a, b = jump * (1 - np.sqrt(rate)) ** 2, jump * (1 + np.sqrt(rate)) ** 2
    values = []
    for s in np.atleast_1d(np.asarray(t, dtype=float)):
        E = np.exp(-4 * c * s)

        def integrand(v, E=E):
            x = a + v * v
            lam = c * x / (x + (c - x) * E)
            f = 2 * (lam - c) ** 2 if power == "risk" else lam**power
            return f * np.sqrt(max((b - x) * (x - a), 0.0)) / (np.pi * jump * x) * v

        layer = np.sqrt(c * E)
        points = [p for p in layer * np.logspace(-2, 2, 5) if p < np.sqrt(b - a)]  # (±1 decade: 4e-4 low at t ≥ 4.5)
        with warnings.catch_warnings():  # QUADPACK's roundoff notice at 1e-9: the values match §12's to 3 digits
            warnings.simplefilter("ignore", IntegrationWarning)
            values.append(quad(integrand, 0, np.sqrt(b - a), points=points, limit=400, epsabs=1e-30, epsrel=1e-9)[0])
    return np.array(values)


def solvable_tied_risk(t, c=1.0, sigma=1.0, rate=1.0):
    """2 τ((S(t) − c)²) on the solvable case, to its far tail (`solvable_tied_average`)."""
    return solvable_tied_average(t, "risk", c, sigma, rate)


def aligned_tied_average(t, word, exponent, b, c, c0):
    """The exact d = ∞ commuting case of MATH.md §10 (tied, L = 1, mse(h1): Γ₁₁ = 2, Γ₁₂ = −2, no weight decay):
    student ``S₁ = c₀ I``, teacher ``S₂ = c Σ^b`` aligned with a power-law Σ (eigenvalue (1 + a) u^a at quantile
    u, a = ``exponent``). Everything commutes; the eigenvalue s of S₁ in Σ's eigen-direction λ follows the
    logistic flow ``ds/dt = −4λ² s (s − s*)``, s* = c λ^b, so ``s(t) = s* / (1 + (s*/c₀ − 1) e^{−4λ² s* t})``
    (where s* ≪ c₀ the direction first relaxes algebraically, s ≈ c₀/(1 + 4λ²c₀t), then exponentially).

    ``word``: ``"risk"`` (2 τ(Σ(S₁ − S₂)Σ(S₁ − S₂)) = 2∫λ²(s − s*)²) or a pair (p, q) for τ(Σ^p S₁^q). Integrated
    over u = e^{−v} by adaptive quadrature with breakpoints where the direction escaping at time t sits
    (4λ² s* t ~ 1): the small directions are learned last and make the power-law tail. ``t``: times on
    t = 4nη/d (array)."""
    a = float(exponent)
    values = []
    for s in np.atleast_1d(np.asarray(t, dtype=float)):

        def integrand(v, s=s):
            u = np.exp(-v)
            lam = (1 + a) * u**a
            star = c * lam**b
            k = 4 * lam**2 * star * s  # s = c₀ / (4λ²c₀t (1 − e^{−k})/k + e^{−k}): no 0/0 where s* underflows
            growth = -np.expm1(-k) / k if k > 0 else 1.0
            current = c0 / (4 * lam**2 * c0 * s * growth + np.exp(-k))
            f = 2 * lam**2 * (current - star) ** 2 if word == "risk" else lam ** word[0] * current ** word[1]
            return f * u

        front = [] if s == 0 else [np.log((1 + a) ** (1 / a)) + np.log(4 * c * s) / (a * (2 + b))]  # λ^{2+b} ≈ 1/(4cs)
        points = sorted({p + shift for p in front for shift in (-2.0, 0.0, 2.0) if p + shift > 0})
        upper = max([60.0] + [p + 40.0 for p in points])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", IntegrationWarning)
            values.append(quad(integrand, 0, upper, points=points or None, limit=400, epsabs=1e-30, epsrel=1e-10)[0])
    return np.array(values)
