"""The exact d = ∞ flow of one trainable tied letter against one fixed letter (MATH.md §15).

For tied attention with one trainable letter S and one fixed letter S* (any L, any loss, weight
decay γ, κ = 0, isotropic tokens) the flow ``dS/dt = −2Γ₁₁S² − Γ₁₂(S*S + SS*) − (γ/2)S`` (t = 4nη/d)
is a matrix Riccati equation and ``Y = S⁻¹`` is linear. With ``c(t) = ∫₀ᵗ Γ₁₂``,
``F(t, λ) = e^{−2c(t)λ − γt/2}`` and ``D(t, λ) = ∫₀ᵗ 2Γ₁₁(s) F(s, λ) ds`` (functions on S*'s spectrum),

    S(t) = E⁻¹ (Y₀ + D(S*))⁻¹ E⁻¹,   E⁻² = F(S*),   Y₀ = S₀⁻¹,

so every trace of a word in S and S* is ``τ(R g₁ R g₂ ⋯ R g_M)`` with ``R = (Y₀ + D)⁻¹``, one R per
letter S and ``g_i = F·(S*)^{b_i}`` (b_i the power of S* after the i-th S). Y₀ is free from S*
(two independent Gaussian letters; a letter from a file is taken in generic position to the other), so
by subordination every such trace is a fixed point of scalars (`Subordination`): the scalar ``w``
with ``τ(R h(S*)) = τ(h/(D + w))``, and for M ≥ 2 the M × M upper-triangular matrix-valued
subordination of the linearisation ``I ⊗ (Y₀ + D) − T`` (T: the g's on the first superdiagonal),
whose (1, M) entry is ``R g₁ R ⋯ g_{M−1} R`` — solved exactly, diagonal by diagonal, each a linear
equation. The student's law enters only through ``φ(z) = τ((Y₀ + z)⁻¹) = τ(S₀(1 + zS₀)⁻¹)`` and
its Taylor coefficients (`StudentLaw`): in closed form for a Wishart student, so the hard edge at 0
of a square student is exact at every depth (the risk's e^{−2ct} tail, MATH.md §12); the fixed
letter's law is a Gauss rule of its own law (`FixedLaw`; exact for an identity or a file's spectrum).

`RiccatiFlow` integrates the ``1 + N`` scalars ``c, D(λ_j)`` (N nodes of the fixed letter's rule),
reading Γ = ∂Φ/∂q from the potential at ``q = τ(S²), τ(SS*), τ(S*²)`` each step. The spectrum of S(t)
is the density of its Stieltjes transform (`RiccatiFlow.density`), from the same fixed point at
complex shift.
"""

import math
import time
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np
from scipy.integrate import solve_ivp
from scipy.interpolate import BarycentricInterpolator
from scipy.optimize import brentq

from ..core.errors import ModelError
from ..laws.edge import free_poisson_law, gauss_rule
from ..models.words import parse
from ..setting.matrices import letter_matrices
from .closure_base import ERROR_SCALE, Closure, derived_columns, reported, risk_columns
from .integrate import audited, last_time_within
from .risk import relative_risk_estimate

__all__ = [
    "StudentLaw",
    "FixedLaw",
    "Subordination",
    "RiccatiFlow",
    "RiccatiClosure",
    "word_blocks",
    "outside_riccati",
    "TAYLOR_POINTS",
]

#: Points on the circle of the Cauchy integral that gives φ's Taylor coefficients at u (radius half the distance to
#: φ's nearest singularity, so the aliasing error is 2^{−TAYLOR_POINTS} of the largest coefficient).
TAYLOR_POINTS = 48
#: Largest exponent 2|c|λ the state may reach (e^{700} is near the top of double precision).
MAX_EXPONENT = 650.0


