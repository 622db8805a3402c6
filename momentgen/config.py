"""Configuration files (TOML, read with the standard library's ``tomllib``).

Every table and key, its default and its unit; unknown keys are errors that suggest the
nearest valid key::

    [model]
    kind = "tied"          # tied | untied | direct                         (required)
    L = 1                  # tokens
    K = 2                  # indices: student(s) + teacher(s)                (required)
    trainable = [1]        # 1-based trainable indices; default: all
    gamma = 0.0            # weight decay γ
    C = [[1.0]]            # L×L token covariance (PSD); default identity

    [loss]                 # exactly one of builtin / expression
    builtin = "mse"        # mse | softmax-mse
    activation = "h1"      # mse only: h1 h2 h3 tanh erf relu
    student = [1]          # indices summed into the student output (default [1])
    teacher = [2]          # indices summed into the teacher output (default [2])
    expression = "..."     # custom loss in G[i, j, k] (see momentgen.losses)
    rtol = 1e-8            # accuracy of the quadrature rule (non-polynomial losses)

    [init.1]               # one table per index k = 1..K
    kind = "gaussian"      # gaussian | identity | from-file
    width_ratio = 1.0      # d_k / d
    scale = 1.0            # entries N(0, scale²/d) (tied W_k, direct S_k)
    scale_U = 1.0          # untied U_k
    scale_V = 1.0          # untied V_k
    c = 1.0                # identity: S_k = c I
    path = "S.npz"         # from-file: arrays W or S (tied), U and V (untied), S (direct)
    mean = 0.0             # untied: initial pre-activation mean m_k = Tr(M_k)/√d (from-file: the file's)

    [truncation]
    degree = 8             # truncation degree M (quadrature: exact to degree M, order n = ⌊(M−1)/2⌋) (required)
    observables = "all"    # list of words in text syntax, or "all"
    closure = "zero"       # zero (the paper's Π_M, short window) | quadrature (truncated GNS
                           # representation, valid for all t) | matrix-model (n×n matrix flow)
    size = 400             # matrix-model: matrix size n (error O(1/n); estimate from n and n/2)

    [integrate]
    T = 0.05               # horizon on the model's time axis (tied t = 4nη/d; untied, direct τ = nη/d)
    points = 51            # output grid, uniform on [0, T]
    method = "LSODA"       # LSODA | Radau | BDF | DOP853 | RK45
    rtol = 1e-8
    atol = 1e-10
    validity_tol = 1e-4    # valid_until: first time degrees M and M − 2 differ by more
    fast_T = 20.0          # untied only: fast-phase horizon on t = nη

    [sgd]                  # the reference simulation (online SGD)
    d = 200
    lr = 0.016             # η
    batch = 256            # B
    seeds = [0]
"""

import difflib
import hashlib
import json
import pathlib
import tomllib
from dataclasses import dataclass, field

import numpy as np

from .errors import ModelError, MomentgenError
from .hierarchy import Model
from .initial import InitSpec, initial_factors, load_factors
from .matrices import untied_means
from .losses import builtin, parse_expression

__all__ = ["Config", "ConfigError", "load_config", "parse_config"]


class ConfigError(ModelError):
    """A configuration file that cannot be used as written."""


_SCHEMA = {
    "model": {"kind": None, "L": 1, "K": None, "trainable": None, "gamma": 0.0, "C": None},
    "loss": {"builtin": None, "expression": None, "activation": "h1", "student": [1], "teacher": [2], "rtol": 1e-8},
    "init": {"kind": "gaussian", "width_ratio": 1.0, "scale": 1.0, "scale_U": 1.0, "scale_V": 1.0, "c": 1.0,
             "path": None, "mean": None},
    "truncation": {"degree": None, "observables": "all", "closure": "zero", "size": 400},
    "integrate": {"T": None, "points": 51, "method": "LSODA", "rtol": 1e-8, "atol": 1e-10, "validity_tol": 1e-4,
                  "fast_T": 20.0},
    "sgd": {"d": 200, "lr": 0.016, "batch": 256, "seeds": [0]},
}  # fmt: skip
_REQUIRED = {"model": ("kind", "K"), "truncation": ("degree",), "integrate": ("T",)}
METHODS = ("LSODA", "Radau", "BDF", "DOP853", "RK45")
CLOSURES = ("zero", "quadrature", "matrix-model")


@dataclass(frozen=True)
class Config:
    """A validated configuration. ``raw`` is the parsed TOML; ``digest`` its content hash."""

    raw: dict
    source: str = None
    model: Model = field(init=False)

    def __post_init__(self):
        m = self.raw["model"]
        object.__setattr__(self, "model", Model(m["kind"], m["K"], m["trainable"]))

    def section(self, name):
        return self.raw[name]

    @property
    def digest(self):
        return hashlib.sha256(json.dumps(self.raw, sort_keys=True).encode()).hexdigest()

    def loss(self):
        """The `momentgen.losses.Loss` of the [loss] table."""
        spec, L, K = self.raw["loss"], self.raw["model"]["L"], self.raw["model"]["K"]
        if spec["expression"] is not None:
            return parse_expression(spec["expression"], L, K)
        options = {"student": spec["student"], "teacher": spec["teacher"]}
        if spec["builtin"] == "mse":
            options["activation"] = spec["activation"]
        return builtin(spec["builtin"], L=L, K=K, **options)

    def potential(self):
        """The `momentgen.potential.Potential` of the loss, model kind, [model] C and [loss] rtol."""
        from .potential import Potential

        return Potential(self.loss(), self.model.kind, C=self.raw["model"]["C"], rtol=self.raw["loss"]["rtol"])

    def initial_means(self):
        """Untied: the initial means m_k (array over k) — configured, or a file's own value; else None."""
        if self.model.kind != "untied":
            return None
        factors = self.start_factors()
        if factors is not None:
            return untied_means(factors)
        return np.array([spec.configured_mean for _, spec in sorted(self.inits().items())])

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
            factors = None if d is None else initial_factors(self.model, self.inits(), d, self.raw["sgd"]["seeds"][0])
            if factors is not None and self.model.kind == "untied":
                _check_file_means(self.inits(), untied_means(factors))
            object.__setattr__(self, "_start", factors)
        return self.__dict__["_start"]

    def inits(self):
        """{k: InitSpec} for every index."""
        base = pathlib.Path(self.source).parent if self.source else pathlib.Path(".")
        out = {}
        for k, table in self.raw["init"].items():
            table = dict(table)
            if table["path"] is not None:
                table["path"] = str(base / table["path"])
            out[int(k)] = InitSpec(**table)
        return out


