"""Configuration files (TOML, read with the standard library's ``tomllib``).

Every table and key, its default and its unit; unknown keys are errors that suggest the
nearest valid key, and every value is checked once, here, for every command (type, finite,
range), so that a wrong one stops with one line that names it::

    [model]
    kind = "tied"          # tied | untied | direct                         (required)
    L = 1                  # tokens
    K = 2                  # indices: student(s) + teacher(s)                (required)
    trainable = [1]        # 1-based trainable indices; default: all
    gamma = 0.0            # weight decay γ
    C = [[1.0]]            # L×L token covariance (PSD); default identity

    [loss]                 # exactly one of builtin / expression
    builtin = "mse"        # mse | softmax-mse | multihead-softmax-mse
    activation = "h1"      # mse only: h1 h2 h3 tanh erf softplus
    student = [1]          # indices summed into the student output (default [1])
    teacher = [2]          # indices summed into the teacher output (default [2])
    expression = "..."     # custom loss in G[i, j, k] (see momentgen.losses)
    rtol = 1e-8            # accuracy of the quadrature rule (non-polynomial losses)

    [data]                 # the tokens' covariance E[x xᵀ] = C ⊗ Σ (MATH.md §10)
    covariance = "isotropic"  # isotropic (Σ = I) | power-law | from-file (every kind; MATH.md §10)
    exponent = 1.0         # power-law: the eigenvalue at quantile u is (1 + a) u^a (Tr Σ / d = 1)
    path = "sigma.npz"     # from-file: `eigenvalues` (length d) or `Sigma` (d × d, symmetric PD)

    [init.1]               # one table per index k = 1..K
    kind = "gaussian"      # gaussian | identity | from-file | aligned (S_k = c Σ^b: needs [data])
    width_ratio = 1.0      # d_k / d
    scale = 1.0            # entries N(0, scale²/d) (tied W_k, direct S_k)
    scale_U = 1.0          # untied U_k
    scale_V = 1.0          # untied V_k
    c = 1.0                # identity: S_k = c I; aligned: S_k = c Σ^b
    exponent = 1.0         # aligned: b
    path = "S.npz"         # from-file: arrays W or S (tied), U and V (untied), S (direct)
    mean = 0.0             # untied: initial pre-activation mean m_k = Tr(M_k)/√d (from-file: the file's)

    [truncation]
    degree = 8             # truncation degree M (quadrature: exact to degree M, order n = ⌊(M−1)/2⌋) (required)
    observables = "all"    # list of words in text syntax, or "all"
    closure = "zero"       # zero (the paper's Π_M, short window) | quadrature (truncated GNS
                           # representation, valid for all t) | matrix-model (n×n matrix flow)
    size = 400             # matrix-model: matrix size n (error O(1/n); estimate from n and n/2)
    draws = 1              # matrix-model: Haar draws per size (> 1: control-variate ensemble, run on 2 processes)
    max_memory_gb = 8.0    # refuse a truncation whose estimated size is larger (raise to override)

    [integrate]
    T = 0.05               # horizon on the model's time axis (tied t = 4nη/d; untied, direct τ = nη/d)
    points = 51            # output grid, uniform on [0, T]
    method = "LSODA"       # LSODA | Radau | BDF | DOP853 | RK45
    rtol = 1e-8
    atol = 1e-10
    validity_tol = 1e-4    # valid_until: first time degrees M and M − 2 differ by more
    fast_T = 20.0          # untied only: fast-phase horizon on t = nη
    finite_lr = false      # add the finite-learning-rate term with κ = lr·d/batch of [sgd] (then
                           # [sgd] must give d, lr and batch; κ < 1)

    [sgd]                  # the reference simulation (online SGD)
    d = 200
    lr = 0.016             # η
    batch = 256            # B
    seeds = [0]
    max_steps = 10000000   # refuse a run of more SGD steps per seed (T·d/(4η) tied, T·d/η others)
    schedule = "constant"  # constant | cosine | linear | step | from-file: step n of N uses lr·f(n/N)
    warmup = 0.0           # fraction of the run with a linear warm-up from 0 (not from-file)
    final = 0.0            # cosine, linear: the last rate as a fraction of lr
    milestones = [0.5]     # step: fractions of the run where the rate is multiplied by `factor`
    factor = 0.1
    path = "lr.npz"        # from-file: vectors u (0 … 1) and f (multipliers ≥ 0)
    batch_schedule = { schedule = "step", milestones = [0.5], factor = 4.0 }  # the batch's, same keys
                           # but warmup (optional; κ(t) = lr·f·d/(batch·b) must stay < 1 with finite_lr)
"""

