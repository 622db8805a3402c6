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
  compiled with numba (`momentgen.core.codegen`); gradients by Price's theorem, no finite
  differences. The level is calibrated at the first state to the requested ``rtol``
  (estimated from the geometric tail of successive levels) and then kept fixed, so that Φ is
  smooth in q for the ODE solver; along a run the rule is checked at states far from the
  calibration state (`Potential.audit`, `Potential.accuracy_report`) and a run whose rule
  stopped meeting ``rtol`` is redone on a refined rule (`momentgen.dynamics.integrate.audited`).

The package: this module holds the interface (`Potential`, its values and derivatives, the m* Newton solver);
`geometry` the covariance factor of the pre-activations, `quadrature` the calibrated Gaussian rules and the
loss's additive groups, `noise` the SGD-noise moments E[∇ℓ∇ℓᵀ] on pairs of groups, `wick` the exact path
for polynomial losses.
"""

import contextlib

import numpy as np

from ... import models
from ...core.errors import NonFinitePotential, NoSlavedMean, PotentialError, UnsupportedLoss
from ..slaved_mean import mean_of
from .geometry import _PairGeometry, all_finite
from .quadrature import _Quadrature
from .values import PotentialValue, SecondDerivatives
from .wick import _Wick

__all__ = ["Potential", "PotentialValue", "SecondDerivatives"]


class Potential:
    """Φ(m, Q1, Q2) for one loss and one model kind, with its derivatives.

    Parameters
    ----------
    loss : momentgen.losses.Loss
    kind : "tied" | "untied" | "direct" | "symmetric"
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
        # label noise (MATH.md §13): Φ and its derivatives are those of E_ξ ℓ; the SGD-noise moments add up over the
        # loss's noise parts (`momentgen.setting.losses.Loss.noise_parts`), each a potential of its own
        self.noisy_loss, loss = loss, loss.expected
        self.loss, self.kind, self.definition = loss, kind, models.get(kind)
        self.L, self.K = loss.L, loss.K
        self.C = _check_covariance(C, self.L)
        if method not in ("auto", "exact", "quadrature"):
            raise ValueError(f"method must be 'auto', 'exact' or 'quadrature', got {method!r}")
        if method == "exact" and not loss.is_polynomial:
            raise UnsupportedLoss(f"loss {loss.name!r} is not a polynomial in G: use method='quadrature'")
        self.method = "exact" if method == "exact" or (method == "auto" and loss.is_polynomial) else "quadrature"
        self.rtol, self.level, self.seed = rtol, level, seed
        self.missed_rtol = False  # set when a run kept meeting states the rule could not reach rtol at
        self._pairs = _PairGeometry(self.C, self.definition.mean_weights(self.C))
        self._backend = _Wick(self) if self.method == "exact" else _Quadrature(self)
        parts = self.noisy_loss.noise_parts if self.noisy_loss.noisy else []
        self._noise_parts = [Potential(part, kind, C, method, rtol, level, seed) for part in parts]

    @classmethod
    def from_config(cls, config):
        """The potential of a configuration: its loss, model kind, [model] C and [loss] rtol."""
        return cls(config.loss(), config.model.kind, C=config.settings.model.C, rtol=config.settings.loss.rtol)

    # ---- states ----------------------------------------------------------------------------
    def _law(self, m, Q1, Q2):
        K = self.K
        m = np.zeros(K) if m is None else np.asarray(m, float).reshape(K)
        Q1, Q2 = (np.asarray(Q, float).reshape(K, K) for Q in (Q1, Q2))
        if not all_finite(m, Q1, Q2):
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
        if not (np.isfinite(value.phi) and all_finite(value.dQ1, value.dQ2, value.b)):
            raise NonFinitePotential(
                f"Phi of loss {self.loss.name!r} is not finite at m={m.tolist()}, "
                f"Q1={Q1.tolist()}, Q2={Q2.tolist()}: check the loss and the state"
            )
        return value

    @property
    def rule_level(self):
        """The quadrature rule's current level (None on the exact path, or before the first evaluation)."""
        return getattr(self._backend, "level", None)

    @property
    def lowest_rule_level(self):
        """The level the rule was calibrated (or fixed) at: a state at a lower level would evaluate Φ less
        accurately than the potential's ``rtol`` (None on the exact path, or before the first evaluation)."""
        return getattr(self._backend, "lowest", None)

    @contextlib.contextmanager
    def frozen(self, level=None):
        """Within the block the quadrature level does not change: Φ is a pure, smooth function of
        the state (what an ODE solver needs). Far states met meanwhile are checked by `audit`.
        ``level``: evaluate at this level of the rule (a snapshot a run carries, `slaved_mean.RunState`)
        instead of the current one, which is restored after the block; None: the current level (a rule not yet
        calibrated is calibrated at the first state)."""
        backend = self._backend
        saved, saved_level = getattr(backend, "frozen", None), getattr(backend, "level", None)
        backend.frozen = True
        if level is not None:
            backend.level = level
        try:
            yield self
        finally:
            backend.frozen = saved
            if level is not None:
                backend.level = saved_level

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
            "met_rtol": not self.missed_rtol and backend.accuracy <= self.rtol and not backend.pending,
        }
        if backend.pending:
            report["note"] = f"{len(backend.pending)} far state(s) met at a frozen rule are not checked yet: audit()"
        if backend.noise is not None and backend.noise.level is not None:
            report["noise"] = {"level": backend.noise.level, "accuracy": float(backend.noise.accuracy)}
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
        return self._backend.second(m, Q1, Q2)  # a centred kind's mean weights are 0: so are Qm and mm

    def noise_at(self, Q1, Q2, m=None):
        """(N1, N2), each (K, K): the SGD-noise contractions of the finite-learning-rate term,
        ``N1_kl = Σ_{ij,i'j'} C_ii'C_jj' E[c_ijk c_i'j'l]`` and ``N2_kl = Σ C_ij'C_ji' E[c_ijk c_i'j'l]``
        with ``c = ∂ℓ/∂G`` (second moments, not covariances: docs/FINITE_LR.md). Exact path:
        Wick; quadrature path: pairs of the loss's additive groups (`noise`), the rule calibrated to
        max(``rtol``, 1e-3) at the first state it meets and then fixed."""
        m, Q1, Q2 = self._law(m, Q1, Q2)
        if self._noise_parts:  # E_ξ[∇ℓ∇ℓᵀ] = Σ_j E[∇ℓ_j∇ℓ_jᵀ]: the contraction is linear
            N1, N2 = (sum(pair) for pair in zip(*(part.noise_at(Q1, Q2, m) for part in self._noise_parts)))
        else:
            N1, N2 = self._pairs.contract_noise(self._backend.gradient_outer(m, Q1, Q2), self.K)
        if not (np.all(np.isfinite(N1)) and np.all(np.isfinite(N2))):
            raise NonFinitePotential(
                f"the noise second moments E[c c'] of loss {self.loss.name!r} are not finite at m={m.tolist()}, "
                f"Q1={Q1.tolist()}, Q2={Q2.tolist()}: check the loss and the state"
            )
        return N1, N2

    def _arguments(self, state):
        """(Q1, Q2, m) from the kind's own names of its order parameters (`ModelKind.state_names`)."""
        names = self.definition.state_names
        unknown = sorted(set(state) - set(names))
        if unknown:
            raise PotentialError(f"unknown state {unknown} for the {self.kind} model: it takes {', '.join(names)}")
        roles = {}
        for name, value in state.items():
            for role in names[name]:
                roles[role] = value
        needed = {role for rs in names.values() for role in rs}
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
        if not mean_of(self.definition).has_mean:
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
