"""The momentgen command: output and error paths."""

import json

import pytest

from momentgen.interface.cli import main


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
