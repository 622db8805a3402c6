"""What several test modules share: small configurations (`SMALL`, `TIED`, `CONFIG`, and MATH.md §6's solvable case
at three resolutions: `SOLVABLE`, `RISK_SOLVABLE`, `VERIFY_SOLVABLE`), TOML writers (`write_toml`, `write_config`)
and small builders (`changed`, `untied_config`, `solvable`, `bare_result`, …).
"""

import json
import pathlib

import numpy as np

from momentgen.models.words import enumerate_words, parse
from momentgen.setting.config import load_config, parse_config

SMALL = {
    "model": {"kind": "tied", "K": 2, "trainable": [1]},
    "loss": {"builtin": "mse", "activation": "h1"},
    "init": {"1": {"kind": "gaussian"}, "2": {"kind": "identity", "c": 1.0}},
    "truncation": {"degree": 6, "observables": ["S1 S1", "S1 S2"]},
    "integrate": {"T": 0.1, "points": 6},
    "sgd": {"d": 40, "lr": 0.02, "batch": 64, "seeds": [0, 1]},
}


def write_config(tmp_path, data=SMALL):
    """``data`` as ``tmp_path/small.toml`` (`write_toml`)."""
    return write_toml(tmp_path / "small.toml", data)


ROOT = pathlib.Path(__file__).resolve().parents[1]


TIED = {
    "model": {"kind": "tied", "K": 2, "trainable": [1]},
    "loss": {"builtin": "mse", "activation": "h1"},
    "init": {"1": {"kind": "gaussian"}, "2": {"kind": "identity", "c": 1.0}},
    "truncation": {"degree": 6},
    "integrate": {"T": 0.02, "points": 5},
    "sgd": {"d": 30, "lr": 0.02, "batch": 32, "seeds": [0]},
}


def changed(table, key, value, base=TIED):
    data = json.loads(json.dumps(base))
    data.setdefault(table, {})[key] = value
    return data


def write_toml(path, data):
    """A TOML file from a dict of tables (values as TOML literals; enough for these tests)."""
    lines = []
    for table, values in data.items():
        if table == "init":
            for k, spec in values.items():
                lines.append(f"[init.{k}]")
                lines += [f"{key} = {_literal(v)}" for key, v in spec.items()]
            continue
        lines.append(f"[{table}]")
        lines += [f"{key} = {_literal(v)}" for key, v in values.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def _literal(value):
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, float) and not np.isfinite(value):
        return "nan" if np.isnan(value) else ("inf" if value > 0 else "-inf")
    return json.dumps(value).replace("NaN", "nan")


CONFIG = load_config("fig4_linear")


SOLVABLE = {  # MATH.md §6: Wishart student σ = 1 (ratio 1), teacher I, γ = 0, ℓ = (G1 − G2)²
    "model": {"kind": "tied", "K": 2, "trainable": [1]},
    "loss": {"builtin": "mse", "activation": "h1"},
    "init": {"1": {"kind": "gaussian"}, "2": {"kind": "identity", "c": 1.0}},
    "truncation": {"degree": 129, "observables": ["S1 S1", "S1 S2"], "closure": "quadrature"},
    "integrate": {"T": 1.0, "points": 41},
}


def all_words(model, degree):
    return [parse(w, model.kind, model.K) for w in enumerate_words(model.kind, model.K, degree)]


RISK_SOLVABLE = {  # MATH.md §6's solvable case (tests/dynamics/test_closures.py) at degree 25 on t ∈ [0, 1]
    **SOLVABLE,
    "truncation": {**SOLVABLE["truncation"], "degree": 25},
    "integrate": {"T": 1.0, "points": 11},
}


def untied_config(gamma=0.0, mean=1.5, activation="h2"):
    """Student mean 0.05: the O(1/√d) finite-d seed that takes h2 off its unstable m = 0."""
    return parse_config(
        {
            "model": {"kind": "untied", "L": 1, "K": 2, "trainable": [1], "gamma": gamma},
            "loss": {"builtin": "mse", "activation": activation},
            "init": {
                "1": {"scale_U": 0.6, "scale_V": 0.9, "mean": 0.05},
                "2": {"scale_U": 1.0, "scale_V": 1.0, "mean": mean},
            },
            "truncation": {"degree": 4, "observables": ["M1 M2^T"]},
            "integrate": {"T": 0.2, "points": 21},
        }
    )


WORDS = ("S1", "S1 S1", "S1 S2")


def solvable(r, scale, c, degree, T, points=31):
    """The exactly solvable tied case (MATH.md §7) with a Wishart student of width ratio r."""
    return parse_config(
        {
            "model": {"kind": "tied", "K": 2, "trainable": [1]},
            "loss": {"builtin": "mse"},
            "init": {"1": {"kind": "gaussian", "width_ratio": r, "scale": scale}, "2": {"kind": "identity", "c": c}},
            "truncation": {"degree": degree, "observables": ["S1 S1", "S1 S2"], "closure": "quadrature"},
            "integrate": {"T": T, "points": points},
        }
    )


def sup_error(out, exact, words=WORDS):
    return max(np.abs(np.asarray(out.series[w]) - np.asarray(exact[w])).max() for w in words)


VERIFY_SOLVABLE = {
    "model": {"kind": "tied", "K": 2, "trainable": [1]},
    "loss": {"builtin": "mse", "activation": "h1"},
    "init": {"1": {"kind": "gaussian"}, "2": {"kind": "identity", "c": 1.0}},
    "truncation": {"degree": 9, "observables": ["S1", "S1 S1"], "closure": "quadrature"},
    "integrate": {"T": 0.3, "points": 7},
    "sgd": {"d": 100, "lr": 0.02, "batch": 256},  # κ = ηd/B = 0.0078: the κ → 0 curve is verified there
}


def verify_solvable(**tables):
    return parse_config({**VERIFY_SOLVABLE, **tables})


def bare_result(t, status, message, valid_until):
    """A tied zero-closure `Result` with no series: what the code that judges and reports reads of one."""
    from momentgen.dynamics.results import Result

    return Result(t, status, message, model="tied", closure="zero", time_scale="t", series={}, derived={},
                  valid_until=valid_until)  # fmt: skip


def sigma_config(**tables):
    """The shipped scaling-law setting (power-law Σ, a = 1; student 0.5 I, teacher 1.2 Σ^½) at degree 7 on t ∈ [0, 1],
    with ``tables`` merged in (a table given as None is left out)."""
    raw = {
        "model": {"kind": "tied", "K": 2, "trainable": [1]},
        "loss": {"builtin": "mse", "activation": "h1"},
        "data": {"covariance": "power-law", "exponent": 1.0},
        "init": {"1": {"kind": "identity", "c": 0.5}, "2": {"kind": "aligned", "c": 1.2, "exponent": 0.5}},
        "truncation": {"degree": 7, "closure": "quadrature", "observables": ["S1", "S1 S1", "S1 Sigma"]},
        "integrate": {"T": 1.0, "points": 11},
    }
    for table, values in tables.items():
        raw[table] = {**raw.get(table, {}), **values} if values is not None else None
    return parse_config({k: v for k, v in raw.items() if v is not None})
