"""The population risk of a theory trajectory (MATH.md §12): Φ at the order parameters along it.

The risk ``E[ℓ]`` is Φ itself at the state (for a kind with a mean at the slaved ``m*(q)``, followed
along the run from the branch the fast phase reached). It is read from the trajectory's order words
with the same `momentgen.truncation.Truncation` accessors the right-hand side uses, so it needs no
extra integration. Accuracy: the state's own error propagates into it *absolutely*; where the risk
is small it is a difference of O(1) moments (mse: ``2(q11 − 2q12 + q22)``), so its relative error grows
like (moment error)/risk — read a risk far below the closure's estimate as unresolved.
"""

import numpy as np

from .errors import STATE_ERRORS

__all__ = ["theory_risk", "relative_risk_estimate", "RISK_TOL"]

#: The relative accuracy of the risk a closure vouches for (``risk_valid_until``): 10 %, a tenth of a decade
#: on a log axis.
RISK_TOL = 0.1


def theory_risk(problem, series, means=None):
    """Φ along ``series`` (canonical word → array over the run's times), on the run's branch ``means``
    (a kind with a mean; default the problem's). NaN from the first state Φ cannot be evaluated at
    (a stopped run's series end before it)."""
    truncation = problem.source(means).truncation
    words = truncation.program.words
    length = len(next(iter(series.values()))) if series else 0
    columns = [np.asarray(series[w], float) if w in series else np.zeros(length) for w in words]
    risk, state = np.full(length, np.nan), truncation.state
    for i in range(length):
        y = np.array([column[i] for column in columns])
        try:
            risk[i] = truncation.state_and_value(y, state)[1].phi
            state = truncation.advanced(y, state)  # the branch of m* followed from state to state
        except STATE_ERRORS:
            break
    return risk


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
