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
    """A closure that evolves a realisable matrix state by the flow, on several *legs*.

    Subclasses give ``legs(config, degree, size, factors)`` → (label, {leg name: resolution}),
    the leg ``"fine"`` being the reported one, and ``run(config, resolution, potential, times,
    words, means, factors)`` → `SimulationResult` (or None when that resolution does not
    exist). The estimate at time t is the running maximum over [0, t] of the largest
    difference between the fine leg and any other, relative to max(1, |μ|), plus the flow's
    integration tolerance; ``valid_until`` is the first time it exceeds ``[integrate]
    validity_tol``. ``bounded(runs)`` says whether that estimate is a bound on the reference
    cases (else the status is ``"unverified"`` and the message says why).
    """

    tolerance = 1e-9  # rtol of the matrix flow: the floor of every estimate

    def solve(self, config, degree=None, size=None, factors=None):
        from .integrate import SolveResult, _to_json, audited, last_time_within
        from .matrices import untied_means
        from .simulate import _reported

        model, integrate = config.model, config.section("integrate")
        potential = config.potential()
        means = config.initial_means() if factors is None or model.kind != "untied" else untied_means(factors)
        times = np.linspace(0.0, integrate["T"], integrate["points"])
        words = _reported(config)
        label, legs = self.legs(config, degree, size, factors)
        start = time.perf_counter()
        fast = _fast_phase(config, potential, means, factors) if model.kind == "untied" else {}
        means = fast.get("m_star", means)  # the slow phase starts on the slaved branch the fast phase reached
        runs = audited(potential, lambda: {name: self.run(config, resolution, potential, times, words, means, factors)
                                           for name, resolution in legs.items()})  # fmt: skip
        runs = {name: run for name, run in runs.items() if run is not None}
        stopped = [run for run in runs.values() if run.info.get("status", "ok") != "ok"]
        reached = min(len(run.t) for run in runs.values())
        runs = {name: _trimmed(run, reached) for name, run in runs.items()}
        fine = runs["fine"]
        difference = np.zeros(len(fine.t))
        for name, run in runs.items():
            for w in words:
                gap = np.abs(fine.series[w] - run.series[w]) / np.maximum(1.0, np.abs(fine.series[w]))
                difference = np.maximum(difference, gap)
        estimate = np.maximum.accumulate(difference) + self.tolerance
        bounded, why = self.bounded(runs)
        if bounded is None:  # nothing to compare with: no estimate at all, and no window
            estimate, bounded = np.full(len(fine.t), np.inf), False
        y = np.array([fine.series[w] for w in words]).T
        status = "ok" if bounded else "unverified"
        message = f"{label}; estimate: {why}"
        if stopped:  # a leg met a state it cannot go past: the run ends there, and says why
            status, message = stopped[0].info["status"], f"{label}: {stopped[0].info['message']}"
        result = SolveResult(fine.t, y, words, status, message, float(fine.t[-1]), model.time_scale, degree,
                             "DOP853", fine.info.get("nfev", 0), time.perf_counter() - start)  # fmt: skip
        result.valid_until = last_time_within(fine.t, estimate, integrate["validity_tol"])
        out = _to_json(result, words, config)
        out.update(fast)
        out.update(closure=self.name, size=legs["fine"][0] if isinstance(legs["fine"], tuple) else legs["fine"],
                   error_estimate=float(estimate[-1]) if np.isfinite(estimate[-1]) else None,
                   estimate_is_bound=bounded, estimate_legs=sorted(runs),
                   error_series={"estimate": [float(e) if np.isfinite(e) else None for e in estimate],
                                 **fine.info.get("error_series", {})},
                   potential=potential.accuracy_report())  # fmt: skip
        return out


