"""Packed words over a model kind's letters: `Alphabet`.

A word of length ``w`` packs into one ``uint64``, ``bits`` bits a letter, first letter most
significant, so numeric order is lexicographic order and a rotation is two shifts and a mask
— the bulk arithmetic of `momentgen.models.words` and `momentgen.compiler.hierarchy` (10⁵–10⁶ words). The
letters and their transposes come from the kind (`ModelKind.letter_kinds`, `transposes`).
"""

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..core.errors import WordError
from . import registry
from .base import SIGMA

__all__ = ["Alphabet"]

_CHUNK = 1 << 21  # candidate words per block when enumerating (bounds memory)


@dataclass(frozen=True)
class Alphabet:
    """The letters of one model with ``K`` indices, and packed-word arithmetic.

    Letter code ``c`` has index ``k = c // n_kinds + 1`` and kind ``kinds[c % n_kinds]``. With ``sigma`` the data
    covariance Σ (MATH.md §10) is one more letter, ``Sigma``, after all of them (code ``K·n_kinds``, index 0:
    shared by every index, never trainable, its own transpose). Packed words of length ``w`` are ``uint64``
    numbers in base ``base``; lengths up to `max_length` fit (e.g. 63 for tied K = 2, 21 for untied K = 2).
    """

    model: str
    K: int
    sigma: bool = False

    def __post_init__(self):
        registry.get(self.model)  # a known kind, or a WordError naming the choices
        if isinstance(self.K, bool) or not isinstance(self.K, (int, np.integer)) or self.K < 1:
            raise WordError(f"K must be a positive integer (number of indices), got {self.K!r}")

    @property
    def definition(self):
        """The `ModelKind` whose letters these are."""
        return registry.get(self.model)

    @property
    def kinds(self):
        return self.definition.letter_kinds

    @property
    def size(self):
        """Number of letters."""
        return self.K * len(self.kinds) + int(self.sigma)

    @property
    def sigma_code(self):
        """Code of the letter Σ (None without it)."""
        return self.K * len(self.kinds) if self.sigma else None

    def code(self, kind, k):
        """Code of the letter of kind ``kind`` (e.g. ``"M^T"``) and 1-based index ``k``."""
        return (k - 1) * len(self.kinds) + self.kinds.index(kind)

    def index(self, code):
        """1-based index ``k`` of a letter code (0 for Σ)."""
        return 0 if code == self.sigma_code else code // len(self.kinds) + 1

    def name(self, code):
        if code == self.sigma_code:
            return SIGMA
        kind = self.kinds[code % len(self.kinds)]
        base, _, transposed = kind.partition("^")
        return f"{base}{self.index(code)}" + ("^T" if transposed else "")

    def latex(self, code):
        r"""The LaTeX of a letter — ``S_{1}``, ``M_{2}^{\top}``, ``\Sigma`` — from its kind, index and transpose."""
        if code == self.sigma_code:
            return r"\Sigma"
        base, _, transposed = self.kinds[code % len(self.kinds)].partition("^")
        return f"{base}_{{{self.index(code)}}}" + (r"^{\top}" if transposed else "")

    @cached_property
    def names(self):
        return tuple(self.name(c) for c in range(self.size))

    @cached_property
    def transpose(self):
        """``transpose[c]``: code of the transpose of letter ``c`` (int array)."""
        table = self.definition.transpose_table(self.K)
        return np.append(table, [self.sigma_code]).astype(np.int64) if self.sigma else table

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
