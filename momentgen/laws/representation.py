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

from dataclasses import dataclass, field

import numpy as np
from scipy.linalg import solve_triangular

__all__ = [
    "Component",
    "Representation",
    "jacobi_component",
    "free_poisson_jacobi",
    "free_poisson_component",
    "gram_component",
    "radau_diagonal",
    "free_product",
    "block_radau",
    "vector_moments",
]


@dataclass
class Component:
    """Letters acting on one graded space whose basis vector 0 is the state vector.

    ``letters``: {letter code: (m, m) array}; ``degrees``: degree of each basis vector
    (``degrees[0] == 0``, non-decreasing). A component of dimension 1 is a set of scalars.
    ``edges``: {letter code: lower edge of its spectrum} for the positive letters whose edge is
    known — the node the Gauss–Radau variant (`radau_diagonal`) fixes there. ``roots``: {letter
    code: F with F Fᵀ = the letter} when the component is a discrete measure whose root is known
    exactly (`momentgen.laws.edge.measure_component`).
    """

    letters: dict
    degrees: np.ndarray
    edges: dict = field(default_factory=dict)
    roots: dict = field(default_factory=dict)


@dataclass
class Representation:
    """Letter matrices (letter-code order, ``N × N``) exact for words of degree ≤ 2n + 1
    (``variant = "gauss"``) or ≤ 2n (``"radau"``: a node fixed at each positive letter's edge).
    ``roots``: {letter code: exact root factor} of letters that carry one (the flow moves it instead of
    a root computed from the dense letter, which loses eigenvalues below 1e-12 of the largest)."""

    letters: list
    n: int
    variant: str = "gauss"
    roots: dict = field(default_factory=dict)

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


def free_poisson_component(code, n, rate, jump):
    """One tied Gaussian letter ``S = W Wᵀ`` (``W``: d × rate·d, entries N(0, jump/d)) to degree n.

    ``rate ≥ 1``: its Jacobi matrix (`free_poisson_jacobi`). ``rate < 1``: ``S`` has a kernel of
    normalised dimension ``1 − rate`` (the atom of the free Poisson law at 0), which the flow
    keeps for ever (a congruence, MATH.md §3). A Gauss rule would put a node *near* 0 carrying
    the atom's mass; 0 is an unstable fixed point of the eigenvalue flow, so that node escapes
    and the closure converges to a wrong state. Instead the space is split before the Jacobi
    construction: the atom vector ``u`` (``S u = 0`` exactly) plus the Jacobi space of the
    non-zero eigenvalues, the free Poisson law with rate ``1/rate`` and jump ``rate·jump`` (the
    spectrum of ``Wᵀ W``). In the basis ``e₀ = √(1−r) u + √r v₀``, ``f = √r u − √(1−r) v₀``,
    ``v₁ … v_n`` with degrees 0, 1, 1, …, n the component is graded, contains the Krylov space of
    every degree, and so stays exact to degree 2n + 1 (one more dimension than the Jacobi
    matrix), with an exact kernel that the free product extends to every tensor ``u ⊗ rest``.
    """
    edge = jump * (1 - np.sqrt(rate)) ** 2  # lower edge of the (non-zero) spectrum
    if rate >= 1:
        component = jacobi_component(code, *free_poisson_jacobi(n, rate, jump))
        component.edges[code] = edge
        return component
    a, b = free_poisson_jacobi(n, 1 / rate, jump * rate)  # the law of the non-zero eigenvalues
    size = n + 2
    split = np.zeros((size, size))  # basis u (atom), v0 … vn
    split[1:, 1:] = np.diag(a) + np.diag(b, 1) + np.diag(b, -1)
    rotation = np.eye(size)
    root, rest = np.sqrt(rate), np.sqrt(1 - rate)
    rotation[:2, :2] = [[rest, root], [root, -rest]]  # columns: e0, f in the (u, v0) plane
    return Component({code: rotation.T @ split @ rotation}, np.array([0, 1, *range(1, n + 1)]), {code: edge})


