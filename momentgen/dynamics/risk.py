"""The population risk of a theory trajectory (MATH.md §12): Φ at the order parameters along it.

The risk ``E[ℓ]`` is Φ itself at the state (for a kind with a mean at the slaved ``m*(q)``, followed
along the run from the branch the fast phase reached). It is read from the trajectory's order words
with the same `momentgen.compiler.truncation.Truncation` accessors the right-hand side uses, so it needs no
extra integration. Accuracy: the state's own error propagates into it *absolutely*; where the risk
is small it is a difference of O(1) moments (mse: ``2(q11 − 2q12 + q22)``), so its relative error grows
like (moment error)/risk — read a risk far below the closure's estimate as unresolved.
"""

import numpy as np

from ..compiler.potential import Potential
from ..core.errors import STATE_ERRORS

__all__ = [
    "theory_risk",
    "theory_excess_risk",
    "relative_risk_estimate",
    "local_slope",
    "settled_slope",
    "RISK_TOL",
    "SETTLED",
]

#: The relative accuracy of the risk a closure vouches for (``risk_valid_until``): 10 %, a tenth of a decade
#: on a log axis.
RISK_TOL = 0.1


def theory_risk(problem, series, means=None):
    """Φ along ``series`` (canonical word → array over the run's times), on the run's branch ``means``
    (a kind with a mean; default the problem's). NaN from the first state Φ cannot be evaluated at
    (a stopped run's series end before it)."""
    truncation = problem.source(means).truncation
    length = len(next(iter(series.values()))) if series else 0
    risk, state = np.full(length, np.nan), truncation.state
    for i, y in enumerate(_states(truncation, series, length)):
        try:
            risk[i] = truncation.state_and_value(y, state)[1].phi
            state = truncation.advanced(y, state)  # the branch of m* followed from state to state
        except STATE_ERRORS:
            break
    return risk


def theory_excess_risk(problem, series, risk, means=None):
    """With label noise (MATH.md §13), the excess risk along ``series``: Φ of the noiseless teacher's loss
    (`momentgen.setting.losses.Loss.clean`) at the same order parameters — ``risk − σ²`` per output when the noise is
    additive (`Loss.noise_offset`), else that loss's own potential along the run. None for a noiseless loss."""
    loss = problem.loss
    if not loss.noisy:
        return None
    if loss.noise_offset is not None:
        return np.asarray(risk, float) - loss.noise_offset
    config = problem.config
    clean = Potential(loss.clean, problem.model.kind, C=config.settings.model.C, rtol=config.settings.loss.rtol)
    truncation = problem.source(means).truncation
    out, state = np.full(len(risk), np.nan), truncation.state
    for i, y in enumerate(_states(truncation, series, len(risk))):
        try:
            order = truncation.state_and_value(y, state)[0]
            out[i] = clean.at(*order).phi
            state = truncation.advanced(y, state)
        except STATE_ERRORS:
            break
    return out


def _states(truncation, series, length):
    """The state vectors (the truncation's words, 0 for those the series lacks) at each of ``length`` times."""
    columns = [np.asarray(series[w], float) if w in series else np.zeros(length) for w in truncation.program.words]
    return [np.array([column[i] for column in columns]) for i in range(length)]


def relative_risk_estimate(fine, others):
    """The running maximum over [0, t] of ``|risk_fine − risk_other| / min(|risk_fine|, |risk_other|)`` over the
    other resolutions of the same closure (arrays over the common times; NaN where a risk is missing).

    When the truth lies between the fine risk and another leg's (the Gauss and Gauss–Radau legs of the
    quadrature closure bracket a hard edge: one lets its smallest node escape, the other holds it at the
    edge), this bounds the fine risk's relative error; the minimum in the denominator keeps it a bound
    whichever side the truth is on. Inf where a leg's risk is 0 and the other's is not; None without legs."""
    if not others:
        return None
    fine = np.asarray(fine, float)
    gap = np.zeros(len(fine))
    for other in others:
        other = np.asarray(other, float)[: len(fine)]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.abs(fine - other) / np.minimum(np.abs(fine), np.abs(other))
        ratio = np.where(fine == other, 0.0, ratio)
        gap = np.maximum(gap, np.where(np.isnan(ratio), np.inf, ratio))
    return np.maximum.accumulate(gap)


#: How little the local slope may move over the last decade of t for `settled_slope` to call it an exponent.
SETTLED = 0.05


def local_slope(t, risk):
    """The local slope ``d log risk / d log t`` at each time (the derived column ``"risk_slope"``): second-order
    differences on the non-uniform grid of log t (`numpy.gradient`); NaN at t ≤ 0, where the risk is not positive or
    not finite, and on a grid of fewer than three usable points. What a power law's exponent is, once it has settled
    (`settled_slope`) — not before: an exact solution's local slope can move for decades (MATH.md §10)."""
    t, risk = np.asarray(t, float), np.asarray(risk, float)
    out = np.full(len(t), np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        usable = np.flatnonzero((t > 0) & (risk > 0) & np.isfinite(risk))
    if len(usable) < 3:
        return out
    breaks = np.flatnonzero(np.diff(usable) != 1)
    usable = usable[: breaks[0] + 1] if breaks.size else usable  # the first run of consecutive usable points
    if len(usable) >= 3:
        out[usable] = np.gradient(np.log(risk[usable]), np.log(t[usable]), edge_order=2)
    return out


def settled_slope(t, slope, tol=SETTLED, span=10.0):
    """Whether the local slope has settled into an exponent: ``(exponent, since, message)`` — the mean slope over the
    last ``span``-fold range of t (a decade) and where that range starts, when the slope moves by at most ``tol``
    over it; else ``(None, None, message)`` saying how far it still moves, or that the run does not span a decade.
    Reading a slope as an exponent before it has settled is the first-hour mistake this guards against."""
    t, slope = np.asarray(t, float), np.asarray(slope, float)
    ok = np.isfinite(slope) & (t > 0)
    if not ok.any() or t[ok][-1] / t[ok][0] < span:
        return None, None, f"the run does not span a factor {span:g} of t with a finite slope: no exponent can be read"
    end = t[ok][-1]
    window = ok & (t >= end / span)
    low, high = float(slope[window].min()), float(slope[window].max())
    if high - low <= tol:
        value = float(slope[window].mean())
        return (
            value,
            float(end / span),
            (
                f"settled: the local slope is {value:.3g} (within ±{(high - low) / 2:.2g}) on t ∈ "
                f"[{end / span:.3g}, {end:.3g}]"
            ),
        )
    return (
        None,
        None,
        (
            f"not settled: the local slope moves from {slope[window][0]:.3g} to {slope[window][-1]:.3g} on t ∈ "
            f"[{end / span:.3g}, {end:.3g}] (range {high - low:.2g} > {tol:g}): it is not yet an exponent"
        ),
    )
