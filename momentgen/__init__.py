"""momentgen — compile the d → ∞ moment hierarchy of online SGD on attention-indexed models.

The notebook API (`momentgen.api`), loaded on first use::

    import momentgen as mg
    cfg = mg.load_config("fig4_linear", truncation={"degree": 6})  # a path, a dict or an example
    res = mg.solve(cfg)                    # a Result: .to_pandas(), .plot(), .to_json()
    sgd = mg.simulate(cfg, d=200)          # the same for online SGD
    mg.compare(cfg), mg.verify(cfg), mg.sweep(cfg, {"model.gamma": [0.0, 0.1]})

Modules, in the direction data flows: `words` (letters, canonical words) → `hierarchy`
(the demand-driven sparse program of the ODE hierarchy) and `losses` → `potential`
(Φ and its gradients) → `config`, `initial` → `truncation` (the vector field, one numba
kernel) → `integrate` (solve with a validity horizon), `emit` (generated modules),
`closures`; the reference side is `reference` (online SGD, finite-d matrix flow);
`comparison` and `verification` put them side by side; `api` is the notebook interface.
Model kinds live in `momentgen.models`, one module each.

>>> mg.canonical("S2 S1", "tied")
'S1 S2'
"""

import importlib

__version__ = "0.2.0"

from .errors import *  # noqa: F401,F403,E402
from .words import canonical, enumerate_words, format_word, letters, parse  # noqa: F401,E402

_LAZY = {
    "Model": "hierarchy",
    "build": "hierarchy",
    "Program": "hierarchy",
    "builtin": "losses",
    "parse_expression": "losses",
    "Potential": "potential",
    "load_config": "config",
    "parse_config": "config",
    "Config": "config",
    "Truncation": "truncation",
    "Result": "results",
    "solve": "api",
    "simulate": "api",
    "compare": "api",
    "verify": "api",
    "sweep": "api",
    "solve_with_closure": "closures",
    "sgd": "reference",
    "matrix_flow": "reference",
}


#: Submodules reachable as attributes without an import of their own (``momentgen.examples.names()``).
_SUBMODULES = ("examples", "figures", "oracles")


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'momentgen' has no attribute {name!r}")


def __dir__():
    """Tab completion sees the lazily loaded names too."""
    return sorted(set(globals()) | set(_LAZY) | set(_SUBMODULES))
