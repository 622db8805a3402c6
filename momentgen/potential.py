"""The potential Φ = E ℓ(G) and every derivative the hierarchy needs (MATH.md §2).

At d = ∞ the pre-activations ``G_ijk`` are Gaussian with mean ``C_ij m_k`` (untied; 0 for
tied and direct) and covariance

    Cov(G_ijk, G_i'j'l) = C_ii'C_jj' Q1_kl + C_ij'C_ji' Q2_kl,

where ``(Q1, Q2) = (q, q)`` tied, ``(q⁽¹⁾, q⁽²⁾)`` untied and ``(Ω, Ψ)`` direct. Writing
``T = C⊗C`` on token pairs and ``P`` for the swap ``(i, j) ↦ (j, i)``, the covariance is
``Σ = (T P_sym) ⊗ (Q1 + Q2) + (T P_anti) ⊗ (Q1 − Q2)``, which gives a low-rank factor
``Σ = F Fᵀ`` and the feasibility condition ``Q1 ± Q2 ⪰ 0``.

Derivatives treat ``Q_kl`` and ``Q_lk`` as separate variables (Φ written symmetrically):
by Price's theorem ``∂Φ/∂Q1_kl = ½ Σ T_{ij,i'j'} E[∂²ℓ/∂G_ijk ∂G_i'j'l]`` (``T P`` for Q2) and
``b_k = ∂Φ/∂m_k = Σ_ij C_ij E[∂ℓ/∂G_ijk]``. Model coefficients: tied ``Γ = ∂Φ/∂Q1 + ∂Φ/∂Q2``;
untied ``a⁽¹⁾ = ∂Φ/∂Q1``, ``a⁽²⁾ = ∂Φ/∂Q2``, ``b``; direct ``A = ∂Φ/∂Q1``, ``B = ∂Φ/∂Q2``.

The finite-learning-rate term (docs/FINITE_LR.md) needs one more Gaussian expectation, of the
outer product of the loss gradient ``c = ∂ℓ/∂G``: ``N1_kl = Σ T_{ij,i'j'} E[c_ijk c_i'j'l]`` and
``N2_kl`` the same with ``T P`` (`Potential.noise_at`).

Two ways to compute them, chosen by `Potential` (``method="auto"``):

* **exact** (polynomial ℓ): Φ is a polynomial in (m, Q1, Q2) by Isserlis/Wick with mean;
  every derivative is symbolic and compiled with ``sympy.lambdify``;
* **quadrature** (any ℓ twice differentiable): a fixed Gaussian rule over the factor of
  the covariance restricted to the directions ℓ depends on (the span of ∇ℓ: a row softmax
  ignores a constant added to its row): a tensor trapezoidal rule on [−10, 10] up to 4
  dimensions (geometric convergence for integrands analytic in a strip), a Smolyak sparse
  grid of Gauss–Hermite rules beyond. ℓ, ∇ℓ and ∇²ℓ come from symbolic derivatives,
  compiled with numba (`momentgen.codegen`); gradients by Price's theorem, no finite
  differences. The level is calibrated at the first state to the requested ``rtol``
  (estimated from the geometric tail of successive levels) and then kept fixed, so that Φ is
  smooth in q for the ODE solver; along a run the rule is checked at states far from the
  calibration state (`Potential.audit`, `Potential.accuracy_report`) and a run whose rule
  stopped meeting ``rtol`` is redone on a refined rule (`momentgen.integrate.audited`).
"""

import contextlib
import warnings
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations_with_replacement, permutations, product
from math import comb

import numpy as np
import sympy

from . import models
from .codegen import compile_weighted_sum
from .errors import InfeasibleState, NonFinitePotential, NoSlavedMean, PotentialError, UnsupportedLoss

__all__ = ["Potential", "PotentialValue", "SecondDerivatives"]

_TENSOR_MAX_DIM = 4
_TRUNCATION = 10.0  # the trapezoidal rule covers [-10, 10]: Gaussian mass outside ~1e-23
_MAX_POINTS = 400_000
_MAX_LEVEL = 200
_DIVERGED = 1e-3  # a rule still changing this much at its finest level: Φ is (probably) infinite
# The noise second moments E[∇ℓ∇ℓᵀ] of the finite-learning-rate term: relative accuracy 1e-3. The term
# is the first order of an expansion in κ whose next order is O(κ) relative to it (5e-2 at κ = 0.05),
# so its coefficients need no more. The whole loss is one integral over every direction it depends on
# (e.g. 4 for softmax-mse at L = K = 2), on [−6, 6] (Gaussian mass outside 2e-9 ≪ 1e-3).
_NOISE_RTOL = 1e-3
_NOISE_TRUNCATION = 6.0


