"""Truncated GNS representations of the initial moments: the state of the quadrature closure.

The quadrature closure (MATH.md §8) replaces the d × d letter matrices by their compression to
``V_n``, the polynomials of degree ≤ n in the letters, with the inner product
``⟨p, r⟩ = τ(pᵀ r)`` of the current moments. In an orthonormal basis of ``V_n`` graded by
degree (basis vector 0 is the empty word, the *state vector*), every letter ``Z`` becomes an
``N × N`` matrix ``X_Z`` (``X_{Zᵀ} = X_Zᵀ``) and

    ⟨e₀, X_{Z_1} ⋯ X_{Z_w} e₀⟩ = μ_(Z_1 ⋯ Z_w)      for every word with w ≤ 2n + 1.

Two constructions, both graded by degree and both exact to that order:

* **free product** (`free_product`): for independent Gaussian / identity initialisations the
  indices are free at d = ∞, and ``V_n`` is the reduced free product of each index's own
  representation — alternating tensors of the indices' basis vectors of total degree ≤ n.
  A tied Gaussian letter is represented by its Jacobi matrix (`jacobi_component`, the
  free-Poisson recurrence); an identity letter is a scalar and adds no dimension; an untied
  index (four letters M, Mᵀ, A, B) by Gram–Schmidt on its own exact moments. No Gram matrix
  of the whole space, so no conditioning problem (tied K = 2, n = 9: N = 1023 in milliseconds).
* **Gram–Schmidt** (`gram_component`): from any moment oracle (e.g. the empirical moments of
  matrices read from files), candidates ``Z w`` for every letter Z and kept word w of the
  previous degree, diagonally scaled Gram matrix, sequential Cholesky in word order; a word
  whose relative pivot falls below ``tol`` is dropped, so dependent words (a scalar letter,
  a commuting teacher) reduce the space exactly. Double precision: fine to n ≈ 6.
"""

from dataclasses import dataclass

import numpy as np
from scipy.linalg import solve_triangular

from .errors import ModelError
from .initial import _complete, exact_moments

__all__ = ["Component", "Representation", "jacobi_component", "free_poisson_jacobi", "gram_component",
           "free_product", "initial_representation", "matrix_moments", "letter_parts", "vector_moments"]  # fmt: skip


@dataclass
class Component:
    """Letters acting on one graded space whose basis vector 0 is the state vector.

    ``letters``: {letter code: (m, m) array}; ``degrees``: degree of each basis vector
    (``degrees[0] == 0``, non-decreasing). A component of dimension 1 is a set of scalars.
    """

    letters: dict
    degrees: np.ndarray


@dataclass
class Representation:
    """Letter matrices (letter-code order, ``N × N``) exact for words of degree ≤ 2n + 1."""

    letters: list
    n: int

    @property
    def dim(self):
        return self.letters[0].shape[0]


def jacobi_component(code, a, b):
    """One self-adjoint letter by its Jacobi matrix: diagonal ``a[0..n]``, off-diagonal ``b[1..n]``."""
    a = np.asarray(a, dtype=float)
    off = np.asarray(b, dtype=float)[: len(a) - 1]
    J = np.diag(a) + np.diag(off, 1) + np.diag(off, -1)
    return Component({code: J}, np.arange(len(a)))


def free_poisson_jacobi(n, rate, jump):
    """Recurrence of the free Poisson law (Marchenko–Pastur; rate r, jump σ²) up to degree n:
    ``a = (rσ², (1+r)σ², (1+r)σ², …)``, ``b = (√r σ², √r σ², …)`` (orthonormal polynomials)."""
    a = np.full(n + 1, (1 + rate) * jump)
    a[0] = rate * jump
    return a, np.full(n, np.sqrt(rate) * jump)


