"""Benchmark: a Gaussian student against a power-law Σ over decades of t (issue 48 — target: the whole curve at no
more than 1/20 of the n = 400 matrix model's cost, ≤ 2 % relative on the risk over t ∈ [0.1, 50]).

Tied mse(h1), power-law Σ with a = 2, a Gaussian student, teacher 1.2 Σ^{1/2}, t ∈ [0.1, 50] on a log grid of 31
points, and the untied kind (fig. 3's h1, Gaussian student and teacher) against a = 0.5, τ ∈ [0.05, 5]: the
vouching whole-curve closure (the matrix-model ensemble `GENERIC_SIGMA_ENSEMBLE`: 8 flat-mixed draws of size 128
and 4 of size 64, stepped by Runge–Kutta–Chebyshev, in this process and one worker) against, in the same
run, the baseline — the matrix-model closure at its default n = 400 (with its n = 200 leg) stepped as before this
change, by DOP853 at rtol 1e-9 — and the same n = 400 closure stepped by Chebyshev, which isolates the stepper's
share: best of ``REPEAT`` each. The ensemble is timed cold — its worker process started afresh before each call,
what a fresh `momentgen solve` pays — and warm (a notebook's second solve); both are printed. On Linux each solve
forks its worker from the solving process (`momentgen.core.parallel`), so the two are the same; elsewhere the worker
is a fresh interpreter, kept between solves. Beside
the wall time of a cold call, its CPU time (this process and the worker, reaped after the call so that the system
counts it): the ensemble runs on two processes and the baseline on one, so the CPU ratio is what a busy machine pays.
The risks are compared with each other here; against the d → ∞ curve (own finite-d flows extrapolated in 1/d) in
``tests/end_to_end/test_slow.py``.
On the tied case the robust ensemble (8 draws of n = 256, within 2 % on every seed set measured) is timed cold too.
Run: ``python benchmarks/bench_generic_sigma.py`` (part of ``make bench``; about seven minutes).
"""

import resource
import time
from unittest import mock

import numpy as np
from common import pick
from joblib.executor import get_memmapping_executor

from momentgen.dynamics import closures
from momentgen.dynamics.closures import GENERIC_SIGMA_ENSEMBLE, ROBUST_SIGMA_ENSEMBLE, solve_with_closure
from momentgen.setting.config import load_config

REPEAT = pick(3, 1)
DOP853 = {"method": "DOP853", "rtol": 1e-9, "atol": 1e-11}  # the flow engine's own tolerances before issue 48


def generic_config():
    """The case of the issue, at full size (smoke: a short horizon and small sizes): the shipped scaling-law setting
    with a = 2 and a Gaussian student."""
    integrate = {"T": pick(50.0, 0.5), "points": pick(31, 5), "grid": "log", "log_first": pick(0.1, 0.05)}
    return load_config("scaling_law", data={"exponent": 2.0}, init={"1": {"kind": "gaussian"}},
                       integrate={**integrate, "validity_tol": 0.02})  # fmt: skip


