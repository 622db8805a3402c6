"""Edge-adapted representations of one letter's spectral law: the tail of the learning curve (MATH.md §12).

Near a hard spectral edge (a square Wishart student: density ∝ x^{−1/2} at 0) the flow is linear,
each small eigenvalue grows like ``λ₀ g(t)``, and the risk's tail is carried by the eigenvalues that
have not escaped yet: at time t those near ``c/g(t)`` (``e^{−4ct}`` ≈ 1e-13 at t = 5 on §12's case).
A Gauss rule has a smallest node, so its risk decays like ``e^{−4ct}`` once that node has escaped,
where the truth decays like ``e^{−2ct}``. `edge_rule` keeps what the Gauss rule knows and adds the
layer: the window ``[a, a + ε]`` above the edge a (ε: `EDGE_WINDOW` times the distance from a of the
smallest node of the law's own (n + 1)-point Gauss rule, so the layer takes over where the Gauss nodes
thin out; narrower when the remainder below would not be a positive measure) is cut into cells of
equal width ``step`` in ``log(x − a)`` down to ``ε e^{−depth}`` (each cell a two-point Gauss rule of
the law on it), and the rest of the law is the Gauss rule of the *remainder* (the law minus those
nodes), computed by the modified Chebyshev algorithm in the law's own orthogonal polynomials — so the
whole rule still has every moment of degree ≤ 2n + 1 of the law, and a front moving at constant
speed in ``log λ₀`` is integrated with an O(step⁴) relative error, at every depth the nodes reach.

The closure uses it where it represents the layer's flow exactly: one index that is not a multiple
of the identity (`momentgen.compiler.initial.layered_index`), so every other letter is a scalar on its space.
With two free non-scalar letters the edge's growth is a harmonic mean over the other letter's law
(MATH.md §12), which a layer coupled to the other letter only through its mean would get wrong.

`measure_component` turns a discrete measure into a graded `momentgen.laws.representation.Component`
(Lanczos with full reorthogonalisation: the first n + 1 basis vectors are the Krylov space, degrees
0..n, the layer's vectors follow at degree n) and keeps the exact root factor
``F = Qᵀ diag(√x) Q``, which the flow moves: a root taken from the letter (`psd_root`) treats
eigenvalues below 1e-12 of the largest as an exact kernel (so that a rank-deficient letter keeps
one), and the layer's deepest nodes would never escape.
"""

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.integrate import quad
from scipy.linalg import eigh_tridiagonal

from ..core.errors import ModelError
from .representation import Component, free_poisson_jacobi

__all__ = [
    "SpectralLaw",
    "free_poisson_law",
    "power_law",
    "gauss_rule",
    "edge_rule",
    "measure_component",
    "EDGE_STEP",
    "EDGE_DEPTH",
]

#: Width of a cell of the edge layer in log(x − a): the rule's relative error on the tail is O(step⁴).
EDGE_STEP = 0.5
#: How far below the window's top the layer reaches, in log(x − a): e^{−36} ≈ 2e-16 of the window
#: (a front deeper than that is not resolved; the coarse leg, shallower, says when that matters).
EDGE_DEPTH = 36.0
#: Gauss nodes per cell of the layer (two: exact for the cell's moments to degree 3, error O(step⁴)).
CELL_POINTS = 2
#: How often the window is halved before giving up (`_edge_rule`).
WINDOW_HALVINGS = 12
#: The window's top, in units of the distance of the Gauss rule's smallest node from the edge.
EDGE_WINDOW = 8.0


@dataclass(frozen=True, eq=False)
class SpectralLaw:
    """A probability law on ``[lower, upper]`` with a ``density(y)`` at x = lower + y (the offset is the argument, so
    that a density near the edge is evaluated without cancellation) and its monic three-term recurrence
    ``recurrence(m)`` → (α₀..α_{m−1}, β₀..β_{m−1}) (β₀ = 1): ``π_{k+1} = (x − α_k) π_k − β_k π_{k−1}``.
    Laws with the same ``key`` are the same law (rules are cached by it)."""

    density: object
    lower: float
    upper: float
    recurrence: object
    key: tuple

    def __eq__(self, other):
        return isinstance(other, SpectralLaw) and self.key == other.key

    def __hash__(self):
        return hash(self.key)


def free_poisson_law(rate, jump):
    """The free Poisson (Marchenko–Pastur) law of ``S = W Wᵀ``, rate ≥ 1 (no atom), jump σ²."""
    lower, upper = jump * (1 - np.sqrt(rate)) ** 2, jump * (1 + np.sqrt(rate)) ** 2

    def density(y):
        return np.sqrt(max((upper - lower - y) * y, 0.0)) / (2 * np.pi * jump * (lower + y))

    def recurrence(m):
        a, b = free_poisson_jacobi(m - 1, rate, jump)
        return a, np.concatenate([[1.0], b**2])

    return SpectralLaw(density, lower, upper, recurrence, ("free-poisson", float(rate), float(jump)))


