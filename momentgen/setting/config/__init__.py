"""Configuration files (TOML, read with the standard library's ``tomllib``).

Every table and key, its default and its unit; unknown keys are errors that suggest the
nearest valid key, and every value is checked once, here, for every command (type, finite,
range), so that a wrong one stops with one line that names it::

    [model]
    kind = "tied"          # tied | untied | direct | symmetric             (required)
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
    expression = "..."     # custom loss in G[i, j, k] (see momentgen.losses); `xi` is the label noise
    rtol = 1e-8            # accuracy of the quadrature rule (non-polynomial losses)
    noise = 0.0            # label noise σ (MATH.md §13): N(0, σ²) added to each teacher output, one draw
                           # per sequence; an expression reads it as `xi` (e.g. (G[1,1,1] - G[1,1,2] - xi)**2)

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
    mean = 0.0             # untied: initial pre-activation mean m_k = Tr(Σ M_k)/√d (from-file: the file's)

    [truncation]
    degree = 8             # truncation degree M (quadrature: exact to degree M, order n = ⌊(M−1)/2⌋) (required)
    observables = "all"    # list of words in text syntax, or "all"
    closure = "zero"       # zero (the paper's Π_M, short window) | riccati (exact: one trainable tied letter
                           # against one fixed letter, MATH.md §15) | quadrature (truncated GNS
                           # representation, valid for all t) | matrix-model (n×n matrix flow)
    size = 400             # matrix-model: matrix size n (error O(1/n); estimate from n and n/2);
                           # riccati: nodes of the fixed letter's Gauss rule (estimate from N and N/2)
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
    grid = "linear"        # linear | log: 0, then `points` − 1 times log-spaced from log_first to T
    log_first = 0.01       # log: the first positive output time (default T/1000)

    [sgd]                  # the reference simulation (online SGD)
    d = 200
    lr = 0.016             # η
    batch = 256            # B
    seeds = [0]
    max_steps = 10000000   # refuse a run of more SGD steps per seed (T·d/(4η) tied, T·d/η others)
    momentum = 0.0         # heavy ball β (MATH.md §14): the theory runs at η/(1 − β), its time axis too
    nesterov = false       # Nesterov's look-ahead (needs momentum > 0; the same first order)
    schedule = "constant"  # constant | cosine | linear | step | wsd | power | from-file | table:
                           # step n of N uses lr·f(n/N) (the API also takes a Python callable f(u))
    warmup = 0.0           # fraction of the run with a linear warm-up from 0 (not from-file / table)
    final = 0.0            # cosine, linear, wsd, power: the last rate as a fraction of lr
    milestones = [0.5]     # step: fractions of the run where the rate is multiplied by `factor`
    factor = 0.1
    decay = 0.2            # wsd: the last fraction of the run, a linear decay to `final`
    exponent = 1.0         # power: final + (1 − final)(1 − v)^exponent after the warm-up
    path = "lr.npz"        # from-file: vectors u (0 … 1) and f (multipliers ≥ 0)
    table = { u = [0.0, 1.0], f = [1.0, 0.5] }  # table: the same, inline
    batch_schedule = { schedule = "step", milestones = [0.5], factor = 4.0 }  # the batch's, same keys
                           # but warmup (optional; κ(t) = lr·f·d/(batch·b) must stay < 1 with finite_lr)
"""

import copy
import difflib
import functools
import hashlib
import json
import pathlib
import tomllib
from dataclasses import InitVar, asdict, dataclass, field

import numpy as np

from ...core.errors import MomentgenError, shown
from ...core.files import checked_path, read_regular_file
from ...models import Model
from ...models.words import canonical, parse
from ..data import ISOTROPIC, DataCovariance
from ..inits import InitSpec
from ..losses import builtin, parse_expression
from ..matrices import initial_factors, load_factors, means, read_covariance
from ..schedules import TimeChange, effective_lr, kappa_of, tabulate
from ..shipped import config_path, names
from .checks import _check_file_means, _check_loss, _check_schedules, _check_together, _schedule
from .schema import _SCHEMA, CLOSURES, METHODS, ConfigError, Settings, _check_keys, _table

