"""Words: counts, canonical forms, parsing and trace invariance."""

import itertools
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from momentgen.core.errors import WordError
from momentgen.models.words import Alphabet, canonical, canonical_codes, enumerate_words, format_word, letters, parse
from momentgen.setting.matrices import letter_matrices, trace_moments
from tests.conftest import random_factors


def counts_per_length(words, degree):
    lengths = [len(w.split()) for w in words]
    return [lengths.count(n) for n in range(1, degree + 1)]


def brute_force_orbits(alphabet, w):
    """Number of classes of words of length w under rotation and transpose-reversal."""
    tau = alphabet.transpose
    seen, classes = set(), 0
    for word in itertools.product(range(alphabet.size), repeat=w):
        if word in seen:
            continue
        classes += 1
        reversal = tuple(int(tau[c]) for c in reversed(word))
        for base in (word, reversal):
            for s in range(w):
                seen.add(base[s:] + base[:s])
    return classes


def test_tied_counts_are_bracelets():
    assert counts_per_length(enumerate_words("tied", 2, 8), 8) == [2, 3, 4, 6, 8, 13, 18, 30]
    assert counts_per_length(enumerate_words("tied", 3, 8), 8) == [3, 6, 10, 21, 39, 92, 198, 498]
    assert enumerate_words("tied", 1, 4) == ["S1", "S1 S1", "S1 S1 S1", "S1 S1 S1 S1"]


def test_untied_k1_counts_from_the_notes():
    words = enumerate_words("untied", 1, 8)
    assert counts_per_length(words, 8) == [3, 7, 16, 43, 120, 382, 1236, 4243]
    assert len(words) == 6050


@pytest.mark.parametrize(
    "model,K,degree", [("untied", 1, 6), ("untied", 2, 4), ("direct", 1, 8), ("direct", 2, 6), ("tied", 3, 6)]
)
def test_class_counts_match_brute_force_orbits(model, K, degree):
    alphabet = Alphabet(model, K)
    expected = [brute_force_orbits(alphabet, w) for w in range(1, degree + 1)]
    assert counts_per_length(enumerate_words(model, K, degree), degree) == expected


@pytest.mark.parametrize("model,K", [("tied", 2), ("untied", 2), ("direct", 3)])
def test_enumeration_sorted_unique_and_canonical(model, K):
    words = enumerate_words(model, K, 4)
    assert words == sorted(words, key=lambda w: (len(w.split()), w))
    assert len(set(words)) == len(words)
    assert all(canonical(w, model) == w for w in words)


@pytest.mark.parametrize("model,K", [("tied", 3), ("untied", 2), ("direct", 2)])
def test_packed_canonical_equals_booth(model, K, rng):
    alphabet = Alphabet(model, K)
    for w in (1, 2, 5, 9):
        digits = rng.integers(0, alphabet.size, size=(300, w))
        packed = alphabet.canonicalize(alphabet.pack(digits), w)
        booth = [canonical_codes(row, model) for row in digits]
        assert [tuple(row) for row in alphabet.unpack(packed, w)] == booth


def test_canonical_examples():
    assert canonical("S2 S1 S1", "tied") == "S1 S1 S2"
    assert canonical("S1 S2 S1 S1 S2", "tied") == canonical("S2 S1 S1 S2 S1", "tied")
    # transpose-reversal: Tr(M1 A1) = Tr((M1 A1)^T) = Tr(A1 M1^T)
    assert canonical("A1 M1^T", "untied") == canonical("M1 A1", "untied")
    assert canonical("S2 S1^T", "direct") == canonical("S1 S2^T", "direct")
    # M1 M1 and M1 M1^T are different moments (q2 vs q1)
    assert canonical("M1 M1", "untied") != canonical("M1 M1^T", "untied")


@given(st.sampled_from(["tied", "untied", "direct"]), st.integers(1, 3), st.data())
def test_parse_format_round_trip(model, K, data):
    n = Alphabet(model, K).size
    codes = tuple(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=8)))
    text = format_word(codes, model)
    assert parse(text, model, K) == codes
    assert format_word(parse(text, model), model) == text


@pytest.mark.parametrize(
    "word,model,K,needle",
    [
        ("S1 X2", "tied", 2, "'X2'"),
        ("S1 S1^T", "tied", 2, "'S1^T'"),
        ("M1 S1", "untied", 2, "'S1'"),
        ("S3", "tied", 2, "'S3'"),
        ("S0", "direct", 2, "'S0'"),
        ("", "tied", 2, "empty"),
        ("   ", "untied", 1, "empty"),
        ("S1 S1'", "tied", 2, "S1'"),
        ("S1", "untyed", 2, "untyed"),
    ],
)
def test_bad_words_raise_naming_the_token(word, model, K, needle):
    with pytest.raises(ValueError, match=re.escape(needle)) as info:
        parse(word, model, K)
    assert isinstance(info.value, WordError)


def test_bad_degree_and_K():
    with pytest.raises(ValueError, match="degree"):
        enumerate_words("tied", 2, 0)
    with pytest.raises(ValueError, match="K must be"):
        enumerate_words("tied", 0, 3)
    with pytest.raises(ValueError, match="lower the degree"):
        Alphabet("untied", 2).check_length(22)


def test_letters():
    assert letters("tied", 3) == ["S1", "S2", "S3"]
    assert letters("direct", 1) == ["S1", "S1^T"]


@pytest.mark.parametrize("model", ["tied", "untied", "direct"])
@given(data=st.data())
def test_trace_invariance_under_canonical_form(model, data):
    """(1/d) Tr of a random word equals that of its canonical form, on structured matrices."""
    K = data.draw(st.integers(1, 3))
    seed = data.draw(st.integers(0, 2**32 - 1))
    alphabet = Alphabet(model, K)
    words = data.draw(
        st.lists(st.lists(st.integers(0, alphabet.size - 1), min_size=1, max_size=9), min_size=1, max_size=6)
    )
    letters_ = letter_matrices(model, random_factors(model, K, 7, np.random.default_rng(seed)))
    canon = [canonical_codes(w, model) for w in words]
    np.testing.assert_allclose(trace_moments(words, letters_), trace_moments(canon, letters_), rtol=1e-11, atol=1e-13)
