"""Truncated GNS representations (`momentgen.laws.representation`, MATH.md §8): every moment up to degree
2n + 1, the span of passenger letters, dependent candidates, Gauss nodes.
"""

import numpy as np
import pytest

from momentgen.compiler.hierarchy import Model
from momentgen.compiler.initial import InitSpec, exact_moments, initial_representation
from momentgen.evidence.oracles import marchenko_pastur_rule
from momentgen.laws.representation import gram_component, vector_moments
from momentgen.models.words import enumerate_words, parse
from tests.helpers import all_words

CASES = [
    ("tied", {1: InitSpec(scale=0.05**0.5), 2: InitSpec(scale=0.5**0.5)}, 4),
    ("tied", {1: InitSpec(width_ratio=0.5), 2: InitSpec(kind="identity", c=1.5)}, 5),
    ("tied", {1: InitSpec(width_ratio=2.0), 2: InitSpec(scale=0.5, width_ratio=0.7)}, 4),
    ("untied", {1: InitSpec(scale_U=1.1, scale_V=0.9), 2: InitSpec()}, 2),
    ("untied", {1: InitSpec(width_ratio=0.5), 2: InitSpec(kind="identity", c=1.2)}, 2),
]


@pytest.mark.parametrize("kind, specs, n", CASES)
def test_representation_reproduces_every_moment_up_to_degree_2n_plus_1(kind, specs, n):
    """⟨e₀, X_{Z1}⋯X_{Zw} e₀⟩ equals the exact d = ∞ moment (planar pairings, an independent
    computation) for every word of degree ≤ 2n + 1 — to rounding — and not beyond."""
    model = Model(kind, 2, [1])
    representation = initial_representation(model, specs, n)
    words = all_words(model, 2 * n + 2)
    exact = exact_moments(model, specs, words)
    error = np.abs(vector_moments(words, representation.letters) - exact) / np.maximum(1, np.abs(exact))
    degree = np.array([len(w) for w in words])
    assert error[degree <= 2 * n + 1].max() < 1e-13
    assert error[degree == 2 * n + 2].max() > 1e-6  # the order is sharp: degree 2n + 2 is not reproduced


def test_passenger_letters_do_not_span_the_space():
    """Untied, fixed teacher: only M2, M2ᵀ drive the flow, so A2, B2 ride along as passengers —
    N drops from 73 to 43 at n = 2 while every word in the spanning letters of degree ≤ 5 and
    the passengers' own traces stay exact."""
    model, specs = Model("untied", 2, [1]), CASES[3][1]
    generators = model.definition.laws.driving_letters(model)
    assert generators == [0, 1, 2, 3, 4, 5]  # M1 M1ᵀ A1 B1 M2 M2ᵀ
    representation = initial_representation(model, specs, 2, generators=generators)
    assert representation.dim == 43
    words = [w for w in all_words(model, 5) if set(w) <= set(generators)] + [(6,), (7,)]
    np.testing.assert_allclose(
        vector_moments(words, representation.letters), exact_moments(model, specs, words), rtol=1e-12, atol=1e-13
    )


def test_free_product_dimension_and_gram_schmidt_agree():
    """Two free Wishart letters: dimension 2^{n+1} − 1; the general path (Gram–Schmidt on the exact
    moments of all letters together) gives the same space and the same moments."""
    model = Model("tied", 2, [1])
    specs = CASES[0][1]
    free = initial_representation(model, specs, 3)
    general = initial_representation(model, specs, 3, moments=lambda w: exact_moments(model, specs, w))
    assert free.dim == general.dim == 2**4 - 1
    words = all_words(model, 7)
    np.testing.assert_allclose(
        vector_moments(words, general.letters), vector_moments(words, free.letters), rtol=1e-10, atol=1e-14
    )


def test_dependent_words_reduce_the_space_exactly():
    """A scalar teacher cI makes every word containing it dependent: Gram–Schmidt keeps n + 1
    vectors (Gauss quadrature with n + 1 nodes), the same as the free-product path."""
    model = Model("tied", 2, [1])
    specs = {1: InitSpec(), 2: InitSpec(kind="identity", c=1.3)}
    general = initial_representation(model, specs, 6, moments=lambda w: exact_moments(model, specs, w))
    assert general.dim == 7 == initial_representation(model, specs, 6).dim
    np.testing.assert_allclose(general.letters[1], 1.3 * np.eye(7), atol=1e-8)


def test_eigenvalues_are_the_gauss_nodes_of_marchenko_pastur():
    """n = 64: the spectrum of X₁ equals the 65-node Gauss rule of the Marchenko–Pastur law,
    computed independently by Lanczos on a 400-node discretisation that integrates polynomials
    of degree < 798 exactly (x = 1 + cos θ, midpoint rule in θ)."""
    n = 64
    X = initial_representation(Model("tied", 2, [1]), {1: InitSpec(), 2: InitSpec(kind="identity")}, n).letters[0]
    x, w = marchenko_pastur_rule(1.0, 1.0, 400)
    Q = np.zeros((len(x), n + 1))
    Q[:, 0] = np.sqrt(w)
    alpha, beta = np.zeros(n + 1), np.zeros(n)
    for j in range(n + 1):  # Lanczos with full reorthogonalisation
        v = x * Q[:, j]
        alpha[j] = Q[:, j] @ v
        v -= Q[:, : j + 1] @ (Q[:, : j + 1].T @ v)
        v -= Q[:, : j + 1] @ (Q[:, : j + 1].T @ v)
        if j < n:
            beta[j] = np.linalg.norm(v)
            Q[:, j + 1] = v / beta[j]
    nodes = np.linalg.eigvalsh(np.diag(alpha) + np.diag(beta, 1) + np.diag(beta, -1))
    np.testing.assert_allclose(np.linalg.eigvalsh(X), nodes, rtol=0, atol=1e-13)


def test_gram_schmidt_drops_dependent_candidates_by_relative_pivot():
    """A one-letter moment oracle with a 3-point spectrum: the space stops at dimension 3."""
    x, w = np.array([0.5, 1.0, 2.0]), np.array([0.2, 0.5, 0.3])
    component = gram_component([0], [0], lambda words: np.array([w @ x ** len(v) for v in words]), 6)
    assert len(component.degrees) == 3
    np.testing.assert_allclose(np.linalg.eigvalsh(component.letters[0]), x, atol=1e-10)


def test_rank_deficient_representation_has_an_exact_kernel():
    """The rank split gives the student letter an exact kernel whose weight in the state vector is
    the atom's mass 1 − r (spectral measure of X at e₀), while every moment to degree 2n + 1 stays
    exact (against the planar-pairing moments, an independent computation)."""
    from momentgen.compiler.initial import exact_moments, initial_representation
    from momentgen.laws.representation import vector_moments

    model = Model("tied", 2, [1])
    specs = {1: InitSpec(width_ratio=0.3, scale=0.8), 2: InitSpec(scale=0.6, width_ratio=0.4)}
    n = 4
    X = initial_representation(model, specs, n).letters[0]
    w, V = np.linalg.eigh(X)
    assert np.sum(V[0, np.abs(w) < 1e-12] ** 2) == pytest.approx(1 - 0.3, abs=1e-10)
    words = [parse(x, "tied", 2) for x in enumerate_words("tied", 2, 2 * n + 1)]
    rep = initial_representation(model, specs, n)
    np.testing.assert_allclose(
        vector_moments(words, rep.letters), exact_moments(model, specs, words), rtol=1e-10, atol=1e-12
    )