import copy
import difflib
import hashlib
import json
import math
import pathlib
import tomllib
from dataclasses import dataclass, field

import numpy as np

from . import models
from .data import COVARIANCES, ISOTROPIC, DataCovariance
from .errors import ModelError, MomentgenError, WordError, shown
from .files import read_regular_file
from .inits import INIT_KINDS, InitSpec
from .losses import builtin, parse_expression
from .matrices import initial_factors, load_factors, matrix_bytes, means, read_covariance, read_vectors
from .models import Model
from .schedules import FORMS, Schedule, TimeChange
from .words import canonical, parse

__all__ = ["Config", "ConfigError", "load_config", "parse_config", "METHODS", "CLOSURES"]


class ConfigError(ModelError):
    """A configuration file that cannot be used as written."""


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
METHODS = ("LSODA", "Radau", "BDF", "DOP853", "RK45")  # the ODE methods of momentgen.stepper.SOLVERS
CLOSURES = ("zero", "quadrature", "matrix-model")
#: Every table and key: (default, validator).
_SCHEMA = {
    "model": {
        "kind": (REQUIRED, _choice(*models.KINDS, what="model kind")),
        "L": (1, _integer(1, 8)),
        "K": (REQUIRED, _integer(1, 64)),
        "trainable": (None, _optional(_index_list)),
        "gamma": (0.0, _at_most(_non_negative, 1e6)),
        "C": (None, _covariance),
    },
    "loss": {
        "builtin": (None, _optional(_choice("mse", "softmax-mse", "multihead-softmax-mse"))),
        "expression": (None, _optional(_string)),
        "activation": (None, _optional(_string)),
        "student": ([1], _index_list),
        "teacher": ([2], _index_list),
        "heads": (None, _optional(_head_groups)),
        "rtol": (1e-8, _fraction),
    },
    "data": {
        "covariance": ("isotropic", _choice(*COVARIANCES, what="data covariance")),
        "exponent": (1.0, _at_most(_positive, 100)),
        "path": (None, _optional(_string)),
    },
    "init": {
        "kind": ("gaussian", _choice(*INIT_KINDS)),
        "width_ratio": (1.0, _at_most(_positive, 100)),
        "scale": (1.0, _at_most(_positive, 1e3)),
        "scale_U": (1.0, _at_most(_positive, 1e3)),
        "scale_V": (1.0, _at_most(_positive, 1e3)),
        "c": (1.0, _at_most(_number, 1e6)),
        "path": (None, _optional(_string)),
        "mean": (None, _optional(_at_most(_number, 1e6))),
        "exponent": (1.0, _at_most(_number, 100)),
    },
    "truncation": {
        "degree": (REQUIRED, _integer(1)),
        "observables": ("all", _observables),
        "closure": ("zero", _choice(*CLOSURES)),
        "size": (400, _integer(2, 20_000)),
        "draws": (1, _integer(1, 100_000)),
        "max_memory_gb": (8.0, _positive),
    },
    "integrate": {
        "T": (REQUIRED, _horizon),
        "points": (51, _integer(2, 1_000_000)),
        "method": ("LSODA", _choice(*METHODS)),
        "rtol": (1e-8, _fraction),
        "atol": (1e-10, _positive),
        "validity_tol": (1e-4, _positive),
        "fast_T": (20.0, _horizon),
        "finite_lr": (False, _boolean),
    },
    "sgd": {
        "d": (200, _integer(1, 100_000)),
        "lr": (0.016, _positive),
        "batch": (256, _integer(1, 10_000_000)),
        "seeds": ([0], _seeds),
        "max_steps": (10_000_000, _integer(1, 10**12)),
        "schedule": ("constant", _choice(*FORMS)),
        "warmup": (0.0, _warmup),
        "final": (0.0, _at_most(_non_negative, 1e3)),
        "milestones": ([], _milestones),
        "factor": (0.1, _at_most(_positive, 1e3)),
        "path": (None, _optional(_string)),
        "batch_schedule": (None, _optional(_batch_schedule)),
    },
}
#: The keys of a batch-size schedule (the lr schedule's, without warm-up).
_SCHEDULE_KEYS = {key: _SCHEMA["sgd"][key] for key in ("schedule", "final", "milestones", "factor", "path")}
#: Which keys each schedule form reads (the others must not be given).
_SCHEDULE_USES = {
    "constant": (),
    "cosine": ("final",),
    "linear": ("final",),
    "step": ("milestones", "factor"),
    "from-file": ("path",),
}


