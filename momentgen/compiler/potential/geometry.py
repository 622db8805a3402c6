"""The pre-activations' covariance as a low-rank factor over token pairs, and its feasibility checks."""

import numba
import numpy as np

from ...core.errors import InfeasibleState
from .values import SecondDerivatives


class _PairGeometry:
    """Token-pair matrices for ``L`` tokens: T = C⊗C, T P, the mean weights c (the kind's: vec C, or 0 for a
    centred kind), and the factor blocks of T P_sym/anti."""

    def __init__(self, C, mean_weights):
        L = len(C)
        self.L = L
        self.T = np.kron(C, C)
        swap = np.zeros((L * L, L * L))
        for i in range(L):
            for j in range(L):
                swap[i * L + j, j * L + i] = 1
        self.TP = self.T @ swap
        self.c = np.asarray(mean_weights, float)  # E G = c ⊗ m: 0 for a centred kind (then b, Qm, mm are 0)
        w, V = np.linalg.eigh(self.T)
        root = (V * np.sqrt(np.clip(w, 0, None))) @ V.T
        sym, anti = [], []
        for i in range(L):
            for j in range(i, L):
                e = np.zeros(L * L)
                e[i * L + j] += 1
                e[j * L + i] += 1 if i != j else 0
                sym.append(e / np.linalg.norm(e))
                if i != j:
                    a = np.zeros(L * L)
                    a[i * L + j], a[j * L + i] = 1, -1
                    anti.append(a / np.sqrt(2))
        self.sym_root = root @ np.array(sym).T  # (L², L(L+1)/2): T P_sym = R Rᵀ
        self._contractions = np.stack([self.T.ravel(), self.TP.ravel(), np.outer(self.c, self.c).ravel()], axis=1)
        self.anti_root = root @ np.array(anti).reshape(-1, L * L).T  # (L², L(L−1)/2)

    def covariance(self, Q1, Q2):
        return kron(self.T, Q1) + kron(self.TP, Q2)

    def mean(self, m):
        return np.outer(self.c, m).ravel()  # = np.kron(c, m)

    def contract(self, grad, hess, K):
        """(∂Φ/∂Q1, ∂Φ/∂Q2, b, m-Hessian) from E∇ℓ (p,) and E∇²ℓ (p, p) by Price's theorem:
        ``∂Φ/∂Q1_kl = ½ Σ_ab T_ab H_ak,bl``, ``∂Φ/∂Q2_kl = ½ Σ_ab (TP)_ab H_ak,bl``, ``b = cᵀ g``,
        ``Φ_mm,kl = Σ_ab c_a c_b H_ak,bl`` — one product with the three weight matrices (this runs at every
        evaluation)."""
        P = self.L**2
        H = hess.reshape(P, K, P, K).transpose(1, 3, 0, 2).reshape(K * K, P * P)
        dQ1, dQ2, mm = (H @ self._contractions).T.reshape(3, K, K)
        return 0.5 * dQ1, 0.5 * dQ2, self.c @ grad.reshape(P, K), mm

    def contract_noise(self, outer, K):
        """(N1, N2) from E[∇ℓ ∇ℓᵀ] (p, p): the contractions of Γ's without its ½."""
        H = outer.reshape(self.L**2, K, self.L**2, K)
        return np.einsum("ab,akbl->kl", self.T, H), np.einsum("ab,akbl->kl", self.TP, H)

    def contract_second(self, hess, third, fourth, K):
        """`SecondDerivatives` from E∇²ℓ, E∇³ℓ and E∇⁴ℓ (full symmetric tensors) by Price's theorem."""
        P = self.L**2
        T = np.stack([self.T, self.TP])
        H4 = fourth.reshape(P, K, P, K, P, K, P, K)
        QQ = 0.25 * np.einsum("rab,sce,akblcmen->rklsmn", T, T, H4, optimize=True)
        H3 = third.reshape(P, K, P, K, P, K)
        Qm = 0.5 * np.einsum("rab,e,akblen->rkln", T, self.c, H3, optimize=True)
        mm = np.einsum("a,b,akbl->kl", self.c, self.c, hess.reshape(P, K, P, K))
        return SecondDerivatives(QQ, Qm, mm)


