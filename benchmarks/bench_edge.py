"""Benchmark: the risk's tail at a hard spectral edge, with and without the edge layer (MATH.md §12).

MATH.md §12's case: tied, mse(h1), a square Wishart student of scale 0.8 against a teacher 1.5 I, t ∈ [0, 5]
(exact risk 2.3 → 1.1e-6, each Marchenko–Pastur eigenvalue on its logistic flow, integrated by adaptive
quadrature — `evidence.oracles.solvable_tied_risk`). The quadrature closure at degrees 13 and 25 in the same run
twice: the plain Gauss / Gauss–Radau / n − 1 legs (the baseline, forced by switching `layered_index` off)
and the edge-adapted rule of `momentgen.laws.edge`. Columns: the risk's relative error at t = 0.5 / 1 / 1.5 / 2
/ 3 / 5, its largest relative estimate, ``risk_valid_until``, seconds, and the cost ratio layer/baseline.
Run: ``python benchmarks/bench_edge.py`` (part of ``make bench``; a few seconds).
"""

from unittest import mock

import numpy as np
from common import pick, timed

from momentgen.dynamics import closures
from momentgen.evidence.oracles import solvable_tied_risk
from momentgen.interface.api import solve
from momentgen.setting.config import parse_config

#: MATH.md §12's hard-edge case (tests/dynamics/test_risk.py's HARD_EDGE at the quadrature closure).
HARD_EDGE = {
    "model": {"kind": "tied", "K": 2, "trainable": [1]},
    "loss": {"builtin": "mse", "activation": "h1"},
    "init": {"1": {"kind": "gaussian", "scale": 0.8}, "2": {"kind": "identity", "c": 1.5}},
    "truncation": {"degree": 13, "observables": ["S1 S1", "S1 S2"], "closure": "quadrature"},
    "integrate": {"T": 5.0, "points": 26},
}

TIMES = pick((0.5, 1.0, 1.5, 2.0, 3.0, 5.0), (0.4, 1.0))


def run(degree, layered):
    horizon = pick({}, {"integrate": {"T": 1.0, "points": 6}})
    config = parse_config({**HARD_EDGE, "truncation": {**HARD_EDGE["truncation"], "degree": degree}, **horizon})
    if layered:
        return timed(solve, config)
    with mock.patch.object(closures, "layered_index", lambda *args: None):
        return timed(solve, config)


def main():
    print(f"{'degree':>6s} {'rule':>10s}  relative error of the risk at t = {' / '.join(map(str, TIMES))}")
    for degree in pick((13, 25), (7,)):
        seconds = {}
        for layered in (False, True):
            solve(parse_config({**HARD_EDGE, "integrate": {"T": 0.1, "points": 2}}))  # warm caches and kernels
            result, seconds[layered] = run(degree, layered)
            relative = np.abs(np.asarray(result.derived["risk"]) / solvable_tied_risk(result.t, 1.5, 0.8) - 1)
            picked = [relative[np.argmin(np.abs(result.t - s))] for s in TIMES]
            estimate = max((e for e in result.error_series["risk_relative"] if e is not None), default=None)
            print(
                f"{degree:6d} {'layer' if layered else 'baseline':>10s}  " + " / ".join(f"{e:.2g}" for e in picked)
                + f"   estimate ≤ {estimate:.2g}, risk_valid_until {result.extra['risk_valid_until']:g}, "
                f"{seconds[layered]:.2f} s"
            )  # fmt: skip
        print(f"{'':6s} {'ratio':>10s}  layer/baseline seconds: {seconds[True] / seconds[False]:.1f}")


if __name__ == "__main__":
    main()