def _check_file_means(inits, means):
    """An explicit `mean` of a from-file untied init must be the file's own Tr(M_k)/√d."""
    for k, spec in sorted(inits.items()):
        file_mean = means[k - 1]
        if spec.kind == "from-file" and spec.mean is not None and not np.isclose(spec.mean, file_mean, rtol=1e-9,
                                                                                 atol=1e-9):  # fmt: skip
            raise ConfigError(f"[init.{k}] mean = {spec.mean:.6g} contradicts the file {spec.path!r}, whose "
                              f"Tr(M_{k})/√d = {file_mean:.6g}: drop `mean` (the file's value is used) or fix the file")


def load_config(path):
    """Read and validate a TOML configuration file."""
    path = pathlib.Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"configuration file {str(path)!r} not found") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    return parse_config(data, source=str(path))


def parse_config(data, source=None):
    """Validate a configuration given as a dict (the parsed TOML), filling in defaults."""
    where = f"{source}: " if source else ""
    _check_keys(data, _SCHEMA, where, "top level")
    raw = {}
    for table, keys in _SCHEMA.items():
        if table == "init":
            continue
        given = data.get(table, {})
        if not isinstance(given, dict):
            raise ConfigError(f"{where}[{table}] must be a table")
        _check_keys(given, keys, where, f"[{table}]")
        for key in _REQUIRED.get(table, ()):
            if key not in given:
                raise ConfigError(f"{where}[{table}] needs `{key}`")
        raw[table] = {**keys, **given}
    K = raw["model"]["K"]
    raw["init"] = _inits(data.get("init", {}), K, where)
    _check_values(raw, where)
    try:
        config = Config(raw, source)
        config.loss()  # validates the loss table
        config.inits()
    except MomentgenError as error:
        raise ConfigError(f"{where}{error}") from error
    return config


def _inits(given, K, where):
    if not isinstance(K, int) or isinstance(K, bool) or K < 1:
        raise ConfigError(f"{where}[model] K must be a positive integer, got {K!r}")
    if not isinstance(given, dict):
        raise ConfigError(f"{where}[init] must hold tables [init.1] … [init.K]")
    out = {}
    for k in range(1, K + 1):
        table = given.get(str(k))
        if table is None:
            raise ConfigError(f"{where}missing [init.{k}]: every index 1..{K} needs an initialisation")
        _check_keys(table, _SCHEMA["init"], where, f"[init.{k}]")
        out[str(k)] = {**_SCHEMA["init"], **table}
    extra = sorted(set(given) - {str(k) for k in range(1, K + 1)})
    if extra:
        raise ConfigError(f"{where}[init.{extra[0]}] is not an index 1..{K}")
    return out


def _check_keys(given, allowed, where, table):
    for key in given:
        if key not in allowed:
            near = difflib.get_close_matches(key, list(allowed), n=1)
            hint = f"; did you mean `{near[0]}`?" if near else f"; valid keys: {', '.join(allowed)}"
            raise ConfigError(f"{where}unknown key `{key}` in {table}{hint}")


def _check_values(raw, where):
    loss = raw["loss"]
    if (loss["builtin"] is None) == (loss["expression"] is None):
        raise ConfigError(f"{where}[loss] needs exactly one of `builtin` or `expression`")
    trunc, integ = raw["truncation"], raw["integrate"]
    if trunc["closure"] not in CLOSURES:
        raise ConfigError(f"{where}[truncation] closure must be one of {CLOSURES}, got {trunc['closure']!r}")
    if integ["method"] not in METHODS:
        raise ConfigError(f"{where}[integrate] method must be one of {METHODS}, got {integ['method']!r}")
    for table, key in (("integrate", "T"), ("integrate", "rtol"), ("integrate", "atol"), ("sgd", "lr")):
        value = raw[table][key]
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
            raise ConfigError(f"{where}[{table}] `{key}` must be a positive number, got {value!r}")
    for table, key in (("integrate", "points"), ("sgd", "d"), ("sgd", "batch"), ("model", "L")):
        value = raw[table][key]
        if not isinstance(value, int) or isinstance(value, bool) or value < (2 if key == "points" else 1):
            raise ConfigError(f"{where}[{table}] `{key}` must be a positive integer, got {value!r}")
    obs = trunc["observables"]
    if not (obs == "all" or (isinstance(obs, list) and all(isinstance(w, str) for w in obs))):
        raise ConfigError(f"{where}[truncation] observables must be \"all\" or a list of words, got {obs!r}")
