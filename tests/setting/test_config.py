"""Configuration files: defaults, validation with suggestions, and the CLI commands that read them.

The output grid on a log axis (``[integrate] grid = "log"``): one grid for every closure and SGD's measurements.
"""

import json

import numpy as np
import pytest

from momentgen.dynamics.closures import solve_with_closure
from momentgen.reference import simulate_config
from momentgen.setting.config import ConfigError, load_config, parse_config
from tests.helpers import ROOT

MINIMAL = {
    "model": {"kind": "tied", "K": 2, "trainable": [1]},
    "loss": {"builtin": "mse"},
    "init": {"1": {"kind": "gaussian"}, "2": {"kind": "identity", "c": 1.0}},
    "truncation": {"degree": 4},
    "integrate": {"T": 0.01},
}


def with_change(table, key, value):
    data = json.loads(json.dumps(MINIMAL))
    data.setdefault(table, {})[key] = value
    return data


def test_defaults_are_filled_in():
    config = parse_config(MINIMAL)
    assert config.settings.model.L == 1 and config.settings.model.gamma == 0.0
    assert config.settings.integrate.method == "LSODA" and config.settings.integrate.points == 51
    assert config.settings.truncation.observables == "all"
    assert config.inits()[2].kind == "identity" and config.loss().name == "mse(h1)"


@pytest.mark.parametrize(
    "data,needle",
    [
        (with_change("model", "gama", 0.1), "did you mean `gamma`"),
        (with_change("integrate", "point", 11), "did you mean `points`"),
        (with_change("truncation", "degre", 4), "did you mean `degree`"),
        ({**MINIMAL, "integrat": {"T": 1}}, "did you mean `integrate`"),
        (with_change("init", "3", {"kind": "gaussian"}), r"\[init.3\] is not an index"),
        ({**MINIMAL, "init": {"1": {"kind": "gaussian"}}}, r"missing \[init.2\]"),
        (with_change("loss", "expression", "G[1,1,1]**2"), "exactly one of"),
        (with_change("integrate", "method", "Euler"), "method must be one of"),
        (with_change("integrate", "T", -1), "positive number"),
        (with_change("model", "kind", "linear"), "unknown model"),
        (with_change("model", "trainable", [3]), "out of range"),
        (with_change("loss", "activation", "swish"), "unknown activation"),
        (with_change("truncation", "observables", "S1 S2"), "observables must be"),
        (with_change("truncation", "closure", "magic"), "closure must be"),
        (with_change("truncation", "seed", -1), r"\[truncation\] seed must be an integer ≥ 0 and ≤ 1000000, got"),
        (with_change("truncation", "seed", 2.5), r"\[truncation\] seed must be an integer ≥ 0 and ≤ 1000000, got"),
        (with_change("truncation", "seed", True), r"\[truncation\] seed must be an integer ≥ 0 and ≤ 1000000, got"),
        (
            with_change("truncation", "seed", 10**7),
            r"\[truncation\] seed must be an integer ≥ 0 and ≤ 1000000, got 10000000",
        ),
        (with_change("truncation", "observables", ["S1 S3"]), r"\[truncation\] `observables`: 'S1 S3': letter 'S3'"),
        ({k: v for k, v in MINIMAL.items() if k != "truncation"}, r"\[truncation\] needs `degree`"),
    ],
)
def test_bad_configs_say_what_to_change(data, needle):
    with pytest.raises(ConfigError, match=needle):
        parse_config(data)


