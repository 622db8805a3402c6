"""Benchmark: one evaluation of Φ and all its gradients for softmax-mse, L = 2, K = 2 (tied).

momentgen: the calibrated rule at rtol = 1e-6 (term groups, trapezoidal rule on the
directions the loss depends on, Price's theorem for the gradients, numba integrand).
Baseline, measured in the same run: what public code for these models does — tensor
Gauss–Hermite with 17 nodes per dimension over the 4 relevant dimensions (83 521 points),
the loss evaluated with numpy, gradients by central finite differences of Φ (7 Φ
evaluations for the 3 independent entries of q). Both are compared with a very fine rule.

Second part: the four-head softmax loss of `multihead_softmax` (K = 4, L = 2), whose squares
multiplied out are sums of pair-of-heads terms (2-dimensional integrals), against the same
potential integrated row by row (4-dimensional, what momentgen did before), both calibrated to
rtol = 1e-4 and timed in interleaved pairs at a state along the run.

Third part: a loss's parse (what every `load_config` and every ensemble worker pays) — the first in a process, whose
singularity check takes the loss's symbolic first and second derivatives, against a second parse of the same loss,
which reuses the check's verdict (`momentgen.setting.losses._singularity`); softmax-mse at L = 2 and 3.

Run: ``make bench`` (or ``python benchmarks/bench_potential.py``).
"""

import functools
import time

import numpy as np
import sympy
from common import best, paired, pick, row_by_row

from momentgen.compiler.potential import Potential
from momentgen.setting import losses
from momentgen.setting.losses import builtin

BUDGET_MS = 5.0
Q = np.array([[1.2, 0.4], [0.4, 0.9]])
L, K = 2, 2


def covariance(q):
    """Cov(G_ijk, G_i'j'l) = (C_ii'C_jj' + C_ij'C_ji') q_kl with C = I, G flattened as ((i·L + j)·K + k)."""
    out = np.zeros((L * L * K, L * L * K))
    for i, j, k, a, b, m in np.ndindex(L, L, K, L, L, K):
        out[(i * L + j) * K + k, (a * L + b) * K + m] = ((i == a) * (j == b) + (i == b) * (j == a)) * q[k, m]
    return out


class GaussHermite17:
    """Baseline, independent of momentgen's integrator: 17⁴-point tensor Gauss–Hermite over the 4
    directions a row softmax depends on (D_ik = G_i1k − G_i2k: a softmax ignores a shift of its row),
    finite-difference gradients."""

    def __init__(self, loss):
        self.loss = sympy.lambdify(loss.variables, loss.expr, modules="numpy")
        self.A = np.zeros((4, L * L * K))  # D = A G
        for row, (i, k) in enumerate(np.ndindex(L, K)):
            self.A[row, (i * L + 0) * K + k], self.A[row, (i * L + 1) * K + k] = 1.0, -1.0
        x, w = np.polynomial.hermite_e.hermegauss(17)
        grid = np.meshgrid(*[x] * 4, indexing="ij")
        self.z = np.stack([g.ravel() for g in grid], axis=1)
        self.w = np.prod(np.meshgrid(*[w / np.sqrt(2 * np.pi)] * 4, indexing="ij"), axis=0).ravel()

    def phi(self, q):
        values, vectors = np.linalg.eigh(self.A @ covariance(q) @ self.A.T)
        D = self.z @ (vectors * np.sqrt(np.clip(values, 0, None))).T
        G = np.zeros((len(D), L * L * K))
        for row, (i, k) in enumerate(np.ndindex(L, K)):
            G[:, (i * L + 0) * K + k] = D[:, row]  # G_i2k = 0: the softmax only sees the difference
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

    baseline = GaussHermite17(loss)
    (phi_b, grads_b), seconds_b = baseline.gradients(Q), best(lambda: baseline.gradients(Q), repeat=pick(3, 1))
    Gamma_b = np.array([[grads_b[0, 0], grads_b[0, 1]], [grads_b[0, 1], grads_b[1, 1]]])

    def rel(a, b):
        return np.max(np.abs(a - b)) / np.max(np.abs(b))

    print("softmax-mse, L = 2, K = 2, tied, q =", Q.tolist())
    print(f"{'method':46s} {'time':>10s} {'err Phi':>9s} {'err Gamma':>10s}")
    verdict = "ok" if seconds * 1e3 <= BUDGET_MS else "OVER"
    label = f"momentgen (rtol 1e-6, level {potential.accuracy_report()['level']})"
    print(
        f"{label:46s} {seconds * 1e3:8.2f}ms "
        f"{rel(value.phi, reference.phi):9.1e} {rel(Gamma, Gamma_ref):10.1e}   budget {BUDGET_MS} ms: {verdict}"
    )
    print(
        f"{'baseline: Gauss-Hermite 17^4 + FD gradients':46s} {seconds_b * 1e3:8.2f}ms "
        f"{rel(phi_b, reference.phi):9.1e} {rel(Gamma_b, Gamma_ref):10.1e}"
    )
    print(f"speed-up: {seconds_b / seconds:.0f}x   (one-off setup incl. compile or cache load: {setup:.2f} s)")
    print(
        f"reported error estimate {value.error if value.error is not None else 'n/a'}; "
        f"with estimate_error=True: {potential.evaluate(q=Q, estimate_error=True).error:.1e}"
    )

    multihead()
    parses()


