"""The spectrum over time (`momentgen.evidence.evolution`, the ``momentgen spectrum`` command)."""

import json

import numpy as np
import pytest

from momentgen.interface.cli import main


def test_the_spectrum_command_writes_theory_and_sgd(tmp_path, capsys):
    """`momentgen spectrum`: JSON with the issue's keys (one row of cdf/density per time on a shared x) and the
    SGD eigenvalues at [sgd] d; the SGD eigenvalues at t = 0 are the Wishart student's (mean ≈ 1)."""
    config = tmp_path / "c.toml"
    config.write_text(
        '[model]\nkind = "tied"\nK = 2\ntrainable = [1]\n[loss]\nbuiltin = "mse"\n[init.1]\n[init.2]\n'
        'kind = "identity"\n[truncation]\ndegree = 13\nclosure = "quadrature"\nobservables = ["S1 S1"]\n'
        "[integrate]\nT = 0.2\npoints = 5\n[sgd]\nd = 60\nlr = 0.05\nbatch = 32\n"
    )
    out = tmp_path / "spec.json"
    assert main(["spectrum", str(config), "--letter", "S1", "--times", "0,0.2", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["letter"] == "S1" and data["t"] == [0.0, 0.2] and data["closure"] == "quadrature"
    assert np.shape(data["cdf"]) == np.shape(data["density"]) == (2, len(data["x"]))
    first = data["sgd"]["eigenvalues"][0]
    assert len(first) == 60 and np.mean(first) == pytest.approx(1, abs=0.2)
    assert out.with_suffix(".png").stat().st_size > 0
    assert main(["spectrum", str(config), "--letter", "S1", "--times", "0,-0.1", "--json", str(out), "--no-sgd"]) == 2
    assert "output times must be numbers in [0, T = 0.2]" in capsys.readouterr().err
