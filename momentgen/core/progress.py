"""Progress of long runs: a bar where someone watches (a terminal or a Jupyter notebook), a periodic one-line
status where no one does (a log, a batch job), nothing when asked for silence.

``progress`` arguments across momentgen take ``None`` (decide as above), ``True`` (a bar) or ``False``
(silent).
"""

import sys
import time

from tqdm.auto import tqdm

__all__ = ["Progress", "interactive"]

STATUS_EVERY = 30.0  # seconds between two status lines when stderr is not watched


def interactive():
    """True when stderr is a terminal or the code runs in a Jupyter kernel (tqdm.auto draws a widget there)."""
    return sys.stderr.isatty() or "ipykernel" in sys.modules


class Progress:
    """A counter of ``total`` units named ``desc``: a tqdm bar, periodic status lines, or nothing (see the
    module docstring). Use as a context manager; ``update(n)`` counts n more units."""

    def __init__(self, total, desc, unit, show=None, every=STATUS_EVERY):
        self.total, self.desc, self.unit, self.every = int(total), desc, unit, every
        bar = interactive() if show is None else bool(show)
        self.bar = tqdm(total=self.total, desc=desc, unit=unit, leave=False) if bar else None
        self.lines = show is None and not bar
        self.done, self.start = 0, time.perf_counter()
        self.last = self.start

    def update(self, n=1):
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.lines and time.perf_counter() - self.last >= self.every:
            self.last = time.perf_counter()
            print(f"momentgen: {self.desc}: {self.done}/{self.total} {self.unit}s, {self.last - self.start:.0f} s",
                  file=sys.stderr, flush=True)  # fmt: skip

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()