@dataclass(frozen=True)
class Config:
    """A validated configuration. ``raw`` is the parsed TOML; ``digest`` its content hash."""

    raw: dict
    source: str = None
    given: frozenset = frozenset()  # "table.key" the user set (the rest are defaults)
    model: Model = field(init=False)

    def __post_init__(self):
        m = self.raw["model"]
        sigma = self.raw["data"]["covariance"] != "isotropic"
        object.__setattr__(self, "model", Model(m["kind"], m["K"], m["trainable"], sigma))

    def section(self, name):
        return self.raw[name]

    def replace(self, **tables):
        """A new, validated `Config` with some keys changed, e.g. ``replace(truncation={"degree": 6})``
        or ``replace(init={2: {"mean": 1.5}})`` — the same validation as a file's."""
        raw = copy.deepcopy(self.raw)
        for table, values in tables.items():
            if table not in raw:
                raise ConfigError(f"unknown table [{table}]: the tables are {', '.join(raw)}")
            if not isinstance(values, dict):
                raise ConfigError(f"[{table}] overrides must be a dict of keys, got {values!r}")
            if table == "init":
                for k, keys in values.items():
                    if str(k) not in raw["init"]:
                        raise ConfigError(f"[init.{k}] is not an index 1..{self.model.K}")
                    raw["init"][str(k)].update(keys)
            else:
                raw[table].update(values)
        given = self.given | {f"{table}.{key}" for table, values in tables.items() if table != "init" for key in values}
        return parse_config(raw, self.source, given=given)

    @property
    def max_bytes(self):
        """``[truncation] max_memory_gb`` in bytes: the size guard of every derivation (`hierarchy.check_size`)."""
        return self.raw["truncation"]["max_memory_gb"] * 2**30

    @property
    def digest(self):
        """Content hash of the configuration; keys a later feature added (`_LATER_KEYS`) count only when they are
        not at their default, so a configuration that does not use the feature keeps its digest (its figures'
        provenance, its generated modules)."""
        return hashlib.sha256(json.dumps(_digest_view(self.raw), sort_keys=True).encode()).hexdigest()

    @property
    def kappa(self):
        """κ = ηd/B of the finite-learning-rate term: ``lr·d/batch`` of [sgd] when ``[integrate]
        finite_lr`` is on, else 0 (the ηd/B → 0 hierarchy)."""
        if not self.raw["integrate"]["finite_lr"]:
            return 0.0
        sgd = self.raw["sgd"]
        return sgd["lr"] * sgd["d"] / sgd["batch"]

    def loss(self):
        """The `momentgen.losses.Loss` of the [loss] table."""
        spec, L, K = self.raw["loss"], self.raw["model"]["L"], self.raw["model"]["K"]
        if spec["expression"] is not None:
            return parse_expression(spec["expression"], L, K)
        options = {"student": spec["student"], "teacher": spec["teacher"]}
        if spec["builtin"] == "mse":
            options["activation"] = spec["activation"]
        return builtin(spec["builtin"], L=L, K=K, **options)

    def initial_means(self):
        """A kind with a mean: the initial means m_k (array over k) — configured, or a file's own value;
        else None."""
        if self.model.family.centred:
            return None
        factors = self.start_factors()
        if factors is not None:
            return means(self.model, factors, self._sigma_at(factors))
        return np.array([spec.configured_mean for _, spec in sorted(self.inits().items())])

    def schedules(self):
        """The learning-rate and batch-size `Schedule` s of ``[sgd]`` (a from-file table read relative to the
        configuration's folder, like a from-file init's path). Cached: a table file is read once."""
        if "_schedules" not in self.__dict__:
            sgd = self.raw["sgd"]
            pair = _schedule(sgd, self._base()), _schedule(sgd["batch_schedule"] or {}, self._base())
            object.__setattr__(self, "_schedules", pair)
        return self.__dict__["_schedules"]

    def time_change(self):
        """The `TimeChange` of a scheduled run (nominal t ↔ integrated s), None for constant lr and batch."""
        lr, batch = self.schedules()
        if lr.constant and batch.constant:
            return None
        return TimeChange(lr, batch, self.raw["integrate"]["T"])

    def _base(self):
        return pathlib.Path(self.source).parent if self.source else pathlib.Path(".")

    def reported_words(self):
        """The canonical words every run reports: the observables and the words the coefficients read
        (the kind's required words, all of degree ≤ 2), by degree then letter codes."""
        model = self.model
        observables = self.raw["truncation"]["observables"]
        listed = [] if observables == "all" else [canonical(w, model) for w in observables]
        required = sorted(
            {canonical(w, model) for w, _ in model.family.state_words(model)},
            key=lambda w: (len(w.split()), parse(w, model)),
        )
        return list(dict.fromkeys(listed + required))

    def file_dimension(self):
        """d of the matrices of the first ``from-file`` init, or None when every init has a d = ∞ law."""
        for _, spec in sorted(self.inits().items()):
            if spec.kind == "from-file":
                factor = load_factors(self.model, spec.path)
                return (factor[0] if isinstance(factor, tuple) else factor).shape[0]
        return None

    def start_factors(self):
        """The finite-d matrices the theory starts from when an init is read from a file (the
        other indices drawn at the file's d as the SGD run of the first ``[sgd]`` seed draws
        them); None when every init has a d = ∞ law. Cached: the files are read once."""
        if "_start" not in self.__dict__:
            d = self.file_dimension()
            factors = (
                None
                if d is None
                else initial_factors(self.model, self.inits(), d, self.raw["sgd"]["seeds"][0], self.data())
            )
            if factors is not None and not self.model.family.centred:
                _check_file_means(self.inits(), means(self.model, factors, self._sigma_at(factors)))
            object.__setattr__(self, "_start", factors)
        return self.__dict__["_start"]

    def data(self):
        """The tokens' covariance Σ (`momentgen.data.DataCovariance`); a from-file Σ is read (and checked) once."""
        if "_data" not in self.__dict__:
            table = self.raw["data"]
            if table["covariance"] == "isotropic":
                data = ISOTROPIC
            elif table["covariance"] == "power-law":
                data = DataCovariance("power-law", table["exponent"])
            else:
                path = str(self._base() / table["path"])
                data = DataCovariance("from-file", path=path, **read_covariance(path))
            object.__setattr__(self, "_data", data)
        return self.__dict__["_data"]

    def _sigma_at(self, factors):
        """Σ at the dimension of ``factors`` (None for isotropic tokens)."""
        return self.data().matrix(self.model.family.dimension(factors[0])) if self.model.sigma else None

    def input_paths(self):
        """The files this configuration reads: its own source and every from-file init's path (an output
        must be none of them, `momentgen.files.ensure_outputs`)."""
        paths = [self.source] if self.source else []
        tables = [self.raw["sgd"], self.raw["sgd"]["batch_schedule"] or {}]
        tables.append(self.raw["data"])
        paths += [str(self._base() / t["path"]) for t in tables if t.get("path") is not None]
        return paths + [spec.path for spec in self.inits().values() if spec.path is not None]

    def inits(self):
        """{k: InitSpec} for every index."""
        base = self._base()
        out = {}
        for k, table in self.raw["init"].items():
            table = dict(table)
            if table["path"] is not None:
                table["path"] = str(base / table["path"])
            out[int(k)] = InitSpec(**table)
        return out


