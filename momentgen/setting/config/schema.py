"""Every table and key of a configuration: its default and its validator (`_SCHEMA`), and `ConfigError` (defined in
`momentgen.core.errors`, re-exported here and by `momentgen.setting.config`)."""

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType

import numpy as np

from ... import models
from ...core.errors import ConfigError, shown
from ...core.stepper import SOLVERS
from ..data import COVARIANCES
from ..inits import INIT_KINDS
from ..schedules import FORMS, TABULATED

# ---- validators: each returns the cleaned value or raises ValueError saying what is required ----


def _number(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("must be a number")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an integer such as 10**400: no float holds it
        raise ValueError("is too large (beyond a float)") from None
    if not finite:
        raise ValueError("must be finite")
    return value


def _at_most(check, high):
    """``check``, and |value| ≤ ``high`` (beyond it the moments overflow a float at the usual degrees)."""

    def bounded(value):
        value = check(value)
        if abs(value) > high:
            raise ValueError(f"must be at most {high:g} in size")
        return value

    return bounded


def _at_least(check, low):
    """``check``, and value ≥ ``low`` (a positive bound below which a law degenerates numerically)."""

    def bounded(value):
        value = check(value)
        if value < low:
            raise ValueError(f"must be at least {low:g}")
        return value

    return bounded


def _positive(value):
    if not _number(value) > 0:
        raise ValueError("must be a positive number")
    return value


def _non_negative(value):
    if not _number(value) >= 0:
        raise ValueError("must be a number ≥ 0")
    return value


def _horizon(value):
    if not _positive(value) >= 1e-9:
        raise ValueError("must be at least 1e-9 (a shorter horizon is below the integrators' resolution)")
    return value


def _fraction(value):
    if not 0 < _number(value) < 1:
        raise ValueError("must be a number strictly between 0 and 1")
    return value


def _integer(low, high=None):
    def check(value):
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (high and value > high):
            raise ValueError(f"must be an integer ≥ {low}" + (f" and ≤ {high}" if high else ""))
        return value

    return check


def _choice(*options, what=None):
    def check(value):
        if value not in options:
            raise ValueError(("is an unknown " + what + ": " if what else "") + f"must be one of {', '.join(options)}")
        return value

    return check


def _optional(check):
    return lambda value: None if value is None else check(value)


def _string(value):
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be a non-empty string")
    if "\0" in value:
        raise ValueError("holds a NUL byte (\\0), which no file name can")
    return value


def _index_list(value):
    if not isinstance(value, list) or not value:
        raise ValueError("must be a non-empty list of 1-based indices, e.g. [1] or [1, 3]")
    for k in value:
        if isinstance(k, bool) or not isinstance(k, int):
            raise ValueError(f"must be a list of integer indices (1-based); {k!r} is not one")
    if len(set(value)) != len(value):
        raise ValueError("must not repeat an index")
    return value


def _head_groups(value):
    if not isinstance(value, list) or len(value) != 2:
        raise ValueError("must be [[student heads], [teacher heads]], e.g. [[1, 2], [3, 4]]")
    return [_index_list(group) for group in value]


def _boolean(value):
    if not isinstance(value, bool):
        raise ValueError("must be true or false")
    return value


def _seeds(value):
    if (
        not isinstance(value, list)
        or not value
        or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in value)
    ):
        raise ValueError("must be a non-empty list of integers ≥ 0, e.g. [0, 1]")
    return value


def _warmup(value):
    if not 0 <= _number(value) < 1:
        raise ValueError("must be a fraction of the run in [0, 1)")
    return value


def _milestones(value):
    if not isinstance(value, list) or not all(isinstance(u, (int, float)) and not isinstance(u, bool) for u in value):
        raise ValueError("must be a list of fractions of the run, e.g. [0.5, 0.8]")
    if not all(0 < u < 1 for u in value) or any(b <= a for a, b in zip(value, value[1:])):
        raise ValueError("must be increasing fractions strictly between 0 and 1")
    return [float(u) for u in value]


def _momentum(value):
    if not 0 <= _number(value) <= MAX_MOMENTUM:
        raise ValueError(f"must be a number in [0, {MAX_MOMENTUM:g}] (the heavy-ball β; 0: plain SGD)")
    return value


#: the largest heavy-ball β: at 0.999 the run's memory is 1000 steps; beyond it η/(1 − β) is a typo's scale
MAX_MOMENTUM = 0.999
#: the most points of an inline schedule table (a callable is tabulated on 1 025)
MAX_TABLE_POINTS = 10_001


