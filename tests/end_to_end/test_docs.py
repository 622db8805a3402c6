"""The API reference builds (issue 47, item 3): Sphinx with numpydoc over the public API, warnings as errors."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_api_reference_builds_without_a_warning(tmp_path):
    """`sphinx-build -W` of docs/api (what `make docs` runs): every public function and class documented there
    parses as numpydoc, every cross-reference and substitution resolves; the page lists each of them and the
    configuration keys' page every table."""
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html", str(ROOT / "docs" / "api"),
                           str(tmp_path)], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    page = (tmp_path / "index.html").read_text()
    documented = ["load_config", "solve", "simulate", "compare", "verify", "sweep", "Result.to_pandas",
                  "Result.to_xarray", "Result.plot", "Result.spectrum", "api.Sweep.to_pandas", "api.Sweep.to_xarray",
                  "api.Comparison.to_pandas", "verification.Verification.to_pandas"]  # fmt: skip
    for name in documented:
        assert f'id="momentgen.{name}"' in page, name
    keys = (tmp_path / "config_keys.html").read_text()
    assert all(f"[{table}]" in keys for table in ("model", "loss", "data", "truncation", "integrate", "sgd"))


def test_the_public_api_has_numpydoc_sections():
    """Each function of the notebook API states its Parameters and Returns (numpydoc), and the ones that run fast
    carry Examples (run as doctests by `make test`)."""
    import momentgen as mg

    for name in ("load_config", "solve", "simulate", "compare", "verify", "sweep"):
        doc = getattr(mg, name).__doc__
        assert "Parameters\n    ----------" in doc and "Returns\n    -------" in doc, name
    for name in ("load_config", "solve", "simulate", "sweep"):
        assert "Examples\n    --------" in getattr(mg, name).__doc__, name
