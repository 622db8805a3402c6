"""RKC: a stabilised explicit Runge–Kutta–Chebyshev solver for stiff flows whose Jacobian has a real spectrum.

The matrix flows of the closures are gradient flows of the population risk: their Jacobians are (similar to)
symmetric, so their eigenvalues are real, and the stiff ones are the fast, already-converged directions (a power-law
Σ's top directions relax at rates 4λ²s* while its small ones move on the time scale of t itself). An explicit
solver's step is held below ~6 / rate however slowly the solution moves; an implicit one needs a Jacobian of the
state's size squared. RKC (Sommeijer, Shampine & Verwer 1998, second order, damping ε = 2/13) takes s function
evaluations per step and is stable on the real interval [−β(s), 0] with β(s) ≈ 0.65 s²: the number of evaluations
per step grows like the square root of (step × stiffness) rather than linearly, and the step follows the accuracy
wanted, not the fastest rate.

`RKC` is a scipy `OdeSolver` (step, dense output, ``nfev``), so `momentgen.core.stepper.integrate` runs it as it runs
the others (``method="RKC"``). The spectral radius of the Jacobian is estimated by the nonlinear power method (the
RKC code's ``rkcrho``: differences of the right-hand side along its dominant direction) every `RHO_EVERY` accepted
steps and after a rejected one, with a safety factor `RHO_SAFETY`. Dense output is cubic Hermite (exact to the
method's order). Not for oscillatory problems (complex eigenvalues of large modulus): the interval is real.
"""

import numba
import numpy as np
from scipy.integrate import DenseOutput, OdeSolver

__all__ = ["RKC", "power_radius", "stage_coefficients", "stability_bound"]

DAMPING = 2.0 / 13.0  # ε of RKC: keeps |R_s| below 1 inside [−β, 0] (undamped, it touches 1 at every extremum)
RHO_EVERY = 25  # accepted steps between estimates of the spectral radius
RHO_SAFETY = 1.2  # the radius used: this times the power method's estimate
_POWER_ITERATIONS = 50
_POWER_CONVERGED = 0.01  # relative change of the radius that ends the power iteration
_MAX_STAGES = 1000
_DOUBLE_EPS = float(np.finfo(float).eps)


def _chebyshev(s, w0):
    """T_j, T_j', T_j'' at w0 for j = 0…s."""
    T, dT, ddT = np.zeros(s + 1), np.zeros(s + 1), np.zeros(s + 1)
    T[0], T[1], dT[1] = 1.0, w0, 1.0
    for j in range(2, s + 1):
        T[j] = 2 * w0 * T[j - 1] - T[j - 2]
        dT[j] = 2 * T[j - 1] + 2 * w0 * dT[j - 1] - dT[j - 2]
        ddT[j] = 4 * dT[j - 1] + 2 * w0 * ddT[j - 1] - ddT[j - 2]
    return T, dT, ddT


def stage_coefficients(s):
    """The s-stage RKC scheme: arrays (μ, ν, μ̃, γ̃, c) indexed by stage j = 0…s (entries below 2 unused but μ̃₁,
    c₀ = 0, c₁ = μ̃₁), such that ``Y_j = (1 − μ_j − ν_j) Y_0 + μ_j Y_{j−1} + ν_j Y_{j−2} + μ̃_j h F(Y_{j−1})
    + γ̃_j h F(Y_0)`` and Y_j approximates y(t + c_j h)."""
    if s < 2:
        raise ValueError(f"RKC needs at least 2 stages, got {s}")
    w0 = 1.0 + DAMPING / s**2
    T, dT, ddT = _chebyshev(s, w0)
    w1 = dT[s] / ddT[s]
    b = np.zeros(s + 1)
    b[2:] = ddT[2:] / dT[2:] ** 2
    b[0] = b[1] = b[2]
    a = 1.0 - b * T
    mu, nu, mu_t, gamma_t, c = (np.zeros(s + 1) for _ in range(5))
    mu_t[1] = c[1] = b[1] * w1
    for j in range(2, s + 1):
        mu[j] = 2 * b[j] * w0 / b[j - 1]
        nu[j] = -b[j] / b[j - 2]
        mu_t[j] = 2 * b[j] * w1 / b[j - 1]
        gamma_t[j] = -a[j - 1] * mu_t[j]
        c[j] = mu[j] * c[j - 1] + nu[j] * c[j - 2] + mu_t[j] + gamma_t[j]
    return mu, nu, mu_t, gamma_t, c