@dataclass(frozen=True)
class StudentLaw:
    """The law of the student's initial letter S₀ through ``φ(z) = τ(S₀(1 + zS₀)⁻¹)`` (= τ((Y₀ + z)⁻¹)).

    ``rate``/``jump``: a free Poisson (Wishart) law ``W Wᵀ``, W of width ``rate·d`` with entries of variance
    ``jump/d`` (an atom of mass 1 − rate at 0 when rate < 1, which contributes nothing to φ), in closed form
    ``φ(z) = 2σ²r / (1 + (a + b)z/2 + √(1 + az)√(1 + bz))`` on the edges a, b — analytic off
    [−1/a, −1/b], exact at every depth of the edge. Else ``eigenvalues``/``weights``: a discrete law
    (an identity letter, a file's spectrum)."""

    rate: float = None
    jump: float = None
    eigenvalues: np.ndarray = None
    weights: np.ndarray = None

    @classmethod
    def wishart(cls, rate, jump):
        return cls(rate=float(rate), jump=float(jump))

    @classmethod
    def discrete(cls, eigenvalues, weights=None):
        eigenvalues = np.asarray(eigenvalues, float)
        weights = np.full(len(eigenvalues), 1 / len(eigenvalues)) if weights is None else np.asarray(weights, float)
        return cls(eigenvalues=eigenvalues, weights=weights)

    def __post_init__(self):
        object.__setattr__(self, "_edges", self._spectrum_edges())

    @property
    def edges(self):
        """(a, b): the bottom and the top of the spectrum's continuous part (discrete: the extreme eigenvalues)."""
        return self._edges

    def _spectrum_edges(self):
        if self.eigenvalues is not None:
            return float(self.eigenvalues.min()), float(self.eigenvalues.max())
        root = np.sqrt(self.rate)
        return self.jump * (1 - root) ** 2, self.jump * (1 + root) ** 2

    def phi(self, z):
        """φ(z) at real or complex ``z`` (an array) off the cut (−∞, −1/top]."""
        return self.value_and_slope(z)[0]

    def value_and_slope(self, z):
        """(φ(z), φ'(z)) at real or complex ``z`` (a number or an array)."""
        if isinstance(z, float) and self.eigenvalues is None:  # the fixed point's hot path: scalar arithmetic
            return self._closed_form(z, math.sqrt)
        z = np.asarray(z)
        if self.eigenvalues is not None:
            lam = self.eigenvalues
            ratio = lam / (1 + np.multiply.outer(z, lam))
            return (self.weights * ratio).sum(axis=-1), -(self.weights * ratio**2).sum(axis=-1)
        out = self._closed_form(z.astype(complex), np.sqrt)
        return tuple(v.real for v in out) if np.isrealobj(z) else out

    def _closed_form(self, z, sqrt):
        """The Wishart law's (φ(z), φ'(z)) with the square root ``sqrt`` (math's for a float, numpy's for arrays)."""
        a, b = self._edges
        left, right = sqrt(1 + a * z), sqrt(1 + b * z)
        denominator = 1 + (a + b) * z / 2 + left * right
        value = 2 * self.jump * self.rate / denominator
        return value, -value * ((a + b) / 2 + (a * right / left + b * left / right) / 2) / denominator

    def taylor(self, u, order):
        """The Taylor coefficients φ_0..φ_{order−1} of φ at real ``u`` (φ(u + δ) = Σ φ_j δ^j)."""
        if order <= 2:
            return np.array(self.value_and_slope(u))[:order]
        if self.eigenvalues is not None:
            lam = self.eigenvalues
            base = lam / (1 + u * lam)
            return np.array([(self.weights * base * (-base) ** j).sum() for j in range(order)])
        radius = 0.5 * (u + 1 / self.edges[1])
        theta = 2 * np.pi * np.arange(TAYLOR_POINTS) / TAYLOR_POINTS
        values = self.phi(u + radius * np.exp(1j * theta))
        coefficients = np.fft.fft(values) / TAYLOR_POINTS
        return (coefficients[:order] / radius ** np.arange(order)).real


@dataclass(frozen=True)
class FixedLaw:
    """The fixed letter's spectral law as a rule: ``nodes`` λ_j, ``weights`` ν_j (a Gauss rule of a Wishart law, exact
    for polynomials of degree < 2N; an identity's one atom; a file's eigenvalues — the law itself).
    ``wishart_law``: (rate, jump) of a Wishart law, whose finer rules `refined` gives (None: the rule is the law)."""

    nodes: np.ndarray
    weights: np.ndarray
    wishart_law: tuple = None

    @classmethod
    def wishart(cls, rate, jump, n):
        """The N-point Gauss rule of the free Poisson law of rate ``rate`` (an atom 1 − rate at 0 below rate 1)."""
        return _wishart_rule(float(rate), float(jump), int(n))

    @classmethod
    def discrete(cls, eigenvalues):
        eigenvalues = np.asarray(eigenvalues, float)
        return cls(eigenvalues, np.full(len(eigenvalues), 1 / len(eigenvalues)))

    def refined(self, n):
        """A rule of the same law with ``n`` nodes (itself when the rule is the law)."""
        return self if self.wishart_law is None else FixedLaw.wishart(*self.wishart_law, n)

    @property
    def spacing(self):
        """The largest gap between neighbouring nodes of the continuous part (0 for one node)."""
        nodes = np.unique(self.nodes[self.nodes > 0]) if len(self.nodes) > 1 else self.nodes
        return float(np.diff(nodes).max()) if len(nodes) > 1 else 0.0


