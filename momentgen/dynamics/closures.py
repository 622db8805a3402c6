"""Closures of the moment hierarchy: how the words beyond the state are supplied (MATH.md §6, §8).

A closure turns a `momentgen.dynamics.problem.Problem` into a `momentgen.dynamics.results.Result`: a trajectory
of the reported words on the model's time axis, with an honest validity horizon and error
estimate. The declared interface (`Closure`):

1. ``name``: the value of ``[truncation] closure`` (and ``--closure``) that selects it;
   `CLOSURES` is the registry;
2. ``solve(problem, degree=None, size=None)`` → `Result` (``degree``/``size`` override the
   configuration's resolution);
3. its estimate compares resolutions of the same closure, and says whether it is a bound.

* ``zero`` — the paper's Π_M: words beyond degree M are 0. Exactly the Taylor polynomial in
  time when the coefficients are constant, so valid only inside a short window (degrees M and
  M − 2 agree). A closed hierarchy (the kind's `closed`) is exact.
* ``matrix-model`` — n × n matrices that follow the d = ∞ initial law
  (`momentgen.compiler.initial.law_factors`), moved by the matrix flow engine (`momentgen.setting.flow`) with
  the theory's coefficients from their own moments. Realisable, so it cannot blow up; O(1/n).
* ``quadrature`` — the non-commutative QMOM: the truncated GNS representation of the initial
  moments (`momentgen.compiler.initial.initial_representation`, exact to degree M) moved by the same
  engine in factor form, words read from its state vector.

The flow closures share `FlowClosure` (legs, the running estimate, statuses), and every run
is `audited` (the quadrature rule of Φ checked along the path).
"""

import time

import numpy as np

from ..compiler.hierarchy import build
from ..compiler.initial import initial_representation, law_factors, layered_index, matrix_moments
from ..compiler.truncation import RunState, Truncation
from ..core.errors import ModelError, shown
from ..core.parallel import check_n_jobs
from ..laws.edge import EDGE_DEPTH, EDGE_STEP
from ..laws.representation import vector_moments
from ..models.words import canonical
from ..setting.config import CLOSURES as CLOSURE_NAMES
from ..setting.flow import CHEBYSHEV
from ..setting.flow import run as run_flow
from ..setting.spectra import trace_spectrum, vector_spectrum
from .closure_base import (
    ERROR_SCALE,
    Closure,
    derived_columns,
    reported,
    risk_columns,
    short_and_phi_words,
    spectra_of,
    spectra_request,
    trainable_codes,
)
from .ensemble import MIN_DRAWS, run_ensembles
from .integrate import audited, last_time_within, solve, validity_horizon
from .problem import Problem
from .riccati import RiccatiClosure, outside_riccati
from .risk import relative_risk_estimate, theory_risk
from .stepper_check import stepper_error

__all__ = [
    "Closure",
    "FlowClosure",
    "ZeroClosure",
    "QuadratureClosure",
    "MatrixModelClosure",
    "CLOSURES",
    "solve_with_closure",
    "whole_curve_closure",
    "gives_way",
    "generic_sigma",
    "traciality_pairs",
]