def test_bad_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[model\nkind = 1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
    letter = tmp_path / "letter.toml"  # issue 32: an out-of-range letter names the file and the key
    letter.write_text((ROOT / "examples" / "configs" / "fig4_linear.toml").read_text().replace('"S1 S2"', '"S3 S2"'))
    with pytest.raises(ConfigError, match=r"letter.toml: \[truncation\] `observables`: 'S3 S2'"):
        load_config(letter)


@pytest.mark.parametrize("path", sorted((ROOT / "examples" / "configs").glob("*.toml")), ids=lambda p: p.stem)
def test_example_configs_load(path):
    config = load_config(path)
    assert config.model.K == len(config.raw["init"]) and config.source == str(path)


def test_a_config_cannot_be_changed_past_its_validation():
    """Before, ``config.raw["integrate"]["T"] = -1`` changed a validated configuration in place (no check;
    examples did it). Now the typed settings are frozen (lists are tuples), ``raw`` is a copy, and a change
    goes through `Config.replace`, validated like a file."""
    import dataclasses

    config = load_config(ROOT / "examples" / "configs" / "fig4_linear.toml")
    raw = config.raw
    raw["integrate"]["T"] = -1.0
    raw["sgd"]["seeds"].append(7)
    assert config.settings.integrate.T > 0 and config.raw["integrate"]["T"] == config.settings.integrate.T
    assert 7 not in config.settings.sgd.seeds and config.raw["sgd"]["seeds"] == list(config.settings.sgd.seeds)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.settings.integrate.T = 2.0
    with pytest.raises(TypeError):
        config.settings.init[1] = None
    assert isinstance(config.settings.sgd.seeds, tuple) and isinstance(config.settings.model.trainable, tuple)
    with pytest.raises(ConfigError, match=r"\[integrate\] T must be a positive number"):
        config.replace(integrate={"T": -1.0})
    assert config.replace(integrate={"T": 0.25}).settings.integrate.T == 0.25


def test_a_log_grid_is_shared_by_the_theory_and_sgd():
    """``grid = "log"``: 0, then log-spaced from ``log_first`` to T; the theory reports there and SGD measures there
    (its steps within half a step of each time)."""
    config = load_config("fig4_linear", integrate={"grid": "log", "log_first": 0.005, "points": 6}, sgd={"d": 100})
    expected = np.concatenate([[0.0], np.geomspace(0.005, 0.05, 5)])
    np.testing.assert_allclose(config.output_times(), expected, rtol=1e-12)
    result = solve_with_closure(config)
    np.testing.assert_allclose(result.t, expected, rtol=1e-12)
    run = simulate_config(config, progress=False)
    np.testing.assert_allclose(run["t"], expected, rtol=1e-12)
    step = 4 * config.settings.sgd.lr / 100
    assert np.all(np.abs(np.subtract(run["t_reached"], expected)) <= step / 2 + 1e-12)


@pytest.mark.parametrize(
    "keys,match",
    [
        ({"grid": "exp"}, r"grid must be one of linear, log"),
        ({"grid": "log", "log_first": 0.0}, r"log_first must be a positive number"),
        ({"grid": "log", "log_first": 0.05}, r"log_first = 0.05 must be below T = 0.01"),
        ({"log_first": 0.001}, r"`log_first` applies to grid = \"log\" only"),
    ],
)
def test_bad_grid_keys_are_one_line_errors(keys, match):
    with pytest.raises(ConfigError, match=match):
        load_config("fig4_linear", integrate={"T": 0.01, **keys})


def test_an_sgd_step_longer_than_the_first_log_spacing_is_refused_first():
    """SGD cannot be reported at a log grid's first time when one step is longer: the check says which key to raise."""
    config = load_config("fig4_linear", integrate={"grid": "log", "log_first": 1e-5}, sgd={"d": 400})
    with pytest.raises(Exception, match=r"raise \[integrate\] log_first to at least"):
        simulate_config(config, progress=False)


@pytest.mark.parametrize("grid", ["linear", "log"])
def test_verify_reads_sgd_on_the_most_points_it_resolves(grid):
    """verify's finite-d leg reads SGD on the largest grid (≤ `points`) whose every spacing is at least one SGD step:
    the bisection against a brute-force scan of every point count, and against the closed form ⌊T/step⌋ + 1 on a
    linear grid."""
    from momentgen.evidence.verification_plan import _sgd_points

    config = load_config("fig4_linear", integrate={"grid": grid, "points": 200, "T": 0.5})
    for d, kappa in ((100, 0.05), (200, 0.2), (400, 0.01)):
        step = 4 * kappa * config.settings.sgd.batch / d / d  # tied: one step is 4η/d on t, η = κB/d
        scan = [p for p in range(2, 201) if np.diff(config.output_times(p)).min() >= step * (1 - 1e-9)]
        assert _sgd_points(config, d, kappa) == max(scan, default=2)
        if grid == "linear":
            assert _sgd_points(config, d, kappa) == min(200, int(0.5 / step * (1 + 1e-9)) + 1)


def test_an_init_given_another_kind_is_replaced_whole():
    """Issue 48's first-hour papercut: turning the shipped scaling-law student (identity, c = 0.5) into a Gaussian one
    by an override refused with "`c` is not read by kind = gaussian"; an init given another kind now starts from that
    kind's own keys, and an override of the same kind still changes only the keys it names."""
    from momentgen.setting.config import load_config

    gaussian = load_config("scaling_law", init={"1": {"kind": "gaussian", "scale": 0.8}})
    assert gaussian.inits()[1].kind == "gaussian" and gaussian.inits()[1].scale == 0.8
    assert gaussian.inits()[2].kind == "aligned" and gaussian.inits()[2].c == 1.2
    smaller = load_config("scaling_law", init={"1": {"c": 0.25}})
    assert smaller.inits()[1].kind == "identity" and smaller.inits()[1].c == 0.25


def test_the_matrix_models_stepper_is_not_a_configuration_choice_for_the_hierarchy():
    """RKC (`core.chebyshev`) steps the matrix model's gradient flows, whose spectrum is real; it was not checked on
    the truncated hierarchy, so ``[integrate] method = "RKC"`` is refused with the one-line list of the choices."""
    from momentgen.setting.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="method must be one of LSODA, Radau, BDF, DOP853, RK45, got 'RKC'"):
        load_config("fig4_linear", integrate={"method": "RKC"})