@lru_cache(maxsize=16)
def _wishart_rule(rate, jump, n):
    """`FixedLaw.wishart`, cached (Golub–Welsch on 4 096 nodes takes seconds); its arrays are read-only."""
    if rate >= 1:
        nodes, weights = gauss_rule(*free_poisson_law(rate, jump).recurrence(n))
    else:
        nodes, weights = gauss_rule(*free_poisson_law(1 / rate, rate * jump).recurrence(n - 1))
        nodes, weights = np.concatenate([[0.0], nodes]), np.concatenate([[1 - rate], rate * weights])
    for array in (nodes, weights):
        array.flags.writeable = False
    return FixedLaw(nodes, weights, (rate, jump))


def word_blocks(codes, student, fixed):
    """A word (letter codes) as the powers (b₁..b_M) of the fixed letter after each student letter, read cyclically
    from a student letter; () for a word without the student (its trace is τ(S*^b), b = its length)."""
    codes = list(codes)
    if student not in codes:
        return ()
    start = codes.index(student)
    codes = codes[start:] + codes[:start]
    blocks = []
    for code in codes:
        if code == student:
            blocks.append(0)
        elif code == fixed:
            blocks[-1] += 1
        else:
            raise ModelError(f"the riccati closure reads words in its two letters only, got letter code {code}")
    return tuple(blocks)