def parses():
    """A loss's first parse in a process (its singularity check made) against a second one (its verdict reused)."""
    print("\nparsing a loss: the first time in a process (singularity check) vs again (its verdict kept)")
    for tokens in pick((2, 3), (2,)):
        losses._singularity.cache_clear()
        start = time.perf_counter()
        builtin("softmax-mse", L=tokens, K=2)
        first = time.perf_counter() - start
        again = best(functools.partial(builtin, "softmax-mse", L=tokens, K=2), repeat=5)
        print(f"softmax-mse, L = {tokens}: first {first:.3f} s, again {again * 1e3:.2f} ms, ratio {first / again:.0f}")


def multihead():
    """Φ of four softmax heads: pair-of-heads groups (now) vs one group per row (before)."""
    loss = builtin("multihead-softmax-mse", L=2, K=4, student=[1, 2], teacher=[3, 4])
    rng = np.random.default_rng(3)
    A = rng.standard_normal((4, 4)) * 0.4
    q = 0.7 * np.eye(4) + A @ A.T
    pairs = Potential(loss, "tied", rtol=1e-4)
    with row_by_row():
        rows = Potential(loss, "tied", rtol=1e-4)
    fine = Potential(loss, "tied", level=60).evaluate(q=q)
    now, before = pairs.evaluate(q=q), rows.evaluate(q=q)
    seconds_now, seconds_before, ratio = paired(
        lambda: pairs.evaluate(q=q), lambda: rows.evaluate(q=q), repeat=15, inner=pick(5, 1)
    )

    def rel(v):  # rtol's own measure: the largest error relative to the largest of |Φ|, |∂Φ/∂q|
        scale = max(abs(fine.phi), np.abs(fine.dQ1).max())
        return max(abs(v.phi - fine.phi), np.abs(v.dQ1 - fine.dQ1).max()) / scale

    print("\nmultihead-softmax-mse, L = 2, K = 4 (two student, two teacher heads), tied")
    print(f"{'grouping':46s} {'time':>10s} {'rel err':>9s} {'level':>6s}")
    for label, seconds, value, potential in (
        ("pairs of heads, 2-D integrals (now)", seconds_now, now, pairs),
        ("one group per row, 4-D integrals (before)", seconds_before, before, rows),
    ):
        level = potential.accuracy_report()["level"]
        print(f"{label:46s} {seconds * 1e3:8.2f}ms {rel(value):9.1e} {level:6d}")
    print(f"ratio now/before: {ratio:.3f} (median of interleaved pairs)")


if __name__ == "__main__":
    main()
