"""Benchmark: online SGD against the GEMMs it must perform, and theory vs SGD cost.

1. One SGD step (tied, L = 2, softmax-mse, d = 400, B = 512: the fig. 1 setting) vs the three
   GEMMs of the same shapes it cannot avoid (X W₁, X W₂, Xᵀ(g P)), measured in the same run
   (budget: ≤ 1.5×); steps per second.
2. The theory curve (degree 8, with the M − 2 validity check) vs the SGD run it predicts, on
   the fig. 1 and fig. 4 configurations, at the configured d and horizon (inside the zero
   closure's short window).
3. The fig. 1 learning curve beyond that window with the quadrature closure (order 6, with
   its Gauss–Radau and n − 1 estimate), against the SGD run it predicts: measured on t ∈ [0, 0.5] (5 000
   steps, budget: ≥ 1000×), and for the whole curve t ∈ [0, 20] (200 000 steps) from the
   measured seconds per step of that run (the step cost does not change along a run).

Run: ``make bench`` (or ``python benchmarks/bench_sgd.py``).
"""

import pathlib
import time

import numpy as np
from common import best, pick

from momentgen.dynamics.closures import solve_with_closure
from momentgen.reference import SGDRun, simulate_config
from momentgen.setting.config import load_config
from momentgen.setting.matrices import sample_factors

ROOT = pathlib.Path(__file__).resolve().parents[1]


def step_vs_gemm():
    config = load_config(ROOT / "examples" / "configs" / "fig1_tied_softmax.toml")
    d, B, L = pick(400, 60), pick(512, 32), 2
    factors = sample_factors(config.model, config.inits(), d, seed=0)
    run = SGDRun(config.model, config.loss(), None, factors, 0.01, B, 0.0, np.random.default_rng(0))
    run.step()
    t_step = best(run.step)
    rng = np.random.default_rng(1)
    X, W1, W2, Y = rng.standard_normal((B * L, d)), rng.standard_normal((d, d)), rng.standard_normal((d, d)), None
    Y = rng.standard_normal((B * L, d))
    t_gemm = best(lambda: (X @ W1, X @ W2, X.T @ Y))
    t_tokens = best(lambda: rng.standard_normal((B, L, d)))
    print(
        f"1. SGD step, tied L=2 softmax-mse, d={d}, B={B}: {t_step * 1e3:.2f} ms = {1 / t_step:.0f} steps/s; "
        f"its 3 GEMMs {t_gemm * 1e3:.2f} ms; ratio {t_step / t_gemm:.2f} (budget 1.5: "
        f"{'ok' if t_step <= 1.5 * t_gemm else 'OVER'}); drawing the B·L·d tokens alone {t_tokens * 1e3:.2f} ms"
    )


def theory_vs_sgd(name, degree):
    config = load_config(ROOT / "examples" / "configs" / f"{name}.toml")
    integrate = config.settings.integrate
    config = config.replace(  # smoke: d = 40 has a step of 1e-3 on t, so a grid no finer than that
        sgd={"d": pick(config.settings.sgd.d, 40)},
        integrate={"T": pick(integrate.T, 0.01), "points": pick(integrate.points, 6)},
    )
    start = time.perf_counter()
    theory = solve_with_closure(config, "zero", degree)
    t_theory = time.perf_counter() - start
    start = time.perf_counter()
    run = simulate_config(config, seeds=[0], progress=False)
    t_sgd = time.perf_counter() - start
    print(
        f"   {name}: theory M={degree} (+ M-2) {t_theory:.2f} s [{theory.status}]; SGD d={run['d']} "
        f"B={run['batch']} {run['steps'][-1]} steps {t_sgd:.1f} s; SGD/theory = {t_sgd / t_theory:.0f}x"
    )


def learning_curve_vs_sgd():
    T, T_whole = pick(0.5, 0.02), pick(20.0, 0.5)
    config = load_config(ROOT / "examples" / "configs" / "fig1_tied_softmax.toml")
    config = config.replace(integrate={"T": T, "points": 11}, sgd={"d": pick(400, 40)})
    start = time.perf_counter()
    theory = solve_with_closure(config, "quadrature", degree=13)
    t_theory = time.perf_counter() - start
    start = time.perf_counter()
    run = simulate_config(config, seeds=[0], progress=False)
    t_sgd = time.perf_counter() - start
    steps = run["steps"][-1]
    print(
        f"3. fig. 1 on t in [0, {T}]: quadrature n=6 (+ its Radau variant and n=5) {t_theory:.2f} s [estimate "
        f"{theory.error_estimate:.1e}]; SGD d={run['d']} {steps} steps {t_sgd:.1f} s; SGD/theory = "
        f"{t_sgd / t_theory:.0f}x (budget 1000x: {'ok' if t_sgd >= 1000 * t_theory else 'UNDER'})"
    )
    config = config.replace(integrate={"T": T_whole, "points": 81})
    start = time.perf_counter()
    whole = solve_with_closure(config, "quadrature", degree=13)
    t_whole = time.perf_counter() - start
    whole_steps = round(T_whole * run["d"] / (4 * run["lr"]))
    t_sgd_whole = t_sgd / steps * whole_steps
    print(
        f"   whole curve t in [0, {T_whole:g}] (p12 -> {whole.derived['p12'][-1]:.3f}): quadrature {t_whole:.2f} s; "
        f"SGD {whole_steps} steps ~ {t_sgd_whole:.0f} s at the measured {t_sgd / steps * 1e3:.1f} ms/step; "
        f"SGD/theory ~ {t_sgd_whole / t_whole:.0f}x"
    )


if __name__ == "__main__":
    step_vs_gemm()
    print("2. theory vs the SGD run it predicts (same horizon)")
    theory_vs_sgd("fig4_linear", 8)
    theory_vs_sgd("fig1_tied_softmax", 8)
    learning_curve_vs_sgd()
