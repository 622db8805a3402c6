"""Benchmark: the cost of a long horizon (issue 46, item 1 — target: T = 1000 at most 3× T = 10; not met).

The shipped `scaling_law` configuration (tied, mse(h1), power-law Σ with a = 1, student 0.5 I, teacher 1.2 Σ^{1/2};
the quadrature closure with Σ's edge layer) on a log-spaced output grid (``[integrate] grid = "log"``, 41 points)
to T = 10 and T = 100 in the same run, and the risk at T against the exact commuting solution
(`momentgen.oracles.aligned_tied_average`). The flow engine steps explicitly (DOP853): once a direction of Σ has
converged its rate 4λ²s* still bounds the step, so the cost grows about linearly in T (the ratio printed; T = 1000
would be about 10× T = 100). Run: ``python benchmarks/bench_horizon.py`` (part of ``make bench``; about a minute).
"""

import time

import numpy as np
from common import pick

from momentgen.closures import solve_with_closure
from momentgen.config import load_config
from momentgen.oracles import aligned_tied_average

HORIZONS = pick((10.0, 100.0), (0.5, 1.0))


def main():
    print("scaling_law, quadrature closure with Σ's edge layer, log grid of 41 points (same run)")
    seconds = {}
    for T in HORIZONS:
        config = load_config("scaling_law", integrate={"T": T, "points": pick(41, 5), "grid": "log"})
        start = time.perf_counter()
        result = solve_with_closure(config)
        seconds[T] = time.perf_counter() - start
        exact = aligned_tied_average(np.array([T]), "risk", 1.0, 0.5, 1.2, 0.5)[0]
        risk = result.derived["risk"][-1]
        print(f"  T = {T:6g}: {seconds[T]:6.1f} s, {result.extra['nfev']} evaluations, risk(T) {risk:.4e} "
              f"(exact {exact:.4e}, relative error {abs(risk / exact - 1):.1e})")  # fmt: skip
    first, last = HORIZONS
    ratio = seconds[last] / seconds[first]
    print(f"  cost ratio T = {last:g} / T = {first:g}: {ratio:.1f} (target for 1000 / 10: ≤ 3)")


if __name__ == "__main__":
    main()