#: (table, key) added after version 0.2: left out of `Config.digest` while at their default.
_LATER_KEYS = (("data", "covariance"), ("data", "exponent"), ("data", "path"), ("init", "exponent"))


def _digest_view(raw):
    """``raw`` without the `_LATER_KEYS` that hold their default (a table left empty goes too)."""
    view = copy.deepcopy(raw)
    for table, key in _LATER_KEYS:
        default = _SCHEMA[table][key][0]
        tables = view["init"].values() if table == "init" else [view.get(table, {})]
        for values in tables:
            if values.get(key, default) == default:
                values.pop(key, None)
    if not view.get("data"):
        view.pop("data", None)
    return view


def _check_file_means(inits, means):
    """An explicit `mean` of a from-file init must be the file's own Tr(M_k)/√d."""
    for k, spec in sorted(inits.items()):
        file_mean = means[k - 1]
        if (
            spec.kind == "from-file"
            and spec.mean is not None
            and not np.isclose(spec.mean, file_mean, rtol=1e-9, atol=1e-9)
        ):
            raise ConfigError(
                f"[init.{k}] mean = {spec.mean:.6g} contradicts the file {spec.path!r}, whose "
                f"Tr(M_{k})/√d = {file_mean:.6g}: drop `mean` (the file's value is used) or fix the file"
            )