def kron(A, B):
    """np.kron of two matrices, element for element, without its per-call overhead (this runs at every
    evaluation)."""
    return (A[:, None, :, None] * B[None, :, None, :]).reshape(A.shape[0] * B.shape[0], A.shape[1] * B.shape[1])


def check_feasible(Q1, Q2):
    """Raise unless Q1 + Q2 and Q1 − Q2 (their symmetric parts) have eigenvalues ≥ 0 to the integrators' tolerance
    (10⁻⁸ relative: a student that has converged onto its teacher sits on the boundary, Q1 + Q2 singular, and states
    within rtol = 10⁻⁹ of it reach −5e-10). The spectra are compiled (`_extremes`), the message built only on failure:
    this runs at every evaluation of Φ, where numpy's per-call overhead is most of the cost."""
    extremes = _extremes(np.ascontiguousarray(Q1, dtype=float), np.ascontiguousarray(Q2, dtype=float))
    for name, (lowest, largest) in zip(("Q1 + Q2", "Q1 - Q2"), extremes):
        _check_extremes(lowest, largest, name, Q1, Q2)


def _check_extremes(lowest, largest, name, Q1, Q2):
    """`check_feasible` of one matrix, from its smallest eigenvalue and its largest in size."""
    if lowest < -1e-8 * max(1.0, largest):
        raise InfeasibleState(
            f"order parameters outside the feasible set: {name} has eigenvalue {lowest:.3g} < 0 at "
            f"Q1={Q1.tolist()}, Q2={Q2.tolist()}; q1 + q2 and q1 - q2 (tied: q; direct: Omega ± Psi) must be "
            "positive semi-definite"
        )


def _psd_root(Q, name, Q1, Q2):
    """The square root of the symmetric part of ``Q``, after `check_feasible`'s test (negative rounding to 0)."""
    root, lowest, largest = _symmetric_root(np.ascontiguousarray(Q, dtype=float))
    _check_extremes(lowest, largest, name, Q1, Q2)
    return root


def _restricted_basis(F, basis):
    """Orthonormal Q (r, f) spanning ``Fᵀ basis``: the directions in z = the rule's variables of a group that
    depends on G = mean + F z only through ``basisᵀ G``. From a QR made unique (diag R ≥ 0), so that it is
    continuous in the state."""
    return _unique_qr(np.ascontiguousarray(F.T @ basis))


# These run at every evaluation of Φ on small matrices (K × K, a few columns), where numpy's Python-level
# wrappers cost ten times LAPACK's work: compiled, they call the same LAPACK routines (syevd, geqrf/orgqr).


@numba.njit(cache=True)
def _symmetric_root(Q):
    w, V = np.linalg.eigh(0.5 * (Q + Q.T))
    return (V * np.sqrt(np.maximum(w, 0.0))) @ V.T, w.min(), np.abs(w).max()


@numba.njit(cache=True)
def _extremes(Q1, Q2):
    """((smallest eigenvalue, largest in size) of the symmetric part of Q1 + Q2, the same of Q1 − Q2)."""
    out = np.empty((2, 2))
    for i, Q in enumerate((Q1 + Q2, Q1 - Q2)):
        w = np.linalg.eigvalsh(0.5 * (Q + Q.T))
        out[i, 0], out[i, 1] = w.min(), np.abs(w).max()
    return out


@numba.njit(cache=True)
def all_finite(a, b, c):
    """Whether every entry of the three arrays is finite (a state's m, Q1, Q2; a value's dQ1, dQ2, b): one compiled
    pass, where numpy's ``isfinite(x).all()`` costs about 1.3 µs of wrappers an array at every evaluation of Φ."""
    for array in (a.ravel(), b.ravel(), c.ravel()):
        for x in array:
            if not np.isfinite(x):
                return False
    return True


@numba.njit(cache=True)
def _unique_qr(A):
    Q, R = np.linalg.qr(A)
    for j in range(R.shape[1]):
        if R[j, j] < 0:
            Q[:, j] = -Q[:, j]
    return Q
