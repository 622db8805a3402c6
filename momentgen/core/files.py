"""Output files: written atomically, their paths checked before the work that fills them.

Every file momentgen writes (JSON results, CSV tables, figures, generated modules, kernels)
goes through `write_atomic`: a temporary file in the same directory, then a rename, so a
reader — or a disk that fills up, or a run that is killed — leaves the previous good file in
place, never half of one. `check_writable` is called by every command before a long
computation, so a bad ``--out`` fails in a second, not after an hour.

An output is a regular file or a new path, never anything else: a device, a FIFO, a socket or a
directory is refused (`output_target`), and a symbolic link is written *through* (its target is
replaced, the link stays). `ensure_outputs` also refuses a set of outputs in which two are the
same file, or one is an input of the run (the configuration, a from-file matrix).
"""

import csv
import datetime
import io
import json
import os
import pathlib
import stat
import subprocess
import sys
import tempfile

from .errors import MomentgenError

__all__ = [
    "write_atomic",
    "check_writable",
    "write_json",
    "write_csv",
    "write_series_csv",
    "ensure_writable",
    "ensure_outputs",
    "output_target",
    "check_regular_file",
    "checked_path",
    "read_regular_file",
    "save_figure",
    "provenance",
    "PAPER_FORMATS",
    "MAX_STORE_ENTRY",
]


def output_target(path):
    """The file a write to ``path`` replaces: ``path`` itself, or the final target of a symbolic link.

    Raises `MomentgenError` (one line, naming the path) for an empty path, and for a path that exists
    and is not a regular file (a directory, a device such as ``/dev/null``, a FIFO, a socket): such a
    path is never replaced by a file.
    """
    if str(path).strip() == "":
        raise MomentgenError("an output path is empty: name a file, e.g. --json out/run.json")
    path = pathlib.Path(checked_path(path, "an output path"))
    target = pathlib.Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        return target
    except OSError as error:
        raise MomentgenError(f"cannot write {str(path)!r}: {error.strerror or error}") from None
    if not stat.S_ISREG(mode):
        what = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a device, FIFO or socket)"
        raise MomentgenError(f"refusing to write {str(path)!r}: it is {what}; name a regular file or a new path")
    return target


def checked_path(path, what):
    """``path`` unchanged when the operating system can take it; a path with a NUL byte (no file can have one:
    Python's own error would be a traceback) is a one-line `MomentgenError` naming ``what``."""
    if "\0" in str(path):
        raise MomentgenError(f"{what} {str(path)!r} holds a NUL byte (\\0): no file can be named so")
    return path


def check_regular_file(path, max_bytes, what):
    """The size of an input file after checking that it is a regular file (not a device such as
    ``/dev/zero``, a FIFO or a directory, which would hang or exhaust memory) of at most ``max_bytes``;
    a `MomentgenError` naming ``what`` and the path otherwise. A missing file is `FileNotFoundError`."""
    # O_NONBLOCK: a FIFO opens at once instead of waiting for a writer
    fd = os.open(checked_path(path, what), os.O_RDONLY | os.O_NONBLOCK)
    try:
        return _checked_size(os.fstat(fd), path, max_bytes, what)
    finally:
        os.close(fd)


