"""momentgen — compile the d → ∞ moment hierarchy of online SGD on attention-indexed models.

Modules, in the direction data flows: `words` (letters, canonical words) → `hierarchy`
(the demand-driven sparse program of the ODE hierarchy) and `losses` → `potential`
(Φ and its gradients) → `config`, `initial` → `truncation` (the vector field, one numba
kernel) → `integrate` (solve with a validity horizon), `emit` (generated modules),
`closures`; the reference side is `simulate` (online SGD, finite-d matrix flow) and
`compare`. Conventions and equations: MATH.md in the project's spec.

The most used names are re-exported here, loaded on first use:

>>> mg.canonical("S2 S1", "tied")
'S1 S2'
"""

import importlib

__version__ = "0.1.0"

from .errors import *  # noqa: F401,F403,E402
from .words import canonical, enumerate_words, format_word, letters, parse  # noqa: F401,E402

_LAZY = {
    "Model": "hierarchy", "build": "hierarchy", "Program": "hierarchy",
    "builtin": "losses", "parse_expression": "losses", "Potential": "potential",
    "load_config": "config", "parse_config": "config", "Truncation": "truncation",
    "solve": "integrate", "solve_config": "integrate", "solve_with_closure": "closures",
    "sgd": "simulate", "matrix_flow": "simulate", "compare": "compare",
}  # fmt: skip


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'momentgen' has no attribute {name!r}")
