"""The task runner (`core.parallel.run_tasks`): with ``share`` the calling process runs the first task itself, and
the last ones."""

import os
import time

from momentgen.core import parallel
from momentgen.core.parallel import run_tasks


def _pid_after(seconds):
    time.sleep(seconds)
    return os.getpid()


def test_a_shared_batch_runs_its_first_and_last_tasks_here_and_keeps_the_order():
    """``share=True`` (what an ensemble uses: one worker start and one import of the package fewer): the results
    come back in the tasks' order, the first computed by this process, the next by a worker process, and the last
    ones by this process again (it takes them from the back); plain joblib batches still run after it."""
    assert run_tasks([(abs, (-7,)), (abs, (-8,))], n_jobs=2, progress=False, share=True) == [7, 8]  # worker up
    tasks = [(os.getpid, ())] + [(abs, (-k,)) for k in range(1, 4)] + [(_pid_after, (0.3,)) for _ in range(5)]
    results = run_tasks(tasks, n_jobs=2, progress=False, share=True)
    assert results[0] == os.getpid() and results[1:4] == [1, 2, 3]
    assert results[-1] == os.getpid() and set(results[4:]) - {os.getpid()}, results  # the worker ran some of them
    # the worker pool is joblib's own: a plain joblib batch runs after it (a README snippet that solved an ensemble
    # and then compared runs once failed here on loky's bare reusable executor)
    assert run_tasks([(abs, (-5,)), (abs, (-6,))], n_jobs=2, progress=False) == [5, 6]


def test_a_task_whose_hand_out_failed_runs_here(monkeypatch):
    """A worker pool that refuses a task after its first (a broken pool: ``submit`` raises, in the thread that hands
    the next task out as a result arrives): the batch still returns every result, in order — the task taken but never
    submitted runs in this process."""
    real = parallel.get_memmapping_executor(1, initializer=parallel._exit_with_parent)
    assert real.submit(abs, -1).result() == 1  # the worker is up before the batch: its first task returns at once
    calls = []

    class Refusing:
        def submit(self, function, *args):
            calls.append(function)
            if len(calls) > 1:
                raise RuntimeError("the pool is broken")
            return real.submit(function, *args)

    monkeypatch.setattr(parallel, "get_memmapping_executor", lambda *args, **kwargs: Refusing())
    tasks = [(_pid_after, (0.5,))] + [(abs, (-k,)) for k in range(1, 4)]
    assert run_tasks(tasks, n_jobs=2, progress=False, share=True)[1:] == [1, 2, 3]
    assert len(calls) == 2  # the second hand-out failed
