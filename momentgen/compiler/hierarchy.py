"""The moment hierarchy compiled into a sparse, data-driven program (MATH.md §3–§6).

For each model the matrix flow ``dZ/dt`` of every trainable letter ``Z`` is a sum of
*substitution rules*: replace ``Z`` by a short product of letters, times a scalar
coefficient (Γ_kl for tied; β_k and a⁽ʳ⁾_kl for untied; A_kl and B_kl for direct), plus
weight decay γ. By the product rule the derivative of a word is the sum, over its
trainable letters, of the word with that letter substituted. `build` applies the rules
to whole batches of packed words at once (`momentgen.models.words.Alphabet`), starting from the
requested observables and the words the coefficients need, until no new word of degree
``≤ M`` appears (the *demand-driven closure*). Longer words are dropped: the paper's
zero closure Π_M. The result is a `Program`, in CSR form::

    dμ_i/dt = Σ_{j in row i} factor[s_j] · value[s_j] · mult_j · μ[target_j]      (s_j = symbol[j])

where ``value`` are the coefficient values (computed elsewhere from the potential Φ) and
``factor`` the constants of the model (e.g. −1 for Γ, −γ/2 → factor −½ for tied weight
decay). Time axes: tied ``t = 4nη/d``; untied (slow phase) and direct ``τ = nη/d``.

With ``noise=True`` the program also carries the finite-learning-rate term of online SGD
(docs/FINITE_LR.md): *quadratic* terms, each a coefficient slot κN1_kl or κN2_kl times the
product of two state moments (or of one, or the constant 1: the empty word), in a second CSR
block ``noise_*``::

    dμ_i/dt += Σ_{j in noise row i} factor[s_j] · value[s_j] · mult_j · μ[left_j] · μ[right_j]

(``left``/``right`` = −1 is the empty word, μ = 1). For every pair of trainable positions of
a word they come from the two noise insertions (the Itô pair term), for every trainable
position from the second-order change of the letter (the isotropic drift). The pieces have
degree ≤ the word's, so they never add dropped words; κ is a coefficient value, so κ sweeps
need no rebuild.

Cost: the work is linear in the number of terms (nnz); tied K = 2 to M = 20 (58 218
words) or untied K = 2 to M = 6 (26 396 words) take about a second. Nothing here builds a
symbolic expression per word, and nothing imports numba.
"""

import math

import numpy as np

from ..core.errors import ModelError
from ..models import NOISE_FAMILIES, Model
from ..models.words import parse
from .program import Coefficient, Program

__all__ = ["Model", "Coefficient", "Program", "build", "estimate", "check_size", "coefficient_symbols"]


def coefficient_symbols(model, rules, noise=False):
    """The coefficient slots the rules use, in order of first use, then (``noise``) the finite-learning-rate
    slots N1_kl, N2_kl of every trainable k, then ``gamma``; and each rule's slot."""
    definition, index, symbols, slots = model.definition, {}, [], []
    for rule in rules:
        key = (rule.family, rule.k, rule.l)
        if key not in index:
            entry = definition.family(rule.family)
            suffix = f"_{rule.k}{rule.l}" if rule.l is not None else f" of index {rule.k}"
            index[key] = len(symbols)
            symbols.append(Coefficient(rule.family, rule.k, rule.l, entry.factor, entry.meaning + suffix))
        slots.append(index[key])
    if noise:
        for entry in definition.noise_families:
            for k in model.trainable:
                for l in range(1, model.K + 1):
                    symbols.append(Coefficient(entry.name, k, l, entry.factor, f"{entry.meaning}_{k}{l}"))
    symbols.append(Coefficient("gamma", None, None, definition.weight_decay_factor, "weight decay"))
    return symbols, slots


# ---------------------------------------------------------------------------------------
# Derivation
# ---------------------------------------------------------------------------------------


class _Terms:
    """Growing term lists: (row length, row code, symbol, target length, target code, mult)."""

    def __init__(self):
        self.parts, self.count = [], 0

    def add(self, row_length, row_codes, symbols, target_length, target_codes, mults):
        n = len(row_codes)
        self.count += n
        self.parts.append((np.full(n, row_length), row_codes, symbols, np.full(n, target_length), target_codes, mults))

    def arrays(self):
        if not self.parts:
            empty = np.zeros(0, np.int64), np.zeros(0, np.uint64)
            return empty[0], empty[1], empty[0], empty[0], empty[1], empty[0]
        return tuple(np.concatenate(column) for column in zip(*self.parts))