def _schedule_table(value):
    """An inline table ``{u = […], f = […]}``: u increasing strictly from 0 to 1, f finite multipliers ≥ 0."""
    if not isinstance(value, dict) or set(value) != {"u", "f"}:
        raise ValueError("must be an inline table {u = [0, …, 1], f = [multipliers ≥ 0]}")
    u, f = value["u"], value["f"]
    for name, column in (("u", u), ("f", f)):
        if not isinstance(column, list) or not 2 <= len(column) <= MAX_TABLE_POINTS:
            raise ValueError(f"`{name}` must be a list of 2 to {MAX_TABLE_POINTS} numbers")
        for x in column:
            _number(x)
    if len(u) != len(f):
        raise ValueError(f"u and f must have the same length, got {len(u)} and {len(f)}")
    if u[0] != 0 or u[-1] != 1 or any(b <= a for a, b in zip(u, u[1:])):
        raise ValueError("u must increase strictly from 0 to 1 (fractions of the run)")
    if any(x < 0 for x in f) or not any(x > 0 for x in f):
        raise ValueError("f must be multipliers ≥ 0, not all 0")
    return {"u": [float(x) for x in u], "f": [float(x) for x in f]}


def _decay(value):
    if not 0 < _number(value) <= 1:
        raise ValueError("must be a fraction of the run in (0, 1]")
    return value


def _batch_schedule(value):
    """An inline table ``{schedule, final, milestones, factor, path}`` (no warm-up: a batch of 0 has no step)."""
    if not isinstance(value, dict):
        raise ValueError('must be an inline table, e.g. {schedule = "step", milestones = [0.5], factor = 4.0}')
    try:
        out = _table(value, _SCHEDULE_KEYS, "", "")
        _check_schedule_keys(out, set(value), "")
    except ConfigError as error:
        raise ValueError(str(error).strip()) from None
    return out