def stability_bound(s):
    """β(s): the s-stage scheme is stable for h λ ∈ [−β(s), 0] (≈ 0.65 s²)."""
    w0 = 1.0 + DAMPING / s**2
    _, dT, ddT = _chebyshev(s, w0)
    return (w0 + 1.0) * ddT[s] / dT[s]


def power_radius(fun, y, f, direction=None, eps=_DOUBLE_EPS):
    """(ρ, v): the spectral radius of ∂fun/∂y at ``y`` (``f = fun(y)``) by the nonlinear power method (the RKC code's
    ``rkcrho``: differences of ``fun`` along its dominant direction, at most `_POWER_ITERATIONS` evaluations), and the
    dominant direction ``v`` found, to start the next estimate from (``direction``; default ``f``). ``eps``: the
    relative precision ``fun`` is evaluated in; the differences are taken at √eps of ``y``'s size (a velocity with
    single-precision products, eps ≈ 1.2e-7, is noise at double precision's √eps: on a 256 × 256 state with top
    rate 100 the radius came out as 45, and at n = 256 a draw took 811 evaluations instead of 557)."""
    y_norm = np.linalg.norm(y)
    v = f if direction is None else direction
    if not np.any(v):  # no direction yet (a state at rest): start along the ones
        v = np.ones_like(y)
    delta = np.sqrt(eps) * max(y_norm, 1.0)
    v = v * (delta / np.linalg.norm(v))
    rho = 0.0
    for _ in range(_POWER_ITERATIONS):
        difference = fun(y + v) - f
        size = np.linalg.norm(difference)
        if size == 0.0:
            break
        previous, rho = rho, size / delta
        v = difference * (delta / size)
        if abs(rho - previous) <= _POWER_CONVERGED * rho:
            break
    return rho, v


