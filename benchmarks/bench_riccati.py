"""Benchmark: the exact riccati closure against the quadrature closure at degree 13 (issue 44: "it costs no more").

Two cases with a square Gaussian student and a Wishart teacher of width 1.5 d (the shipped `wishart_teacher`
configuration): its softmax loss (L = 2) over t ∈ [0, 1], and the issue's mse(h1) case (student scale 0.8) over
t ∈ [0, 3]. Each closure with its own legs (riccati: N = 128 and 64 nodes; quadrature: its edge-free legs at order
6), best of two runs in the same process (the first also builds the potential and compiles the kernels). The
quadrature closure is 41 % low on the mse case's risk at t = 1 and 94 % at t = 3; the riccati closure is exact (its
estimate, a bound, is below 1e-8). Columns: seconds, the ratio riccati / quadrature. Run:
``python benchmarks/bench_riccati.py`` (part of ``make bench``; about 20 s).
"""

import time

from common import pick

from momentgen.dynamics.closures import solve_with_closure
from momentgen.setting.config import load_config

HORIZONS = {"softmax, L = 2": pick(1.0, 0.1), "mse(h1), scale 0.8": pick(3.0, 0.1)}


def seconds(config, closure, **resolution):
    """Best of two wall times of one closure."""
    best = float("inf")
    for _ in range(2):
        start = time.perf_counter()
        solve_with_closure(config, closure, **resolution)
        best = min(best, time.perf_counter() - start)
    return best


def cases():
    softmax = load_config("wishart_teacher", integrate={"T": HORIZONS["softmax, L = 2"], "points": 21})
    mse = softmax.replace(
        model={"L": 1},
        loss={"builtin": "mse", "activation": "h1"},
        init={"1": {"scale": 0.8}},
        integrate={"T": HORIZONS["mse(h1), scale 0.8"], "points": 31},
    )
    return {"softmax, L = 2": softmax, "mse(h1), scale 0.8": mse}


def main():
    print("riccati (N = 128) vs quadrature (degree 13), Wishart teacher of width 1.5 d (same run)")
    for name, config in cases().items():
        exact = seconds(config, "riccati")
        other = seconds(config, "quadrature", degree=13)
        print(f"  {name:20s} t ≤ {HORIZONS[name]:g}: riccati {exact:6.2f} s, quadrature {other:6.2f} s, "
              f"ratio {exact / other:5.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
