"""What every closure shares (`closures`, `momentgen.dynamics.riccati`): the `Closure` interface, the error scale,
the derived columns (the risk, its slope, the overlaps) and how a result is reported (`reported`: on the nominal axis,
``partial`` where the closure vouches for less than the horizon)."""

import numpy as np

from ..models.words import canonical
from ..setting.spectra import spectral_product
from .integrate import last_time_within
from .results import Result
from .risk import RISK_TOL, local_slope, theory_excess_risk, theory_risk

__all__ = [
    "Closure",
    "ERROR_SCALE",
    "reported",
    "risk_columns",
    "derived_columns",
    "short_and_phi_words",
    "trainable_codes",
    "trainable_products",
    "spectra_of",
    "spectra_request",
]


class Closure:
    """Base class: `momentgen.dynamics.closures`' module docstring states the contract.

    Capabilities callers read instead of testing names: ``resolution`` (what ``size``/``degree`` sets, in
    words), ``window_from_degrees`` (its ``valid_until`` compares degrees M and M − 2, so a curve past it
    is extrapolation; a flow closure's curve stays realisable past its window), ``from_finite_start``
    (whether it can start from a finite-d state, or only from the d = ∞ law), `carries_finite_lr`
    (whether it can solve a model with κ > 0), ``companion`` (the closure `momentgen.evidence.verification`
    cross-checks it with), `checked_resolution` (the resolution it is checked at) and `label`.
    """

    name = None
    resolution = "degree"
    window_from_degrees = False
    from_finite_start = True
    companion = "zero"

    def carries_finite_lr(self, model):
        """Whether this closure solves ``model`` with the finite-learning-rate term (κ > 0)."""
        return True

    def checked_resolution(self, config):
        """``[truncation]`` overrides for a check of this closure beside another (none: the configured one)."""
        return {}

    def label(self, config, degree=None):
        """A curve's short name in legends and tables (``degree``: the zero closure's M)."""
        return self.name

    def solve(self, problem, degree=None, size=None):
        raise NotImplementedError

    def result(self, problem, t, status, message, **fields):
        """This closure's `Result` for ``problem``: its kind, the closure's name and the time axis filled in;
        ``fields``: the rest of `Result`'s keys (``series``, ``derived``, ``valid_until``, …)."""
        model = problem.model
        return Result(t, status, message, model=model.kind, closure=self.name, time_scale=model.time_scale, **fields)


#: The scale of every per-word estimate and of ``validity_tol`` (``extra["error_scale"]``): the error divided by
#: max(1, |μ|) — absolute for words of order 1 or less, relative for larger ones. The risk's estimate
#: (``error_series["risk_relative"]``) is relative.
ERROR_SCALE = "max(1, |mu|)"


def reported(problem, result):
    """``result`` as reported: on the nominal axis (`Problem.on_nominal_axis`), and ``"partial"`` instead of
    ``"ok"`` when the closure vouches for less than the horizon (the rows past ``valid_until`` are marked
    in `Result.to_pandas`); where the risk's relative estimate leaves `risk.RISK_TOL` before the horizon
    (``extra["risk_valid_until"]``: on a log axis, the tail is not resolved past it) the message says from when."""
    result = problem.on_nominal_axis(result)
    if not len(result.t):
        return result
    end = result.t[-1] - 1e-12 * max(1.0, result.t[-1])
    if result.status == "ok" and result.valid_until < end:
        result.status = "partial"
        result.message = (
            f"vouched for until {result.valid_until:.4g} of {result.t[-1]:.4g} only (past it the closure's own check "
            f"exceeds validity_tol; to_pandas marks those rows); {result.message}"
        )
    risk_until = result.extra.get("risk_valid_until")
    if risk_until is not None and 0 < risk_until < end:
        result.message += (
            f"; the risk's tail is resolved to {RISK_TOL:.0%} relative until t = {risk_until:.4g} only (its relative "
            "estimate, extra['risk_valid_until']; past it read the risk on a log axis with care)"
        )
    return result


def risk_columns(t, estimate):
    """``error_series["risk_relative"]`` (the risk's relative estimate per time, None where there is none)
    and ``extra["risk_valid_until"]`` (the last time it is within `momentgen.dynamics.risk.RISK_TOL`; 0 without one)."""
    if estimate is None:
        return {}, {"risk_valid_until": 0.0}
    values = [float(e) if np.isfinite(e) else None for e in estimate]
    return {"risk_relative": values}, {"risk_valid_until": last_time_within(t, estimate, RISK_TOL)}


def spectra_of(run, reached, model):
    """The fine leg's spectral measures (`momentgen.setting.spectra`) on the times reached, JSON-ready:
    {product: {"nodes": [[…] per time], "weights": [[…] per time]}}."""
    out = {}
    for letter, measures in run.info.get("spectra", {}).items():
        measures = measures[:reached]
        out[letter] = {
            "of": spectral_product(model, letter)[0],
            "nodes": [m[0].tolist() for m in measures],
            "weights": [m[1].tolist() for m in measures],
        }
    return out


def spectra_request(problem, function):
    """The flow engine's ``spectra`` argument when the problem asks for spectra, else None."""
    return (function, trainable_products(problem.model)) if problem.spectra else None


def trainable_codes(model):
    """Codes of the trainable letters, one of each transpose pair (untied M, not Mᵀ)."""
    a = model.alphabet
    return [c for c in range(a.size) if a.index(c) in model.trainable and a.transpose[c] >= c]


def trainable_products(model):
    """{letter: codes of the product whose spectrum is reported} for every trainable letter
    (`momentgen.setting.spectra.spectral_product`: the letter, or X Xᵀ for a letter that is not symmetric)."""
    letters = [model.alphabet.name(c) for c in trainable_codes(model)]
    return {letter: spectral_product(model, letter)[1] for letter in letters}


def derived_columns(problem, series, means):
    """The derived columns: the population risk Φ along the run (`momentgen.dynamics.risk.theory_risk`, on the
    branch ``means`` of a kind with a mean), with label noise the excess risk (``"excess_risk"``), the local slope
    d log risk / d log t on the nominal axis of the excess risk (``"risk_slope"``, `risk.local_slope`; a
    noise floor is not a power law) and, with two indices or more, the kind's overlaps."""
    model = problem.model
    out = {"risk": theory_risk(problem, series, means)}
    excess = theory_excess_risk(problem, series, out["risk"], means)
    if excess is not None:  # label noise: the part a perfect student would not pay (MATH.md §13)
        out["excess_risk"] = excess
    out["risk_slope"] = local_slope(
        problem.nominal_times[: len(out["risk"])], out["risk"] if excess is None else excess
    )
    if model.K >= 2:
        out.update(model.definition.derived(lambda word: np.asarray(series[canonical(word, model)]), model.K))
    return out


def short_and_phi_words(model, words):
    """The words of degree ≤ 2 among ``words`` and the words Φ reads (`ModelKind.state_words`: with the letter Σ its
    Σ-weighted order parameters, of degree 4–5), which the risk needs."""
    phi = {canonical(w, model) for w, _ in model.definition.state_words(model)}
    return [w for w in words if len(w.split()) <= 2 or w in phi]
