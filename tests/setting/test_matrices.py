"""Finite-d matrices (`momentgen.setting.matrices`): trace moments of words against written-out products."""

import itertools

import numpy as np

from momentgen.setting.matrices import letter_matrices, trace_moments
from tests.conftest import random_factors


def test_products_with_a_diagonal_letter_are_the_dense_products(rng):
    """`trace_moments` and `sandwich` scale by a diagonal letter (Σ in its eigenbasis) instead of multiplying: the same
    values as the dense products written out with numpy (to rounding), for words with the diagonal letter first, inside
    and last, and a non-diagonal Σ still multiplied."""
    from momentgen.models.base import sandwich
    from momentgen.setting.matrices import trace_moments

    d = 30
    W = rng.standard_normal((d, d)) / np.sqrt(d)
    S = W @ W.T
    sigma = np.diag(rng.uniform(0.1, 2.0, d))
    rotated = (Q := np.linalg.qr(rng.standard_normal((d, d)))[0]) @ sigma @ Q.T
    words = [(1, 0, 1, 0), (0, 1), (0, 0, 1), (1,), (0, 1, 1, 0, 1)]
    for letter in (sigma, rotated):
        letters = [S, letter]
        expected = [
            np.trace(np.linalg.multi_dot([letters[c] for c in w]) if len(w) > 1 else letters[w[0]]) / d for w in words
        ]
        np.testing.assert_allclose(trace_moments(words, letters), expected, rtol=1e-12)
        np.testing.assert_allclose(sandwich(letter, S), letter @ S @ letter, rtol=1e-12, atol=1e-15)


def test_trace_moments_shares_prefixes_correctly(rng):
    letters_ = letter_matrices("direct", random_factors("direct", 2, 5, rng))
    words = [(0, 1, 2), (0, 1), (0, 1, 3, 3), (2,), (0, 1, 2, 0)]
    direct = [np.trace(np.linalg.multi_dot([letters_[c] for c in w] + [np.eye(5)])) / 5 for w in words]
    np.testing.assert_allclose(trace_moments(words, letters_), direct, rtol=1e-13)


def test_trace_moments_cuts_every_word_into_two_shared_halves(rng):
    """`trace_moments` rotates each word and cuts it into two halves (shared by the call's words) with diagonal
    letters applied as scalings: every word of up to six letters over three dense letters, a diagonal one and an
    identity equals the product written out with numpy (measured 2.4e-16 relative; tolerance 1e-13), and a word with
    at most two dense letters costs no O(d³) product."""
    from unittest import mock

    from momentgen.setting import matrices

    d = 30
    letters_ = [rng.standard_normal((d, d)) for _ in range(3)] + [np.diag(rng.uniform(0.5, 2, d)), 0.7 * np.eye(d)]
    words = [w for n in range(1, 7) for w in itertools.product(range(5), repeat=n)]
    direct = [np.trace(np.linalg.multi_dot([letters_[c] for c in w] + [np.eye(d)])) / d for w in words]
    scale = np.abs(direct).max()
    np.testing.assert_allclose(trace_moments(words, letters_) / scale, np.array(direct) / scale, rtol=0, atol=1e-13)
    products = []
    original = matrices.times_letter
    with mock.patch.object(
        matrices, "times_letter", lambda P, Z, diagonal=None: products.append(diagonal) or original(P, Z, diagonal)
    ):
        trace_moments([(0, 3, 1, 3, 4), (2, 4, 4, 0), (3, 4, 3)], letters_)
    assert all(diagonal is not None for diagonal in products)


