"""Benchmark: what the error estimate costs — `solve(..., estimate=False)` (the reported leg alone) against the solve
with its estimate, in the same run, best of ``REPEAT`` each, on four flow closures:

1. the stochastic matrix model of given d = 200 matrices (tied, teacher I, κ = 0.25, t ∈ [0, 0.3]): its estimate is
   a second noise seed;
2. the quadrature closure at degree 9 on the same case at κ = 0 (t ∈ [0, 1]): Gauss–Radau and order n − 1;
3. the matrix model n = 400 from the d = ∞ law (its n = 200 leg);
4. the generic-Σ ensemble (`GENERIC_SIGMA_ENSEMBLE`, tied, a = 2, Gaussian student, t ∈ [0.1, 50]): its 4 draws at
   n/2 (the worker process warm: the first call starts it, untimed).

Each line: seconds with and without, their ratio, and whether the curves are the same to the last bit (they must be:
the reported leg does not depend on the others).
Run: ``python benchmarks/bench_estimate.py`` (part of ``make bench``; about a minute).
"""

import time

import numpy as np
from bench_generic_sigma import generic_config
from common import pick

from momentgen.dynamics.closures import GENERIC_SIGMA_ENSEMBLE, solve_with_closure
from momentgen.reference import initial_factors
from momentgen.setting.config import parse_config

REPEAT = pick(3, 1)
DEGREE = pick(9, 5)
SOLVABLE = {
    "model": {"kind": "tied", "K": 2, "trainable": [1]},
    "loss": {"builtin": "mse", "activation": "h1"},
    "init": {"1": {"kind": "gaussian"}, "2": {"kind": "identity", "c": 1.0}},
    "truncation": {"degree": DEGREE, "observables": ["S1 S1", "S1 S2"]},
    "integrate": {"T": pick(1.0, 0.05), "points": 41},
}


def cases():
    """{name: function of ``estimate`` → Result}."""
    d = pick(200, 40)
    noisy = {**SOLVABLE, "integrate": {"T": pick(0.3, 0.03), "points": 7, "finite_lr": True},
             "sgd": {"d": d, "lr": 0.25 * 64 / d, "batch": 64}}  # fmt: skip
    noisy = parse_config(noisy)
    factors = initial_factors(noisy.model, noisy.inits(), d, 0)
    plain = parse_config(SOLVABLE)
    ensemble = pick(GENERIC_SIGMA_ENSEMBLE, {"size": 16, "draws": 4})
    generic = generic_config().replace(truncation={"closure": "matrix-model", **ensemble})
    return {
        f"stochastic model of given d = {d} matrices": lambda e: solve_with_closure(
            noisy, "matrix-model", factors=factors, kappa=0.25, estimate=e
        ),
        f"quadrature closure, degree {DEGREE}": lambda e: solve_with_closure(
            plain, "quadrature", degree=DEGREE, estimate=e
        ),
        f"matrix model n = {pick(400, 32)} from the law": lambda e: solve_with_closure(
            plain, "matrix-model", size=pick(400, 32), estimate=e
        ),
        "generic-Sigma ensemble": lambda e: solve_with_closure(generic, estimate=e),
    }


def best(function, estimate):
    """(shortest seconds of ``REPEAT`` calls ``function(estimate)``, the last result)."""
    seconds, result = [], None
    for _ in range(REPEAT):
        start = time.perf_counter()
        result = function(estimate)
        seconds.append(time.perf_counter() - start)
    return min(seconds), result


if __name__ == "__main__":
    print("solve with its estimate vs estimate=False (the reported leg alone), best of", REPEAT)
    for name, run in cases().items():
        run(False)  # warm: compiled potential, a worker process
        checked, with_estimate = best(run, True)
        alone, without = best(run, False)
        same = all(np.array_equal(with_estimate.series[w], without.series[w]) for w in with_estimate.series)
        print(f"  {name:44s} {checked:7.2f} s  {alone:7.2f} s  ratio {alone / checked:5.2f}  same curve: {same}")
