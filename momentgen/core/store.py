"""A result store: a run computed once is read back, never recomputed, and never trusted blindly.

``mg.solve/simulate/compare/verify/sweep(..., cache=PATH or True)`` and the CLI's ``--cache`` keep each result as a
JSON file named by its *key*: the sha256 of the job, the configuration's digest, the content of every file it reads
(a from-file init or Σ, a schedule table), every argument that changes the numbers, and momentgen's version. A hit
returns the same numbers without computing (a sweep resumes where it stopped: each point is stored as it ends).

An entry is data, never code (JSON, not pickle). It is used only when it parses, names the key it is filed under,
and its payload hashes to the digest it records; anything else — a truncated file, an edited number, an entry
another version or configuration wrote, a file that is not a regular one — is refused with a warning and
recomputed (then overwritten, atomically). ``cache=True`` is ``$MOMENTGEN_CACHE`` or ``~/.cache/momentgen``.

joblib.Memory was the obvious library; it keys on a pickle of the arguments (a `Config` object: a digest of its
Python representation, not of the numbers it means), stores pickles (loading one runs code, which a store shared
between users must not), and cannot say *why* an entry was refused. This module is the small part of it we need.
"""

import hashlib
import json
import os
import pathlib
import warnings

import numpy as np

from .errors import MomentgenError, shown
from .files import MAX_STORE_ENTRY, read_regular_file, write_json
from .version import __version__

__all__ = ["ResultStore", "open_store", "content_key"]


def open_store(cache):
    """The `ResultStore` of a ``cache`` argument: None/False → None (no store), True → the default folder, a path →
    that folder; anything else is a one-line `MomentgenError`."""
    if cache is None or cache is False:
        return None
    if cache is True:
        folder = os.environ.get("MOMENTGEN_CACHE") or pathlib.Path.home() / ".cache" / "momentgen"
        return ResultStore(folder)
    if isinstance(cache, (str, os.PathLike)) and str(cache).strip() and "\0" not in str(cache):
        return ResultStore(cache)
    raise MomentgenError(f"cache must be True, False, None or a folder's path, got {shown(cache)}")


def content_key(config):
    """What a configuration's numbers depend on: its digest and the sha256 of every file it reads besides itself."""
    files = []
    for path in config.input_paths():
        if path != config.source:
            files.append(hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest())
    return {"config": config.digest, "files": files}


class ResultStore:
    """Results filed by key in ``folder`` (module docstring). `get` returns a stored payload or None; `put` files
    one."""

    def __init__(self, folder):
        self.folder = pathlib.Path(folder)

    def key(self, job, config, **arguments):
        """The sha256 key of ``job`` on ``config`` with ``arguments`` (JSON-able values: what changes the numbers)."""
        text = json.dumps(
            {"job": job, **content_key(config), "arguments": _plain(arguments), "momentgen": __version__},
            sort_keys=True,
        )
        return hashlib.sha256(text.encode()).hexdigest()

    def path(self, key):
        return self.folder / f"{key}.json"

    def get(self, key):
        """The payload filed under ``key``, or None: missing, or refused (a `UserWarning` says why)."""
        path = self.path(key)
        if not path.exists() and not path.is_symlink():
            return None
        try:
            entry = json.loads(read_regular_file(path, MAX_STORE_ENTRY, "result store entry").decode())
            problem = _problem(entry, key)
        except (MomentgenError, OSError, UnicodeDecodeError, ValueError) as error:
            problem = f"unreadable ({error})"
        if problem is None:
            return entry["payload"]
        warnings.warn(f"result store: {path.name} refused ({problem}); recomputing", UserWarning, stacklevel=3)
        return None

    def put(self, key, job, payload):
        """File ``payload`` (a JSON-able dict) under ``key``, with the digest that `get` checks."""
        payload = _plain(payload)
        write_json(self.path(key), {"key": key, "job": job, "momentgen": __version__, "sha256": _digest(payload),
                                    "payload": payload})  # fmt: skip


def _problem(entry, key):
    """Why an entry cannot be trusted, or None."""
    if not isinstance(entry, dict) or not {"key", "payload", "sha256"} <= set(entry):
        return "not an entry of this store"
    if entry["key"] != key:
        return "filed under another key (another configuration, argument or version)"
    if entry["sha256"] != _digest(entry["payload"]):
        return "its payload does not match its digest (edited or damaged)"
    return None


def _digest(payload):
    return hashlib.sha256(json.dumps(payload, sort_keys=True, allow_nan=False).encode()).hexdigest()


def _plain(value):
    """JSON-able: arrays as lists, numpy scalars as numbers, non-finite floats as None."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, np.generic):
        return _plain(value.item())
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def array(values):
    """A stored list (nested for a matrix) back as a float array (None — a non-finite value when stored — as NaN)."""
    return np.array(_nan(values), dtype=float)


def _nan(values):
    return [_nan(v) if isinstance(v, list) else (np.nan if v is None else v) for v in values]
