"""The matrix flow engine: factors moved by their kind's matrix flow (MATH.md §3–§5).

`run` integrates the factors of one model (finite d × d matrices, or the compressed letters of
a quadrature state) with the velocities of the kind (`KindMatrices.factor_velocities`), the
coefficients coming from a *source* — any object with

* ``words``: the code tuples whose moments the coefficients read (order parameters, …);
* ``state``: the explicit state a run starts from (the theory's `momentgen.compiler.slaved_mean.RunState`: the branch of
  the slaved mean, the quadrature rule's level);
* ``coefficients(mu, t=t, state=state)``: the coefficient arrays (`ModelKind.coefficient_arrays`, plus
  ``gamma``) from those moments at time t in that state (t matters only for a schedule's κ(t)), a pure function;
* ``advanced(mu, state)``: the state after an accepted step to moments ``mu`` — the engine passes it along the
  run; ``errors``: the exception classes that mean "this state cannot be passed" (a status, not a crash); and, for
  `run_stochastic`, ``kappa_at(t)``: κ at time t (a schedule's κ(t)).

The engine knows nothing of Φ: the theory passes a source built from its potential
(`momentgen.compiler.truncation.CoefficientSource`), and the reference side's finite-d matrix flow
(`momentgen.reference.matrix_flow`) receives one from its caller. Moments are read as ``(1/d) Tr``
(finite matrices) or, with the reader the caller passes, from the state vector ``⟨e₀, X⋯X e₀⟩``
of a GNS representation. Time is on the kind's axis.

`run_stochastic` is the same flow with the SGD noise of a finite learning rate added as an Itô
SDE on the factors (the stochastic matrix model of docs/FINITE_LR.md): its normalised traces
follow the hierarchy with the finite-learning-rate term up to O(1/n).
"""

import math
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from ..core.chebyshev import RHO_EVERY, RHO_SAFETY, power_radius
from ..core.stepper import DENSE_JACOBIAN_MAX, integrate
from ..core.trajectory import Moments
from ..laws.commuting import Diagonal, diagonal_state
from ..models.base import diagonal_of, frozen, psd_root, sandwich, shifted
from .matrices import trace_moments
from .spectra import product_matrix

__all__ = [
    "FlowRun",
    "run",
    "run_stochastic",
    "letter_velocities",
    "CHEBYSHEV",
    "CHEBYSHEV_DRAWS",
    "DOUBLE",
    "SINGLE",
]

#: A dense stepper's ``precision``: the velocity's products in double (the default) or in single precision (RKC
#: only: the stepper's own arithmetic stays in double; `_stepped`).
DOUBLE, SINGLE = "double", "single"
_SINGLE_EPS = float(np.finfo(np.float32).eps)  # RKC's `evaluation_eps` for a single-precision velocity (`_stepped`)
#: The stabilised explicit stepper for a dense law-based matrix model (`momentgen.core.chebyshev`): its steps follow
#: the accuracy wanted, not the fastest rate. At this tolerance, on a Gaussian student against a power-law Σ (tied,
#: a = 2, t ≤ 50, n = 100), it is 3e-5 relative off DOP853 at 1e-9 on the risk in 1 400 evaluations where DOP853
#: takes 7 500, and the spectrum of the exactly solvable case at n = 400 is DOP853's to 1e-6 in Kolmogorov distance;
#: other kinds are further off (symmetric: 2e-4 of the words). A closure's estimate carries 3× the error measured on
#: its own problem (`momentgen.dynamics.stepper_check`).
CHEBYSHEV = {"method": "RKC", "rtol": 1e-5, "atol": 1e-8}
#: The stepper of an ensemble's draws, whose own spread is 1e-2: looser — on the tied case above at most 6.7e-4
#: relative off DOP853 on the risk at n = 32 / 64 / 128 (two draws each) in 550–580 evaluations (DOP853: 7 200–7 800;
#: at rtol 3e-4, 3.1e-4 in 690–730), on the symmetric kind 5e-3 of the words. The spectrum of the solvable case at
#: n = 400 moves by 3e-3 in Kolmogorov distance at rtol 3e-4 already, which a single draw could not afford. Its
#: velocity is evaluated in single precision (`SINGLE`), which moves a draw's risk by 2e-5–8e-5 relative on that
#: case at n = 32 (a tenth of the stepper's error; `tests/dynamics/test_ensemble.py`) and makes a tied draw 1.25× /
#: 1.6× / 1.7× faster at n = 128 / 256 / 512, where its two products are most of its cost
#: (`benchmarks/bench_precision.py`).
CHEBYSHEV_DRAWS = {"method": "RKC", "rtol": 1e-3, "atol": 1e-6, "precision": SINGLE}