def load_config(source, **overrides):
    """Read and validate a configuration: a TOML file's path, a dict with the same tables, an example's
    name (``"fig4_linear"``: `momentgen.examples`) or a `Config`; ``overrides`` change keys per table,
    validated like the file's, e.g. ``load_config("fig4_linear", truncation={"degree": 6})``."""
    if isinstance(source, Config):
        config = source
    elif isinstance(source, dict):
        config = parse_config(_plain_tables(copy.deepcopy(source)))
    elif isinstance(source, (str, pathlib.PurePath)) and str(source).strip():
        config = _read_toml(_locate(source))
    else:
        raise ConfigError(
            "load_config takes a TOML file's path, a dict of tables, an example's name or a Config; got "
            + (repr(source) if isinstance(source, str) else type(source).__name__)
        )
    return config.replace(**overrides) if overrides else config


def _plain_tables(data):
    """A Python dict as its TOML would be: ``[init.k]`` tables may be keyed by int (``{1: {…}}``), and
    numpy numbers are plain numbers; any other non-string key is a `ConfigError`."""
    if not isinstance(data, dict):
        return data
    init = data.get("init")
    if isinstance(init, dict):
        data["init"] = {(str(k) if isinstance(k, int) and not isinstance(k, bool) else k): v for k, v in init.items()}
    for table, values in data.items():
        bad = [k for k in (values if isinstance(values, dict) else ()) if not isinstance(k, str)]
        if not isinstance(table, str) or bad:
            raise ConfigError(
                f"configuration keys are strings (table and key names), got {shown(bad[0] if bad else table)}"
            )
        if isinstance(values, dict):
            data[table] = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in values.items()}
    return data


def _locate(source):
    """A path, or a shipped example's name (no suffix, no folder) when no such file exists."""
    path = pathlib.Path(source)
    if not path.exists() and path.suffix == "" and path.parent == pathlib.Path("."):
        from .examples import config_path  # noqa: PLC0415 - examples imports this module

        return config_path(str(source))
    return path


#: the largest configuration file read (a configuration is a few hundred bytes; this stops /dev/zero)
MAX_CONFIG_BYTES = 1 << 20


def _read_toml(path):
    try:
        text = read_regular_file(path, MAX_CONFIG_BYTES, "configuration file").decode("utf-8-sig")
        data = tomllib.loads(text)
    except FileNotFoundError:
        raise ConfigError(f"configuration file {str(path)!r} not found{_nearby(path)}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    except OSError as error:
        raise ConfigError(f"cannot read configuration file {str(path)!r}: {error.strerror or error}") from None
    except MomentgenError as error:
        raise ConfigError(str(error)) from None
    return parse_config(data, source=str(path))


def _nearby(path):
    """A suggestion for a mistyped configuration path: a close name in the same folder, or a shipped example."""
    from .examples import names  # noqa: PLC0415 - examples imports this module

    folder = path.parent if path.parent.is_dir() else None
    candidates = [p.name for p in folder.glob("*.toml")] if folder else []
    near = difflib.get_close_matches(path.name, candidates, n=1)
    if near:
        return f"; did you mean {str(folder / near[0])!r}?"
    example = difflib.get_close_matches(path.stem, names(), n=1)
    return f"; did you mean the example {example[0]!r}?" if example else ""


def parse_config(data, source=None, given=None):
    """Validate a configuration given as a dict (the parsed TOML), filling in defaults.

    Every key is checked here (type, finiteness, range) — one validation for every command; a
    wrong one is a `ConfigError` whose one line names the table, the key, what is required and
    what was given. ``given``: the ``"table.key"`` names the user set (default: those in ``data``).
    """
    where = f"{source}: " if source else ""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}a configuration is a table of tables, got {type(data).__name__}")
    _check_keys(data, _SCHEMA, where, "top level")
    raw = {
        table: _table(data.get(table, {}), fields, where, f"[{table}]")
        for table, fields in _SCHEMA.items()
        if table != "init"
    }
    K = raw["model"]["K"]
    init_tables = data.get("init", {})
    if not isinstance(init_tables, dict):
        raise ConfigError(f"{where}[init] must hold tables [init.1] … [init.{K}]")
    extra = sorted(set(init_tables) - {str(k) for k in range(1, K + 1)})
    if extra:
        raise ConfigError(f"{where}[init.{extra[0]}] is not an index 1..{K}")
    missing = [k for k in range(1, K + 1) if str(k) not in init_tables]
    if missing:
        raise ConfigError(f"{where}missing [init.{missing[0]}]: every index 1..{K} needs an initialisation")
    raw["init"] = {str(k): _table(init_tables[str(k)], _SCHEMA["init"], where, f"[init.{k}]") for k in range(1, K + 1)}
    if given is None:
        given = frozenset(
            f"{table}.{key}"
            for table, values in data.items()
            if table != "init" and isinstance(values, dict)
            for key in values
        )
    _check_together(raw, given, where)
    try:
        config = Config(raw, source, frozenset(given))
        _check_loss(config)
        config.inits()
        config.data()  # a from-file Σ: read and checked now
        config.start_factors()  # a from-file init: its file is read and checked now, not after a long run
        _check_schedules(config, where)
    except ConfigError:
        raise
    except MomentgenError as error:
        raise ConfigError(f"{where}{error}") from error
    return config


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


