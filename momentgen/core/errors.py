"""The error hierarchy: every error momentgen raises derives from `MomentgenError`.

Each message says what was wrong *and* what to change. Errors about bad user input
also derive from `ValueError`, so generic callers can catch them the usual way.
"""

__all__ = [
    "MomentgenError",
    "WordError",
    "ModelError",
    "ConfigError",
    "UnsupportedLoss",
    "PotentialError",
    "InfeasibleState",
    "NonFinitePotential",
    "NoSlavedMean",
    "STATE_ERRORS",
    "shown",
]


def shown(value, limit=60):
    """A value as an error message shows it: its repr, cut after ``limit`` characters (a 200 kB string is
    not echoed in full)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} characters)"


class MomentgenError(Exception):
    """Base class of every error momentgen raises on purpose."""


class WordError(MomentgenError, ValueError):
    """A word or letter that is not valid for the model (unknown letter, bad index, empty)."""


class ModelError(MomentgenError, ValueError):
    """A model, degree, trainable set or observable list that cannot be compiled."""


class ConfigError(ModelError):
    """A configuration file that cannot be used as written."""


class UnsupportedLoss(MomentgenError, ValueError):
    """A loss that cannot be parsed, is not allowed, or cannot be differentiated as needed."""


class PotentialError(MomentgenError, ValueError):
    """Φ cannot be evaluated: infeasible order parameters, a non-finite value, no m*(q)."""


class InfeasibleState(PotentialError):
    """Order parameters outside the feasible set (Q1 ± Q2 not PSD; an untied student collapsed, D_k ≤ 0).

    A run that meets one stops with ``status = "left-feasible-set"``: the truncation is not valid there.
    """

    status = "left-feasible-set"


class NonFinitePotential(PotentialError):
    """Φ or a derivative is not finite at a state: the loss's Gaussian expectation diverges there
    (e.g. ``exp(G²)`` once Var G ≥ 1/2). A run stops with ``status = "non-finite-potential"``."""

    status = "non-finite-potential"


class NoSlavedMean(PotentialError):
    """Untied: ∂Φ/∂m = 0 has no strongly convex solution m*(q) at a state (the fast phase has no stable
    fixed point; MATH.md §4). A run stops with ``status = "no-slaved-mean"``."""

    status = "no-slaved-mean"


#: The errors a state can raise that a run cannot go past: it stops there with the error's status.
STATE_ERRORS = (InfeasibleState, NonFinitePotential, NoSlavedMean)
