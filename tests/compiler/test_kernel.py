"""The compiled kernel against a plain numpy evaluation of the same terms (an independent path)."""

import numpy as np
import pytest

from momentgen.compiler.kernel import NO_NOISE, apply_program, segment_pairs, segment_rows


def _random_program(rng, n, symbols, per_row):
    counts = rng.integers(0, per_row, size=n)
    indptr = np.r_[0, np.cumsum(counts)]
    nnz = indptr[-1]
    return indptr, rng.integers(0, symbols, nnz), rng.integers(0, n, nnz), rng.standard_normal(nnz)


@pytest.mark.parametrize("symbols", [1, 3, 70_000])
def test_kernel_matches_the_term_by_term_sum(symbols):
    """Rows of 0–9 terms (odd and even segment lengths, empty rows), 1, 3 or > 2¹⁶ symbols, and
    quadratic noise terms with the empty word (index −1), stored once per distinct pair: equal to the
    direct sum to rounding."""
    rng = np.random.default_rng(symbols)
    n = 300
    indptr, symbol, target, weight = _random_program(rng, n, symbols, 10)
    c, y = rng.standard_normal(symbols), rng.standard_normal(n)
    noise_indptr, noise_symbol, _, _ = _random_program(rng, n, symbols, 4)
    left, right = rng.integers(-1, 30, (2, len(noise_symbol)))  # a small pool: pairs recur, in both orders
    noise_weight = rng.standard_normal(len(left))
    noise = segment_pairs(noise_indptr, noise_symbol, left, right, noise_weight)
    assert len(noise.left) < len(noise_symbol)
    expected = np.zeros(n)
    extended = np.append(y, 1.0)  # index −1 reads the empty word's moment, 1
    rows = np.repeat(np.arange(n), np.diff(indptr))
    np.add.at(expected, rows, c[symbol] * weight * y[target])
    noise_rows = np.repeat(np.arange(n), np.diff(noise_indptr))
    np.add.at(expected, noise_rows, c[noise_symbol] * noise_weight * extended[left] * extended[right])
    terms = segment_rows(indptr, symbol, target, weight)
    linear_only = apply_program(*terms, NO_NOISE, c, y, np.empty(n))
    both = apply_program(*terms, noise, c, y, np.empty(n))
    linear = np.zeros(n)
    np.add.at(linear, rows, c[symbol] * weight * y[target])
    np.testing.assert_allclose(linear_only, linear, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(both, expected, rtol=1e-12, atol=1e-12)
    # the layout keeps every term in its row, so the program's row pointer still delimits them
    assert np.array_equal(np.bincount(rows, minlength=n), np.diff(indptr))
    assert sorted(zip(rows, terms.term_symbols(), terms.target)) == sorted(zip(rows, symbol, target))