class RKC(OdeSolver):
    """Runge–Kutta–Chebyshev, second order, as a scipy `OdeSolver` (see the module's docstring).

    Options as scipy's explicit solvers: ``rtol``, ``atol``, ``max_step``, ``first_step``; and ``evaluation_eps``, the
    relative precision of ``fun``'s values (default double's; `power_radius` differences at its square root). The
    error estimate is RKC's ``0.8 (y_n − y_{n+1}) + 0.4 h (F_n + F_{n+1})`` in the RMS norm of ``atol + rtol |y|``;
    one extra evaluation per step (F_{n+1}, reused as the next step's F_n)."""

    def __init__(
        self,
        fun,
        t0,
        y0,
        t_bound,
        max_step=np.inf,
        rtol=1e-5,
        atol=1e-8,
        first_step=None,
        vectorized=False,
        evaluation_eps=_DOUBLE_EPS,
    ):
        super().__init__(fun, t0, y0, t_bound, vectorized)
        self.rtol, self.atol, self.max_step = float(rtol), float(atol), float(max_step)
        self.evaluation_eps = float(evaluation_eps)
        self.f = self.fun(self.t, self.y)
        self.y_old = self.f_old = None
        self.eigenvector, self.rho, self.since_rho = None, None, 0
        self.h_abs = self._first_step() if first_step is None else float(first_step)
        self.h_abs = min(self.h_abs, self.max_step)

    def _scale(self, y, other=None):
        size = np.abs(y) if other is None else np.maximum(np.abs(y), np.abs(other))
        return self.atol + self.rtol * size

    def _norm(self, x, scale):
        """RMS of ``x / scale`` over the components where ``x`` is not exactly 0: a state with an exact zero structure
        (a diagonal matrix held densely) would otherwise dilute its error over the zeros (by √(n² / n) for n × n)."""
        active = x != 0
        return float(np.sqrt(np.mean((x[active] / scale[active]) ** 2))) if active.any() else 0.0

    def _first_step(self):
        """RKC's first step: a tenth of the step at which F's change along itself would reach the tolerance."""
        scale = self._scale(self.y)
        f_norm = self._norm(self.f, scale)
        h = min(abs(self.t_bound - self.t), 0.1 / max(self.spectral_radius(), 1e-300))
        if f_norm > 0:
            h = min(h, 1e-2 / f_norm)
            probe = self.fun(self.t + h * self.direction, self.y + h * self.direction * self.f)
            second = self._norm(probe - self.f, scale) / h
            if second > 0:
                h = min(h, 0.5 * np.sqrt(2.0 / second))
        return max(h, 10 * np.abs(np.nextafter(self.t, self.t_bound) - self.t))

    def spectral_radius(self):
        """An upper estimate (×`RHO_SAFETY`) of the spectral radius of ∂F/∂y at the current point (`power_radius`);
        the dominant direction is kept to start the next estimate."""
        rho, self.eigenvector = power_radius(
            lambda y: self.fun(self.t, y), self.y, self.f, self.eigenvector, self.evaluation_eps
        )
        self.since_rho, self.rho = 0, RHO_SAFETY * rho
        return self.rho

    def _stages_for(self, h):
        """The fewest stages (≥ 2) whose stability interval covers h × the spectral radius."""
        need = h * self.rho
        s = max(2, int(np.ceil(np.sqrt(need / 0.65))))  # β(s) ≈ 0.65 s²: a start the loops correct
        while s > 2 and stability_bound(s - 1) >= need:
            s -= 1
        while stability_bound(s) < need and s < _MAX_STAGES:
            s += 1
        return s

    def _trial(self, h, s):
        """One step of size h with s stages from (t, y): (y_new, F(y_new))."""
        t, y0, f0 = self.t, self.y, self.f
        mu, nu, mu_t, gamma_t, c = stage_coefficients(s)
        previous, current = y0, y0 + mu_t[1] * h * f0
        for j in range(2, s + 1):
            moved = self.fun(t + c[j - 1] * h, current)
            weights = (1 - mu[j] - nu[j], mu[j], nu[j], mu_t[j] * h, gamma_t[j] * h)
            previous, current = current, _stage(weights, y0, current, previous, moved, f0)
        return current, self.fun(t + h, current)

    def _step_impl(self):
        if self.rho is None or self.since_rho >= RHO_EVERY:
            self.spectral_radius()
        min_step = 10 * np.abs(np.nextafter(self.t, self.direction * np.inf) - self.t)
        h = min(max(self.h_abs, min_step), self.max_step)
        while True:
            h = min(h, abs(self.t_bound - self.t))
            s = self._stages_for(h)
            y_new, f_new = self._trial(h * self.direction, s)
            scale = self._scale(self.y, y_new)
            estimate = 0.8 * (self.y - y_new) + 0.4 * h * self.direction * (self.f + f_new)
            error = self._norm(estimate, scale) if np.all(np.isfinite(y_new)) else np.inf
            if error <= 1.0:
                break
            if h <= min_step:
                return False, "RKC: the step fell below the smallest resolvable step"
            h *= max(0.1, 0.8 * error ** (-1 / 3)) if np.isfinite(error) else 0.1
            self.spectral_radius()
        factor = 10.0 if error == 0 else min(10.0, max(0.1, 0.8 * error ** (-1 / 3)))
        self.t_old, self.y_old, self.f_old = self.t, self.y, self.f
        self.t, self.y, self.f = self.t + h * self.direction, y_new, f_new
        self.h_abs, self.since_rho = h * factor, self.since_rho + 1
        return True, None

    def _dense_output_impl(self):
        return _Hermite(self.t_old, self.t, self.y_old, self.y, self.f_old, self.f)


@numba.njit(cache=True)
def _stage(weights, y0, current, previous, moved, f0):
    """``w₀ Y_0 + w₁ Y_{j−1} + w₂ Y_{j−2} + w₃ F(Y_{j−1}) + w₄ F(Y_0)``: an RKC stage in one pass over the state, in
    numpy's order of operations (numpy makes a temporary of the state's size for each of the nine operations: at
    n = 128 a stage cost about as much as a tenth of the flow's evaluation)."""
    out = np.empty_like(y0)
    a, b, c, d, e = weights
    for i in range(y0.size):
        out[i] = a * y0[i] + b * current[i] + c * previous[i] + d * moved[i] + e * f0[i]
    return out


class _Hermite(DenseOutput):
    """Cubic Hermite interpolation of a step from its end values and slopes."""

    def __init__(self, t_old, t, y_old, y, f_old, f):
        super().__init__(t_old, t)
        self.h, self.y_old, self.y, self.f_old, self.f = t - t_old, y_old, y, f_old, f

    def _call_impl(self, t):
        x = (np.asarray(t, dtype=float) - self.t_old) / self.h
        h00, h10 = 2 * x**3 - 3 * x**2 + 1, x**3 - 2 * x**2 + x
        h01, h11 = -2 * x**3 + 3 * x**2, x**3 - x**2
        if np.ndim(x) == 0:
            return h00 * self.y_old + h10 * self.h * self.f_old + h01 * self.y + h11 * self.h * self.f
        return (np.outer(self.y_old, h00) + np.outer(self.h * self.f_old, h10) + np.outer(self.y, h01)
                + np.outer(self.h * self.f, h11))  # fmt: skip
