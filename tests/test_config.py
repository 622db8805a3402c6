"""Configuration files: defaults, validation with suggestions, and the CLI commands that read them."""

import json
import pathlib

import pytest

from momentgen.interface.cli import main
from momentgen.setting.config import ConfigError, load_config, parse_config

ROOT = pathlib.Path(__file__).resolve().parents[1]
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


def test_generate_and_solve_commands(tmp_path, capsys):
    config = ROOT / "examples" / "configs" / "fig4_linear.toml"
    out = tmp_path / "linear.py"
    assert main(["generate-truncation", str(config), "--degree", "6", "--out", str(out)]) == 0
    assert "state words: 32" in capsys.readouterr().out and out.exists()
    assert len(list(tmp_path.glob("linear.*.npz"))) == 1  # the data file, named by its content
    result = tmp_path / "linear.json"
    assert main(["solve", str(config), "--json", str(result), "--degree", "6"]) == 0
    data = json.loads(result.read_text())
    assert data["status"] == "partial" and data["degree"] == 6 and data["time_scale"] == "t = 4 n eta / d"
    assert set(data["series"]) >= {"S1", "S1 S1", "S1 S2"} and len(data["t"]) == 51
    assert 0 < data["valid_until"] <= 0.05 and len(data["derived"]["p12"]) == 51


def test_cli_reports_config_errors(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('[model]\nkind = "tied"\nK = 2\nlearning_rate = 1\n')
    assert main(["solve", str(bad), "--json", str(tmp_path / "x.json")]) == 2
    assert "unknown key `learning_rate` in [model]" in capsys.readouterr().err