@dataclass
class PotentialValue:
    """Φ and its derivatives at one state; arrays indexed by 0-based k, l.

    ``dQ1``, ``dQ2``: (K, K) ``∂Φ/∂Q1_kl``, ``∂Φ/∂Q2_kl``; ``b``: (K,) ``∂Φ/∂m_k``;
    ``m_hessian``: (K, K) ``∂²Φ/∂m_k∂m_l`` (both zero for a kind without a mean); ``error``: estimated
    absolute error of Φ and of the largest derivative (0 for the exact path; None if not requested).
    """

    phi: float
    dQ1: np.ndarray
    dQ2: np.ndarray
    b: np.ndarray
    m_hessian: np.ndarray
    error: float = None

    def coefficients(self, kind, trainable):
        """The hierarchy's coefficients that Φ alone determines (`ModelKind.potential_families`) for the
        trainable rows, keyed by symbol name (e.g. ``Gamma[1,2]``)."""
        K = len(self.b)
        arrays = models.get(kind).potential_families(self)
        return {
            f"{name}[{k},{l + 1}]": array[k - 1, l]
            for name, array in arrays.items()
            for k in trainable
            for l in range(K)
        }


@dataclass
class SecondDerivatives:
    """Second derivatives of Φ: ``QQ[r, k, l, s, m, n] = ∂²Φ/∂Q(r+1)_kl ∂Q(s+1)_mn`` (2, K, K, 2, K, K),
    ``Qm[r, k, l, n] = ∂²Φ/∂Q(r+1)_kl ∂m_n`` (2, K, K, K) and ``mm = ∂²Φ/∂m∂m`` (K, K)."""

    QQ: np.ndarray
    Qm: np.ndarray
    mm: np.ndarray