class _PairTerms:
    """Growing quadratic term lists: (row length, row code, symbol, two (length, code) pieces, mult)."""

    def __init__(self):
        self.parts, self.count = [], 0

    def add(self, row_length, row_codes, symbols, pieces, mults):
        """``pieces``: two (lengths, codes) pairs of arrays, one entry per term."""
        (w1, c1), (w2, c2) = pieces
        n = len(row_codes)
        self.count += n
        self.parts.append((np.full(n, row_length), row_codes, symbols, w1, c1, w2, c2, mults))

    def arrays(self):
        if not self.parts:
            i, u = np.zeros(0, np.int64), np.zeros(0, np.uint64)
            return i, u, i, i, u, i, u, i
        return tuple(np.concatenate(column) for column in zip(*self.parts))


def _noise_batch(model, noise, slot, w, codes):
    """The finite-learning-rate terms of dμ/dt for packed canonical words of length ``w``.

    ``noise``: `ModelKind.noise_program`; ``slot[(family, k, l)]``: the coefficient slot. Returns a
    list of ``(rows, symbols, pieces, mults)``, ``pieces`` two ``(length, canonical codes)``:
    for a trainable letter at position p with a second-order term ``L h M h R``, μ(M) · μ(word with
    the letter replaced by L R); for trainable letters at p ≠ q with first-order terms ``L h R``
    and ``L' h R'``, μ(R Q L') · μ(R' P L) with Q the letters from p to q and P those from q back
    to p (cyclically). A pair of equal orientations of the noise takes N2, of opposite ones N1.

    Vectorised over words and positions: the word is rotated so that p comes first; each
    unordered pair {p, q} is taken once, as the rotation p with gap g = q − p ≤ w/2 (for g = w/2,
    from the first half only).

    With a data covariance Σ (MATH.md §10) the noise's covariance is ``N1 Σ_ac Σ_bd + N2 Σ_ad Σ_bc``: each
    contraction of two noise matrices carries one Σ where they stood — μ(M Σ) · μ(L Σ R …), and
    μ(R Q L' Σ) · μ(R' P L Σ).
    """
    sigma = () if model.sigma_code is None else (model.sigma_code,)
    digits = model.alphabet.unpack(codes, w)
    rows = np.tile(np.arange(len(codes)), w)
    rotated = np.concatenate([np.roll(digits, -p, axis=1) for p in range(w)])  # row j·n + i: word i from p = j
    first_half = np.repeat(np.arange(w) < w / 2, len(codes))
    out = []

    def emit(at, families_same, k, l, first, second):
        symbols = np.where(families_same, slot["N2"][k, l], slot["N1"][k, l])
        out.append((rows[at], symbols, [first, second], np.ones(len(at), np.int64)))

    for letter, (k, first_p, second_p) in noise.items():
        at = np.flatnonzero(rotated[:, 0] == letter)
        if not at.size:
            continue
        word = rotated[at]
        for left, t1, middle, t2, right in second_p:
            rest = np.concatenate([_fixed(left + sigma + right, len(at)), word[:, 1:]], axis=1)
            emit(
                at,
                np.full(len(at), t1 == t2),
                np.full(len(at), k),
                np.full(len(at), k),
                _fixed(middle + sigma, len(at)),
                rest,
            )
        for g in range(1, w // 2 + 1):
            for letter_q, (l, first_q, _) in noise.items():
                pair = at[(word[:, g] == letter_q) & (first_half[at] if 2 * g == w else True)]
                if not pair.size:
                    continue
                between, outside, n = rotated[pair, 1:g], rotated[pair, g + 1 :], len(pair)
                for left, t1, right in first_p:
                    for left_q, t2, right_q in first_q:
                        emit(
                            pair,
                            np.full(n, t1 == t2),
                            np.full(n, k),
                            np.full(n, l),
                            np.concatenate([_fixed(right, n), between, _fixed(left_q + sigma, n)], axis=1),
                            np.concatenate([_fixed(right_q, n), outside, _fixed(left + sigma, n)], axis=1),
                        )
    return _canonical_pieces(model.alphabet, out)


def _canonical_pieces(alphabet, terms):
    """The terms with each piece (an (n, length) array of letter codes) replaced by (length, canonical
    packed codes); one canonicalisation per length (the empty word: length 0)."""
    by_length = {}
    for term in terms:
        for piece in term[2]:
            by_length.setdefault(piece.shape[1], []).append(piece)
    canonical = {}
    for length, pieces in by_length.items():
        stacked = np.concatenate(pieces)
        packed = alphabet.canonicalize(alphabet.pack(stacked), length) if length else np.zeros(len(stacked), np.uint64)
        canonical[length] = iter(np.split(packed, np.cumsum([len(p) for p in pieces])[:-1]))
    return [
        (rows, symbols, [(piece.shape[1], next(canonical[piece.shape[1]])) for piece in pieces], mults)
        for rows, symbols, pieces, mults in terms
    ]


def _fixed(letters, n):
    """The same letters on ``n`` rows: an (n, len(letters)) code array."""
    return np.broadcast_to(np.array(letters, np.int64).reshape(1, -1), (n, len(letters)))


def _noise_slots(symbols, K):
    """{"N1": table, "N2": table}: ``table[k, l]`` is the slot of family entry (k, l) (1-based; −1: none)."""
    out = {name: np.full((K + 1, K + 1), -1, np.int64) for name in NOISE_FAMILIES}
    for i, c in enumerate(symbols):
        if c.family in out:
            out[c.family][c.k, c.l] = i
    return out


def _derive_batch(model, rules_by_letter, gamma, w, codes):
    """All terms of dμ/dt for packed canonical words of length ``w``.

    Returns ``{target length: (row positions, symbols, raw target codes, mults)}``; the
    target codes are not yet canonical.
    """
    alphabet = model.alphabet
    digits = alphabet.unpack(codes, w)
    by_length = {}

    def emit(length, rows, symbol, targets, mults):
        by_length.setdefault(length, []).append((rows, np.full(len(rows), symbol, np.int64), targets, mults))

    for i in range(w):
        column = digits[:, i]
        for letter, rules in rules_by_letter.items():
            rows = np.flatnonzero(column == letter)
            if rows.size == 0:
                continue
            sub = codes[rows]
            ones = np.ones(len(rows), np.int64)
            for slot, replacement in rules:
                emit(w - 1 + len(replacement), rows, slot, alphabet.splice(sub, w, i, replacement), ones)
    n_trainable = model.is_trainable_letter()[digits].sum(axis=1)
    rows = np.flatnonzero(n_trainable)
    emit(w, rows, gamma, codes[rows], n_trainable[rows])
    return {length: tuple(np.concatenate(c) for c in zip(*parts)) for length, parts in by_length.items()}


def _roots(model, degree, observables):
    """Root words as {length: [(packed code, reason)]}, validated against the degree."""
    alphabet = model.alphabet
    roots = {}
    if isinstance(observables, str) and observables == "all":
        for w in range(1, degree + 1):
            roots[w] = [(c, "observables = all") for c in alphabet.enumerate_packed(w)]
        listed = []
    else:
        if isinstance(observables, str):
            raise ModelError(f"observables must be a list of words or the string 'all', got {observables!r}")
        listed = [(text, "observable") for text in observables]
    for text, reason in listed + model.definition.state_words(model):
        codes = parse(text, model)
        if len(codes) > degree:
            fix = "raise the degree" + (" or drop the observable" if reason == "observable" else "")
            raise ModelError(f"{text!r} ({reason}) has degree {len(codes)} > truncation degree {degree}: {fix}")
        packed = alphabet.canonicalize(alphabet.pack(np.array([codes])), len(codes))[0]
        roots.setdefault(len(codes), []).append((packed, reason))
    return roots


def check_degree(degree, model):
    """Return ``degree`` if a truncation of ``model`` at that degree can be compiled."""
    if isinstance(degree, bool) or not isinstance(degree, (int, np.integer)) or degree < 1:
        raise ModelError(f"degree must be an integer >= 1, got {degree!r}")
    growth = max((len(rule.replacement) - 1 for rule in model.definition.rules(model)), default=1)
    if degree + growth > model.alphabet.max_length:
        raise ModelError(
            f"degree {degree} is too large for the {model.kind} model with K = {model.K}: "
            f"the dropped words of degree {degree + growth} must fit in {model.alphabet.max_length} letters"
        )
    return int(degree)


#: Peak memory of a derivation (tracemalloc), bytes: per stored linear or dropped term (before merging), per
#: quadratic term (merged within its word), and per quadratic term of one `_NOISE_CHUNK` before merging (the
#: transient pieces); fitted on tied, untied, direct and symmetric programs — `benchmarks/bench_hierarchy.py`
#: prints the ratio of the estimate to the measured peak.
BYTES_PER_TERM = 180
BYTES_PER_PAIR = 230
BYTES_PER_PIECE = 200
MAX_BYTES = 8 * 2**30  # default cap of `build` (the machines have 24 GiB); raise with ``max_bytes``
MAX_SCAN = 5e9  # candidate words `Alphabet.enumerate_packed` may scan for observables = "all"
_SAMPLE = 256  # words of each length whose terms `estimate` counts
_EXACT = 4096  # lengths with at most this many candidate words are enumerated, not sampled


class _Rules:
    """What a derivation applies: the coefficient symbols, the substitution rules by letter (with their
    slots), the weight-decay slot, and with ``noise`` the kind's noise program and its slots."""

    def __init__(self, model, noise):
        rules = model.definition.rules(model)
        self.symbols, slots = coefficient_symbols(model, rules, noise)
        self.gamma = len(self.symbols) - 1
        self.noise = model.definition.noise_program(model) if noise else None
        self.noise_slot = _noise_slots(self.symbols, model.K)
        self.by_letter = {}
        for rule, slot in zip(rules, slots):
            self.by_letter.setdefault(rule.letter, []).append((slot, rule.replacement))


def estimate(model, degree, observables="all", noise=False):
    """What `build` would make of every word of degree ≤ M, estimated before anything is built.

    Returns ``{"words", "terms", "bytes", "scan"}``: the canonical words of each length (enumerated where
    there are few candidates, else the bracelet count ≈ necklaces/2 ≈ a^w/(2w) for an alphabet of a
    letters), the terms the derivation stores for them — counted by deriving a sample of `_SAMPLE` words
    of each length (the linear and dropped terms, and with ``noise`` the quadratic terms merged within
    each word, as `build` stores them) — the memory at `BYTES_PER_TERM`, and the candidates scanned to
    list every word (``"all"``). With listed observables the demand-driven closure is usually far
    smaller: the estimate then bounds it, and `build` counts as it goes.
    """
    degree = check_degree(degree, model)
    a = model.alphabet.size
    rules, rng = _Rules(model, noise), np.random.default_rng(0)
    words = linear = quadratic = chunk = 0.0
    for w in range(1, degree + 1):
        count, sample = _words_of_length(model.alphabet, w, rng)
        per_word = _terms_per_word(model, rules, w, sample)
        words += count
        linear += count * per_word[0]
        quadratic += count * per_word[1]
        chunk = max(chunk, min(count, _NOISE_CHUNK) * per_word[2])
    scan = float(a) ** degree if isinstance(observables, str) and observables == "all" else 0.0
    size = linear * BYTES_PER_TERM + quadratic * BYTES_PER_PAIR + chunk * BYTES_PER_PIECE
    return {"words": words, "terms": linear + quadratic, "bytes": size, "scan": scan}


def _words_of_length(alphabet, w, rng):
    """(number of canonical words of length ``w``, a sample of them): all of them where few, else the
    bracelet count and the canonical forms of random words."""
    if float(alphabet.size) ** w <= _EXACT:
        codes = alphabet.enumerate_packed(w)
        return float(len(codes)), codes[rng.permutation(len(codes))[:_SAMPLE]]
    digits = rng.integers(0, alphabet.size, (_SAMPLE, w))
    count = _necklaces(alphabet.size, w) / (2 if w > 2 else 1)
    return count, np.unique(alphabet.canonicalize(alphabet.pack(digits), w))


def _terms_per_word(model, rules, w, codes):
    """Average numbers of terms per word of ``codes`` (length ``w``): linear and dropped as `build` stores
    them, quadratic merged within the word, and quadratic before that merge."""
    linear = sum(len(batch[0]) for batch in _derive_batch(model, rules.by_letter, rules.gamma, w, codes).values())
    pieces = _noise_batch(model, rules.noise, rules.noise_slot, w, codes) if rules.noise else []
    merged = len(_merged_pairs(pieces)[0]) if pieces else 0
    return np.array([linear, merged, sum(len(t[0]) for t in pieces)]) / len(codes)


def _necklaces(a, w):
    """Number of necklaces of length w over a letters: (1/w) Σ_{d | w} φ(d) a^{w/d} (a float)."""
    total = 0.0
    for d in range(1, w + 1):
        if w % d == 0:
            phi = sum(1 for j in range(1, d + 1) if math.gcd(j, d) == 1)
            total += phi * float(a) ** (w // d)
    return total / w


def check_size(model, degree, observables="all", max_bytes=MAX_BYTES, noise=False):
    """Refuse (`ModelError`, with the estimate) a truncation of every word (``"all"``) larger than
    ``max_bytes`` or whose list of words would scan more than `MAX_SCAN` candidates; returns the
    `estimate`. With listed observables the estimate is only an upper bound (the demand closure of a few
    words is often far smaller): `build` then counts as it goes and stops at the budget instead."""
    size = estimate(model, degree, observables, noise)
    listed = not (isinstance(observables, str) and observables == "all")
    if listed and size["scan"] <= MAX_SCAN:
        return size
    if size["bytes"] > max_bytes or size["scan"] > MAX_SCAN:
        what = (
            f"needs about {size['bytes'] / 2**30:.3g} GiB ({size['words']:.3g} words, {size['terms']:.3g} terms)"
            if size["bytes"] > max_bytes
            else f"would scan {size['scan']:.3g} candidate words to list them all"
        )
        raise ModelError(
            f"the {model.kind} model with K = {model.K} at degree {degree} {what}; the limit is "
            f'{max_bytes / 2**30:g} GiB: lower the degree or K, list observables instead of "all", '
            "or raise [truncation] max_memory_gb"
        )
    return size


def build(model, degree, observables=(), max_bytes=MAX_BYTES, noise=False):
    """Derive the degree-``degree`` truncation of ``model``'s hierarchy as a `Program`.

    Parameters
    ----------
    model : Model
    degree : int
        Truncation degree M ≥ 1; words longer than M are set to 0 (zero closure).
    observables : list of str, or "all"
        Words (text syntax) the user wants. The order parameters the coefficients need
        (q, t; for untied also t^A, t^B and the words of β) are always added. With
        "all", every canonical word of degree ≤ M is a state word.
    max_bytes : float
        Refuse before building when the `estimate` exceeds it (`check_size`).
    noise : bool
        Also derive the finite-learning-rate term (quadratic terms; see the module docstring).

    Cost grows with the number of terms: about ``2 K w`` per tied word of length ``w`` (and,
    with ``noise``, about ``2 w²`` quadratic terms more).
    """
    degree = check_degree(degree, model)
    check_size(model, degree, observables, max_bytes, noise)
    alphabet = model.alphabet
    rules = _Rules(model, noise)

    known = {}  # length -> sorted unique packed codes of state words
    origin = {}  # length -> list of (codes, parent length, parent codes, via symbol, reason ids)
    reasons = []
    frontier = {}
    for w, entries in _roots(model, degree, observables).items():
        codes, first = np.unique(np.array([c for c, _ in entries], np.uint64), return_index=True)
        ids = np.array([_intern(reasons, entries[j][1]) for j in first], np.int64)
        frontier[w] = codes
        known[w] = codes
        origin[w] = [(codes, np.full(len(codes), -1), np.zeros(len(codes), np.uint64), np.full(len(codes), -1), ids)]

    terms, dropped, pairs = _Terms(), _Terms(), _PairTerms()
    while frontier:
        discovered = {}
        for w, codes in sorted(frontier.items()):
            _check_budget(model, degree, observables, max_bytes, known, terms.count + dropped.count, pairs.count)
            for length, (rows, syms, targets, mults) in _derive_batch(
                model, rules.by_letter, rules.gamma, w, codes
            ).items():
                targets = alphabet.canonicalize(targets, length)
                sink = terms if length <= degree else dropped
                sink.add(w, codes[rows], syms, length, targets, mults)
                if length <= degree:
                    _discover(known, origin, discovered, length, targets, w, codes[rows], syms)
            if noise:
                for chunk in np.array_split(codes, -(-len(codes) // _NOISE_CHUNK)):  # bounded transient memory
                    _derive_noise(model, rules, w, chunk, pairs, known, origin, discovered)
        frontier = {w: np.concatenate(parts) for w, parts in discovered.items()}
    return Program._from_derivation(model, degree, rules.symbols, known, origin, reasons, terms, dropped, pairs)


_NOISE_CHUNK = 1024  # words per `_noise_batch` call: its pieces take ~w² letters a word before canonicalisation


def _derive_noise(model, rules, w, codes, pairs, known, origin, discovered):
    """Add the finite-learning-rate terms of the words ``codes`` (length ``w``) to ``pairs`` and discover
    the words their pieces need."""
    rows, syms, (w1, c1), (w2, c2), mults = _merged_pairs(_noise_batch(model, rules.noise, rules.noise_slot, w, codes))
    pairs.add(w, codes[rows], syms, [(w1, c1), (w2, c2)], mults)
    found = {}  # length -> [(targets, parent codes, symbols)]: one discovery per length
    for lengths, targets in ((w1, c1), (w2, c2)):
        for length in np.unique(lengths[lengths > 0]):
            at = lengths == length
            found.setdefault(int(length), []).append((targets[at], codes[rows[at]], syms[at]))
    for length, parts in found.items():
        targets, parents, syms = (np.concatenate(c) for c in zip(*parts))
        _discover(known, origin, discovered, length, targets, w, parents, syms)


def _merged_pairs(terms):
    """The terms of `_noise_batch` as flat arrays (rows, symbols, (lengths, codes) twice, mults) with equal
    (row, symbol, unordered pair of pieces) merged: the rotations and orientations of a word give each
    term several times, and merging early keeps the stored terms at what the program keeps."""
    if not terms:
        i, u = np.zeros(0, np.int64), np.zeros(0, np.uint64)
        return i, i, (i, u), (i, u), i
    rows, syms, mults = (np.concatenate([t[j] for t in terms]) for j in (0, 1, 3))
    w1, w2 = (np.concatenate([np.full(len(t[0]), t[2][j][0], np.uint64) for t in terms]) for j in (0, 1))
    c1, c2 = (np.concatenate([t[2][j][1] for t in terms]) for j in (0, 1))
    swap = (w1 > w2) | ((w1 == w2) & (c1 > c2))  # one order of each unordered pair
    w1, w2, c1, c2 = np.where(swap, w2, w1), np.where(swap, w1, w2), np.where(swap, c2, c1), np.where(swap, c1, c2)
    # one key word: rows < 2³² (a chunk), symbols < 2¹⁶, lengths < 2⁸
    head = (rows.astype(np.uint64) << 32) | (syms.astype(np.uint64) << 16) | (w1 << 8) | w2
    order = np.lexsort((c2, c1, head))
    head, c1, c2 = head[order], c1[order], c2[order]
    first = np.flatnonzero(np.r_[True, (head[1:] != head[:-1]) | (c1[1:] != c1[:-1]) | (c2[1:] != c2[:-1])])
    mults = np.add.reduceat(mults[order], first)
    head, c1, c2 = head[first], c1[first], c2[first]
    rows, syms, w1, w2 = (
        (head >> shift) & mask for shift, mask in ((32, 2**32 - 1), (16, 2**16 - 1), (8, 255), (0, 255))
    )
    return rows.astype(np.int64), syms.astype(np.int64), (w1.astype(np.int64), c1), (w2.astype(np.int64), c2), mults


def _check_budget(model, degree, observables, max_bytes, known, count, pairs):
    """Stop a demand-driven build whose ``count`` linear and ``pairs`` quadratic terms so far (at
    `BYTES_PER_TERM`, `BYTES_PER_PAIR`) passed ``max_bytes``."""
    if count * BYTES_PER_TERM + pairs * BYTES_PER_PAIR <= max_bytes:
        return
    words = sum(len(codes) for codes in known.values())
    n = len(observables)
    listed = "every word" if isinstance(observables, str) else f"the words {n} listed observable{'s' * (n != 1)}"
    raise ModelError(
        f"the {model.kind} model with K = {model.K} at degree {degree}: {listed} need more than the limit of "
        f"{max_bytes / 2**30:g} GiB, still growing ({words:.3g} words, {count + pairs:.3g} terms so far): "
        "list fewer or shorter observables, lower the degree, or raise [truncation] max_memory_gb"
    )


def _discover(known, origin, discovered, length, targets, w, parents, syms):
    """Add the words among ``targets`` (canonical, length ≤ degree) that are new to the state ``known``,
    noting where each came from (``origin``) and queueing it (``discovered``) for derivation."""
    fresh, first = np.unique(targets, return_index=True)
    is_new = ~np.isin(fresh, known.get(length, np.zeros(0, np.uint64)), assume_unique=True)
    fresh, first = fresh[is_new], first[is_new]
    if fresh.size:
        known[length] = np.union1d(known.get(length, fresh[:0]), fresh)
        discovered.setdefault(length, []).append(fresh)
        origin.setdefault(length, []).append(
            (fresh, np.full(len(fresh), w), parents[first], syms[first], np.full(len(fresh), -1))
        )


def _intern(items, item):
    if item not in items:
        items.append(item)
    return items.index(item)
