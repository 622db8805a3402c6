"""Integrating a truncation, with an honest validity horizon (MATH.md §6).

`solve` is the one loop: it integrates a `momentgen.compiler.truncation.Truncation` over the output
grid with a scipy method and stops — never returning NaN or inf — when the state blows up
(a moment's ``|μ_α|^{1/|α|}`` exceeds ``blowup_factor`` times its initial largest value,
a lower bound of the spectral radius) or the order parameters leave the feasible set.
`validity_horizon` compares two truncation degrees: the zero closure at degree M is the
Taylor polynomial of the exact solution, so it is trustworthy only where degrees M and
M − 2 agree.
"""

import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..core.errors import STATE_ERRORS, MomentgenError
from ..core.stepper import DENSE_JACOBIAN_MAX, Event, States, integrate

__all__ = ["SolveResult", "solve", "validity_horizon", "last_time_within", "audited"]

METHODS_WITH_JACOBIAN = ("Radau", "BDF")


@dataclass(kw_only=True)
class SolveResult(States):
    """A truncation's solution: the stepping loop's `States` on the model's time axis, labelled.

    ``y``: shape (n, n_words), moments in program order (``words``); ``status``: "ok", "blowup",
    "left-feasible-set" or "failed"; ``t_stop``: last time reached (the trustworthy part
    of the trajectory is `validity_horizon`'s business, which compares two degrees).
    """

    words: list
    time_scale: str
    degree: int
    method: str
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)

    def series(self, word):
        return self.y[:, self.words.index(word)]


def _radius(y, lengths):
    return np.max(np.abs(y) ** (1.0 / lengths))


def _min_feasibility_eigenvalue(truncation, y):
    """Smallest eigenvalue of Q1 ± Q2 at ``y`` (the kind's order parameters: tied q, q; untied q⁽¹⁾, q⁽²⁾; …)."""
    Q1, Q2 = truncation.order_parameters(y)
    return min(np.linalg.eigvalsh(0.5 * (A + A.T)).min() for A in (Q1 + Q2, Q1 - Q2))


def solve(truncation, y0, T, points=51, method="LSODA", rtol=1e-8, atol=1e-10, blowup_factor=8.0, grid=None):
    """Integrate ``truncation`` from moments ``y0`` on ``[0, T]`` (the model's time axis).

    Parameters
    ----------
    truncation : momentgen.truncation.Truncation
    y0 : array_like, shape (n_words,)
    T : float
        Horizon on the model's time axis (its kind's ``time_scale``).
    points : int
        Uniform output grid on [0, T].
    method : "LSODA" | "Radau" | "BDF" | "DOP853" | "RK45"
        Radau and BDF receive the Jacobian `Truncation.jac`.
    grid : array_like, optional
        Output times (non-decreasing from 0) instead of the uniform grid of ``points`` on [0, T] — a
        schedule's integrated times.

    Returns a `SolveResult`; integration stops early (status "blowup" or
    "left-feasible-set") instead of producing non-finite numbers.
    """
    y0 = np.asarray(y0, dtype=float)
    program = truncation.program
    if y0.shape != program.packed.shape:
        raise MomentgenError(
            f"`y0` has shape {y0.shape}; this program has {len(program.packed)} words (degree {program.degree})"
        )
    lengths = program.lengths.astype(float)
    bound = blowup_factor * max(_radius(y0, lengths), 1e-12)
    scale = max(np.abs(y0[lengths == 2]).max(initial=0.0), 1e-12)

    events = [
        Event(
            lambda t, y: bound - _radius(y, lengths),
            "blowup",
            f"a moment exceeded the spectral bound {bound:.3g} (blowup_factor × initial radius); "
            "the truncation is not valid beyond",
        ),
        Event(
            lambda t, y: _min_feasibility_eigenvalue(truncation, y) + 1e-9 * scale,
            "left-feasible-set",
            "the order parameters left the PSD cone; the truncation is not valid beyond",
        ),
    ]
    events += [Event(*event) for event in truncation.mean.events(truncation, y0)]
    if method == "LSODA" and len(y0) > DENSE_JACOBIAN_MAX:
        warnings.warn(
            f"LSODA keeps a dense {len(y0)}×{len(y0)} Jacobian ({8 * len(y0) ** 2 / 2**30:.1f} GiB); "
            "integrating with DOP853 instead (pass method='Radau' or 'BDF' for the sparse Jacobian)",
            stacklevel=2,
        )
        method = "DOP853"
    grid = np.linspace(0.0, T, points) if grid is None else np.asarray(grid, dtype=float)
    start = time.perf_counter()
    run = _integrate_threading_state(truncation, y0, grid, method, rtol, atol, events)
    return SolveResult(
        run.t,
        run.status,
        run.message,
        y=run.y,
        t_stop=run.t_stop,
        nfev=run.nfev,
        steps=run.steps,
        words=list(program.words),
        time_scale=program.model.time_scale,
        degree=program.degree,
        method=method,
        seconds=time.perf_counter() - start,
    )


