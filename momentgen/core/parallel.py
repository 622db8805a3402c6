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
from joblib.executor import get_memmapping_executor

from .errors import MomentgenError
from .progress import Progress

__all__ = ["run_tasks", "check_n_jobs", "check_scheduler", "MAX_JOBS"]

#: the most worker processes a run may ask for
MAX_JOBS = 1024


def run_tasks(tasks, n_jobs=None, scheduler=None, progress=None, share=False):
    """Results of ``[function(*args) for function, args in tasks]``, in order.

    ``scheduler``: address of a Dask distributed scheduler (``tcp://host:port``); the
    same joblib code then runs on the cluster's workers. ``progress``: finished tasks on stderr
    (`momentgen.core.progress.Progress`: by default a bar in a terminal or notebook, a status line every 30 s in
    a log). ``share`` (no scheduler): the calling process runs the first task itself while ``n_jobs − 1`` worker
    processes run the others — one process start and one import of the package fewer, which is most of a short
    batch's overhead (a worker's start costs about 1.3 s here).
    """
    jobs = [joblib.delayed(function)(*args) for function, args in tasks]
    check_n_jobs(n_jobs)
    check_scheduler(scheduler)
    if not jobs:
        return []
    if scheduler is None and share and len(tasks) > 1 and (n_jobs or 2) > 1:
        return _shared(tasks, min(n_jobs or 2, len(tasks)) - 1, progress)
    if scheduler is None:
        with joblib.parallel_config(backend="loky", initializer=_exit_with_parent):
            # never more workers than tasks: an idle worker costs a process start and its semaphores
            parallel = joblib.Parallel(n_jobs=min(n_jobs or 2, len(jobs)), return_as="generator")
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


def check_n_jobs(n_jobs):
    """``n_jobs`` (worker processes) is None or a whole number from 1 to `MAX_JOBS`, else a one-line
    `MomentgenError` — called by every entry point before anything runs, so a bad value is never a verdict."""
    if n_jobs is not None and (isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or not 1 <= n_jobs <= MAX_JOBS):
        raise MomentgenError(
            f"n_jobs must be a whole number of worker processes from 1 to {MAX_JOBS} (--jobs), got {str(n_jobs)[:40]!r}"
        )


#: a Dask scheduler that this package's workers reach over the network: tcp or tls (ucx needs ucx-py, inproc is one
#: process's own, ws/wss need extra packages — none of them is what `run_tasks` can use)
_ADDRESS = re.compile(r"(tcp|tls)://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):[0-9]{1,5}")


def check_scheduler(scheduler):
    """A Dask scheduler address ``tcp://host:port`` (or ``tls://``), or None; else a one-line `MomentgenError`."""
    if scheduler is not None and (not isinstance(scheduler, str) or not _ADDRESS.fullmatch(scheduler)):
        raise MomentgenError(
            f"scheduler {repr(scheduler)[:80]} is not a Dask scheduler address tcp://host:port (or tls://host:port), "
            "e.g. tcp://127.0.0.1:8786"
        )


def _shared(tasks, workers, progress):
    """`run_tasks` with ``share``: tasks 1… submitted to ``workers`` reusable worker processes, task 0 run here
    meanwhile; results in order."""
    # joblib's own reusable executor (the one its loky backend shares), so that later joblib calls can reuse it
    executor = get_memmapping_executor(workers, initializer=_exit_with_parent)
    futures = [executor.submit(function, *args) for function, args in tasks[1:]]
    with Progress(len(tasks), "tasks", "task", progress) as counter:
        function, args = tasks[0]
        results = [function(*args)]
        counter.update()
        for future in futures:
            results.append(future.result())
            counter.update()
    return results


def _exit_with_parent(period=1.0):
    """Worker initializer: end this worker as soon as the process that started it is gone (a killed
    ``compare`` must not leave workers computing for minutes)."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(period)
        os._exit(1)

    threading.Thread(target=watch, name="momentgen-exit-with-parent", daemon=True).start()
