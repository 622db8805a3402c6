"""The Runge–Kutta–Chebyshev stepper (`core.chebyshev`): its scheme is second order and stable on the real interval it
claims, its steps follow the accuracy asked for on a stiff problem with a real spectrum, and `integrate` runs it."""

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from momentgen.core.chebyshev import RKC, power_radius, stability_bound, stage_coefficients
from momentgen.core.stepper import integrate


def _amplification(s, z):
    """The stability polynomial R_s(z): one step of the s-stage scheme on y' = λy from y = 1, z = hλ."""
    mu, nu, mu_t, gamma_t, _ = stage_coefficients(s)
    previous, current = 1.0, 1.0 + mu_t[1] * z
    for j in range(2, s + 1):
        previous, current = (
            current,
            (1 - mu[j] - nu[j]) + mu[j] * current + nu[j] * previous + mu_t[j] * z * current + gamma_t[j] * z,
        )
    return current


@pytest.mark.parametrize("s", [2, 3, 7, 20])
def test_the_scheme_is_second_order_and_stable_on_its_real_interval(s):
    """R_s(z) = 1 + z + z²/2 + O(z³) (second order: at z = 1e-3 the remainder is ≤ z³ — measured ≤ 2e-10 against
    z³ = 1e-9 — while dropping the z² term would leave 5e-7); |R_s| ≤ 1 on [−β(s), 0] (2 001 points; the damping ε
    = 2/13 keeps it ≤ 1 − ε/… inside), with β(s) ≥ 0.49 s² (≈ 0.65 s² for large s: measured 0.491 / 0.581 / 0.638 /
    0.651 s² at s = 2 / 3 / 7 / 20); the last stage sits at the step's end (c_s = 1)."""
    z = 1e-3
    assert abs(_amplification(s, z) - (1 + z + z**2 / 2)) <= z**3
    beta = stability_bound(s)
    assert beta >= 0.49 * s**2
    assert max(abs(_amplification(s, -x)) for x in np.linspace(0, beta, 2001)) <= 1 + 1e-12
    assert stage_coefficients(s)[4][s] == pytest.approx(1.0, abs=1e-12)


def _stiff_linear(rates):
    """y' = −Λ y + sin(t) 1 in the basis of a random rotation (a dense, symmetric, stiff Jacobian), with its exact
    solution from the diagonalised form."""
    rng = np.random.default_rng(3)
    rotation, _ = np.linalg.qr(rng.standard_normal((len(rates), len(rates))))
    A = rotation @ np.diag(rates) @ rotation.T
    forcing = rotation.T @ np.ones(len(rates))

    def exact(t, y0):
        z0 = rotation.T @ y0
        # z' = −λ z + f sin t: z = e^{−λt} z0 + f (λ sin t − cos t + e^{−λt}) / (1 + λ²)
        z = np.exp(-rates * t) * z0 + forcing * (rates * np.sin(t) - np.cos(t) + np.exp(-rates * t)) / (1 + rates**2)
        return rotation @ z

    return (lambda t, y: -A @ y + np.sin(t) * np.ones(len(rates))), exact


def test_a_stiff_problem_is_stepped_by_accuracy_not_by_its_fastest_rate():
    """Rates from 1e-2 to 1e3 (a stiffness ratio 1e5, dense Jacobian), t ∈ [0, 10]: the error against the exact
    solution falls with the tolerance (measured 1.7e-3 / 8.2e-5 / 4.3e-6 at rtol 1e-3 / 1e-5 / 1e-7; tolerances 3×
    those), and at rtol 1e-5 RKC needs 3 700 evaluations where DOP853 at the same tolerance needs 18 900 (its step
    held by the rate 1e3: asserted ≥ 4× fewer)."""
    rates = np.logspace(-2, 3, 40)
    fun, exact = _stiff_linear(rates)
    y0 = np.ones(len(rates))
    truth = exact(10.0, y0)
    measured = {1e-3: 1.7e-3, 1e-5: 8.2e-5, 1e-7: 4.3e-6}
    for rtol, error in measured.items():
        run = solve_ivp(fun, (0, 10), y0, method=RKC, rtol=rtol, atol=rtol * 1e-3)
        assert run.success
        assert np.abs(run.y[:, -1] - truth).max() <= 3 * error
    chebyshev = solve_ivp(fun, (0, 10), y0, method=RKC, rtol=1e-5, atol=1e-8)
    explicit = solve_ivp(fun, (0, 10), y0, method="DOP853", rtol=1e-5, atol=1e-8)
    assert 4 * chebyshev.nfev <= explicit.nfev


def test_integrate_runs_it_on_a_grid_with_dense_output_between_steps():
    """Through the one stepping loop (`method="RKC"`): every grid time is reported, those inside a step by its cubic
    Hermite dense output — against the exact solution at rtol 1e-7: measured ≤ 2.1e-6 on 21 grid times (tolerance
    6e-6), and the counts are reported."""
    rates = np.logspace(-1, 2, 12)
    fun, exact = _stiff_linear(rates)
    y0 = np.linspace(0.5, 1.5, len(rates))
    grid = np.linspace(0, 5, 21)
    run = integrate(fun, y0, grid, method="RKC", rtol=1e-7, atol=1e-10)
    assert run.status == "ok" and len(run.t) == len(grid)
    error = max(np.abs(y - exact(t, y0)).max() for t, y in zip(run.t, run.y))
    assert error <= 6e-6, error
    assert run.nfev > 0 and run.steps > 0


def test_the_spectral_radius_of_a_single_precision_velocity_is_measured_at_its_own_precision():
    """y' = −diag(rates) y evaluated in single precision on a state of 256 × 256 entries of size 1/16 (an ensemble
    draw's W at n = 256), top rate 100 apart from the rest (≤ 50): `power_radius` differencing at single
    precision's √eps finds 99.90 (asserted within 0.5 %); at double's √eps each difference is below the state's
    rounding and it found 45.4 — a radius under half the true one, so RKC's steps would be unstable (at n = 256 a
    draw took 811 evaluations instead of 557 before the stepper was told the precision). Asserted: off by more than
    10 % there."""
    rng = np.random.default_rng(0)
    rates = np.r_[np.linspace(1, 50, 256**2 - 1), 100].astype(np.float32)

    def single(x):
        return (-(rates * x.astype(np.float32))).astype(float)

    y = rng.standard_normal(len(rates)) / 16
    rho, _ = power_radius(single, y, single(y), eps=np.finfo(np.float32).eps)
    assert abs(rho / 100 - 1) <= 5e-3
    rho, _ = power_radius(single, y, single(y))
    assert abs(rho / 100 - 1) > 0.1