def gram_component(codes, transpose, moments, n, tol=1e-10, passengers=()):
    """Gram–Schmidt representation of the letters ``codes`` from a moment oracle.

    ``moments(words)`` returns μ of a list of code tuples; ``transpose[c]`` is the code of
    ``Zᵀ``. Candidates of degree j are ``(c,) + w`` for the kept words w of degree j − 1, so
    the space is never enumerated beyond what survives. ``passengers``: letters compressed
    onto the space without generating it — exact in words where one of them appears once
    among at most n generating letters (e.g. their own trace). Returns a `Component`.
    """
    kept, degrees = [()], [0]
    scale = [1.0]
    L = np.ones((1, 1))  # Cholesky factor of the scaled Gram matrix of the kept words

    def adjoint(word):
        return tuple(int(transpose[c]) for c in reversed(word))

    def inner(us, vs):
        words = [adjoint(u) + v for u in us for v in vs]
        return _moments_with_empty(moments, words).reshape(len(us), len(vs))

    previous = [()]
    for degree in range(1, n + 1):
        candidates = [(c,) + w for w in previous for c in codes]
        if not candidates:
            break
        cross = inner(kept, candidates)
        gram = inner(candidates, candidates)
        fresh = []
        for i, v in enumerate(candidates):
            norm = gram[i, i]
            if not norm > 0:
                continue
            s = np.sqrt(norm)
            row = np.concatenate([cross[:, i], gram[fresh, i]]) / (s * np.asarray(scale))
            y = solve_triangular(L, row, lower=True)
            pivot = 1.0 - y @ y
            if pivot < tol:  # v is (numerically) in the span of the kept words
                continue
            L = np.block([[L, np.zeros((len(L), 1))], [y[None, :], np.array([[np.sqrt(pivot)]])]])
            kept.append(v)
            scale.append(s)
            degrees.append(degree)
            fresh.append(i)
        previous = [candidates[i] for i in fresh]
        if not previous:
            break
    return _compress(list(codes) + list(passengers), kept, scale, L, degrees, inner)


def _compress(codes, kept, scale, L, degrees, inner):
    """Letter matrices in the orthonormal basis ``b = L⁻¹ D⁻¹ (kept words)``."""
    D = np.asarray(scale)
    letters = {}
    for c in codes:
        H = inner(kept, [(c,) + w for w in kept]) / np.outer(D, D)
        left = solve_triangular(L, H, lower=True)
        letters[c] = solve_triangular(L, left.T, lower=True).T
    return Component(letters, np.asarray(degrees))


def _moments_with_empty(moments, words):
    out = np.ones(len(words))
    nonempty = [i for i, w in enumerate(words) if w]
    if nonempty:
        out[nonempty] = moments([words[i] for i in nonempty])
    return out


def free_product(components, n, size):
    """Reduced free product of ``components`` truncated at total degree ``n``.

    Basis: the state vector and alternating tensors ``(k₁, i₁) ⊗ (k₂, i₂) ⊗ …`` (``k_j ≠ k_{j+1}``,
    ``i_j ≥ 1`` a basis vector of component ``k_j``) of total degree ≤ n. A letter of component
    k acts on the first factor when it belongs to k, else on the component's state vector;
    the result is split into its state part (which drops the factor) and the rest. ``size``:
    number of letter codes. Returns a `Representation`.
    """
    basis, index = [()], {(): 0}
    cursor = 0
    while cursor < len(basis):  # breadth first: every tensor of degree ≤ n, in degree order
        xi = basis[cursor]
        cursor += 1
        used = sum(int(components[k].degrees[i]) for k, i in xi)
        for k, comp in enumerate(components):
            if xi and xi[0][0] == k:
                continue
            for i in range(1, len(comp.degrees)):
                if used + comp.degrees[i] <= n and ((k, i),) + xi not in index:
                    index[((k, i),) + xi] = len(basis)
                    basis.append(((k, i),) + xi)
    N = len(basis)
    letters = [None] * size
    for k, comp in enumerate(components):
        for code, X in comp.letters.items():
            out = np.zeros((N, N))
            for col, xi in enumerate(basis):
                head, rest = (xi[0][1], xi[1:]) if xi and xi[0][0] == k else (0, xi)
                for row_local in np.flatnonzero(X[:, head]):
                    target = rest if row_local == 0 else ((k, int(row_local)),) + rest
                    row = index.get(target)
                    if row is not None:
                        out[row, col] += X[row_local, head]
            letters[code] = out
    return Representation(letters, n)


