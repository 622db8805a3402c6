"""Closures of the moment hierarchy: how the words beyond the state are supplied (MATH.md §6, §8).

A closure turns a configuration into a trajectory of the observables on the model's time
axis with an honest validity horizon and error estimate. Contract of a closure class:

1. ``name``: the value of ``[truncation] closure`` (and of ``--closure``) that selects it;
2. ``solve(config, degree=None, size=None, factors=None)`` returns the JSON-ready dict of
   the ``solve`` command (``factors``: finite-d matrices to start from instead of the d = ∞
   law — MATH.md §7, for comparing with the one run that starts from them): ``t``, ``series`` (canonical word → values), ``derived``, ``status``,
   ``valid_until``, ``message``, plus ``closure`` and ``error_estimate``;
3. the estimate compares two resolutions of the same closure (zero: degrees M and M − 2;
   quadrature: orders n and n − 1; matrix model: sizes n and n/2).

* ``zero`` — the paper's Π_M: words beyond degree M are 0. Exactly the Taylor polynomial in
  time when the coefficients are constant, so valid only inside a short window.
* ``matrix-model`` — evolve n × n matrices with the exact matrix flow, started from
  deterministic matrices that follow the d = ∞ initial law (`momentgen.initial.law_factors`:
  spectra at quantiles, Haar rotations between free indices), coefficients from the
  matrices' own moments. A realisable state, so it cannot blow up; error O(1/n).
* ``quadrature`` — the non-commutative QMOM: the truncated GNS representation of the initial
  moments (`momentgen.representation`, exact to degree M) evolved by the same flow, words
  read from its state vector. Also realisable (it cannot blow up); for one trainable letter
  and a scalar teacher it is Gauss quadrature on the spectrum, nodes moving with the flow.
"""

import time

import numpy as np

from .errors import ModelError

__all__ = ["Closure", "ZeroClosure", "QuadratureClosure", "MatrixModelClosure", "CLOSURES", "solve_with_closure"]


class Closure:
    """Base class: see the module docstring for the contract."""

    name = None

    def solve(self, config, degree=None, size=None, factors=None):
        raise NotImplementedError


class ZeroClosure(Closure):
    name = "zero"

    def solve(self, config, degree=None, size=None, factors=None):
        from .integrate import solve_config

        out = solve_config(config, degree, factors=factors)
        out["closure"] = self.name
        return out


class _FlowClosure(Closure):
    """A closure that evolves a realisable matrix state by the flow at two resolutions.

    Subclasses give ``resolutions(config, degree, size)`` → (fine, coarse) and
    ``run(config, resolution, potential, times, words, means, factors)`` → `SimulationResult`.
    The estimate is the fine–coarse difference, relative to max(1, |μ|) like the zero
    closure's; ``valid_until`` is the first time it exceeds ``[integrate] validity_tol``.
    """

    def solve(self, config, degree=None, size=None, factors=None):
        from .integrate import SolveResult, _to_json, last_time_within
        from .matrices import untied_means
        from .simulate import _reported

        model, integrate = config.model, config.section("integrate")
        potential = config.potential()
        means = config.initial_means() if factors is None or model.kind != "untied" else untied_means(factors)
        times = np.linspace(0.0, integrate["T"], integrate["points"])
        words = _reported(config)
        fine_size, coarse_size = self.resolutions(config, degree, size)
        start = time.perf_counter()
        fast = _fast_phase(config, potential, means, factors) if model.kind == "untied" else {}
        means = fast.get("m_star", means)  # the slow phase starts on the slaved branch the fast phase reached
        fine, coarse = (self.run(config, resolution, potential, times, words, means, factors)
                        for resolution in (fine_size, coarse_size))  # fmt: skip
        difference = np.max([np.abs(fine.series[w] - coarse.series[w]) / np.maximum(1.0, np.abs(fine.series[w]))
                             for w in words], axis=0)  # fmt: skip
        y = np.array([fine.series[w] for w in words]).T
        result = SolveResult(fine.t, y, words, "ok", self.describe(fine_size, coarse_size), float(fine.t[-1]),
                             model.time_scale, degree, "DOP853", fine.info.get("nfev", 0),
                             time.perf_counter() - start)  # fmt: skip
        result.valid_until = last_time_within(fine.t, difference, integrate["validity_tol"])
        out = _to_json(result, words, config)
        out.update(fast)
        out.update(closure=self.name, size=fine_size, error_estimate=float(difference.max()),
                   error_series={"estimate": difference.tolist(), **fine.info.get("error_series", {})})  # fmt: skip
        return out


