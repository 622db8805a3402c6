"""`Result`: what a closure returns — a trajectory, how far it can be trusted, and its provenance.

Every closure (`momentgen.closures`) returns one, for the CLI (``momentgen solve``, which writes
``to_json()``), the Python API, `momentgen.compare` and ``verify``. Times are on the model's
axis (``time_scale``); ``series`` maps canonical words to their normalised trace moments
``μ_α = (1/d) Tr(…)`` at d = ∞ along ``t``. A `Result` can also be read like its JSON dict
(``result["series"]``), with arrays instead of lists.
"""

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Result"]


@dataclass
class Result:
    """A closure's trajectory and verdict.

    ``status``: "ok" (integrated to the horizon; its estimate is a bound on the reference cases),
    "unverified" (to the horizon, but the estimate is not a bound — the message says why),
    "blowup", "left-feasible-set", "non-finite-potential", "no-slaved-mean" or "failed" (stopped
    at ``t[-1]``). ``valid_until``: the last time the closure vouches for at ``validity_tol``
    (zero closure: degrees M and M − 2 agree; flow closures: the running error estimate).
    ``error_estimate``: the flow closures' estimate at the horizon (relative to max(1, |μ|)), None
    when there is none. ``fast``: a kind with a mean, its fast phase (``fast_t`` on t = nη,
    ``fast_m``, ``m_star``). ``potential``: how accurate Φ was (`Potential.accuracy_report`).
    """

    model: str
    closure: str
    time_scale: str
    t: np.ndarray
    series: dict
    derived: dict
    status: str
    message: str
    valid_until: float
    degree: int = None
    size: object = None
    error_estimate: float = None
    estimate_is_bound: bool = None
    error_series: dict = field(default_factory=dict)
    potential: dict = None
    fast: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)
    config_hash: str = None

    def fields(self):
        """The JSON layout with arrays (fast-phase and extra keys at the top level)."""
        out = {"model": self.model, "closure": self.closure, "degree": self.degree, "size": self.size,
               "time_scale": self.time_scale, "t": self.t, "series": self.series, "derived": self.derived,
               "status": self.status, "valid_until": self.valid_until, "message": self.message,
               "config_hash": self.config_hash, "potential": self.potential}  # fmt: skip
        if self.closure != "zero":
            out.update(error_estimate=self.error_estimate, estimate_is_bound=self.estimate_is_bound,
                       error_series=self.error_series)  # fmt: skip
        return {**out, **self.fast, **self.extra}

    def __getitem__(self, key):
        return self.fields()[key]

    def __contains__(self, key):
        return key in self.fields()

    def to_json(self):
        """A JSON-ready dict (lists instead of arrays; no NaN — an absent estimate is None)."""
        return _plain(self.fields())


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value