#: BDF on a commuting state integrates at rtol / this, so that its global error stays at DOP853's for the given rtol
BDF_TIGHTER = 100.0


@dataclass(kw_only=True)
class FlowRun(Moments):
    """The `Moments` of a flow (``series``: word → (n,)) on the caller's time axis, with ``probes`` (n, n_probes)
    and the integrator's counts (``info``)."""

    probes: np.ndarray
    info: dict = field(default_factory=dict)


class _Layout:
    """The trainable factors of a model as one flat vector, and back (fixed factors stay as given);
    `letters` of a state, a fixed index's computed once (untied teacher: 3 of 10 products a step) and `frozen`, as Σ
    is; ``fixed_codes``: the codes of those letters (`_FixedWordsOnce`). Matrices are held as given (m × m arrays)
    or, in `held_by`, by their diagonals in a commuting state's basis."""

    def __init__(self, model, factors, sigma=None, fixed=None, dtype=float):
        self.model, self.dtype = model, dtype
        self.sigma = [] if sigma is None else [frozen(np.asanyarray(sigma, dtype=dtype))]
        self.trainable = [k - 1 for k in model.trainable]
        self.grouped = isinstance(factors[0], tuple)
        self.factors = [tuple(np.array(f, subok=True) for f in x) if self.grouped else np.array(x, subok=True)
                        for x in factors]  # fmt: skip
        self.shapes = [[f.shape for f in self.parts(k)] for k in range(len(self.factors))]
        self.sizes = [[math.prod(shape) for shape in shapes] for shapes in self.shapes]
        self.index_letters = model.definition.matrices.index_letters
        fixed = fixed or {k: self.index_letters(f) for k, f in enumerate(self.factors) if k not in self.trainable}
        self.fixed = {k: [frozen(letter) for letter in letters] for k, letters in fixed.items()}
        self.held = type(self.factors[self.trainable[0]] if not self.grouped else self.factors[self.trainable[0]][0])
        per_index = len(model.definition.letter_kinds)  # index k's letters are codes k·per_index …, Σ's the last
        fixed_codes = [k * per_index + j for k in self.fixed for j in range(per_index)]
        self.fixed_codes = frozenset(fixed_codes + [len(self.factors) * per_index] * len(self.sigma))

    def in_precision(self, dtype):
        """This layout evaluated in ``dtype`` (`SINGLE`: a draw's products in single precision): its factors, fixed
        letters and Σ cast once, and `unpack` casting a state's factors. `pack` gives double precision whatever it
        packs, so the stepper's arithmetic stays in double."""
        factors = [tuple(f.astype(dtype) for f in x) if self.grouped else x.astype(dtype) for x in self.factors]
        fixed = {k: [letter.astype(dtype) for letter in letters] for k, letters in self.fixed.items()}
        return _Layout(self.model, factors, self.sigma[0] if self.sigma else None, fixed, dtype=dtype)

    def parts(self, k):
        """The matrices of index k's factor (one, or the untied (U, V))."""
        return self.factors[k] if self.grouped else (self.factors[k],)

    @property
    def size(self):
        """Length of the flat vector."""
        return sum(size for k in self.trainable for size in self.sizes[k])

    def letters(self, factors):
        """The letter matrices (code order) of an unpacked state ``factors``."""
        letters = [
            m for k, f in enumerate(factors) for m in (self.fixed[k] if k in self.fixed else self.index_letters(f))
        ]
        return letters + self.sigma

    def unpack(self, vector):
        out, offset = list(self.factors), 0
        for k in self.trainable:
            parts = []
            for shape, size in zip(self.shapes[k], self.sizes[k]):
                part = vector[offset : offset + size].reshape(shape)
                parts.append(part.astype(self.dtype, copy=False).view(self.held))
                offset += size
            out[k] = tuple(parts) if self.grouped else parts[0]
        return out

    def pack(self, items):
        return np.concatenate(
            [np.ravel(p) for k in self.trainable for p in (items[k] if self.grouped else (items[k],))], dtype=float
        )

    def commuting_matrices(self):
        """The matrices a commuting state must hold diagonally: the trainable factors, the fixed letters and Σ."""
        trainable = [p for k in self.trainable for p in self.parts(k)]
        return trainable + [letter for k in sorted(self.fixed) for letter in self.fixed[k]] + self.sigma

    def held_by(self, state):
        """This layout with every matrix held by its diagonal in ``state``'s basis (a `DiagonalState`). A fixed
        index enters the flow through its letters: a factor part that is not diagonal there (a compressed
        teacher's rectangular root) is held as zeros — the velocity check of `_diagonal_layout` vouches for it."""

        def hold(part):
            return state.diagonal(part) if state.holds(part) else np.zeros(len(state.weights)).view(Diagonal)

        factors = [tuple(hold(p) for p in x) if self.grouped else hold(x) for x in self.factors]
        fixed = {k: [state.diagonal(letter) for letter in letters] for k, letters in self.fixed.items()}
        return _Layout(self.model, factors, state.diagonal(self.sigma[0]) if self.sigma else None, fixed)


