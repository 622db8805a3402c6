"""Arguments as the CLI and the Python API both take them: one validation, one `ConfigError` that names
the argument (never a bare TypeError or ValueError). Each value is validated again by the
configuration key it sets (`momentgen.setting.config`)."""

import numpy as np

from ..core.errors import shown
from .config import ConfigError

__all__ = ["seed_list", "int_list", "names"]


def seed_list(seeds, name="seeds"):
    """Seeds as the CLI and the API both take them: a count N (seeds 0..N−1) or a list of integers ≥ 0;
    anything else is a `ConfigError` naming ``name``. (Validated again by ``[sgd] seeds``.)"""
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        if not 1 <= seeds <= 100_000:
            raise ConfigError(f"{name} as a count must be between 1 and 100000, got {seeds}")
        return list(range(seeds))
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, (list, tuple, range, np.ndarray)):
        raise ConfigError(f"{name} must be a count or a list of integers ≥ 0, e.g. [0, 1], got {shown(seeds)}")
    return [int(s) if isinstance(s, np.integer) else s for s in seeds]


def int_list(values, name):
    """A list of integers given as a list/tuple (or one integer); a string such as "10,20" or a float is a
    `ConfigError` naming ``name`` (each value is validated again by its ``[table] key``)."""
    if isinstance(values, int) and not isinstance(values, bool):
        values = [values]
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple, range, np.ndarray)) or not len(values):
        raise ConfigError(f"{name} must be a non-empty list of integers, got {shown(values)}")
    out = [int(v) if isinstance(v, np.integer) else v for v in values]
    bad = [v for v in out if isinstance(v, bool) or not isinstance(v, int)]
    if bad:
        raise ConfigError(f"{name} must be a list of integers; {shown(bad[0])} is not one")
    return out


def names(values, name):
    """A name or a non-empty list of names (e.g. closures)."""
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, (list, tuple)) or not values or not all(isinstance(v, str) for v in values):
        raise ConfigError(f"{name} must be a name or a non-empty list of names, got {shown(values)}")
    return list(values)
