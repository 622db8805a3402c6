"""momentgen — compile the d → ∞ moment hierarchy of online SGD on attention-indexed models.

The notebook API (`momentgen.interface.api`), loaded on first use::

    import momentgen as mg
    cfg = mg.load_config("fig4_linear", truncation={"degree": 6})  # a path, a dict or an example
    res = mg.solve(cfg)                    # a Result: .to_pandas(), .plot(), .to_json()
    sgd = mg.simulate(cfg, d=200)          # the same for online SGD
    mg.compare(cfg), mg.verify(cfg), mg.sweep(cfg, {"model.gamma": [0.0, 0.1]})

Subpackages, in the direction data flows (each imports only those before it; `reference` none of the
theory): `core` (plumbing) → `laws` (matrix laws, GNS representations, edges) → `models` (the kinds,
one module each, their letters and words) → `setting` (configuration, data, inits, losses, schedules,
finite-d matrices, the matrix-ODE engine) → `compiler` (hierarchy, potential, initial moments, the
numba kernel, generated modules) → `dynamics` (integration, closures, `Result`) · `reference` (online
SGD, the finite-d matrix flow) → `evidence` (oracles, comparison, verification) → `interface` (API, CLI).
The flat module paths of 0.2 (``momentgen.dynamics.closures``, ``momentgen.setting.config``, …) still import: `_MOVED`.

>>> mg.canonical("S2 S1", "tied")
'S1 S2'
"""

import importlib
import importlib.abc
import importlib.util
import sys

from .core.errors import *  # noqa: F403
from .core.version import __version__ as __version__
from .models.words import canonical as canonical
from .models.words import enumerate_words as enumerate_words
from .models.words import format_word as format_word
from .models.words import letters as letters
from .models.words import parse as parse

#: Where each module of the flat 0.2 layout lives now. ``import momentgen.closures`` (and every other old path
#: in this table, with its submodules) gives the very module object of its new home, so old notebooks, the
#: figures' ``drawn_by`` names and generated modules (``from momentgen.emit import load``) keep working.
_MOVED = {
    **dict.fromkeys(("errors", "progress", "parallel", "files", "codegen", "stepper", "figures", "display"), "core"),
    "store": "core",
    **dict.fromkeys(("representation", "edge", "commuting"), "laws"),
    "words": "models",
    **dict.fromkeys(("data", "inits", "losses", "schedules", "matrices", "spectra", "flow", "arguments"), "setting"),
    "config": "setting",
    **dict.fromkeys(("hierarchy", "program", "printers", "slaved_mean", "initial", "truncation"), "compiler"),
    **dict.fromkeys(("emit", "potential"), "compiler"),
    **dict.fromkeys(("integrate", "problem", "closure_base", "closures", "riccati", "risk"), "dynamics"),
    **dict.fromkeys(("ensemble", "results"), "dynamics"),
    **dict.fromkeys(("oracles", "comparison", "verification", "verification_plan", "evolution"), "evidence"),
    **dict.fromkeys(("api", "cli", "examples"), "interface"),
}
_RENAMED = {"_kernel": "compiler.kernel"}


def moved_path(name):
    """The current path of a module named by its 0.2 path (``"momentgen.closures"`` →
    ``"momentgen.dynamics.closures"``), or ``name`` itself when it did not move."""
    head, _, rest = name.removeprefix(f"{__name__}.").partition(".")
    if not name.startswith(f"{__name__}.") or (head not in _MOVED and head not in _RENAMED):
        return name
    new = _RENAMED.get(head) or f"{_MOVED[head]}.{head}"
    return ".".join(filter(None, [__name__, new, rest]))


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """An import of a 0.2 path loads the module at its new path and binds the old name to that same object."""

    def find_spec(self, fullname, path, target=None):
        return importlib.util.spec_from_loader(fullname, self) if moved_path(fullname) != fullname else None

    def create_module(self, spec):
        return importlib.import_module(moved_path(spec.name))

    def exec_module(self, module):
        """Nothing to run: the module at the new path has run already."""


sys.meta_path.insert(0, _MovedModules())

_LAZY = {
    "Model": "compiler.hierarchy",
    "build": "compiler.hierarchy",
    "Program": "compiler.hierarchy",
    "builtin": "setting.losses",
    "parse_expression": "setting.losses",
    "Potential": "compiler.potential",
    "load_config": "setting.config",
    "parse_config": "setting.config",
    "Config": "setting.config",
    "Truncation": "compiler.truncation",
    "Result": "dynamics.results",
    "solve": "interface.api",
    "simulate": "interface.api",
    "compare": "interface.api",
    "verify": "interface.api",
    "sweep": "interface.api",
    "solve_with_closure": "dynamics.closures",
    "sgd": "reference",
    "matrix_flow": "reference",
}


#: Submodules reachable as attributes without an import of their own (``momentgen.examples.names()``).
_SUBMODULES = {"examples": "interface.examples", "figures": "core.figures", "oracles": "evidence.oracles"}


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    if name in _SUBMODULES:
        return importlib.import_module(f".{_SUBMODULES[name]}", __name__)
    raise AttributeError(f"module 'momentgen' has no attribute {name!r}")


def __dir__():
    """Tab completion sees the lazily loaded names too."""
    return sorted(set(globals()) | set(_LAZY) | set(_SUBMODULES))