class Potential:
    """Φ(m, Q1, Q2) for one loss and one model kind, with its derivatives.

    Parameters
    ----------
    loss : momentgen.losses.Loss
    kind : "tied" | "untied" | "direct"
    C : array_like, shape (L, L), optional
        Token covariance (PSD); identity by default.
    method : "auto" | "exact" | "quadrature"
        "auto" takes the exact path for polynomial losses.
    rtol : float
        Target relative accuracy of the quadrature rule, calibrated at the first state.
    level : int, optional
        Fix the rule instead of calibrating it: ``2·level + 2`` trapezoidal nodes per
        dimension (up to 4 dimensions), or the Smolyak sparse-grid level beyond.
    seed : int
        Seed of the random points that probe which directions ℓ depends on.

    Call `evaluate` with the state of the model: tied ``q``; untied ``m, q1, q2``; direct
    ``Omega, Psi`` (all (K, K), ``m`` (K,)). Cost of one quadrature evaluation: about
    ``n_points × (cost of ℓ, ∇ℓ, ∇²ℓ)``; the compile of the integrand takes a few seconds
    once per loss (cached on disk).
    """

    def __init__(self, loss, kind, C=None, method="auto", rtol=1e-8, level=None, seed=0):
        self.loss, self.kind, self.family = loss, kind, models.get(kind)
        self.L, self.K = loss.L, loss.K
        self.C = _check_covariance(C, self.L)
        if method not in ("auto", "exact", "quadrature"):
            raise ValueError(f"method must be 'auto', 'exact' or 'quadrature', got {method!r}")
        if method == "exact" and not loss.is_polynomial:
            raise UnsupportedLoss(f"loss {loss.name!r} is not a polynomial in G: use method='quadrature'")
        self.method = "exact" if method == "exact" or (method == "auto" and loss.is_polynomial) else "quadrature"
        self.rtol, self.level, self.seed = rtol, level, seed
        self.missed_rtol = False  # set when a run kept meeting states the rule could not reach rtol at
        self._pairs = _PairGeometry(self.C)
        self._backend = _Wick(self) if self.method == "exact" else _Quadrature(self)

    @classmethod
    def from_config(cls, config):
        """The potential of a configuration: its loss, model kind, [model] C and [loss] rtol."""
        return cls(
            config.loss(), config.model.kind, C=config.section("model")["C"], rtol=config.section("loss")["rtol"]
        )

    # ---- states ----------------------------------------------------------------------------
    def _law(self, m, Q1, Q2):
        K = self.K
        m = np.zeros(K) if m is None else np.asarray(m, float).reshape(K)
        Q1, Q2 = (np.asarray(Q, float).reshape(K, K) for Q in (Q1, Q2))
        if not (np.all(np.isfinite(m)) and np.all(np.isfinite(Q1)) and np.all(np.isfinite(Q2))):
            raise NonFinitePotential(f"non-finite order parameters m={m}, Q1={Q1.tolist()}, Q2={Q2.tolist()}")
        return m, Q1, Q2

    def evaluate(self, estimate_error=False, **state):
        """Φ and its derivatives at a state of the model, named as the kind names its order parameters
        (`ModelKind.state_names`: e.g. ``q``; or ``m, q1, q2``; or ``Omega, Psi``)."""
        return self.at(*self._arguments(state), estimate_error=estimate_error)

    def at(self, Q1, Q2, m=None, estimate_error=False):
        """Φ and its derivatives at the order parameters (Q1, Q2) and means m (roles, not names)."""
        m, Q1, Q2 = self._law(m, Q1, Q2)
        value = self._backend.evaluate(m, Q1, Q2, estimate_error)
        if self.family.centred:  # centred pre-activations: there is no mean to differentiate by
            value.b, value.m_hessian = np.zeros(self.K), np.zeros((self.K, self.K))
        if not np.isfinite(value.phi) or not all(np.all(np.isfinite(x)) for x in (value.dQ1, value.dQ2, value.b)):
            raise NonFinitePotential(
                f"Phi of loss {self.loss.name!r} is not finite at m={m.tolist()}, "
                f"Q1={Q1.tolist()}, Q2={Q2.tolist()}: check the loss and the state"
            )
        return value

    @contextlib.contextmanager
    def frozen(self):
        """Within the block the quadrature level does not change: Φ is a pure, smooth function of
        the state (what an ODE solver needs). Far states met meanwhile are checked by `audit`."""
        backend = self._backend
        saved = getattr(backend, "frozen", None)
        backend.frozen = True
        try:
            yield self
        finally:
            backend.frozen = saved

    def audit(self):
        """Check, at the current level, the far states met while frozen; raise the level where the
        rule misses rtol. True when the level stood (the results computed while frozen hold)."""
        return self._backend.audit() if self.method == "quadrature" else True

    def accuracy_report(self):
        """How accurate Φ and its derivatives were: method, level, rtol and the largest relative
        change between levels L − 1 and L at any state checked (0 on the exact path)."""
        if self.method == "exact":
            return {"method": "exact", "level": None, "rtol": self.rtol, "accuracy": 0.0, "met_rtol": True}
        backend = self._backend
        if backend.fixed:
            return {
                "method": "quadrature",
                "level": backend.level,
                "rtol": None,
                "accuracy": None,
                "met_rtol": None,
                "note": "level fixed by the caller: not checked",
            }
        report = {
            "method": "quadrature",
            "level": backend.level,
            "rtol": self.rtol,
            "accuracy": float(backend.accuracy),
            "states_checked": len(backend.verified),
            "met_rtol": not self.missed_rtol and backend.accuracy <= self.rtol,
        }
        if getattr(backend, "_noise_level", None) is not None:
            report["noise"] = {"level": backend._noise_level, "accuracy": float(backend.noise_accuracy)}
        return report

    def second_derivatives(self, **state):
        """Second derivatives of Φ at a state, for Jacobians (`SecondDerivatives`).

        Exact path: symbolic. Quadrature path: Price's theorem once more,
        ``∂²Φ/∂Qr_kl∂Qs_mn = ¼ Σ Tr_ab Ts_ce E[∂⁴ℓ/∂G_ak∂G_bl∂G_cm∂G_en]`` and
        ``∂²Φ/∂Qr_kl∂m_n = ½ Σ Tr_ab c_e E[∂³ℓ/∂G_ak∂G_bl∂G_en]`` on the same fixed rule; the
        third and fourth derivatives of ℓ are compiled on first use.
        """
        return self.second_at(*self._arguments(state))

    def second_at(self, Q1, Q2, m=None):
        """`second_derivatives` at the order parameters (Q1, Q2) and means m (roles, not names)."""
        m, Q1, Q2 = self._law(m, Q1, Q2)
        second = self._backend.second(m, Q1, Q2)
        if self.family.centred:
            second.Qm[:], second.mm[:] = 0.0, 0.0
        return second

    def noise_at(self, Q1, Q2, m=None):
        """(N1, N2), each (K, K): the SGD-noise contractions of the finite-learning-rate term,
        ``N1_kl = Σ_{ij,i'j'} C_ii'C_jj' E[c_ijk c_i'j'l]`` and ``N2_kl = Σ C_ij'C_ji' E[c_ijk c_i'j'l]``
        with ``c = ∂ℓ/∂G`` (second moments, not covariances: docs/FINITE_LR.md). Exact path:
        Wick; quadrature path: a rule over every direction ℓ depends on, calibrated to ``rtol`` at
        the first state it meets and then fixed."""
        m, Q1, Q2 = self._law(m, Q1, Q2)
        outer = self._backend.gradient_outer(m, Q1, Q2)
        N1, N2 = self._pairs.contract_noise(outer, self.K)
        if not (np.all(np.isfinite(N1)) and np.all(np.isfinite(N2))):
            raise NonFinitePotential(
                f"the noise second moments E[c c'] of loss {self.loss.name!r} are not finite at m={m.tolist()}, "
                f"Q1={Q1.tolist()}, Q2={Q2.tolist()}: check the loss and the state"
            )
        return N1, N2

    def _arguments(self, state):
        """(Q1, Q2, m) from the kind's own names of its order parameters (`ModelKind.state_names`)."""
        names = self.family.state_names
        unknown = sorted(set(state) - set(names))
        if unknown:
            raise PotentialError(f"unknown state {unknown} for the {self.kind} model: it takes {', '.join(names)}")
        roles = {}
        for name, value in state.items():
            for role in names[name]:
                roles[role] = value
        needed = ("Q1", "Q2") if self.family.centred else ("Q1", "Q2", "m")
        missing = [name for name, rs in names.items() if any(r in needed and r not in roles for r in rs)]
        if missing:
            raise PotentialError(f"missing state `{missing[0]}` for this model")
        return roles["Q1"], roles["Q2"], roles.get("m")

    def m_star(self, q1, q2, m0, trainable, tol=1e-11, max_iter=60):
        """The slaved mean m*(q) (see `m_star_with_value`)."""
        return self.m_star_with_value(q1, q2, m0, trainable, tol, max_iter)[0]

    def m_star_with_value(self, q1, q2, m0, trainable, tol=1e-11, max_iter=60):
        """(m*(q), Φ and its derivatives at it): solve ∂Φ/∂m_k = 0 over trainable k (untied fast
        phase end); the value is the last Newton evaluation (a caller needing Φ at m* skips one).

        Safeguarded Newton (backtracking on Φ, gradient steps where the m-Hessian is not
        positive definite, a negative-curvature step off a stationary point that is not a
        minimum, towards the side of ``m0``), warm-started at ``m0``; fixed indices keep
        their ``m0``.
        Raises `PotentialError` naming q and the loss if it fails or if the m-Hessian is
        not positive definite at the solution.
        """
        if self.family.centred:
            raise PotentialError(f"m*(q) exists only for a model with a mean; the {self.kind} model is centred")
        idx = np.array([k - 1 for k in trainable])
        m = np.asarray(m0, float).copy()
        value = self.evaluate(m=m, q1=q1, q2=q2)
        for _ in range(max_iter):
            g, H = value.b[idx], value.m_hessian[np.ix_(idx, idx)]
            curvature, directions = np.linalg.eigh(H)
            if np.max(np.abs(g)) <= tol * max(1.0, abs(value.phi)):
                if curvature[0] > 0:
                    return m, value
                # a stationary point that is not a minimum (e.g. the symmetric m = 0 of h2):
                # leave it along the most negative curvature, towards the side of m0
                v = directions[:, 0]
                side = np.sign(v @ np.asarray(m0, float)[idx]) or 1.0
                step = side * v * max(1e-3, 1e-3 * np.abs(m[idx]).max())
            else:
                step = _newton_step(g, H)
            alpha = 1.0
            while alpha > 1e-10:
                trial = m.copy()
                trial[idx] += alpha * step
                candidate = self.evaluate(m=trial, q1=q1, q2=q2)
                if candidate.phi <= value.phi + 1e-4 * alpha * (g @ step) + 1e-15 * abs(value.phi):
                    break
                if (
                    curvature[0] > 0
                    and np.abs(candidate.b[idx]).max() < 0.5 * np.abs(g).max()
                    and (abs(g @ step) < 1e-12 * max(1.0, abs(value.phi)))
                ):
                    break  # near the minimum Φ's decrease is below its rounding: the gradient decides
                alpha /= 2
            m, value = trial, candidate
        raise NoSlavedMean(
            f"no strongly convex m*(q) for loss {self.loss.name!r} at q1={np.round(q1, 6).tolist()}, "
            f"q2={np.round(q2, 6).tolist()} (last m={np.round(m, 6).tolist()}, dPhi/dm={value.b[idx].tolist()}, "
            f"m-Hessian eigenvalues {np.linalg.eigvalsh(value.m_hessian[np.ix_(idx, idx)]).tolist()}): "
            "the fast phase has no stable fixed point here; check the loss, or follow the branch from a nearby q"
        )


