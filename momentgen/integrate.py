"""Integrating a truncation, with an honest validity horizon (MATH.md §6).

`solve` is the one loop: it integrates a `momentgen.truncation.Truncation` over the output
grid with a scipy method and stops — never returning NaN or inf — when the state blows up
(a moment's ``|μ_α|^{1/|α|}`` exceeds ``blowup_factor`` times its initial largest value,
a lower bound of the spectral radius) or the order parameters leave the feasible set.
`validity_horizon` compares two truncation degrees: the zero closure at degree M is the
Taylor polynomial of the exact solution, so it is trustworthy only where degrees M and
M − 2 agree.
"""

import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from .errors import InfeasibleState, MomentgenError, NonFinitePotential, NoSlavedMean
from .stepper import Event, integrate

__all__ = ["SolveResult", "solve", "validity_horizon", "last_time_within", "solve_config", "audited"]

METHODS_WITH_JACOBIAN = ("Radau", "BDF")
STATE_ERRORS = (InfeasibleState, NonFinitePotential, NoSlavedMean)  # a state the run cannot go past: a status
LSODA_MAX_WORDS = 3000  # LSODA allocates a dense n×n Jacobian: 72 MB at this size


@dataclass
class SolveResult:
    """A trajectory on the model's time axis and how the integration ended.

    ``t``: shape (n,), the output grid up to where integration stopped; ``y``: shape
    (n, n_words), moments in program order; ``status``: "ok", "blowup",
    "left-feasible-set" or "failed"; ``t_stop``: last time reached; ``valid_until``: set
    by `validity_horizon` (else ``t_stop``).
    """

    t: np.ndarray
    y: np.ndarray
    words: list
    status: str
    message: str
    t_stop: float
    time_scale: str
    degree: int
    method: str
    nfev: int = 0
    seconds: float = 0.0
    valid_until: float = None
    extra: dict = field(default_factory=dict)

    def series(self, word):
        return self.y[:, self.words.index(word)]


def _radius(y, lengths):
    return np.max(np.abs(y) ** (1.0 / lengths))


def _min_feasibility_eigenvalue(truncation, y):
    """Smallest eigenvalue of Q1 ± Q2 (tied: q; untied: q⁽¹⁾ ± q⁽²⁾; direct: Ω ± Ψ) at ``y``."""
    Q1, Q2 = truncation.order_parameters(y)
    return min(np.linalg.eigvalsh(0.5 * (A + A.T)).min() for A in (Q1 + Q2, Q1 - Q2))


def _student_size(truncation, y):
    """Untied: min_k D_k = t^A_k + t^B_k over trainable k (β ∝ 1/D_k is singular at 0); else +inf."""
    D = truncation.bias_denominators(y)
    return D.min() if D.size else np.inf


