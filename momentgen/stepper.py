"""The one time-stepping loop: every ODE momentgen integrates goes through `integrate`.

It steps a scipy `OdeSolver` (LSODA, DOP853, RK45, Radau, BDF) over an output grid and reads
the grid points from each step's dense output, so that the caller keeps control between
steps: terminal `Event` s are located on the dense output (a stop never produces NaN or inf);
``on_step(t, y)`` runs after each accepted step (the explicit state a run carries, e.g. the
branch of the untied slaved mean, is advanced there and nowhere else, so the right-hand side
stays a pure function of the state); a `recoverable` error raised by a trial stage (a stage
that stepped outside the domain of the right-hand side) is retried from the last accepted
point with smaller steps before the run is stopped with the error's message.

The loop knows nothing of words, models or closures; times are on whatever axis the caller
uses (the hierarchy's t or τ).
"""

from dataclasses import dataclass, field

import numpy as np
from scipy.integrate import BDF, DOP853, LSODA, RK45, Radau
from scipy.optimize import brentq

__all__ = ["SOLVERS", "Event", "Trajectory", "integrate"]

SOLVERS = {"LSODA": LSODA, "DOP853": DOP853, "RK45": RK45, "Radau": Radau, "BDF": BDF}
_SHRINK = 4.0  # step reduction after a failed trial stage
_RETRIES = 40  # failed trial stages tolerated in a row before the run stops …
_FAILURES = 200  # … and in all (a run that keeps meeting the edge of the domain is stopped there)
_CALM = 8  # accepted steps under a reduced step limit before full steps are tried again
_TINY = 1e-10  # a step below this fraction of the horizon counts as stalled …
_STALLED = 200  # … and this many of them in a row stop the run (a singular right-hand side)


@dataclass
class Event:
    """A terminal condition: the run stops where ``function(t, y)`` first falls to ≤ 0.

    ``status`` names the stop (e.g. "blowup"); ``why`` says in words what happened.
    """

    function: callable
    status: str
    why: str


@dataclass
class Trajectory:
    """States at the output grid points reached, and how the run ended.

    ``t``: shape (n,), ``y``: shape (n, dim); ``status``: "ok", an event's status, "failed" or
    the status of a recoverable error that persisted; ``t_stop``: last time reached.
    """

    t: np.ndarray
    y: np.ndarray
    status: str
    message: str
    t_stop: float
    nfev: int = 0
    steps: int = 0
    info: dict = field(default_factory=dict)


