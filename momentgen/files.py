"""Output files: written atomically, their paths checked before the work that fills them.

Every file momentgen writes (JSON results, CSV tables, figures, generated modules, kernels)
goes through `write_atomic`: a temporary file in the same directory, then a rename, so a
reader — or a disk that fills up, or a run that is killed — leaves the previous good file in
place, never half of one. `check_writable` is called by every command before a long
computation, so a bad ``--out`` fails in a second, not after an hour.
"""

import csv
import datetime
import io
import json
import os
import pathlib
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
    "save_figure",
    "provenance",
    "PAPER_FORMATS",
]


def write_atomic(path, data):
    """Write ``data`` (str or bytes) to ``path`` so that readers see the old file or the new
    one, never half of one; the file gets the usual permissions (0666 minus the umask)."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode() if isinstance(data, str) else data)
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
    computation whose result goes to ``path``."""
    path = pathlib.Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{str(path)!r} is a directory")
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
    of the working directory's repository (if any) and the configuration (its source, hash, tables)."""
    from . import __version__  # noqa: PLC0415 - the package imports this module

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
    return out


def _plain(value):
    """numpy arrays and scalars as JSON lists and numbers."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


#: The formats every example figure is written in (a paper wants a vector copy).
PAPER_FORMATS = ("png", "svg", "pdf")
