"""Benchmark: one evaluation of Φ and all its gradients for softmax-mse, L = 2, K = 2 (tied).

momentgen: the calibrated rule at rtol = 1e-6 (term groups, trapezoidal rule on the
directions the loss depends on, Price's theorem for the gradients, numba integrand).
Baseline, measured in the same run: what public code for these models does — tensor
Gauss–Hermite with 17 nodes per dimension over the 4 relevant dimensions (83 521 points),
the loss evaluated with numpy, gradients by central finite differences of Φ (7 Φ
evaluations for the 3 independent entries of q). Both are compared with a very fine rule.

Run: ``make bench`` (or ``python benchmarks/bench_potential.py``).
"""

from common import best  # noqa: I001  (sets one BLAS thread before numpy loads)

import time  # noqa: E402

import numpy as np  # noqa: E402
import sympy  # noqa: E402

from momentgen.losses import builtin  # noqa: E402
from momentgen.potential import Potential, _psd_root  # noqa: E402

BUDGET_MS = 5.0
Q = np.array([[1.2, 0.4], [0.4, 0.9]])




class GaussHermite17:
    """Baseline: 17⁴-point tensor Gauss–Hermite over the 4 relevant directions, FD gradients."""

    def __init__(self, potential):
        loss = potential.loss
        self.loss = sympy.lambdify(loss.variables, loss.expr, modules="numpy")
        self.pairs = potential._pairs
        self.features = np.hstack(potential._backend.features)  # the 4 directions softmax depends on
        x, w = np.polynomial.hermite_e.hermegauss(17)
        grid = np.meshgrid(*[x] * 4, indexing="ij")
        self.z = np.stack([g.ravel() for g in grid], axis=1)
        self.w = np.prod(np.meshgrid(*[w / np.sqrt(2 * np.pi)] * 4, indexing="ij"), axis=0).ravel()

    def phi(self, q):
        F = np.kron(self.pairs.sym_root, _psd_root(2 * q, "2q", ""))
        basis, _ = np.linalg.qr(F.T @ self.features)
        G = self.z @ (F @ basis).T
        return self.w @ self.loss(*G.T)

    def gradients(self, q, h=1e-4):
        grads = {}
        for k, l in ((0, 0), (0, 1), (1, 1)):
            E = np.zeros((2, 2))
            E[k, l] = E[l, k] = h
            fd = (self.phi(q + E) - self.phi(q - E)) / (2 * h)
            grads[k, l] = fd if k == l else fd / 2  # Γ_kl = Γ_lk: a symmetric move changes both
        return self.phi(q), grads


def main():
    loss = builtin("softmax-mse", L=2, K=2)
    start = time.perf_counter()
    potential = Potential(loss, "tied", rtol=1e-6)
    potential.evaluate(q=Q)
    setup = time.perf_counter() - start
    value, seconds = potential.evaluate(q=Q), best(lambda: potential.evaluate(q=Q), repeat=30)
    reference = Potential(loss, "tied", level=45).evaluate(q=Q)
    Gamma, Gamma_ref = value.dQ1 + value.dQ2, reference.dQ1 + reference.dQ2

    baseline = GaussHermite17(potential)
    (phi_b, grads_b), seconds_b = baseline.gradients(Q), best(lambda: baseline.gradients(Q), repeat=3)
    Gamma_b = np.array([[grads_b[0, 0], grads_b[0, 1]], [grads_b[0, 1], grads_b[1, 1]]])

    def rel(a, b):
        return np.max(np.abs(a - b)) / np.max(np.abs(b))

    print("softmax-mse, L = 2, K = 2, tied, q =", Q.tolist())
    print(f"{'method':46s} {'time':>10s} {'err Phi':>9s} {'err Gamma':>10s}")
    verdict = "ok" if seconds * 1e3 <= BUDGET_MS else "OVER"
    print(f"{'momentgen (rtol 1e-6, level %d)' % potential._backend.level:46s} {seconds * 1e3:8.2f}ms "
          f"{rel(value.phi, reference.phi):9.1e} {rel(Gamma, Gamma_ref):10.1e}   budget {BUDGET_MS} ms: {verdict}")  # fmt: skip
    print(f"{'baseline: Gauss-Hermite 17^4 + FD gradients':46s} {seconds_b * 1e3:8.2f}ms "
          f"{rel(phi_b, reference.phi):9.1e} {rel(Gamma_b, Gamma_ref):10.1e}")  # fmt: skip
    print(f"speed-up: {seconds_b / seconds:.0f}x   (one-off setup incl. compile or cache load: {setup:.2f} s)")
    print(f"reported error estimate {value.error if value.error is not None else 'n/a'}; "
          f"with estimate_error=True: {potential.evaluate(q=Q, estimate_error=True).error:.1e}")


if __name__ == "__main__":
    main()
