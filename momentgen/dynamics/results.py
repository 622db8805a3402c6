"""`Result`: what a closure returns — a trajectory, how far it can be trusted, and its provenance.

Every closure (`momentgen.dynamics.closures`) returns one, for the CLI (``momentgen solve``, which writes
``to_json()``), the Python API, `momentgen.evidence.comparison` and ``verify``. Times are on the model's
axis (``time_scale``); ``series`` maps canonical words to their normalised trace moments
``μ_α = (1/d) Tr(…)`` at d = ∞ along ``t``. A `Result` is read one way, by its attributes:
``result.series``, ``result.status``; a fast phase's arrays in ``result.fast``, a closure's or an SGD
run's own keys in ``result.extra``. ``to_json()`` is its JSON dict (what ``momentgen solve`` writes).
"""

import dataclasses
import re
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..core import figures
from ..core.errors import MomentgenError, shown
from ..core.trajectory import Moments
from ..models import Model
from ..models.base import SIGMA
from ..models.words import canonical

__all__ = ["Result", "REACHED"]

#: The statuses of a run that reached its horizon (the others stopped early, at ``t[-1]``).
REACHED = ("ok", "partial", "unverified")


@dataclass(kw_only=True)
class Result(Moments):
    """A closure's trajectory (`Moments`: ``t``, ``series``, ``status``, ``message``) and verdict.

    ``status``: "ok" (integrated to the horizon and vouched for up to it; its estimate is a bound on the
    reference cases), "partial" (integrated to the horizon, vouched for only until ``valid_until``),
    "unverified" (to the horizon, but the estimate is not a bound — the message says why),
    "blowup", "left-feasible-set", "non-finite-potential", "no-slaved-mean" or "failed" (stopped
    at ``t[-1]``). ``valid_until``: the last time the closure vouches for at ``validity_tol``
    (zero closure: degrees M and M − 2 agree; flow closures: the running error estimate).
    ``error_estimate``: the flow closures' estimate at the horizon (relative to ``max(1, |μ|)``), None
    when there is none. ``fast``: a kind with a mean, its fast phase (``fast_t`` on t = nη,
    ``fast_m``, ``m_star``). ``potential``: how accurate Φ was (`Potential.accuracy_report`).
    ``kappa``: κ = ηd/B of the finite-learning-rate term the run carried (0: the ηd/B → 0 hierarchy).
    """

    model: str
    closure: str
    time_scale: str
    derived: dict
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
    kappa: float = 0.0

    def fields(self):
        """The JSON layout with arrays (fast-phase and extra keys at the top level)."""
        out = {
            "model": self.model,
            "closure": self.closure,
            "degree": self.degree,
            "size": self.size,
            "time_scale": self.time_scale,
            "t": self.t,
            "series": self.series,
            "derived": self.derived,
            "status": self.status,
            "valid_until": self.valid_until,
            "message": self.message,
            "config_hash": self.config_hash,
            "potential": self.potential,
            "kappa": self.kappa,
        }
        if self.error_series:  # a flow closure's running estimate (the zero closure compares degrees instead)
            out.update(
                error_estimate=self.error_estimate,
                estimate_is_bound=self.estimate_is_bound,
                error_series=self.error_series,
            )
        return {**out, **self.fast, **self.extra}

    def __getitem__(self, key):
        """Deprecated: a `Result` is read by its attributes (``result.status``; a fast phase's keys in
        ``result.fast``, the others in ``result.extra``); ``to_json()`` is its dict."""
        warnings.warn(
            _DICT_STYLE.format(f"result[{key!r}]", _attribute_of(self, key)), DeprecationWarning, stacklevel=2
        )
        return self.fields()[key]

    def __contains__(self, key):
        """Deprecated, as `__getitem__`."""
        warnings.warn(_DICT_STYLE.format(f"{key!r} in result", f"{key!r} in result.to_json()"), DeprecationWarning,
                      stacklevel=2)  # fmt: skip
        return key in self.fields()

    def to_json(self):
        """A JSON-ready dict (lists instead of arrays; no NaN — an absent estimate is None)."""
        return _plain(self.fields())

    def to_store(self):
        """Every field, JSON-ready, as `from_store` reads it back (`momentgen.core.store`)."""
        return _plain({f.name: getattr(self, f.name) for f in dataclasses.fields(self)})

    @classmethod
    def from_store(cls, payload):
        """The `Result` of a `to_store` payload: t, the series, the derived columns and the fast phase as float
        arrays (None — a non-finite value when stored — as NaN), the rest as stored."""
        from ..core.store import array  # noqa: PLC0415 - the store imports this module's neighbours only

        fields = dict(payload)
        fields["t"] = array(fields["t"])
        for name in ("series", "derived", "fast"):
            fields[name] = {k: array(v) if isinstance(v, list) and _numeric(v) else v for k, v in fields[name].items()}
        return cls(**fields)

    def to_pandas(self):
        """The curve as a table.

        Returns
        -------
        pandas.DataFrame
            Index ``t`` (the kind's axis), one column per canonical word and per derived column (``risk``,
            ``risk_slope``, overlaps, a schedule's ``integrated_t``), and ``vouched``: whether the row lies inside
            the window the closure vouches for (t ≤ valid_until); ``attrs`` hold the status, message, valid_until,
            time scale, closure, κ and the estimates.
        """
        import pandas  # noqa: PLC0415 - optional at import time: only this method needs it

        columns = {
            **{w: np.asarray(v) for w, v in self.series.items()},
            **{k: np.asarray(v) for k, v in self.derived.items()},
        }
        columns["vouched"] = np.asarray(self.t) <= self.valid_until + 1e-12 * max(1.0, abs(self.valid_until))
        frame = pandas.DataFrame(columns, index=pandas.Index(np.asarray(self.t), name="t"))
        frame.attrs.update(
            status=self.status,
            message=self.message,
            valid_until=self.valid_until,
            time_scale=self.time_scale,
            closure=self.closure,
            kappa=self.kappa,
            error_estimate=self.error_estimate,
            risk_valid_until=self.extra.get("risk_valid_until"),
        )
        return frame

    def to_xarray(self):
        """The curve as labelled arrays (xarray is an optional dependency: ``pip install 'momentgen[xarray]'``).

        Returns
        -------
        xarray.Dataset
            Dimension ``t``, one variable per canonical word and derived column, ``vouched`` (1 inside the window),
            and ``attrs``: status, message, valid_until, time scale, closure, κ, the estimate, the configuration's
            digest and momentgen's version. ``to_netcdf`` round-trips it.

        Raises
        ------
        MomentgenError
            Without xarray, saying how to install it.
        """
        from ..core.display import to_dataset  # noqa: PLC0415
        from ..core.version import __version__  # noqa: PLC0415 - the package imports this module

        frame = self.to_pandas()
        columns = {name: frame[name].to_numpy(dtype=float) for name in frame.columns}
        return to_dataset(self.t, columns, {**frame.attrs, "config_hash": self.config_hash, "momentgen": __version__})

    def _repr_html_(self):
        """What a notebook shows: the status, the window, the estimate and each column at the start and the end."""
        from ..core.display import summary_html  # noqa: PLC0415

        t = np.asarray(self.t)
        columns = {**self.series, **{k: v for k, v in self.derived.items() if k != "integrated_t"}}
        arrays = {name: np.asarray(values, float) for name, values in columns.items()}
        rows = [(name, values[0], values[-1]) for name, values in arrays.items() if len(values)]
        end = f"{t[-1]:.4g}" if len(t) else "—"
        lines = [("status", self.status), ("vouched for until", f"{self.valid_until:.4g} of {end} ({self.time_scale})")]
        if self.error_estimate is not None:
            bound = "a bound" if self.estimate_is_bound else "not a bound"
            lines.append(("error estimate at the end", f"{self.error_estimate:.3g} ({bound})"))
        lines.append(("message", self.message))
        return summary_html(f"{self.model}: {self.source}", lines, ("column", "t = 0", f"t = {end}"), rows)

    def spectrum(self, letter, t, points=400, x=None):
        """The spectral distribution of a trainable ``letter`` (e.g. ``"S1"``; for a letter that is not
        symmetric, of ``X Xᵀ``: the squared singular values) at the output time ``t``, from the closure's
        state: ``{"letter", "of", "t", "x", "cdf", "density", "cdf_low", "cdf_high"}`` on ``x`` (default
        ``points`` points spanning the spectrum) — a smooth reconstruction from the state's spectral rule
        (`momentgen.setting.spectra.reconstruct`; ``cdf_low``/``cdf_high`` the band the rule certifies). The riccati,
        quadrature and matrix-model closures (the riccati closure's from the density of its Stieltjes transform)."""
        return _spectrum_of(self, letter, t, points, x)

    def plot(self, words=None, ax=None, log=False):
        """Draw ``words`` (default: every non-constant series, at most 6; any spelling of a word, or a derived
        column such as ``"p12"`` or ``"risk"``) against t on ``ax`` (a new figure's when None), with the window
        the run vouches for shaded; ``log=True`` draws the y axis on a log scale (e.g. ``words=["risk"]``).
        Returns the Axes."""
        t = np.asarray(self.t)
        if not len(t):
            raise MomentgenError(f"nothing to plot: the result has no times (status {self.status}: {self.message})")
        if ax is None:
            ax = figures.new_figure(width=5.5, height=3.8)[1][0]
        words = [words] if isinstance(words, str) else words  # one column by its name, e.g. words="risk"
        words = words or [w for w, v in self.series.items() if np.ptp(np.asarray(v)) > 0][:6]
        measured = "d" in self.extra  # an SGD run (`api.simulate`): markers under the theory's lines
        for w in words:
            label, values = _column_of(self, w)
            if measured:
                error = self.extra.get("risk_se") if label == "risk" else None
                figures.measured(ax, t, values, error, f"{label}, {self.source}", color=None)
            else:
                figures.theory(ax, t, values, f"{label}, {self.source}")
        if len(t) and 0 < self.valid_until < t[-1]:
            ax.axvspan(self.valid_until, t[-1], color="0.9", zorder=0, label="beyond valid_until")
        elif len(t) and self.valid_until == 0 and t[-1] > 0:
            ax.axvspan(t[0], t[-1], color="0.9", zorder=0, label="no validity window")
        ylabel = "population risk" if list(words) == ["risk"] else "normalised trace moment"
        title = f"{self.model}: {self.source} ({self.status})"
        return figures.finish(ax, figures.time_label(self.time_scale), ylabel, title, log=log, fontsize=7)

    @property
    def source(self):
        """What produced the curves, in words: ``"online SGD, d = 200"`` or ``"quadrature closure"``."""
        return f"online SGD, d = {self.extra['d']}" if "d" in self.extra else f"{self.closure} closure"