def read_regular_file(path, max_bytes, what):
    """The bytes of a regular file of at most ``max_bytes`` (`check_regular_file`), read once."""
    fd = os.open(checked_path(path, what), os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        _checked_size(os.fstat(fd), path, max_bytes, what)
        return handle.read(max_bytes + 1)[:max_bytes]


def _checked_size(info, path, max_bytes, what):
    if not stat.S_ISREG(info.st_mode):
        raise MomentgenError(f"{what} {str(path)!r} is not a regular file (a device, FIFO or directory): name a file")
    if info.st_size > max_bytes:
        raise MomentgenError(f"{what} {str(path)!r} is {info.st_size:.3g} bytes; the limit is {max_bytes:.3g}")
    return info.st_size


def write_atomic(path, data):
    """Write ``data`` (str or bytes) to ``path`` so that readers see the old file or the new
    one, never half of one; the file gets the usual permissions (0666 minus the umask). A symbolic
    link is written through (`output_target`); an error (a full disk, a read-only folder) is a
    `MomentgenError` that names the path."""
    path = output_target(path)
    try:
        _replace_atomically(path, data.encode() if isinstance(data, str) else data)
    except OSError as error:
        raise MomentgenError(f"cannot write {str(path)!r}: {error.strerror or error}") from None


def _replace_atomically(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())  # a full disk fails here, before the rename, not after
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def check_writable(path):
    """Raise `OSError` (with the reason) unless a file can be created at ``path``: its directory is
    created if missing and a probe file is written and removed there. Call it before a long
    computation whose result goes to ``path``. A path that is not a regular file (`output_target`)
    is a `MomentgenError`."""
    path = output_target(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, probe = tempfile.mkstemp(dir=path.parent, prefix=".probe-", suffix=".tmp")
    os.close(fd)
    os.unlink(probe)


def ensure_writable(*paths):
    """`check_writable` for each path, as a `MomentgenError` that names the path and the reason."""
    for path in paths:
        try:
            check_writable(path)
        except OSError as error:
            raise MomentgenError(f"cannot write {str(path)!r}: {error.strerror or error}") from None


def ensure_outputs(outputs, inputs=()):
    """Check a run's outputs before it starts: each writable (`ensure_writable`), no two the same file
    (``--json res.csv`` would have the CSV beside it overwrite the JSON), none an input of the run
    (``--json base.toml`` would overwrite the configuration). ``outputs`` are ``(role, path)`` pairs,
    ``inputs`` paths (None entries are skipped)."""
    seen = {}
    for role, path in outputs:
        ensure_writable(path)
        key = _identity(path)
        if key in seen:
            raise MomentgenError(
                f"{role} {str(path)!r} is the same file as the {seen[key][0]} {str(seen[key][1])!r} this run also "
                "writes: choose another name"
            )
        seen[key] = (role, path)
    for path in inputs:
        if path is not None and _identity(path) in seen:
            role, out = seen[_identity(path)]
            raise MomentgenError(f"{role} {str(out)!r} is an input of this run ({str(path)!r}): choose another name")


def _identity(path):
    """What makes two paths the same file: the real absolute path (links and ``..`` resolved)."""
    return os.path.realpath(os.path.abspath(path))


def write_json(path, data):
    """Write ``data`` as JSON atomically; a non-finite number is refused (JSON has none), never written."""
    try:
        text = json.dumps(data, allow_nan=False, default=_plain)
    except ValueError as error:
        raise MomentgenError(
            f"refusing to write {str(path)!r}: {error} (a non-finite number reached the output)"
        ) from None
    write_atomic(path, text)


def write_csv(path, header, rows):
    """Write a CSV table (``header``, then ``rows``) atomically."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    writer.writerows(rows)
    write_atomic(path, buffer.getvalue())


def write_series_csv(path, t, series):
    """A trajectory as CSV: column ``t``, then one column per series (``{name: values}``)."""
    names = list(series)
    write_csv(path, ["t", *names], ([time, *(series[n][i] for n in names)] for i, time in enumerate(t)))


def save_figure(figure, path, formats=None, **options):
    """``figure.savefig`` into memory, then `write_atomic` (the format from the suffix); with
    ``formats`` (e.g. ``("png", "svg", "pdf")``) once per format, the suffix replaced."""
    for suffix in formats or (pathlib.Path(path).suffix.lstrip(".") or "png",):
        buffer = io.BytesIO()
        figure.savefig(buffer, format=suffix, **options)
        write_atomic(pathlib.Path(path).with_suffix(f".{suffix}"), buffer.getvalue())


def provenance(config=None):
    """What produced an output: momentgen's version, the command line, the UTC date, the git commit
    of the working directory's repository (if any) and the configuration (its source, hash, tables, and
    ``file_hash``: the digest of the source file as it is, before the overrides the run applied)."""
    from .version import __version__  # noqa: PLC0415 - the package imports this module

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = None
    out = {
        "momentgen": __version__,
        "command": " ".join(["momentgen", *sys.argv[1:]]) if sys.argv[0].endswith("momentgen") else " ".join(sys.argv),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "git_commit": commit,
    }
    if config is not None:
        out["config"] = {"source": config.source, "hash": config.digest, "tables": config.raw}
        if config.source:  # the file as shipped, before any override: what `tests/core/test_figures.py` compares
            out["config"]["file_hash"] = config.file_digest
    return out


def _plain(value):
    """numpy arrays and scalars as JSON lists and numbers."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


#: The largest result-store entry read back (`momentgen.core.store`): a long curve with spectra is a few MB.
MAX_STORE_ENTRY = 512 * 2**20

#: The formats every example figure is written in (a paper wants a vector copy).
PAPER_FORMATS = ("png", "svg", "pdf")
