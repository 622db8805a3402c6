"""Shared helpers of the benchmarks: one BLAS thread, best-of-n and paired timing, the smoke mode, and
two baselines: the row-by-row grouping of Φ and the shifted untied factors of the matrix-model closure.

``--smoke``: every benchmark at a tiny size (``make bench-smoke``, part of CI): it checks that
the benchmarks still run against the current API, not the numbers.
"""

import sys
import time
from unittest import mock

import numpy as np
import sympy
from threadpoolctl import threadpool_limits

from momentgen import models
from momentgen.compiler.potential import quadrature
from momentgen.models.untied import shift_to_mean

# One BLAS thread per process: up to 16× faster than two on the shared 2-core machines.
# (threadpoolctl acts on already-loaded libraries, so the import order does not matter.)
threadpool_limits(1)

SMOKE = "--smoke" in sys.argv
QUICK = SMOKE or "--quick" in sys.argv


def pick(full, smoke):
    """``smoke`` in smoke mode, else ``full``."""
    return smoke if SMOKE else full


def best(function, repeat=15):
    """Shortest wall time of ``repeat`` calls of ``function()`` (seconds)."""
    times = []
    for _ in range(pick(repeat, 2)):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)


def timed(function, *args, **kwargs):
    """(function(*args, **kwargs), seconds)."""
    start = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - start


def paired(first, second, repeat=25, inner=10):
    """Interleaved timing of two functions on a noisy shared machine: ``repeat`` pairs of ``inner``
    calls each, alternating. Returns (median seconds of ``first``, of ``second``, median of the
    per-pair ratios first/second) — the pairing cancels load that changes between pairs."""
    ratios, firsts, seconds = [], [], []
    for _ in range(pick(repeat, 2)):
        pair = []
        for function in (first, second):
            start = time.perf_counter()
            for _ in range(inner):
                function()
            pair.append((time.perf_counter() - start) / inner)
        firsts.append(pair[0])
        seconds.append(pair[1])
        ratios.append(pair[0] / pair[1])
    return float(np.median(firsts)), float(np.median(seconds)), float(np.median(ratios))


def shifted_law_factors():
    """Context in which the matrix-model closure's untied factors are shifted to the configured mean
    as before they were centred (`shift_to_mean`, the finite-d draw's move: an O(m²/n) bias). In
    this process only: ensembles run their draws in worker processes, so it serves single draws."""
    untied = models.KINDS["untied"]

    def shifted(spec, n, rng, gaussian):
        U, V = type(untied.laws).law_factor(untied.laws, spec, n, rng, gaussian)
        return (U, V) if spec.mean is None else shift_to_mean(U, V, spec.mean)

    return mock.patch.object(untied.laws, "law_factor", shifted)


def row_by_row():
    """Context in which new potentials group the loss as before the pair-of-heads change: top-level
    terms by the variables they use, nothing multiplied out (the baseline of the Φ benchmarks)."""

    def groups(expr):
        return quadrature._group_terms(sympy.Add.make_args(expr))

    return mock.patch.object(quadrature, "_additive_groups", groups)