#: The start of the deprecation message (tests and benchmarks turn it into an error: nothing inside reads a dict).
DICT_STYLE_DEPRECATED = "Reading a Result as a dict is deprecated"
_DICT_STYLE = DICT_STYLE_DEPRECATED + " (it is read one way, by its attributes): use {1} for {0}"


def _attribute_of(result, key):
    """Where a key of the JSON layout lives among the attributes."""
    if key in result.fast:
        return f"result.fast[{key!r}]"
    if key in result.extra:
        return f"result.extra[{key!r}]"
    return f"result.{key}"


def _spectrum_of(result, letter, t, points=400, x=None):
    """See `Result.spectrum`."""
    from .. import models  # noqa: PLC0415 - the kinds' registry, only for whether letters are PSD
    from ..setting.spectra import reconstruct  # noqa: PLC0415

    x = _checked_spectrum_arguments(letter, t, points, x)
    spectra = result.extra.get("spectra", {})
    if letter not in spectra:
        where = (
            f"it has {', '.join(spectra)}"
            if spectra
            else "solve with spectra=True (the riccati, quadrature and matrix-model closures record them then; "
            "the zero closure has no state to read them from)"
        )
        raise MomentgenError(
            f"no spectrum of {letter!r} in this result: {where} (spectra are those of the trainable letters, "
            "from the riccati, quadrature and matrix-model closures)"
        )
    times = np.asarray(result.t, dtype=float)
    tolerance = 1e-9 * max(1.0, abs(times[-1]))
    index = np.flatnonzero(np.abs(times - t) <= tolerance)
    if not index.size:
        raise MomentgenError(
            f"t = {t:g} is not an output time of this result (grid {times[0]:g} … {times[-1]:g}, {len(times)} "
            "points): solve with times=[…] to add it"
        )
    record = spectra[letter]
    positive = record["of"] != letter or models.get(result.model).positive_letters
    i = int(index[0])
    lower = 0.0 if positive else None
    curve = reconstruct(record["nodes"][i], record["weights"][i], x=x, points=points, lower=lower)
    return {"letter": letter, "of": record["of"], "t": float(times[i]), **curve}