class _FixedWordsOnce:
    """``read(words, letters)`` for the letters of one `_Layout`, the words over its fixed letters only (a teacher's,
    Σ's: 10 of the 18 words of a tied scaling-law run) measured at the first call and kept: they never move."""

    def __init__(self, read, fixed_codes):
        self.read, self.fixed_codes, self.known, self.plans = read, fixed_codes, {}, {}

    def _plan(self, words):
        """(the indices of the moving words, the indices and values of the fixed ones) of a word list."""
        still = [set(w) <= self.fixed_codes for w in words]
        moving, fixed = [i for i, s in enumerate(still) if not s], [i for i, s in enumerate(still) if s]
        return moving, fixed, [words[i] for i in fixed]

    def __call__(self, words, letters):
        words = tuple(map(tuple, words))
        if words not in self.plans:
            self.plans[words] = self._plan(words)
        moving, fixed, fixed_words = self.plans[words]
        new = [w for w in dict.fromkeys(fixed_words) if w not in self.known]
        self.known.update(zip(new, self.read(new, letters) if new else ()))
        out = np.empty(len(words))
        out[fixed] = [self.known[w] for w in fixed_words]
        if moving:
            out[moving] = self.read([words[i] for i in moving], letters)
        return out


class _SourceMoments:
    """``moments(vector, letters)``: the moments of a source's words at a packed state ``vector``, measured by
    ``read(words, letters())`` (``letters``: a function giving the state's letters, called only when they are
    measured). The last state's are kept: an accepted step's state is the one the stepper evaluated its last velocity
    at (RKC's F(y_{n+1}), DOP853's last stage), so the run's `advance` reads them again for free."""

    def __init__(self, read, words):
        self.read, self.words, self.vector, self.values = read, list(words), None, None

    def __call__(self, vector, letters):
        if self.vector is None or not np.array_equal(vector, self.vector):
            self.values, self.vector = self.read(self.words, letters()), np.array(vector)
        return self.values.copy()


def _velocity(model, layout, source, moments):
    """The packed factor velocity of ``layout``'s state: a function of (packed vector, time t, the run's state);
    ``moments``: a `_SourceMoments` of ``source``'s words."""
    definition = model.definition

    def velocity(vector, t, state):
        current = layout.unpack(vector)
        letters = layout.letters(current)
        coefficients = source.coefficients(moments(vector, lambda: letters), t=t, state=state)
        if layout.dtype is not float:
            coefficients = _in_precision(coefficients, layout.dtype)
        return layout.pack(definition.matrices.factor_velocities(model, current, coefficients, letters))

    return velocity


def _in_precision(coefficients, dtype):
    """``coefficients`` (name → array or number) with their floating-point values in ``dtype``: numpy keeps the
    type of a product of a single-precision matrix and a double-precision scalar double, so a coefficient would
    undo the cast of the letters it multiplies."""
    return {
        name: np.asarray(value, dtype=dtype) if np.issubdtype(np.asarray(value).dtype, np.floating) else value
        for name, value in coefficients.items()
    }


def _stepped(layout, dense_stepper):
    """(the layout whose velocity the stepper evaluates, the solver's options): ``layout`` itself, or with
    ``dense_stepper``'s ``precision`` `SINGLE` (RKC only) ``layout`` in single precision and the evaluations'
    precision told to RKC (`momentgen.core.chebyshev.power_radius` differences at its √eps)."""
    if dense_stepper.get("precision", DOUBLE) == DOUBLE:
        return layout, {}
    if dense_stepper.get("precision") != SINGLE or dense_stepper["method"] != "RKC":
        raise ValueError(f"precision must be {DOUBLE!r}, or {SINGLE!r} with RKC: got {dense_stepper}")
    return layout.in_precision(np.float32), {"evaluation_eps": _SINGLE_EPS}


