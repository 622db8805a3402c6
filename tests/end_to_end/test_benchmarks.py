"""The benchmarks still run against the current API (``--smoke``: tiny sizes, numbers not checked)."""

import pathlib
import subprocess
import sys

import pytest

from momentgen.dynamics.results import DICT_STYLE_DEPRECATED

ROOT = pathlib.Path(__file__).resolve().parents[2]


BENCHMARKS = sorted(p.name for p in (ROOT / "benchmarks").glob("bench_*.py"))


@pytest.mark.parametrize("name", BENCHMARKS)
def test_benchmark_runs_in_smoke_mode(name):
    done = subprocess.run(
        [
            sys.executable,
            "-W",
            f"error:{DICT_STYLE_DEPRECATED}:DeprecationWarning",
            str(ROOT / "benchmarks" / name),
            "--smoke",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