class Subordination:
    """Traces of ``R g₁ R ⋯ R g_M`` (R = (Y₀ + D(S*))⁻¹, g_i functions of S*) at one state (module docstring).

    ``student``: `StudentLaw`; ``fixed``: `FixedLaw`; ``D``: D on the fixed letter's nodes (real, or complex for a
    Stieltjes transform). The scalar fixed point: w with ``g = τ((D + w)⁻¹)``, ``φ(1/g − w) = g``."""

    def __init__(self, student, fixed, D, w=None):
        self.student, self.fixed, self.D = student, fixed, D
        self.w = self._shift(w)
        self.h = 1 / (D + self.w)
        self.g = self.fixed.weights @ self.h
        self.u = 1 / self.g - self.w

    def _residual(self, w):
        """(φ(1/g(w) − w) − g(w), its derivative in w)."""
        h = 1 / (self.D + w)
        g = self.fixed.weights @ h
        dg = -(self.fixed.weights @ h**2)
        u = 1 / g - w
        phi, dphi = self.student.value_and_slope(self._real_or(u))
        return phi - g, dphi * (-dg / g**2 - 1) - dg

    def _shift(self, guess):
        """w: Newton from ``guess`` (the previous state's, or a continuation's), else bracketed on the real line."""
        if guess is not None:
            try:
                return self._newton(guess)
            except ModelError:
                if not np.isrealobj(self.D):
                    return self._newton(self._alternating(guess))
        return self._bracketed()

    def _alternating(self, w, iterations=2000, tol=1e-10):
        """Off the real line: the two-sided subordination iteration ``u = 1/g(w) − w``, ``w ← 1/φ(u) − u`` (each side's
        transform maps the upper half-plane into itself, so it settles where Newton from afar does not)."""
        nu = self.fixed.weights
        for _ in range(iterations):
            u = 1 / (nu @ (1 / (self.D + w))) - w
            new = 1 / self.student.phi(np.asarray(u)) - u
            if abs(new - w) <= tol * max(1.0, abs(w)):
                return new
            w = new
        raise ModelError("the riccati closure's subordination did not settle off the real line")

    def _bracketed(self):
        """The real fixed point by bisection (brentq) above −min D, where every D + w is positive."""
        lower = -self.D.min()
        _, top = self.student.edges

        def residual(w):
            h = 1 / (self.D + w)
            g = self.fixed.weights @ h
            u = 1 / g - w
            return self.student.phi(u) - g if 1 + u * top > 0 else -np.inf

        step = max(1.0, abs(lower))
        while residual(lower + step) <= 0:
            step *= 2
        return brentq(residual, lower + 1e-15 * step, lower + step, xtol=1e-300, rtol=1e-15, maxiter=400)

    def _newton(self, w, tol=1e-9, settled=1e-10, iterations=40):
        """Newton on the scalar fixed point from ``w``, each step halved until D + w stays positive (real D): done
        after a step below ``tol`` (relative; the convergence is quadratic, so what that step leaves is ~tol²,
        rounding), or after the iterations when the last step is below ``settled`` (rounding stalls steps near 1e-15
        off the real line)."""
        real = np.isrealobj(self.D)
        lower = -self.D.min() if real else None
        step = np.inf
        for _ in range(iterations):
            value, slope = self._residual(w)
            step = value / slope
            while real and not w - step > lower and abs(step) > 1e-300:
                step /= 2
            w = w - step
            if abs(step) <= tol * max(1.0, abs(w)):
                break
        if abs(step) <= settled * max(1.0, abs(w)):
            return w
        raise ModelError("the riccati closure's subordination did not converge (Newton)")

    def trace(self, functions):
        """τ(R g₁ R g₂ ⋯ R g_M) for ``functions`` = (g₁..g_M), each an array on the fixed letter's nodes: the (1, M)
        entry of the linearisation's inverse ``(I ⊗ (Y₀ + D) − T)⁻¹``, conditioned on S* by the subordination Ω."""
        M = len(functions)
        nu = self.fixed.weights
        if M == 1:
            return nu @ (functions[0] * self.h)
        if M == 2:  # `_triangular_shift` written out: Ω = [[w, o], [0, w]]
            G01 = nu @ (self.h**2 * functions[0])
            o = -(self._derivatives[1] * (-G01 / self.g**2) - G01) / self._slope()
            return nu @ (functions[1] * self.h**2 * (functions[0] - o))
        pencil = self._pencil(functions)
        inverse = np.linalg.inv(pencil + self._triangular_shift(pencil))
        return nu @ (functions[-1] * inverse[:, 0, M - 1])

    def _pencil(self, functions):
        """``D ⊗ I − T`` on every node: (N, M, M), T with g₁..g_{M−1} on the first superdiagonal."""
        M = len(functions)
        pencil = np.einsum("j,ab->jab", self.D, np.eye(M)).astype(np.result_type(self.h, float))
        for i in range(M - 1):
            pencil[:, i, i + 1] = -functions[i]
        return pencil

    def _triangular_shift(self, pencil):
        """The M × M upper-triangular subordination Ω (diagonal w) with ``E[(Y₀ ⊗ I + pencil)⁻¹] = (pencil + Ω)⁻¹``
        on S*'s algebra: ``G = τ_ν((pencil + Ω)⁻¹)``, ``φ(G⁻¹ − Ω) = G``. Superdiagonal k enters linearly once the
        lower ones are known (slope `_slope`), so each is one exact step."""
        M = pencil.shape[-1]
        slope, taylor, nu = self._slope(), self.student.taylor(self.u, M), self.fixed.weights
        omega = np.diag(np.full(M, self.w)).astype(pencil.dtype)
        for k in range(1, M):
            G = np.einsum("j,jab->ab", nu, np.linalg.inv(pencil + omega))
            H = _matrix_phi(taylor, np.linalg.inv(G) - omega - self.u * np.eye(M))
            for i in range(M - k):
                omega[i, i + k] = -(H[i, i + k] - G[i, i + k]) / slope
        return omega

    @cached_property
    def _derivatives(self):
        """(g'(w), φ'(u)) at the fixed point."""
        return -(self.fixed.weights @ self.h**2), self.student.value_and_slope(self._real_or(self.u))[1]

    @staticmethod
    def _real_or(u):
        """``u`` as a Python float when it is real (`StudentLaw.value_and_slope`'s scalar path), else as it is."""
        return float(u) if np.isrealobj(u) else u

    def _slope(self):
        """∂(φ(U) − G)/∂Ω at one off-diagonal entry, all others fixed: the scalar fixed point's linearisation."""
        dg, dphi = self._derivatives
        return dphi * (-dg / self.g**2 - 1) - dg


