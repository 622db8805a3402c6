"""The error hierarchy: every error momentgen raises derives from `MomentgenError`.

Each message says what was wrong *and* what to change. Errors about bad user input
also derive from `ValueError`, so generic callers can catch them the usual way.
"""

__all__ = ["MomentgenError", "WordError", "ModelError", "UnsupportedLoss", "PotentialError"]


class MomentgenError(Exception):
    """Base class of every error momentgen raises on purpose."""


class WordError(MomentgenError, ValueError):
    """A word or letter that is not valid for the model (unknown letter, bad index, empty)."""


class ModelError(MomentgenError, ValueError):
    """A model, degree, trainable set or observable list that cannot be compiled."""


class UnsupportedLoss(MomentgenError, ValueError):
    """A loss that cannot be parsed, is not allowed, or cannot be differentiated as needed."""


class PotentialError(MomentgenError, ValueError):
    """Φ cannot be evaluated: infeasible order parameters, a non-finite value, no m*(q)."""
