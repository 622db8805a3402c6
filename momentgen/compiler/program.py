"""A compiled hierarchy: `Program` (its CSR storage, lookups, the saved-array form, diagnostics) and its
coefficient slots (`Coefficient`); `momentgen.compiler.hierarchy.build` makes one."""

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse

from ..core.errors import ModelError, WordError
from ..models import NOISE_FAMILIES
from ..models.words import parse
from . import printers

__all__ = ["Coefficient", "Program"]


@dataclass(frozen=True)
class Coefficient:
    """One coefficient slot of the hierarchy: entry ``(k, l)`` (or ``k``) of a family, or ``gamma``.

    ``factor`` is the constant multiplying it in every term: the term's contribution to
    ``dμ_i/dt`` is ``factor · value · multiplicity · μ_target``. ``family`` names the kind's
    coefficient array (`momentgen.models.Family`); ``k`` and ``l`` are 1-based (``l`` is None
    for a family over one index, both None for the weight decay ``gamma``).
    """

    family: str
    k: int
    l: int
    factor: float
    meaning: str

    @property
    def name(self):
        """Display name, e.g. ``Gamma[1,2]``, ``beta[1]``, ``gamma``."""
        if self.k is None:
            return self.family
        return f"{self.family}[{self.k}]" if self.l is None else f"{self.family}[{self.k},{self.l}]"


def _unique_words(lengths, codes):
    """((lengths, packed codes) of the distinct words among (``lengths``, ``codes``), sorted by length then code;
    the index of each input in them)."""
    index = np.zeros(len(codes), np.int64)
    out_lengths, out_codes, offset = [], [], 0
    for w in np.unique(lengths):
        at = np.flatnonzero(lengths == w)
        unique, inverse = np.unique(codes[at], return_inverse=True)
        index[at] = offset + inverse.ravel()
        out_lengths.append(np.full(len(unique), w, np.int64))
        out_codes.append(unique)
        offset += len(unique)
    if not out_codes:
        return (np.zeros(0, np.int64), np.zeros(0, np.uint64)), index
    return (np.concatenate(out_lengths), np.concatenate(out_codes)), index


def _merge_pairs(rows, symbols, left, right, mults, n_rows):
    """Sum the multiplicities of equal (row, symbol, {left, right}) quadratic terms; CSR arrays, row-major,
    ``left ≤ right`` (−1, the empty word, first)."""
    if not len(rows):
        empty = np.zeros(0, np.int64)
        return np.zeros(n_rows + 1, np.int64), empty, empty, empty, empty
    left, right = np.minimum(left, right), np.maximum(left, right)
    n_symbols, side = int(symbols.max()) + 1, n_rows + 1
    if float(n_rows) * n_symbols * side * side < 2.0**62:  # one int64 key per term: fast
        key = ((rows * n_symbols + symbols) * side + (left + 1)) * side + (right + 1)
        key, inverse = np.unique(key, return_inverse=True)
        keys = np.stack(
            [key // (n_symbols * side * side), key // (side * side) % n_symbols, key // side % side - 1, key % side - 1]
        )
    else:
        keys, inverse = np.unique(np.stack([rows, symbols, left, right]), axis=1, return_inverse=True)
    mult = np.bincount(inverse.ravel(), weights=mults, minlength=keys.shape[1]).astype(np.int64)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(keys[0], minlength=n_rows))])
    return indptr, keys[1], keys[2], keys[3], mult


