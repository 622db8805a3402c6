"""Compile sympy expressions into cached numba kernels.

This module knows nothing of words, losses or models: it turns a list of scalar sympy
expressions in a list of variables into one numba function, written as source to a
content-hashed file in the cache directory (``$MOMENTGEN_CACHE``, default
``~/.cache/momentgen``) and imported from there, so numba's own on-disk cache applies and
a second process loads the machine code instead of compiling again. Files are written
atomically (temporary file, then rename).

Threat model: the cache is trusted as much as the user's own files, and no more. Its directory is
created owner-only (0700); a directory owned by another user, or writable by group or others, is
refused (a warning, and a private temporary cache for this process). Each kernel's sha256 is kept
in an index the tool writes (``kernels/index.json``), outside the files it protects: a file that does
not match (edited, truncated, corrupted, planted) is rebuilt, never imported. numba's own cache of a
kernel (``kernels/__pycache__``) lives inside that owner-only directory. `clear_cache` deletes only
what the index lists. A cache directory that cannot be written is replaced, with a warning, by a
temporary one for this process; kernels found in the read-only one are verified against its index
and copied there, so nothing is recompiled from sympy that was already derived.
"""

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import pathlib
import sys
import tempfile
import warnings

import sympy
from sympy.printing.pycode import PythonCodePrinter

from .errors import MomentgenError
from .files import check_writable, write_atomic

__all__ = ["cache_dir", "clear_cache", "compile_pointwise", "compile_weighted_sum"]


class _KernelPrinter(PythonCodePrinter):
    """Python source numba can type: an integer beyond int64's exact range is printed as a float
    (numba cannot type an integer literal past 2⁶³, and the kernel would fail on its first call)."""

    def _print_Integer(self, expr):
        return repr(float(expr)) if abs(int(expr)) > 2**53 else super()._print_Integer(expr)


_PRINTER = _KernelPrinter({"fully_qualified_modules": True, "standard": "python3"})
_TEMPLATE_VERSION = "momentgen-kernel-3"  # bump when the generated source changes shape


_FALLBACK = {}  # configured cache directory → the temporary one used instead this process


def configured_cache_dir():
    """The cache directory asked for: ``$MOMENTGEN_CACHE`` (an empty value counts as unset) or
    ``~/.cache/momentgen``."""
    value = os.environ.get("MOMENTGEN_CACHE", "").strip()
    return pathlib.Path(value).expanduser() if value else pathlib.Path.home() / ".cache" / "momentgen"


def cache_dir():
    """The directory for generated kernels: the configured one if it is private to this user and can be
    written, else (with a warning, once per process) a private temporary one."""
    configured = configured_cache_dir()
    if configured in _FALLBACK:
        return _FALLBACK[configured]
    try:
        _private_directory(configured)
        _private_directory(configured / "kernels")
        check_writable(configured / "kernels" / ".probe")
        return configured
    except (OSError, MomentgenError) as error:
        fallback = pathlib.Path(tempfile.mkdtemp(prefix="momentgen-cache-"))
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        warnings.warn(
            f"kernel cache {str(configured)!r} cannot be written or is not private ({reason}); using "
            f"{str(fallback)!r} for this process (set MOMENTGEN_CACHE to a directory of your own, mode 0700, to "
            "keep compiled kernels)",
            stacklevel=2,
        )
        _FALLBACK[configured] = fallback
        return fallback


