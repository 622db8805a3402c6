"""Progress on long runs (`momentgen.core.progress`)."""

import sys


def test_progress_is_a_status_line_in_a_log_and_silent_when_asked(capsys, monkeypatch):
    """Issue 32: a long run in a log (stderr not a terminal, no notebook) prints a periodic one-line status
    instead of nothing; progress=False is silent; a Jupyter kernel counts as watched (a tqdm.auto bar)."""

    from momentgen.core import progress

    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    assert not progress.interactive()
    with progress.Progress(3, "tasks", "task", None, every=0.0) as counter:
        counter.update()
    assert "momentgen: tasks: 1/3 tasks" in capsys.readouterr().err
    with progress.Progress(3, "tasks", "task", False, every=0.0) as counter:
        counter.update()
    assert capsys.readouterr().err == ""
    monkeypatch.setitem(sys.modules, "ipykernel", object())
    assert progress.interactive()