class ZeroClosure(Closure):
    """Degrees M and M − 2 of the truncated hierarchy (words beyond the degree are 0)."""

    name = "zero"
    window_from_degrees = True
    companion = "quadrature"

    def label(self, config, degree=None):
        return f"M={config.settings.truncation.degree if degree is None else degree}"

    def solve(self, problem, degree=None, size=None):
        config, model = problem.config, problem.model
        integrate = problem.integrate
        M = config.settings.truncation.degree if degree is None else degree
        observables = config.settings.truncation.observables
        runs, fast, closed = {}, {}, False
        lowest = model.definition.state_degree(model)  # the words Φ reads: 2, or 4–5 with the letter Σ
        for m in [M] + ([M - 2] if M - 2 >= lowest else []):  # degree M first: an error names the degree asked for
            listed = observables if m == M or observables == "all" else [w for w in observables if len(w.split()) <= m]
            runs[m], fast_m, closed_m = self._degree(problem, m, listed)
            fast = fast or fast_m
            closed = closed_m if m == M else closed
        fine = runs[M]
        chosen = fine.words if observables == "all" else [canonical(w, model) for w in observables]
        words = list(dict.fromkeys(chosen + short_and_phi_words(model, fine.words)))
        series = {w: fine.series(w) for w in words}
        message = fine.message
        if closed:
            message = f"the {model.kind} model's hierarchy is closed: solved exactly (no closure needed); {message}"
        means = fast.get("m_star", problem.means)
        derived = derived_columns(problem, series, means)
        valid_until = validity_horizon(fine, runs.get(M - 2), words, integrate.validity_tol, closed)
        risk_window = (
            {"risk_valid_until": valid_until} if closed else self._risk_window(problem, runs, M, derived, means)
        )
        return reported(
            problem,
            self.result(
                problem,
                fine.t,
                fine.status,
                message,
                series=series,
                derived=derived,
                valid_until=valid_until,
                degree=M,
                potential=problem.potential.accuracy_report(),
                fast=fast,
                extra={
                    "method": fine.method,
                    "nfev": fine.nfev,
                    "seconds": fine.seconds,
                    "error_scale": ERROR_SCALE,
                    "closed": closed,
                    **risk_window,
                },
                config_hash=config.digest,
                kappa=problem.kappa,
            ),
        )

    def _risk_window(self, problem, runs, M, derived, means):
        """``{"risk_valid_until"}``: where the risks of degrees M and M − 2 agree to `momentgen.dynamics.risk.RISK_TOL`
        in relative terms (0 without degree M − 2)."""
        fine, coarse, others = runs[M], runs.get(M - 2), []
        if coarse is not None:
            n = min(len(fine.t), len(coarse.t))
            shared = {w: coarse.series(w)[:n] for w in short_and_phi_words(problem.model, coarse.words)}
            others.append(np.full(len(fine.t), np.nan))
            others[0][:n] = theory_risk(problem, shared, means)
        return risk_columns(fine.t, relative_risk_estimate(derived["risk"], others))[1]

    def _degree(self, problem, degree, observables):
        """One degree, audited: (`SolveResult`, the fast phase or {}, whether the program is closed)."""
        integrate = problem.integrate
        noise = problem.kappa > 0
        program = build(problem.model, degree, observables, max_bytes=problem.config.max_bytes, noise=noise)
        truncation = Truncation(
            program, problem.potential, problem.gamma, means=problem.means, kappa=problem.kappa,
            kappa_profile=problem.kappa_profile,
        )  # fmt: skip
        y0 = problem.initial_moments(program.word_codes)
        fast = truncation.mean.fast_phase(truncation, y0, integrate.fast_T)
        start = truncation.state.m  # a rerun starts on this branch, at the rule's level after the audit

        def run():
            return solve(
                truncation,
                y0,
                problem.times[-1],
                method=integrate.method,
                rtol=integrate.rtol,
                atol=integrate.atol,
                grid=problem.times,
            )

        def reset():
            truncation.state = RunState(start)

        return audited(problem.potential, run, reset=reset), fast, len(program.dropped_packed) == 0