def _diagonal_layout(model, dense, source, read):
    """(the layout held by its diagonals, the `DiagonalState`) when every matrix of ``dense`` is diagonal in one
    basis and the kind's velocity, evaluated on the diagonals, is the dense one at the start (to 1e-9 of its
    size: a velocity that is not a matrix expression of the letters fails it); else (``dense``, None)."""
    state = diagonal_state(dense.commuting_matrices(), read)  # None unless all are square and diagonal in one basis
    if state is None:
        return dense, None
    held = dense.held_by(state)
    exact = _velocity(model, dense, source, _SourceMoments(read, source.words))(
        dense.pack(dense.factors), 0.0, source.state
    )
    try:
        on_diagonals = _velocity(model, held, source, _SourceMoments(state.moments, source.words))(
            held.pack(held.factors), 0.0, source.state
        )
    except (ValueError, TypeError, IndexError):  # an operation a matrix held by its diagonal does not have
        return dense, None
    if on_diagonals.shape != (held.size,):
        return dense, None
    moved = held.unpack(on_diagonals)
    mapped = dense.pack([tuple(state.matrix(p) for p in x) if held.grouped else state.matrix(x) for x in moved])
    if np.abs(mapped - exact).max(initial=0.0) > 1e-9 * max(np.abs(exact).max(initial=0.0), 1e-300):
        return dense, None
    return held, state


def _trace_reader(model):
    """`trace_moments` of ``model``'s letters, told their transposes (a second half read from its mirror)."""
    return partial(trace_moments, transposes=tuple(int(c) for c in model.alphabet.transpose))


def run(
    model,
    factors,
    source,
    *,
    times,
    codes,
    texts=None,
    read=None,
    probes=(),
    rtol=1e-9,
    atol=1e-11,
    spectra=None,
    sigma=None,
    dense_stepper=None,
):
    """Integrate ``factors`` of ``model`` on ``times`` (the kind's own axis, ``model.time_scale``:
    tied t = 4nη/d, others τ = nη/d) and measure the words ``codes`` (code tuples,
    reported under ``texts``) and the ``probes`` (code tuples measured as they are — for a state
    that is not tracial their rotations differ). ``read(words, letters)`` measures moments:
    `momentgen.setting.matrices.trace_moments` (default: told the model's letter transposes) or a state-vector
    reader. ``spectra``: (function, {name: product codes}) — the spectral measure of each product at every output
    time, by ``function``
    (`momentgen.setting.spectra.trace_spectrum` or ``vector_spectrum``), in ``info["spectra"]``. ``sigma``: the data
    covariance Σ (a fixed letter, last in code order) of a model with one. A state that is not commuting is
    stepped by DOP853 at ``rtol``, ``atol``, or by ``dense_stepper``'s method at its tolerances (`CHEBYSHEV`). Returns a
    `FlowRun`; a state the source cannot pass ends the run with a status.

    A commuting state (every matrix diagonal in one basis: `momentgen.laws.commuting`) is integrated by its diagonals
    with BDF (its Jacobian by differences, dense), which steps over the converged directions' fast rates: a long
    horizon costs about its number of decades (its tolerances `BDF_TIGHTER` times tighter). Any other state by
    DOP853 or ``dense_stepper``. ``info["method"]`` says which."""
    read = _trace_reader(model) if read is None else read
    layout, state = _diagonal_layout(model, _Layout(model, factors, sigma), source, read)
    reader = _FixedWordsOnce(read if state is None else state.moments, layout.fixed_codes)
    method = "BDF" if state is not None and layout.size <= DENSE_JACOBIAN_MAX else "DOP853"
    stepped, options = layout, {}
    if method == "DOP853" and dense_stepper is not None:
        method, rtol, atol = dense_stepper["method"], dense_stepper["rtol"], dense_stepper["atol"]
        stepped, options = _stepped(layout, dense_stepper)
    if method == "BDF":  # its global error is ~10× its rtol (solvable case: 9e-9 at 1e-9, 2.4e-9 = DOP853's at 1e-11)
        rtol, atol = rtol / BDF_TIGHTER, atol / BDF_TIGHTER
    # the velocity's moments: in the stepped layout's precision (their words over fixed letters too)
    moments = _SourceMoments(reader if stepped is layout else _FixedWordsOnce(read, layout.fixed_codes), source.words)
    current, evaluate = [source.state], _velocity(model, stepped, source, moments)

    def velocity(t, vector):
        return evaluate(vector, t, current[0])

    def advance(t, vector):
        current[0] = source.advanced(moments(vector, lambda: stepped.letters(stepped.unpack(vector))), current[0])

    result = integrate(
        velocity,
        layout.pack(layout.factors),
        np.asarray(times, dtype=float),
        method=method,
        rtol=rtol,
        atol=atol,
        on_step=advance,
        recoverable=tuple(source.errors),
        solver_options=options,
    )
    letters = [layout.letters(layout.unpack(v)) for v in result.y]
    measured = _measured(result.t, letters, codes, texts, reader, probes, result.status, result.message, result.nfev)
    measured.info["method"] = method if state is None else f"{method} on the diagonals of a commuting state"
    if spectra is not None:
        dense = letters if state is None else [[state.matrix(x) for x in each] for each in letters]
        measured.info["spectra"] = _spectra(dense, *spectra)
    return measured


