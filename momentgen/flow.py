"""The matrix flow engine: factors moved by their kind's matrix flow (MATH.md §3–§5).

`run` integrates the factors of one model (finite d × d matrices, or the compressed letters of
a quadrature state) with the velocities of the kind (`ModelKind.factor_velocities`), the
coefficients coming from a *source* — any object with

* ``words``: the code tuples whose moments the coefficients read (order parameters, …);
* ``coefficients(mu)``: the coefficient arrays (`ModelKind.coefficient_arrays`, plus ``gamma``)
  from those moments;
* ``track(mu)``: advance the explicit state of the run after an accepted step (the branch of
  the slaved mean); and ``errors``: the exception classes that mean "this state cannot be
  passed" (a status, not a crash).

The engine knows nothing of Φ: the theory passes a source built from its potential
(`momentgen.truncation.CoefficientSource`), and the reference side's finite-d matrix flow
(`momentgen.simulate.matrix_flow`) receives one from its caller. Moments are read as ``(1/d) Tr``
(finite matrices) or, with the reader the caller passes, from the state vector ``⟨e₀, X⋯X e₀⟩``
of a GNS representation. Time is on the kind's axis.
"""

from dataclasses import dataclass, field

import numpy as np

from .matrices import trace_moments
from .stepper import integrate

__all__ = ["FlowRun", "run", "letter_velocities", "driving_letters"]


@dataclass
class FlowRun:
    """Moments along a flow at the output times reached: ``t`` (n,), ``series`` (word → (n,)),
    ``probes`` (n, n_probes), the run's ``status``/``message`` and integrator counts."""

    t: np.ndarray
    series: dict
    probes: np.ndarray
    status: str
    message: str
    info: dict = field(default_factory=dict)


def run(model, factors, source, *, times, codes, texts=None, read=trace_moments, probes=(), rtol=1e-9, atol=1e-11):
    """Integrate ``factors`` of ``model`` on ``times`` and measure the words ``codes`` (code tuples,
    reported under ``texts``) and the ``probes`` (code tuples measured as they are — for a state
    that is not tracial their rotations differ). ``read(words, letters)`` measures moments:
    `momentgen.matrices.trace_moments` (default) or a state-vector reader. Returns a `FlowRun`; a
    state the source cannot pass ends the run with a status."""
    family, moments_of = model.family, read
    trainable = [k - 1 for k in model.trainable]
    grouped = isinstance(factors[0], tuple)
    factors = [tuple(np.array(f) for f in x) if grouped else np.array(x) for x in factors]
    shapes = [[f.shape for f in (x if grouped else (x,))] for x in factors]
    source_words = list(source.words)

    def unpack(vector):
        out, offset = list(factors), 0
        for k in trainable:
            parts = []
            for shape in shapes[k]:
                size = shape[0] * shape[1]
                parts.append(vector[offset : offset + size].reshape(shape))
                offset += size
            out[k] = tuple(parts) if grouped else parts[0]
        return out

    def pack(items):
        return np.concatenate([np.ravel(p) for k in trainable for p in (items[k] if grouped else (items[k],))])

    def order_parameters(vector):
        return moments_of(source_words, family.letter_matrices(unpack(vector)))

    def velocity(t, vector):
        current = unpack(vector)
        mu = moments_of(source_words, family.letter_matrices(current))
        return pack(family.factor_velocities(model, current, source.coefficients(mu)))

    result = integrate(velocity, pack(factors), np.asarray(times, dtype=float), method="DOP853", rtol=rtol, atol=atol,
                       on_step=lambda t, vector: source.track(order_parameters(vector)),
                       recoverable=tuple(source.errors))  # fmt: skip
    codes = list(codes)
    values = np.array([moments_of(codes + list(probes), family.letter_matrices(unpack(v))) for v in result.y])
    texts = [str(c) for c in codes] if texts is None else list(texts)
    series = {w: values[:, i] for i, w in enumerate(texts)}
    return FlowRun(result.t, series, values[:, len(codes) :], result.status, result.message, {"nfev": result.nfev})


def letter_velocities(model, factors, coefficients):
    """d/dt of the letter matrices (code order) under the matrix flow with ``coefficients`` (family
    arrays and ``gamma``): letters are quadratic in the factors, so the central difference with step 1
    along the factor velocities is exact (to rounding)."""
    family = model.family
    velocities = family.factor_velocities(model, factors, coefficients)

    def moved(sign):
        return family.letter_matrices([
            tuple(a + sign * b for a, b in zip(f, v)) if isinstance(f, tuple) else f + sign * v
            for f, v in zip(factors, velocities)
        ])  # fmt: skip

    return [(plus - minus) / 2 for plus, minus in zip(moved(1), moved(-1))]


def driving_letters(model):
    """Codes of the letters that enter the velocities (`ModelKind.driving_letters`)."""
    return model.family.driving_letters(model)