def _newton_step(g, H):
    try:
        np.linalg.cholesky(H)
        return -np.linalg.solve(H, g)
    except np.linalg.LinAlgError:
        return -g / max(1.0, np.abs(H).max())


def _required(value, name):
    if value is None:
        raise PotentialError(f"missing state `{name}` for this model")
    return value


def _check_covariance(C, L):
    C = np.eye(L) if C is None else np.asarray(C, dtype=float)
    if C.shape != (L, L):
        raise PotentialError(f"`C` has shape {C.shape}; the loss has L = {L} tokens, so C must be ({L}, {L})")
    if not np.allclose(C, C.T, atol=1e-12) or np.linalg.eigvalsh(C).min() < -1e-12 * max(1, np.abs(C).max()):
        raise PotentialError(f"`C` must be a symmetric positive semi-definite matrix, got {C.tolist()}")
    return C


class _PairGeometry:
    """Token-pair matrices for ``L`` tokens: T = C⊗C, T P, vec C, and the factor blocks of T P_sym/anti."""

    def __init__(self, C):
        L = len(C)
        self.L = L
        self.T = np.kron(C, C)
        swap = np.zeros((L * L, L * L))
        for i in range(L):
            for j in range(L):
                swap[i * L + j, j * L + i] = 1
        self.TP = self.T @ swap
        self.c = C.reshape(-1)
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
        self.anti_root = root @ np.array(anti).reshape(-1, L * L).T  # (L², L(L−1)/2)

    def covariance(self, Q1, Q2):
        return np.kron(self.T, Q1) + np.kron(self.TP, Q2)

    def mean(self, m):
        return np.kron(self.c, m)

    def contract(self, grad, hess, K):
        """(∂Φ/∂Q1, ∂Φ/∂Q2, b, m-Hessian) from E∇ℓ (p,) and E∇²ℓ (p, p) by Price's theorem."""
        H = hess.reshape(self.L**2, K, self.L**2, K)
        g = grad.reshape(self.L**2, K)
        dQ1 = 0.5 * np.einsum("ab,akbl->kl", self.T, H)
        dQ2 = 0.5 * np.einsum("ab,akbl->kl", self.TP, H)
        return dQ1, dQ2, self.c @ g, np.einsum("a,b,akbl->kl", self.c, self.c, H)

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


