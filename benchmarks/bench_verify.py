"""Benchmark: `momentgen verify`'s wall time, seeds on one process (the previous layout) vs on the cores, and
within a budget.

The case of issue 26: tied L = 1, mse(h1), teacher I, the quadrature closure (n = 4) on t ∈ [0, 0.8],
verify's defaults (d = 100, 200; 8 seeds; 2000 drift steps; κ = ηd/B of the config, 0.0078). Both runs
in the same process, one BLAS thread each; the ratio is the speed-up of running the seeds' SGD runs and
their own-start closures on ``n_jobs = 2`` worker processes. The verdicts must be the same. Then the same case
with ``budget = 40`` s, below what it takes unbudgeted (issue 46, item 4: at budget 120 it once took 167 s, when
the budget covered SGD only): wall time / budget.

Run: ``make bench`` (or ``python benchmarks/bench_verify.py``).
"""

import time

from common import pick

from momentgen.evidence.verification import verify
from momentgen.setting.config import parse_config

CASE = {
    "model": {"kind": "tied", "K": 2, "trainable": [1]},
    "loss": {"builtin": "mse", "activation": "h1"},
    "init": {"1": {"kind": "gaussian"}, "2": {"kind": "identity", "c": 1.0}},
    "truncation": {"degree": 9, "observables": ["S1", "S1 S1"], "closure": "quadrature"},
    "integrate": {"T": pick(0.8, 0.05), "points": pick(17, 3)},
    "sgd": {"d": 100, "lr": 0.02, "batch": 256},
}


def timed(n_jobs, budget=None):
    options = {"dims": pick((100, 200), (40, 80)), "seeds": tuple(range(pick(8, 3))), "steps": pick(2000, 100)}
    start = time.perf_counter()
    result = verify(parse_config(CASE), progress=False, n_jobs=n_jobs, budget=budget, **options)
    return time.perf_counter() - start, result.verdict


if __name__ == "__main__":
    sequential, verdict_1 = timed(1)
    parallel, verdict_2 = timed(2)
    print(
        f"verify, tied h1 quadrature on t in [0, {CASE['integrate']['T']}]: one process {sequential:.1f} s "
        f"[{verdict_1}], two worker processes {parallel:.1f} s [{verdict_2}]; speed-up {sequential / parallel:.2f}x "
        f"(target: the whole verify under 120 s: {'ok' if parallel <= 120 else 'OVER'})"
    )
    budget = pick(40, 60)  # below the unbudgeted run (48 s): the plan must cut
    within, verdict_3 = timed(2, budget)
    print(f"verify with budget {budget} s: {within:.1f} s [{verdict_3}], {within / budget:.2f} of the budget "
          f"(target ≤ 1.1: {'ok' if within <= 1.1 * budget else 'OVER'})")  # fmt: skip
