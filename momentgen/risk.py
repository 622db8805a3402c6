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

__all__ = ["theory_risk"]


def theory_risk(problem, series, means=None):
    """Φ along ``series`` (canonical word → array over the run's times), on the run's branch ``means``
    (a kind with a mean; default the problem's). NaN from the first state Φ cannot be evaluated at
    (a stopped run's series end before it)."""
    truncation = problem.source(means).truncation
    words = truncation.program.words
    length = len(next(iter(series.values()))) if series else 0
    columns = [np.asarray(series[w], float) if w in series else np.zeros(length) for w in words]
    risk = np.full(length, np.nan)
    for i in range(length):
        y = np.array([column[i] for column in columns])
        try:
            risk[i] = truncation.state_and_value(y)[1].phi
            truncation.track(y)
        except STATE_ERRORS:
            break
    return risk