def solve(truncation, y0, T, points=51, method="LSODA", rtol=1e-8, atol=1e-10, blowup_factor=8.0):
    """Integrate ``truncation`` from moments ``y0`` on ``[0, T]`` (the model's time axis).

    Parameters
    ----------
    truncation : momentgen.truncation.Truncation
    y0 : array_like, shape (n_words,)
    T : float
        Horizon (tied ``t = 4nη/d``; untied slow phase and direct ``τ = nη/d``).
    points : int
        Uniform output grid on [0, T].
    method : "LSODA" | "Radau" | "BDF" | "DOP853" | "RK45"
        Radau and BDF receive the Jacobian `Truncation.jac`.

    Returns a `SolveResult`; integration stops early (status "blowup" or
    "left-feasible-set") instead of producing non-finite numbers.
    """
    y0 = np.asarray(y0, dtype=float)
    program = truncation.program
    if y0.shape != program.packed.shape:
        raise MomentgenError(f"`y0` has shape {y0.shape}; this program has {len(program.packed)} words "
                             f"(degree {program.degree})")  # fmt: skip
    lengths = program.lengths.astype(float)
    bound = blowup_factor * max(_radius(y0, lengths), 1e-12)
    scale = max(np.abs(y0[lengths == 2]).max(initial=0.0), 1e-12)
    collapse = _student_size(truncation, y0)

    events = (
        Event(lambda t, y: bound - _radius(y, lengths), "blowup",
              f"a moment exceeded the spectral bound {bound:.3g} (blowup_factor × initial radius); "
              "the truncation is not valid beyond"),
        Event(lambda t, y: _min_feasibility_eigenvalue(truncation, y) + 1e-9 * scale, "left-feasible-set",
              "the order parameters left the PSD cone; the truncation is not valid beyond"),
        Event(lambda t, y: _student_size(truncation, y) - 1e-3 * collapse, "left-feasible-set",
              "the student collapsed: t^A + t^B fell below 1e-3 of its initial value (beta = -psi/D is "
              "singular at 0); the truncation is not valid beyond"),
    )  # fmt: skip
    if method == "LSODA" and len(y0) > LSODA_MAX_WORDS:
        warnings.warn(f"LSODA keeps a dense {len(y0)}×{len(y0)} Jacobian ({8 * len(y0) ** 2 / 2**30:.1f} GiB); "
                      "integrating with DOP853 instead (pass method='Radau' or 'BDF' for the sparse Jacobian)",
                      stacklevel=2)  # fmt: skip
        method = "DOP853"
    grid = np.linspace(0.0, T, points)
    start = time.perf_counter()
    track = (lambda t, y: truncation.track(y)) if program.model.kind == "untied" else None
    run = integrate(truncation.rhs, y0, grid, method=method, rtol=rtol, atol=atol,
                    jac=truncation.jac if method in METHODS_WITH_JACOBIAN else None, events=events, on_step=track,
                    recoverable=STATE_ERRORS, recoverable_status="left-feasible-set")  # fmt: skip
    return SolveResult(run.t, run.y, list(program.words), run.status, run.message, run.t_stop,
                       program.model.time_scale, program.degree, method, run.nfev, time.perf_counter() - start)  # fmt: skip


def validity_horizon(fine, coarse, words, tol, closed=False):
    """First time where degrees M (``fine``) and M − 2 (``coarse``) differ by more than ``tol``
    (relative to max(1, |μ|)) on ``words``; never beyond either run's stop.

    A closed program (no dropped words, e.g. the direct model) is exact: its horizon is
    where it stopped. Without a coarser run (M − 2 < 2) nothing vouches for the truncation
    and the horizon is 0.
    """
    if closed:
        return float(fine.t_stop)
    if coarse is None:
        return 0.0
    n = min(len(fine.t), len(coarse.t))
    shared = [w for w in words if w in set(coarse.words)]  # degree M − 1, M words exist in the fine run only
    idx_f = [fine.words.index(w) for w in shared]
    idx_c = [coarse.words.index(w) for w in shared]
    diff = np.abs(fine.y[:n, idx_f] - coarse.y[:n, idx_c]) / np.maximum(1.0, np.abs(fine.y[:n, idx_f]))
    return float(min(last_time_within(fine.t[:n], diff.max(axis=1), tol), fine.t_stop, coarse.t_stop))


def last_time_within(t, difference, tol):
    """The last grid time before ``difference`` first exceeds ``tol`` (0 if it does at t[0])."""
    bad = np.flatnonzero(np.asarray(difference) > tol)
    if not bad.size:
        return float(t[-1])
    return float(t[bad[0] - 1]) if bad[0] > 0 else 0.0


