"""The momentgen command: output and error paths."""

from momentgen.cli import main


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