def gram_component(codes, transpose, moments, n, tol=1e-10, passengers=(), kernels=None):
    """Gram–Schmidt representation of the letters ``codes`` from a moment oracle.

    ``moments(words)`` returns μ of a list of code tuples; ``transpose[c]`` is the code of
    ``Zᵀ``. Candidates of degree j are ``(c,) + w`` for the kept words w of degree j − 1, so
    the space is never enumerated beyond what survives. ``passengers``: letters compressed
    onto the space without generating it — exact in words where one of them appears once
    among at most n generating letters (e.g. their own trace). ``kernels``: {letter code:
    code of the projector onto its kernel} for letters of deficient rank (the oracle must
    know the projector codes; they are symmetric); the rank split adds ``Π w`` for every kept
    word w of degree < n, so that the letter kills those vectors exactly and its kernel
    survives the flow (see `free_poisson_component`). Returns a `Component`.
    """
    kernels = dict(kernels or {})
    kept, degrees = [()], [0]
    scale = [1.0]
    L = np.ones((1, 1))  # Cholesky factor of the scaled Gram matrix of the kept words

    def adjoint(word):
        return tuple(c if c in projectors else int(transpose[c]) for c in reversed(word))

    def inner(us, vs):
        words = [adjoint(u) + v for u in us for v in vs]
        return _moments_with_empty(moments, words).reshape(len(us), len(vs))

    projectors = set(kernels.values())
    previous, norm_of = [()], {(): 1.0}
    for degree in range(1, n + 1):
        candidates = [(c,) + w for w in previous for c in codes]
        candidates += [(p,) + w for w in previous for p in sorted(projectors)]
        if not candidates:
            break
        cross = inner(kept, candidates)
        gram = inner(candidates, candidates)
        fresh = []
        for i, v in enumerate(candidates):
            norm = gram[i, i]
            if not norm > (tol * norm_of[v[1:]] if v[0] in projectors else 0.0):
                continue  # a (numerically) zero vector: Π w with w in the range of Π's letter
            s = np.sqrt(norm)
            row = np.concatenate([cross[:, i], gram[fresh, i]]) / (s * np.asarray(scale))
            y = solve_triangular(L, row, lower=True)
            pivot = 1.0 - y @ y
            if pivot < tol:  # v is (numerically) in the span of the kept words
                continue
            L = np.block([[L, np.zeros((len(L), 1))], [y[None, :], np.array([[np.sqrt(pivot)]])]])
            kept.append(v)
            scale.append(s)
            norm_of[v] = norm
            degrees.append(degree)
            fresh.append(i)
        previous = [candidates[i] for i in fresh if candidates[i][0] not in projectors]  # Π w is never extended
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


def radau_diagonal(X, degrees, edge):
    """The Gauss–Radau diagonal of a graded component, level by level.

    At truncation level ℓ (the basis vectors of degree ≤ ℓ) the last basis vector's diagonal
    entry only enters words of degree ≥ 2ℓ + 1; replacing it by
    ``z + X[t, J] (X[J, J] − z)⁻¹ X[J, t]`` (Schur complement; z = ``edge``) puts an eigenvalue
    exactly at z and keeps every moment of degree ≤ 2ℓ. Returns {ℓ: (index t, value)}.
    """
    out = {}
    for level in range(int(degrees.max()) + 1):
        kept = np.flatnonzero(degrees <= level)
        top, rest = kept[-1], kept[:-1]
        shifted = X[np.ix_(rest, rest)] - edge * np.eye(len(rest))
        out[level] = (
            int(top),
            float(edge + X[top, rest] @ np.linalg.solve(shifted, X[rest, top])) if len(rest) else float(edge),
        )
    return out


