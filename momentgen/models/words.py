"""Letters, words and canonical forms (MATH.md §2).

A word ``α = (Z_1 … Z_w)`` over matrix letters names the normalised trace moment
``μ_α = (1/d) Tr(Z_1 ⋯ Z_w)``; its degree is ``w``. Two words name the same moment
when they differ by a cyclic rotation (trace cyclicity) or by *transpose-reversal*
(reverse the word and transpose every letter). The canonical representative of a
class is its least element in the letter order below, so tied canonical words are
bracelets.

=============  ====================================  ================================
model          letters (1-based index ``k = 1..K``)  transpose
=============  ====================================  ================================
``tied``       ``Sk`` (``S_k = W_k W_kᵀ``)           ``S ↦ S``
``untied``     ``Mk``, ``Mk^T``, ``Ak``, ``Bk``      ``M ↔ Mᵀ``; ``A ↦ A``, ``B ↦ B``
``direct``     ``Sk``, ``Sk^T``                      ``S ↔ Sᵀ``
``symmetric``  ``Sk`` (a symmetric ``S_k``)          ``S ↦ S``
=============  ====================================  ================================

With anisotropic tokens (MATH.md §10) every kind has one more letter, ``Sigma`` (Σ, its own transpose,
after the indices' letters); the functions below then take the `momentgen.models.Model` (which knows
``K`` and whether Σ is a letter) in place of the kind's name.

Text syntax: letters separated by spaces, e.g. ``"M1 M2^T"``. Inside, a letter is a
small integer *code*, ordered by ``(k, kind)`` with the kinds in the order of the
table (so the order does not depend on ``K``), and a word is a tuple of codes. For
bulk work (10⁵–10⁶ words) `Alphabet` packs a word into one ``uint64``, ``bits`` bits a
letter, first letter most significant, so numeric order is lexicographic order and a
rotation is two shifts and a mask.

>>> canonical("S2 S1 S1", "tied")
'S1 S1 S2'
>>> canonical("A1 M1^T", "untied")
'M1 A1'
>>> [len([w for w in enumerate_words("tied", 2, 8) if len(w.split()) == n]) for n in range(1, 9)]
[2, 3, 4, 6, 8, 13, 18, 30]
"""

import re

import numpy as np

from ..core.errors import WordError
from . import Model, registry
from .alphabet import SIGMA, Alphabet

__all__ = [
    "MODELS",
    "Alphabet",
    "parse",
    "format_word",
    "canonical",
    "canonical_codes",
    "enumerate_words",
    "letters",
    "least_rotation",
]

MODELS = tuple(registry.KINDS)
_TOKEN = re.compile(r"^([A-Za-z]+)(\d+)(\^T)?$")


def check_model(model):
    """Return ``model`` if it is a registered kind (`momentgen.models.KINDS`) or a `momentgen.models.Model`, else
    raise a `WordError`."""
    if not isinstance(model, Model):
        registry.get(model)
    return model


def _lettering(model, K=None):
    """(kind name, K, Σ's code or None) of a kind name (no Σ) or a `momentgen.models.Model`."""
    if isinstance(model, Model):
        return model.kind, model.K, model.sigma_code
    return check_model(model), K, None


def _parse_letter(token, model, K):
    model, K, sigma = _lettering(model, K)
    if token == SIGMA:
        if sigma is None:
            raise WordError(
                f'the letter {SIGMA} is the data covariance: it needs [data] covariance other than "isotropic"'
            )
        return sigma
    match = _TOKEN.match(token)
    kinds = registry.get(model).letter_kinds
    if match is None:
        raise WordError(f"bad letter {token!r} in the {model} model: letters look like {_letter_list(model)}")
    base, k, transposed = match.groups()
    kind = base + (transposed or "")
    if kind not in kinds:
        raise WordError(f"unknown letter {token!r} in the {model} model: its letters are {_letter_list(model)}")
    k = int(k)
    if k < 1 or (K is not None and k > K):
        upper = "K" if K is None else str(K)
        raise WordError(f"letter {token!r} has index {k} out of range 1..{upper} (indices are 1-based)")
    return (k - 1) * len(kinds) + kinds.index(kind)


