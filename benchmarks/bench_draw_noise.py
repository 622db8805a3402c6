"""Benchmark: how much noise one draw of the matrix-model ensemble buys per CPU second, by size (issue 48).

Tied mse(h1), power-law Σ with a = 2, a Gaussian student, teacher 1.2 Σ^{1/2}, t ∈ [0.1, 50] on a log grid of 31
points (the case of ``bench_generic_sigma.py``): draws of the ensemble's own kind (`momentgen.dynamics.ensemble`:
flat rotations, Σ by quantile strata, a Latin hypercube over each 8 consecutive seeds, stepped by Chebyshev at the
draws' tolerance) at n = 64 / 128 / 256 / 512. For each size: the spread of one draw's risk about the draws' mean
(relative, at t ≈ 0.25 / 2 / 17 / 50), the CPU seconds of a draw, and their product at t = 50 — the variance of
an ensemble's mean times the CPU seconds its draws cost, whatever their number: the size that minimises it is the
cheapest way to a given noise. A spread measured on a hundred draws is itself uncertain by about 7 %, so the
product carries its bootstrap standard error (`BOOTSTRAP` resamples of the draws). Then the draws' means at t = 50
against the largest size's (the size bias, with its standard error), and the CPU seconds of draws that an ensemble
needs for a standard error of 0.6 % at t = 50 (3 of them within 2 %). The draws run in this process and one
worker; each draw's CPU time is its own process's.
Run: ``python benchmarks/bench_draw_noise.py`` (part of ``make bench``; about three minutes).
"""

import time

import numpy as np
from common import pick

from momentgen.core.parallel import run_tasks
from momentgen.dynamics.ensemble import _draw
from momentgen.dynamics.problem import Problem
from momentgen.setting.config import load_config

SIZES = pick({64: 128, 128: 128, 256: 128, 512: 16}, {8: 4, 16: 4})
LEG = 8  # the draws of one Latin hypercube (the ensemble's default leg)
TARGET = 0.006  # a standard error of 0.6 %: 3 of them within 2 %
BOOTSTRAP = 1000


def generic_config():
    """The case of the issue (smoke: a short horizon)."""
    integrate = {"T": pick(50.0, 0.5), "points": pick(31, 5), "grid": "log", "log_first": pick(0.1, 0.05)}
    return load_config("scaling_law", data={"exponent": 2.0}, init={"1": {"kind": "gaussian"}},
                       integrate={**integrate, "validity_tol": 0.02})  # fmt: skip


def timed_draw(raw, source, size, seed, means, times):
    """(the risk along one draw ``seed`` of ``size``, its CPU seconds): the ensemble's draw (`_draw`, the
    configuration ``raw`` from ``source``) in its leg's hypercube."""
    first = seed - seed % LEG
    start = time.process_time()
    *_, risk, _ = _draw(raw, source, size, seed, means, 0.0, times, (first, min(LEG, SIZES[size])))
    return np.asarray(risk), time.process_time() - start


def main():
    config = generic_config()
    problem = Problem.from_config(config)
    means = problem.fast_phase().get("m_star", problem.means)
    times = problem.output_times  # none beyond the grid: the draws report on it
    t = np.asarray(problem.nominal_times)
    columns = [int(np.argmin(np.abs(t - x))) for x in pick((0.25, 2.0, 17.0, 50.0), (0.05, 0.5))]
    draws = [(size, seed) for size, count in SIZES.items() for seed in range(count)]
    tasks = [(timed_draw, (config.raw, config.source, size, seed, means, times)) for size, seed in draws]
    tasks.sort(key=lambda task: -task[1][2])  # largest first: no process idles at the end
    results = run_tasks(tasks, n_jobs=2, progress=False, share=True)
    by_size = {size: [] for size in SIZES}
    for (_, (_, _, size, *_)), result in zip(tasks, results):
        by_size[size].append(result)
    print("tied mse(h1), power-law Σ a = 2, Gaussian student, teacher 1.2 Σ^1/2, t ∈ [0.1, 50]: one draw's noise")
    header = " / ".join(f"{t[j]:.3g}" for j in columns)
    print(f"  {'n':>4} {'draws':>5}  spread of one draw at t = {header} (%)   CPU s a draw   variance × CPU (%² s)")
    rng = np.random.default_rng(0)
    summary = {}
    for size, rows in by_size.items():
        risks = np.array([risk for risk, _ in rows])
        cpu = float(np.mean([seconds for _, seconds in rows]))
        spread = risks.std(axis=0, ddof=1) / risks.mean(axis=0)
        late = risks[:, columns[-1]]
        product = (100 * spread[columns[-1]]) ** 2 * cpu
        resampled = rng.choice(late, (BOOTSTRAP, len(late)))
        product_error = np.std((100 * resampled.std(axis=1, ddof=1) / resampled.mean(axis=1)) ** 2 * cpu)
        summary[size] = (late, product)
        cells = " / ".join(f"{100 * spread[j]:.2f}" for j in columns)
        print(f"  {size:>4} {len(rows):>5}  {cells:>40}   {cpu:12.2f}   {product:6.2f} ± {product_error:.2f}")
    largest = max(summary)
    reference = summary[largest][0]
    print(f"  the draws' mean at t = {t[columns[-1]]:.3g} against n = {largest}'s, and the CPU seconds of draws for a "
          f"standard error of {TARGET:.1%} there:")  # fmt: skip
    for size, (late, product) in summary.items():
        gap = late.mean() / reference.mean() - 1
        error = np.sqrt(late.var(ddof=1) / len(late) + reference.var(ddof=1) / len(reference)) / reference.mean()
        bias = "(the reference)" if size == largest else f"{gap:+.2%} ± {error:.2%}"
        print(f"    n = {size:>4}: {bias:>17};  {product / (100 * TARGET) ** 2:6.1f} CPU s")


if __name__ == "__main__":
    main()