__all__ = ["Config", "ConfigError", "load_config", "parse_config", "METHODS", "CLOSURES"]


@functools.lru_cache(maxsize=32)
def _loss(expression, name, L, K, options):
    """A `Loss` from an expression, or a built-in ``name`` with its ``options`` (sorted (key, value) pairs)."""
    if expression is not None:
        return parse_expression(expression, L, K, **dict(options))
    return builtin(name, L=L, K=K, **dict(options))


@dataclass(frozen=True)
class Config:
    """A validated configuration, immutable. ``settings``: its typed, frozen tables (``config.settings.sgd.lr``,
    `config.schema.Settings`: the one way to read a key); ``raw``: a fresh copy of the validated tables
    as plain dicts (for files and other processes; editing it changes nothing — `replace` makes a new
    configuration); ``digest``: its content hash. Built by `parse_config` (or `load_config`)."""

    tables: InitVar[dict]  # the validated tables (kept as JSON text: nothing can change them afterwards)
    source: str = None
    given: frozenset = frozenset()  # "table.key" the user set (the rest are defaults)
    model: Model = field(init=False)
    settings: Settings = field(init=False, repr=False)
    _text: str = field(init=False, repr=False)

    def __post_init__(self, tables):
        object.__setattr__(self, "_text", json.dumps(tables))
        settings = Settings.from_tables(tables)
        object.__setattr__(self, "settings", settings)
        m, sigma = settings.model, settings.data.covariance != "isotropic"
        object.__setattr__(self, "model", Model(m.kind, m.K, m.trainable, sigma))

    @property
    def raw(self):
        """The validated tables as plain dicts (a new copy on each call)."""
        return json.loads(self._text)

    def replace(self, **tables):
        """A new, validated `Config` with some keys changed, e.g. ``replace(truncation={"degree": 6})``
        or ``replace(init={2: {"mean": 1.5}})`` — the same validation as a file's. An init given another ``kind``
        is replaced whole (``replace(init={1: {"kind": "gaussian"}})`` of an identity student drops its ``c``)."""
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
                    current = raw["init"][str(k)]
                    if "kind" in keys and keys["kind"] != current.get("kind"):
                        raw["init"][str(k)] = dict(keys)  # another kind: its own keys, not the old kind's
                    else:
                        current.update(keys)
            else:
                raw[table].update(values)
        given = self.given | {f"{table}.{key}" for table, values in tables.items() if table != "init" for key in values}
        return parse_config(raw, self.source, given=given)

    @property
    def max_bytes(self):
        """``[truncation] max_memory_gb`` in bytes: the size guard of every derivation (`hierarchy.check_size`)."""
        return self.settings.truncation.max_memory_gb * 2**30

    @property
    def digest(self):
        """Content hash of the configuration; keys a later feature added (`_LATER_KEYS`) count only when they are
        not at their default, so a configuration that does not use the feature keeps its digest (its figures'
        provenance, its generated modules)."""
        return hashlib.sha256(json.dumps(_digest_view(self.raw), sort_keys=True).encode()).hexdigest()

    @property
    def file_digest(self):
        """The `digest` of the source file as it is, before any override this configuration applied (a figure's
        provenance records both); None for a configuration built from a dict."""
        return load_config(self.source).digest if self.source else None

    @property
    def kappa(self):
        """κ = η_eff d/B of the finite-learning-rate term (`momentgen.setting.schedules.kappa_of`: ``lr·d/batch``, over
        ``1 − momentum`` with a heavy ball) when ``[integrate] finite_lr`` is on, else 0 (the ηd/B → 0 hierarchy)."""
        return self.sgd_kappa() if self.settings.integrate.finite_lr else 0.0

    def sgd_kappa(self, d=None):
        """κ = η_eff d/B of the ``[sgd]`` run at ``d`` (default ``[sgd] d``), whether or not the theory carries it."""
        sgd = self.settings.sgd
        return kappa_of(sgd.lr, sgd.d if d is None else d, sgd.batch, sgd.momentum)

    def output_times(self, points=None):
        """The output grid on [0, T] of the kind's time axis (nominal under a schedule): ``[integrate] points`` (or
        ``points``) times, equally spaced (``grid = "linear"``) or 0 and then log-spaced from ``log_first`` (default
        T/1000) to T (``grid = "log"``: a power-law tail spans decades of t)."""
        integrate = self.settings.integrate
        points = integrate.points if points is None else points
        if integrate.grid == "linear" or points < 3:
            return np.linspace(0.0, integrate.T, points)
        first = integrate.T / 1000 if integrate.log_first is None else integrate.log_first
        return np.concatenate([[0.0], np.geomspace(first, integrate.T, points - 1)])

    @property
    def axis_lr(self):
        """The learning rate the time axis is read with: η, or η/(1 − β) with momentum β (MATH.md §14;
        `momentgen.setting.schedules.effective_lr`)."""
        return effective_lr(self.settings.sgd.lr, self.settings.sgd.momentum)

    def loss(self):
        """The `momentgen.setting.losses.Loss` of the [loss] table (derived and checked once per table: a `Loss` is
        immutable)."""
        spec, L, K = self.settings.loss, self.settings.model.L, self.settings.model.K
        if spec.expression is not None:
            return _loss(spec.expression, None, L, K, (("noise", spec.noise),))
        options = {"student": spec.student, "teacher": spec.teacher, "noise": spec.noise}
        if spec.builtin == "mse":
            options["activation"] = spec.activation
        return _loss(None, spec.builtin, L, K, tuple(sorted(options.items())))

    def initial_means(self):
        """A kind with a mean: the initial means m_k (array over k) — configured, or a file's own value;
        else None."""
        factors = self.start_factors()
        if factors is not None:
            return means(self.model, factors, self.sigma_of(factors))
        return self.model.definition.laws.configured_means(self.inits())

    def schedules(self):
        """The learning-rate and batch-size `Schedule` s of ``[sgd]`` (a from-file table read relative to the
        configuration's folder, like a from-file init's path). Cached: a table file is read once."""
        if "_schedules" not in self.__dict__:
            sgd = self.settings.sgd
            pair = _schedule(sgd, self._base()), _schedule(sgd.batch_schedule, self._base())
            object.__setattr__(self, "_schedules", pair)
        return self.__dict__["_schedules"]

    def time_change(self):
        """The `TimeChange` of a scheduled run (nominal t ↔ integrated s), None for constant lr and batch."""
        lr, batch = self.schedules()
        if lr.constant and batch.constant:
            return None
        return TimeChange(lr, batch, self.settings.integrate.T)

    def _base(self):
        return pathlib.Path(self.source).parent if self.source else pathlib.Path(".")

    def reported_words(self):
        """The canonical words every run reports: the observables and the words the coefficients read
        (the kind's required words, all of degree ≤ 2), by degree then letter codes."""
        model = self.model
        observables = self.settings.truncation.observables
        listed = [] if observables == "all" else [canonical(w, model) for w in observables]
        required = sorted(
            {canonical(w, model) for w, _ in model.definition.state_words(model)},
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
                else initial_factors(self.model, self.inits(), d, self.settings.sgd.seeds[0], self.data())
            )
            found = None if factors is None else means(self.model, factors, self.sigma_of(factors))
            if found is not None:  # a kind with a mean (a centred kind's means are None)
                _check_file_means(self.inits(), found)
            object.__setattr__(self, "_start", factors)
        return self.__dict__["_start"]

    def data(self):
        """The tokens' covariance Σ (`data.DataCovariance`); a from-file Σ is read (and checked) once."""
        if "_data" not in self.__dict__:
            table = self.settings.data
            if table.covariance == "isotropic":
                data = ISOTROPIC
            elif table.covariance == "power-law":
                data = DataCovariance("power-law", table.exponent)
            else:
                path = str(self._base() / table.path)
                data = DataCovariance("from-file", path=path, **read_covariance(path))
            object.__setattr__(self, "_data", data)
        return self.__dict__["_data"]

    def sigma_of(self, factors):
        """The letter Σ at the dimension of finite ``factors`` (None for isotropic tokens)."""
        return self.data().letter(self.model, self.model.definition.matrices.dimension(factors[0]))

    def input_paths(self):
        """The files this configuration reads: its own source and every from-file init's path (an output
        must be none of them, `momentgen.core.files.ensure_outputs`)."""
        paths = [self.source] if self.source else []
        sgd = self.settings.sgd
        tables = [t for t in (sgd, sgd.batch_schedule, self.settings.data) if t is not None]
        paths += [str(self._base() / t.path) for t in tables if t.path is not None]
        return paths + [spec.path for spec in self.inits().values() if spec.path is not None]

    def inits(self):
        """{k: InitSpec} for every index."""
        base = self._base()
        out = {}
        for k, table in self.settings.init.items():
            path = None if table.path is None else str(base / table.path)
            out[k] = InitSpec(**{**asdict(table), "path": path})
        return out