def _check_psd(w, name, Q1, Q2):
    """Raise unless the eigenvalues ``w`` of ``name`` are ≥ 0 to the integrators' tolerance (10⁻⁸
    relative: a student that has converged onto its teacher sits on the boundary, Q1 + Q2 singular,
    and states within rtol = 10⁻⁹ of it reach −5e-10); the message is built only on failure (this
    runs at every evaluation)."""
    if w.min() < -1e-8 * max(1.0, np.abs(w).max()):
        raise InfeasibleState(
            f"order parameters outside the feasible set: {name} has eigenvalue {w.min():.3g} < 0 at "
            f"Q1={Q1.tolist()}, Q2={Q2.tolist()}; q1 + q2 and q1 - q2 (tied: q; direct: Omega ± Psi) must be "
            "positive semi-definite"
        )


def _psd_root(Q, name, Q1, Q2):
    w, V = np.linalg.eigh(0.5 * (Q + Q.T))
    _check_psd(w, name, Q1, Q2)
    return (V * np.sqrt(np.clip(w, 0, None))) @ V.T


class _Quadrature:
    """Gaussian expectations of ℓ, ∇ℓ, ∇²ℓ on a fixed rule over the relevant directions."""

    def __init__(self, potential):
        self.potential = potential
        loss = potential.loss
        v = loss.variables
        self.p = len(v)
        self.groups = _additive_groups(loss.expr)

        def outputs():
            out = []
            for term in self.groups:
                grad = [sympy.diff(term, x) for x in v]
                hess = [sympy.diff(grad[a], v[b]) for a in range(self.p) for b in range(a, self.p)]
                bad = [h for h in hess if h.has(sympy.DiracDelta, sympy.Derivative, sympy.Subs)]
                if bad:
                    raise UnsupportedLoss(
                        f"the second derivatives of loss {loss.name!r} are not ordinary functions (e.g. {bad[0]}): "
                        "Price's theorem needs a loss twice differentiable without Dirac masses; "
                        "use a smooth activation (softplus, tanh, erf) instead of relu/abs"
                    )
                out.append([term] + grad + hess)
            return out

        self._key = sympy.srepr(self.groups)
        self.kernel = compile_weighted_sum(outputs, v, key="value-gradient-hessian|" + self._key)
        self.upper = np.triu_indices(self.p)
        self.features = [self._feature_basis(g) for g in range(len(self.groups))]
        self.level = potential.level
        self.fixed = potential.level is not None  # a level the user fixed is never changed
        self.frozen = False
        self.verified = []  # signatures of the states where the level was checked
        self.pending = []  # far states met while frozen: (signature, mean, factors)
        self.accuracy = 0.0  # largest relative change level − 1 → level seen at a checked state

    def _feature_basis(self, group):
        """Orthonormal basis (p, f) of the directions a term depends on: the span of its ∇ at random points."""
        rng = np.random.default_rng(self.potential.seed)
        probes = rng.standard_normal((3 * self.p + 3, self.p))
        grads = np.array([self.kernel(x[None, :], np.ones(1), group)[1 : 1 + self.p] for x in probes])
        _, s, Vt = np.linalg.svd(grads, full_matrices=False)
        rank = int(np.sum(s > 1e-9 * s[0])) if s[0] > 0 else 0
        return Vt[:rank].T

    def _factors(self, m, Q1, Q2, bases=None):
        """Mean (p,) of G and, per term group (or per basis of ``bases``), the covariance factor
        restricted to its directions."""
        pairs = self.potential._pairs
        blocks = [np.kron(pairs.sym_root, _psd_root(Q1 + Q2, "Q1 + Q2", Q1, Q2))]
        if pairs.anti_root.size and not np.array_equal(Q1, Q2):
            blocks.append(np.kron(pairs.anti_root, _psd_root(Q1 - Q2, "Q1 - Q2", Q1, Q2)))
        F = np.hstack(blocks)
        restricted = []
        for basis in self.features if bases is None else bases:
            if basis.shape[1] >= F.shape[1]:
                restricted.append(F)
                continue
            Qz, R = np.linalg.qr(F.T @ basis)
            restricted.append(F @ (Qz * np.where(np.diag(R) < 0, -1.0, 1.0)))  # unique QR: continuous in the state
        return pairs.mean(m), restricted

    def _moments(self, mean, factors, level):
        out = 0
        for group, F in enumerate(factors):
            z, w = _rule(F.shape[1], level)
            out = out + self.kernel(mean + z @ F.T, w, group)
        hess = np.zeros((self.p, self.p))
        hess[self.upper] = out[1 + self.p :]
        hess = hess + np.triu(hess, 1).T
        return out[0], out[1 : 1 + self.p], hess

    def _value(self, mean, factors, level):
        phi, grad, hess = self._moments(mean, factors, level)
        return PotentialValue(phi, *self.potential._pairs.contract(grad, hess, self.potential.K))

    def _jet_kernel(self):
        """Kernel of the 3rd and 4th derivatives of each term group (compiled on first use)."""
        if getattr(self, "_jet", None) is None:
            v = self.potential.loss.variables
            self._combos3 = list(combinations_with_replacement(range(self.p), 3))
            self._combos4 = list(combinations_with_replacement(range(self.p), 4))

            def groups():
                out = []
                for term in self.groups:
                    used = term.free_symbols
                    out.append(
                        [
                            sympy.diff(term, *[v[a] for a in combo])
                            if {v[a] for a in combo} <= used
                            else sympy.Integer(0)
                            for combo in self._combos3 + self._combos4
                        ]
                    )
                return out

            self._jet = compile_weighted_sum(groups, v, key="third-fourth|" + self._key)
        return self._jet

    # ---- the noise second moments E[∇ℓ ∇ℓᵀ] (finite learning rate) ------------------------------
    def _noise_kernel(self):
        """Kernel of the upper triangle of ∇ℓ ∇ℓᵀ for the whole loss (not additive over the term
        groups: one group over the union of their directions); compiled on first use."""
        if getattr(self, "_outer", None) is None:
            v = self.potential.loss.variables

            def outputs():
                grad = [sympy.diff(self.potential.loss.expr, x) for x in v]
                return [[grad[a] * grad[b] for a in range(self.p) for b in range(a, self.p)]]

            self._outer = compile_weighted_sum(outputs, v, key="gradient-outer|" + self._key)
            stacked = np.hstack(self.features)
            basis, s, _ = np.linalg.svd(stacked, full_matrices=False)
            self._noise_basis = basis[:, s > 1e-9 * s[0]] if s.size and s[0] > 0 else basis[:, :0]
            self._noise_level = None
        return self._outer

    def _outer_moments(self, mean, F, level):
        z, w = _rule(F.shape[1], level, _NOISE_TRUNCATION)
        upper = self._outer(mean + z @ F.T, w, 0)
        out = np.zeros((self.p, self.p))
        out[self.upper] = upper
        return out + np.triu(out, 1).T

    def gradient_outer(self, m, Q1, Q2):
        """E[∇ℓ ∇ℓᵀ] (p, p) at a state; the level is calibrated to rtol at the first call, then fixed."""
        self._noise_kernel()
        mean, factors = self._factors(m, Q1, Q2, bases=[self._noise_basis])
        F = factors[0]
        if self._noise_level is None:
            self._noise_level = self._calibrate_outer(mean, F)
        return self._outer_moments(mean, F, self._noise_level)

    def _calibrate_outer(self, mean, F):
        """Lowest level ≥ 3 whose E[∇ℓ∇ℓᵀ] changes by < `_NOISE_RTOL` (relative to its largest entry)
        from the level below; the change is kept as the noise rule's accuracy."""
        target = max(self.potential.rtol, _NOISE_RTOL)
        previous = self._outer_moments(mean, F, 2)
        for level in range(3, _MAX_LEVEL + 1):
            current = self._outer_moments(mean, F, level)
            self.noise_accuracy = np.abs(current - previous).max() / max(np.abs(current).max(), 1e-300)
            if self.noise_accuracy <= target:
                return level
            if len(_rule(F.shape[1], level + 1, _NOISE_TRUNCATION)[1]) > _MAX_POINTS:
                break
            previous = current
        warnings.warn(
            f"the noise second moments of loss {self.potential.loss.name!r} stopped at quadrature level {level} "
            f"(relative change {self.noise_accuracy:.2g}) short of {target:g}",
            stacklevel=4,
        )
        return level

    def second(self, m, Q1, Q2):
        mean, factors = self._factors(m, Q1, Q2)
        self._control(mean, factors)
        jet = self._jet_kernel()
        _, _, hess = self._moments(mean, factors, self.level)
        out = 0
        for group, F in enumerate(factors):
            z, w = _rule(F.shape[1], self.level)
            out = out + jet(mean + z @ F.T, w, group)
        n3 = len(self._combos3)
        third = _symmetric_tensor(out[:n3], self._combos3, self.p, 3)
        fourth = _symmetric_tensor(out[n3:], self._combos4, self.p, 4)
        return self.potential._pairs.contract_second(hess, third, fourth, self.potential.K)

    # ---- error control along the path ------------------------------------------------------
    # The rule is calibrated at the first state. A state is *near* a checked one when the Gram
    # matrices of its restricted covariance factors and its mean are within 40 % (20 % in scale) of
    # that state's: the trapezoidal rule's accuracy depends on the state only through them. At a far state
    # the level is checked (levels L − 1 and L must agree to rtol) and raised when it fails,
    # unless the potential is frozen (a run in progress, whose right-hand side must stay a pure
    # function of the state): then the state is kept for `audit`, which checks it afterwards.

    def _signature(self, mean, factors):
        """What the rule's accuracy depends on: each group's Gram matrix FᵀF (the covariance in the
        directions it integrates over) and the mean — cheap, no decomposition."""
        return np.concatenate([(F.T @ F).ravel() for F in factors] + [mean])

    def _near(self, signature, others):
        """Within 40 % of a checked state in the Gram matrices (20 % in their scale) and the mean."""
        if not others:
            return False
        others = np.asarray(others)
        tolerance = 0.4 * np.maximum(np.abs(others).max(axis=1, keepdims=True), 0.05)
        return bool(np.any(np.all(np.abs(others - signature) <= tolerance, axis=1)))

    def _control(self, mean, factors):
        """Calibrate at the first state; check (or, frozen, remember) states far from the checked ones."""
        if self.level is None:
            self.level = self._calibrate(mean, factors, 2)
            self.verified.append(self._signature(mean, factors))
            return
        if self.fixed:
            return
        signature = self._signature(mean, factors)
        if self._near(signature, self.verified):
            return
        if self.frozen:
            if not self._near(signature, [p[0] for p in self.pending]):
                self.pending.append((signature, mean, factors))
            return
        self._check(signature, mean, factors)

    def _check(self, signature, mean, factors):
        """Keep the level if levels L − 1 and L agree to rtol at this state, else raise it. True if kept."""
        change = self._change(mean, factors, self.level)
        kept = change <= self.potential.rtol
        if kept:
            self.accuracy = max(self.accuracy, change)
        else:
            self.level = self._calibrate(mean, factors, self.level + 1)
        self.verified.append(signature)
        return kept

    def audit(self):
        """Check the far states met while frozen; raise the level where needed. True if it stood."""
        pending, self.pending = self.pending, []
        return all([self._check(*p) for p in pending])

    def _change(self, mean, factors, level):
        """Relative error of ``level`` from the changes c between levels L − 2, L − 1, L: the change
        ``c_L`` itself, or — where the trapezoidal rule converges slowly (geometric rate
        ``ρ = c_L/c_{L−1}`` above ½) — its geometric tail ``c_L ρ/(1 − ρ)`` (softmax at
        q = [[6, 2], [2, 5]]: ρ ≈ 0.58, where the plain change is 1.4× below the error)."""
        values = [self._value(mean, factors, lv) for lv in (level - 2, level - 1, level)]
        scale = _scale(values[-1])
        if not np.isfinite(scale):
            return 0.0  # evaluate() reports the non-finite value with the state
        older, change = (_difference(a, b) / scale for a, b in zip(values[:-1], values[1:]))
        rate = change / older if older > 0 else 0.0
        return change * max(1.0, rate / (1 - rate) if rate < 0.9 else 10.0)

    def _calibrate(self, mean, factors, start):
        """Lowest level ≥ ``start`` whose result changes by < rtol from the level below."""
        dim = max(F.shape[1] for F in factors)
        level = max(3, start)
        while True:
            change = self._change(mean, factors, level)
            if change <= self.potential.rtol:
                self.accuracy = max(self.accuracy, change)
                return level
            if len(_rule(dim, level + 1)[1]) > _MAX_POINTS or level >= _MAX_LEVEL:
                if change > _DIVERGED:
                    raise NonFinitePotential(
                        f"the Gaussian expectation Phi of loss {self.potential.loss.name!r} does not converge "
                        "(relative "
                        f"change {change:.2g} between quadrature levels at the finest, {level}, in {dim} "
                        "dimensions): it may be infinite at this state (e.g. exp(G**2) once Var G >= 1/2), or "
                        f"too rough for a rule in {dim} dimensions; change the loss or the scales"
                    )
                warnings.warn(
                    f"quadrature for loss {self.potential.loss.name!r} stopped at level {level} "
                    f"(dimension {dim}) short of rtol={self.potential.rtol:g}: relative change "
                    f"{change:.2g}",
                    stacklevel=4,
                )
                self.accuracy = max(self.accuracy, change)
                return level
            level += 1

    def evaluate(self, m, Q1, Q2, estimate_error):
        mean, factors = self._factors(m, Q1, Q2)
        self._control(mean, factors)
        value = self._value(mean, factors, self.level)
        if estimate_error:  # the next-coarser rule's distance: a conservative error estimate
            value.error = _difference(self._value(mean, factors, self.level - 1), value) if self.level > 1 else np.inf
        return value


