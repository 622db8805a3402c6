"""The edge-adapted rule (`momentgen.laws.edge`): exact moments, a layer that reaches the depth it claims, and a
root that carries what a dense letter cannot.

Independent values: the Marchenko–Pastur moments in closed form (Narayana polynomials:
``μ_k = σ^{2k} Σ_j N(k, j) r^j``) and the law's own Jacobi matrix (`free_poisson_jacobi`, the free Poisson
recurrence). The closure-level checks against the exact eigenvalue flow are in tests/test_risk.py.
"""

from math import comb

import numpy as np
import pytest

from momentgen.compiler.hierarchy import Model
from momentgen.compiler.initial import layered_index
from momentgen.laws.edge import EDGE_DEPTH, edge_rule, free_poisson_law, measure_component
from momentgen.laws.representation import free_poisson_jacobi
from momentgen.models.base import psd_root
from momentgen.setting.inits import InitSpec


def narayana_moment(k, rate, jump):
    """μ_k of the Marchenko–Pastur law of rate r and jump σ²: σ^{2k} Σ_{j=1..k} (1/k) C(k, j) C(k, j − 1) r^j."""
    return jump**k * sum(comb(k, j) * comb(k, j - 1) * rate**j for j in range(1, k + 1)) / k if k else 1.0


@pytest.mark.parametrize(
    "rate, jump, n", [(1.0, 0.64, 3), (1.0, 1.0, 12), (1.0, 0.64, 40), (2.0, 1.0, 6), (1.1, 0.5, 9)]
)
def test_the_rule_has_every_moment_of_the_law_to_degree_2n_plus_1(rate, jump, n):
    """The layer's cells plus the Gauss rule of the remainder: moments of degree ≤ 2n + 1 relative error ≤ 1e-10
    (measured ≤ 2e-13 up to n = 12, 3e-12 at n = 40), positive weights, nodes inside the support."""
    law = free_poisson_law(rate, jump)
    x, w = edge_rule(law, n)
    assert np.all(w > 0) and x.min() >= law.lower and x.max() <= law.upper
    for k in range(2 * n + 2):
        assert np.sum(w * x**k) == pytest.approx(narayana_moment(k, rate, jump), rel=1e-10), k


def test_the_layer_reaches_its_depth_with_a_fixed_number_of_nodes_per_decade():
    """Square student (hard edge at 0): nodes down to window·e^{−36} (≈ 1e-17 here), two per cell of width 0.5
    in log x: between 1e-15 and 1e-5 there are 2·ln(10)·10/0.5 ≈ 92 nodes (± a cell at each end)."""
    x, _ = edge_rule(free_poisson_law(1.0, 0.64), 6)
    assert 0 < x.min() < 1e-16
    count = np.sum((x > 1e-15) & (x < 1e-5))
    assert abs(count - 2 * np.log(10) * 10 / 0.5) <= 4, count
    assert EDGE_DEPTH == 36.0


def test_the_component_is_the_laws_jacobi_matrix_then_the_layer_and_its_root_keeps_tiny_eigenvalues():
    """Its first n + 1 basis vectors are the law's Krylov space: the leading block is the free Poisson Jacobi
    matrix (to 1e-10). Its root F has F Fᵀ = X, and its singular values squared are the nodes to relative 1e-8
    even at 1e-17; the root the flow would otherwise take (`psd_root`, which treats eigenvalues below 1e-12
    of the largest as the kernel, so that a rank-deficient letter keeps an exact one) loses every node
    below 2.6e-12: they would never escape."""
    n = 5
    law = free_poisson_law(1.0, 0.64)
    x, w = edge_rule(law, n)
    component = measure_component(0, x, w, n)
    X, F = component.letters[0], component.roots[0]
    a, b = free_poisson_jacobi(n, 1.0, 0.64)
    np.testing.assert_allclose(X[: n + 1, : n + 1], np.diag(a) + np.diag(b, 1) + np.diag(b, -1), atol=1e-10)
    assert list(component.degrees[: n + 2]) == [*range(n + 1), n] and component.degrees.max() == n
    np.testing.assert_allclose(F @ F.T, X, atol=1e-13)
    singular = np.sort(np.linalg.svd(F, compute_uv=False) ** 2)
    np.testing.assert_allclose(singular, np.sort(x), rtol=1e-8)
    lost = np.sum(x < 1e-12 * x.max())
    assert psd_root(X).shape[1] == len(x) - lost and lost > 20


def test_a_window_too_wide_for_the_remainder_is_narrowed():
    """Width ratio 1.5 at step 1: a layer eight Gauss-node distances wide left a remainder that was not a
    positive measure (a node below the edge, −0.04, and a risk that grew without bound); the window is halved
    until the remainder's Gauss rule exists, so every node is in the support and every weight positive."""
    law = free_poisson_law(1.5, 0.64)
    for n in (1, 2, 6, 12):
        x, w = edge_rule(law, n, step=1.0, depth=32.0)
        assert np.all(w > 0) and x.min() >= law.lower and x.max() <= law.upper, n


def test_the_layer_goes_where_its_flow_is_represented_exactly():
    """Only when every other index is a multiple of the identity (the layer then sees scalars), and only for a
    law without an atom: a square or wide Wishart student with an identity teacher gets it; a Wishart teacher,
    a rank-deficient student (atom at 0, held by the rank split) or the untied kind do not."""
    tied = Model("tied", 2, [1])
    teacher = InitSpec(kind="identity", c=1.5)
    edge = (0.5, 36.0)
    assert layered_index(tied, {1: InitSpec(), 2: teacher}, edge) == 1
    assert layered_index(tied, {1: InitSpec(width_ratio=2.0), 2: teacher}, edge) == 1
    assert layered_index(tied, {1: InitSpec(), 2: InitSpec()}, edge) is None
    assert layered_index(tied, {1: InitSpec(width_ratio=0.5), 2: teacher}, edge) is None
    assert layered_index(tied, {1: InitSpec(), 2: teacher}, None) is None
    assert layered_index(Model("untied", 2, [1]), {1: InitSpec(), 2: InitSpec(kind="identity")}, edge) is None
