"""The exact d = ∞ solutions the closures are measured against (`momentgen.evidence.oracles`), each checked
against a second, independent form.
"""

import numpy as np
import pytest
from scipy.integrate import quad

from momentgen.compiler.initial import InitSpec
from momentgen.compiler.potential import Potential
from momentgen.dynamics.riccati import StudentLaw
from momentgen.evidence.oracles import (
    riccati_tied_moments,
    solvable_tied_moments,
)
from momentgen.setting.config import parse_config
from tests.helpers import SOLVABLE


def test_riccati_oracle_equals_the_closed_form_on_the_solvable_case():
    """The subordination oracle (general loss, free teacher) on the linear case with teacher I:
    equal to the logistic closed form to integrator tolerance."""
    config = parse_config(SOLVABLE)
    t = np.linspace(0, 1, 11)
    oracle = riccati_tied_moments(Potential(config.loss(), "tied"), InitSpec(), InitSpec(kind="identity"), t)
    exact = solvable_tied_moments(t, 1.0, 1.0, 1.0)
    for w in exact:
        np.testing.assert_allclose(oracle[w], exact[w], rtol=0, atol=1e-10)


@pytest.mark.parametrize("rate, jump", [(1.0, 0.64), (0.5, 1.0), (2.0, 0.7)])
def test_the_students_closed_form_is_the_marchenko_pastur_integral(rate, jump):
    """φ(u) = τ(S₀(1 + uS₀)⁻¹) and φ'(u) against adaptive quadrature of the free Poisson density in v = √(x − a)
    (smooth at a hard edge), with breakpoints where x ~ 1/u (measured: 1e-13 relative up to u = 1000, where the
    edge carries φ)."""
    law = StudentLaw.wishart(rate, jump)
    a, b = law.edges

    def integral(power, u):
        def integrand(v):
            x = a + v * v
            return (x / (1 + u * x)) ** power * np.sqrt(max(b - x, 0.0)) / (2 * np.pi * jump * x) * 2 * v * v

        points = [p for p in np.sqrt(np.logspace(-2, 2, 5) / max(u, 1e-3)) if p < np.sqrt(b - a)]
        return quad(integrand, 0, np.sqrt(b - a), points=points or None, limit=400, epsabs=0, epsrel=1e-13)[0]

    for u in (0.0, 0.3, 5.0, 1000.0):
        value, slope = integral(1, u), -integral(2, u)
        phi, dphi = law.value_and_slope(u)
        assert phi == pytest.approx(value, rel=2e-10)
        assert dphi == pytest.approx(slope, rel=2e-9)
        assert law.taylor(u, 4)[:2] == pytest.approx([phi, dphi], rel=1e-9)  # the Cauchy integral's coefficients
