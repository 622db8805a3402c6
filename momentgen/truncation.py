"""A truncated hierarchy wired to its potential: the vector field an ODE solver integrates.

`Truncation` joins a compiled `momentgen.hierarchy.Program` (the words and their sparse
terms), a `momentgen.potential.Potential` (Φ and its gradients) and the weight decay γ.
At each state ``y`` (the moments ``μ_α`` in program order) it reads the order parameters,
evaluates the coefficients and applies the program with the one compiled kernel
(`momentgen._kernel.apply_program`): no Python loop over words.

Time axes: tied ``t = 4nη/d``; direct and untied (slow phase) ``τ = nη/d``; the untied fast
phase (`Truncation.fast_phase`) runs on ``t = nη`` with the moments frozen, and the slow
phase then uses the slaved mean ``m = m*(q)`` (MATH.md §4).
"""

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse

from ._kernel import apply_program
from .errors import InfeasibleState, PotentialError

__all__ = ["Truncation", "Branch"]


@dataclass
class Branch:
    """The explicit state a run carries besides y: the warm start of the untied slaved mean m*(q).

    The right-hand side reads it and never writes it, so ``rhs(t, y)`` is a pure function of
    ``(t, y)`` between two calls of `Truncation.track`, which the solver makes after each
    accepted step to follow the branch of m* the run is on (MATH.md §4: m* can bifurcate).
    """

    m: np.ndarray