def _merge(rows, symbols, targets, mults, n_rows, n_symbols, n_targets):
    """Sum the multiplicities of equal (row, symbol, target) terms; CSR arrays, row-major."""
    key = (rows * n_symbols + symbols) * n_targets + targets
    key, inverse = np.unique(key, return_inverse=True)
    mult = np.bincount(inverse.ravel(), weights=mults, minlength=len(key)).astype(np.int64)
    target = key % n_targets
    symbol = (key // n_targets) % n_symbols
    row = key // (n_targets * n_symbols)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(row, minlength=n_rows))])
    return indptr, symbol, target, mult


class Program:
    """A compiled truncation: state words and the sparse terms of their derivatives.

    State words are sorted by (degree, packed code); ``words[i]`` is the canonical text of
    state ``i``. CSR arrays ``indptr, symbol, target, multiplicity`` hold the terms (see the
    module docstring); ``dropped_*`` hold the terms whose target has degree > M and was
    set to 0 by the zero closure (``dropped_target`` indexes `dropped_words`, of lengths ``dropped_lengths``:
    M + 1, or up to M + 3 where a rule inserts Σ X Σ); ``noise_*``
    (``noise_indptr, noise_symbol, noise_left, noise_right, noise_multiplicity``) the quadratic
    terms of the finite-learning-rate term, empty unless built with ``noise=True``.
    """

    def __init__(self, model, degree, symbols, lengths, packed, csr, dropped, dropped_csr, parent, via, reason, noise):
        self.model, self.degree, self.symbols = model, degree, tuple(symbols)
        self.lengths, self.packed = lengths, packed
        self.indptr, self.symbol, self.target, self.multiplicity = csr
        self.dropped_lengths, self.dropped_packed = dropped
        self.dropped_indptr, self.dropped_symbol, self.dropped_target, self.dropped_multiplicity = dropped_csr
        self.noise_indptr, self.noise_symbol, self.noise_left, self.noise_right, self.noise_multiplicity = noise
        self.parent, self.via, self.reason = parent, via, reason
        self._indices = {}  # word text → state index, for `index` (the same few words are looked up often)

    @property
    def has_noise(self):
        """True when the program carries the finite-learning-rate term (built with ``noise=True``)."""
        return any(c.family in NOISE_FAMILIES for c in self.symbols)

    @classmethod
    def _from_derivation(cls, model, degree, symbols, known, origin, reasons, terms, dropped, pairs):
        order = sorted(known)
        lengths = np.concatenate([np.full(len(known[w]), w, np.int64) for w in order])
        packed = np.concatenate([known[w] for w in order])
        locate = _Locator(known)
        n, n_sym = len(packed), len(symbols)

        row_w, row_c, sym, tgt_w, tgt_c, mult = terms.arrays()
        csr = _merge(locate(row_w, row_c), sym, locate(tgt_w, tgt_c), mult, n, n_sym, n)

        row_w, row_c, sym, tgt_w, tgt_c, mult = dropped.arrays()
        dropped_words, dropped_target = _unique_words(tgt_w, tgt_c)
        dropped_csr = _merge(locate(row_w, row_c), sym, dropped_target, mult, n, n_sym, len(dropped_words[0]))

        row_w, row_c, sym, w1, c1, w2, c2, mult = pairs.arrays()
        noise = _merge_pairs(locate(row_w, row_c), sym, locate.pieces(w1, c1), locate.pieces(w2, c2), mult, n)

        parent, via = np.full(n, -1), np.full(n, -1)
        reason = {}
        for w in order:
            codes, parent_w, parent_c, via_sym, reason_ids = (np.concatenate(c) for c in zip(*origin[w]))
            at = locate(np.full(len(codes), w), codes)
            has_parent = parent_w >= 0
            parent[at[has_parent]] = locate(parent_w[has_parent], parent_c[has_parent])
            via[at] = via_sym
            reason.update({int(i): reasons[r] for i, r in zip(at[~has_parent], reason_ids[~has_parent])})
        return cls(model, degree, symbols, lengths, packed, csr, dropped_words, dropped_csr, parent, via, reason, noise)

    # ---- storage -------------------------------------------------------------------------------
    _ARRAYS = (
        "lengths",
        "packed",
        "indptr",
        "symbol",
        "target",
        "multiplicity",
        "dropped_lengths",
        "dropped_packed",
        "dropped_indptr",
        "dropped_symbol",
        "dropped_target",
        "dropped_multiplicity",
        "noise_indptr",
        "noise_symbol",
        "noise_left",
        "noise_right",
        "noise_multiplicity",
        "parent",
        "via",
    )

    def to_arrays(self):
        """The program as a dict of numpy arrays (plus symbol names/factors and root reasons)."""
        out = {name: getattr(self, name) for name in self._ARRAYS}
        out["symbol_families"] = np.array([s.family for s in self.symbols])
        out["symbol_k"] = np.array([-1 if s.k is None else s.k for s in self.symbols], dtype=np.int64)
        out["symbol_l"] = np.array([-1 if s.l is None else s.l for s in self.symbols], dtype=np.int64)
        out["symbol_factors"] = np.array([s.factor for s in self.symbols])
        out["symbol_meanings"] = np.array([s.meaning for s in self.symbols])
        out["reason_index"] = np.array(sorted(self.reason), dtype=np.int64)
        out["reason_text"] = np.array([self.reason[i] for i in sorted(self.reason)])
        return out

    @classmethod
    def from_arrays(cls, model, degree, arrays):
        """Inverse of `to_arrays`; every index is checked against its range first (a corrupt or
        edited file is a `ModelError`, never an out-of-bounds read in the compiled kernel)."""
        missing = [
            name for name in (*cls._ARRAYS, *_SYMBOL_ARRAYS, "reason_index", "reason_text") if name not in arrays
        ]
        if missing:
            raise ModelError(f"program arrays lack {missing}")
        a = {name: np.asarray(arrays[name]) for name in cls._ARRAYS}
        _check_program_arrays(a, len(arrays["symbol_families"]), model, degree)
        symbols = [
            Coefficient(str(f), None if k < 0 else int(k), None if l < 0 else int(l), float(c), str(m))
            for f, k, l, c, m in zip(*(arrays[name] for name in _SYMBOL_ARRAYS))
        ]
        names = {f.name for f in model.definition.families + model.definition.noise_families} | {"gamma"}
        if any(c.family not in names for c in symbols):
            raise ModelError(
                f"program arrays name coefficient families {sorted({c.family for c in symbols})}, "
                f"not those of the {model.kind} model {sorted(names)}"
            )
        reason = {int(i): str(r) for i, r in zip(arrays["reason_index"], arrays["reason_text"])}
        csr = a["indptr"], a["symbol"], a["target"], a["multiplicity"]
        dropped = a["dropped_indptr"], a["dropped_symbol"], a["dropped_target"], a["dropped_multiplicity"]
        noise = tuple(a[f"noise_{name}"] for name in ("indptr", "symbol", "left", "right", "multiplicity"))
        return cls(
            model,
            degree,
            symbols,
            a["lengths"],
            a["packed"],
            csr,
            (a["dropped_lengths"], a["dropped_packed"]),
            dropped,
            a["parent"],
            a["via"],
            reason,
            noise,
        )

    # ---- looking things up ------------------------------------------------------------
    @cached_property
    def word_codes(self):
        """Letter codes of each state word (tuples); index = state index."""
        return _unpack_all(self.model.alphabet, self.lengths, self.packed)

    @cached_property
    def dropped_word_codes(self):
        """Letter codes of each dropped word (degree > M)."""
        return _unpack_all(self.model.alphabet, self.dropped_lengths, self.dropped_packed)

    @cached_property
    def words(self):
        """Canonical text of each state word; index = state index."""
        names = self.model.alphabet.names
        return [" ".join(names[c] for c in codes) for codes in self.word_codes]

    @cached_property
    def dropped_words(self):
        """Canonical text of each dropped word (degree > M)."""
        names = self.model.alphabet.names
        return [" ".join(names[c] for c in codes) for codes in self.dropped_word_codes]

    def index(self, word):
        """State index of a word (any representative of its class, text syntax); O(w + log n), then cached."""
        if word not in self._indices:
            self._indices[word] = self._locate(word)
        return self._indices[word]

    def _locate(self, word):
        a = self.model.alphabet
        codes = parse(word, self.model)
        w = len(codes)
        key = a.canonicalize(a.pack(np.array([codes])), w)[0]
        lo, hi = np.searchsorted(self.lengths, [w, w + 1])
        j = lo + int(np.searchsorted(self.packed[lo:hi], key))
        if j < hi and self.packed[j] == key:
            return int(j)
        text = " ".join(a.names[c] for c in a.unpack(np.array([key]), w)[0])
        raise WordError(
            f"{word!r} (canonical {text!r}) is not a state word of this truncation; add it to the observables"
        )

    @property
    def nnz(self):
        return len(self.symbol)

    def words_per_degree(self):
        """``{degree: number of state words}``."""
        w, counts = np.unique(self.lengths, return_counts=True)
        return {int(a): int(b) for a, b in zip(w, counts)}

    # ---- evaluating ------------------------------------------------------------------------
    def coefficient_vector(self, values):
        """Coefficient values as an array aligned with `symbols`.

        ``values`` is one of: a mapping *family name → array* (what the kinds compute, e.g.
        ``{"Gamma": (K, K) array, "gamma": 0.0}``), a mapping *symbol name → value* (every
        symbol, e.g. ``{"Gamma[1,1]": 2.0, …, "gamma": 0.0}``), or an array of length
        ``len(symbols)``.
        """
        if hasattr(values, "keys"):
            families = {c.family for c in self.symbols}
            if families <= set(values):
                return self._gather(values)
            missing = [c.name for c in self.symbols if c.name not in values]
            unknown = sorted(set(values) - {c.name for c in self.symbols})
            if missing or unknown:
                raise ModelError(
                    f"coefficient values: missing {missing}, unknown {unknown}; symbols are "
                    f"{[c.name for c in self.symbols]}"
                )
            return np.array([float(values[c.name]) for c in self.symbols])
        values = np.asarray(values, dtype=float)
        if values.shape != (len(self.symbols),):
            raise ModelError(f"`coefficients` has shape {values.shape}; this program has {len(self.symbols)} symbols")
        return values

    def family_arrays(self, values):
        """The coefficient values as the kind's family arrays (the layout of `KindMatrices.factor_velocities`):
        ``{family: (K, K) or (K,) array, "gamma": float}``; entries without a slot are 0. ``values``:
        as for `coefficient_vector`."""
        vector, K = self.coefficient_vector(values), self.model.K
        families = self.model.definition.families + (self.model.definition.noise_families if self.has_noise else ())
        out = {f.name: np.zeros((K, K) if f.pairs else K) for f in families}
        for value, c in zip(vector, self.symbols):
            if c.k is None:
                out[c.family] = float(value)
            elif c.l is None:
                out[c.family][c.k - 1] = value
            else:
                out[c.family][c.k - 1, c.l - 1] = value
        return out

    @cached_property
    def _slots(self):
        """{family: (symbol positions, 0-based k, 0-based l or None)} for gathering family arrays."""
        out = {}
        for family in dict.fromkeys(c.family for c in self.symbols):
            at = [i for i, c in enumerate(self.symbols) if c.family == family]
            k = np.array([self.symbols[i].k - 1 for i in at]) if self.symbols[at[0]].k is not None else None
            l = np.array([self.symbols[i].l - 1 for i in at]) if self.symbols[at[0]].l is not None else None
            out[family] = (np.array(at), k, l)
        return out

    def _gather(self, arrays):
        """The coefficient vector from family arrays (vectorised: one fancy index per family)."""
        out = np.empty(len(self.symbols))
        for family, (at, k, l) in self._slots.items():
            value = np.asarray(arrays[family], dtype=float)
            out[at] = value if k is None else (value[k] if l is None else value[k, l])
        return out

    def linear_operator(self, coefficients):
        """The sparse matrix ``L`` (CSR) with ``dμ/dt = L μ`` at fixed coefficient values."""
        c = self.coefficient_vector(coefficients) * np.array([s.factor for s in self.symbols])
        n = len(self.packed)
        return scipy.sparse.csr_matrix((c[self.symbol] * self.multiplicity, self.target, self.indptr), shape=(n, n))

    def evaluate(self, mu, coefficients, dropped_mu=None):
        """``dμ/dt`` at the moments ``mu`` (shape (n_words,)) and coefficient values.

        ``dropped_mu`` (shape (n_dropped,)), if given, supplies the dropped words of
        degree M + 1 instead of the zero closure.
        """
        mu = np.asarray(mu, dtype=float)
        if mu.shape != self.packed.shape:
            raise ModelError(
                f"`mu` has shape {mu.shape}; this program has {len(self.packed)} words (degree {self.degree})"
            )
        out = self.linear_operator(coefficients) @ mu
        c = self.coefficient_vector(coefficients) * np.array([s.factor for s in self.symbols])
        if dropped_mu is not None:
            data = c[self.dropped_symbol] * self.dropped_multiplicity
            shape = (len(self.packed), len(self.dropped_packed))
            out += scipy.sparse.csr_matrix((data, self.dropped_target, self.dropped_indptr), shape=shape) @ dropped_mu
        if len(self.noise_symbol):
            extended = np.append(mu, 1.0)  # index −1: the empty word
            terms = (
                c[self.noise_symbol] * self.noise_multiplicity * extended[self.noise_left] * extended[self.noise_right]
            )
            out += np.bincount(self.term_rows("noise"), weights=terms, minlength=len(mu))
        return out

    # ---- diagnostics (`printers` prints; these are the documented entry points) ----------------------
    def why(self, word):
        """The chain of substitutions that brought ``word`` into the state, as text lines (`printers.why`)."""
        return printers.why(self, word)

    def dropped_in(self):
        """``{dropped word: number of state words whose derivative needs it}``."""
        counts = np.bincount(self.dropped_target, minlength=len(self.dropped_packed))
        return dict(zip(self.dropped_words, (int(c) for c in counts)))

    def summary(self):
        """A few lines: words per degree, nnz, dropped words and coefficient symbols (`printers.summary`)."""
        return printers.summary(self)

    def to_latex(self, words=None, limit=None):
        """The derived equations as a LaTeX ``align*`` block in the paper's notation (`printers.latex`)."""
        return printers.latex(self, words, limit)

    def term_rows(self, part="linear"):
        """The state index (row) of each term of a ``part``: ``"linear"``, ``"dropped"`` or ``"noise"``."""
        indptr = {"linear": self.indptr, "dropped": self.dropped_indptr, "noise": self.noise_indptr}[part]
        return np.repeat(np.arange(len(self.packed)), np.diff(indptr))

    def graph(self):
        """The dependency graph as a ``networkx.DiGraph`` (`printers.graph`)."""
        return printers.graph(self)


def _check_program_arrays(a, n_symbols, model, degree):
    """Shapes, integer types and index ranges of stored program arrays (see `Program.from_arrays`)."""
    n, n_dropped = len(a["packed"]), len(a["dropped_packed"])

    def require(ok, what):
        if not ok:
            raise ModelError(f"program arrays: {what}")

    for name in (field for field in Program._ARRAYS if not field.endswith("packed")):  # packed: below
        require(a[name].ndim == 1 and a[name].dtype.kind in "iu", f"{name} must be a 1-d integer array")
    require(a["packed"].dtype == np.uint64 and a["dropped_packed"].dtype == np.uint64, "words must be uint64 codes")
    require(
        len(a["lengths"]) == n and np.all((a["lengths"] >= 1) & (a["lengths"] <= degree)),
        f"word lengths must lie in 1..{degree}",
    )
    require(
        len(a["dropped_lengths"]) == n_dropped
        and np.all((a["dropped_lengths"] > degree) & (a["dropped_lengths"] <= model.alphabet.max_length)),
        f"dropped word lengths must lie in {degree + 1}..{model.alphabet.max_length}",
    )
    for prefix, rows, columns in (("", n, n), ("dropped_", n, n_dropped)):
        indptr, nnz = a[prefix + "indptr"], len(a[prefix + "symbol"])
        require(
            len(indptr) == rows + 1 and indptr[0] == 0 and indptr[-1] == nnz and np.all(np.diff(indptr) >= 0),
            f"{prefix}indptr is not a CSR row pointer for {rows} rows and {nnz} terms",
        )
        require(
            len(a[prefix + "target"]) == nnz and len(a[prefix + "multiplicity"]) == nnz,
            f"{prefix}target and {prefix}multiplicity must have one entry per term",
        )
        require(
            np.all((a[prefix + "symbol"] >= 0) & (a[prefix + "symbol"] < n_symbols)),
            f"{prefix}symbol indices out of range 0..{n_symbols - 1}",
        )
        require(
            np.all((a[prefix + "target"] >= 0) & (a[prefix + "target"] < columns)),
            f"{prefix}target indices out of range 0..{columns - 1}",
        )
    indptr, nnz = a["noise_indptr"], len(a["noise_symbol"])
    require(
        (len(indptr) == n + 1 or (len(indptr) == 1 and nnz == 0))
        and indptr[0] == 0
        and indptr[-1] == nnz
        and np.all(np.diff(indptr) >= 0),
        f"noise_indptr is not a CSR row pointer for {n} rows and {nnz} terms",
    )
    require(
        all(len(a[f"noise_{x}"]) == nnz for x in ("left", "right", "multiplicity")),
        "noise_left, noise_right and noise_multiplicity must have one entry per term",
    )
    require(np.all((a["noise_symbol"] >= 0) & (a["noise_symbol"] < n_symbols)), "noise_symbol out of range")
    for side in ("noise_left", "noise_right"):
        require(np.all((a[side] >= -1) & (a[side] < n)), f"{side} indices out of range -1..{n - 1}")
    require(len(a["parent"]) == n and np.all((a["parent"] >= -1) & (a["parent"] < n)), "parent out of range")
    require(len(a["via"]) == n and np.all((a["via"] >= -1) & (a["via"] < n_symbols)), "via out of range")
    alphabet = model.alphabet
    require(np.all(a["packed"] < np.uint64(1) << np.uint64(alphabet.bits * degree)), "word codes out of range")


_SYMBOL_ARRAYS = ("symbol_families", "symbol_k", "symbol_l", "symbol_factors", "symbol_meanings")


class _Locator:
    """Maps (length, packed canonical code) pairs to state indices."""

    def __init__(self, known):
        self.known = known
        self.offsets, total = {}, 0
        for w in sorted(known):
            self.offsets[w], total = total, total + len(known[w])

    def __call__(self, lengths, codes):
        out = np.empty(len(codes), np.int64)
        for w in np.unique(lengths):
            at = lengths == w
            out[at] = self.offsets[int(w)] + np.searchsorted(self.known[int(w)], codes[at])
        return out

    def pieces(self, lengths, codes):
        """As a call, with the empty word (length 0) at index −1."""
        out = np.full(len(codes), -1, np.int64)
        word = lengths > 0
        out[word] = self(lengths[word], codes[word])
        return out


def _unpack_all(alphabet, lengths, packed):
    out = [None] * len(packed)
    for w in np.unique(lengths):
        at = np.flatnonzero(lengths == w)
        for i, row in zip(at, alphabet.unpack(packed[at], w)):
            out[i] = tuple(int(c) for c in row)
    return out