def _trimmed(run, n):
    """The first ``n`` output times of a flow run (all legs end where the first one stopped)."""
    if len(run.t) == n:
        return run
    run.t = run.t[:n]
    run.series = {w: v[:n] for w, v in run.series.items()}
    run.info = {k: (v[:n] if isinstance(v, np.ndarray) and len(v) >= n else v) for k, v in run.info.items()}
    return run


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
    """n × n matrices that follow the d = ∞ initial law (`momentgen.initial.law_factors`), moved by
    the exact matrix flow; legs: sizes n and n/2. The estimate is not a bound: the quantile
    spectra converge at an uneven rate and the Haar mixing of free indices is random at O(1/n)
    (tied h2 case: n = 800 is 3.2e-3 from the exact curve where n vs 400 differ by 1.0e-3), so
    the status is ``"unverified"``. Given finite matrices (``factors``, or a from-file init) it
    is their own matrix flow: no closure, the exact solution of the hierarchy from their
    moments (estimate: the integration tolerance)."""

    name = "matrix-model"

    def legs(self, config, degree, size, factors):
        if factors is not None:
            d = (factors[0][0] if isinstance(factors[0], tuple) else factors[0]).shape[0]
            return f"matrix flow of the given d = {d} matrices (exact: no closure)", {"fine": ("given", 0)}
        n = size or config.section("truncation")["size"]
        return f"matrix model of size {n}", {"fine": (n, 0), "coarse": (max(2, n // 2), 0)}

    def bounded(self, runs):
        if set(runs) == {"fine"}:
            return True, "integration tolerance of the exact matrix flow"
        return False, ("difference of sizes n and n/2 — not a bound (quantile spectra and random Haar mixing "
                       "converge unevenly); cross-check with the quadrature closure")

    def run(self, config, resolution, potential, times, words, means, factors):
        from .initial import law_factors
        from .simulate import matrix_flow

        size, seed = resolution
        if size != "given":
            factors = law_factors(config.model, config.inits(), size, seed=seed)
        return matrix_flow(config.model, potential, factors, times=times, words=words,
                           gamma=config.section("model")["gamma"], means=means)  # fmt: skip


class QuadratureClosure(_FlowClosure):
    """Truncated GNS representation of order n = ⌊(M − 1)/2⌋ (exact to degree M at t = 0).

    Legs: the Gauss representation of order n (reported), its Gauss–Radau variant (a node fixed
    at each positive letter's lower spectral edge, the same moments to degree 2n:
    `momentgen.representation.free_product`) and order n − 1. The Gauss and Radau
    representations are the two principal representations of what order n knows; where the
    flow stretches an unresolved layer at a hard edge, the Gauss rule lets its node escape and
    the Radau rule holds it back, and the truth lies between (measured: the estimate is 1.8–5×
    the true error on the exactly solvable, tied h2 and fig. 1 cases, never below). Untied
    letters have no such variant: their estimate (n vs n − 1) is reported as not a bound.

    Also reports ``error_series["traciality_defect"]``: max over letter pairs of
    ``|⟨e₀, X X Y e₀⟩ − ⟨e₀, X Y X e₀⟩|`` for X a trainable letter — zero for a tracial state,
    free to compute, and it tracks the error once the representation is strained.
    """

    name = "quadrature"

    def legs(self, config, degree, size, factors):
        M = degree or config.section("truncation")["degree"]
        n = (M - 1) // 2
        if n < 1:
            raise ModelError(f"the quadrature closure needs degree M ≥ 3 (order n = ⌊(M − 1)/2⌋ ≥ 1), got M = {M}")
        legs = {"fine": (n, "gauss"), "radau": (n, "radau")}
        if n >= 2:
            legs["coarse"] = (n - 1, "gauss")
        return f"quadrature closure of order n = {n}", legs

    def bounded(self, runs):
        if "radau" in runs:
            return True, "largest difference to the Gauss–Radau variant and to order n − 1 (running maximum)"
        if "coarse" not in runs:
            return None, "none: order 1 has neither a Gauss–Radau variant (untied letters) nor an order 0 to compare"
        return False, ("difference of orders n and n − 1 only — not a bound (no Gauss–Radau variant for untied "
                       "letters); cross-check with the matrix-model closure")

    def solve(self, config, degree=None, size=None, factors=None):
        if config.model.kind == "direct":
            out = ZeroClosure().solve(config, degree, factors=factors)
            out["message"] = "the direct model's hierarchy is closed: solved exactly (no closure needed)"
            return out
        return super().solve(config, degree, size, factors)

    def run(self, config, resolution, potential, times, words, means, factors):
        from .flow import driving_letters
        from .representation import factor_parts, initial_representation, matrix_moments
        from .simulate import matrix_flow
        from .words import parse

        n, variant = resolution
        model = config.model
        oracle = None if factors is None else matrix_moments(model, factors)
        read = {c for w in words if len(w.split()) > 1 for c in parse(w, model.kind, model.K)}
        generators = set(driving_letters(model)) | read  # letters read only alone ride along
        representation = initial_representation(model, config.inits(), n, oracle, generators=generators,
                                                 variant=variant)  # fmt: skip
        if representation is None:
            return None
        pairs = traciality_pairs(model)
        probes = [w for x, y in pairs for w in ((x, x, y), (x, y, x))]
        run = matrix_flow(model, potential, factor_parts(model.kind, representation), times=times, words=words,
                          gamma=config.section("model")["gamma"], means=means, vector_state=True, probes=probes)  # fmt: skip
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
    if factors is None:
        factors = config.start_factors()  # a from-file init: its finite-d matrices are the state
    return CLOSURES[name]().solve(config, degree=degree, size=size, factors=factors)
