"""Shared helpers of the benchmarks: one BLAS thread, best-of-n timing."""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # up to 16× faster than two on the 2-core machines

import time  # noqa: E402


def best(function, repeat=15):
    """Shortest wall time of ``repeat`` calls of ``function()`` (seconds)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times)