def cpu_seconds():
    """CPU seconds of this process and of its children that have ended (user + system)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def timed(config, stepper=None, before=None, after=None, **resolution):
    """(wall seconds of each of ``REPEAT`` calls, result, CPU seconds of each) of the matrix-model closure at
    ``resolution``; ``stepper`` replaces its dense one; ``before()`` runs before each call, ``after()`` after it, both
    untimed (``after`` = `stop_the_worker`: the worker ends, so its CPU time is counted)."""
    seconds, result, cpu = [], None, []
    for _ in range(REPEAT):
        if before is not None:
            before()
        with mock.patch.object(closures, "CHEBYSHEV", stepper or closures.CHEBYSHEV):
            start, start_cpu = time.perf_counter(), cpu_seconds()
            result = solve_with_closure(config.replace(truncation={"closure": "matrix-model", **resolution}))
            seconds.append(time.perf_counter() - start)
        if after is not None:
            after()
        cpu.append(cpu_seconds() - start_cpu)
    return seconds, result, cpu


def stop_the_worker():
    """End the worker process the ensembles share where one is kept between solves (joblib's reusable executor:
    not on Linux, where each solve forks its own): the next solve starts one afresh."""
    get_memmapping_executor(1).shutdown(wait=True)


def untied_config():
    """The untied case (fig. 3's h1: Gaussian student and teacher, no mean) against a power-law Σ with a = 0.5,
    τ ∈ [0.05, 5] on a log grid (smoke: a short horizon)."""
    integrate = {"T": pick(5.0, 0.2), "points": pick(13, 5), "grid": "log", "log_first": 0.05, "validity_tol": 0.02}
    return load_config("fig3_untied_h1", data={"covariance": "power-law", "exponent": 0.5}, integrate=integrate)


def compare(title, config, size, ensemble, first, robust=None):
    """Print the baseline, the same closure by Chebyshev, and the ensemble cold and warm, with their ratios and risk
    gaps, for ``config`` (compared from time ``first`` on); with ``robust``, that larger ensemble cold too."""
    print(title)
    base, base_result, base_cpu = timed(config, DOP853, size=size, draws=1)
    base, base_cpu = min(base), min(base_cpu)
    print(f"  baseline: matrix model n = {size} (and n/2) by DOP853 at rtol 1e-9: {base:7.2f} s (CPU {base_cpu:.2f} s)")
    fast, fast_result, _ = timed(config, size=size, draws=1)
    fast = min(fast)
    print(f"  the same by Chebyshev (RKC):                          {fast:7.2f} s   ratio {base / fast:5.1f}")
    seconds, _, cpu = timed(config, before=stop_the_worker, after=stop_the_worker, **ensemble)
    cold, cold_cpu = min(seconds), min(cpu)
    whole, whole_result, _ = timed(config, **ensemble)  # a worker started by the first call, then reused
    warm = min(whole[1:] or whole)
    print(f"  vouching ensemble {ensemble['draws']} × n = {ensemble['size']} (+ n/2), RKC, here + 1 worker: "
          f"cold (worker started) {cold:6.2f} s, ratio {base / cold:5.1f} (target ≥ 20); CPU {cold_cpu:6.2f} s, "
          f"ratio {base_cpu / cold_cpu:5.1f}; warm {warm:6.2f} s, ratio {base / warm:5.1f}")  # fmt: skip
    if robust is not None:
        seconds, _, cpu = timed(config, before=stop_the_worker, after=stop_the_worker, **robust)
        cold, cold_cpu = min(seconds), min(cpu)
        print(
            f"  robust ensemble {robust['draws']} × n = {robust['size']} (+ n/2), cold: {cold:6.2f} s, "
            f"ratio {base / cold:5.1f}; CPU {cold_cpu:6.2f} s, ratio {base_cpu / cold_cpu:5.1f} (within 2 % on every "
            "seed set measured: tests/end_to_end/test_slow.py)"
        )
    risk = {name: np.asarray(r.derived["risk"]) for name, r in
            (("baseline", base_result), ("chebyshev", fast_result), ("ensemble", whole_result))}  # fmt: skip
    late = whole_result.t >= first
    gap = np.abs(risk["chebyshev"] / risk["baseline"] - 1)[late].max()
    spread = np.abs(risk["ensemble"] / risk["baseline"] - 1)[late].max()
    estimate = np.array(whole_result.error_series["risk_relative"], float)[late]
    print(f"  n = {size} RKC vs DOP853: max relative gap on the risk {gap:.1e} (the stepper's own error)")
    print(f"  ensemble vs the n = {size} baseline: max relative gap {spread:.2%} (one draw of n = {size} is itself "
          "noisy); its risk estimate "
          f"{estimate.min():.1%}–{estimate.max():.1%}, status {whole_result.status}")  # fmt: skip


def main():
    size = pick(400, 32)
    ensemble = pick(GENERIC_SIGMA_ENSEMBLE, {"size": 16, "draws": 4})
    robust = pick(ROBUST_SIGMA_ENSEMBLE, {"size": 32, "draws": 4})
    compare("tied mse(h1), power-law Σ a = 2, Gaussian student, teacher 1.2 Σ^1/2, t ∈ [0.1, 50], log grid (same run)",
            generic_config(), size, ensemble, pick(0.1, 0.05), robust)  # fmt: skip
    compare("untied h1 (fig. 3), power-law Σ a = 0.5, Gaussian student and teacher, τ ∈ [0.05, 5], log grid (same run)",
            untied_config(), size, ensemble, 0.05)  # fmt: skip


if __name__ == "__main__":
    main()