def _fast_phase(config, potential, means, factors):
    """Untied fast phase on t = nη from the initial moments (exact to degree 2 in every closure)."""
    from .hierarchy import build
    from .initial import empirical_moments, exact_moments
    from .truncation import Truncation

    program = build(config.model, 2, [])
    y0 = (exact_moments(config.model, config.inits(), program.word_codes) if factors is None
          else empirical_moments(config.model, factors, program.word_codes))  # fmt: skip
    truncation = Truncation(program, potential, config.section("model")["gamma"], means=means)
    times, m = truncation.fast_phase(y0, config.section("integrate")["fast_T"])
    return {"fast_t": times.tolist(), "fast_m": m.tolist(), "m_star": truncation.m.tolist()}


class MatrixModelClosure(_FlowClosure):
    name = "matrix-model"

    def resolutions(self, config, degree, size):
        n = size or config.section("truncation")["size"]
        return n, max(2, n // 2)

    def describe(self, fine, coarse):
        return f"matrix model of size {fine} (estimate from n = {fine} and {coarse})"

    def run(self, config, size, potential, times, words, means, factors):
        from .initial import law_factors
        from .simulate import matrix_flow

        if factors is not None:
            raise ModelError("the matrix-model closure starts from the d = ∞ law; for given matrices run their "
                             "matrix flow (`momentgen.simulate.matrix_flow`)")  # fmt: skip
        factors = law_factors(config.model, config.inits(), size, seed=0)
        return matrix_flow(config.model, potential, factors, times=times, words=words,
                           gamma=config.section("model")["gamma"], means=means)  # fmt: skip


class QuadratureClosure(_FlowClosure):
    """Truncated GNS representation of order n = ⌊(M − 1)/2⌋ (exact to degree M at t = 0).

    Also reports ``error_series["traciality_defect"]``: max over letter pairs of
    ``|⟨e₀, X X Y e₀⟩ − ⟨e₀, X Y X e₀⟩|`` for X a trainable letter — zero for a tracial state,
    free to compute, and it tracks the error once the representation is strained.
    """

    name = "quadrature"

    def resolutions(self, config, degree, size):
        M = degree or config.section("truncation")["degree"]
        n = (M - 1) // 2
        if n < 1:
            raise ModelError(f"the quadrature closure needs degree M ≥ 3 (order n = ⌊(M − 1)/2⌋ ≥ 1), got M = {M}")
        return n, n - 1

    def describe(self, fine, coarse):
        return f"quadrature closure of order n = {fine} (estimate from n = {fine} and {coarse})"

    def solve(self, config, degree=None, size=None, factors=None):
        if config.model.kind == "direct":
            out = ZeroClosure().solve(config, degree, factors=factors)
            out["message"] = "the direct model's hierarchy is closed: solved exactly (no closure needed)"
            return out
        return super().solve(config, degree, size, factors)

    def run(self, config, n, potential, times, words, means, factors):
        from .flow import driving_letters
        from .representation import initial_representation, letter_parts, matrix_moments
        from .simulate import matrix_flow
        from .words import parse

        model = config.model
        oracle = None if factors is None else matrix_moments(model, factors)
        read = {c for w in words if len(w.split()) > 1 for c in parse(w, model.kind, model.K)}
        generators = set(driving_letters(model)) | read  # letters read only alone ride along
        representation = initial_representation(model, config.inits(), n, oracle, generators=generators)
        pairs = traciality_pairs(model)
        probes = [w for x, y in pairs for w in ((x, x, y), (x, y, x))]
        run = matrix_flow(model, potential, letter_parts(model.kind, representation), times=times, words=words,
                          gamma=config.section("model")["gamma"], means=means, letters=True, probes=probes)  # fmt: skip
        values = run.info.pop("probes")
        defect = np.abs(values[:, 0::2] - values[:, 1::2]).max(axis=1)
        run.info["error_series"] = {"traciality_defect": defect.tolist()}
        return run


def traciality_pairs(model):
    """Letter pairs (X, Y) whose defect ⟨XXY⟩ − ⟨XYX⟩ is watched: X trainable, Y any other letter."""
    a = model.alphabet
    trainable = [c for c in range(a.size) if a.index(c) in model.trainable and a.transpose[c] >= c]
    return [(x, y) for x in trainable for y in range(a.size) if y != x]


CLOSURES = {cls.name: cls for cls in (ZeroClosure, QuadratureClosure, MatrixModelClosure)}


def solve_with_closure(config, closure=None, degree=None, size=None, factors=None):
    """Solve ``config`` with the named closure (default: ``[truncation] closure``); ``factors``:
    start from these finite-d matrices' moments instead of the d = ∞ initial law."""
    name = closure or config.section("truncation")["closure"]
    if name not in CLOSURES:
        raise ModelError(f"unknown closure {name!r}: choose one of {', '.join(CLOSURES)}")
    return CLOSURES[name]().solve(config, degree=degree, size=size, factors=factors)
