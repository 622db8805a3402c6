"""Independent tasks in parallel: processes on this machine (joblib, loky), or a Dask cluster.

Each worker process limits itself to one BLAS thread (the CLI and the Makefile set
``OPENBLAS_NUM_THREADS=1``; on shared 2-core machines two BLAS threads per process were up to
16× slower for the SGD loops).
"""

import sys

import joblib
from tqdm.auto import tqdm

from .errors import MomentgenError

__all__ = ["run_tasks"]


def run_tasks(tasks, n_jobs=None, scheduler=None, progress=None):
    """Results of ``[function(*args) for function, args in tasks]``, in order.

    ``scheduler``: address of a Dask distributed scheduler (``tcp://host:port``); the
    same joblib code then runs on the cluster's workers. ``progress``: a bar of finished tasks on
    stderr (default: when stderr is a terminal).
    """
    jobs = [joblib.delayed(function)(*args) for function, args in tasks]
    if not jobs:
        return []
    if scheduler is None:
        parallel = joblib.Parallel(n_jobs=n_jobs or min(2, len(jobs)), backend="loky", return_as="generator")
        show = sys.stderr.isatty() if progress is None else progress
        return list(tqdm(parallel(jobs), total=len(jobs), desc="tasks", unit="task", disable=not show, leave=False))
    try:
        from dask.distributed import Client  # noqa: PLC0415 - optional: pip install momentgen[dask]
    except ImportError:
        raise MomentgenError(
            f"a Dask scheduler ({scheduler}) needs dask.distributed: pip install 'momentgen[dask]'"
        ) from None

    with Client(scheduler):
        with joblib.parallel_config(backend="dask"):
            return joblib.Parallel()(jobs)