def solve_config(config, degree=None, factors=None):
    """Solve a configuration at degree M and M − 2; JSON-ready dict (the ``solve`` command's output).

    ``factors``: finite-d matrices to take the initial moments from (MATH.md §7: to compare
    with one finite-d run, start the theory from its actual matrices); default: the d = ∞
    values of the configured initialisation.
    """
    from .hierarchy import build
    from .initial import empirical_moments
    from .matrices import untied_means
    from .truncation import Branch, from_config

    integrate = config.section("integrate")
    M = config.section("truncation")["degree"] if degree is None else degree
    observables = config.section("truncation")["observables"]
    runs, closed, potential = {}, None, None
    for m in [M] + ([M - 2] if M - 2 >= 2 else []):  # degree M first: an error names the degree asked for
        listed = observables if m == M or observables == "all" else [w for w in observables if len(w.split()) <= m]
        program = build(config.model, m, listed, max_bytes=config.max_bytes)
        initial = None if factors is None else empirical_moments(config.model, factors, program.word_codes)
        truncation, y0 = from_config(config, m, program=program, initial=initial, potential=potential)
        potential = truncation.potential  # one compiled integrand and calibrated rule for both degrees
        if factors is not None and config.model.kind == "untied":
            truncation.branch = Branch(untied_means(factors))
        extra = {}
        if config.model.kind == "untied":
            times, means = truncation.fast_phase(y0, integrate["fast_T"])
            extra = {"fast_t": times.tolist(), "fast_m": means.tolist(), "m_star": truncation.m.tolist()}
        start = truncation.branch
        result = audited(potential, lambda: solve(truncation, y0, integrate["T"], integrate["points"],
                                                  integrate["method"], integrate["rtol"], integrate["atol"]),
                         reset=lambda: setattr(truncation, "branch", start))  # fmt: skip
        result.extra = extra
        runs[m] = result
        closed = closed if closed is not None else len(truncation.program.dropped_packed) == 0
    fine = runs[M]
    observables = _reported_words(fine, config)
    fine.valid_until = validity_horizon(fine, runs.get(M - 2), observables, integrate["validity_tol"], closed)
    out = _to_json(fine, observables, config)
    out["potential"] = potential.accuracy_report()
    return out


def audited(potential, run, reset=None, attempts=3):
    """``run()`` with the potential frozen (a pure right-hand side), then `Potential.audit` of the
    far states it met; while the rule had to be refined there, ``reset()`` and run again. After
    ``attempts`` refinements the last result is returned with a warning and the accuracy report
    says ``met_rtol: False`` — never silently."""
    for _ in range(attempts):
        with potential.frozen():
            result = run()
        if potential.audit():
            return result
        if reset is not None:
            reset()
    potential.missed_rtol = True
    warnings.warn(f"the quadrature rule of {potential.loss.name!r} was refined {attempts} times along the path "
                  "and still missed rtol at a state it met; raise [loss] rtol or shorten the horizon", stacklevel=3)
    return result


def _reported_words(result, config):
    obs = config.section("truncation")["observables"]
    from .words import canonical

    chosen = result.words if obs == "all" else [canonical(w, config.model.kind) for w in obs]
    required = [w for w in result.words if len(w.split()) <= 2]
    return list(dict.fromkeys(chosen + required))


def _to_json(result, words, config):
    from .words import canonical

    kind = config.model.kind
    series = {w: result.series(w).tolist() for w in words}
    derived = {}
    if config.model.K >= 2:
        if kind in ("tied", "direct"):
            p12 = result.series(canonical("S1 S2", kind)) - result.series("S1") * result.series("S2")
            derived["p12"] = p12.tolist()
            if kind == "direct":
                derived["p12_Omega"] = (result.series(canonical("S1 S2^T", kind))
                                        - result.series("S1") * result.series("S2")).tolist()  # fmt: skip
        else:
            q1, q2 = result.series(canonical("M1 M2^T", kind)), result.series(canonical("M1 M2", kind))
            derived["q1_12"], derived["q2_12"] = q1.tolist(), q2.tolist()
            derived["symmetric_overlap"] = (2 * q1 + 2 * q2).tolist()
    return {
        "model": kind, "degree": result.degree, "time_scale": result.time_scale, "t": result.t.tolist(),
        "series": series, "derived": derived, "status": result.status, "valid_until": result.valid_until,
        "message": result.message, "method": result.method, "nfev": result.nfev, "seconds": result.seconds,
        "config_hash": config.digest, **result.extra,
    }  # fmt: skip