def _spectra(letters, function, products):
    """{name: [(nodes, weights) at each state]} of the symmetric ``products`` (code tuples), from each state's
    letter matrices ``letters``."""
    return {name: [function(product_matrix(codes, each)) for each in letters] for name, codes in products.items()}


def _measured(t, letters, codes, texts, read, probes, status, message, nfev):
    """The `FlowRun` of the states (their letter matrices ``letters``) at times ``t``: the words ``codes``
    (under ``texts``) and the probes."""
    codes = list(codes)
    values = np.array([read(codes + list(probes), each) for each in letters])
    values = values.reshape(len(t), len(codes) + len(probes))
    texts = [str(c) for c in codes] if texts is None else list(texts)
    series = {w: values[:, i] for i, w in enumerate(texts)}
    return FlowRun(np.asarray(t), status, message, series=series, probes=values[:, len(codes) :], info={"nfev": nfev})


def run_stochastic(model, factors, source, *, times, codes, texts=None, seed=0, sigma=None):
    """The stochastic matrix model of the finite-learning-rate term (docs/FINITE_LR.md §3) on ``times``.

    The Itô SDE ``dF = v(F) dt + noise_increments(F, dH)`` on the factors (n × n), with increments of the
    per-index noise matrices ``E[dH_k,ab dH_l,cd] = (ρ dt/n) (κN1_kl δ_ac δ_bd + κN2_kl δ_ad δ_bc)``, ρ the kind's SGD
    steps per unit time times η/d (tied ¼, others 1), and κ(t)N1, κ(t)N2 from the source (a
    `momentgen.compiler.truncation.CoefficientSource` built with κ): the continuous-time limit of online SGD's
    minibatch noise, which the normalised traces feel only through the Itô terms of the hierarchy, self-averaging at
    O(1/n). Stepped by `_NoisySteps` (Euler drift, each noise increment split over two steps: the stationary
    variance of a linear mode is exact at every stable step; two-point entries, `_signs`). ``seed`` fixes the noise.
    ``sigma``: the data covariance Σ (a fixed letter; the noise matrices become Σ^{1/2} H Σ^{1/2}, the symmetric root,
    covariance κN1 Σ⊗Σ + κN2 with the swap, MATH.md §10). Time is on the kind's axis. A state the source cannot pass,
    or a non-finite one, ends the run with a status."""
    times = np.asarray(times, dtype=float)
    steps = _NoisySteps(model, _Layout(model, factors, sigma), source, sigma, seed, times[0], times[-1])
    states, reached, status, message = [steps.factors()], [times[0]], "ok", ""
    try:
        for end in times[1:]:
            steps.advance_to(end)
            states.append(steps.factors())
            reached.append(end)
    except FloatingPointError as error:
        status, message = "blowup", str(error)
    except tuple(source.errors) as error:
        status, message = getattr(error, "status", "failed"), str(error)
    letters = [steps.layout.letters(f) for f in states]  # measured in double, the words over fixed letters too
    run = _measured(reached, letters, codes, texts, steps.precise_read, (), status, message, steps.evaluations)
    run.info["steps"] = steps.count
    return run


#: The stochastic matrix model's steps (on the kind's axis, counted from the first output time t₀): at most
#: `STEP_GROWTH` × (t − t₀ + t_s) — t_s the time in which the first drift would move the state by its own size —,
#: for the first-order drift's accuracy, and at most `STIFF_STEP` / ρ, ρ the drift Jacobian's spectral radius
#: (`power_radius` every `RHO_EVERY` steps, × `RHO_SAFETY`): Euler is stable below 2 / ρ. The drift's own error at
#: κ = 0, against DOP853 at 1e-10 (tied, Gaussian student, teacher I, t ≤ 0.1, d = 200, the words S1, S1², S1³): at
#: most 3.0e-4 / 8.1e-4 / 1.5e-3 relative at 0.001 (3.7e-3 on S1³ at 0.0025, 7.2e-3 at 0.005: first order).
STEP_GROWTH = 0.001
STIFF_STEP = 1.5
#: The precision of the stochastic matrix model's evaluations — its drift (letters, moments, coefficients and the
#: products with the factors) and its noise increments G (their draws, Σ^{1/2}'s sandwich and the product with the
#: factors): single. An increment is random to begin with, its rounding (6e-8 relative) is far below its own spread,
#: and so is the drift's beside the increments it is summed with; single-precision products cost half
#: (docs/FINITE_LR.md §3). The state is summed, the words at the output times measured and the drift's spectral radius
#: estimated (`_NoisySteps._stiff_step`) in double.
NOISE_PRECISION = np.float32
#: While the growth step is below this fraction of the stiff one, ρ is estimated every `RHO_EVERY_FAR` steps only.
FAR_FROM_STIFF = 0.25
RHO_EVERY_FAR = 100
#: The noise coefficients N1, N2 (E[∇ℓ∇ℓᵀ], the costly part of a softmax's coefficients) are computed again once t
#: has moved by this fraction of (t − t₀ + t_s) since they were last; in between they are held, times κ(t)/κ(then).
NOISE_REFRESH = 0.02