MAX_SPECTRUM_POINTS = 100_000


def _checked_spectrum_arguments(letter, t, points, x):
    """`Result.spectrum`'s arguments checked (one-line `MomentgenError`s); ``x`` as a float array or None."""
    if not isinstance(letter, str):
        raise MomentgenError(f"spectrum(letter=…) takes a letter's name such as 'S1', got {shown(letter)}")
    if isinstance(t, bool) or not isinstance(t, (int, float, np.integer, np.floating)) or not np.isfinite(t):
        raise MomentgenError(f"spectrum(t=…) takes one finite output time, got {shown(t)}")
    if isinstance(points, bool) or not isinstance(points, (int, np.integer)) or not 2 <= points <= MAX_SPECTRUM_POINTS:
        raise MomentgenError(
            f"spectrum(points=…) takes a whole number from 2 to {MAX_SPECTRUM_POINTS}, got {shown(points)}"
        )
    if x is None:
        return None
    try:
        x = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        raise MomentgenError(f"spectrum(x=…) takes a list of numbers, got {shown(x)}") from None
    if x.ndim != 1 or not 2 <= x.size <= MAX_SPECTRUM_POINTS or not np.all(np.isfinite(x)):
        raise MomentgenError(
            f"spectrum(x=…) takes 2 to {MAX_SPECTRUM_POINTS} finite numbers in one list, got {shown(x)}"
        )
    return x