class Truncation:
    """The right-hand side ``dμ/dt = F(μ)`` of a truncated hierarchy.

    Parameters
    ----------
    program : momentgen.hierarchy.Program
    potential : momentgen.potential.Potential
        Same loss kind as the program's model.
    gamma : float
        Weight decay γ.
    means : array_like, shape (K,), optional
        Untied only: the pre-activation means ``m_k`` at the start (fixed indices keep theirs).
    """

    def __init__(self, program, potential, gamma=0.0, means=None):
        if potential.kind != program.model.kind:
            raise PotentialError(f"potential is for the {potential.kind} model, program for {program.model.kind}")
        self.program, self.potential, self.gamma = program, potential, float(gamma)
        self.model = program.model
        factors = np.array([s.factor for s in program.symbols])
        self._weight = (factors[program.symbol] * program.multiplicity).astype(float)
        # compact index types: the kernel is memory-bound (14 bytes a term, CSR needs 12)
        self._symbol = program.symbol.astype(np.int16 if len(program.symbols) < 2**15 else np.int32)
        self._target = program.target.astype(np.int32)
        self._slot = {s.name: i for i, s in enumerate(program.symbols)}
        self._layout = _layout(program)
        K = self.model.K
        self.branch = Branch(np.zeros(K) if means is None else np.asarray(means, float).reshape(K).copy())
        self.trainable = list(self.model.trainable)

    # ---- order parameters and coefficients -------------------------------------------------
    @property
    def m(self):
        """The untied means of the branch the run is on (see `Branch`)."""
        return self.branch.m

    def slaved_mean(self, y):
        """Untied: m*(q(y)) by Newton from the branch's warm start (pure: the branch is not changed)."""
        L = self._layout
        return self.potential.m_star(y[L["q1"]], y[L["q2"]], self.branch.m, self.trainable)

    def track(self, y):
        """Follow the branch of m* to the state ``y`` (untied; called by the solver after each step)."""
        if self.model.kind == "untied":
            self.branch = Branch(self.slaved_mean(y))

    def state(self, y, m=None):
        """The potential's arguments at moments ``y`` (q; or m*, q1, q2; or Omega, Psi)."""
        L = self._layout
        if self.model.kind == "tied":
            return {"q": y[L["q"]]}
        if self.model.kind == "direct":
            return {"Omega": y[L["Omega"]], "Psi": y[L["Psi"]]}
        return {"m": self.slaved_mean(y) if m is None else m, "q1": y[L["q1"]], "q2": y[L["q2"]]}

    def order_parameters(self, y):
        """(Q1, Q2) at moments ``y``: tied (q, q); untied (q⁽¹⁾, q⁽²⁾); direct (Ω, Ψ) — no m* needed."""
        L = self._layout
        keys = {"tied": ("q", "q"), "untied": ("q1", "q2"), "direct": ("Omega", "Psi")}[self.model.kind]
        return tuple(y[L[k]] for k in keys)

    def coefficients(self, y):
        """Coefficient values in program symbol order at moments ``y`` (a pure function of ``y``)."""
        value = self.potential.evaluate(**self.state(y))
        named = value.coefficients(self.model.kind, self.trainable)
        named["gamma"] = self.gamma
        if self.model.kind == "untied":
            named.update(self._betas(y, value))
        c = np.empty(len(self._slot))
        for name, i in self._slot.items():
            c[i] = named[name]
        return c

    def bias_denominators(self, y):
        """Untied: ``D_k = t^A_k + t^B_k`` for the trainable k (array; empty for other models)."""
        if self.model.kind != "untied":
            return np.zeros(0)
        L, idx = self._layout, np.array(self.trainable) - 1
        return y[L["tA"][idx]] + y[L["tB"][idx]]

    def _betas(self, y, value):
        """β_k = −ψ_k / D_k, ψ_k = 2 Σ_{l,r} a⁽ʳ⁾_kl [μ(M_l⁽ʳ⁾ B_k) + μ(A_k M_l⁽ʳ⁾)], D_k = t^A_k + t^B_k."""
        L, out = self._layout, {}
        a = (value.dQ1, value.dQ2)
        for k in self.trainable:
            D = y[L["tA"][k - 1]] + y[L["tB"][k - 1]]
            if not D > 1e-12:
                raise InfeasibleState(f"D_{k} = t^A_{k} + t^B_{k} = {D:.3g} <= 0: the student has collapsed "
                                     "(beta is singular); lower the weight decay")  # fmt: skip
            psi = 2 * sum(a[r][k - 1, l] * (y[L["MB"][k - 1, l, r]] + y[L["AM"][k - 1, l, r]])
                          for l in range(self.model.K) for r in (0, 1))  # fmt: skip
            out[f"beta[{k}]"] = -psi / D
        return out

    # ---- the vector field --------------------------------------------------------------------
    def rhs(self, t, y):
        """``dμ/dt`` at moments ``y`` (shape (n_words,)); ``t`` is unused (autonomous)."""
        y = np.ascontiguousarray(y, dtype=float)
        p = self.program
        return apply_program(p.indptr, self._symbol, self._target, self._weight, self.coefficients(y), y,
                             np.empty(len(y)))  # fmt: skip

    def jac(self, t, y):
        """Jacobian (CSR): the linear part plus the dependence of the coefficients on the state.

        ``∂F_i/∂y_j = L_ij + Σ_s (L_s y)_i ∂c_s/∂y_j``. The sensitivities ∂c/∂y are analytic
        (`_sensitivity`: second derivatives of Φ; untied also through m*(q) and β) and live
        in the columns of the order parameters and of β's words only.
        """
        y = np.ascontiguousarray(y, dtype=float)
        p, n = self.program, len(y)
        c = self.coefficients(y)
        columns, sensitivity = self._sensitivity(y)
        per_symbol = scipy.sparse.csr_matrix((self._weight * y[p.target], (self._rows, p.symbol)),
                                             shape=(n, len(c)))  # fmt: skip  # column s: L_s y
        dense = per_symbol @ sensitivity
        rows, cols = np.nonzero(dense)
        correction = scipy.sparse.csr_matrix((dense[rows, cols], (rows, columns[cols])), shape=(n, n))
        linear = scipy.sparse.csr_matrix((c[p.symbol] * self._weight, p.target, p.indptr), shape=(n, n))
        return (linear + correction).tocsr()

    def _sensitivity(self, y):
        """(columns, S) with ``S[s, j] = ∂c_s/∂y_{columns[j]}`` at the current coefficients."""
        L, K, kind = self._layout, self.model.K, self.model.kind
        columns = self._coefficient_columns()
        where = {int(col): j for j, col in enumerate(columns)}
        state = self.state(y)
        second = self.potential.second_derivatives(**state)
        # dQ[r, k, l, j]: derivative of ∂Φ/∂Q(r+1)_kl by the state word columns[j]
        dQ = np.zeros((2, K, K, len(columns)))
        sources = {"tied": (("q", (0, 1)),), "direct": (("Omega", (0,)), ("Psi", (1,))),
                   "untied": (("q1", (0,)), ("q2", (1,)))}[kind]  # fmt: skip
        for name, blocks in sources:
            for a in range(K):
                for b in range(K):
                    j = where[int(L[name][a, b])]
                    for s_ in blocks:
                        dQ[..., j] += second.QQ[:, :, :, s_, a, b]
        if kind == "untied":
            dQ += self._through_m_star(second, sources, where, len(columns))
        S = np.zeros((len(self._slot), len(columns)))
        value = self.potential.evaluate(**state) if kind == "untied" else None
        for k in self.trainable:
            for l in range(1, K + 1):
                if kind == "tied":
                    S[self._slot[f"Gamma[{k},{l}]"]] = dQ[0, k - 1, l - 1] + dQ[1, k - 1, l - 1]
                elif kind == "direct":
                    S[self._slot[f"A[{k},{l}]"]] = dQ[0, k - 1, l - 1]
                    S[self._slot[f"B[{k},{l}]"]] = dQ[1, k - 1, l - 1]
                else:
                    S[self._slot[f"a1[{k},{l}]"]] = dQ[0, k - 1, l - 1]
                    S[self._slot[f"a2[{k},{l}]"]] = dQ[1, k - 1, l - 1]
            if kind == "untied":
                S[self._slot[f"beta[{k}]"]] = self._beta_sensitivity(k, y, value, dQ, where, len(columns))
        return columns, S

    def _through_m_star(self, second, sources, where, n_columns):
        """The part of d(∂Φ/∂Q)/dy that goes through m*(q): Qm · dm*/dy, dm*/dQ = −Φ_mm⁻¹ ∂b/∂Q."""
        K, L = self.model.K, self._layout
        idx = np.array(self.trainable) - 1
        dm = np.zeros((K, n_columns))  # dm*_n / dy_j
        inverse = np.linalg.inv(second.mm[np.ix_(idx, idx)])
        for name, (s_,) in sources:
            for a in range(K):
                for b in range(K):
                    j = where[int(L[name][a, b])]
                    dm[idx, j] -= inverse @ second.Qm[s_, a, b, idx]
        return np.einsum("rkln,nj->rklj", second.Qm, dm)

    def _beta_sensitivity(self, k, y, value, dQ, where, n_columns):
        """∂β_k/∂y for β_k = −ψ_k/D_k (see `_betas`)."""
        L = self._layout
        a = (value.dQ1, value.dQ2)
        D = y[L["tA"][k - 1]] + y[L["tB"][k - 1]]
        dpsi, psi = np.zeros(n_columns), 0.0
        for l in range(self.model.K):
            for r in (0, 1):
                mb, am = int(L["MB"][k - 1, l, r]), int(L["AM"][k - 1, l, r])
                words = y[mb] + y[am]
                psi += 2 * a[r][k - 1, l] * words
                dpsi += 2 * dQ[r, k - 1, l] * words
                dpsi[where[mb]] += 2 * a[r][k - 1, l]
                dpsi[where[am]] += 2 * a[r][k - 1, l]
        dD = np.zeros(n_columns)
        dD[where[int(L["tA"][k - 1])]] += 1
        dD[where[int(L["tB"][k - 1])]] += 1
        return -dpsi / D + psi / D**2 * dD

    @property
    def _rows(self):
        return np.repeat(np.arange(len(self.program.packed)), np.diff(self.program.indptr))

    def _coefficient_columns(self):
        L = self._layout
        keys = {"tied": ("q",), "direct": ("Omega", "Psi"), "untied": ("q1", "q2", "tA", "tB", "beta_words")}
        return np.unique(np.concatenate([np.ravel(L[k]) for k in keys[self.model.kind]]))

    # ---- the untied fast phase ---------------------------------------------------------------
    def fast_phase(self, y0, T, points=101, rtol=1e-10, atol=1e-12):
        """Untied fast phase on ``t = nη``: ``dm_k/dt = −(t^A_k + t^B_k) ∂Φ/∂m_k (m, q(0))``.

        Moments stay at ``y0``. Returns (times, m trajectory of shape (points, K)); the branch
        the slow phase starts on is the end point, polished to m*(q0) by Newton.
        """
        from scipy.integrate import solve_ivp

        if self.model.kind != "untied":
            raise PotentialError("the fast phase exists only for the untied model")
        L, idx = self._layout, np.array(self.trainable) - 1
        q1, q2 = y0[L["q1"]], y0[L["q2"]]
        D = y0[L["tA"]] + y0[L["tB"]]

        def velocity(t, m):
            dm = np.zeros_like(m)
            dm[idx] = -(D * self.potential.evaluate(m=m, q1=q1, q2=q2).b)[idx]
            return dm

        times = np.linspace(0.0, T, points)
        run = solve_ivp(velocity, (0.0, T), self.branch.m, t_eval=times, rtol=rtol, atol=atol, method="LSODA")
        if not run.success:
            raise PotentialError(f"untied fast phase failed: {run.message}")
        self.branch = Branch(self.potential.m_star(q1, q2, run.y[:, -1], self.trainable))
        gap = np.abs(self.branch.m - run.y[:, -1]).max()
        if gap > 1e-6 * max(1.0, np.abs(self.branch.m).max()):
            warnings.warn(f"the fast phase had not converged at t = {T:g} (m = {run.y[:, -1].tolist()}, "
                          f"m* = {self.branch.m.tolist()}): raise fast_T, or start off an unstable symmetric point "
                          "(an exactly symmetric m stays there at d = ∞)", stacklevel=2)  # fmt: skip
        return run.t, run.y.T