def initial_representation(model, specs, n, moments=None, tol=1e-10, generators=None):
    """The degree-n representation of the initial state of ``model``.

    Default: the d = ∞ law of independent ``specs`` ({k: InitSpec}) as a free product
    (tied Gaussian: Jacobi matrices; identity: scalars; untied Gaussian: each index by
    Gram–Schmidt on its exact moments). With ``moments`` (an oracle: list of code tuples →
    values, e.g. the empirical moments of given matrices) one Gram–Schmidt over all letters.
    ``generators``: the letter codes that span the space (default: all); the others ride along
    as passengers (`gram_component`) — e.g. a fixed untied index's A, B, which never enter the
    flow, so that its component is spanned by M, Mᵀ alone.
    """
    if model.kind == "direct":
        raise ModelError("the direct model's hierarchy is closed: it needs no quadrature closure (use closure = \"zero\")")
    if n < 0:
        raise ModelError(f"quadrature order n must be ≥ 0 (degree M ≥ 1), got {n}")
    alphabet = model.alphabet
    per_index = len(alphabet.kinds)
    generators = set(range(alphabet.size) if generators is None else generators)

    def split(codes):
        return [c for c in codes if c in generators], [c for c in codes if c not in generators]

    if moments is not None:
        spanning, passengers = split(range(alphabet.size))
        component = gram_component(spanning, alphabet.transpose, moments, n, tol, passengers)
        return free_product([component], n, alphabet.size)
    specs = _complete(model, specs)
    components = []
    for k in range(1, model.K + 1):
        spec, codes = specs[k], list(range((k - 1) * per_index, k * per_index))
        if spec.kind == "identity":
            components.append(Component({c: np.full((1, 1), spec.c) for c in codes}, np.zeros(1)))
        elif spec.kind == "from-file":
            raise ModelError("a from-file init has no d = ∞ law: build the representation from its moments")
        elif model.kind == "tied":
            components.append(jacobi_component(codes[0], *free_poisson_jacobi(n, spec.width_ratio, spec.scale**2)))
        else:
            same = {j: spec for j in range(1, model.K + 1)}  # only index k's letters are asked for
            oracle = lambda words, same=same: exact_moments(model, same, words)  # noqa: E731
            spanning, passengers = split(codes)
            components.append(gram_component(spanning, alphabet.transpose, oracle, n, tol, passengers))
    return free_product(components, n, alphabet.size)


def matrix_moments(model, factors):
    """A moment oracle on finite-d matrices (e.g. the ones an SGD run starts from): words are
    reduced to canonical form (packed, vectorised) first, so each distinct trace is computed once."""
    from .matrices import letter_matrices, trace_moments

    letters, alphabet = letter_matrices(model.kind, factors), model.alphabet
    known = {}  # (length, packed canonical word) → moment

    def moments(words):
        keys = np.empty(len(words), dtype=object)
        for w in {len(word) for word in words}:
            rows = [i for i, word in enumerate(words) if len(word) == w]
            packed = alphabet.canonicalize(alphabet.pack(np.array([words[i] for i in rows])), w)
            keys[rows] = [(w, int(p)) for p in packed]
        fresh = list(dict.fromkeys(k for k in keys if k not in known))
        if fresh:
            codes = [tuple(alphabet.unpack(np.array([p], dtype=np.uint64), w)[0]) for w, p in fresh]
            known.update(zip(fresh, trace_moments(codes, letters)))
        return np.array([known[k] for k in keys])

    return moments


def letter_parts(kind, representation):
    """The representation's letters in the layout of `momentgen.flow.letters_of_parts`."""
    X = representation.letters
    if kind == "untied":
        return [(X[i], X[i + 2], X[i + 3]) for i in range(0, len(X), 4)]
    return list(X[:: 2 if kind == "direct" else 1])


def vector_moments(words, letters):
    """``⟨e₀, X_{Z_1} ⋯ X_{Z_w} e₀⟩`` for each word (tuple of letter codes): the state's moments."""
    out = np.empty(len(words))
    for i, word in enumerate(words):
        v = letters[word[-1]][:, 0]
        for code in reversed(word[:-1]):
            v = letters[code] @ v
        out[i] = v[0]
    return out
