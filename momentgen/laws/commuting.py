"""A commuting state: every matrix of a flow diagonal in one orthonormal basis, carried by its diagonals.

Where every factor of a model and every fixed letter (Σ included) is diagonal in one orthonormal basis Q — identity
and aligned inits against a power-law Σ or a teacher aligned with it, the scaling-law setting of MATH.md §10 — the
kinds' velocities (products and sums of the factors, their transposes and Σ) keep them so: in that basis the flow is
one flow per eigen-direction, coupled only through the scalar coefficients. `diagonal_state` finds Q and the
weights of the caller's state functional on it; a `Diagonal` holds a matrix by its diagonal (its products are
elementwise, it is its own transpose), so the kinds' own velocity code runs on m numbers per factor instead of m².

The flow engine (`flow.run`) uses this to integrate such a state with a stiff solver: once a direction has
converged its rate (4λ²s* for the tied mse flow) bounds an explicit solver's step for the rest of a long horizon,
while BDF's implicit steps grow with the time scale of what is still moving (a power-law tail: about as t).
"""

from dataclasses import dataclass

import numpy as np

__all__ = ["Diagonal", "DiagonalState", "diagonal_state"]

#: off-diagonal entries below this fraction of a matrix's largest entry count as rounding of a diagonal matrix
OFF_DIAGONAL_TOL = 1e-10


class Diagonal(np.ndarray):
    """A diagonal matrix held by its diagonal (shape (m,)): ``@`` multiplies elementwise and ``.T`` is itself, so
    the matrix expressions of a kind's flow evaluate on it in O(m)."""

    def __matmul__(self, other):
        return np.multiply(self, other)

    def __rmatmul__(self, other):
        return np.multiply(other, self)

    @property
    def T(self):
        return self


@dataclass
class DiagonalState:
    """The common eigenbasis ``basis`` (m × m, orthonormal columns) of a commuting state and the ``weights`` of its
    state functional on the basis' projectors: a word's moment is Σ_j w_j Π_letters x(j)."""

    basis: np.ndarray
    weights: np.ndarray

    def holds(self, matrix):
        """Whether ``matrix`` is m × m and diagonal in the basis (off-diagonal entries below `OFF_DIAGONAL_TOL` of
        its largest)."""
        if np.ndim(matrix) != 2 or matrix.shape != self.basis.shape:
            return False
        rotated = self.basis.T @ matrix @ self.basis
        off = rotated - np.diag(np.diagonal(rotated))
        return np.abs(off).max(initial=0.0) <= OFF_DIAGONAL_TOL * max(np.abs(rotated).max(initial=0.0), 1e-300)

    def diagonal(self, matrix):
        """``matrix`` (m × m, diagonal in the basis) as a `Diagonal`."""
        return np.ascontiguousarray(np.einsum("ij,ik,kj->j", self.basis, matrix, self.basis)).view(Diagonal)

    def matrix(self, diagonal):
        """The m × m matrix of a diagonal held in the basis."""
        return (self.basis * np.asarray(diagonal)) @ self.basis.T

    def moments(self, words, letters):
        """The state's moments of ``words`` (code tuples) from the `Diagonal` letters ``letters`` (code order)."""
        out = np.empty(len(words))
        for i, word in enumerate(words):
            product = self.weights
            for code in word:
                product = product * letters[code]
            out[i] = np.sum(product)
        return out


def diagonal_state(matrices, read):
    """The `DiagonalState` in which every one of ``matrices`` (square, one size m) is diagonal, or None when they
    do not commute (or are not normal). ``read(words, letters)``: the caller's state functional — ``(1/d) Tr``
    (`matrices.trace_moments`) or a state vector's (`momentgen.laws.representation.vector_moments`); its
    weights are its values on the projectors of the basis. A state that does not commute is told apart in O(m²)
    per pair (`_commute_on_a_vector`) before any O(m³) work."""
    matrices = [np.asarray(a, dtype=float) for a in matrices]
    m = matrices[0].shape[0]
    if any(a.shape != (m, m) for a in matrices) or not _commute_on_a_vector(matrices):
        return None
    # a generic combination of the symmetric parts splits every common eigenspace (fixed irrational-like weights)
    mixed = sum((0.5 + 1 / (3 + np.sqrt(2) * i)) * (a + a.T) for i, a in enumerate(matrices))
    _, basis = np.linalg.eigh(mixed)
    held = DiagonalState(basis, np.empty(m))
    if not all(held.holds(a) for a in matrices):
        return None
    return DiagonalState(basis, np.array([read([(0,)], [np.outer(q, q)])[0] for q in basis.T]))


def _commute_on_a_vector(matrices):
    """Whether A B v = B A v for every pair of ``matrices`` and their transposes on one fixed random vector v (to
    `OFF_DIAGONAL_TOL` of ‖A‖‖B‖‖v‖): necessary for one orthonormal basis to hold them all diagonally."""
    v = np.random.default_rng(0).standard_normal(matrices[0].shape[0])
    letters = [x for a in matrices for x in (a, a.T)]
    images = [x @ v for x in letters]
    norms = [np.abs(x).sum(axis=1).max() for x in letters]  # ‖·‖∞, a bound on the operator norm's size
    for i, a in enumerate(letters):
        for j in range(i + 1, len(letters)):
            gap = np.abs(a @ images[j] - letters[j] @ images[i]).max(initial=0.0)
            if gap > OFF_DIAGONAL_TOL * max(norms[i] * norms[j] * np.abs(v).max(), 1e-300):
                return False
    return True
