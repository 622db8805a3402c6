"""The compiled kernels evaluate the expressions they are given (against mpmath at 50 digits)."""

import mpmath
import numpy as np
import pytest
import sympy

from momentgen.core import codegen

x, y = sympy.symbols("x y")


# multiples, negatives, fractions, sums and nestings of exponentials: the ones `_shared_exponentials` rewrites
# as powers of one exponential (exp(2x), exp(-x), exp(-2x - 2y), exp(x + y)³) and the ones it leaves alone
EXPRESSIONS = [
    sympy.exp(2 * x) + y * sympy.exp(x),
    sympy.exp(-x) / (1 + sympy.exp(x)) ** 2,
    sympy.exp(x + y) ** 3 - sympy.exp(-2 * x - 2 * y),
    sympy.exp(x / 2) * sympy.exp(-3 * x / 2),
    sympy.exp(sympy.exp(x) / 4),
    sympy.exp(5 * y) + sympy.exp(2 * x + 1),
]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MOMENTGEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(codegen, "_FALLBACK", {})
    return tmp_path / "cache"


def test_pointwise_kernel_matches_mpmath_with_shared_exponentials(cache):
    """Measured: largest relative difference 2.5e-15 over 200 points in [-3, 3]² (the rounding of a few
    products and powers); bound 1e-14."""
    kernel = codegen.compile_pointwise(EXPRESSIONS, [x, y])
    points = np.random.default_rng(0).uniform(-3, 3, (200, 2))
    values = kernel(points)
    with mpmath.workdps(50):
        exact = np.array(
            [
                [float(sympy.N(e.subs({x: sympy.Float(a, 50), y: sympy.Float(b, 50)}), 50)) for e in EXPRESSIONS]
                for a, b in points
            ]
        )
    assert np.max(np.abs(values - exact) / np.abs(exact)) < 1e-14
    source = next(cache.glob("kernels/k_*.py")).read_text()
    # one exponential per distinct base: x (exp(2x), exp(-x), sympy's exp(x/2)·exp(-3x/2) = exp(-x), the nested
    # one's inner exp(x)), x + y (its cube and exp(-2x - 2y)), 5y (above the power limit), 2x + 1, the nested one
    assert source.count("math.exp(") == 5, source


def test_exponential_powers_stay_within_the_limit():
    """exp(n x) with |n| ≤ 4 becomes a power of exp(x); beyond, its own exponential."""
    definitions, outputs = codegen._shared_exponentials([sympy.exp(4 * x), sympy.exp(-x), sympy.exp(5 * x)])
    assert [d[1] for d in definitions] == [sympy.exp(x), sympy.exp(5 * x)]
    name = definitions[0][0]
    assert outputs[:2] == [name**4, name**-1]