def _column_of(result, word):
    """(label, values) of a word in any spelling (``"S2 S1"`` is ``"S1 S2"``), a derived column, or an order
    parameter by its name ``q11``, ``q12``, … (the kind's Q1_kl word, Σ-weighted with anisotropic tokens)."""
    if not isinstance(word, str):
        raise MomentgenError(f"a column is named by a string (a word, 'risk', 'q12', …), got {shown(word)}")
    if word in result.derived:
        return word, result.derived[word]
    order = re.fullmatch(r"q(\d)(\d)", word.strip())
    if order:
        model = _words_model(result)
        word = model.definition.order_texts(model, int(order.group(1)), int(order.group(2)))[0]
    try:
        key = canonical(word, _words_model(result))
    except MomentgenError:
        key = None
    if key not in result.series:
        known = ", ".join(list(result.series)[:8] + list(result.derived))
        raise MomentgenError(f"no column {word!r} in this result: its words and derived columns are {known}")
    return (f"{order.group(0)} = μ({key})" if order else f"μ({key})"), result.series[key]


def _words_model(result):
    """The `momentgen.models.Model` the result's words are spelled in: K their largest index, the letter Σ when one
    holds it (so that ``"Sigma S1"`` finds ``"S1 Sigma"``)."""
    indices = [int(i) for word in result.series for i in re.findall(r"\d+", word)]
    return Model(result.model, max(indices, default=1), sigma=any(SIGMA in word.split() for word in result.series))


def _numeric(values):
    """Whether a stored list holds numbers (None for NaN), possibly nested one level (a fast phase's m)."""
    return all(v is None or isinstance(v, (int, float)) or (isinstance(v, list) and _numeric(v)) for v in values)


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