def _additive_groups(expr):
    """Split ℓ into sums of top-level terms that depend on the same variables.

    Each group is integrated over its own (often much smaller) set of directions: a
    row-softmax loss on L = 2 tokens is a sum over rows, each row a 2-dimensional integral
    for K = 2 instead of one 4-dimensional one. Where multiplying out each top-level term
    (a square of a sum of heads, say) makes the largest group depend on fewer variables, the
    expanded terms are grouped instead: the multi-head softmax loss with four heads is then
    a sum of 2-dimensional integrals (pairs of heads) instead of 4-dimensional ones (all
    heads of a row): at rtol = 1e-4 about 4× fewer points of a much cheaper integrand, 15×
    faster (`benchmarks/bench_potential.py`).
    """
    plain = _group_terms(sympy.Add.make_args(expr))
    if sum(_expanded_size(term) for term in sympy.Add.make_args(expr)) <= _MAX_EXPANDED_TERMS:
        expanded = _group_terms(
            [
                part
                for term in sympy.Add.make_args(expr)
                for part in sympy.Add.make_args(sympy.expand(term, deep=False, **_EXPAND_PRODUCTS))
            ]
        )
        if _widest(expanded) < _widest(plain):
            return expanded
    return plain


_MAX_EXPANDED_TERMS = 512  # expand only when it cannot blow up the kernel
_EXPAND_PRODUCTS = dict(mul=True, multinomial=True, power_base=False, power_exp=False, log=False)