def _matrix_phi(taylor, nilpotent):
    """Σ_j φ_j N^j for a strictly upper-triangular N."""
    M = len(nilpotent)
    out, power = taylor[0] * np.eye(M), np.eye(M)
    for j in range(1, M):
        power = power @ nilpotent
        out = out + taylor[j] * power
    return out


class RiccatiFlow:
    """The state ``c, D(λ_j)`` and its flow (module docstring) for one problem.

    ``gamma_of(q_ss, q_sf)`` → (Γ_ss, Γ_sf): the potential's coefficients at τ(S²), τ(SS*) (τ(S*²) fixed);
    ``decay``: the weight decay γ. Times on t = 4nη/d."""

    def __init__(self, student, fixed, gamma_of, decay=0.0):
        self.student, self.fixed, self.gamma_of, self.decay = student, fixed, gamma_of, float(decay)
        self._last_shift = None  # the last fixed point's w: Newton's start at the next state

    def functions(self, t, c):
        """F(t, λ) on the nodes."""
        return np.exp(-2 * c * self.fixed.nodes - self.decay * t / 2)

    def at(self, t, state):
        """The `Subordination` and F at (t, state)."""
        sub = Subordination(self.student, self.fixed, state[1:], self._last_shift)
        self._last_shift = sub.w
        return sub, self.functions(t, state[0])

    def order_parameters(self, t, state):
        """(τ(S²), τ(SS*)) at (t, state)."""
        return self.words(t, state, [((0, 0), 2), ((1,), 2)])

    def rates(self, t, state):
        gamma_ss, gamma_sf = self.gamma_of(*self.order_parameters(t, state))
        F = self.functions(t, state[0])
        return np.concatenate([[gamma_sf], 2 * gamma_ss * F])

    def words(self, t, state, shapes):
        """τ of each word (blocks, length) in ``shapes`` at (t, state) — ``blocks`` the powers of S* after each S
        (`word_blocks`), ``length`` its letters — from one fixed point."""
        x = self.fixed.nodes
        sub, F = self.at(t, state)
        return [
            sub.trace([F * x**b for b in blocks]) if blocks else self.fixed.weights @ x**length
            for blocks, length in shapes
        ]

    def solve(self, times, rtol=1e-10, atol=1e-14):
        """The state at ``times`` (from 0): (times reached, states (len, 1 + N), status, message)."""
        exponent = 2 * np.abs(self.fixed.nodes).max()

        def overflow(t, state):
            return MAX_EXPONENT - abs(state[0]) * exponent

        overflow.terminal = True
        y0 = np.zeros(1 + len(self.fixed.nodes))
        run = solve_ivp(
            self.rates, (0.0, float(times[-1])), y0, t_eval=times, method="DOP853", rtol=rtol, atol=atol,
            events=overflow,
        )  # fmt: skip
        if run.status == 1:
            return (
                run.t,
                run.y.T,
                "stopped",
                (
                    f"the state's exponent 2|c|λ reached {MAX_EXPONENT:g} at t = {run.t_events[0][0]:.4g} (the top of "
                    "double precision): the riccati closure stops there"
                ),
            )
        if not run.success:
            return run.t, run.y.T, "failed", f"the riccati flow failed: {run.message}"
        return run.t, run.y.T, "ok", f"DOP853, {run.nfev} evaluations"

    def density(self, t, state, x, eta):
        """The density of S(t)'s spectrum at points ``x`` (increasing; ``eta`` a number or one per point), from its
        Stieltjes transform at x + iη:
        ``τ(S(1 + εS)⁻¹) = τ(F (Y₀ + D + εF)⁻¹)`` at ε = −1/ζ, by Newton from the real fixed point, continued
        from the largest x down."""
        F = self.functions(t, state[0])
        D = state[1:]
        nu = self.fixed.weights
        w = Subordination(self.student, self.fixed, D, self._last_shift).w
        out = np.empty(len(x))
        eta = np.broadcast_to(eta, np.shape(x))
        for i in range(len(x) - 1, -1, -1):
            zeta = x[i] + 1j * eta[i]
            eps = -1 / zeta
            sub = Subordination(self.student, self.fixed, D + eps * F, w=complex(w))
            w = sub.w
            f = nu @ (F * sub.h)
            G = (1 + f / zeta) / zeta
            out[i] = -G.imag / np.pi
        return out