def _check_together(raw, given, where):
    """The rules that involve several keys."""
    _check_indices(raw, where)
    _check_loss_keys(raw["loss"], where)
    _check_inits(raw, where)
    _check_data(raw, where)
    sgd_given = {key.split(".", 1)[1] for key in given if key.startswith("sgd.")}
    _check_schedule_keys(raw["sgd"], sgd_given, where + "[sgd] ")
    if raw["integrate"]["finite_lr"]:
        _check_finite_lr(raw, given, where)
    truncation = raw["truncation"]
    _check_observables(raw, where)
    if truncation["closure"] == "matrix-model":
        _check_matrix_model_size(raw, where)
    if truncation["closure"] == "quadrature" and truncation["degree"] < 3:
        raise ConfigError(
            f"{where}[truncation] the quadrature closure needs degree M ≥ 3 (order n = ⌊(M − 1)/2⌋ ≥ 1), "
            f"got {truncation['degree']}"
        )


def _check_observables(raw, where):
    """Every listed observable is a word of this kind over indices 1..K (the file and key named)."""
    observables = raw["truncation"]["observables"]
    for word in [] if observables == "all" else observables:
        try:
            m = raw["model"]
            parse(word, Model(m["kind"], m["K"], m["trainable"], raw["data"]["covariance"] != "isotropic"))
        except WordError as error:
            raise ConfigError(f"{where}[truncation] `observables`: {word!r}: {error}") from None


def _check_indices(raw, where):
    """C matches L; every index list names indices 1..K."""
    model = raw["model"]
    K, L = model["K"], model["L"]
    if model["C"] is not None and np.shape(model["C"]) != (L, L):
        raise ConfigError(
            f"{where}[model] `C` has shape {np.shape(model['C'])}; with L = {L} tokens it must be {L} × {L}"
        )
    for table, key in (("model", "trainable"), ("loss", "student"), ("loss", "teacher")):
        bad = [k for k in raw[table][key] or () if not 1 <= k <= K]
        if bad:
            raise ConfigError(f"{where}[{table}] `{key}` indices {bad} are out of range 1..{K} (1-based)")


def _check_loss_keys(loss, where):
    """Exactly one of builtin/expression, and the keys each kind of loss reads (heads, activation)."""
    if (loss["builtin"] is None) == (loss["expression"] is None):
        raise ConfigError(f"{where}[loss] needs exactly one of `builtin` or `expression`")
    if loss["activation"] is not None and loss["builtin"] != "mse":
        used = "an expression" if loss["expression"] else f"builtin = {loss['builtin']!r}"
        raise ConfigError(
            f'{where}[loss] `activation` applies to builtin = "mse" only; {used} does not use it: remove it'
        )
    if loss["expression"] is not None and (loss["student"], loss["teacher"]) != ([1], [2]):
        raise ConfigError(
            f"{where}[loss] `student` and `teacher` apply to built-in losses only: an expression "
            "names its indices itself in G[i, j, k]"
        )
    _check_heads(loss, where)
    if loss["builtin"] == "mse" and loss["activation"] is None:
        loss["activation"] = "h1"


