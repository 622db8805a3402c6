"""The momentgen command: output and error paths."""

import json

import pytest

from momentgen.interface.cli import main
from tests.helpers import ROOT, VERIFY_SOLVABLE, write_config


def test_hierarchy_command_prints_diagnostics(capsys):
    assert (
        main(
            [
                "hierarchy",
                "--model",
                "tied",
                "--K",
                "2",
                "--trainable",
                "1",
                "--degree",
                "6",
                "--observables",
                "S1 S2",
                "--why",
                "S1 S1 S2 S2",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "state words: 32" in out and "why is 'S1 S1 S2 S2' here?" in out and "observable" in out


def test_words_command_counts(capsys):
    assert main(["words", "--model", "tied", "--K", "2", "--degree", "8"]) == 0
    assert "84 canonical words" in capsys.readouterr().out


def test_bad_input_exits_2_with_message(capsys):
    assert main(["hierarchy", "--model", "untied", "--K", "2", "--degree", "3", "--observables", "M1 X2"]) == 2
    assert "unknown letter 'X2'" in capsys.readouterr().err


def test_a_bad_option_value_is_blamed_on_the_option_not_the_file(capsys):
    """`--closure quadratur` names the option and what it must be; a combination that only fails together
    (κ = lr·d/batch ≥ 1) names every option involved."""
    config = "examples/configs/fig4_linear.toml"
    assert main(["solve", config, "--closure", "quadratur", "--json", "/nonexistent/x.json"]) == 2
    err = capsys.readouterr().err
    assert "--closure 'quadratur': must be one of zero, riccati, quadrature, matrix-model" in err
    assert "fig4_linear" not in err
    assert main(["solve", config, "--finite-lr", "--lr", "2", "--batch", "64", "--json", "/nonexistent/x.json"]) == 2
    assert "--lr 2.0" in capsys.readouterr().err


def test_sgd_options_set_the_kappa_of_the_finite_lr_term(tmp_path):
    """`solve --finite-lr --lr 0.02 --batch 64 --d 300` carries κ = 0.02·300/64 (the README's κ numbers can be
    reproduced from the command line)."""
    import json

    out = tmp_path / "s.json"
    args = ["solve", "examples/configs/fig4_linear.toml", "--finite-lr", "--lr", "0.02", "--batch", "64", "--d", "300"]
    assert main([*args, "--json", str(out)]) == 0
    assert json.loads(out.read_text())["kappa"] == pytest.approx(0.02 * 300 / 64)


def test_every_command_describes_itself(capsys):
    """Each subcommand's --help opens with a description line; the top-level help shows no reST markup."""
    for command in ("solve", "spectrum", "verify", "compare", "cache"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = capsys.readouterr().out
        assert text.split("\n\n")[1].strip().endswith(".")
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "``" not in capsys.readouterr().out


def test_solve_says_a_closed_system_is_exact_from_the_result_not_its_message(tmp_path, capsys):
    """Issue 27: the summary reads the closure's capabilities and ``extra["closed"]`` (the direct kind's closed
    system), never the text of the message: a closed run says "exact", a quadrature run names its order."""
    assert main(["solve", "examples/configs/fig2_direct_h2.toml", "--json", str(tmp_path / "d.json")]) == 0
    assert "exact (closed system) until" in capsys.readouterr().out
    assert json.loads((tmp_path / "d.json").read_text())["closed"] is True
    config = "examples/configs/fig4_linear.toml"
    args = ["solve", config, "--closure", "quadrature", "--degree", "5", "--json", str(tmp_path / "q.json")]
    assert main(args) == 0
    assert "error estimate" in capsys.readouterr().out


def test_solve_command_takes_a_closure(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(
        "\n".join(
            [
                "[model]",
                'kind = "tied"',
                "K = 2",
                "trainable = [1]",
                "[loss]",
                'builtin = "mse"',
                "[init.1]",
                'kind = "gaussian"',
                "[init.2]",
                'kind = "identity"',
                "[truncation]",
                "degree = 4",
                "[integrate]",
                "T = 0.1",
                "points = 5",
            ]
        )
    )
    out = tmp_path / "mm.json"
    assert main(["solve", str(path), "--json", str(out), "--closure", "matrix-model", "--size", "60"]) == 0
    data = json.loads(out.read_text())
    assert data["closure"] == "matrix-model" and data["size"] == 60 and len(data["t"]) == 5
    assert main(["solve", str(path), "--json", str(out), "--closure", "quadrature", "--degree", "9"]) == 0
    data = json.loads(out.read_text())
    assert data["closure"] == "quadrature" and data["size"] == 4 and data["status"] in ("ok", "partial")
    alone = tmp_path / "alone.json"  # --no-estimate: the reported order alone, the same curve, no estimate
    assert (
        main(["solve", str(path), "--json", str(alone), "--closure", "quadrature", "--degree", "9", "--no-estimate"])
        == 0
    )
    quick = json.loads(alone.read_text())
    assert quick["status"] == "unverified" and quick["error_estimate"] is None, quick["message"]
    assert quick["series"] == data["series"] and quick["estimate_legs"] == ["fine"]


def test_simulate_command(tmp_path):
    out = tmp_path / "sgd.json"
    assert main(["simulate", str(write_config(tmp_path)), "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["d"] == 40 and data["seeds"] == [0, 1] and data["steps"][-1] == round(0.1 * 40 / (4 * 0.02))
    assert set(data["series"]) >= {"S1 S1", "S1 S2"} and len(data["spread"]["S1 S1"]) == 6
    assert data["spread"]["S1 S1"][-1] > 0  # two seeds differ


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


def test_verify_command_exit_status_and_json(tmp_path, capsys):
    path = write_config(tmp_path, VERIFY_SOLVABLE)
    out = tmp_path / "v.json"
    status = main(["verify", str(path), "--d", "60,120", "--seeds", "4", "--steps", "300", "--json", str(out)])
    printed = capsys.readouterr().out
    assert status == 0 and "verdict: agree" in printed
    assert json.loads(out.read_text())["checks"]["drift"]["d"] == [60, 120]
    assert main(["verify", str(path), "--d", "60"]) == 2
    assert "two dimensions" in capsys.readouterr().err
