"""The one trajectory type: the output times a run reached and how it ended, under every run's result.

Every run momentgen reports — the stepping loop's states (`momentgen.core.stepper.States`), a truncation's
solution (`momentgen.dynamics.integrate.SolveResult`), the flow engine's and SGD's moments
(`momentgen.setting.flow.FlowRun`, `momentgen.reference.SimulationResult`) and a closure's verdict
(`momentgen.dynamics.results.Result`) — is a `Trajectory`: ``t`` (n,), the output times reached, on the time axis
of whoever ran it (tied ``t = 4nη/d``; τ = nη/d for the τ-axis kinds; the caller's docstring says which), and
``status`` ("ok" when it reached the end of its grid, else why it stopped at ``t[-1]``) with a one-line
``message``. A trajectory of named values is a `Moments`: ``series`` maps a name (a canonical word, or a derived
column) to its (n,) values. Subclasses add their own fields as keywords (``kw_only``): only the three shared ones
are positional.
"""

from dataclasses import dataclass

import numpy as np

__all__ = ["Trajectory", "Moments"]


@dataclass
class Trajectory:
    """Output times reached (``t``, shape (n,)) and how the run ended (``status``, ``message``)."""

    t: np.ndarray
    status: str
    message: str

    @property
    def reached_end(self):
        """Whether the run reached the end of its grid (``status == "ok"``)."""
        return self.status == "ok"


@dataclass(kw_only=True)
class Moments(Trajectory):
    """A `Trajectory` of named values: ``series``, name → array (n,) (canonical words of the moments)."""

    series: dict