# ---- the closure ------------------------------------------------------------------------------------------------

#: Init kinds whose spectral law the closure reads (an aligned letter is a function of Σ: outside the class).
LAW_KINDS = ("gaussian", "identity", "from-file")
#: The most nodes of the fixed letter's Gauss rule (``size``): Golub–Welsch holds N² numbers (134 MB here), and the rule
#: converges geometrically (N = 64 is 7e-13 from N = 128 on the hard-edge case, t ≤ 3).
MAX_NODES = 4096
#: rtol of the scalars' integration: the floor of every estimate is ten times it.
RTOL = 1e-9


def outside_riccati(config, kappa=0.0):
    """Why ``config`` at κ = ``kappa`` is outside the riccati closure's class (one line), or None when it is inside:
    tied, two indices, one trainable, isotropic tokens, κ = 0, each init Gaussian, identity or from a file."""
    model = config.model
    specs = config.inits()
    reasons = [
        (model.kind != "tied", f"the {model.kind} kind"),
        (model.K != 2, f"K = {model.K} letters"),
        (len(model.trainable) != 1, f"{len(model.trainable)} trainable letters"),
        (model.sigma, "anisotropic tokens Σ"),
        (kappa > 0, f"the finite-learning-rate term (κ = {kappa:.3g})"),
        (any(spec.kind not in LAW_KINDS for spec in specs.values()), "an aligned init"),
    ]
    found = [why for bad, why in reasons if bad]
    if not found:
        return None
    return (
        "the riccati closure solves one trainable tied letter against one fixed letter with isotropic tokens at "
        f'κ = 0 (MATH.md §15); this configuration has {", ".join(found)}: use closure = "quadrature" or '
        '"matrix-model"' + (" (the matrix model carries κ > 0)" if kappa > 0 else "")
    )


