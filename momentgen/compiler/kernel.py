"""The one compiled kernel every truncation uses: a program applied to a state.

Compiled once (numba ``cache=True``) and shared by all generated modules; the program is
data, so its size never changes the compile time.

Layout (`segment_rows`): the terms of a row are grouped into *segments* of one coefficient
symbol, so the inner loop is a plain weighted gather ``Σ w_j y[target_j]`` (12 bytes a term,
as a CSR mat-vec) and each segment's sum is scaled by its coefficient once. The quadratic
terms of the finite-learning-rate term (`segment_pairs`) are the same gather over the products of
distinct pairs of moments, each product formed once. `benchmarks/bench_truncation.py` compares the
kernel with a scipy CSR mat-vec of equal nnz.
"""

from typing import NamedTuple

import numba
import numpy as np

__all__ = ["apply_program", "segment_rows", "segment_pairs", "symbol_type", "Segments", "PairSegments", "NO_NOISE"]


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


class PairSegments(NamedTuple):
    """A program's quadratic terms as linear terms over the distinct *pairs* of moments they multiply.

    ``left[k]``, ``right[k]``: the words of pair k (−1: the empty word, moment 1), each unordered pair
    once; ``terms``: `Segments` whose targets index pairs. The finite-learning-rate terms of a word are the
    products of two sub-words' moments, and the same pair recurs across words and coefficient symbols
    (several times on average): each product is formed once per evaluation.
    """

    left: np.ndarray
    right: np.ndarray
    terms: Segments


def segment_pairs(indptr, symbol, left, right, weight):
    """`PairSegments` of CSR-ordered quadratic terms ``weight · c[symbol] · μ[left] · μ[right]``."""
    low, high = np.minimum(left, right).astype(np.int64), np.maximum(left, right).astype(np.int64)
    pairs, index = np.unique(np.stack([low, high], axis=1), axis=0, return_inverse=True)
    pairs = pairs.reshape(-1, 2)
    return PairSegments(
        pairs[:, 0].astype(np.int32), pairs[:, 1].astype(np.int32), segment_rows(indptr, symbol, index.ravel(), weight)
    )


@numba.njit(cache=True, nogil=True)
def _gather_rows(row_segment, segment_start, segment_symbol, target, weight, coefficients, values, out, add):
    """``out[i] (+)= Σ_{segments g of row i} c[symbol[g]] · Σ_{j in g} weight[j] · values[target[j]]``."""
    for i in range(len(row_segment) - 1):
        total = 0.0
        for g in range(row_segment[i], row_segment[i + 1]):
            even, odd = 0.0, 0.0
            j, end = segment_start[g], segment_start[g + 1]
            while j + 1 < end:
                even += weight[j] * values[target[j]]
                odd += weight[j + 1] * values[target[j + 1]]
                j += 2
            if j < end:
                even += weight[j] * values[target[j]]
            total += coefficients[segment_symbol[g]] * (even + odd)
        out[i] = out[i] + total if add else total


@numba.njit(cache=True, nogil=True)
def apply_program(row_segment, segment_start, segment_symbol, target, weight, noise, coefficients, y, out):
    """``out[i] = Σ_{segments g of row i} c[symbol[g]] · Σ_{j in g} weight[j] · y[target[j]]``
    ``+ Σ_{noise terms j of row i} c[symbol[j]] · weight[j] · y[left[pair_j]] · y[right[pair_j]]``.

    The first five arguments are a `Segments`; ``noise`` a `PairSegments` (flattened: left, right, then its
    `Segments`) of the quadratic terms of the finite-learning-rate term, `NO_NOISE` when the program has
    none. Two accumulators per segment break the add-latency chain.
    """
    _gather_rows(row_segment, segment_start, segment_symbol, target, weight, coefficients, y, out, False)
    left, right, (pair_row_segment, pair_start, pair_symbol, pair_target, pair_weight) = noise
    if len(left):
        products = np.empty(len(left))
        for k in range(len(left)):
            a, b = left[k], right[k]
            products[k] = (1.0 if a < 0 else y[a]) * (1.0 if b < 0 else y[b])
        _gather_rows(
            pair_row_segment, pair_start, pair_symbol, pair_target, pair_weight, coefficients, products, out, True
        )
    return out


#: The ``noise`` argument of a program without quadratic terms.
NO_NOISE = PairSegments(
    np.zeros(0, np.int32),
    np.zeros(0, np.int32),
    segment_rows(np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)),
)
