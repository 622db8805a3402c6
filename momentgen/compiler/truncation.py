"""A truncated hierarchy wired to its potential: the vector field an ODE solver integrates.

`Truncation` joins a compiled `momentgen.compiler.hierarchy.Program` (the words and their sparse
terms), a `momentgen.compiler.potential.Potential` (Φ and its gradients) and the weight decay γ.
At each state ``y`` (the moments ``μ_α`` in program order) it reads the order parameters
(the kind's `order_words`), evaluates the coefficient arrays (`ModelKind.coefficient_arrays`),
gathers them into the program's coefficient slots and applies the program with the one
compiled kernel (`momentgen.compiler.kernel.apply_program`): no Python loop over words.

With ``kappa`` = κ = ηd/B > 0 and a program built with ``noise=True`` the vector field also has
the finite-learning-rate term of online SGD (docs/FINITE_LR.md): its coefficients κN1, κN2 come
from `momentgen.compiler.potential.Potential.noise_at` at the same state.

``rhs(t, y, state)`` is a pure function of its arguments, in the solve_ivp style: what a run carries
besides ``y`` is an explicit, immutable `RunState` — the branch of the slaved mean (kinds with a mean)
and the quadrature rule's level. The solver (`integrate.solve`) passes the run's state and advances it
with `Truncation.advanced` after each accepted step (``state`` defaults to ``Truncation.state``, which `track`
advances, for a caller with a solver of its own); the rule's level changes only
in the explicit step `Truncation.refine` (the solvers' audit, `momentgen.dynamics.integrate.audited`). Time axes:
the kind's (`ModelKind.time_scale`); the fast phase of a kind with a mean runs on its own axis ``t = nη``
with the moments frozen (MATH.md §4).
"""

import numpy as np
import scipy.sparse

from ..core.errors import STATE_ERRORS, PotentialError
from .hierarchy import build
from .initial import empirical_moments, exact_moments
from .kernel import apply_program, segment_pairs, segment_rows
from .potential import Potential
from .slaved_mean import RunState, mean_of

__all__ = ["Truncation", "RunState", "CoefficientSource", "from_config", "apply_program", "check_kappa"]


def check_kappa(kappa):
    """κ = ηd/B as a float in [0, 1): the finite-learning-rate term is the first order of an
    expansion in κ (docs/FINITE_LR.md), meaningless from κ ≈ 1 on."""
    try:
        kappa = float(kappa)
    except (TypeError, ValueError):
        raise PotentialError(f"kappa = eta d / B must be a number, got {kappa!r}") from None
    if not 0.0 <= kappa < 1.0:
        raise PotentialError(
            f"kappa = eta d / B = {kappa:g} is outside [0, 1): the finite-learning-rate term is the first "
            "order of an expansion in kappa; lower the learning rate or raise the batch size"
        )
    return kappa


