"""The error of a law-based matrix model's stepper, measured on the problem it runs (MATH.md §8).

A matrix model drawn from the d = ∞ law is stepped by Runge–Kutta–Chebyshev (`momentgen.setting.flow.CHEBYSHEV`
for one draw, `momentgen.setting.flow.CHEBYSHEV_DRAWS` for an ensemble's), whose global error depends on the kind
and the loss far more than on the size: on a Gaussian student against a power-law Σ at the draws' rtol 1e-3 it is
9e-4 of the words (relative to max(1, |w|)) in the tied kind and 5e-3 in the symmetric one, 6e-4 and 5.5e-3 of the
risk; at n = 32 and n = 128 it agrees within 1.1× on the words (`tests/dynamics/test_stepper_check.py`). Every
leg of an estimate is stepped alike, so the legs' gap does not see it. `stepper_error` measures it on the run's own
problem — one flat-mixed draw of `CHECK_SIZE` stepped by the run's stepper and by the same method `TIGHTER` times
tighter — and the closure carries 3× what it finds (`momentgen.dynamics.closures`; an ensemble runs the check's two
sides in its own batch, `momentgen.dynamics.ensemble.run_ensembles`). Time is on the kind's axis.
"""

import numpy as np

from ..compiler.initial import law_factors
from ..setting.flow import DOUBLE
from .risk import theory_risk

__all__ = ["CHECK_SIZE", "FINEST_RTOL", "TIGHTER", "checked_run", "compared", "stepper_error", "tighter"]

#: The size of the draw the stepper is checked on (a power of two: flat-mixed, as an ensemble's draws are).
CHECK_SIZE = 32
#: How much tighter (rtol and atol) the reference run of the check is than the stepper checked.
TIGHTER = 100.0
#: The tightest rtol a reference takes: DOP853 honours none below about 2e-14 in double precision.
FINEST_RTOL = 1e-13


def stepper_error(problem, means, stepper):
    """The error of ``stepper`` (a `momentgen.setting.flow.run` ``dense_stepper``: method, rtol, atol) on ``problem``
    (κ = 0, from the law) started on the branch ``means``: `compared` runs of `checked_run` by ``stepper`` and by
    its `tighter` twin."""
    return compared(problem, checked_run(problem, means, stepper), checked_run(problem, means, tighter(stepper)))


def tighter(stepper):
    """``stepper`` with rtol and atol `TIGHTER` times smaller (rtol not below `FINEST_RTOL`) and its velocity in
    double precision: the reference of a check, which so measures a single-precision stepper's rounding too."""
    rtol, atol = max(stepper["rtol"] / TIGHTER, FINEST_RTOL), stepper["atol"] / TIGHTER
    return {**stepper, "rtol": rtol, "atol": atol, "precision": DOUBLE}


def checked_run(problem, means, stepper):
    """(the words' trajectories (words, times), the risk) of one flat-mixed law draw of `CHECK_SIZE` moved by
    ``stepper`` from the branch ``means`` — one side of a check (a task of an ensemble's batch too)."""
    factors = law_factors(problem.model, problem.specs, CHECK_SIZE, data=problem.data, flat=True)
    run = problem.matrix_flow(factors, means, stepper=stepper)
    return np.array([run.series[w] for w in problem.words]), theory_risk(problem, run.series, means)


def compared(problem, loose, exact):
    """``{"words": …, "risk": …}``: running maxima over the output times both `checked_run` results reached of the
    gap between ``loose`` and ``exact`` — the words' relative to max(1, |w|), the risk's relative to it."""
    reached = min(loose[0].shape[1], exact[0].shape[1])
    moved, truth = loose[0][:, :reached], exact[0][:, :reached]
    words = np.max(np.abs(moved - truth) / np.maximum(1.0, np.abs(truth)), axis=0)
    risk, reference = loose[1][:reached], exact[1][:reached]
    with np.errstate(divide="ignore", invalid="ignore"):
        gap = np.where(risk == reference, 0.0, np.abs(risk / reference - 1))
    return {"words": np.maximum.accumulate(words), "risk": np.maximum.accumulate(np.nan_to_num(gap, nan=np.inf))}
