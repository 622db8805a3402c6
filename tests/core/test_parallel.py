"""The task runner (`core.parallel.run_tasks`): with ``share`` the calling process runs the first task itself."""

import os

from momentgen.core.parallel import run_tasks


def test_a_shared_batch_runs_its_first_task_here_and_keeps_the_order():
    """``share=True`` (what an ensemble uses: one worker start and one import of the package fewer): the results
    come back in the tasks' order, the first computed by this process, the others by a worker process."""
    tasks = [(os.getpid, ())] + [(abs, (-k,)) for k in range(1, 4)] + [(os.getpid, ())]
    results = run_tasks(tasks, n_jobs=2, progress=False, share=True)
    assert results[0] == os.getpid() and results[-1] != os.getpid()
    assert results[1:4] == [1, 2, 3]