def _check_heads(loss, where):
    """``heads`` belongs to the multi-head loss, which needs it (and then sets student/teacher from it)."""
    if loss["heads"] is not None:
        if loss["builtin"] != "multihead-softmax-mse":
            raise ConfigError(f'{where}[loss] `heads` applies to builtin = "multihead-softmax-mse" only')
        if [loss["student"], loss["teacher"]] not in ([[1], [2]], loss["heads"]):
            raise ConfigError(f"{where}[loss] give either `heads` or `student`/`teacher`, not both")
        loss["student"], loss["teacher"] = loss["heads"]
    elif loss["builtin"] == "multihead-softmax-mse" and (loss["student"], loss["teacher"]) == ([1], [2]):
        raise ConfigError(f"{where}[loss] multihead-softmax-mse needs `heads`, e.g. heads = [[1, 2], [3, 4]]")


def _check_inits(raw, where):
    """Each init's keys fit its kind and the model kind (PSD identity, a path for from-file, no mean when
    centred)."""
    family = models.get(raw["model"]["kind"])
    for k, table in raw["init"].items():
        if table["kind"] in ("identity", "aligned") and family.positive_letters and table["c"] < 0:
            raise ConfigError(
                f"{where}[init.{k}] {table['kind']} `c` = {table['c']} < 0: the letters of the "
                f"{raw['model']['kind']} model are positive semi-definite, so c I must be (c ≥ 0)"
            )
        if table["kind"] == "from-file" and table["path"] is None:
            raise ConfigError(f'{where}[init.{k}] kind = "from-file" needs `path` (an .npz of finite-d matrices)')
        if table["mean"] is not None and family.centred:
            raise ConfigError(
                f"{where}[init.{k}] `mean` is the pre-activation mean Tr(M_k)/√d of a model with a "
                f"mean; the {raw['model']['kind']} model's pre-activations are centred: remove it"
            )


def _check_data(raw, where):
    """[data]: the keys its covariance reads (no other), an aligned init only with a Σ, and the kinds and terms Σ is
    derived for."""
    data, kind = raw["data"], raw["model"]["kind"]
    reads = {"isotropic": (), "power-law": ("exponent",), "from-file": ("path",)}[data["covariance"]]
    defaults = {key: default for key, (default, _) in _SCHEMA["data"].items()}
    stray = [key for key in ("exponent", "path") if data[key] != defaults[key] and key not in reads]
    if stray:
        raise ConfigError(f'{where}[data] `{stray[0]}` is not read by covariance = "{data["covariance"]}": remove it')
    if data["covariance"] == "from-file" and data["path"] is None:
        raise ConfigError(
            f'{where}[data] covariance = "from-file" needs `path` (an .npz with `eigenvalues` or `Sigma`)'
        )
    aligned = [k for k, table in raw["init"].items() if table["kind"] == "aligned"]
    if aligned and data["covariance"] == "isotropic":
        raise ConfigError(
            f'{where}[init.{aligned[0]}] kind = "aligned" is S = c Σ^b for a data covariance Σ: set [data] covariance '
            '(with isotropic data use kind = "identity")'
        )
    if aligned and models.get(kind).centred is False:
        raise ConfigError(
            f'{where}[init.{aligned[0]}] kind = "aligned" for the {kind} model: M = c Σ^b has the mean '
            "Tr(Σ M)/√d = O(√d), not O(1); use a gaussian init (with `mean`) for a teacher of this kind"
        )


def _check_matrix_model_size(raw, where):
    """The matrix-model closure's n × n matrices (two processes for an ensemble) fit ``max_memory_gb``."""
    truncation = raw["truncation"]
    model = Model(raw["model"]["kind"], raw["model"]["K"], raw["model"]["trainable"])
    inits = {int(k): InitSpec(**table) for k, table in raw["init"].items()}
    processes = 2 if truncation["draws"] > 1 else 1
    memory = processes * matrix_bytes(model, truncation["size"], inits)
    limit = truncation["max_memory_gb"] * 2**30
    if memory > limit:
        raise ConfigError(
            f"{where}[truncation] the matrix-model closure at size {truncation['size']} needs about "
            f"{memory / 2**30:.3g} GiB; the limit is max_memory_gb = {truncation['max_memory_gb']:g}: lower size "
            "or raise the limit"
        )


