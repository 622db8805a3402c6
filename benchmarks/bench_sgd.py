"""Benchmark: online SGD against the GEMMs it must perform, and theory vs SGD cost.

1. One SGD step (tied, L = 2, softmax-mse, d = 400, B = 512: the fig. 1 setting) vs the three
   GEMMs of the same shapes it cannot avoid (X W₁, X W₂, Xᵀ(g P)), measured in the same run
   (budget: ≤ 1.5×); steps per second.
2. The theory curve (degree 8, with the M − 2 validity check) vs the SGD run it predicts, on
   the fig. 1 and fig. 4 configurations, at the configured d and horizon.

Run: ``make bench`` (or ``python benchmarks/bench_sgd.py``).
"""

from common import best  # noqa: I001  (sets one BLAS thread before numpy loads)

import pathlib  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from momentgen.config import load_config  # noqa: E402
from momentgen.initial import sample_factors  # noqa: E402
from momentgen.integrate import solve_config  # noqa: E402
from momentgen.simulate import _SGD, simulate_config  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]



def step_vs_gemm():
    config = load_config(ROOT / "examples" / "configs" / "fig1_tied_softmax.toml")
    d, B, L = 400, 512, 2
    factors = sample_factors(config.model, config.inits(), d, seed=0)
    run = _SGD(config.model, config.loss(), None, factors, 0.01, B, 0.0, np.random.default_rng(0))
    run.step()
    t_step = best(run.step)
    rng = np.random.default_rng(1)
    X, W1, W2, Y = rng.standard_normal((B * L, d)), rng.standard_normal((d, d)), rng.standard_normal((d, d)), None
    Y = rng.standard_normal((B * L, d))
    t_gemm = best(lambda: (X @ W1, X @ W2, X.T @ Y))
    t_tokens = best(lambda: rng.standard_normal((B, L, d)))
    print(f"1. SGD step, tied L=2 softmax-mse, d={d}, B={B}: {t_step * 1e3:.2f} ms = {1 / t_step:.0f} steps/s; "
          f"its 3 GEMMs {t_gemm * 1e3:.2f} ms; ratio {t_step / t_gemm:.2f} (budget 1.5: "
          f"{'ok' if t_step <= 1.5 * t_gemm else 'OVER'}); drawing the B·L·d tokens alone {t_tokens * 1e3:.2f} ms")  # fmt: skip


def theory_vs_sgd(name, degree):
    config = load_config(ROOT / "examples" / "configs" / f"{name}.toml")
    start = time.perf_counter()
    theory = solve_config(config, degree)
    t_theory = time.perf_counter() - start
    start = time.perf_counter()
    run = simulate_config(config, seeds=[0], progress=False)
    t_sgd = time.perf_counter() - start
    print(f"   {name}: theory M={degree} (+ M-2) {t_theory:.2f} s [{theory['status']}]; SGD d={run['d']} "
          f"B={run['batch']} {run['steps'][-1]} steps {t_sgd:.1f} s; SGD/theory = {t_sgd / t_theory:.0f}x")  # fmt: skip


if __name__ == "__main__":
    step_vs_gemm()
    print("2. theory vs the SGD run it predicts (same horizon)")
    theory_vs_sgd("fig4_linear", 8)
    theory_vs_sgd("fig1_tied_softmax", 8)