def _layout(program):
    """State indices of the order parameters and of the words β needs, as integer arrays."""
    index, K, kind = program.index, program.model.K, program.model.kind
    pairs = [(k, l) for k in range(1, K + 1) for l in range(1, K + 1)]

    def grid(pattern):
        return np.array([index(pattern.format(k=k, l=l)) for k, l in pairs]).reshape(K, K)

    if kind == "tied":
        return {"q": grid("S{k} S{l}"), "t": np.array([index(f"S{k}") for k in range(1, K + 1)])}
    if kind == "direct":
        return {"Omega": grid("S{k} S{l}^T"), "Psi": grid("S{k} S{l}"),
                "t": np.array([index(f"S{k}") for k in range(1, K + 1)])}  # fmt: skip
    out = {"q1": grid("M{k} M{l}^T"), "q2": grid("M{k} M{l}"),
           "tA": np.array([index(f"A{k}") for k in range(1, K + 1)]),
           "tB": np.array([index(f"B{k}") for k in range(1, K + 1)])}  # fmt: skip
    MB = np.zeros((K, K, 2), np.int64)
    AM = np.zeros((K, K, 2), np.int64)
    for k in program.model.trainable:
        for l in range(1, K + 1):
            for r, Ml in enumerate((f"M{l}", f"M{l}^T")):
                MB[k - 1, l - 1, r] = index(f"{Ml} B{k}")
                AM[k - 1, l - 1, r] = index(f"A{k} {Ml}")
    trainable = np.array(program.model.trainable) - 1
    out["MB"], out["AM"] = MB, AM
    out["beta_words"] = np.concatenate([MB[trainable].ravel(), AM[trainable].ravel()])
    return out


def from_config(config, degree=None, program=None, initial=None, potential=None):
    """The `Truncation` and its initial moments ``y0`` for a `momentgen.config.Config`.

    ``degree`` overrides ``[truncation] degree``; ``program`` and ``initial`` skip the
    derivation and the initial moments (e.g. both loaded from a generated module), and
    ``potential`` reuses a `Potential` (its compiled integrand and calibrated rule). Initial
    moments are exact d = ∞ values for gaussian / identity inits and empirical ones of
    `Config.start_factors` when an init comes from a file.
    """
    from .hierarchy import build
    from .initial import empirical_moments, exact_moments

    model = config.model
    degree = config.section("truncation")["degree"] if degree is None else degree
    if program is None:
        program = build(model, degree, config.section("truncation")["observables"])
    if potential is None:
        potential = config.potential()
    factors = config.start_factors()
    if initial is not None:
        y0 = np.asarray(initial, dtype=float)
    elif factors is not None:
        y0 = empirical_moments(model, factors, program.word_codes)
    else:
        y0 = exact_moments(model, config.inits(), program.word_codes)
    return Truncation(program, potential, config.section("model")["gamma"], means=config.initial_means()), y0