def _laws(problem, nodes):
    """(student's `StudentLaw`, the fixed letter's fine `FixedLaw`, its coarse rule or None): from the inits' d = ∞
    laws, or from the spectra of given finite matrices (taken in generic position to each other)."""
    model, specs = problem.model, problem.specs
    (student,) = model.trainable
    fixed = 3 - student
    if problem.factors is not None:
        letters = letter_matrices(model.kind, problem.factors)
        spectra = [np.linalg.eigvalsh(letters[k - 1]) for k in (student, fixed)]
        return StudentLaw.discrete(spectra[0]), FixedLaw.discrete(spectra[1]), None

    def eigenvalues(spec):
        return np.array([spec.c])

    s_spec, f_spec = specs[student], specs[fixed]
    if s_spec.kind == "gaussian":
        student_law = StudentLaw.wishart(s_spec.width_ratio, s_spec.scale**2)
    else:
        student_law = StudentLaw.discrete(eigenvalues(s_spec))
    if f_spec.kind == "gaussian":
        rule = (f_spec.width_ratio, f_spec.scale**2)
        return student_law, FixedLaw.wishart(*rule, nodes), FixedLaw.wishart(*rule, max(2, nodes // 2))
    return student_law, FixedLaw.discrete(eigenvalues(f_spec)), None


@dataclass
class Leg:
    """One resolution's run: the times reached, {word: values}, status and message, its `RiccatiFlow` and states."""

    t: np.ndarray
    series: dict
    status: str
    message: str
    flow: RiccatiFlow
    states: np.ndarray


class RiccatiClosure(Closure):
    """The exact d = ∞ flow of one trainable tied letter against one fixed letter (module docstring; MATH.md §15).

    Resolution: ``size`` = N nodes of the fixed letter's Gauss rule (a Wishart teacher; an identity or a file's
    spectrum is exact). Legs: N and N/2 nodes. The estimate is their difference plus ten times the integration
    tolerance: the Gauss rule of the smooth functions e^{−2cλ}, D(λ) converges geometrically in N (measured on the
    hard-edge Wishart case, t ≤ 3: N/2 = 32 is 5e-8 off where N = 64 is 7e-13), so the N/2 leg's error bounds the N
    leg's; the student's law is in closed form and the fixed point is solved to rounding."""

    name = "riccati"
    resolution = "size"
    companion = "quadrature"  # an independent closure whose estimate is a bound (`verify` cross-checks with it)

    def carries_finite_lr(self, model):
        return False

    def label(self, config, degree=None):
        return f"riccati N={config.settings.truncation.size}"

    def solve(self, problem, degree=None, size=None):
        refusal = outside_riccati(problem.config, problem.kappa)
        if refusal is not None:
            raise ModelError(refusal)
        start = time.perf_counter()
        nodes = size or problem.config.settings.truncation.size
        if nodes > MAX_NODES:
            raise ModelError(
                f"the riccati closure's size is the number of nodes of the fixed letter's Gauss rule, at most "
                f"{MAX_NODES} (it converges geometrically: 128 is exact to rounding on the reference cases), got "
                f"{nodes}"
            )
        student_law, fine_law, coarse_law = _laws(problem, nodes)
        words = list(dict.fromkeys(list(problem.words) + list(problem.source().truncation.program.words)))
        legs = {"fine": fine_law} | ({"coarse": coarse_law} if coarse_law is not None else {})
        runs = audited(
            problem.potential, lambda: {name: self._run(problem, student_law, law, words) for name, law in legs.items()}
        )
        fine = runs["fine"]
        reached = min(len(run.t) for run in runs.values())
        t = fine.t[:reached]
        series = {w: fine.series[w][:reached] for w in words}
        derived = derived_columns(problem, series, None)
        estimate, risk_estimate = self._estimates(problem, series, derived["risk"], runs.get("coarse"), reached)
        how = (
            f"{len(fine_law.nodes)} and {len(coarse_law.nodes)} nodes of the fixed letter's Gauss rule"
            if coarse_law is not None
            else "the fixed letter's exact spectrum"
        )
        if problem.factors is not None:  # finite matrices enter by their spectra only
            how += " (the given matrices' spectra, taken in generic position to each other)"
        message = fine.message
        if fine.status == "ok":
            message = (
                f"riccati closure (the exact d = ∞ flow, MATH.md §15) with {how}; estimate: the legs' difference plus "
                f"10 × the integration rtol — a bound; {message}"
            )
        risk_series, risk_window = risk_columns(t, risk_estimate)
        spectra = self._spectra(problem, fine.flow, fine.states[:reached], t) if problem.spectra else {}
        extra = {
            "method": "DOP853 on the riccati scalars",
            "estimate_legs": sorted(runs),
            "error_scale": ERROR_SCALE,
            "seconds": time.perf_counter() - start,
            **risk_window,
            **({"spectra": spectra} if spectra else {}),
        }
        result = self.result(
            problem, t, fine.status, message, series=series, derived=derived,
            valid_until=last_time_within(t, estimate, problem.integrate.validity_tol),
            size=len(fine_law.nodes),
            error_estimate=float(estimate[-1]), estimate_is_bound=True,
            error_series={"estimate": estimate.tolist(), **risk_series}, potential=problem.potential.accuracy_report(),
            extra=extra, config_hash=problem.config.digest, kappa=problem.kappa,
        )  # fmt: skip
        return reported(problem, result)

    def _estimates(self, problem, series, risk, coarse, reached):
        """(per-word estimate, the risk's relative estimate) over the times reached: the running maximum of the
        difference to the coarse leg (none for an exact rule), plus the floor 10 × rtol (relative to the risk at
        the start, for the risk)."""
        floor = 10 * RTOL
        estimate = np.full(reached, floor)
        risk_floor = floor * max(1.0, abs(risk[0])) / np.abs(risk)
        if coarse is None:
            return estimate, risk_floor
        gap = np.zeros(reached)
        coarse_series = {w: coarse.series[w][:reached] for w in series}
        for w, values in series.items():
            gap = np.maximum(gap, np.abs(values - coarse_series[w]) / np.maximum(1.0, np.abs(values)))
        coarse_risk = derived_columns(problem, coarse_series, None)["risk"]
        return np.maximum.accumulate(gap) + floor, relative_risk_estimate(risk, [coarse_risk]) + risk_floor

    def _flow(self, problem, student_law, fixed_law):
        (student,) = problem.model.trainable
        s, f = student - 1, 2 - student
        q_ff = fixed_law.weights @ fixed_law.nodes**2
        potential = problem.potential

        def gamma_of(q_ss, q_sf):
            Q = np.empty((2, 2))
            Q[s, s], Q[s, f], Q[f, s], Q[f, f] = q_ss, q_sf, q_sf, q_ff
            value = potential.at(Q, Q)
            Gamma = value.dQ1 + value.dQ2
            return Gamma[s, s], Gamma[s, f]

        return RiccatiFlow(student_law, fixed_law, gamma_of, problem.gamma)

    def _run(self, problem, student_law, fixed_law, words):
        """One `Leg`: the flow on the fixed letter's rule ``fixed_law``, every word read at every time reached."""
        flow = self._flow(problem, student_law, fixed_law)
        t, states, status, message = flow.solve(problem.times, rtol=RTOL)
        model = problem.model
        (student,) = model.trainable
        codes = [parse(w, model) for w in words]
        shapes = [(word_blocks(c, student - 1, 2 - student), len(c)) for c in codes]
        values = np.array([flow.words(ti, y, shapes) for ti, y in zip(t, states)]).reshape(len(t), len(words))
        series = {w: values[:, i] for i, w in enumerate(words)}
        return Leg(t, series, status, message, flow, states)

    def _spectra(self, problem, flow, states, times, points=400):
        """{letter: {"of", "nodes", "weights"}}: S(t)'s law at each time as the masses of ``points`` cells of the
        density of its Stieltjes transform (`spectral_cells`)."""
        (student,) = problem.model.trainable
        letter = f"S{student}"
        cells = [spectral_cells(flow, t, state, points) for t, state in zip(times, states)]
        return {
            letter: {"of": letter, "nodes": [c[0].tolist() for c in cells], "weights": [c[1].tolist() for c in cells]}
        }


#: Nodes of the fixed letter's rule the spectrum is read on (D interpolated to them from the state's nodes): the
#: Stieltjes transform at x + iη sees one node's atom wherever η is below the rule's spacing.
SPECTRUM_NODES = 4096


def spectral_cells(flow, t, state, points=400):
    """(midpoints, masses) of cells over [0, top] of S(t)'s spectrum: 60 cells geometric in x up to top/20 (a hard
    edge's density ∝ x^{−1/2}) and ``points`` equal ones above; each cell's mass its width times the density at its
    midpoint (`RiccatiFlow.density` on a `SPECTRUM_NODES` rule of the fixed letter, D interpolated to it — D is an
    entire function of λ; η = x/100 in the geometric cells, three node gaps in the equal ones), the first cell
    [0, 10⁻⁸ top] the rest of the unit mass (a rank-deficient student's atom at 0). ``top`` starts at twice
    (τ(S¹⁶))^{1/16} and grows by half while the density there, read at η = 10⁻⁹ top, is not nil."""
    fine = flow.fixed.refined(SPECTRUM_NODES)
    fine_state = np.concatenate([[state[0]], _interpolated(flow.fixed.nodes, state[1:], fine.nodes)])
    reader = RiccatiFlow(flow.student, fine, flow.gamma_of, flow.decay)
    top = 2 * flow.words(t, state, [((0,) * 16, 16)])[0] ** (1 / 16)
    for _ in range(8):
        if reader.density(t, fine_state, top * np.array([1.0, 2.0, 4.0]), 1e-9 * top)[0] * top < 1e-9:
            break
        top *= 1.5
    edges = np.concatenate([[0.0], np.geomspace(1e-8 * top, top / 20, 61), np.linspace(top / 20, top, points + 1)[1:]])
    middle, width = (edges[1:] + edges[:-1]) / 2, np.diff(edges)
    eta = np.where(middle > top / 20, 3 * fine.spacing, middle / 100)
    x = np.concatenate([middle[1:], top * np.array([1.5, 3.0])])
    density = reader.density(t, fine_state, x, np.concatenate([eta[1:], [1e-9 * top] * 2]))
    mass = np.clip(density[: len(middle) - 1], 0.0, None) * width[1:]
    return middle, np.concatenate([[max(0.0, 1.0 - mass.sum())], mass])


def _interpolated(nodes, values, points):
    """The polynomial through (nodes, values) at ``points`` (barycentric; the values when the nodes are the points)."""
    if len(nodes) == len(points) and np.array_equal(nodes, points):
        return values
    return BarycentricInterpolator(nodes, values)(points)
