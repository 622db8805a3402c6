"""momentgen — compile the d → ∞ moment hierarchy of online SGD on attention-indexed models.

Modules, in the direction data flows: `words` (letters, canonical words) →
`hierarchy` (the demand-driven sparse program of the ODE hierarchy) → … ;
`matrices` evaluates words on finite-d matrices (the reference side).
Conventions and equations: MATH.md in the project's spec.
"""

__version__ = "0.1.0"

from .errors import *  # noqa: F401,F403
from .words import canonical, enumerate_words, format_word, letters, parse  # noqa: F401