class _NoisySteps:
    """The stochastic matrix model's state and its stepping (`run_stochastic`).

    One step of size h from X_n: ``X_{n+1} = X_n + h v(X_n) + (G_n + G_{n+1}) / 2`` with ``G_{n+1} =
    noise_increments(X_n, dH)`` for a fresh increment dH over h — the Leimkuhler–Matthews splitting of the noise. Each
    increment is applied half in the step that draws it and half in the next, always at the state it was drawn at (so
    no Itô correction: the increment is independent of the state that multiplies it). On a linear mode of rate λ
    the stationary variance is then exact for every hλ < 2, where Euler–Maruyama's is off by hλ/2 and Heun's drift
    with the noise at the step's start by ≈ hλ; the drift is first order (`STEP_GROWTH`), the noise weak order 1.
    The steps between two output times are equal, and under a schedule each increment carries κ's mean over the
    window its two halves act in (`advance_to`). One evaluation of the coefficients per step, plus the power
    method's."""

    def __init__(self, model, layout, source, sigma, seed, t0, t_end):
        self.model, self.layout, self.source, self.definition = model, layout, source, model.definition
        self.fast = layout.in_precision(NOISE_PRECISION)  # the layout the drift and the increments are evaluated on
        self.words, self.read = list(source.words), _FixedWordsOnce(_trace_reader(model), layout.fixed_codes)
        self.precise_read = _FixedWordsOnce(_trace_reader(model), layout.fixed_codes)  # in double: `_drift`, outputs
        self.root = None if sigma is None else frozen(_symmetric_root(np.asarray(sigma, float)).astype(NOISE_PRECISION))
        self.rng = np.random.default_rng(seed)
        self.rho_sgd = self.definition.steps_per_time(1.0, 1.0)
        self.n = self.definition.matrices.dimension(layout.factors[0])
        self.trainable = [k - 1 for k in model.trainable]
        self.vector, self.t, self.t0, self.state = layout.pack(layout.factors), float(t0), float(t0), source.state
        self.t_end = float(t_end)  # the run's last output time: κ is read up to it (`_split_kappa`)
        self._measure()
        self.pending, self.noise, self.direction = None, None, None
        self.radius, self.since_radius, self.count, self.evaluations = None, RHO_EVERY, 0, 0
        drift = self._drift(self.vector, noise=False, known=(self.letters, self.mu))
        size, speed = np.linalg.norm(self.vector), np.linalg.norm(drift)
        self.t_s = size / speed if speed > 0 else 1.0

    def factors(self):
        """The current factors (a copy)."""
        return self.layout.unpack(self.vector.copy())

    def _measure(self):
        """The current state's letter matrices (in `NOISE_PRECISION`) and the moments the source reads."""
        self.letters = self.fast.letters(self.fast.unpack(self.vector))
        self.mu = self.read(self.words, self.letters)

    def _drift(self, vector, noise, known=None, precise=False):
        """v(X) at ``vector`` (``known``: its (letters, moments), when measured) at the current t and state, evaluated
        in `NOISE_PRECISION` (``precise``: in double); with ``noise`` also the arrays (their κ(t)N1, κ(t)N2 computed
        afresh)."""
        layout, read = (self.layout, self.precise_read) if precise else (self.fast, self.read)
        current = layout.unpack(vector)
        letters, mu = known or (layout.letters(current), None)
        mu = read(self.words, letters) if mu is None else mu
        arrays = self.source.coefficients(mu, noise=noise, t=self.t, state=self.state)
        self.evaluations += 1
        cast = arrays if precise else _in_precision(arrays, layout.dtype)
        velocity = layout.pack(self.definition.matrices.factor_velocities(self.model, current, cast, letters))
        return (velocity, arrays) if noise else velocity

    def _scale(self):
        """t − t₀ + t_s: the time scale the step and the noise refresh follow."""
        return self.t - self.t0 + self.t_s

    def _velocity_and_noise(self):
        """v(X_n), and the roots of the unit noise coefficients (N1, N2)/κ refreshed per `NOISE_REFRESH`."""
        kappa = self.source.kappa_at(self.t)
        stale = self.noise is None or self.t - self.noise[0] >= NOISE_REFRESH * (self.noise[0] - self.t0 + self.t_s)
        if not (stale and kappa > 0):
            return self._drift(self.vector, noise=False, known=(self.letters, self.mu)), kappa
        velocity, arrays = self._drift(self.vector, noise=True, known=(self.letters, self.mu))
        rows = np.ix_(self.trainable, self.trainable)  # a fixed index's noise moves nothing: its marginal is left out
        unit = [arrays[name][rows] / kappa for name in ("N1", "N2")]
        self.noise = (self.t, _noise_roots(*unit, not self.definition.matrices.symmetric_noise))
        return velocity, kappa

    def _stiff_step(self, growth):
        """`STIFF_STEP` / ρ, ρ estimated again every `RHO_EVERY` steps — every `RHO_EVERY_FAR` while the ``growth``
        step is below `FAR_FROM_STIFF` of it (ρ would have to grow 6× in between to make a step unstable) — by the
        power method on the drift evaluated in double precision."""
        far = self.radius is not None and growth * self.radius < FAR_FROM_STIFF * STIFF_STEP
        if self.since_radius >= (RHO_EVERY_FAR if far else RHO_EVERY):
            # in double: differenced in single precision, the estimate missed its convergence test at n = 200 (Haar)
            # and the run's evaluations doubled
            drift = partial(self._drift, noise=False, precise=True)
            rho, self.direction = power_radius(drift, self.vector, drift(self.vector), self.direction)
            self.radius, self.since_radius = RHO_SAFETY * rho, 0
        self.since_radius += 1
        return STIFF_STEP / self.radius if self.radius > 0 else np.inf

    def _increment(self, kappa, h):
        """G = noise_increments(X_n, dH) for a fresh dH over h (zero while κ(t) = 0 or before any noise)."""
        if kappa <= 0 or self.noise is None:
            return np.zeros_like(self.vector)
        scale = np.sqrt(kappa * self.rho_sgd * h / self.n)
        drawn = _draw_noise(self.noise[1], self.n, scale, self.rng, dtype=NOISE_PRECISION)
        if self.root is not None:
            drawn = [sandwich(self.root, x) for x in drawn]  # Σ^{1/2} H Σ^{1/2}: a scaling for a diagonal Σ, O(n²)
        H = [None] * self.model.K
        for k, x in zip(self.trainable, drawn):
            H[k] = x
        factors = self.fast.unpack(self.vector)
        return self.fast.pack(self.definition.matrices.noise_increments(self.model, factors, H))

    def advance_to(self, end):
        """Step to time ``end`` exactly, in equal steps: at each step the time left is cut into as many steps as the
        largest allowed one needs (equal unless that limit moves within the interval). A last step shorter or longer
        than the others would leave the recorded state off its stationary law: its half of a fresh increment and the
        pending half of the one before no longer balance (on a linear mode of rate λ a last step h' after steps h
        moves the variance by 2λ(h − h')(3/4 − λh'/2) of itself, +55 % at hλ = 1.25, h' = h/2; `_equal_steps`). Each
        increment carries κ's mean over the half-step-shifted window it acts in (`_split_kappa`)."""
        while self.t < end:
            velocity, kappa = self._velocity_and_noise()
            growth = STEP_GROWTH * self._scale()
            h, last = _equal_steps(end - self.t, min(growth, self._stiff_step(growth)))
            fresh = self._increment(
                _split_kappa(self.source.kappa_at, self.t, h, self.t_end) if kappa > 0 else kappa, h
            )
            pending = fresh if self.pending is None else self.pending
            self.vector = self.vector + h * velocity + 0.5 * (pending + fresh)
            self.pending, self.t, self.count = fresh, end if last else self.t + h, self.count + 1
            if not np.all(np.isfinite(self.vector)):
                raise FloatingPointError(f"the stochastic matrix model met a non-finite state at t ≈ {self.t:.4g}")
            self._measure()
            self.state = self.source.advanced(self.mu, self.state)