class FlowClosure(Closure):
    """A closure that evolves a realisable matrix state by the flow engine, on several *legs*.

    Subclasses give ``legs(problem, degree, size)`` → (label, {leg name: resolution}), the leg
    ``"fine"`` being the reported one; ``run(problem, resolution, means)`` → `momentgen.setting.flow.FlowRun`
    (or None when that resolution does not exist); and ``bounded(problem, runs)`` → (True/False/None,
    why). The estimate at time t is the running maximum over [0, t] of the largest difference
    between the fine leg and any other (plus 3 standard errors when the fine leg is an ensemble:
    ``info["standard_error"]``), relative to max(1, |μ|), plus the flow's integration tolerance;
    ``valid_until`` is the first time it exceeds ``[integrate] validity_tol``. When the estimate
    is not a bound on the reference cases the status is ``"unverified"``; when there is no
    other leg there is no estimate (None) and no window.
    """

    tolerance = 1e-9  # rtol of the flow engine: the floor of every estimate

    def floor(self, problem, info, reached):
        """The integration error under every estimate on the first ``reached`` output times (a number or an array;
        ``info``: the reported leg's): the flow engine's tolerance."""
        return self.tolerance

    def run_legs(self, problem, legs, means):
        """{leg name: its run} (`run` of each resolution)."""
        return {name: self.run(problem, resolution, means) for name, resolution in legs.items()}

    def solve(self, problem, degree=None, size=None):
        model, integrate, words = problem.model, problem.integrate, problem.words
        label, legs = self.legs(problem, degree, size)
        legs = legs if problem.estimate else {"fine": legs["fine"]}
        start = time.perf_counter()
        fast = problem.fast_phase()
        means = fast.get("m_star", problem.means)  # the slow phase starts on the slaved branch the fast phase reached
        runs = audited(problem.potential, lambda: self.run_legs(problem, legs, means))
        runs = {name: run for name, run in runs.items() if run is not None}
        stopped = [run for run in runs.values() if run.status != "ok"]
        reached = min(len(run.t) for run in runs.values())
        fine = runs["fine"]
        t = fine.t[:reached]
        difference = np.zeros(reached)
        standard_error = fine.info.get("standard_error", {})
        for run in runs.values():
            for w in words:
                gap = np.abs(fine.series[w][:reached] - run.series[w][:reached])
                if w in standard_error:  # an ensemble's own noise: 3 standard errors on top
                    gap = gap + 3.0 * standard_error[w][:reached]
                difference = np.maximum(difference, gap / np.maximum(1.0, np.abs(fine.series[w][:reached])))
        estimate = np.maximum.accumulate(difference) + self.floor(problem, fine.info, reached)
        bounded, why = self.bounded(problem, runs) if problem.estimate else (None, NO_ESTIMATE)
        if bounded is None:  # nothing to compare with: no estimate at all, and no window
            estimate, bounded = np.full(reached, np.inf), False
        status, message = ("ok" if bounded else "unverified"), f"{label}; estimate: {why}"
        if stopped:  # a leg met a state it cannot go past: the run ends there, and says why
            status, message = stopped[0].status, f"{label}: {stopped[0].message}"
        series = {w: fine.series[w][:reached] for w in words}
        derived = derived_columns(problem, series, means)
        others = [theory_risk(problem, {w: r.series[w][:reached] for w in words}, means)
                  for name, r in runs.items() if name != "fine"]  # fmt: skip
        risk_estimate = with_noise(relative_risk_estimate(derived["risk"], others), derived["risk"], fine.info)
        risk_estimate = with_stepper_error(risk_estimate, fine.info)
        spectra = spectra_of(fine, reached, model)
        error_series = {"estimate": [float(e) if np.isfinite(e) else None for e in estimate]}
        error_series.update({k: v[:reached] for k, v in fine.info.get("error_series", {}).items()})
        if "risk_standard_error" in fine.info:  # an ensemble's own noise on its risk (absolute; 3× is in the estimate)
            error_series["risk_standard_error"] = fine.info["risk_standard_error"][:reached]
        risk_series, risk_window = risk_columns(t, risk_estimate)
        error_series.update(risk_series)
        return reported(
            problem,
            self.result(
                problem,
                t,
                status,
                message,
                series=series,
                derived=derived,
                valid_until=last_time_within(t, estimate, integrate.validity_tol),
                degree=degree,
                size=legs["fine"][0],
                error_estimate=float(estimate[-1]) if np.isfinite(estimate[-1]) else None,
                estimate_is_bound=bounded,
                error_series=error_series,
                potential=problem.potential.accuracy_report(),
                fast=fast,
                extra={
                    "method": fine.info.get("method", "DOP853"),
                    "nfev": fine.info.get("nfev", 0),
                    "estimate_legs": sorted(runs),
                    **stepper_summary(fine.info),
                    "error_scale": ERROR_SCALE,
                    "seconds": time.perf_counter() - start,
                    **risk_window,
                    **({"spectra": spectra} if spectra else {}),
                },
                config_hash=problem.config.digest,
                kappa=problem.kappa,
            ),
        )


#: A flow closure's estimate when its problem asks for none (`Problem.estimate` False: the reported leg alone).
NO_ESTIMATE = "none computed (estimate=False: the reported leg alone, without the legs that would check it)"


