"""The task runner (`core.parallel.run_tasks`): with ``share`` the calling process runs the first task itself, and
the last ones."""

import contextlib
import os
import sys
import time

import pytest

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
    # a plain joblib batch runs after it (a README snippet that solved an ensemble and then compared runs once failed
    # here, when the shared pool was loky's bare reusable executor)
    assert run_tasks([(abs, (-5,)), (abs, (-6,))], n_jobs=2, progress=False) == [5, 6]


def test_a_task_whose_hand_out_failed_runs_here(monkeypatch):
    """A worker pool that refuses a task after its first (a broken pool: ``submit`` raises, in the thread that hands
    the next task out as a result arrives): the batch still returns every result, in order — the task taken but never
    submitted runs in this process."""
    calls = []
    real_pool = parallel._shared_pool

    class Refusing:
        def __init__(self, real):
            self.real = real

        def submit(self, function, *args):
            calls.append(function)
            if len(calls) > 1:
                raise RuntimeError("the pool is broken")
            return self.real.submit(function, *args)

    @contextlib.contextmanager
    def refusing(workers):
        with real_pool(workers) as real:
            assert real.submit(abs, -1).result() == 1  # the worker is up: its first task returns at once
            yield Refusing(real)

    monkeypatch.setattr(parallel, "_shared_pool", refusing)
    tasks = [(_pid_after, (0.5,))] + [(abs, (-k,)) for k in range(1, 4)]
    assert run_tasks(tasks, n_jobs=2, progress=False, share=True)[1:] == [1, 2, 3]
    assert len(calls) == 2  # the second hand-out failed


_SET_AT_RUN_TIME = {}


def _seen_by_worker():
    return os.getpid(), dict(_SET_AT_RUN_TIME)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="shared workers are forked on Linux only")
def test_shared_workers_are_forked_from_this_process_as_it_is_at_each_batch():
    """On Linux a shared batch's workers are forked from this process for the batch, so they see what it holds then —
    here a value set at run time, which a freshly started interpreter importing this module would not see, and which
    a pool kept from an earlier batch would hold stale."""
    tasks = [(time.sleep, (0.3,))] + [(_seen_by_worker, ()) for _ in range(3)]
    for value in (1, 2):
        _SET_AT_RUN_TIME["value"] = value
        seen = run_tasks(tasks, n_jobs=2, progress=False, share=True)[1:]
        assert any(pid != os.getpid() for pid, _ in seen), seen
        assert all(state == {"value": value} for _, state in seen), seen


def test_a_lambda_reaches_the_workers():
    """A task's function or argument may be a lambda or a nested function (a notebook's schedule inside a
    configuration): it travels by value, as loky sent it, where pickle refuses it."""
    offset = 10
    tasks = [(time.sleep, (0.3,))] + [(_on_worker, (lambda k: k + offset, k)) for k in range(3)]
    results = run_tasks(tasks, n_jobs=2, progress=False, share=True)[1:]
    assert [value for value, _ in results] == [10, 11, 12], results
    assert any(pid != os.getpid() for _, pid in results), results


def _on_worker(function, k):
    return function(k), os.getpid()


def _sleep_after_writing_pid(path):
    path.write_text(str(os.getpid()))
    time.sleep(60)


def _raise_once_a_worker_runs(path):
    while not path.exists() or not path.read_text():
        time.sleep(0.05)
    raise ValueError("this draw failed")


def _alive(pid):
    try:
        with open(f"/proc/{pid}/status") as status:
            return "zombie" not in status.read()
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_failed_or_interrupted_batch_ends_its_workers_tasks(tmp_path):
    """An error in this process (or Ctrl-C, SIGTERM: the CLI raises KeyboardInterrupt for both) while a worker runs a
    long task: the error comes back, and the worker is ended rather than waited for (an interrupted ensemble of
    minute-long draws used to wait for the running one before it exited); the next batch runs as usual."""
    path = tmp_path / "pid"
    tasks = [(_raise_once_a_worker_runs, (path,)), (_sleep_after_writing_pid, (path,))]
    with pytest.raises(ValueError, match="this draw failed"):
        run_tasks(tasks, n_jobs=2, progress=False, share=True)
    worker = int(path.read_text())
    deadline = time.monotonic() + 30  # far below the task's 60 s: ended, not finished
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(worker)
    assert run_tasks([(abs, (-1,)), (abs, (-2,))], n_jobs=2, progress=False, share=True) == [1, 2]
