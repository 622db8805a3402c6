"""Letters, words and canonical forms (MATH.md §2).

A word ``α = (Z_1 … Z_w)`` over matrix letters names the normalised trace moment
``μ_α = (1/d) Tr(Z_1 ⋯ Z_w)``; its degree is ``w``. Two words name the same moment
when they differ by a cyclic rotation (trace cyclicity) or by *transpose-reversal*
(reverse the word and transpose every letter). The canonical representative of a
class is its least element in the letter order below, so tied canonical words are
bracelets.

==========  ==========================================  =========================
model       letters (1-based index ``k = 1..K``)         transpose
==========  ==========================================  =========================
``tied``    ``Sk`` (``S_k = W_k W_kᵀ``)                  ``S ↦ S``
``untied``  ``Mk``, ``Mk^T``, ``Ak``, ``Bk``             ``M ↔ Mᵀ``; ``A ↦ A``, ``B ↦ B``
``direct``  ``Sk``, ``Sk^T``                             ``S ↔ Sᵀ``
==========  ==========================================  =========================

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
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from sympy.utilities.iterables import least_rotation

from .errors import WordError

__all__ = [
    "MODELS",
    "Alphabet",
    "parse",
    "format_word",
    "canonical",
    "canonical_codes",
    "enumerate_words",
    "letters",
]

#: Letter kinds of each model, in code order, and the kind each one transposes to.
_KINDS = {
    "tied": ("S",),
    "untied": ("M", "M^T", "A", "B"),
    "direct": ("S", "S^T"),
}
_TRANSPOSED_KIND = {
    "tied": (0,),
    "untied": (1, 0, 2, 3),
    "direct": (1, 0),
}
MODELS = tuple(_KINDS)

_TOKEN = re.compile(r"^([A-Za-z]+)(\d+)(\^T)?$")
_CHUNK = 1 << 21  # candidate words per block when enumerating (bounds memory)


def check_model(model):
    """Return ``model`` if it is one of `MODELS`, else raise a `WordError`."""
    if model not in _KINDS:
        raise WordError(f"unknown model {model!r}: choose one of {', '.join(MODELS)}")
    return model


@dataclass(frozen=True)
class Alphabet:
    """The letters of one model with ``K`` indices, and packed-word arithmetic.

    Letter code ``c`` has index ``k = c // n_kinds + 1`` and kind ``kinds[c % n_kinds]``.
    Packed words of length ``w`` are ``uint64`` numbers in base ``base``; lengths up to
    `max_length` fit (e.g. 63 for tied K = 2, 21 for untied K = 2).
    """

    model: str
    K: int

    def __post_init__(self):
        check_model(self.model)
        if not isinstance(self.K, (int, np.integer)) or self.K < 1:
            raise WordError(f"K must be a positive integer (number of indices), got {self.K!r}")

    @property
    def kinds(self):
        return _KINDS[self.model]

    @property
    def size(self):
        """Number of letters."""
        return self.K * len(self.kinds)

    def code(self, kind, k):
        """Code of the letter of kind ``kind`` (e.g. ``"M^T"``) and 1-based index ``k``."""
        return (k - 1) * len(self.kinds) + self.kinds.index(kind)

    def index(self, code):
        """1-based index ``k`` of a letter code."""
        return code // len(self.kinds) + 1

    def name(self, code):
        kind = self.kinds[code % len(self.kinds)]
        base, _, transposed = kind.partition("^")
        return f"{base}{self.index(code)}" + ("^T" if transposed else "")

    @cached_property
    def names(self):
        return tuple(self.name(c) for c in range(self.size))

    @cached_property
    def transpose(self):
        """``transpose[c]``: code of the transpose of letter ``c`` (int array)."""
        n = len(self.kinds)
        flip = _TRANSPOSED_KIND[self.model]
        return np.array([(c // n) * n + flip[c % n] for c in range(self.size)], dtype=np.int64)

    # ---- packed words --------------------------------------------------------------
    @property
    def bits(self):
        """Bits per letter in a packed word."""
        return max(1, (self.size - 1).bit_length())

    @property
    def max_length(self):
        """Longest word that packs into 63 bits (e.g. 63 for tied K = 2, 21 for untied K = 2)."""
        return 63 // self.bits

    def check_length(self, w):
        if w > self.max_length:
            raise WordError(
                f"words of length {w} do not fit the packed form of the {self.model} model "
                f"with K = {self.K} (at most {self.max_length} letters); lower the degree"
            )

    def _shift(self, n_letters):
        return np.uint64(self.bits * n_letters)

    def _mask(self, n_letters):
        return np.uint64((1 << (self.bits * n_letters)) - 1)

    def pack(self, digits):
        """Pack an integer array of shape (n, w) of letter codes into uint64 codes, shape (n,)."""
        digits = np.asarray(digits)
        self.check_length(digits.shape[1])
        packed = np.zeros(len(digits), dtype=np.uint64)
        for column in digits.T:
            packed = (packed << self._shift(1)) | column.astype(np.uint64)
        return packed

    def unpack(self, packed, w):
        """Letter codes of packed words of length ``w``: int64 array of shape (n, w)."""
        packed = np.asarray(packed, dtype=np.uint64)
        digits = np.empty((len(packed), w), dtype=np.int64)
        for j in range(w):
            digits[:, j] = (packed >> self._shift(w - 1 - j)) & self._mask(1)
        return digits

    def splice(self, packed, w, i, replacement):
        """Replace letter ``i`` (0-based) of packed words of length ``w`` by ``replacement``.

        ``replacement`` is a tuple of letter codes; the result has length
        ``w - 1 + len(replacement)`` and is not canonicalised.
        """
        head = packed >> self._shift(w - i)
        tail = packed & self._mask(w - 1 - i)
        middle = 0
        for c in replacement:
            middle = (middle << self.bits) | int(c)
        body = (head << self._shift(len(replacement))) | np.uint64(middle)
        return (body << self._shift(w - 1 - i)) | tail

    def transpose_reverse(self, packed, w):
        """Packed transpose-reversal ``(Z_1 … Z_w) ↦ (Z_wᵀ … Z_1ᵀ)``."""
        result = np.zeros_like(packed)
        rest = packed.copy()
        identity = np.array_equal(self.transpose, np.arange(self.size))
        for _ in range(w):
            letter = rest & self._mask(1)
            if not identity:
                letter = self.transpose.astype(np.uint64)[letter.astype(np.intp)]
            result = (result << self._shift(1)) | letter
            rest >>= self._shift(1)
        return result

    def canonicalize(self, packed, w):
        """Canonical forms of packed words of length ``w`` (uint64 array, same shape).

        Least of the ``2w`` rotations of the word and of its transpose-reversal; a
        rotation is two shifts and a mask, so the cost is O(w) per word.
        """
        packed = np.asarray(packed, dtype=np.uint64)
        reversal = self.transpose_reverse(packed, w)
        best = np.minimum(packed, reversal)
        for word in (packed, reversal):
            for s in range(1, w):
                rotated = ((word & self._mask(w - s)) << self._shift(s)) | (word >> self._shift(w - s))
                np.minimum(best, rotated, out=best)
        return best

    def enumerate_packed(self, w):
        """All canonical packed words of length ``w``, ascending (uint64 array).

        Scans the ``size**w`` words in blocks and keeps those equal to their canonical
        form: about ``2w`` candidates per canonical word, memory bounded by the block.
        """
        self.check_length(w)
        total = self.size**w
        kept = []
        for start in range(0, total, _CHUNK):
            block = self._from_radix(np.arange(start, min(start + _CHUNK, total), dtype=np.uint64), w)
            kept.append(block[self.canonicalize(block, w) == block])
        return np.sort(np.concatenate(kept))

    def _from_radix(self, numbers, w):
        """Packed words whose letters are the base-``size`` digits of ``numbers``."""
        if self.size == 1 << self.bits:
            return numbers
        packed = np.zeros_like(numbers)
        radix = np.uint64(self.size)
        for j in range(w):
            numbers, digit = np.divmod(numbers, radix)
            packed |= digit << self._shift(j)
        return packed


def _parse_letter(token, model, K):
    match = _TOKEN.match(token)
    kinds = _KINDS[model]
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
    return ", ".join(k.replace("^", "k^") if "^" in k else k + "k" for k in _KINDS[model])


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
    check_model(model)
    n = len(_KINDS[model])
    return " ".join(Alphabet(model, max(codes) // n + 1).name(int(c)) for c in codes)


def canonical_codes(codes, model):
    """Canonical form of a word given as letter codes (Booth's least rotation, O(w))."""
    codes = tuple(int(c) for c in codes)
    n = len(_KINDS[model])
    flip = _TRANSPOSED_KIND[model]
    reversal = tuple((c // n) * n + flip[c % n] for c in reversed(codes))
    return min(_least_rotation(codes), _least_rotation(reversal))


def _least_rotation(codes):
    k = least_rotation(list(codes))
    return codes[k:] + codes[:k]


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
