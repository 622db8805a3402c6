"""The task runner (`core.parallel.run_tasks`): with ``share`` the calling process runs the first task itself."""

import os

from momentgen.core.parallel import run_tasks


def test_a_shared_batch_runs_its_first_task_here_and_keeps_the_order():
    """``share=True`` (what an ensemble uses: one worker start and one import of the package fewer): the results
    come back in the tasks' order, the first computed by this process, the others by a worker process; plain
    joblib batches still run after it."""
    tasks = [(os.getpid, ())] + [(abs, (-k,)) for k in range(1, 4)] + [(os.getpid, ())]
    results = run_tasks(tasks, n_jobs=2, progress=False, share=True)
    assert results[0] == os.getpid() and results[-1] != os.getpid()
    assert results[1:4] == [1, 2, 3]
    # the worker pool is joblib's own: a plain joblib batch and another shared one run after it (a README snippet
    # that solved an ensemble and then compared runs once failed here on loky's bare reusable executor)
    assert run_tasks([(abs, (-5,)), (abs, (-6,))], n_jobs=2, progress=False) == [5, 6]
    assert run_tasks([(abs, (-7,)), (abs, (-8,))], n_jobs=2, progress=False, share=True) == [7, 8]
