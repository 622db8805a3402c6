"""The benchmarks still run against the current API (``--smoke``: tiny sizes, numbers not checked).

Each runs as ``__main__`` in the test's own process (`runpy`), as ``python benchmarks/<name> --smoke`` would, but
without a fresh interpreter importing the package for each of them (about 2 s a benchmark, a tenth of ``make
test``'s CPU in the fifteen of them); the package's dict-style deprecation is an error here as in every test."""

import pathlib
import runpy
import sys
import warnings

import pytest

from momentgen.dynamics.results import DICT_STYLE_DEPRECATED

ROOT = pathlib.Path(__file__).resolve().parents[2]


BENCHMARKS = sorted(p.name for p in (ROOT / "benchmarks").glob("bench_*.py"))


@pytest.mark.parametrize("name", BENCHMARKS)
def test_benchmark_runs_in_smoke_mode(name, monkeypatch):
    monkeypatch.setattr(sys, "argv", [name, "--smoke"])
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.delitem(sys.modules, "common", raising=False)  # read ``--smoke`` afresh (collection imports it too)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=DICT_STYLE_DEPRECATED, category=DeprecationWarning)
        runpy.run_path(str(ROOT / "benchmarks" / name), run_name="__main__")
