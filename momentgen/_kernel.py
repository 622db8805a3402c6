"""The one compiled kernel every truncation uses: a program applied to a state.

Compiled once (numba ``cache=True``) and shared by all generated modules; the program is
data, so its size never changes the compile time.

Layout (`segment_rows`): the terms of a row are grouped into *segments* of one coefficient
symbol, so the inner loop is a plain weighted gather ``Σ w_j y[target_j]`` (12 bytes a term,
as a CSR mat-vec) and each segment's sum is scaled by its coefficient once. Two accumulators
break the add-latency chain. Measured at 58 218 words (455 721 terms, 3 symbols;
``python benchmarks/bench_truncation.py``, median of 25 interleaved pairs): 1.22–1.37× a scipy
CSR mat-vec of equal nnz, against 1.54–1.96× for the previous layout (a symbol and a weight
per term) in the same runs.
"""

from typing import NamedTuple

import numba
import numpy as np

__all__ = ["apply_program", "segment_rows", "symbol_type", "Segments", "NO_NOISE"]


class Segments(NamedTuple):
    """A program's linear terms grouped by row and, within a row, by symbol (stable order).

    ``row_segment[i]:row_segment[i+1]`` are row i's segments; ``segment_start[g]:segment_start[g+1]``
    the terms of segment g, all with the symbol ``segment_symbol[g]``; ``target``/``weight`` per term.
    Terms stay in their rows, so the program's row pointer still delimits each row's terms.
    """

    row_segment: np.ndarray
    segment_start: np.ndarray
    segment_symbol: np.ndarray
    target: np.ndarray
    weight: np.ndarray

    def term_symbols(self):
        """The symbol of every term (in this layout's order)."""
        return np.repeat(self.segment_symbol, np.diff(self.segment_start.astype(np.int64)))


def symbol_type(largest):
    """The smallest unsigned type of symbol indices up to ``largest`` (the kernel is memory-bound)."""
    return np.uint16 if largest < 2**16 else np.uint32


def segment_rows(indptr, symbol, target, weight):
    """`Segments` of CSR-ordered terms (``indptr`` the row pointer). Compact *unsigned* index types:
    the kernel is memory-bound, and an unsigned index spares numba the negative-index wraparound
    branch of every load."""
    n, nnz = len(indptr) - 1, len(symbol)
    rows = np.repeat(np.arange(n), np.diff(indptr))
    order = np.lexsort((np.arange(nnz), symbol, rows))  # by row, then symbol, then original position
    rows, symbol = rows[order], symbol[order]
    changes = (rows[1:] != rows[:-1]) | (symbol[1:] != symbol[:-1])
    start = np.flatnonzero(np.r_[True, changes]) if nnz else np.zeros(0, int)
    index = np.uint32 if nnz < 2**32 else np.uint64
    return Segments(
        np.searchsorted(rows[start], np.arange(n + 1)).astype(index),
        np.append(start, nnz).astype(index),
        symbol[start].astype(symbol_type(symbol.max() if symbol.size else 0)),
        np.asarray(target)[order].astype(np.uint32),
        np.asarray(weight, dtype=float)[order],
    )


@numba.njit(cache=True, nogil=True)
def apply_program(row_segment, segment_start, segment_symbol, target, weight, noise, coefficients, y, out):
    """``out[i] = Σ_{segments g of row i} c[symbol[g]] · Σ_{j in g} weight[j] · y[target[j]]``
    ``+ Σ_{j in noise row i} c[noise_symbol[j]] · noise_weight[j] · y[left[j]] · y[right[j]]``.

    The first five arguments are a `Segments`. ``noise`` = (noise_indptr, noise_symbol, left,
    right, noise_weight): the quadratic terms of the finite-learning-rate term (an index −1 is the
    empty word, whose moment is 1); `NO_NOISE` (a one-entry row pointer) when the program has none.
    """
    noise_indptr, noise_symbol, left, right, noise_weight = noise
    for i in range(len(row_segment) - 1):
        total = 0.0
        for g in range(row_segment[i], row_segment[i + 1]):
            even, odd = 0.0, 0.0
            j, end = segment_start[g], segment_start[g + 1]
            while j + 1 < end:
                even += weight[j] * y[target[j]]
                odd += weight[j + 1] * y[target[j + 1]]
                j += 2
            if j < end:
                even += weight[j] * y[target[j]]
            total += coefficients[segment_symbol[g]] * (even + odd)
        out[i] = total
    if len(noise_indptr) > 1:  # a second pass: a branch in the loop above costs ~15 % (measured)
        for i in range(len(row_segment) - 1):
            for j in range(noise_indptr[i], noise_indptr[i + 1]):
                a, b = left[j], right[j]
                out[i] += (
                    coefficients[noise_symbol[j]]
                    * noise_weight[j]
                    * (1.0 if a < 0 else y[a])
                    * (1.0 if b < 0 else y[b])
                )
    return out


#: The ``noise`` argument of a program without quadratic terms.
NO_NOISE = (
    np.zeros(1, np.int64),
    np.zeros(0, np.int16),
    np.zeros(0, np.int32),
    np.zeros(0, np.int32),
    np.zeros(0, np.float64),
)
