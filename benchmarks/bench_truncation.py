"""Benchmark: the compiled vector field, generated-module import, and a fig. 1 solve.

1. rhs kernel time per nonzero vs a scipy CSR mat-vec with the same nnz (interleaved pairs, same run;
   budget 1.5×),
   on the tied K = 2 program with all words to M = 20 (58 218 words) and a small one.
2. Generated module import: cold (empty numba and kernel caches, in a fresh process) and warm
   (second process), for a ~100-word and a ~58 000-word system (budgets 10 s and 0.5 s).
3. The fig. 1 configuration (tied, L = 2, softmax-mse) solved at M = 8 (budget 10 s).
4. The finite-learning-rate term: one rhs evaluation (kernel + coefficients) of the fig. 1 and
   fig. 4 programs with and without the term, same run (ratio; budget 3).

Run: ``make bench`` (or ``python benchmarks/bench_truncation.py``).
"""

import copy
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np
import scipy.sparse
from common import best, paired, pick

from momentgen.compiler.emit import write_module
from momentgen.compiler.hierarchy import Model, build
from momentgen.compiler.kernel import NO_NOISE, segment_rows
from momentgen.compiler.truncation import apply_program, from_config
from momentgen.dynamics.closures import solve_with_closure
from momentgen.setting.config import load_config, parse_config

ROOT = pathlib.Path(__file__).resolve().parents[1]


def kernel_vs_csr():
    print("1. rhs kernel vs scipy CSR mat-vec (same nnz)")
    for degree in pick((10, 20), (6,)):
        program = build(Model("tied", 2, [1]), degree, "all")
        n, nnz = len(program.words), program.nnz
        rng = np.random.default_rng(0)
        y, c = rng.standard_normal(n), rng.standard_normal(len(program.symbols))
        weight = program.multiplicity.astype(float)
        terms = segment_rows(program.indptr, program.symbol, program.target, weight)  # as Truncation stores them
        out = np.empty(n)
        apply_program(*terms, NO_NOISE, c, y, out)
        matrix = scipy.sparse.csr_matrix((c[program.symbol] * weight, program.target, program.indptr), shape=(n, n))
        assert np.allclose(out, matrix @ y, rtol=1e-12, atol=1e-12 * np.abs(matrix @ y).max())
        t_kernel, t_csr, ratio = paired(
            lambda t=terms, c=c, y=y, o=out: apply_program(*t, NO_NOISE, c, y, o), lambda m=matrix, y=y: m @ y
        )
        verdict = "ok" if ratio <= 1.5 else "OVER"
        print(
            f"   M={degree:2d}: {n:6d} words, {nnz:7d} nnz: kernel {t_kernel / nnz * 1e9:6.2f} ns/nnz, "
            f"CSR {t_csr / nnz * 1e9:6.2f} ns/nnz, ratio {ratio:4.2f} (median of 25 pairs; budget 1.5): {verdict}"
        )


def import_times():
    print("2. generated-module import (fresh processes)")
    base = load_config(ROOT / "examples" / "configs" / "fig4_linear.toml").raw
    for label, degree, observables in pick(
        (("~100 words", 8, "all"), ("~58 000 words", 20, "all")), (("~100 words", 8, "all"),)
    ):
        raw = copy.deepcopy(base)
        raw["truncation"].update(degree=degree, observables=observables)
        with tempfile.TemporaryDirectory() as tmp:
            module = pathlib.Path(tmp) / "system.py"
            start = time.perf_counter()
            program = write_module(parse_config(raw), module).program
            generate = time.perf_counter() - start
            env = {
                **os.environ,
                "NUMBA_CACHE_DIR": str(pathlib.Path(tmp) / "numba"),
                "MOMENTGEN_CACHE": str(pathlib.Path(tmp) / "kernels"),
            }
            code = (
                "import time; s = time.perf_counter(); import numpy, scipy.sparse, sympy, numba;"
                "import momentgen.compiler.emit;"
                "t = time.perf_counter(); import importlib.util as u;"
                f"spec = u.spec_from_file_location('system', {str(module)!r}); m = u.module_from_spec(spec);"
                "spec.loader.exec_module(m); y = m.initial_state(); m.rhs(0.0, y);"
                "print(t - s, time.perf_counter() - t)"
            )
            runs = [
                subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
                for _ in range(2)
            ]
            (lib_cold, cold), (lib_warm, warm) = (map(float, r.stdout.split()) for r in runs)
        print(
            f"   {label:14s} ({len(program.words)} words, {program.nnz} nnz): generate {generate:5.2f} s; "
            f"module import + first rhs: cold {cold:5.2f} s (budget 10: {'ok' if cold <= 10 else 'OVER'}), "
            f"warm {warm:5.2f} s (budget 0.5: {'ok' if warm <= 0.5 else 'OVER'}); "
            f"library imports before it (numpy, scipy, sympy, numba) {lib_warm:4.2f} s"
        )


def fig1_solve():
    print("3. fig. 1 configuration (tied, L = 2, softmax-mse), degrees 8 and 6")
    config = load_config(ROOT / "examples" / "configs" / "fig1_tied_softmax.toml")
    start = time.perf_counter()
    out = solve_with_closure(config, "zero", 8)
    seconds = time.perf_counter() - start
    print(
        f"   status {out.status}, valid_until {out.valid_until:.4g}, {seconds:.2f} s for both degrees "
        f"(budget 10: {'ok' if seconds <= 10 else 'OVER'}), nfev {out.extra['nfev']}"
    )


def finite_lr_cost():
    print("4. the finite-learning-rate term: rhs time with and without (kappa = 0.3), same run")
    for name, degree in pick((("fig1_tied_softmax", 8), ("fig4_linear", 14)), (("fig4_linear", 4),)):
        config = load_config(ROOT / "examples" / "configs" / f"{name}.toml")
        lr = 0.3 * config.settings.sgd.batch / config.settings.sgd.d
        term = config.replace(integrate={"finite_lr": True}, sgd={"lr": lr})
        (plain, y0), (noisy, y1) = from_config(config, degree), from_config(term, degree)
        t_plain = best(lambda f=plain, y=y0: f.rhs(0.0, y))
        t_noisy = best(lambda f=noisy, y=y1: f.rhs(0.0, y), repeat=5)
        p = noisy.program
        print(
            f"   {name} M={degree}: {len(p.words)} words, {p.nnz} linear + {len(p.noise_symbol)} quadratic terms "
            f"({len(noisy._noise.left)} distinct pairs): rhs {t_plain * 1e3:6.3f} ms -> {t_noisy * 1e3:6.3f} ms, "
            f"ratio {t_noisy / t_plain:5.1f} (budget 3: {'ok' if t_noisy <= 3 * t_plain else 'OVER'})"
        )


if __name__ == "__main__":
    kernel_vs_csr()
    import_times()
    fig1_solve()
    finite_lr_cost()
