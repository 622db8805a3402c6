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
  run; and ``errors``: the exception classes that mean "this state cannot be passed" (a status, not a crash).

The engine knows nothing of Φ: the theory passes a source built from its potential
(`momentgen.compiler.truncation.CoefficientSource`), and the reference side's finite-d matrix flow
(`momentgen.reference.matrix_flow`) receives one from its caller. Moments are read as ``(1/d) Tr``
(finite matrices) or, with the reader the caller passes, from the state vector ``⟨e₀, X⋯X e₀⟩``
of a GNS representation. Time is on the kind's axis.

`run_stochastic` is the same flow with the SGD noise of a finite learning rate added as an Itô
SDE on the factors (the stochastic matrix model of docs/FINITE_LR.md): its normalised traces
follow the hierarchy with the finite-learning-rate term up to O(1/n).
"""

from dataclasses import dataclass, field

import numpy as np

from ..core.stepper import DENSE_JACOBIAN_MAX, integrate
from ..core.trajectory import Moments
from ..laws.commuting import Diagonal, diagonal_state
from ..models.base import psd_root, sandwich, shifted
from .matrices import trace_moments
from .spectra import product_matrix

__all__ = [
    "FlowRun",
    "run",
    "run_stochastic",
    "letter_velocities",
    "CHEBYSHEV",
    "CHEBYSHEV_ERROR",
    "CHEBYSHEV_DRAWS",
    "CHEBYSHEV_DRAWS_ERROR",
]

#: The stabilised explicit stepper for a dense law-based matrix model (`momentgen.core.chebyshev`): its steps follow
#: the accuracy wanted, not the fastest rate. At this tolerance, on a Gaussian student against a power-law Σ (tied,
#: a = 2, t ≤ 50, n = 100), it is 3e-5 relative off DOP853 at 1e-9 on the risk in 1 400 evaluations where DOP853
#: takes 7 500, and the spectrum of the exactly solvable case at n = 400 is DOP853's to 1e-6 in Kolmogorov distance.
CHEBYSHEV = {"method": "RKC", "rtol": 1e-5, "atol": 1e-8}
#: What a closure adds to its estimate for that stepper's error: 3× the measured 3e-5.
CHEBYSHEV_ERROR = 1e-4
#: The stepper of an ensemble's draws, whose own spread is 1e-2: looser — 3.1e-4 / 2.1e-4 relative off DOP853 on the
#: risk of the same case at n = 32 / 64 in 690–720 evaluations (DOP853: 7 200–7 400); the spectrum of the solvable
#: case at n = 400 moves by 3e-3 in Kolmogorov distance at this tolerance, which a single draw could not afford.
CHEBYSHEV_DRAWS = {"method": "RKC", "rtol": 3e-4, "atol": 3e-7}
#: What an ensemble's estimate carries for it: 3× the measured 3.1e-4.
CHEBYSHEV_DRAWS_ERROR = 1e-3

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
    `letters` of a state, a fixed index's computed once (untied teacher: 3 of 10 products a step).
    Matrices are held as given (m × m arrays) or, in `held_by`, by their diagonals in a commuting state's basis."""

    def __init__(self, model, factors, sigma=None, fixed=None):
        self.model = model
        self.sigma = [] if sigma is None else [np.asanyarray(sigma, dtype=float)]
        self.trainable = [k - 1 for k in model.trainable]
        self.grouped = isinstance(factors[0], tuple)
        self.factors = [tuple(np.array(f, subok=True) for f in x) if self.grouped else np.array(x, subok=True)
                        for x in factors]  # fmt: skip
        self.shapes = [[f.shape for f in self.parts(k)] for k in range(len(self.factors))]
        self.index_letters = model.definition.matrices.index_letters
        self.fixed = fixed or {k: self.index_letters(f) for k, f in enumerate(self.factors) if k not in self.trainable}
        self.held = type(self.factors[self.trainable[0]] if not self.grouped else self.factors[self.trainable[0]][0])

    def parts(self, k):
        """The matrices of index k's factor (one, or the untied (U, V))."""
        return self.factors[k] if self.grouped else (self.factors[k],)

    @property
    def size(self):
        """Length of the flat vector."""
        return sum(int(np.prod(shape)) for k in self.trainable for shape in self.shapes[k])

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
            for shape in self.shapes[k]:
                size = int(np.prod(shape))
                parts.append(vector[offset : offset + size].reshape(shape).view(self.held))
                offset += size
            out[k] = tuple(parts) if self.grouped else parts[0]
        return out

    def pack(self, items):
        return np.concatenate(
            [np.ravel(p) for k in self.trainable for p in (items[k] if self.grouped else (items[k],))]
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


def _velocity(model, layout, source, read):
    """The packed factor velocity of ``layout``'s state: a function of (packed vector, time t, the run's state)."""
    definition, words = model.definition, list(source.words)

    def velocity(vector, t, state):
        current = layout.unpack(vector)
        letters = layout.letters(current)
        coefficients = source.coefficients(read(words, letters), t=t, state=state)
        return layout.pack(definition.matrices.factor_velocities(model, current, coefficients, letters))

    return velocity


def _diagonal_layout(model, dense, source, read):
    """(the layout held by its diagonals, the `DiagonalState`) when every matrix of ``dense`` is diagonal in one
    basis and the kind's velocity, evaluated on the diagonals, is the dense one at the start (to 1e-9 of its
    size: a velocity that is not a matrix expression of the letters fails it); else (``dense``, None)."""
    state = diagonal_state(dense.commuting_matrices(), read)  # None unless all are square and diagonal in one basis
    if state is None:
        return dense, None
    held = dense.held_by(state)
    exact = _velocity(model, dense, source, read)(dense.pack(dense.factors), 0.0, source.state)
    try:
        on_diagonals = _velocity(model, held, source, state.moments)(held.pack(held.factors), 0.0, source.state)
    except (ValueError, TypeError, IndexError):  # an operation a matrix held by its diagonal does not have
        return dense, None
    if on_diagonals.shape != (held.size,):
        return dense, None
    moved = held.unpack(on_diagonals)
    mapped = dense.pack([tuple(state.matrix(p) for p in x) if held.grouped else state.matrix(x) for x in moved])
    if np.abs(mapped - exact).max(initial=0.0) > 1e-9 * max(np.abs(exact).max(initial=0.0), 1e-300):
        return dense, None
    return held, state


def run(
    model,
    factors,
    source,
    *,
    times,
    codes,
    texts=None,
    read=trace_moments,
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
    `momentgen.setting.matrices.trace_moments` (default) or a state-vector reader. ``spectra``: (function, {name:
    product codes}) — the spectral measure of each product at every output time, by ``function``
    (`momentgen.setting.spectra.trace_spectrum` or ``vector_spectrum``), in ``info["spectra"]``. ``sigma``: the data
    covariance Σ (a fixed letter, last in code order) of a model with one. A state that is not commuting is
    stepped by DOP853 at ``rtol``, ``atol``, or by ``dense_stepper``'s method at its tolerances (`CHEBYSHEV`). Returns a
    `FlowRun`; a state the source cannot pass ends the run with a status.

    A commuting state (every matrix diagonal in one basis: `momentgen.laws.commuting`) is integrated by its diagonals
    with BDF (its Jacobian by differences, dense), which steps over the converged directions' fast rates: a long
    horizon costs about its number of decades (its tolerances `BDF_TIGHTER` times tighter). Any other state by
    DOP853 or ``dense_stepper``. ``info["method"]`` says which."""
    layout, state = _diagonal_layout(model, _Layout(model, factors, sigma), source, read)
    reader = read if state is None else state.moments
    method = "BDF" if state is not None and layout.size <= DENSE_JACOBIAN_MAX else "DOP853"
    if method == "DOP853" and dense_stepper is not None:
        method, rtol, atol = dense_stepper["method"], dense_stepper["rtol"], dense_stepper["atol"]
    if method == "BDF":  # its global error is ~10× its rtol (solvable case: 9e-9 at 1e-9, 2.4e-9 = DOP853's at 1e-11)
        rtol, atol = rtol / BDF_TIGHTER, atol / BDF_TIGHTER
    current, evaluate = [source.state], _velocity(model, layout, source, reader)

    def velocity(t, vector):
        return evaluate(vector, t, current[0])

    def advance(t, vector):
        current[0] = source.advanced(reader(list(source.words), layout.letters(layout.unpack(vector))), current[0])

    result = integrate(
        velocity,
        layout.pack(layout.factors),
        np.asarray(times, dtype=float),
        method=method,
        rtol=rtol,
        atol=atol,
        on_step=advance,
        recoverable=tuple(source.errors),
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


def run_stochastic(model, factors, source, *, times, codes, texts=None, dt=2e-3, seed=0, sigma=None):
    """The stochastic matrix model of the finite-learning-rate term (docs/FINITE_LR.md) on ``times``.

    The Itô SDE ``dF = v(F) dt + noise_increments(F, dH)`` on the factors (d × d), with Gaussian
    increments of the per-index noise matrices ``E[dH_k,ab dH_l,cd] = (ρ dt/d) (κN1_kl δ_ac δ_bd +
    κN2_kl δ_ad δ_bc)``, ρ the kind's SGD steps per unit time times η/d (tied ¼, others 1), and
    κN1, κN2 from the source (a `momentgen.compiler.truncation.CoefficientSource` built with κ): the
    continuous-time limit of online SGD's minibatch noise, which the normalised traces feel only
    through the Itô terms of the hierarchy, self-averaging at O(1/d). Fixed steps of at most
    ``dt`` (on the kind's axis): Heun for the drift, Euler–Maruyama for the noise (weak order 1:
    a bias O(κ dt)). ``seed`` fixes the noise. ``sigma``: the data covariance Σ (a fixed letter; the noise
    matrices become Σ^{1/2} H Σ^{1/2}, covariance κN1 Σ⊗Σ + κN2 with the swap, MATH.md §10). A state the source
    cannot pass, or a non-finite one, ends the run with a status."""
    definition, layout, source_words = model.definition, _Layout(model, factors, sigma), list(source.words)
    root = None if sigma is None else psd_root(np.asarray(sigma, float))
    rng = np.random.default_rng(seed)
    rho = definition.steps_per_time(1.0, 1.0)
    d = definition.matrices.dimension(layout.factors[0])
    times = np.asarray(times, dtype=float)
    state = source.state

    def drift(vector, t, noise=True):
        current = layout.unpack(vector)
        letters = layout.letters(current)
        arrays = source.coefficients(trace_moments(source_words, letters), noise=noise, t=t, state=state)
        return layout.pack(definition.matrices.factor_velocities(model, current, arrays, letters)), arrays

    def noise(vector, arrays, h):
        H = _noise_matrices(arrays["N1"], arrays["N2"], d, np.sqrt(rho * h / d), rng)
        if root is not None:
            H = [sandwich(root, x) for x in H]  # Σ^{1/2} H Σ^{1/2}: a scaling for a diagonal Σ, O(d²)
        return layout.pack(definition.matrices.noise_increments(model, layout.unpack(vector), H))

    vector, states, reached, status, message, evaluations = layout.pack(layout.factors), [], [], "ok", "", 0
    states.append(layout.unpack(vector.copy()))
    reached.append(times[0])
    try:
        for start, end in zip(times[:-1], times[1:]):
            steps = max(1, int(np.ceil((end - start) / dt - 1e-9)))
            h = (end - start) / steps
            for i in range(steps):
                now = start + i * h
                velocity, arrays = drift(vector, now)
                predicted = vector + h * velocity
                corrected, _ = drift(predicted, now + h, noise=False)  # the noise is read at the step's start
                vector = vector + 0.5 * h * (velocity + corrected) + noise(vector, arrays, h)
                evaluations += 2
                if not np.all(np.isfinite(vector)):
                    raise FloatingPointError(f"the stochastic matrix model met a non-finite state at t ≈ {end:.4g}")
                state = source.advanced(trace_moments(source_words, layout.letters(layout.unpack(vector))), state)
            states.append(layout.unpack(vector.copy()))
            reached.append(end)
    except FloatingPointError as error:
        status, message = "blowup", str(error)
    except tuple(source.errors) as error:
        status, message = getattr(error, "status", "failed"), str(error)
    letters = [layout.letters(f) for f in states]
    return _measured(reached, letters, codes, texts, trace_moments, (), status, message, evaluations)


def _noise_matrices(N1, N2, d, scale, rng):
    """Gaussian d × d matrices H_k with ``E[H_k,ab H_l,cd] = scale² (N1_kl δ_ac δ_bd + N2_kl δ_ad δ_bc)``:
    ``H_k = scale (Σ_m P_km Sym_m + Σ_m R_km Anti_m)`` with P Pᵀ = (N1 + N2)/2, R Rᵀ = (N1 − N2)/2 (both
    PSD) and Sym, Anti the symmetric and antisymmetric parts (·√2) of independent iid matrices."""
    out = 0.0
    for sign in (1, -1):
        P = psd_root(0.5 * (N1 + sign * N2))
        Z = rng.standard_normal((P.shape[1], d, d))
        part = (Z + sign * Z.transpose(0, 2, 1)) / np.sqrt(2)
        out = out + np.einsum("km,mab->kab", P, part)
    return list(scale * out)


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