def power_law(exponent):
    """The power law of a data covariance (MATH.md §10): the eigenvalue at quantile u ∈ (0, 1) is
    ``(1 + a) u^a`` (mean 1), i.e. density ``p(x) = x^{1/a − 1} / (a (1 + a)^{1/a})`` on [0, 1 + a] — a Jacobi
    weight ``(1 + s)^{1/a − 1}`` of s = 2x/(1 + a) − 1, whose recurrence is the Jacobi one."""
    a = float(exponent)
    upper, beta = 1.0 + a, 1.0 / a - 1.0

    def density(y):
        return y ** (1.0 / a - 1.0) / (a * upper ** (1.0 / a)) if y > 0 else 0.0

    def recurrence(m):
        s_alpha, s_beta = jacobi_recurrence(m, 0.0, beta)  # monic, on [−1, 1], total mass normalised to 1
        half = upper / 2  # x = half (1 + s)
        return half * (1 + s_alpha), np.concatenate([[1.0], half**2 * s_beta[1:]])

    return SpectralLaw(density, 0.0, upper, recurrence, ("power-law", a))


def jacobi_recurrence(m, alpha, beta):
    """Monic recurrence (α₀..α_{m−1}, β₀..β_{m−1}) of the Jacobi weight (1 − s)^α (1 + s)^β on [−1, 1], normalised to
    mass 1 (β₀ = 1) — the closed forms (Gautschi, *Orthogonal Polynomials*, Table 1.1)."""
    k = np.arange(m, dtype=float)
    ab = alpha + beta
    with np.errstate(divide="ignore", invalid="ignore"):
        a = (beta**2 - alpha**2) / ((2 * k + ab) * (2 * k + ab + 2))
        b = 4 * k * (k + alpha) * (k + beta) * (k + ab) / ((2 * k + ab) ** 2 * (2 * k + ab + 1) * (2 * k + ab - 1))
    a[0] = (beta - alpha) / (ab + 2)
    if m > 1:
        b[1] = 4 * (1 + alpha) * (1 + beta) / ((2 + ab) ** 2 * (3 + ab))
    b[0] = 1.0
    return a, b


def edge_rule(law, n, step=EDGE_STEP, depth=EDGE_DEPTH, reach=None):
    """(nodes, weights) of the edge-adapted rule of ``law`` at order n (module docstring): the layer's
    cells plus n + 1 Gauss nodes of the remainder; every moment of degree ≤ 2n + 1 is the law's. ``reach``: the
    window's first try as a fraction of the support (halved until the remainder is a positive measure) — for a
    scale-free law, whose learning front crosses every scale of the support; None: `EDGE_WINDOW` times the smallest
    Gauss node's distance from the edge."""
    return _edge_rule(law, int(n), float(step), float(depth), None if reach is None else float(reach))


@lru_cache(maxsize=64)
def _edge_rule(law, n, step, depth, reach):
    window = _window(law, n + 1) if reach is None else reach * (law.upper - law.lower)
    for _ in range(WINDOW_HALVINGS):
        x_layer, w_layer = _layer(law, window, step, depth)
        bulk = _remainder_gauss(law, x_layer, w_layer, n + 1)
        if bulk is not None:
            return np.concatenate([x_layer, bulk[0]]), np.concatenate([w_layer, bulk[1]])
        window /= 2  # the remainder was not a positive measure to degree 2n + 1: a narrower layer
    raise ModelError(f"no edge-adapted rule of order {n} for the law {law.key}: use a lower degree")


def _window(law, N):
    """ε: `EDGE_WINDOW` times the distance from the edge of the smallest node of the law's N-point Gauss rule
    (at most a quarter of the support)."""
    smallest = gauss_rule(*law.recurrence(N))[0][0]
    return min(EDGE_WINDOW * (smallest - law.lower), (law.upper - law.lower) / 4)


def _layer(law, window, step, depth):
    """Cells of equal width in log(x − a) from a + ε down to a + ε e^{−depth} (or to where x − a is no longer
    distinct from a in double precision), the last one reaching a: each with a `CELL_POINTS`-point Gauss rule
    of the law on it, integrated in v = √(x − a), where a density ∝ (x − a)^{±½} at the edge is smooth."""
    a = law.lower
    offsets = window * np.exp(-step * np.arange(int(np.ceil(depth / step)) + 1))
    offsets = np.concatenate([offsets[offsets > 64 * np.spacing(a)], [0.0]])  # offsets of the cells' bounds

    def moment(power, lo, hi):  # ∫ y^power over the cell, y = (x − a)/hi ∈ [lo/hi, 1]
        def integrand(v):
            return (v * v / hi) ** power * law.density(v * v) * 2 * v

        return quad(integrand, np.sqrt(lo), np.sqrt(hi), epsabs=0.0, epsrel=1e-12, limit=200)[0]

    nodes, weights = [], []
    for hi, lo in zip(offsets[:-1], offsets[1:]):
        moments = [moment(power, lo, hi) for power in range(2 * CELL_POINTS)]
        if not moments[0] > 0:  # below what double precision resolves: nothing to carry
            continue
        basis = np.zeros(2 * CELL_POINTS)
        alpha, beta = _modified_chebyshev(moments, basis, basis, CELL_POINTS)
        y, w = gauss_rule(alpha, beta)
        nodes.extend(a + hi * y)
        weights.extend(w)
    return np.array(nodes), np.array(weights)


