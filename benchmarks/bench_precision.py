"""Benchmark: an ensemble draw's velocity in single against double precision (issue 48).

`momentgen.setting.flow.CHEBYSHEV_DRAWS` evaluates a draw's velocity — its letters, its matrix products, its moments —
in single precision, the RKC stepper's arithmetic in double. Here the same draws (the ensemble's own: flat rotations,
Σ by quantile strata in a leg's Latin hypercube) are run with that stepper and with the same stepper in double
precision, alternately (which goes first alternates too, so the machine's drift falls on both), in this process:
the CPU seconds of a draw in each precision, their ratio (the median over the draws), and the largest relative gap
between the two risks at any output time — against the draws' step error (about 7e-4 on the tied case), not their
noise. Cases: tied mse(h1) against a power-law Σ (a = 2, t ∈ [0.1, 50]) and the untied fig. 3 h1 against a = 0.5
(τ ∈ [0.05, 5]), the cases of ``bench_generic_sigma.py``.
Run: ``python benchmarks/bench_precision.py`` (part of ``make bench``; about a minute).
"""

import time

import numpy as np
from bench_generic_sigma import generic_config, untied_config
from common import pick

from momentgen.dynamics.ensemble import draw_factors
from momentgen.dynamics.problem import Problem
from momentgen.dynamics.risk import theory_risk
from momentgen.setting.flow import CHEBYSHEV_DRAWS, DOUBLE

CASES = {
    "tied a = 2, t ≤ 50": (generic_config, pick({128: 4, 256: 4, 512: 2}, {16: 1})),
    "untied a = 0.5, τ ≤ 5": (untied_config, pick({128: 4, 256: 4}, {16: 1})),
}
LEG = 8  # the draws of one Latin hypercube (the ensemble's default leg)


def timed_risk(problem, means, size, seed, stepper):
    """(the risk along the draw ``seed`` of ``size`` moved by ``stepper``, the CPU seconds of its flow)."""
    factors, sigma, _ = draw_factors(problem, size, seed, (0, LEG))
    start = time.process_time()
    run = problem.law_run(factors, means, seed, stepper=stepper, sigma=sigma)
    seconds = time.process_time() - start
    return np.asarray(theory_risk(problem, run.series, means)), seconds


def compare(problem, means, size, draws):
    """(CPU seconds a draw in double, in single, the median ratio, the largest relative risk gap) over ``draws``."""
    double = {**CHEBYSHEV_DRAWS, "precision": DOUBLE}
    rows = []
    for seed in range(draws):
        order = (double, CHEBYSHEV_DRAWS) if seed % 2 == 0 else (CHEBYSHEV_DRAWS, double)
        results = {id(stepper): timed_risk(problem, means, size, seed, stepper) for stepper in order}
        (risk_d, cpu_d), (risk_s, cpu_s) = results[id(double)], results[id(CHEBYSHEV_DRAWS)]
        rows.append((cpu_d, cpu_s, float(np.max(np.abs(risk_s / risk_d - 1)))))
    cpu_d, cpu_s, gaps = (np.array(column) for column in zip(*rows))
    return cpu_d.mean(), cpu_s.mean(), float(np.median(cpu_d / cpu_s)), gaps.max()


def main():
    print("an ensemble draw's velocity in single vs double precision (same draws, alternated, this process)")
    print(f"  {'case':<22} {'n':>4} {'draws':>5}   CPU s a draw: double   single   ratio   largest risk gap")
    for name, (config, sizes) in CASES.items():
        problem = Problem.from_config(config())
        means = problem.fast_phase().get("m_star", problem.means)
        timed_risk(problem, means, 16, 0, CHEBYSHEV_DRAWS)  # compile and warm before timing
        for size, draws in sizes.items():
            double, single, ratio, gap = compare(problem, means, size, draws)
            print(f"  {name:<22} {size:>4} {draws:>5}   {double:19.3f} {single:8.3f} {ratio:6.2f}×   {gap:.1e}")


if __name__ == "__main__":
    main()
