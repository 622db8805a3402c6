"""The exact path of `momentgen.compiler.potential.Potential` for polynomial losses: Isserlis/Wick with mean."""

from dataclasses import dataclass

import numpy as np
import sympy

from .geometry import check_feasible
from .values import PotentialValue, SecondDerivatives


@dataclass
class _Polynomial:
    """A polynomial in the pre-activations, shaped like a loss for `_Wick._expectation`."""

    expr: object
    variables: list


class _Wick:
    """Closed-form Φ(m, Q1, Q2) of a polynomial loss by Isserlis/Wick with mean; symbolic derivatives."""

    def __init__(self, potential):
        loss, K, pairs = potential.loss, potential.K, potential._pairs
        self.K = K
        self.m = sympy.symbols(f"m_1:{K + 1}", real=True)
        self.Q1 = sympy.Matrix(K, K, lambda k, l: sympy.Symbol(f"Q1_{k + 1}_{l + 1}", real=True))
        self.Q2 = sympy.Matrix(K, K, lambda k, l: sympy.Symbol(f"Q2_{k + 1}_{l + 1}", real=True))
        mean = [  # E G = c ⊗ m: a centred kind's weights c are 0
            sympy.nsimplify(float(pairs.c[a // K])) * self.m[a % K] for a in range(len(loss.variables))
        ]
        cov = self._covariance(pairs, len(loss.variables))
        self._loss, self._mean, self._cov, self._outer = loss, mean, cov, None
        self.phi = sympy.expand(self._expectation(loss, mean, cov))
        params = list(self.m) + list(self.Q1) + list(self.Q2)
        outputs = [self.phi] + [sympy.diff(self.phi, s) for s in list(self.Q1) + list(self.Q2) + list(self.m)]
        outputs += [sympy.diff(self.phi, a, b) for a in self.m for b in self.m]
        self._function = sympy.lambdify(params, outputs, modules="numpy", cse=True)
        self._params = params
        self._second = None

    def _covariance(self, pairs, p):
        K = self.K
        T, TP = (
            sympy.Matrix(x.shape[0], x.shape[1], [sympy.nsimplify(float(v)) for v in x.ravel()])
            for x in (pairs.T, pairs.TP)
        )
        Q1 = (self.Q1 + self.Q1.T) / 2  # Φ written symmetrically in Q_kl, Q_lk
        Q2 = (self.Q2 + self.Q2.T) / 2
        return [
            [T[a // K, b // K] * Q1[a % K, b % K] + TP[a // K, b // K] * Q2[a % K, b % K] for b in range(p)]
            for a in range(p)
        ]

    @staticmethod
    def _expectation(loss, mean, cov):
        memo = {(): sympy.Integer(1)}

        def moment(factors):  # E[Π G_a] over a sorted tuple of variable indices (Stein recursion)
            if factors not in memo:
                first, rest = factors[0], factors[1:]
                total = mean[first] * moment(rest)
                for j, other in enumerate(rest):
                    total += cov[first][other] * moment(rest[:j] + rest[j + 1 :])
                memo[factors] = sympy.expand(total)
            return memo[factors]

        poly = sympy.Poly(loss.expr, *loss.variables)
        return sum(
            coeff * moment(tuple(a for a, e in enumerate(exps) for _ in range(e))) for exps, coeff in poly.terms()
        )

    def gradient_outer(self, m, Q1, Q2):
        """E[∇ℓ ∇ℓᵀ] (p, p) in closed form (Wick), compiled on first use."""
        p = len(self._loss.variables)
        if self._outer is None:
            v = self._loss.variables
            grad = [sympy.diff(self._loss.expr, x) for x in v]
            entries = [self._expectation_of(sympy.expand(grad[a] * grad[b]), v) for a in range(p) for b in range(a, p)]
            self._outer = sympy.lambdify(self._params, entries, modules="numpy", cse=True)
        values = np.array(self._outer(*m, *Q1.ravel(), *Q2.ravel()), dtype=float)
        out = np.zeros((p, p))
        out[np.triu_indices(p)] = values
        return out + np.triu(out, 1).T

    def _expectation_of(self, expr, variables):
        return sympy.expand(self._expectation(_Polynomial(expr, variables), self._mean, self._cov))

    def second(self, m, Q1, Q2):
        K = self.K
        if self._second is None:
            Q = list(self.Q1) + list(self.Q2)
            outputs = [sympy.diff(self.phi, a, b) for a in Q for b in Q]
            outputs += [sympy.diff(self.phi, a, n) for a in Q for n in self.m]
            outputs += [sympy.diff(self.phi, a, b) for a in self.m for b in self.m]
            self._second = sympy.lambdify(self._params, outputs, modules="numpy", cse=True)
        out = np.array(self._second(*m, *Q1.ravel(), *Q2.ravel()), dtype=float)
        n = 2 * K * K
        return SecondDerivatives(
            out[: n * n].reshape(2, K, K, 2, K, K),
            out[n * n : n * n + n * K].reshape(2, K, K, K),
            out[n * n + n * K :].reshape(K, K),
        )

    def evaluate(self, m, Q1, Q2, estimate_error):
        K = self.K
        check_feasible(Q1, Q2)
        out = np.array(self._function(*m, *Q1.ravel(), *Q2.ravel()), dtype=float)
        dQ1, dQ2 = out[1 : 1 + K * K].reshape(K, K), out[1 + K * K : 1 + 2 * K * K].reshape(K, K)
        b = out[1 + 2 * K * K : 1 + 2 * K * K + K]
        return PotentialValue(
            float(out[0]), dQ1, dQ2, b, out[1 + 2 * K * K + K :].reshape(K, K), 0.0 if estimate_error else None
        )