def _letter_list(model):
    kind, _, sigma = _lettering(model)
    names = [k.replace("^", "k^") if "^" in k else k + "k" for k in registry.get(kind).letter_kinds]
    return ", ".join(names + ([SIGMA] if sigma is not None else []))


def parse(word, model, K=None):
    """Letter codes of a word in text syntax, as a tuple of ints.

    ``K``, if given, bounds the indices. Raises `WordError` (a ``ValueError``) naming
    the bad token for unknown letters, out-of-range indices and empty words.

    >>> parse("M1 M2^T", "untied")
    (0, 5)
    """
    check_model(model)
    if not isinstance(word, str):
        raise WordError(f"a word is a string of letters separated by spaces, got {word!r}")
    tokens = word.split()
    if not tokens:
        raise WordError(f"empty word {word!r}: a word needs at least one letter, e.g. {_letter_list(model)}")
    return tuple(_parse_letter(t, model, K) for t in tokens)


def format_word(codes, model):
    """Text of a word given as letter codes (the inverse of `parse`).

    >>> format_word((0, 5), "untied")
    'M1 M2^T'
    """
    if isinstance(model, Model):
        return " ".join(model.alphabet.name(int(c)) for c in codes)
    n = len(registry.get(model).letter_kinds)
    return " ".join(Alphabet(model, max(codes) // n + 1).name(int(c)) for c in codes)


def canonical_codes(codes, model):
    """Canonical form of a word given as letter codes (Booth's least rotation, O(w))."""
    codes = tuple(int(c) for c in codes)
    if isinstance(model, Model):
        flip = model.alphabet.transpose
        reversal = tuple(int(flip[c]) for c in reversed(codes))
    else:
        definition = registry.get(model)
        n, flip = len(definition.letter_kinds), definition.transposes
        reversal = tuple((c // n) * n + flip[c % n] for c in reversed(codes))
    return min(_least_rotation(codes), _least_rotation(reversal))


def _least_rotation(codes):
    k = least_rotation(codes)
    return codes[k:] + codes[:k]


def least_rotation(sequence):
    """Start of the lexicographically least rotation of ``sequence`` (Booth's algorithm, O(n)).

    >>> least_rotation([2, 1, 2, 1, 1])
    3
    """
    s = list(sequence) * 2
    failure = [-1] * len(s)
    k = 0
    for j in range(1, len(s)):
        i = failure[j - k - 1]
        while i != -1 and s[j] != s[k + i + 1]:
            if s[j] < s[k + i + 1]:
                k = j - i - 1
            i = failure[i]
        if i == -1 and s[j] != s[k + i + 1]:
            if s[j] < s[k + i + 1]:
                k = j
            failure[j - k] = -1
        else:
            failure[j - k] = i + 1
    return k


def canonical(word, model):
    """Canonical text of ``word`` under cyclic rotation and transpose-reversal.

    >>> canonical("S1^T S2", "direct")
    'S1 S2^T'
    """
    return format_word(canonical_codes(parse(word, model), model), model)


def enumerate_words(model, K, degree):
    """Every canonical word of length 1..``degree``, sorted by (length, text).

    >>> enumerate_words("untied", 1, 1)
    ['A1', 'B1', 'M1']
    """
    if not isinstance(degree, (int, np.integer)) or degree < 1:
        raise WordError(f"degree must be an integer >= 1, got {degree!r}")
    alphabet = Alphabet(model, K)
    out = []
    for w in range(1, degree + 1):
        texts = [" ".join(alphabet.names[c] for c in row) for row in alphabet.unpack(alphabet.enumerate_packed(w), w)]
        out.extend(sorted(texts))
    return out


def letters(model, K):
    """The letters of a model with ``K`` indices, in code order.

    >>> letters("untied", 1)
    ['M1', 'M1^T', 'A1', 'B1']
    """
    return list(Alphabet(model, K).names)