def integrate(
    fun,
    y0,
    grid,
    *,
    method="DOP853",
    rtol=1e-8,
    atol=1e-10,
    jac=None,
    events=(),
    on_step=None,
    recoverable=(),
    recoverable_status="failed",
):
    """Integrate ``y' = fun(t, y)`` from ``y0`` at ``grid[0]`` and record ``y`` at every grid time.

    Parameters
    ----------
    fun : callable (t, y) -> array, shape (dim,)
    y0 : array_like, shape (dim,)
    grid : array_like, shape (n,), increasing; the output times
    method : one of `SOLVERS`; ``jac`` is passed to Radau and BDF only
    events : sequence of `Event`, checked after every accepted step
    on_step : callable (t, y), optional, run after every accepted step
    recoverable : exception classes that a trial stage may raise; the step is retried with
        smaller steps, and if that keeps failing the run stops with the error's own ``status``
        attribute (or ``recoverable_status``)

    Returns a `Trajectory` (never raises for an event or a recoverable error).
    """
    if method not in SOLVERS:
        raise ValueError(f"method must be one of {', '.join(SOLVERS)}, got {method!r}")
    grid = np.asarray(grid, dtype=float)
    y0 = np.asarray(y0, dtype=float)
    ts, ys = [grid[0]], [y0]
    T = float(grid[-1])
    options = {"rtol": rtol, "atol": atol}
    if jac is not None and method in ("Radau", "BDF"):
        options["jac"] = jac

    def start(t, y, max_step=np.inf):
        return SOLVERS[method](fun, t, y, T, max_step=max_step, **options)

    def finish(status, message, t_stop):
        return Trajectory(np.array(ts), np.array(ys), status, message, float(t_stop), nfev, steps)

    t, y, nfev, steps, failures, limit, calm, stalled = float(grid[0]), y0, 0, 0, 0, np.inf, 0, 0
    total_failures = 0
    if T <= t:
        return finish("ok", "reached the horizon", t)
    try:
        solver = start(t, y)
    except recoverable as error:
        return finish(getattr(error, "status", recoverable_status), f"stopped at t = {t:.6g}: {error}", t)
    next_out = 1
    while next_out < len(grid):
        try:  # a step, and the dense output it needs (its extra stages evaluate fun at new states too)
            solver.step()
            if solver.status == "failed" or not np.all(np.isfinite(solver.y)):
                return finish("failed", f"integrator failed after t = {t:.6g}: {solver.status}", t)
            t_new, y_new = solver.t, solver.y
            stop, outputs = _step_outputs(solver, events, grid, next_out, t)
        except recoverable as error:
            nfev += solver.nfev
            failures += 1
            total_failures += 1
            last = solver.step_size if solver.step_size and np.isfinite(solver.step_size) else (T - t) / 16
            limit = min(limit, last) / _SHRINK
            if failures > _RETRIES or total_failures > _FAILURES or limit < 1e-12 * max(1.0, abs(T)):
                return finish(getattr(error, "status", recoverable_status), f"stopped after t = {t:.6g}: {error}", t)
            try:  # the new solver's first-step selection evaluates fun as well
                solver = start(t, y, limit)
            except recoverable as again:
                return finish(getattr(again, "status", recoverable_status), f"stopped after t = {t:.6g}: {again}", t)
            calm = 0
            continue
        for tg, value in outputs:
            ts.append(tg)
            ys.append(value)
        next_out += len(outputs)
        steps += 1
        stalled = stalled + 1 if t_new - t < _TINY * (T - grid[0]) else 0
        if stalled >= _STALLED and stop is None:
            nfev += solver.nfev
            return finish(
                "failed",
                f"integrator stalled at t = {t_new:.6g}: {_STALLED} steps below "
                f"{_TINY:g} of the horizon (the right-hand side is singular there)",
                t_new,
            )
        if stop is not None:
            nfev += solver.nfev
            root, event = stop
            return finish(event.status, f"{event.status} at t = {root:.6g}: {event.why}", root)
        t, y = t_new, y_new
        failures = 0
        if on_step is not None:
            on_step(t, y)
        calm += 1
        if limit < np.inf and calm >= _CALM and solver.status == "running":  # past the trouble: full steps again
            try:
                fresh = start(t, y)
            except recoverable:  # keep the short-step solver that got here: it is still valid
                fresh = None
            if fresh is not None:
                nfev += solver.nfev
                solver, limit = fresh, np.inf
        if solver.status == "finished" and next_out < len(grid):
            break
    nfev += solver.nfev
    return finish("ok", "reached the horizon", ts[-1])


def _step_outputs(solver, events, grid, next_out, t):
    """After an accepted step from ``t``: (the earliest event crossing as (time, event) or None, the
    output points [(time, state)] of the grid that the step covers, up to that crossing)."""
    t_new, y_new, dense = solver.t, solver.y, None
    stop = None
    for event in events:
        if event.function(t_new, y_new) <= 0:
            dense = dense or solver.dense_output()
            root = _crossing(event.function, dense, t, t_new)
            if stop is None or root < stop[0]:
                stop = (root, event)
    end = t_new if stop is None else stop[0]
    outputs = []
    while next_out + len(outputs) < len(grid) and grid[next_out + len(outputs)] <= end:
        tg = grid[next_out + len(outputs)]
        if tg == t_new:
            outputs.append((tg, y_new))
        else:
            dense = dense or solver.dense_output()
            outputs.append((tg, dense(tg)))
    return stop, outputs


def _crossing(function, dense, a, b):
    """First time in (a, b] where ``function(t, dense(t))`` falls to ≤ 0 (it is > 0 at a)."""
    if function(a, dense(a)) <= 0:
        return a
    try:
        return float(brentq(lambda s: function(s, dense(s)), a, b, xtol=1e-12 * max(1.0, abs(b)), rtol=1e-12))
    except ValueError:
        return b
