"""Benchmark: cost and accuracy of the closures (MATH.md §8) against exact d = ∞ solutions.

1. Exactly solvable tied case (σ = 1 Wishart student, teacher I, γ = 0) on [0, 1], against
   the closed form: quadrature n = 8…64, matrix model n = 200/400, zero closure M = 8.
2. Tied h2 case (student N(0, 0.05/d), teacher N(0, 0.5/d)) on [0, 2.5] through the escape,
   against the Riccati oracle: quadrature n = 3…8 (with its n vs n − 1 estimate), matrix
   model n = 300/800, finite-d matrix flow d = 300/1200 (seed 0). The ratio column divides
   the d = 1200 flow's seconds by each run's seconds (same machine, same run).
3. Fig. 1 (tied, L = 2, softmax-mse) through the whole learning curve (t ∈ [0, 20], p12 → 0.99)
   with the quadrature closure: budget 30 s.
4. Untied h1 (fig. 3 case) on τ ∈ [0, 0.4]: quadrature n = 1…3, estimate and cost.

Columns: closure, order, sup errors against the exact reference on q11, q12 and on t1, the
closure's own estimate (max over the reported words), seconds, seconds per unit of simulated
time.
Run: ``make bench`` (or ``python benchmarks/bench_closures.py [--quick]``).
"""

import pathlib

import numpy as np
from common import QUICK, pick, timed

from momentgen.compiler.potential import Potential
from momentgen.compiler.truncation import CoefficientSource
from momentgen.dynamics.closures import solve_with_closure
from momentgen.evidence.oracles import riccati_tied_moments, solvable_tied_moments
from momentgen.reference import initial_factors, matrix_flow
from momentgen.setting.config import load_config, parse_config

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORDS = ("S1", "S1 S1", "S1 S2")
SOLVABLE = {
    "model": {"kind": "tied", "K": 2, "trainable": [1]},
    "loss": {"builtin": "mse", "activation": "h1"},
    "init": {"1": {"kind": "gaussian"}, "2": {"kind": "identity", "c": 1.0}},
    "truncation": {"degree": 9, "observables": ["S1 S1", "S1 S2"]},
    "integrate": {"T": 1.0, "points": 41},
}


def row(closure, order, errors, estimate, seconds, T, ratio=None):
    error_text = "        —         —" if errors is None else f"{errors[0]:9.2e} {errors[1]:9.2e}"
    estimate_text = "" if estimate is None else f"{estimate:9.2e}"
    extra = "" if ratio is None else f"{ratio:9.0f}×"
    print(f"{closure:>14s} {order:>7} {error_text} {estimate_text:>9s} {seconds:9.2f} {seconds / T:9.2f} {extra}")


def header(extra=""):
    columns = ("err q", "err t1", "estimate", "seconds", "s/unit t")
    print(f"{'closure':>14s} {'order':>7s} " + " ".join(f"{c:>9s}" for c in columns) + f" {extra}")


def sup_error(series, exact):
    """Sup errors (on q11 and q12; on t1) — the degree-1 moment integrates the others' error."""
    error = {w: np.abs(np.asarray(series[w]) - exact[w][: len(series[w])]).max() for w in WORDS}
    return max(error["S1 S1"], error["S1 S2"]), error["S1"]


def solvable():
    print("1. exactly solvable tied case on [0, 1] (error vs the closed form)")
    header()
    config = parse_config(SOLVABLE)
    t = np.linspace(0, 1, 41)
    exact = solvable_tied_moments(t, 1.0, 1.0, 1.0)
    for n in pick((8, 16, 32, 64), (8,)):
        out, seconds = timed(solve_with_closure, config, "quadrature", degree=2 * n + 1)
        row("quadrature", n, sup_error(out.series, exact), out.error_estimate, seconds, 1.0)
    for n in pick((200,) if QUICK else (200, 400), (40,)):
        out, seconds = timed(solve_with_closure, config, "matrix-model", size=n)
        row("matrix-model", n, sup_error(out.series, exact), out.error_estimate, seconds, 1.0)
    out, seconds = timed(solve_with_closure, config, "zero", degree=8)
    print(
        f"{'zero':>14s} {'M=8':>7} status {out.status} at t = {out.t[-1]:.3f}, valid until "
        f"{out.valid_until:.3f} ({seconds:.2f} s)"
    )


def tied_h2():
    print("\n2. tied h2 case on [0, 2.5] through the escape (error vs the Riccati oracle)")
    T = pick(2.5, 0.5)
    config = load_config(ROOT / "examples/configs/fig2_tied_h2.toml").replace(integrate={"T": T, "points": 51})
    t = np.linspace(0, T, 51)
    potential = Potential(config.loss(), "tied")
    exact, oracle_seconds = timed(riccati_tied_moments, potential, config.inits()[1], config.inits()[2], t)
    print(f"Riccati oracle: {oracle_seconds:.2f} s")
    flows = {}
    for d in pick((300,) if QUICK else (300, 1200), (40,)):
        factors = initial_factors(config.model, config.inits(), d, seed=0)
        run, seconds = timed(matrix_flow, config.model, factors, CoefficientSource(config.model, potential), times=t,
                             words=list(WORDS))  # fmt: skip
        flows[d] = (sup_error(run.series, exact), seconds)  # (errors, seconds)
    baseline = flows[max(flows)][1]
    header(f"d={max(flows)} flow s / s")
    for n in pick((3, 4, 5, 6, 7) if QUICK else (3, 4, 5, 6, 7, 8), (3,)):
        out, seconds = timed(solve_with_closure, config, "quadrature", degree=2 * n + 1)
        row("quadrature", n, sup_error(out.series, exact), out.error_estimate, seconds, 2.5, baseline / seconds)
    for n in pick((300,) if QUICK else (300, 800), (40,)):
        out, seconds = timed(solve_with_closure, config, "matrix-model", size=n)
        row("matrix-model", n, sup_error(out.series, exact), out.error_estimate, seconds, 2.5, baseline / seconds)
    for d, (error, seconds) in flows.items():
        row("flow (seed 0)", f"d={d}", error, None, seconds, 2.5, baseline / seconds)


def fig1_learning_curve():
    print("\n3. fig. 1 (tied, L = 2, softmax-mse), quadrature closure over the whole learning curve t ∈ [0, 20]")
    config = load_config(ROOT / "examples/configs/fig1_tied_softmax.toml")
    config = config.replace(integrate={"T": pick(20.0, 1.0), "points": 81})
    for n in pick((6, 7) if QUICK else (6, 7, 8), (3,)):
        out, seconds = timed(solve_with_closure, config, "quadrature", degree=2 * n + 1)
        print(
            f"n = {n}: {seconds:6.2f} s (budget 30 s), p12(20) = {out.derived['p12'][-1]:.4f}, "
            f"estimate {out.error_estimate:.2e}, traciality defect ≤ "
            f"{max(out.error_series['traciality_defect']):.2e}"
        )


def untied_h1():
    print("\n4. untied h1 (fig. 3 case), slow phase τ ∈ [0, 0.4]: quadrature closure")
    config = load_config(ROOT / "examples/configs/fig3_untied_h1.toml").replace(integrate={"T": 0.4, "points": 21})
    header()
    for n in pick((1, 2) if QUICK else (1, 2, 3), (2,)):
        out, seconds = timed(solve_with_closure, config, "quadrature", degree=2 * n + 1)
        row("quadrature", n, None, out.error_estimate, seconds, 0.4)  # no exact reference: see the tests


if __name__ == "__main__":
    solvable()
    tied_h2()
    fig1_learning_curve()
    untied_h1()