def test_a_second_half_is_read_from_its_mirror_with_the_letters_transposes(rng):
    """Told which letter is which one's transpose (`Alphabet.transpose`: untied M ↔ Mᵀ, A, B and Σ their own), a
    word's second half is read from its mirror (a product of the call, one contiguous letter, its leading diagonal
    letters as a scaling) instead of copying its transpose. Every word of two to five letters over untied K = 1 with
    Σ equals the product written out with numpy (measured 1.2e-16 of the largest; tolerance 1e-13); 4 words that
    the plain call copies 4 transposes for take none (the untied kind holds Mᵀ contiguous; as a view of M it left 2).
    Told a wrong table (every letter its own transpose), the mirrors are the wrong matrices: the words with an M in
    each half are off by 19× and 22× (asserted: by more than 10 %)."""
    from unittest import mock

    from momentgen.models import Model
    from momentgen.setting import matrices

    d = 24
    (U, V), lam = random_factors("untied", 1, d, rng)[0], rng.uniform(0.2, 2.0, d)
    letters_ = letter_matrices("untied", [(U, V)]) + [np.diag(lam)]  # M, Mᵀ, A, B, Σ
    transposes = tuple(int(c) for c in Model("untied", 1, sigma=True).alphabet.transpose)
    words = [w for n in range(2, 6) for w in itertools.product(range(5), repeat=n)]
    direct = np.array([np.trace(np.linalg.multi_dot([letters_[c] for c in w])) / d for w in words])
    scale = np.abs(direct).max()
    told = trace_moments(words, letters_, transposes)
    np.testing.assert_allclose(told / scale, direct / scale, rtol=0, atol=1e-13)
    few = [(0, 4, 0, 4), (0, 4, 2, 4), (0, 0), (2, 4, 3, 4, 4)]
    original = np.ascontiguousarray

    def copies_made(table):
        copies = []
        with mock.patch.object(matrices.np, "ascontiguousarray", lambda a: copies.append(1) or original(a)):
            trace_moments(few, letters_, table)
        return len(copies)

    assert (copies_made(None), copies_made(transposes)) == (4, 0)
    wrong = trace_moments(few, letters_, (0, 1, 2, 3, 4))
    exact = [np.trace(np.linalg.multi_dot([letters_[c] for c in w])) / d for w in few]
    assert abs(wrong[2] - exact[2]) > 0.1 * abs(exact[2]) and abs(wrong[0] - exact[0]) > 0.1 * abs(exact[0])


def test_a_frozen_matrix_keeps_its_diagonal_answer_and_lets_go_of_it():
    """`diagonal_of` remembers its answer for a `frozen` matrix (read-only, owning its data: nothing changes it in
    place) — the same answer as for a writable copy, diagonal or not — and forgets it when the matrix is gone (the
    remembered diagonal is a copy, so it does not keep the matrix alive)."""
    import gc

    from momentgen.models import base

    sigma = base.frozen(np.diag([3.0, 2.0, 1.0]))
    dense = base.frozen(np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.5], [0.0, 0.5, 1.0]]))  # corners 0, not diagonal
    for _ in range(2):
        assert np.array_equal(base.diagonal_of(sigma), base.diagonal_of(np.array(sigma)))
        assert base.diagonal_of(dense) is None and base.diagonal_of(np.array(dense)) is None
    keys = {id(sigma), id(dense)}
    assert keys <= set(base._KNOWN_DIAGONALS) and not sigma.flags.writeable
    del sigma, dense
    gc.collect()
    assert not keys & set(base._KNOWN_DIAGONALS)


def test_trace_moments_frees_its_products_when_it_returns(rng):
    """The products and transposes `trace_moments` builds for one call die when it returns, without waiting for the
    cyclic garbage collector: its prefix products were made by a closure that called itself (a reference cycle), which
    kept every call's matrices alive until a collection — an untied flow at d = 512 grew by 2.3 GB, 0.23 GB after
    (`tests/end_to_end/test_slow.py`'s reference flows). Measured here with the collector off: every product of
    four-letter words over three dense letters (weak references to what `times_letter` made) is gone at return, and
    the values are unchanged (the product is still formed left to right from its longest cached prefix)."""
    import gc
    import weakref
    from unittest import mock

    from momentgen.setting import matrices

    d = 12
    letters_ = [rng.standard_normal((d, d)) for _ in range(3)]
    words = list(itertools.product(range(3), repeat=4))
    made, original = [], matrices.times_letter

    def recorded(P, Z, diagonal=None):
        result = original(P, Z, diagonal)
        made.append(weakref.ref(result))
        return result

    enabled = gc.isenabled()
    gc.disable()
    try:
        with mock.patch.object(matrices, "times_letter", recorded):
            values = trace_moments(words, letters_)
        alive = sum(ref() is not None for ref in made)
    finally:
        if enabled:
            gc.enable()
    direct = [np.trace(np.linalg.multi_dot([letters_[c] for c in w])) / d for w in words]
    assert made and alive == 0, (len(made), alive)
    np.testing.assert_allclose(values, direct, rtol=1e-12, atol=1e-12 * np.abs(direct).max())