def _integrate_threading_state(truncation, y0, grid, method, rtol, atol, events):
    """`stepper.integrate` of ``truncation.rhs(t, y, state)`` with the run's `RunState` passed explicitly: it
    starts at ``truncation.state``, is advanced (`Truncation.advanced`) after each accepted step of a kind with a
    mean (a centred kind's never changes), and is left in ``truncation.state`` at the end."""
    state = [truncation.state]

    def advance(t, y):
        state[0] = truncation.advanced(y, state[0])

    try:
        return integrate(
            lambda t, y: truncation.rhs(t, y, state[0]),
            y0,
            grid,
            method=method,
            rtol=rtol,
            atol=atol,
            jac=(lambda t, y: truncation.jac(t, y, state[0])) if method in METHODS_WITH_JACOBIAN else None,
            events=events,
            on_step=advance if truncation.mean.has_mean else None,
            recoverable=STATE_ERRORS,
            recoverable_status="left-feasible-set",
        )
    finally:
        truncation.state = state[0]


def validity_horizon(fine, coarse, words, tol, closed=False):
    """First time where degrees M (``fine``) and M − 2 (``coarse``) differ by more than ``tol``
    (relative to max(1, |μ|)) on ``words``; never beyond either run's stop.

    A closed program (no dropped words, e.g. the direct model) is exact: its horizon is
    where it stopped. Without a coarser run (M − 2 < 2) nothing vouches for the truncation
    and the horizon is 0.
    """
    if closed:
        return float(fine.t_stop)
    if coarse is None:
        return 0.0
    n = min(len(fine.t), len(coarse.t))
    shared = [w for w in words if w in set(coarse.words)]  # degree M − 1, M words exist in the fine run only
    idx_f = [fine.words.index(w) for w in shared]
    idx_c = [coarse.words.index(w) for w in shared]
    diff = np.abs(fine.y[:n, idx_f] - coarse.y[:n, idx_c]) / np.maximum(1.0, np.abs(fine.y[:n, idx_f]))
    return float(min(last_time_within(fine.t[:n], diff.max(axis=1), tol), fine.t_stop, coarse.t_stop))


def last_time_within(t, difference, tol):
    """The last grid time before ``difference`` first exceeds ``tol`` (0 if it does at t[0])."""
    bad = np.flatnonzero(np.asarray(difference) > tol)
    if not bad.size:
        return float(t[-1])
    return float(t[bad[0] - 1]) if bad[0] > 0 else 0.0


def audited(potential, run, reset=None, attempts=3):
    """``run()`` with the potential frozen (a pure right-hand side), then `Potential.audit` of the
    far states it met; while the rule had to be refined there, ``reset()`` and run again. After
    ``attempts`` refinements the last result is returned with a warning and the accuracy report
    says ``met_rtol: False`` — never silently."""
    for _ in range(attempts):
        with potential.frozen():
            result = run()
        if potential.audit():
            return result
        if reset is not None:
            reset()
    potential.missed_rtol = True
    warnings.warn(
        f"the quadrature rule of {potential.loss.name!r} was refined {attempts} times along the path "
        "and still missed rtol at a state it met; raise [loss] rtol or shorten the horizon",
        stacklevel=3,
    )
    return result