def free_product(components, n, size, radau=False):
    """Reduced free product of ``components`` truncated at total degree ``n``.

    Basis: the state vector and alternating tensors ``(k₁, i₁) ⊗ (k₂, i₂) ⊗ …`` (``k_j ≠ k_{j+1}``,
    ``i_j ≥ 1`` a basis vector of component ``k_j``) of total degree ≤ n. A letter of component
    k acts on the first factor when it belongs to k, else on the component's state vector;
    the result is split into its state part (which drops the factor) and the rest. ``size``:
    number of letter codes. Returns a `Representation`.

    ``radau``: in every sector (a tensor ``rest`` to the right) a letter with a known edge sees
    its component truncated at level ``n − degree(rest)``; the diagonal entry of that level's
    last basis vector is replaced by its Gauss–Radau value (`radau_diagonal`). Only entries of
    the total-degree-n block change, so every moment of degree ≤ 2n is kept: the other
    principal representation of the same known moments, which holds at the edge what the
    Gauss rule lets escape (the closure's error estimate compares the two).
    """
    basis, index = _alternating_basis(components, n)
    N = len(basis)
    used = [sum(int(components[k].degrees[i]) for k, i in xi) for xi in basis]
    letters = [None] * size
    for k, comp in enumerate(components):
        for code, X in comp.letters.items():
            edge = comp.edges.get(code) if radau else None
            tops = None if edge is None else radau_diagonal(X, comp.degrees, edge)
            out = np.zeros((N, N))
            for col, xi in enumerate(basis):
                mine = bool(xi) and xi[0][0] == k
                head, rest = (xi[0][1], xi[1:]) if mine else (0, xi)
                for row_local in np.flatnonzero(X[:, head]):
                    target = rest if row_local == 0 else ((k, int(row_local)),) + rest
                    row = index.get(target)
                    if row is not None:
                        out[row, col] += X[row_local, head]
                if tops is not None:
                    level = n - (used[col] - (int(comp.degrees[head]) if mine else 0))
                    top, value = tops[min(level, len(tops) - 1)]
                    if top == head and level < len(tops):
                        out[col, col] += value - X[head, head]
            letters[code] = out
    alone = [comp for comp in components if len(comp.degrees) > 1]
    roots = dict(alone[0].roots) if len(alone) == 1 and not radau else {}  # then its basis is the product's
    return Representation(letters, n, "radau" if radau else "gauss", roots)


def _alternating_basis(components, n):
    """(basis, index): the state vector ``()`` and every alternating tensor of total degree ≤ n, breadth
    first (in degree order), and each tensor's position."""
    basis, index = [()], {(): 0}
    cursor = 0
    while cursor < len(basis):
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
    return basis, index


def block_radau(component, n):
    """Gauss–Radau variant of a one-component (Gram–Schmidt) representation: for each letter
    with a known edge z, the block of its top-degree basis vectors (those it does not kill)
    becomes ``z + X[T, J] (X[J, J] − z)⁻¹ X[J, T]``; moments of degree ≤ 2n are kept."""
    letters = dict(component.letters)
    for code, edge in component.edges.items():
        X = letters[code].copy()
        scale = max(np.abs(X).max(), 1e-300)
        alive = np.abs(X).max(axis=0) > 1e-12 * scale  # exact kernel vectors stay in the kernel
        top = np.flatnonzero((component.degrees == n) & alive)
        rest = np.flatnonzero((component.degrees < n) | ~alive)
        if top.size == 0:
            continue
        shifted = X[np.ix_(rest, rest)] - edge * np.eye(len(rest))
        coupling = X[np.ix_(rest, top)]
        X[np.ix_(top, top)] = edge * np.eye(len(top)) + coupling.T @ np.linalg.lstsq(shifted, coupling, rcond=None)[0]
        letters[code] = X
    return Component(letters, component.degrees, component.edges)


def vector_moments(words, letters):
    """``⟨e₀, X_{Z_1} ⋯ X_{Z_w} e₀⟩`` for each word (tuple of letter codes): the state's moments."""
    out = np.empty(len(words))
    for i, word in enumerate(words):
        v = letters[word[-1]][:, 0]
        for code in reversed(word[:-1]):
            v = letters[code] @ v
        out[i] = v[0]
    return out
