"""Benchmark: the compiled vector field, generated-module import, and a fig. 1 solve.

1. rhs kernel time per nonzero vs a scipy CSR mat-vec with the same nnz (same run; budget 2×),
   on the tied K = 2 program with all words to M = 20 (58 218 words) and a small one.
2. Generated module import: cold (empty numba and kernel caches, in a fresh process) and warm
   (second process), for a ~100-word and a ~58 000-word system (budgets 10 s and 0.5 s).
3. The fig. 1 configuration (tied, L = 2, softmax-mse) solved at M = 8 (budget 10 s).

Run: ``make bench`` (or ``python benchmarks/bench_truncation.py``).
"""

from common import best  # noqa: I001  (sets one BLAS thread before numpy loads)

import copy  # noqa: E402
import os  # noqa: E402
import pathlib  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import scipy.sparse  # noqa: E402

from momentgen._kernel import apply_program  # noqa: E402
from momentgen.config import load_config, parse_config  # noqa: E402
from momentgen.emit import write_module  # noqa: E402
from momentgen.hierarchy import Model, build  # noqa: E402
from momentgen.integrate import solve_config  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]



def kernel_vs_csr():
    print("1. rhs kernel vs scipy CSR mat-vec (same nnz)")
    for degree in (10, 20):
        program = build(Model("tied", 2, [1]), degree, "all")
        n, nnz = len(program.words), program.nnz
        rng = np.random.default_rng(0)
        y, c = rng.standard_normal(n), rng.standard_normal(len(program.symbols))
        weight = program.multiplicity.astype(float)
        symbol, target = program.symbol.astype(np.int16), program.target.astype(np.int32)  # as Truncation stores them
        out = np.empty(n)
        apply_program(program.indptr, symbol, target, weight, c, y, out)
        matrix = scipy.sparse.csr_matrix((c[program.symbol] * weight, program.target, program.indptr), shape=(n, n))
        t_kernel = best(lambda: apply_program(program.indptr, symbol, target, weight, c, y, out))
        t_csr = best(lambda: matrix @ y)
        verdict = "ok" if t_kernel <= 2 * t_csr else "OVER"
        print(f"   M={degree:2d}: {n:6d} words, {nnz:7d} nnz: kernel {t_kernel / nnz * 1e9:6.2f} ns/nnz, "
              f"CSR {t_csr / nnz * 1e9:6.2f} ns/nnz, ratio {t_kernel / t_csr:4.2f} (budget 2): {verdict}")  # fmt: skip


def import_times():
    print("2. generated-module import (fresh processes)")
    base = load_config(ROOT / "examples" / "configs" / "fig4_linear.toml").raw
    for label, degree, observables in (("~100 words", 8, "all"), ("~58 000 words", 20, "all")):
        raw = copy.deepcopy(base)
        raw["truncation"].update(degree=degree, observables=observables)
        with tempfile.TemporaryDirectory() as tmp:
            module = pathlib.Path(tmp) / "system.py"
            start = time.perf_counter()
            program = write_module(parse_config(raw), module)
            generate = time.perf_counter() - start
            env = {**os.environ, "NUMBA_CACHE_DIR": str(pathlib.Path(tmp) / "numba"),
                   "MOMENTGEN_CACHE": str(pathlib.Path(tmp) / "kernels")}  # fmt: skip
            code = ("import time; s = time.perf_counter(); import numpy, scipy.sparse, sympy, numba, momentgen.emit;"
                    "t = time.perf_counter(); import importlib.util as u;"
                    f"spec = u.spec_from_file_location('system', {str(module)!r}); m = u.module_from_spec(spec);"
                    "spec.loader.exec_module(m); y = m.initial_state(); m.rhs(0.0, y);"
                    "print(t - s, time.perf_counter() - t)")  # fmt: skip
            runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
                    for _ in range(2)]  # fmt: skip
            (lib_cold, cold), (lib_warm, warm) = (map(float, r.stdout.split()) for r in runs)
        print(f"   {label:14s} ({len(program.words)} words, {program.nnz} nnz): generate {generate:5.2f} s; "
              f"module import + first rhs: cold {cold:5.2f} s (budget 10: {'ok' if cold <= 10 else 'OVER'}), "
              f"warm {warm:5.2f} s (budget 0.5: {'ok' if warm <= 0.5 else 'OVER'}); "
              f"library imports before it (numpy, scipy, sympy, numba) {lib_warm:4.2f} s")  # fmt: skip


def fig1_solve():
    print("3. fig. 1 configuration (tied, L = 2, softmax-mse), degrees 8 and 6")
    config = load_config(ROOT / "examples" / "configs" / "fig1_tied_softmax.toml")
    start = time.perf_counter()
    out = solve_config(config, 8)
    seconds = time.perf_counter() - start
    print(f"   status {out['status']}, valid_until {out['valid_until']:.4g}, {seconds:.2f} s for both degrees "
          f"(budget 10: {'ok' if seconds <= 10 else 'OVER'}), nfev {out['nfev']}")  # fmt: skip


if __name__ == "__main__":
    kernel_vs_csr()
    import_times()
    fig1_solve()