def _check_finite_lr(raw, given, where):
    """``finite_lr = true`` takes κ = lr·d/batch from an explicit [sgd] table, and κ must be < 1."""
    missing = [key for key in ("d", "lr", "batch") if f"sgd.{key}" not in given]
    if missing:
        raise ConfigError(
            f"{where}[integrate] finite_lr = true takes kappa = lr·d/batch from [sgd]: set "
            + ", ".join(f"[sgd] {key}" for key in missing)
        )
    sgd = raw["sgd"]
    kappa = sgd["lr"] * sgd["d"] / sgd["batch"]
    if kappa >= 1:
        raise ConfigError(
            f"{where}[integrate] finite_lr: kappa = lr·d/batch = {sgd['lr']:g}·{sgd['d']}/{sgd['batch']} = "
            f"{kappa:.3g} ≥ 1 is outside the expansion in kappa the term is the first order of; lower lr "
            "or raise batch"
        )
    family = models.get(raw["model"]["kind"])
    if family.noise_scale is None:
        raise ConfigError(f"{where}[integrate] finite_lr: the {raw['model']['kind']} model has no such term")


def _schedule(table, base):
    """The `Schedule` of a validated schedule table (``[sgd]`` or its ``batch_schedule``)."""
    form = table.get("schedule", "constant")
    if form == "from-file":
        path = base / table["path"]
        arrays = read_vectors(path, ("u", "f"), "schedule table")
        return Schedule(form, table=_checked_table(arrays["u"], arrays["f"], path))
    keys = {k: table[k] for k in ("warmup", "final", "factor") if k in table}
    return Schedule(form, milestones=tuple(table.get("milestones", ())), **keys)


def _check_schedules(config, where):
    """The schedule files read now; a batch multiplier stays positive; with ``finite_lr`` the peak κ < 1."""
    lr, batch = config.schedules()
    if np.min(batch(batch.knots)) <= 0:
        raise ConfigError(f"{where}[sgd] batch_schedule reaches a batch of 0: give it a positive `final`/`f`")
    change = config.time_change()
    if change is not None and config.kappa * change.peak_kappa_factor >= 1:
        raise ConfigError(
            f"{where}[integrate] finite_lr: the schedule's peak kappa = lr·d/batch·max(f/b) = "
            f"{config.kappa * change.peak_kappa_factor:.3g} ≥ 1 is outside the expansion in kappa; lower lr"
        )


def _checked_table(u, f, path):
    """A from-file schedule: ``u`` increasing from 0 to 1, ``f`` ≥ 0 of the same length, not all 0."""
    if len(u) != len(f):
        raise ConfigError(f"{path}: arrays u and f must have the same length, got {len(u)} and {len(f)}")
    if u[0] != 0 or u[-1] != 1 or np.any(np.diff(u) <= 0):
        raise ConfigError(f"{path}: u must increase strictly from 0 to 1 (fractions of the run)")
    if np.any(f < 0) or not np.any(f > 0):
        raise ConfigError(f"{path}: f must be multipliers ≥ 0, not all 0")
    return tuple(u.tolist()), tuple(f.tolist())


def _check_schedule_keys(table, given, where):
    """A schedule's keys that its form does not read are refused (nothing silent)."""
    form = table["schedule"]
    uses = set(_SCHEDULE_USES[form]) | ({"warmup"} if form != "from-file" else set())
    changed = {key for key in given if key in table and table[key] != _SCHEMA["sgd"][key][0]}  # defaults are moot
    unused = sorted({"final", "milestones", "factor", "path", "warmup"} & changed - uses)
    if unused:
        raise ConfigError(f"{where}`{unused[0]}` does not apply to schedule = {form!r}: remove it")
    needed = {"step": "milestones", "from-file": "path"}.get(form)
    if needed and not table[needed]:
        raise ConfigError(f"{where}schedule = {form!r} needs `{needed}`")


def _check_loss(config):
    """The loss builds, and it depends on a trainable index (else nothing would learn)."""
    loss = config.loss()
    trainable = set(config.model.trainable)
    if not any(int(str(v).rsplit("_", 1)[1]) in trainable for v in loss.expr.free_symbols):
        raise ConfigError(
            f"loss {loss.name!r} does not depend on a trainable index {sorted(trainable)}: "
            "its gradient is 0 and nothing would move; check [loss] student/teacher and [model] trainable"
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