class Truncation:
    """The right-hand side ``dμ/dt = F(μ)`` of a truncated hierarchy.

    Parameters
    ----------
    program : momentgen.hierarchy.Program
    potential : momentgen.potential.Potential
        Same model kind as the program's.
    gamma : float
        Weight decay γ.
    means : array_like, shape (K,), optional
        Kinds with a mean: the pre-activation means ``m_k`` at the start (fixed indices keep theirs).
    kappa : float
        κ = ηd/B of the finite-learning-rate term (0: the ηd/B → 0 hierarchy). κ > 0 needs a
        program built with ``noise=True``.
    kappa_profile : callable, optional
        A schedule's ``κ(t)/κ`` on the integrated time axis (`momentgen.setting.schedules.TimeChange.kappa_factor`);
        None: κ is constant.
    """

    def __init__(self, program, potential, gamma=0.0, means=None, kappa=0.0, kappa_profile=None):
        if potential.kind != program.model.kind:
            raise PotentialError(f"potential is for the {potential.kind} model, program for {program.model.kind}")
        self.program, self.potential, self.gamma = program, potential, float(gamma)
        self.kappa = check_kappa(kappa)
        self.kappa_profile = kappa_profile
        if self.kappa and not program.has_noise:
            raise PotentialError(
                f"kappa = {self.kappa:g} needs the finite-learning-rate terms: build the program with noise=True"
            )
        self.model = program.model
        self.definition = self.model.definition
        factors = np.array([s.factor for s in program.symbols])
        self._terms = segment_rows(
            program.indptr, program.symbol, program.target, factors[program.symbol] * program.multiplicity
        )
        self._noise_weight = factors[program.noise_symbol] * program.noise_multiplicity  # c-free weight of a term
        self._noise = segment_pairs(
            program.noise_indptr, program.noise_symbol, program.noise_left, program.noise_right, self._noise_weight
        )
        K = self.model.K
        pairs = [(k, l) for k in range(1, K + 1) for l in range(1, K + 1)]
        self._Q = np.array(
            [[program.index(word) for word in self.definition.order_texts(self.model, k, l)] for k, l in pairs]
        )
        self._Q = self._Q.T.reshape(2, K, K)  # state indices of Q1_kl and Q2_kl
        self._word = {text: program.index(text) for text, _ in self.definition.state_words(self.model)}
        self.state = RunState(np.zeros(K) if means is None else np.asarray(means, float).reshape(K).copy())
        self._accepted = None  # the last state `_resolved` let through (a run passes one to each of a step's stages)
        self.mean = mean_of(self.definition)  # `slaved_mean.NoMean` or `SlavedMean`
        self.trainable = list(self.model.trainable)

    # ---- order parameters and coefficients -------------------------------------------------
    def moments(self, y):
        """``moments(text)``: the value of a required word at ``y`` (the accessor the kinds read)."""
        return lambda text: y[self._word[text]]

    def order_parameters(self, y):
        """(Q1, Q2) at moments ``y`` — no m* needed."""
        return y[self._Q[0]], y[self._Q[1]]

    @property
    def read_indices(self):
        """The indices of the words the coefficients read — the order parameters and the kind's state words — in
        ascending order: `coefficient_arrays`, `state_and_value` and `advanced` read nothing else of a state."""
        return np.unique(np.concatenate([self._Q.ravel(), np.fromiter(self._word.values(), int)]))

    def slaved_mean(self, y, state=None):
        """m*(q(y)) by Newton from the warm start of ``state`` (default: the current one; pure)."""
        return self.state_and_value(y, state)[0][2]

    def _resolved(self, state):
        """``state``, or the current one for None; anything but a `RunState` this truncation could have made (its
        mean of shape (K,), finite; a rule level from the calibrated one to the potential's current one) is a
        one-line error — a level never reached would build a rule of any size, one below the calibration would
        miss the potential's rtol silently."""
        if state is None or state is self.state:
            return self.state
        if state is self._accepted:  # checked at an earlier stage: its level stays in range (levels only rise)
            return state
        if not isinstance(state, RunState):
            raise PotentialError(
                f"state must be a RunState (Truncation.state or Truncation.advanced), got {type(state).__name__}"
            )
        m, level, reached = np.asarray(state.m), state.level, self.potential.rule_level
        if m.shape != (self.model.K,) or not np.all(np.isfinite(m)):
            raise PotentialError(f"the state's mean m must be {self.model.K} finite numbers, got {state.m!r}")
        lowest = self.potential.lowest_rule_level or 1
        if level is not None and (
            isinstance(level, bool) or not isinstance(level, (int, np.integer)) or not lowest <= level <= (reached or 0)
        ):
            raise PotentialError(
                f"the state's rule level {level!r} is not one this potential has used ({lowest} … {reached}, the "
                "calibrated level to the current one; None: the current one)"
            )
        self._accepted = state
        return state

    def advanced(self, y, state=None):
        """The `RunState` after an accepted step to ``y`` from ``state`` (default: the current one): the branch of
        m* followed to ``y`` (kinds with a mean), the rule's level recorded (pure: nothing is changed)."""
        state = self._resolved(state)
        return RunState(self.mean.follow(self, y, state), self.potential.rule_level)

    def track(self, y):
        """Advance the current state to ``y`` (`advanced`; the solvers call it after each accepted step)."""
        self.state = self.advanced(y)

    def refine(self):
        """The explicit refinement step: check the far states the right-hand side met at its rule's level
        (`momentgen.compiler.potential.Potential.audit`), raising the level where the rule misses rtol; the current
        state then carries the new level. True when the level stood (what was computed at it holds)."""
        stood = self.potential.audit()
        self.state = RunState(self.state.m, self.potential.rule_level)
        return stood

    def state_and_value(self, y, state=None):
        """((Q1, Q2, m), Φ and its derivatives there) at moments ``y`` in ``state`` (default: the current one);
        for a kind with a mean m is m*(q) by Newton from the state's warm start. Φ is evaluated at the
        state's rule level with the rule frozen (far states are kept for `refine`)."""
        state = self._resolved(state)
        with self.potential.frozen(level=state.level):
            return self.mean.state_and_value(self, *self.order_parameters(y), state.m)

    def kappa_at(self, t):
        """κ at time ``t`` (the integrated axis of a schedule; constant without one or when ``t`` is None)."""
        if self.kappa_profile is None or t is None or not self.kappa:
            return self.kappa
        return self.kappa * self.kappa_profile(t)

    def coefficient_arrays(self, y, trace_conserving=False, noise=True, t=None, state=None):
        """{family: array} and ``"gamma"`` at moments ``y``, time ``t`` and `RunState` ``state`` (default: the
        current one; a pure function of the three); with the finite-learning-rate terms also ``"N1"``, ``"N2"`` =
        κ(t) N1, κ(t) N2 (0 when κ = 0), unless ``noise`` is False (a caller that reads only the drift skips
        their cost)."""
        order, value = self.state_and_value(y, state)
        arrays = self.definition.coefficient_arrays(value, self.moments(y), self.model, trace_conserving, self.gamma)
        arrays["gamma"] = self.gamma
        if self.program.has_noise and noise:
            K = self.model.K
            N1, N2 = self.potential.noise_at(*order) if self.kappa else (np.zeros((K, K)), np.zeros((K, K)))
            kappa = self.kappa_at(t)
            arrays["N1"], arrays["N2"] = kappa * N1, kappa * N2
        return arrays

    def coefficients(self, y, t=None, state=None):
        """Coefficient values in program slot order at moments ``y``, time ``t`` and `RunState` ``state``."""
        return self.program.coefficient_vector(self.coefficient_arrays(y, t=t, state=state))

    def slaving_rates(self, y):
        """Kinds with a mean: the fast phase's rates D_k (untied ``t^A_k + t^B_k``; β ∝ 1/D_k); else empty."""
        return self.mean.slaving_rates(self, y)

    # ---- the vector field --------------------------------------------------------------------
    def rhs(self, t, y, state=None):
        """``dμ/dt`` at moments ``y`` (shape (n_words,)) in `RunState` ``state`` (default: the current one); ``t``
        matters only through a schedule's κ(t). A pure function of ``(t, y, state)``."""
        y = np.ascontiguousarray(y, dtype=float)
        p = self.program
        if y.shape != p.packed.shape:  # the kernel does not check its bounds (and word texts are built lazily)
            raise ValueError(f"the state has shape {y.shape}, the program {len(p.packed)} words")
        return apply_program(*self._terms, self._noise, self.coefficients(y, t, state), y, np.empty(len(y)))

    def checked_rhs(self, t, y):
        """`rhs` at one state outside a run, with its rule checked there (`refine`; evaluated again at the raised
        level when the check raised it): what a single evaluation needs where no run audits afterwards (e.g. the
        drift at a measured state)."""
        value = self.rhs(t, y)
        return value if self.refine() else self.rhs(t, y)

    def jac(self, t, y, state=None):
        """Jacobian (CSR) at ``(t, y, state)`` (as `rhs`): the linear part plus the coefficients' dependence on y.

        ``∂F_i/∂y_j = L_ij + Σ_s (L_s y)_i ∂c_s/∂y_j``. The sensitivities ∂c/∂y are analytic
        (`_sensitivity`: second derivatives of Φ, through m*(q) for a kind with a mean, and the
        kind's own terms, `ModelKind.sensitivity`) and live in the columns of the required words.
        The quadratic finite-learning-rate terms add their product-rule derivative at fixed κN1, κN2
        (their own dependence on q, an O(κ) correction of a Newton matrix, is left out).
        """
        y = np.ascontiguousarray(y, dtype=float)
        p, n = self.program, len(y)
        c = self.coefficients(y, t, state)
        columns, sensitivity = self._sensitivity(y, state)
        terms = self._terms  # reordered only inside rows, so the program's row pointer still applies
        symbol, weight, target = terms.term_symbols(), terms.weight, terms.target
        per_symbol = scipy.sparse.csr_matrix((weight * y[target], (p.term_rows(), symbol)), shape=(n, len(c)))  # L_s y
        dense = per_symbol @ sensitivity
        rows, cols = np.nonzero(dense)
        correction = scipy.sparse.csr_matrix((dense[rows, cols], (rows, columns[cols])), shape=(n, n))
        linear = scipy.sparse.csr_matrix((c[symbol] * weight, target, p.indptr), shape=(n, n))
        return (linear + correction + self._noise_jacobian(c, y)).tocsr()

    def _noise_jacobian(self, c, y):
        """∂/∂y of the quadratic terms at fixed coefficients: c·w·(y_b e_a + y_a e_b)."""
        n, p = len(y), self.program
        symbol, left, right = p.noise_symbol, p.noise_left, p.noise_right
        if len(symbol) == 0:
            return scipy.sparse.csr_matrix((n, n))
        rows = p.term_rows("noise")
        extended = np.append(y, 1.0)
        scale = c[symbol] * self._noise_weight
        parts = [(scale * extended[other], at) for at, other in ((left, right), (right, left))]
        data = np.concatenate([value[at >= 0] for value, at in parts])
        columns = np.concatenate([at[at >= 0] for _, at in parts])
        row_index = np.concatenate([rows[at >= 0] for _, at in parts])
        return scipy.sparse.csr_matrix((data, (row_index, columns)), shape=(n, n))

    def _sensitivity(self, y, state):
        """(columns, S) with ``S[s, j] = ∂c_s/∂y_{columns[j]}`` at the current coefficients."""
        columns = np.unique(np.array(list(self._word.values())))
        where = {int(col): j for j, col in enumerate(columns)}
        state = self._resolved(state)
        (Q1, Q2, m), value = self.state_and_value(y, state)
        with self.potential.frozen(level=state.level):
            second = self.potential.second_at(Q1, Q2, m)
        K = self.model.K
        # dQ[r, k, l, j]: derivative of ∂Φ/∂Q(r+1)_kl by the state word columns[j]
        dQ = np.zeros((2, K, K, len(columns)))
        for s_ in (0, 1):
            for a in range(K):
                for b in range(K):
                    dQ[..., where[int(self._Q[s_, a, b])]] += second.QQ[:, :, :, s_, a, b]
        dQ += self.mean.through_mean(self, second, where, len(columns))
        arrays = self.definition.sensitivity(
            self.model, dQ, value, self.moments(y), lambda text: where[self._word[text]]
        )
        return columns, np.array(
            [_entry(arrays, c) if c.family != "gamma" else np.zeros(len(columns)) for c in self.program.symbols]
        )

    # ---- the fast phase of a kind with a mean ------------------------------------------------------
    def fast_phase(self, y0, T, points=101, rtol=1e-10, atol=1e-12):
        """Fast phase on ``t = nη``: ``dm_k/dt = −D_k ∂Φ/∂m_k (m, q(0))`` for trainable k (MATH.md §4).

        Moments stay at ``y0``. Returns (times, m trajectory of shape (points, K)); the branch
        the slow phase starts on is the end point, polished to m*(q0) by Newton.
        """
        fast = self.mean.fast_phase(self, y0, T, points=points, rtol=rtol, atol=atol)
        if not fast:
            raise PotentialError(
                f"the fast phase exists only for a model with a mean; the {self.model.kind} model is centred"
            )
        return fast["fast_t"], fast["fast_m"]