def _covariance(value):
    if value is None:
        return None
    try:
        C = np.array(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError("must be a square list of lists of numbers (the L × L token covariance)") from None
    if C.ndim != 2 or C.shape[0] != C.shape[1]:
        raise ValueError(f"must be a square matrix (got shape {C.shape})")
    if not np.all(np.isfinite(C)):
        raise ValueError("must be finite")
    smallest = np.linalg.eigvalsh(0.5 * (C + C.T)).min()
    if not np.allclose(C, C.T, atol=1e-12) or smallest < -1e-12 * max(1.0, np.abs(C).max()):
        raise ValueError(f"must be symmetric positive semi-definite (smallest eigenvalue {smallest:.3g})")
    return C.tolist()


def _observables(value):
    if value == "all" or (isinstance(value, list) and all(isinstance(w, str) for w in value)):
        return value
    raise ValueError('must be "all" or a list of words, e.g. ["S1 S2"]')


REQUIRED = object()  # marks a key without a default
#: the stepping loop's methods a configuration may name for the hierarchy — not RKC, the matrix model's stepper for
#: gradient flows with a real spectrum (`momentgen.core.chebyshev`), unchecked on the truncated hierarchy
METHODS = tuple(method for method in SOLVERS if method != "RKC")
#: ``[truncation] closure``: the names of the closures' registry (`momentgen.dynamics.closures.CLOSURES`, which checks
#: that its closures are these, in this order, when it is built)
CLOSURES = ("zero", "riccati", "quadrature", "matrix-model")


def key(default, check):
    """One key of a table: its default (`REQUIRED`: none) and its validator (returns the cleaned value or raises
    ValueError saying what is required). The field's annotation is the type of the cleaned value."""
    return field(metadata={"default": default, "check": check})


# Every table and key, in one place each: the frozen dataclasses below are the schema (`_SCHEMA` is read off
# them) and the typed, read-only view of a validated configuration (`momentgen.setting.config.Config.settings`: lists
# become tuples). A new key is one line here.


@dataclass(frozen=True, kw_only=True)
class ModelSettings:
    """[model]: the model kind, tokens, indices, weight decay and token covariance."""

    kind: str = key(REQUIRED, _choice(*models.KINDS, what="model kind"))
    L: int = key(1, _integer(1, 8))
    K: int = key(REQUIRED, _integer(1, 64))
    trainable: tuple | None = key(None, _optional(_index_list))
    gamma: float = key(0.0, _at_most(_non_negative, 1e6))
    C: tuple | None = key(None, _covariance)


@dataclass(frozen=True, kw_only=True)
class LossSettings:
    """[loss]: a built-in loss or an expression, and the quadrature's accuracy."""

    builtin: str | None = key(None, _optional(_choice("mse", "softmax-mse", "multihead-softmax-mse")))
    expression: str | None = key(None, _optional(_string))
    activation: str | None = key(None, _optional(_string))
    student: tuple = key([1], _index_list)
    teacher: tuple = key([2], _index_list)
    heads: tuple | None = key(None, _optional(_head_groups))
    rtol: float = key(1e-8, _fraction)
    # label noise σ (MATH.md §13): a Gaussian of std σ added to each teacher output, one draw per sequence
    noise: float = key(0.0, _at_most(_non_negative, 1e3))


@dataclass(frozen=True, kw_only=True)
class DataSettings:
    """[data]: the tokens' covariance Σ."""

    covariance: str = key("isotropic", _choice(*COVARIANCES, what="data covariance"))
    # a < 1e-6 is Σ = I to 1e-12 (use isotropic); below ~1e-100 the law's Jacobi recurrence overflows
    exponent: float = key(1.0, _at_least(_at_most(_positive, 100), 1e-6))
    path: str | None = key(None, _optional(_string))


#: |b| of an aligned init c Σ^b: its words of degree M read τ(Σ^{Mb}), (1 + a)^{Mb} of a power law — past 4 the
#: teacher's moments span more than 30 decades at degree 13 and the flow stalls at once
MAX_ALIGNED_EXPONENT = 4.0
#: |c| of an aligned init c Σ^b: the risk grows as c², and past 100 the flow is too stiff to integrate in minutes
MAX_ALIGNED_C = 100.0


@dataclass(frozen=True, kw_only=True)
class InitSettings:
    """[init.k]: the initialisation of one index."""

    kind: str = key("gaussian", _choice(*INIT_KINDS))
    width_ratio: float = key(1.0, _at_most(_positive, 100))
    scale: float = key(1.0, _at_most(_positive, 1e3))
    scale_U: float = key(1.0, _at_most(_positive, 1e3))
    scale_V: float = key(1.0, _at_most(_positive, 1e3))
    c: float = key(1.0, _at_most(_number, 1e6))
    path: str | None = key(None, _optional(_string))
    mean: float | None = key(None, _optional(_at_most(_number, 1e6)))
    exponent: float = key(1.0, _at_most(_number, MAX_ALIGNED_EXPONENT))


@dataclass(frozen=True, kw_only=True)
class TruncationSettings:
    """[truncation]: the degree, the observables, the closure and the size guard."""

    degree: int = key(REQUIRED, _integer(1))
    observables: str | tuple = key("all", _observables)
    closure: str = key("zero", _choice(*CLOSURES))
    size: int = key(400, _integer(2, 20_000))
    draws: int = key(1, _integer(1, 100_000))
    seed: int = key(0, _integer(0, 1_000_000))
    max_memory_gb: float = key(8.0, _positive)


@dataclass(frozen=True, kw_only=True)
class IntegrateSettings:
    """[integrate]: the horizon (the model's time axis), output grid, ODE method and tolerances."""

    T: float = key(REQUIRED, _horizon)
    points: int = key(51, _integer(2, 1_000_000))
    method: str = key("LSODA", _choice(*METHODS))
    rtol: float = key(1e-8, _fraction)
    atol: float = key(1e-10, _positive)
    validity_tol: float = key(1e-4, _positive)
    fast_T: float = key(20.0, _horizon)
    finite_lr: bool = key(False, _boolean)
    grid: str = key("linear", _choice("linear", "log"))
    log_first: float | None = key(None, _optional(_horizon))


@dataclass(frozen=True, kw_only=True)
class ScheduleSettings:
    """A batch-size schedule (``[sgd] batch_schedule``): the learning rate's keys without warm-up."""

    schedule: str = key("constant", _choice(*FORMS))
    final: float = key(0.0, _at_most(_non_negative, 1e3))
    milestones: tuple = key([], _milestones)
    factor: float = key(0.1, _at_most(_positive, 1e3))
    path: str | None = key(None, _optional(_string))
    table: dict | None = key(None, _optional(_schedule_table))
    decay: float = key(0.2, _decay)
    exponent: float = key(1.0, _at_least(_at_most(_positive, 10), 0.01))


@dataclass(frozen=True, kw_only=True)
class SgdSettings(ScheduleSettings):
    """[sgd]: the reference simulation (online SGD); its learning-rate schedule has `ScheduleSettings`' keys
    (step n of N uses lr·f(n/N)) and a warm-up."""

    d: int = key(200, _integer(1, 100_000))
    lr: float = key(0.016, _positive)
    batch: int = key(256, _integer(1, 10_000_000))
    seeds: tuple = key([0], _seeds)
    max_steps: int = key(10_000_000, _integer(1, 10**12))
    warmup: float = key(0.0, _warmup)
    momentum: float = key(0.0, _momentum)
    nesterov: bool = key(False, _boolean)
    batch_schedule: ScheduleSettings | None = key(None, _optional(_batch_schedule))


#: The settings class of each table ([init.k] tables: one `InitSettings` each).
SECTIONS = {
    "model": ModelSettings,
    "loss": LossSettings,
    "data": DataSettings,
    "init": InitSettings,
    "truncation": TruncationSettings,
    "integrate": IntegrateSettings,
    "sgd": SgdSettings,
}


@dataclass(frozen=True)
class Settings:
    """The typed, read-only view of a validated configuration (`momentgen.setting.config.Config.settings`): one frozen
    dataclass per table — ``settings.integrate.T``, ``settings.sgd.lr``, ``settings.init[2].scale`` — with
    every default filled in and lists as tuples."""

    model: ModelSettings
    loss: LossSettings
    data: DataSettings
    init: Mapping  # {k: InitSettings}, k = 1 … K (read-only)
    truncation: TruncationSettings
    integrate: IntegrateSettings
    sgd: SgdSettings

    @classmethod
    def from_tables(cls, tables):
        """From validated tables (`momentgen.setting.config.parse_config`: every key present)."""
        sections = {name: _section(SECTIONS[name], values) for name, values in tables.items() if name != "init"}
        init = MappingProxyType({int(k): _section(InitSettings, values) for k, values in tables["init"].items()})
        return cls(init=init, **sections)


def _section(cls, values):
    out = {name: _frozen(value) for name, value in values.items()}
    if cls is SgdSettings and values["batch_schedule"] is not None:
        out["batch_schedule"] = _section(ScheduleSettings, values["batch_schedule"])
    return cls(**out)


def _frozen(value):
    """Lists (nested) as tuples."""
    return tuple(_frozen(v) for v in value) if isinstance(value, list) else value


def _keys(cls):
    return {f.name: (f.metadata["default"], f.metadata["check"]) for f in fields(cls)}


#: Every table and key: (default, validator), read off `SECTIONS`.
_SCHEMA = {name: _keys(cls) for name, cls in SECTIONS.items()}
#: The keys of a batch-size schedule (the lr schedule's, without warm-up).
_SCHEDULE_KEYS = _keys(ScheduleSettings)
#: Which keys each schedule form reads (the others must not be given).
_SCHEDULE_USES = {
    "constant": (),
    "cosine": ("final",),
    "linear": ("final",),
    "step": ("milestones", "factor"),
    "wsd": ("final", "decay"),
    "power": ("final", "exponent"),
    "from-file": ("path",),
    "table": ("table",),
}


def _table(given, fields, where, name):
    if not isinstance(given, dict):
        raise ConfigError(f"{where}{name} must be a table")
    _check_keys(given, fields, where, name)
    out = {}
    for key, (default, check) in fields.items():
        if key not in given:
            if default is REQUIRED:
                raise ConfigError(f"{where}{name} needs `{key}`")
            out[key] = default
            continue
        try:
            out[key] = check(given[key])
        except (ValueError, OverflowError) as error:
            raise ConfigError(f"{where}{name} {key} {error}, got {shown(given[key])}") from None
    return out


def _check_schedule_keys(table, given, where):
    """A schedule's keys that its form does not read are refused (nothing silent)."""
    form = table["schedule"]
    uses = set(_SCHEDULE_USES[form]) | ({"warmup"} if form not in TABULATED else set())
    changed = {key for key in given if key in table and table[key] != _SCHEMA["sgd"][key][0]}  # defaults are moot
    unused = sorted({"final", "milestones", "factor", "path", "warmup", "table", "decay", "exponent"} & changed - uses)
    if unused:
        raise ConfigError(f"{where}`{unused[0]}` does not apply to schedule = {form!r}: remove it")
    needed = {"step": "milestones", "from-file": "path", "table": "table"}.get(form)
    if needed and not table[needed]:
        raise ConfigError(f"{where}schedule = {form!r} needs `{needed}`")
    if form == "wsd" and table.get("warmup", 0.0) + table["decay"] > 1:
        raise ConfigError(
            f"{where}schedule = 'wsd': warmup + decay = {table['warmup'] + table['decay']:g} > 1; the warm-up and "
            "the decay must fit in the run"
        )


def _check_keys(given, allowed, where, table):
    for key in given:
        if not isinstance(key, str):
            raise ConfigError(f"{where}keys in {table} are names (strings), got {shown(key)}")
        if key not in allowed:
            key = shown(key, 40)[1:-1] if len(key) > 40 else key
            near = difflib.get_close_matches(key, list(allowed), n=1)
            hint = f"; did you mean `{near[0]}`?" if near else f"; valid keys: {', '.join(allowed)}"
            raise ConfigError(f"{where}unknown key `{key}` in {table}{hint}")