#: (table, key) added after version 0.2: left out of `Config.digest` while at their default.
_LATER_KEYS = (
    ("data", "covariance"),
    ("data", "exponent"),
    ("data", "path"),
    ("init", "exponent"),
    ("loss", "noise"),
    ("sgd", "momentum"),
    ("sgd", "nesterov"),
    ("sgd", "table"),
    ("sgd", "decay"),
    ("sgd", "exponent"),
    ("integrate", "grid"),
    ("integrate", "log_first"),
    ("truncation", "seed"),
)


def _digest_view(raw):
    """``raw`` without the `_LATER_KEYS` that hold their default (a table left empty goes too)."""
    view = copy.deepcopy(raw)
    for table, key in _LATER_KEYS:
        default = _SCHEMA[table][key][0]
        tables = view["init"].values() if table == "init" else [view.get(table, {})]
        if table == "sgd" and isinstance(view["sgd"].get("batch_schedule"), dict):
            tables = [*tables, view["sgd"]["batch_schedule"]]
        for values in tables:
            if values.get(key, default) == default:
                values.pop(key, None)
    if not view.get("data"):
        view.pop("data", None)
    return view


def load_config(source, **overrides):
    """Read and validate a configuration.

    Parameters
    ----------
    source : str, path, dict or Config
        A TOML file's path, a dict with the same tables, a shipped example's name (``"fig4_linear"``:
        `momentgen.examples`) or a `Config`.
    **overrides
        Keys to change per table, validated like the file's, e.g. ``truncation={"degree": 6}``.

    Returns
    -------
    Config
        Immutable; its keys are read as ``config.settings.<table>.<key>``.

    Raises
    ------
    ConfigError
        One line naming the table, the key, what is required and what was given.

    Examples
    --------
    >>> cfg = mg.load_config("fig4_linear", truncation={"degree": 6})
    >>> cfg.model.kind, cfg.settings.truncation.degree
    ('tied', 6)
    """
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
    try:
        path = pathlib.Path(checked_path(source, "configuration file"))
    except MomentgenError as error:
        raise ConfigError(str(error)) from None
    if not path.exists() and path.suffix == "" and path.parent == pathlib.Path("."):
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

    folder = path.parent if path.parent.is_dir() else None
    candidates = [p.name for p in folder.glob("*.toml")] if folder else []
    near = difflib.get_close_matches(path.name, candidates, n=1)
    if near:
        return f"; did you mean {str(folder / near[0])!r}?"
    example = difflib.get_close_matches(path.stem, names(), n=1)
    return f"; did you mean the example {example[0]!r}?" if example else ""


def _tabulate_callables(data, where):
    """A Python callable ``f(u)`` given as ``[sgd] schedule`` (or the batch schedule's) becomes the ``table`` form:
    its values on `schedules.TABLE_POINTS` fractions of the run (in place; the configuration then holds
    numbers only, so its digest, files and other processes see the table)."""
    sgd = data.get("sgd")
    tables = [sgd] if isinstance(sgd, dict) else []
    if tables and isinstance(sgd.get("batch_schedule"), dict):
        sgd["batch_schedule"] = dict(sgd["batch_schedule"])
        tables.append(sgd["batch_schedule"])
    for name, table in zip(("[sgd] schedule", "[sgd] batch_schedule"), tables):
        if callable(table.get("schedule")):
            try:
                table["table"] = tabulate(table["schedule"])
            except ValueError as error:
                raise ConfigError(f"{where}{name}: {error}") from None
            table["schedule"] = "table"


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
    _tabulate_callables(data, where)
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