class MatrixModelClosure(FlowClosure):
    """n × n matrices that follow the d = ∞ initial law (`momentgen.compiler.initial.law_factors`), moved by
    the exact matrix flow (a dense state by Runge–Kutta–Chebyshev: `momentgen.setting.flow.CHEBYSHEV`); legs: sizes
    n and n/2. The estimate is not a bound: the quantile spectra converge at an uneven rate and the Haar mixing of
    free indices is random at O(1/n) (tied h2 case: n = 800 is 3.2e-3 from the exact curve where n vs 400 differ by
    1.0e-3), so the status is ``"unverified"``. With ``[truncation] draws = S > 1`` each leg is an ensemble
    (S draws at n, S/2 but at least 4 at n/2) averaged with control variates (`momentgen.dynamics.ensemble`), run
    on two processes; its estimate adds 3 standard errors of the size-n ensemble (the risk's, absolute, in
    ``error_series["risk_standard_error"]``), and at κ = 0 with S ≥ 8 draws
    mixed by flat rotations (a power-of-two n), all on one branch, it is vouched for as a statistical bound
    (`vouching_ensemble`; the whole-curve closure of a Gaussian student or teacher against Σ, `generic_sigma`).
    Given finite matrices (a problem with ``factors``, e.g. a from-file init) it is their own matrix flow: no
    closure, the exact solution of the hierarchy from their moments (estimate: the integration tolerance)."""

    name = "matrix-model"
    resolution = "size"
    from_finite_start = False  # its n × n matrices follow the d = ∞ law

    def label(self, config, degree=None):
        return f"matrix-model n={config.settings.truncation.size}"

    def legs(self, problem, degree, size):
        """The legs' (size, seed or seeds): ``[truncation] seed`` s picks disjoint draws — an ensemble's fine and
        coarse draws the seeds from s·(S + S/2) on, one matrix model's (and a stochastic one's noise) 2s and 2s + 1."""
        stochastic = problem.kappa > 0
        seed = problem.config.settings.truncation.seed
        if problem.factors is not None:
            d = problem.definition.matrices.dimension(problem.factors[0])
            if stochastic:
                return (
                    f"stochastic matrix model of the given d = {d} matrices (kappa = {problem.kappa:g})",
                    {"fine": ("given", 2 * seed), "seed": ("given", 2 * seed + 1)},
                )
            return f"matrix flow of the given d = {d} matrices (exact: no closure)", {"fine": ("given", 0)}
        n = size or problem.config.settings.truncation.size
        draws = problem.config.settings.truncation.draws
        if 1 < draws < MIN_DRAWS:
            raise ModelError(f"[truncation] draws = {draws}: use 1 (one matrix model) or ≥ {MIN_DRAWS} (an ensemble)")
        if draws > 1:
            controls = (
                "Sigma sampled by quantile strata, its lowest eigenvalue the control variate"
                if problem.model.sigma
                else "control variates on the initial moments"
            )
            label = (
                f"{'stochastic ' if stochastic else ''}matrix-model ensemble of {draws} draws at size {n} and "
                f"{max(MIN_DRAWS, draws // 2)} at {max(2, n // 2)} ({controls}"
                + (f"; each draw its own noise, kappa = {problem.kappa:g})" if stochastic else ")")
            )
            coarse = max(MIN_DRAWS, draws // 2)  # the size gap's own noise is in the estimate: half the draws do
            first = seed * (draws + coarse)
            fine, rest = range(first, first + draws), range(first + draws, first + draws + coarse)
            return label, {"fine": (n, fine), "coarse": (max(2, n // 2), rest)}
        label = (
            f"stochastic matrix model of size {n} (kappa = {problem.kappa:g})"
            if stochastic
            else f"matrix model of size {n}"
        )
        return label, {"fine": (n, 2 * seed), "coarse": (max(2, n // 2), 2 * seed + (1 if stochastic else 0))}

    def checked_resolution(self, config):
        """A generic Σ case (`generic_sigma`): the vouching ensemble `GENERIC_SIGMA_ENSEMBLE`; else the configured
        size and draws."""
        return dict(GENERIC_SIGMA_ENSEMBLE) if generic_sigma(config) else {}

    def bounded(self, problem, runs):
        if set(runs) == {"fine"}:
            return True, "integration tolerance of the exact matrix flow"
        if set(runs) == {"fine", "seed"}:
            return False, "difference of two noise seeds — not a bound (it misses the O(1/d) bias of this size)"
        if vouching_ensemble(problem, runs):
            return True, (
                "difference of the control-variate means of flat-mixed ensembles at sizes n and n/2 plus 3 standard "
                "errors of the n ensemble: a statistical bound (≈ 99.7 % on the draws' noise, the size gap standing "
                "for the O(1/n) bias), measured to cover the true error on every reference case of every kind "
                "(README, Anisotropic data)"
            )
        if "standard_error" in runs["fine"].info:
            left_out = {name: run.info.get("other_branch", 0) for name, run in runs.items()}
            branches = "".join(
                f"; {count} draw(s) of the {name} ensemble ended on another branch and were left out"
                for name, count in left_out.items()
                if count
            )
            noise = (
                " (the draws' own SGD-like noise included: ≈ 99.7 % confidence on the noise for normal errors; the "
                "O(kappa dt) time-stepping and O(kappa^2) expansion biases are not in it)"
                if problem.kappa > 0
                else ""
            )
            return False, (
                "difference of the control-variate means at sizes n and n/2 plus 3 standard errors of the "
                f"n ensemble — not a bound (a statistical estimate{noise}); cross-check with the quadrature "
                f"closure{branches}"
            )
        if problem.kappa > 0:
            return False, (
                "difference of sizes n and n/2 with independent noise — not a bound (it misses the "
                "weak error O(kappa dt) of the time stepping and the O(kappa^2) of the expansion)"
            )
        return False, (
            "difference of sizes n and n/2 — not a bound (quantile spectra and random Haar mixing "
            "converge unevenly); cross-check with the quadrature closure"
        )

    def floor(self, problem, info, reached):
        """Law-based legs stepped by Chebyshev carry 3× their stepper's error measured on this problem
        (``info["stepper_error"]``, `run_legs`; ∞ past the times the check reached); given matrices (DOP853) and
        stochastic legs (no measurement: their estimate is not a bound) the engine's tolerance."""
        measured = info.get("stepper_error")
        return self.tolerance if measured is None else carried(measured["words"], reached)

    def run_legs(self, problem, legs, means):
        """Ensembles of draws (a range of seeds) as one batch (`momentgen.dynamics.ensemble.run_ensembles`), single
        matrix models one by one; with an estimate from the law at κ = 0, the reported leg's ``info["stepper_error"]``
        is its stepper's error measured on this problem (`momentgen.dynamics.stepper_check.stepper_error`)."""
        ensembles = {name: leg for name, leg in legs.items() if isinstance(leg[1], range)}
        check = problem.estimate and problem.kappa == 0 and problem.factors is None
        runs = run_ensembles(problem, ensembles, means, check=check) if ensembles else {}
        runs = {name: runs[name] if name in runs else self.run(problem, leg, means) for name, leg in legs.items()}
        if check and not ensembles and runs.get("fine") is not None:
            runs["fine"].info["stepper_error"] = stepper_error(problem, means, CHEBYSHEV)
        return runs

    def run(self, problem, resolution, means):
        size, seed = resolution
        spectra = spectra_request(problem, trace_spectrum)
        if size == "given":  # the exact flow of given matrices: at the engine's own tolerance
            return problem.law_run(problem.factors, means, seed, spectra=spectra)
        factors = law_factors(problem.model, problem.specs, size, seed=seed, data=problem.data)
        return problem.law_run(factors, means, seed, spectra=spectra, stepper=CHEBYSHEV)


#: The matrix-model ensemble that vouches for a generic Σ case (`generic_sigma`): draws of size 128 mixed by flat
#: rotations, Σ sampled by quantile strata (a Latin hypercube over the draws), against 4 of size 64 (tied, a Gaussian
#: student against a power-law Σ with a = 2, t ∈ [0.1, 50]: 1.60 % off the d → ∞ risk at worst, its estimate ≥ 2.3×
#: that; 0.9–3.7 % over 8 other sets of seeds; README, Anisotropic data).
GENERIC_SIGMA_ENSEMBLE = {"size": 128, "draws": 8}
#: Twice its size: within 2 % on every set measured of that case (0.55–1.31 %) at about 3× the cost — what to ask
#: for (``[truncation] size, draws``) where the default's few per cent are not enough (README, *Robust 2 %*).
ROBUST_SIGMA_ENSEMBLE = {"size": 256, "draws": 8}

#: The edge layer of the reported leg, and the coarser, shallower one it is compared with (`momentgen.laws.edge`).
EDGE = (EDGE_STEP, EDGE_DEPTH)
COARSE_EDGE = (2 * EDGE_STEP, EDGE_DEPTH - 4.0)
#: The same for the layer of a data covariance Σ (MATH.md §10): half the step, because a direction λ of Σ is learned
#: at the rate 4λ^{2+b}c t, so the front that crosses the layer is 1/(2 + b) ≤ ½ wide in log λ where a Wishart edge's
#: linear flow gives a front of width 1; and a layer reaching over most of the support (`DATA_REACH`), because a
#: power law is scale-free and the front crosses every scale of it slowly (a power of t), not only the edge.
DATA_REACH = 0.9
DATA_EDGE = (EDGE_STEP / 2, EDGE_DEPTH, DATA_REACH)
DATA_COARSE_EDGE = (EDGE_STEP, EDGE_DEPTH - 4.0, DATA_REACH)


class QuadratureClosure(FlowClosure):
    """Truncated GNS representation of order n = ⌊(M − 1)/2⌋ (exact to degree M at t = 0).

    Legs: the Gauss representation of order n (reported), its Gauss–Radau variant (a node fixed
    at each positive letter's lower spectral edge, the same moments to degree 2n:
    `momentgen.laws.representation.free_product`) and order n − 1. The Gauss and Radau
    representations are the two principal representations of what order n knows; where the
    flow stretches an unresolved layer at a hard edge, the Gauss rule lets its node escape and
    the Radau rule holds it back, and the truth lies between (measured: the estimate is 1.8–5×
    the true error on the exactly solvable, tied h2 and fig. 1 cases, never below). Letters
    without a known edge (untied) have no such variant: their estimate (n vs n − 1) is reported
    as not a bound. A closed hierarchy needs no closure: the zero closure solves it exactly.

    With one index that is not a multiple of the identity and whose law is known
    (`momentgen.compiler.initial.layered_index`: a Wishart student against a teacher c·I) that index gets
    the edge-adapted rule of `momentgen.laws.edge` instead — the same moments to degree 2n + 1 plus a
    layer of nodes far below the Gauss nodes at the spectral edge, so the risk's tail is right in
    relative terms (MATH.md §12) — and the legs are: that rule (reported), the rule with cells twice
    as wide reaching less deep (its error is O(step⁴), and it gives up first when the escaping front
    passes the deepest node), and order n − 1 (README, "Error estimates": the measured ratios).

    Also reports ``error_series["traciality_defect"]``: max over letter pairs of
    ``|⟨e₀, X X Y e₀⟩ − ⟨e₀, X Y X e₀⟩|`` for X a trainable letter — zero for a tracial state,
    free to compute, and it tracks the error once the representation is strained.
    """

    name = "quadrature"
    resolution = "order"

    def checked_resolution(self, config):
        """Beside a zero closure: its own degree, as an odd M with order n = (M − 1)/2 from 2 to 4 (the
        representation grows like (letters)^n: a high order is minutes for several letters)."""
        return {"degree": min(9, max(5, config.settings.truncation.degree | 1))}

    def label(self, config, degree=None):
        return f"quadrature n={(config.settings.truncation.degree - 1) // 2}"

    def carries_finite_lr(self, model):
        """Only a closed hierarchy (solved by the zero closure): the Itô pair term is not a drift of the
        compressed letters."""
        return model.definition.closes(model)

    def legs(self, problem, degree, size):
        M = degree or problem.config.settings.truncation.degree
        n = (M - 1) // 2
        if n < 1:
            raise ModelError(f"the quadrature closure needs degree M ≥ 3 (order n = ⌊(M − 1)/2⌋ ≥ 1), got M = {M}")
        layered = (
            None if problem.factors is not None else layered_index(problem.model, problem.specs, EDGE, problem.data)
        )
        if layered is not None:
            fine, coarse = (DATA_EDGE, DATA_COARSE_EDGE) if layered == 0 else (EDGE, COARSE_EDGE)
            legs = {"fine": (n, "gauss", fine), "layer": (n, "gauss", coarse)}
            if n >= 2:
                legs["coarse"] = (n - 1, "gauss", fine)
            return f"quadrature closure of order n = {n} with an edge layer", legs
        legs = {"fine": (n, "gauss", None), "radau": (n, "radau", None)}
        if n >= 2:
            legs["coarse"] = (n - 1, "gauss", None)
        return f"quadrature closure of order n = {n}", legs

    def bounded(self, problem, runs):
        if "layer" in runs:
            return True, (
                "largest difference to the edge layer at twice the step and less depth, and to order n − 1 "
                "(running maximum)"
            )
        if "radau" in runs:
            return True, "largest difference to the Gauss–Radau variant and to order n − 1 (running maximum)"
        if "coarse" not in runs:
            return None, "none: order 1 has neither a Gauss–Radau variant nor an order 0 to compare"
        return False, (
            "difference of orders n and n − 1 only — not a bound (no Gauss–Radau variant for these "
            "letters); cross-check with the matrix-model closure"
        )

    def solve(self, problem, degree=None, size=None):
        if problem.definition.closes(problem.model):
            return ZeroClosure().solve(problem, degree)
        if problem.kappa > 0:
            raise ModelError(
                "the quadrature closure cannot carry the finite-learning-rate term (its Itô pair term is not "
                'a drift of the compressed letters): use closure = "matrix-model" (a stochastic matrix model) '
                'or "zero"'
            )
        return super().solve(problem, degree, size)

    def run(self, problem, resolution, means):
        n, variant, edge = resolution
        model = problem.model
        oracle = (
            None
            if problem.factors is None
            else matrix_moments(model, problem.factors, problem.sigma_of(problem.factors))
        )
        codes = problem.word_codes
        read = {c for word in codes if len(word) > 1 for c in word}
        generators = set(model.definition.laws.driving_letters(model)) | read  # letters read only alone ride along
        representation = initial_representation(
            model, problem.specs, n, oracle, generators=generators, variant=variant, edge=edge, data=problem.data
        )
        if representation is None:
            return None
        pairs = traciality_pairs(model)
        probes = [w for x, y in pairs for w in ((x, x, y), (x, y, x))]
        letters, sigma = representation.letters, None
        if model.sigma:  # Σ is a fixed letter of the flow, not a factor
            letters, sigma = letters[: model.sigma_code], letters[model.sigma_code]
        parts = model.definition.laws.factor_parts(letters, 1e-12, representation.roots)
        run = run_flow(
            model,
            parts,
            problem.source(means),
            times=problem.times,
            codes=codes,
            texts=problem.words,
            read=vector_moments,
            probes=probes,
            spectra=spectra_request(problem, vector_spectrum),
            sigma=sigma,
        )
        defect = np.abs(run.probes[:, 0::2] - run.probes[:, 1::2]).max(axis=1) if probes else np.zeros(len(run.t))
        run.info["error_series"] = {"traciality_defect": defect}
        return run


def with_noise(estimate, risk, info):
    """A risk's relative estimate with the ensemble's own noise on top: 3 standard errors of the risk
    (``info["risk_standard_error"]``) relative to it, as a running maximum; ``estimate`` as it is without them."""
    noise = info.get("risk_standard_error")
    if estimate is None or noise is None:
        return estimate
    with np.errstate(divide="ignore", invalid="ignore"):
        relative = 3.0 * np.asarray(noise, float)[: len(estimate)] / np.abs(np.asarray(risk, float)[: len(estimate)])
    return np.maximum.accumulate(estimate + np.where(np.isnan(relative), np.inf, relative))


def with_stepper_error(estimate, info):
    """A risk's relative estimate with 3× the stepper's measured error on the risk on top (``info["stepper_error"]``:
    every leg is stepped alike, so their gap does not see it; ∞ past the times the check reached); ``estimate`` as
    it is without a measurement."""
    measured = info.get("stepper_error")
    if estimate is None or measured is None:
        return estimate
    return np.maximum.accumulate(np.asarray(estimate, float) + carried(measured["risk"], len(estimate)))


def carried(measured, length):
    """What an estimate carries for a measured running error on its first ``length`` output times: 3× it, ∞ past the
    times the measurement covers."""
    out = np.full(length, np.inf)
    out[: min(length, len(measured))] = 3.0 * np.asarray(measured, float)[:length]
    return out


def stepper_summary(info):
    """``{"stepper_error": {"words": …, "risk": …}}``: the largest stepper error measured for a run (what its
    estimate carries 3× of), or nothing without a measurement."""
    measured = info.get("stepper_error")
    if measured is None:
        return {}
    peaks = {key: float(np.max(value, initial=0.0)) for key, value in measured.items()}
    return {"stepper_error": {key: peak if np.isfinite(peak) else None for key, peak in peaks.items()}}


def traciality_pairs(model):
    """Letter pairs (X, Y) whose defect ⟨XXY⟩ − ⟨XYX⟩ is watched: X trainable, Y any other letter."""
    return [(x, y) for x in trainable_codes(model) for y in range(model.alphabet.size) if y != x]


def _registry(*closures):
    """{name: closure}, refused unless the names are the configuration's ``[truncation] closure`` choices in order."""
    registry = {closure.name: closure for closure in closures}
    if tuple(registry) != CLOSURE_NAMES:
        raise ImportError(f"the closures {tuple(registry)} are not the configuration's choices {CLOSURE_NAMES}")
    return registry


#: The registry: ``[truncation] closure`` → its closure (the one table of closures; the configuration validates the
#: key against its names, `momentgen.setting.config.CLOSURES`).
CLOSURES = _registry(ZeroClosure(), RiccatiClosure(), QuadratureClosure(), MatrixModelClosure())


def generic_sigma(config):
    """Whether ``config``'s tokens have a covariance Σ and an index that does not commute with it (a Gaussian student
    or teacher): two non-commuting letters at Σ's edge, which no quadrature rule resolves (MATH.md §10, §12)."""
    model = config.model
    return bool(model.sigma) and layered_index(model, config.inits(), EDGE, config.data()) is None


def vouching_ensemble(problem, runs):
    """Whether the legs ``runs`` are ensembles whose estimate is vouched for as a statistical bound: κ = 0, at least
    `GENERIC_SIGMA_ENSEMBLE`'s draws, flat mixing (a power-of-two size), both sizes reached, and every draw on the main
    branch (an ensemble that left draws out is not a plain average; `momentgen.dynamics.ensemble.main_branch`).
    Measured to cover the true error on every reference case of every kind (README, Anisotropic data)."""
    fine, coarse = runs.get("fine"), runs.get("coarse")
    if problem.kappa > 0 or fine is None or coarse is None:
        return False
    enough = fine.info.get("draws", 0) >= GENERIC_SIGMA_ENSEMBLE["draws"]
    whole = not any("other_branch" in run.info for run in (fine, coarse))
    return enough and whole and fine.info.get("flat", False) and coarse.info.get("flat", False)


def whole_curve_closure(config, kappa):
    """The first flow closure, in order of preference, that covers a whole curve of ``config`` at κ = ``kappa``: the
    exact riccati closure where the configuration is in its class (`riccati.outside_riccati`), the matrix-model
    ensemble for a generic Σ case (`generic_sigma`), else the quadrature closure, then the matrix model — one that
    carries the finite-learning-rate term where κ > 0."""
    if outside_riccati(config, kappa) is None:
        return CLOSURES["riccati"]
    if generic_sigma(config):
        return CLOSURES["matrix-model"]
    return next(
        c
        for c in CLOSURES.values()
        if not c.window_from_degrees and c.name != "riccati" and (kappa == 0 or c.carries_finite_lr(config.model))
    )


def gives_way(config, closure):
    """Whether the configured ``closure``, when its window ends before T, gives way to `whole_curve_closure` where the
    user named none: the zero closure (its window comes from its degrees), and any closure but the matrix model on
    a generic Σ case (`generic_sigma`: no quadrature rule resolves it, the vouching ensemble does)."""
    return CLOSURES[closure].window_from_degrees or (generic_sigma(config) and closure != "matrix-model")


def vouching_closure(config, configured):
    """Where the user named no closure: (config, note) for the closure that vouches for the horizon. ``configured``
    is the configured closure's `Result`; when that closure gives way (`gives_way`) and its window ends before T, the
    whole-curve closure that carries the run's κ (`whole_curve_closure`) at its checked resolution replaces it, and
    ``note`` says so; else ``(config, None)`` (the configured closure is kept)."""
    T = config.settings.integrate.T
    if not gives_way(config, configured.closure) or configured.valid_until >= T - 1e-12 * max(1.0, T):
        return config, None
    whole = whole_curve_closure(config, configured.kappa)
    note = (
        f"the configured {configured.closure} closure vouches only until t = {configured.valid_until:.4g} of {T:g}, "
        f"so the {whole.name} closure was run (name a closure to choose one)"
    )
    return config.replace(truncation={"closure": whole.name, **whole.checked_resolution(config)}), note


def solve_with_closure(
    config,
    closure=None,
    degree=None,
    size=None,
    factors=None,
    kappa=None,
    times=(),
    spectra=False,
    estimate=True,
    n_jobs=None,
):
    """Solve ``config`` with the named closure (default: ``[truncation] closure``): the run pipeline
    Config → `Problem` → closure → `Result`. ``factors``: start from these finite-d matrices'
    moments instead of the d = ∞ initial law (a from-file init gives its own). ``kappa``: κ = ηd/B
    of the finite-learning-rate term (default `Config.kappa`). ``times``: extra output times in [0, T];
    ``spectra``: also record the trainable letters' spectra (for `Result.spectrum`); ``estimate`` False: a flow
    closure (quadrature, matrix model) runs its reported leg alone — the same curve without the cost of the legs
    that check it, no estimate, status ``unverified`` (the zero and riccati closures' checks are cheap: kept).
    ``n_jobs``: the processes a matrix-model ensemble's draws run on (default
    `momentgen.dynamics.ensemble.ENSEMBLE_JOBS`; the result is the same on any number).
    ``closure``, ``degree`` and ``size`` are validated like the file's ``[truncation]`` keys
    (`Config.replace`)."""
    if closure is not None and closure not in CLOSURES:
        raise ModelError(f"unknown closure {closure!r}: choose one of {', '.join(CLOSURES)}")
    if not isinstance(estimate, bool):
        raise ModelError(f"estimate must be True or False, got {shown(estimate)}")
    check_n_jobs(n_jobs)
    given = {"closure": closure, "degree": degree, "size": size}
    overrides = {key: value for key, value in given.items() if value is not None}
    config = config.replace(truncation=overrides) if overrides else config
    name = config.settings.truncation.closure
    T = config.settings.integrate.T
    bad = [t for t in times if isinstance(t, bool) or not (isinstance(t, (int, float)) and 0 <= t <= T)]
    if bad:
        raise ModelError(f"output times must be numbers in [0, T = {T:g}], got {bad[0]!r}")
    problem = Problem.from_config(
        config, factors, kappa=kappa, times=times, spectra=spectra, estimate=estimate, n_jobs=n_jobs
    )
    result = CLOSURES[name].solve(problem)
    caveat = momentum_caveat(config, config.sgd_kappa())
    if caveat is not None:
        result.message += f"; {caveat}"
        result.status = "unverified" if result.status in ("ok", "partial") else result.status
    return result


#: κ_eff = ηd/((1 − β)B) above which heavy ball and its first-order equivalent, SGD at η/(1 − β), part by more than
#: a few per cent (MATH.md §14, the noise floor: theory − momentum SGD 0.8 % at κ_eff = 0.05, 7.6 % at 0.1)
MOMENTUM_KAPPA = 0.05


def momentum_caveat(config, kappa):
    """What the theory of a momentum run at κ_eff = ``kappa`` cannot vouch for (None when β = 0 or κ_eff is small)."""
    beta = config.settings.sgd.momentum
    if not beta or kappa <= MOMENTUM_KAPPA:
        return None
    return (
        f"momentum β = {beta:g} at κ_eff = ηd/((1 − β)B) = {kappa:.3g} > {MOMENTUM_KAPPA:g}: the theory is heavy "
        "ball's first order in κ_eff (SGD at η/(1 − β), MATH.md §14) and the next order is not small here — lower "
        "lr or raise batch to trust it"
    )
