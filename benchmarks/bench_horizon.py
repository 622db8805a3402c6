"""Benchmark: the cost of a long horizon (issue 46, item 1 — target: T = 1000 at most 3× T = 10).

The shipped `scaling_law` configuration (tied, mse(h1), power-law Σ with a = 1, student 0.5 I, teacher 1.2 Σ^{1/2};
the quadrature closure with Σ's edge layer) on a log-spaced output grid (``[integrate] grid = "log"``, 41 points) to
T = 10, 100 and 1000 in the same run, and the risk at T against the exact commuting solution
(`evidence.oracles.aligned_tied_average`). Every matrix of this state is diagonal in Σ's eigenbasis: the flow engine
integrates the diagonals by BDF (`laws.commuting`), whose implicit steps grow with the time scale of what still
moves. The baseline, measured in the same run: the same solve to T = 10 as matrices by DOP853 (the engine without
its commuting path), whose explicit steps stay bounded by the converged directions' rates 4λ²s* — its cost grew
about linearly in T (T = 100 was 5.6× T = 10). Run: ``python benchmarks/bench_horizon.py`` (part of ``make bench``;
about half a minute).
"""

import time
from unittest import mock

import numpy as np
from common import pick

from momentgen.dynamics.closures import solve_with_closure
from momentgen.evidence.oracles import aligned_tied_average
from momentgen.setting import flow
from momentgen.setting.config import load_config

HORIZONS = pick((10.0, 100.0, 1000.0), (0.05, 0.1))


def timed(T, dense=False):
    """(seconds, result) of the scaling_law solve to ``T``; ``dense``: without the commuting path."""
    config = load_config("scaling_law", integrate={"T": T, "points": pick(41, 5), "grid": "log"})
    layout = (lambda model, matrices, source, read: (matrices, None)) if dense else flow._diagonal_layout
    with mock.patch.object(flow, "_diagonal_layout", layout):
        start = time.perf_counter()
        result = solve_with_closure(config)
    return time.perf_counter() - start, result


def main():
    print("scaling_law, quadrature closure with Σ's edge layer, log grid of 41 points (same run)")
    seconds = {}
    for T in HORIZONS:
        seconds[T], result = timed(T)
        exact = aligned_tied_average(np.array([T]), "risk", 1.0, 0.5, 1.2, 0.5)[0]
        risk = result.derived["risk"][-1]
        print(f"  T = {T:6g}: {seconds[T]:6.2f} s ({result.extra['method']}), risk(T) {risk:.4e} "
              f"(exact {exact:.4e}, relative error {abs(risk / exact - 1):.1e})")  # fmt: skip
    first, last = HORIZONS[0], HORIZONS[-1]
    baseline, _ = timed(first, dense=True)
    print(f"  baseline T = {first:g} as matrices by DOP853: {baseline:.2f} s")
    print(f"  cost ratio T = {last:g} / T = {first:g}: {seconds[last] / seconds[first]:.2f} (target ≤ 3)")
    print(f"  T = {last:g} on the diagonals / T = {first:g} as matrices: {seconds[last] / baseline:.2f}")


if __name__ == "__main__":
    main()
