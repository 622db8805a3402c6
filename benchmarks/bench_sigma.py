"""Benchmark: the matrix-model closure with a power-law Σ against its isotropic cost (issue 46, item 2).

The shipped `scaling_law` case (tied, mse(h1), power-law Σ with a = 1, student 0.5 I, teacher 1.2 Σ^{1/2}) at the
matrix-model closure, n = 400, t ∈ [0, 5], three ways in the same run: Σ as the diagonal letter it is in its eigenbasis
(products with it are scalings, `models.base.diagonal_of`), the same with every product dense (the baseline, before:
`diagonal_of` switched off), and the isotropic configuration of the same shape (Σ = I, teacher 1.2 I). Before, the
dense Σ products — the Σ-weighted order parameters μ(Σ S Σ S) of degree 4–5 read at every step, and Σ X Σ in the
velocity — cost O(n³) each: that is where the 6× of issue 46 went. Columns: seconds (best of 2), the ratio to the
isotropic run. All three as matrices (the flow engine's commuting path off: this case commutes, so by default its
diagonals are integrated by BDF — the fourth row, `momentgen.laws.commuting`). Run: ``python benchmarks/bench_sigma.py``
(part of ``make bench``; about two minutes).

Second: the untied matrix model at n = 200 (student N(0, 0.25/d), teacher with mean 1; power-law Σ with a = 0.5)
over τ ∈ [0, 1], against its isotropic twin — issue 46 asked for it within 20 s (it took 74 s). Its 90 order
parameters are words of up to five letters, three of them dense: `setting.matrices.trace_moments` cuts each word
where its halves are shared by the others (28 products of d³ a call became 14; 32 s before).
"""

import time
from unittest import mock

from common import pick

from momentgen.dynamics.closures import solve_with_closure
from momentgen.models import base
from momentgen.setting import flow
from momentgen.setting.config import load_config, parse_config

SIZE = pick(400, 40)
TRUNCATION = {"closure": "matrix-model", "size": SIZE, "observables": ["S1", "S1 S1", "S1 S2"]}
HORIZON = pick({"T": 5.0}, {"T": 0.5, "points": 6})
UNTIED = {
    "model": {"kind": "untied", "K": 2, "trainable": [1]},
    "loss": {"builtin": "mse", "activation": "h1"},
    "init": {"1": {"kind": "gaussian", "scale": 0.5}, "2": {"kind": "gaussian", "mean": 1.0}},
    "truncation": {"degree": 5, "closure": "matrix-model", "size": pick(200, 30), "observables": ["M1 M2^T", "M1 M2"]},
    "integrate": {"T": pick(1.0, 0.1), "points": 11},
}


def as_matrices(model, dense, source, read):
    """The flow engine without its commuting path."""
    return dense, None


def seconds(config, dense=False, diagonals=False):
    """Best of two wall times of the closure (the first run also warms the kernels); ``dense``: every product with Σ
    dense; ``diagonals``: the commuting path on."""
    best = float("inf")
    for _ in range(2):
        with (
            mock.patch.object(base, "diagonal_of", (lambda matrix: None) if dense else base.diagonal_of),
            mock.patch.object(flow, "_diagonal_layout", flow._diagonal_layout if diagonals else as_matrices),
        ):
            start = time.perf_counter()
            solve_with_closure(config)
            best = min(best, time.perf_counter() - start)
    return best


def main():
    sigma = load_config("scaling_law", truncation=TRUNCATION, integrate=HORIZON)
    isotropic = load_config(
        "scaling_law",
        data={"covariance": "isotropic"},
        init={2: {"kind": "identity", "c": 1.2, "exponent": 1.0}},
        truncation=TRUNCATION,
        integrate=HORIZON,
    )
    times = {
        "isotropic": seconds(isotropic),
        "power-law Σ, diagonal letter": seconds(sigma),
        "power-law Σ, dense products (before)": seconds(sigma, dense=True),
        "power-law Σ, on its diagonals (BDF)": seconds(sigma, diagonals=True),
    }
    print(f"matrix-model closure, n = {SIZE}, scaling_law over t ∈ [0, {HORIZON['T']:g}] (same run)")
    for name, value in times.items():
        print(f"  {name:38s} {value:7.2f} s   {value / times['isotropic']:5.1f}× isotropic")
    data = {"isotropic": {"covariance": "isotropic"}, "power-law": {"covariance": "power-law", "exponent": 0.5}}
    untied = {name: seconds(parse_config({**UNTIED, "data": table})) for name, table in data.items()}
    print(f"untied matrix-model closure, n = {UNTIED['truncation']['size']}, τ ∈ [0, {UNTIED['integrate']['T']:g}]")
    print(f"  isotropic {untied['isotropic']:.2f} s, power-law Σ {untied['power-law']:.2f} s (target ≤ 20 s), "
          f"{untied['power-law'] / untied['isotropic']:.1f}× isotropic")  # fmt: skip


if __name__ == "__main__":
    main()
