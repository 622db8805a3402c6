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

import sys
import time
from dataclasses import dataclass, field

import numpy as np
from scipy.integrate import BDF, DOP853, LSODA, RK45, Radau
from scipy.optimize import brentq

from .chebyshev import RKC
from .progress import STATUS_EVERY
from .trajectory import Trajectory

__all__ = ["SOLVERS", "DENSE_JACOBIAN_MAX", "Event", "States", "integrate"]

#: the stepping loop's solvers (``[integrate] method`` offers all but RKC, the matrix model's: `setting.config.METHODS`)
SOLVERS = {"LSODA": LSODA, "Radau": Radau, "BDF": BDF, "DOP853": DOP853, "RK45": RK45, "RKC": RKC}
DENSE_JACOBIAN_MAX = 3000  # LSODA keeps a dense n × n Jacobian (72 MB at this size): the largest state it gets
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


@dataclass(kw_only=True)
class States(Trajectory):
    """The stepping loop's `Trajectory`: ``y`` (n, dim), the state at each output time reached; ``t_stop``: the last
    time reached (past ``t[-1]`` when the run stopped between grid points); ``nfev``, ``steps``: the counts."""

    y: np.ndarray
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
    solver_options=None,
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
    solver_options : dict, optional; further keyword arguments of the solver (RKC's ``evaluation_eps``)

    Returns its `States` (never raises for an event or a recoverable error).
    """
    if method not in SOLVERS:
        raise ValueError(f"method must be one of {', '.join(SOLVERS)}, got {method!r}")
    options = {"rtol": rtol, "atol": atol, **(solver_options or {})}
    if jac is not None and method in ("Radau", "BDF"):
        options["jac"] = jac
    run = _Run(fun, np.asarray(y0, dtype=float), np.asarray(grid, dtype=float), SOLVERS[method], options)
    return run.go(events, on_step, tuple(recoverable), recoverable_status)


class _Run:
    """The state of one `integrate` call: the solver, the last accepted point, the outputs so far and the
    counters of failed trial stages, calm steps under a reduced step limit and stalled steps."""

    def __init__(self, fun, y0, grid, solver_class, options):
        self.fun, self.grid, self.solver_class, self.options = fun, grid, solver_class, options
        self.T = float(grid[-1])
        self.t, self.y = float(grid[0]), y0
        self.ts, self.ys, self.next_out = [grid[0]], [y0], 1
        self.nfev = self.steps = self.failures = self.total_failures = self.calm = self.stalled = 0
        self.limit, self.solver = np.inf, None
        self.began = self.reported = time.perf_counter()

    def report(self):
        """A status line on stderr every `STATUS_EVERY` seconds of a long run (a run of minutes is never silent);
        nothing for a run shorter than that. Times are on the integrator's axis."""
        now = time.perf_counter()
        if now - self.reported >= STATUS_EVERY:
            self.reported = now
            print(f"momentgen: integrating, t = {self.t:.4g} of {self.T:.4g} after {self.steps} steps, "
                  f"{now - self.began:.0f} s", file=sys.stderr, flush=True)  # fmt: skip

    def start(self, max_step=np.inf):
        return self.solver_class(self.fun, self.t, self.y, self.T, max_step=max_step, **self.options)

    def finish(self, status, message, t_stop):
        return States(
            np.array(self.ts),
            status,
            message,
            y=np.array(self.ys),
            t_stop=float(t_stop),
            nfev=self.nfev,
            steps=self.steps,
        )

    def go(self, events, on_step, recoverable, recoverable_status):
        self.events, self.on_step, self.recoverable, self.recoverable_status = (
            events, on_step, recoverable, recoverable_status,
        )  # fmt: skip
        if self.T <= self.t:
            return self.finish("ok", "reached the horizon", self.t)
        try:
            self.solver = self.start()
        except recoverable as error:
            return self.stopped(error, "at")
        while self.next_out < len(self.grid):
            try:  # a step, and the dense output it needs (its extra stages evaluate fun at new states too)
                with np.errstate(invalid="ignore", over="ignore"):  # a non-finite state is the check's below to stop
                    self.solver.step()
                if self.solver.status == "failed" or not np.all(np.isfinite(self.solver.y)):
                    return self.finish(
                        "failed", f"integrator failed after t = {self.t:.6g}: {self.solver.status}", self.t
                    )
                stop, outputs = _step_outputs(self.solver, events, self.grid, self.next_out, self.t)
            except recoverable as error:
                ended = self.retry(error)
                if ended is not None:
                    return ended
                continue
            ended = self.accept(stop, outputs)
            if ended is not None:
                return ended
            if self.solver.status == "finished" and self.next_out < len(self.grid):
                break
        self.nfev += self.solver.nfev
        return self.finish("ok", "reached the horizon", self.ts[-1])

    def stopped(self, error, when):
        status = getattr(error, "status", self.recoverable_status)
        return self.finish(status, f"stopped {when} t = {self.t:.6g}: {error}", self.t)

    def retry(self, error):
        """A trial stage met a recoverable error: restart from the last accepted point under a shorter step
        limit (None), or stop the run (its `States`) when that keeps failing."""
        solver = self.solver
        self.nfev += solver.nfev
        self.failures += 1
        self.total_failures += 1
        last = solver.step_size if solver.step_size and np.isfinite(solver.step_size) else (self.T - self.t) / 16
        self.limit = min(self.limit, last) / _SHRINK
        exhausted = self.failures > _RETRIES or self.total_failures > _FAILURES
        if exhausted or self.limit < 1e-12 * max(1.0, abs(self.T)):
            return self.stopped(error, "after")
        try:  # the new solver's first-step selection evaluates fun as well
            self.solver = self.start(self.limit)
        except self.recoverable as again:
            return self.stopped(again, "after")
        self.calm = 0
        return None

    def accept(self, stop, outputs):
        """Record an accepted step's outputs; the run's `States` when it ends here (an event, a stall),
        else None after advancing the explicit state (``on_step``) and relaxing a reduced step limit."""
        solver = self.solver
        t_new, y_new = solver.t, solver.y
        for tg, value in outputs:
            self.ts.append(tg)
            self.ys.append(value)
        self.next_out += len(outputs)
        self.steps += 1
        self.stalled = self.stalled + 1 if t_new - self.t < _TINY * (self.T - self.grid[0]) else 0
        if self.stalled >= _STALLED and stop is None:
            self.nfev += solver.nfev
            return self.finish(
                "failed",
                f"integrator stalled at t = {t_new:.6g}: {_STALLED} steps below "
                f"{_TINY:g} of the horizon (the right-hand side is singular there)",
                t_new,
            )
        if stop is not None:
            self.nfev += solver.nfev
            root, event = stop
            return self.finish(event.status, f"{event.status} at t = {root:.6g}: {event.why}", root)
        self.t, self.y = t_new, y_new
        self.failures = 0
        self.report()
        if self.on_step is not None:
            self.on_step(self.t, self.y)
        self.calm += 1
        self.relax()
        return None

    def relax(self):
        """Past the trouble (``_CALM`` accepted steps under a reduced limit): full steps again."""
        if self.limit == np.inf or self.calm < _CALM or self.solver.status != "running":
            return
        try:
            fresh = self.start()
        except self.recoverable:  # keep the short-step solver that got here: it is still valid
            return
        self.nfev += self.solver.nfev
        self.solver, self.limit = fresh, np.inf


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