def _private_directory(path):
    """Create ``path`` owner-only if missing; refuse (MomentgenError) one owned by another user or
    writable by group or others (its kernels could be replaced by someone else's code)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.stat()
    if info.st_uid != os.getuid():
        raise MomentgenError(f"{str(path)!r} is owned by user {info.st_uid}, not by you ({os.getuid()})")
    if info.st_mode & 0o022:
        raise MomentgenError(f"{str(path)!r} is writable by group or others (mode {oct(info.st_mode & 0o777)})")


_INDEX = "index.json"


def _read_index(directory):
    """{kernel file name: sha256 of its bytes} the tool recorded in ``directory`` ({} if none or unreadable)."""
    try:
        data = json.loads((directory / _INDEX).read_text())
    except (OSError, ValueError):
        return {}
    kernels = data.get("kernels") if isinstance(data, dict) else None
    return {k: v for k, v in kernels.items() if isinstance(v, str)} if isinstance(kernels, dict) else {}


@contextlib.contextmanager
def _index_lock(directory):
    with open(directory / ".index.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _update_index(directory, name, digest):
    """Record (``digest``) or forget (None) one kernel in the index, under a lock shared by processes."""
    with _index_lock(directory):
        index = _read_index(directory)
        if digest is None:
            index.pop(name, None)
        else:
            index[name] = digest
        write_atomic(directory / _INDEX, json.dumps({"kernels": index}, sort_keys=True, indent=0))


def clear_cache():
    """Remove every kernel this tool recorded in its index (and numba's caches of them) from the cache;
    returns how many files were removed. Nothing the index does not list is touched. Kernels are
    rebuilt on their next use."""
    folder = cache_dir() / "kernels"
    if not folder.is_dir():
        return 0
    removed = 0
    with _index_lock(folder):
        for name in _read_index(folder):
            stem = pathlib.Path(name).stem
            if pathlib.Path(name).name != name or not stem.startswith("k_"):
                continue  # an index entry that names another folder's file is ignored, never followed
            ours = [folder / name, *(folder / "__pycache__").glob(f"{stem}.*")]
            for path in ours:
                if path.is_file() and not path.is_symlink():
                    path.unlink()
                    removed += 1
        (folder / _INDEX).unlink(missing_ok=True)
    return removed


_PRELUDE = [
    "import math",
    "import numba",
    "import numpy as np",
    "",
    "",
    "@numba.njit(cache=True, nogil=True, error_model='numpy')",
]


def _cse(outputs):
    """(replacements, reduced) of sympy's common-subexpression elimination, after `_shared_exponentials`."""
    definitions, outputs = _shared_exponentials(outputs)
    replacements, reduced = sympy.cse(outputs, symbols=sympy.numbered_symbols("c_"), optimizations="basic")
    return definitions + replacements, reduced


_MAX_EXP_POWER = 4  # exp(n x) for |n| ≤ this is written exp(x)ⁿ: products (and a division) instead of an exponential


def _shared_exponentials(outputs):
    """Name each exponential once: exp(n·x) (|n| = 1 … `_MAX_EXP_POWER`) becomes ``exp_k**n`` with ``exp_k = exp(x)``.

    sympy writes exp(x)² as exp(2x), which common-subexpression elimination cannot share with exp(x)
    (a softmax's second derivatives hold both): one exponential per distinct x, and a power (compiled to
    products) per multiple. Exponentials of expressions that hold an exponential are left as they are.
    Returns the definitions [(exp_k, exp(x))] to evaluate first, and the rewritten outputs.
    """
    names, substitution = {}, {}
    atoms = set().union(*(sympy.sympify(e).atoms(sympy.exp) for e in outputs)) if outputs else set()
    for atom in sorted(atoms, key=sympy.default_sort_key):  # sorted: the same source (and cache name) every run
        argument = atom.args[0]
        if argument.has(sympy.exp):
            continue
        sign = -1 if argument.could_extract_minus_sign() else 1
        n, x = (sign * argument).as_content_primitive()
        if not (n.is_Integer and 1 <= n <= _MAX_EXP_POWER):
            n, x = sympy.Integer(1), sign * argument
        n = sign * int(n)
        if x not in names:
            names[x] = sympy.Symbol(f"exp_{len(names)}")
        substitution[atom] = names[x] ** n
    return [(name, sympy.exp(x)) for x, name in names.items()], [
        sympy.sympify(e).xreplace(substitution) for e in outputs
    ]


def _weighted_sum_source(groups, variables):
    lines = [
        "# Generated by momentgen.codegen: weighted sums of expressions over sample points. Do not edit.",
        *_PRELUDE,
        "def kernel(Z, mean, F, w, group):",
        f"    out = np.zeros({len(groups[0])})",
        "    r = Z.shape[1]",
    ]
    for g, outputs in enumerate(groups):
        replacements, reduced = _cse(outputs)
        used = set().union(*(e.free_symbols for e in list(reduced) + [r for _, r in replacements]))
        lines += [f"    {'if' if g == 0 else 'elif'} group == {g}:", "        for s in range(Z.shape[0]):"]
        for a, v in enumerate(variables):  # the point mean + F Z[s], only in the variables this group reads
            if v in used:
                lines += [
                    f"            {v.name} = mean[{a}]",
                    "            for c in range(r):",
                    f"                {v.name} += F[{a}, c] * Z[s, c]",
                ]
        lines += [f"            {sym} = {_PRINTER.doprint(expr)}" for sym, expr in replacements]
        lines += ["            ws = w[s]"]
        lines += [f"            out[{n}] += ws * ({_PRINTER.doprint(e)})" for n, e in enumerate(reduced) if e != 0]
    return "\n".join(lines + ["    return out", ""])


def _pointwise_source(outputs, variables):
    replacements, reduced = _cse(outputs)
    return "\n".join(
        [
            "# Generated by momentgen.codegen: expressions evaluated at each sample point. Do not edit.",
            *_PRELUDE,
            "def kernel(X):",
            f"    out = np.zeros((X.shape[0], {len(outputs)}))",
            "    for s in range(X.shape[0]):",
            *[f"        {v.name} = X[s, {a}]" for a, v in enumerate(variables)],
            *[f"        {sym} = {_PRINTER.doprint(expr)}" for sym, expr in replacements],
            *[f"        out[s, {n}] = {_PRINTER.doprint(e)}" for n, e in enumerate(reduced)],
            "    return out",
            "",
        ]
    )


def compile_pointwise(outputs, variables, key=None):
    """A numba function ``kernel(X) -> [f_1(X[s]), …, f_n(X[s])]`` for each row s (shape (n_points, n)).

    ``key``: see `compile_weighted_sum`.
    """
    return _cached(key, variables, lambda: _pointwise_source(list(_force(outputs)), list(variables)))


def compile_weighted_sum(groups, variables, key=None):
    """A numba function ``kernel(Z, mean, F, w, g) -> Σ_s w[s] · [f_g1(x_s), …, f_gn(x_s)]``, ``x_s = mean + F Z[s]``.

    Parameters
    ----------
    groups : list of lists of sympy expressions, each of the same length n; ``g`` selects one
        (or a zero-argument callable returning them, see ``key``)
    variables : list of sympy symbols, length p; entry ``a`` of ``x_s`` holds ``variables[a]``
    key : str, optional
        A text that determines the expressions (e.g. the srepr of the loss they derive
        from). With a key, a kernel already in the cache is loaded without deriving or
        printing anything (sympy's common-subexpression elimination is the slow part), and
        ``groups`` is only called when the kernel must be written.

    ``Z`` has shape (n_points, r) (a Gaussian rule's nodes), ``mean`` (p,), ``F`` (p, r) and ``w``
    (n_points,), all float64; the result has shape (n,). The points are formed inside the loop, only in
    the variables the group reads (no (n_points, p) array). Compile time grows with the size of the
    expressions (after common subexpression elimination), not with the number of points; the first call
    in a fresh cache compiles (seconds), later processes load it.
    """
    return _cached(key, variables, lambda: _weighted_sum_source([list(g) for g in _force(groups)], list(variables)))


def _force(value):
    return value() if callable(value) else value


def _cached(key, variables, make_source):
    """Load the kernel for ``key`` from the cache, or write ``make_source()`` and load that.

    Without a key the source is made and named by its own hash. A cached file is used only if
    its recorded hash matches its source; otherwise (or if importing it fails) it is rebuilt.
    """
    if key is None:
        source = make_source()
        name = f"k_{hashlib.sha256(source.encode()).hexdigest()[:20]}"
    else:
        text = f"{_TEMPLATE_VERSION}|{key}|{','.join(v.name for v in variables)}"
        name, source = f"k_{hashlib.sha256(text.encode()).hexdigest()[:20]}", None
    directory = cache_dir() / "kernels"
    path = directory / f"{name}.py"
    cached = _verified(directory, path.name)
    if cached is None and directory.parent != configured_cache_dir():  # a read-only cache may hold it
        cached = _verified(configured_cache_dir() / "kernels", path.name)
        if cached is not None:
            _write_kernel(path, cached)
    if cached is None:
        source = source if source is not None else make_source()
        _write_kernel(path, source)
    try:
        return _import_kernel(path)
    except Exception as error:  # noqa: BLE001 - a broken file of any kind is rebuilt once
        sys.modules.pop(f"momentgen_kernel_{path.stem}", None)
        warnings.warn(
            f"cached kernel {str(path)!r} failed to load ({type(error).__name__}); rebuilding it", stacklevel=3
        )
        _write_kernel(path, source if source is not None else make_source())
        return _import_kernel(path)


def _write_kernel(path, source):
    """Write a kernel's source and record its sha256 in the index beside it."""
    data = source.encode()
    write_atomic(path, data)
    _update_index(path.parent, path.name, hashlib.sha256(data).hexdigest())


def _verified(directory, name):
    """The source of a cached kernel if its bytes match the sha256 the index records for it, else None."""
    digest = _read_index(directory).get(name)
    if digest is None:
        return None
    try:
        data = (directory / name).read_bytes()
    except OSError:
        return None
    if hashlib.sha256(data).hexdigest() != digest:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


def _import_kernel(path):
    name = f"momentgen_kernel_{path.stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name].kernel