def _group_terms(terms):
    groups = {}
    for term in terms:
        key = frozenset(term.free_symbols)
        groups[key] = groups.get(key, 0) + term
    return [g for g in groups.values() if g.free_symbols] or [sum(terms)]


def _widest(groups):
    return max(len(g.free_symbols) for g in groups)


def _expanded_size(term):
    """How many terms multiplying out ``term`` at its top level gives (an upper bound)."""
    if term.is_Pow and term.base.is_Add and term.exp.is_Integer and term.exp > 1:
        return comb(len(term.base.args) + int(term.exp) - 1, int(term.exp))
    if term.is_Mul:
        size = 1
        for factor in term.args:
            size *= _expanded_size(factor)
        return size
    return len(term.args) if term.is_Add else 1


@lru_cache(maxsize=64)
def _rule(dim, level, truncation=_TRUNCATION):
    """Points (n, dim) and weights (n,) of the level-``level`` rule for N(0, I_dim) (tensor rules on
    [−truncation, truncation]); cached, do not modify."""
    return _tensor_rule(dim, level, truncation) if dim <= _TENSOR_MAX_DIM else _sparse_rule(dim, level)


def _symmetric_tensor(values, combos, p, order):
    """Full symmetric tensor of shape (p,)*order from values on sorted index combinations."""
    out = np.zeros((p,) * order)
    for value, combo in zip(values, combos):
        for perm in set(permutations(combo)):
            out[perm] = value
    return out


