"""Independent tasks in parallel: processes on this machine (joblib, loky), or a Dask cluster.

Each worker process limits itself to one BLAS thread (the CLI and the Makefile set
``OPENBLAS_NUM_THREADS=1``; on shared 2-core machines two BLAS threads per process were up to
16× slower for the SGD loops).
"""

import os
import re
import threading
import time

import joblib

from .errors import MomentgenError
from .progress import Progress

__all__ = ["run_tasks"]


def run_tasks(tasks, n_jobs=None, scheduler=None, progress=None):
    """Results of ``[function(*args) for function, args in tasks]``, in order.

    ``scheduler``: address of a Dask distributed scheduler (``tcp://host:port``); the
    same joblib code then runs on the cluster's workers. ``progress``: finished tasks on stderr
    (`momentgen.progress.Progress`: by default a bar in a terminal or notebook, a status line every 30 s in
    a log).
    """
    jobs = [joblib.delayed(function)(*args) for function, args in tasks]
    if n_jobs is not None and (isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or not 1 <= n_jobs <= 1024):
        raise MomentgenError(f"n_jobs must be a number of worker processes from 1 to 1024, got {str(n_jobs)[:40]!r}")
    if scheduler is not None:
        _check_address(scheduler)
    if not jobs:
        return []
    if scheduler is None:
        with joblib.parallel_config(backend="loky", initializer=_exit_with_parent):
            parallel = joblib.Parallel(n_jobs=n_jobs or min(2, len(jobs)), return_as="generator")
            results = []
            with Progress(len(jobs), "tasks", "task", progress) as counter:
                for result in parallel(jobs):
                    results.append(result)
                    counter.update()
            return results
    try:
        from dask.distributed import Client  # noqa: PLC0415 - optional: pip install momentgen[dask]
    except ImportError:
        raise MomentgenError(
            f"a Dask scheduler ({scheduler}) needs dask.distributed: pip install 'momentgen[dask]'"
        ) from None
    try:
        client = Client(scheduler, timeout=30)
    except (OSError, TimeoutError, ValueError) as error:
        raise MomentgenError(f"cannot reach the Dask scheduler {scheduler!r}: {error}") from None
    with client, joblib.parallel_config(backend="dask"):
        return joblib.Parallel()(jobs)


_ADDRESS = re.compile(r"(tcp|tls|ucx|ws|wss|inproc)://[A-Za-z0-9._\-\[\]:]+")


def _check_address(scheduler):
    """A Dask scheduler address (``tcp://host:port``, or tls/ucx/ws/wss/inproc), else a `MomentgenError`."""
    if not isinstance(scheduler, str) or not _ADDRESS.fullmatch(scheduler):
        shown = repr(scheduler)[:80]
        raise MomentgenError(f"scheduler {shown} is not a Dask scheduler address such as tcp://127.0.0.1:8786")


def _exit_with_parent(period=1.0):
    """Worker initializer: end this worker as soon as the process that started it is gone (a killed
    ``compare`` must not leave workers computing for minutes)."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(period)
        os._exit(1)

    threading.Thread(target=watch, name="momentgen-exit-with-parent", daemon=True).start()