class CoefficientSource:
    """The theory's coefficients for the matrix flow engine (`momentgen.setting.flow`), from moments.

    The flow reads the moments of ``words`` (of the degree-2 program's words, those the coefficients read: order
    parameters and the kind's state words, `Truncation.read_indices`) on its matrices or its state vector;
    ``coefficients``
    are the potential's at them in the run's `RunState` — for a kind with a mean at the slaved m*(q) of the branch
    it carries and with the finite-d, trace-conserving bias β′ (MATH.md §4); ``advanced`` gives the state after
    an accepted step (the engine passes it along the run). ``errors``: the state errors that stop a flow with a status.
    With ``kappa`` > 0 the arrays also hold κN1, κN2 (the stochastic matrix model's noise).
    """

    errors = STATE_ERRORS

    def __init__(
        self, model, potential, gamma=0.0, means=None, max_bytes=None, kappa=0.0, kappa_profile=None, program=None
    ):
        if program is None:
            program = source_program(model, kappa, max_bytes)
        self.truncation = Truncation(program, potential, gamma, means=means, kappa=kappa, kappa_profile=kappa_profile)
        self._read, self._size = self.truncation.read_indices, len(program.word_codes)
        self.words = [program.word_codes[i] for i in self._read]

    @property
    def state(self):
        """The `RunState` a flow starts from (the branch ``means``)."""
        return self.truncation.state

    def coefficients(self, mu, noise=True, t=None, state=None):
        """The family arrays at moments ``mu``, time ``t`` and `RunState` ``state`` (default: the start) — with
        κ(t)N1, κ(t)N2 unless ``noise`` is False."""
        return self.truncation.coefficient_arrays(self._state(mu), trace_conserving=True, noise=noise, t=t, state=state)

    def advanced(self, mu, state):
        """The `RunState` after an accepted step to moments ``mu`` (`Truncation.advanced`)."""
        return self.truncation.advanced(self._state(mu), state)

    def _state(self, mu):
        """The program's state vector with ``mu`` (the moments of `words`) in place; 0 for the words nothing reads."""
        y = np.zeros(self._size)
        y[self._read] = mu
        return y

    def kappa_at(self, t):
        """κ at time ``t`` (`Truncation.kappa_at`): the factor the noise arrays carry."""
        return self.truncation.kappa_at(t)