def _split_kappa(kappa_at, t, h, end):
    """The κ an increment drawn over the step [t, t + h] carries: κ's mean (Simpson's rule) over [t + h/2, t + 3h/2],
    read at ``end`` (the run's last output time) past it — not at the next output time, across which the increment's
    second half acts on. The increment is applied half in this step and half in the next, so its noise acts on
    average half a step late; centred there, the two halves that make each step's noise carry κ's mean over that
    step. With κ read at the step's start instead, a falling κ (a schedule's decay) left too much noise behind: on a
    linear mode with κ ∝ e^{−t/τ}, h = τ/5, +9 to +11 % on the variance (κ's mean over the step itself: +4 to +5 %;
    this: −1.3 to +0.2 %, `tests/setting/test_stochastic_model.py`)."""
    return sum(w * kappa_at(min(t + x * h, end)) for w, x in ((1, 0.5), (4, 1.0), (1, 1.5))) / 6


def _equal_steps(left, largest):
    """(the step, whether it is the last) that cuts the time ``left`` into the fewest equal steps of at most
    ``largest``."""
    count = max(1, int(np.ceil(left / largest * (1 - 1e-12))))
    return left / count, count == 1


def _symmetric_root(sigma):
    """Σ^{1/2}, the symmetric root (diagonal for a diagonal Σ) that the noise matrices are sandwiched with: Σ^{1/2} H
    Σ^{1/2} has the covariance κN1 Σ⊗Σ + κN2 with the swap. (`psd_root`'s V√w is a root too, but R H R with a root that
    is not symmetric has another covariance — for a dense Σ from a file.)"""
    diagonal = diagonal_of(sigma)
    if diagonal is not None:
        return np.diag(np.sqrt(np.clip(diagonal, 0.0, None)))
    w, V = np.linalg.eigh(0.5 * (sigma + sigma.T))
    return (V * np.sqrt(np.clip(w, 0.0, None))) @ V.T


