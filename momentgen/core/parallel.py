"""Independent tasks in parallel: processes on this machine (joblib, loky; an ensemble's batch on processes forked
from this one, `_shared_pool`), or a Dask cluster.

Each worker process limits itself to one BLAS thread (the CLI and the Makefile set
``OPENBLAS_NUM_THREADS=1``; on shared 2-core machines two BLAS threads per process were up to
16× slower for the SGD loops).
"""

import contextlib
import multiprocessing
import os
import pickle
import re
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor

import cloudpickle
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
    processes take the others from the front and it takes them from the back (`_shared`) — one process start fewer,
    and a worker still starting takes fewer tasks; on Linux those workers are forked from this process
    (`_shared_pool`), so none of them imports the package again (a fresh worker's import costs about 1 s here).
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


#: Tasks handed to each worker process at a time by `_shared` while many remain (one running, one waiting).
QUEUED_PER_WORKER = 2


def _shared(tasks, workers, progress):
    """`run_tasks` with ``share``: this process runs task 0, then the tasks from the back, one at a time, while
    ``workers`` worker processes (`_shared_pool`) take them from the front (handed out as their results
    arrive: two each while many remain — one waits while one runs, over a result's round trip —, one each near the
    end). A worker still starting so takes fewer tasks than one already running, and neither side is left with a
    queue at the end. Results in order."""
    with _shared_pool(workers) as executor:
        return _shared_batch(tasks, workers, progress, executor)


def _shared_batch(tasks, workers, progress, executor):
    """`_shared` on the pool ``executor``."""
    results, handed, lock = [None] * len(tasks), {}, threading.RLock()
    ends = {"front": 1, "back": len(tasks) - 1}  # the workers' next task, and this process's

    def take(end, step):
        """The index at ``end``, moved by ``step`` (None when the two ends have met)."""
        with lock:
            if ends["front"] > ends["back"]:
                return None
            index = ends[end]
            ends[end] += step
            return index

    def hand_out(_=None):
        """Hand tasks to the workers up to `QUEUED_PER_WORKER` each while many remain, one each near the end."""
        fresh = []
        with lock:  # taken and recorded at once: this process sees every task handed out before the ends met
            while True:
                busy = sum(not f.done() for f in handed.values())
                depth = QUEUED_PER_WORKER if ends["back"] - ends["front"] >= QUEUED_PER_WORKER * workers else 1
                index = take("front", 1) if busy < depth * workers else None
                if index is None:
                    break
                function, args = tasks[index]
                try:
                    future = executor.submit(_call, cloudpickle.dumps((function, args)))
                except RuntimeError:  # a broken pool, or one shut down by an interruption: run here when collected
                    break
                fresh.append(handed.setdefault(index, future))
        for future in fresh:  # outside the lock: a future already done calls back at once
            future.add_done_callback(hand_out)

    with Progress(len(tasks), "tasks", "task", progress) as counter:
        for _ in range(workers):
            hand_out()
        index, here = 0, []
        while index is not None:
            function, args = tasks[index]
            results[index] = function(*args)
            here.append(index)
            counter.update()
            index = take("back", -1)
        with lock:
            collected = dict(handed)
        _collect(tasks, results, collected, here, counter)
    return results


def _collect(tasks, results, handed, here, counter):
    """Fill ``results`` of a `_shared` batch with the workers' (``handed``: index → future) and run here each task taken
    but never handed out (a broken pool), counting each on ``counter``; ``here``: the indices this process ran."""
    for i in range(1, len(tasks)):
        if i in handed:
            results[i] = handed[i].result()
        elif i not in here:
            function, args = tasks[i]
            results[i] = function(*args)
        else:
            continue
        counter.update()


def _call(payload):
    """``function(*args)`` of a task `_shared` handed out as ``cloudpickle.dumps((function, args))``: a lambda or a
    nested function (a notebook's schedule in a configuration) travels by value, as loky sends it, where pickle
    refuses it."""
    function, args = pickle.loads(payload)
    return function(*args)


@contextlib.contextmanager
def _shared_pool(workers):
    """The pool of ``workers`` processes that a `_shared` batch hands tasks to. On Linux they are forked from this
    process for the batch and end with it: they start with the package imported and its kernels compiled, and with
    this process's state as it is now (a notebook's definitions, a patched setting), where a fresh interpreter spends
    about a CPU second importing the package (README, *Verified*: `benchmarks/bench_generic_sigma.py`); a fork costs
    milliseconds, so no pool is kept between batches. Elsewhere (fork is unsafe on macOS and absent on Windows)
    joblib's reusable executor, whose workers start afresh and are kept. A batch that fails or is interrupted
    (Ctrl-C; SIGTERM, which the CLI turns into it) ends its workers at once, their running tasks abandoned, rather
    than waiting for them."""
    forked = sys.platform.startswith("linux")
    if forked:
        pool = ProcessPoolExecutor(
            workers, mp_context=multiprocessing.get_context("fork"), initializer=_exit_with_parent
        )
    else:
        pool = get_memmapping_executor(workers, initializer=_exit_with_parent)
    try:
        yield pool
    except BaseException:
        if forked:
            for process in list(pool._processes.values()):  # no public way before Python 3.14's terminate_workers
                process.terminate()
            pool.shutdown(wait=False, cancel_futures=True)
        else:
            pool.shutdown(wait=False, kill_workers=True)
        raise
    if forked:
        pool.shutdown(wait=True)  # every task is done: the workers are idle


def _exit_with_parent(period=1.0):
    """Worker initializer: end this worker as soon as the process that started it is gone (a killed
    ``compare`` must not leave workers computing for minutes)."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(period)
        os._exit(1)

    threading.Thread(target=watch, name="momentgen-exit-with-parent", daemon=True).start()