def _remainder_gauss(law, x_layer, w_layer, N):
    """The N-point Gauss rule of ``law`` minus the discrete measure (x_layer, w_layer): modified moments
    in the law's monic orthogonal polynomials (∫π_k d law = δ_k0), then the modified Chebyshev algorithm.
    None when the remainder is not a positive measure to that degree (a node outside the support, or a
    weight ≤ 0): the layer took too much."""
    alpha_law, beta_law = law.recurrence(2 * N)
    P = np.zeros((2 * N, len(x_layer)))
    P[0] = 1.0
    P[1] = x_layer - alpha_law[0]
    for k in range(1, 2 * N - 1):
        P[k + 1] = (x_layer - alpha_law[k]) * P[k] - beta_law[k] * P[k - 1]
    modified = -P @ w_layer
    modified[0] += 1.0
    alpha, beta = _modified_chebyshev(modified, alpha_law, beta_law, N)
    if not (np.all(np.isfinite(alpha)) and np.all(np.isfinite(beta)) and np.all(beta > 0)):
        return None
    nodes, weights = gauss_rule(alpha, beta)
    if nodes[0] <= x_layer.max() or nodes[-1] > law.upper or not np.all(weights > 0):
        return None
    return nodes, weights


def gauss_rule(alpha, beta):
    """Nodes and weights of the Gauss rule of the monic recurrence (α, β) (β₀ the total mass): Golub–Welsch."""
    nodes, vectors = eigh_tridiagonal(alpha, np.sqrt(beta[1:]))
    return nodes, beta[0] * vectors[0] ** 2


def _modified_chebyshev(m, a, b, N):
    """Gautschi's modified Chebyshev algorithm: the recurrence (α, β) of N orthogonal polynomials of the
    measure whose modified moments ``m[l] = ∫ π_l`` (l < 2N) are taken in the monic basis (a, b)."""
    alpha, beta = np.full(N, np.nan), np.full(N, np.nan)
    if not m[0] > 0:
        return alpha, beta
    previous, current = np.zeros(2 * N), np.asarray(m, float).copy()
    alpha[0], beta[0] = a[0] + m[1] / m[0], m[0]
    for k in range(1, N):
        following = np.zeros(2 * N)
        for l in range(k, 2 * N - k):
            following[l] = (
                current[l + 1] - (alpha[k - 1] - a[l]) * current[l] - beta[k - 1] * previous[l] + b[l] * current[l - 1]
            )
        if not following[k] > 0:  # not a positive measure to this degree
            return alpha, beta
        alpha[k] = a[k] + following[k + 1] / following[k] - current[k] / current[k - 1]
        beta[k] = following[k] / current[k - 1]
        previous, current = current, following
    return alpha, beta


def measure_component(code, nodes, weights, n, functions=None):
    """The letter ``code`` with spectral measure Σ wᵢ δ_{xᵢ} as a graded `Component` with its exact root
    factor in ``roots`` (module docstring). Degrees 0..n for the Krylov vectors, n for the rest.
    ``functions``: {other code: (f(x), √f(x))} — letters that are functions of this one (a teacher c Σ^b aligned
    with the data covariance), on the same measure, with their exact roots."""
    x = np.asarray(nodes, float)
    Q = _lanczos_basis(x, np.asarray(weights, float))
    values = {code: (x, np.sqrt(np.clip(x, 0.0, None))), **(functions or {})}
    letters, roots = {}, {}
    for c, (f, root) in values.items():
        letter = Q.T @ (np.asarray(f, float)[:, None] * Q)
        letters[c], roots[c] = 0.5 * (letter + letter.T), Q.T @ (np.asarray(root, float)[:, None] * Q)
    return Component(letters, np.minimum(np.arange(len(x)), n), roots=roots)


def _lanczos_basis(x, w):
    """Orthonormal Krylov basis of diag(x) from √w (columns), with full reorthogonalisation (twice)."""
    N = len(x)
    Q = np.zeros((N, N))
    Q[:, 0] = np.sqrt(w / w.sum())
    for j in range(N - 1):
        v = x * Q[:, j]
        for _ in range(2):
            v -= Q[:, : j + 1] @ (Q[:, : j + 1].T @ v)
        Q[:, j + 1] = v / np.linalg.norm(v)
    return Q