def _tensor_rule(dim, level, truncation=_TRUNCATION):
    """Tensor trapezoidal rule with ``2·level + 2`` nodes per dimension on [−truncation, truncation].

    For integrands analytic in a strip (softmax, tanh, erf) the trapezoidal rule under the
    Gaussian weight converges geometrically in the node count, where Gauss–Hermite only
    converges root-exponentially; successive levels then differ by about the coarser
    level's error, which makes that difference a conservative error estimate.
    Weights below 1e-18 of the largest (the far corners) are pruned.
    """
    x = np.linspace(-truncation, truncation, 2 * level + 2)
    w = (x[1] - x[0]) * np.exp(-(x**2) / 2) / np.sqrt(2 * np.pi)
    points = np.stack([g.ravel() for g in np.meshgrid(*[x] * dim, indexing="ij")], axis=1)
    weights = np.prod(np.meshgrid(*[w] * dim, indexing="ij"), axis=0).ravel()
    keep = weights > 1e-18 * weights.max()
    return points[keep], weights[keep]


def _sparse_rule(dim, level):
    """Smolyak sparse grid (combination technique) of Gauss–Hermite rules with 2i − 1 nodes.

    ``A(d + ℓ, d) = Σ_{d+ℓ−d+1 ≤ |i| ≤ d+ℓ} (−1)^{d+ℓ−|i|} C(d−1, d+ℓ−|i|) ⊗_j U^{i_j}``;
    coincident points (the shared centre) are merged.
    """
    rules = {i: np.polynomial.hermite_e.hermegauss(2 * i - 1) for i in range(1, level + 2)}
    q = dim + level
    points, weights = [], []
    for index in product(range(1, level + 2), repeat=dim):
        total = sum(index)
        if not max(dim, q - dim + 1) <= total <= q:
            continue
        factor = (-1) ** (q - total) * comb(dim - 1, q - total)
        xs = [rules[i][0] for i in index]
        ws = [rules[i][1] / np.sqrt(2 * np.pi) for i in index]
        points.append(np.stack([g.ravel() for g in np.meshgrid(*xs, indexing="ij")], axis=1))
        weights.append(factor * np.prod(np.meshgrid(*ws, indexing="ij"), axis=0).ravel())
    points, weights = np.vstack(points), np.concatenate(weights)
    unique, inverse = np.unique(np.round(points, 12), axis=0, return_inverse=True)
    return unique, np.bincount(inverse.ravel(), weights=weights, minlength=len(unique))


def _difference(a, b):
    return float(
        max(
            abs(a.phi - b.phi),
            *(
                np.max(np.abs(x - y))
                for x, y in ((a.dQ1, b.dQ1), (a.dQ2, b.dQ2), (a.b, b.b), (a.m_hessian, b.m_hessian))
            ),
        )
    )


def _scale(v):
    return max(abs(v.phi), np.max(np.abs(v.dQ1)), np.max(np.abs(v.dQ2)), np.max(np.abs(v.b)), 1e-300)


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
        centred = potential.family.centred  # centred pre-activations have mean 0
        mean = [
            0 if centred else sympy.nsimplify(float(pairs.c[a // K])) * self.m[a % K]
            for a in range(len(loss.variables))
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
        for name, Q in (("Q1 + Q2", Q1 + Q2), ("Q1 - Q2", Q1 - Q2)):
            _check_psd(np.linalg.eigvalsh(0.5 * (Q + Q.T)), name, Q1, Q2)
        out = np.array(self._function(*m, *Q1.ravel(), *Q2.ravel()), dtype=float)
        dQ1, dQ2 = out[1 : 1 + K * K].reshape(K, K), out[1 + K * K : 1 + 2 * K * K].reshape(K, K)
        b = out[1 + 2 * K * K : 1 + 2 * K * K + K]
        return PotentialValue(
            float(out[0]), dQ1, dQ2, b, out[1 + 2 * K * K + K :].reshape(K, K), 0.0 if estimate_error else None
        )