def source_program(model, kappa=0.0, max_bytes=None):
    """The degree-2 program a `CoefficientSource` reads (order parameters and the words the coefficients read;
    with κ > 0 the noise families too: the stochastic matrix model reads κN1, κN2)."""
    noise = check_kappa(kappa) > 0
    return build(
        model,
        model.definition.state_degree(model),
        [],
        noise=noise,
        **({} if max_bytes is None else {"max_bytes": max_bytes}),
    )


def _entry(arrays, coefficient):
    """Row of ∂(family entry)/∂y for one coefficient slot (``arrays[family]`` has the family's shape + columns)."""
    array = arrays[coefficient.family]
    return array[coefficient.k - 1] if coefficient.l is None else array[coefficient.k - 1, coefficient.l - 1]


def from_config(config, degree=None, program=None, initial=None, potential=None):
    """The `Truncation` and its initial moments ``y0`` for a `momentgen.setting.config.Config`.

    ``degree`` overrides ``[truncation] degree``; ``program`` and ``initial`` skip the
    derivation and the initial moments (e.g. both loaded from a generated module), and
    ``potential`` reuses a `Potential` (its compiled integrand and calibrated rule). With
    ``[integrate] finite_lr`` the program carries the finite-learning-rate term at κ =
    `Config.kappa`. Initial moments are exact d = ∞ values for gaussian / identity inits and empirical ones of
    `Config.start_factors` when an init comes from a file.
    """
    model, kappa = config.model, config.kappa
    degree = config.settings.truncation.degree if degree is None else degree
    if program is None:
        program = build(
            model, degree, config.settings.truncation.observables, max_bytes=config.max_bytes, noise=kappa > 0
        )
    if potential is None:
        potential = Potential.from_config(config)
    factors = config.start_factors()
    if initial is not None:
        y0 = np.asarray(initial, dtype=float)
    elif factors is not None:
        y0 = empirical_moments(model, factors, program.word_codes, config.sigma_of(factors))
    else:
        y0 = exact_moments(model, config.inits(), program.word_codes, config.data())
    gamma = config.settings.model.gamma
    return Truncation(program, potential, gamma, means=config.initial_means(), kappa=kappa), y0