def _noise_matrices(N1, N2, d, scale, rng, antisymmetric=True, draw=None):
    """Random d × d matrices H_k with ``E[H_k,ab H_l,cd] = scale² (N1_kl δ_ac δ_bd + N2_kl δ_ad δ_bc)``:
    ``H_k = scale (Σ_m P_km Sym_m + Σ_m R_km Anti_m)`` with P Pᵀ = (N1 + N2)/2, R Rᵀ = (N1 − N2)/2 (both
    PSD) and Sym, Anti the symmetric and antisymmetric parts (·√2) of independent matrices of iid entries of mean 0
    and variance 1 (``draw(rng, shape, dtype)``; default `_signs`), in double precision. Without ``antisymmetric``
    the Anti part is left out: the same law of H + Hᵀ, for a kind that reads only that."""
    return _draw_noise(_noise_roots(N1, N2, antisymmetric), d, scale, rng, draw)


def _noise_roots(N1, N2, antisymmetric=True):
    """[(+1, P), (−1, R)] of `_noise_matrices` (only (+1, P) without ``antisymmetric``): the part of a draw that
    depends on the coefficients, computed once per refresh of them."""
    return [(sign, psd_root(0.5 * (N1 + sign * N2))) for sign in ((1, -1) if antisymmetric else (1,))]


def _draw_noise(roots, d, scale, rng, draw=None, dtype=float):
    """The matrices of `_noise_matrices` from its ``roots`` (`_noise_roots`), of ``dtype`` (``draw`` the default
    `_signs`)."""
    out = 0.0
    for sign, P in roots:
        Z = (draw or _signs)(rng, (P.shape[1], d, d), dtype)
        out = out + np.einsum("km,mab->kab", (P * (scale / np.sqrt(2))).astype(dtype), Z + sign * Z.transpose(0, 2, 1))
    return list(out)


def _signs(rng, shape, dtype=float):
    """Independent ±1 of ``shape``, each with probability ½: the two-point increments that a weak first-order scheme
    may take instead of Gaussian ones (Kloeden & Platen 1992, §14.1: the first three moments are the same, and the
    normalised traces of an n × n noise matrix feel its entries' fourth moment only at O(1/n)); a ninth of the cost
    of Gaussian draws (0.04 against 0.38 ms for 200 × 200)."""
    count = math.prod(shape)
    bits = np.unpackbits(rng.integers(0, 256, (count + 7) // 8, dtype=np.uint8), count=count)
    return (2 * bits.astype(dtype) - 1).reshape(shape)


def letter_velocities(model, factors, coefficients, sigma=None):
    """d/dt of the letter matrices (code order; Σ's, last with ``sigma``, is 0) under the matrix flow with
    ``coefficients`` (family arrays and ``gamma``): letters are quadratic in the factors, so the central difference
    with step 1 along the factor velocities is exact (to rounding)."""
    definition = model.definition
    velocities = definition.matrices.factor_velocities(
        model, factors, coefficients, definition.matrices.letter_matrices(factors, sigma)
    )

    def moved(sign):
        return definition.matrices.letter_matrices([shifted(f, v, sign) for f, v in zip(factors, velocities)], sigma)

    return [(plus - minus) / 2 for plus, minus in zip(moved(1), moved(-1))]
