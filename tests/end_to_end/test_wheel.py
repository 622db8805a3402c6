"""The package as a wheel (issue 47, item 4): built, installed (not editable) and run from an unrelated folder.

Slow (the wheel's build environment and the clean venv fetch their packages, about 2 minutes): CI runs it with
`make test-slow`.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_wheel_installs_and_runs_from_an_unrelated_folder(tmp_path):
    """`pip wheel .` builds a wheel; installed with its dependencies into a clean venv (no clone on the path) it finds
    the shipped configurations by name (`momentgen solve fig4_linear`), compiles its kernels in place, writes a
    generated module that imports from anywhere, and draws a figure — from a folder that holds no part of the
    repository."""
    dist, venv, elsewhere = tmp_path / "dist", tmp_path / "venv", tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)]
    subprocess.run(run, check=True, capture_output=True, text=True)
    (wheel,) = dist.glob("momentgen-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)  # a clean environment: no clone, no .pth
    python = str(venv / "bin" / "python")
    done = subprocess.run([python, "-m", "pip", "install", "-q", str(wheel)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(OPENBLAS_NUM_THREADS="1", MPLBACKEND="Agg")

    def momentgen(*args):
        done = subprocess.run([str(venv / "bin" / "momentgen"), *args], cwd=elsewhere, env=env, capture_output=True,
                              text=True)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    where = subprocess.run([python, "-c", "import momentgen; print(momentgen.__file__)"], cwd=elsewhere, env=env,
                           capture_output=True, text=True).stdout  # fmt: skip
    assert where.startswith(str(venv)), where
    momentgen("solve", "fig4_linear", "--closure", "quadrature", "--degree", "7", "--json", "fig4.json")
    assert json.loads((elsewhere / "fig4.json").read_text())["status"] == "ok"
    momentgen("generate-truncation", "fig4_linear", "--degree", "6", "--out", "gen/fig4.py")
    script = (
        "import importlib.util, momentgen as mg\n"
        "spec = importlib.util.spec_from_file_location('fig4', 'gen/fig4.py')\n"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module)\n"
        "print(len(module.WORDS), module.rhs(0.0, module.initial_state()).shape)\n"
        "ax = mg.solve('fig4_linear', closure='quadrature', degree=5).plot(words='risk', log=True)\n"
        "ax.figure.savefig('risk.png')\n"
    )
    done = subprocess.run([python, "-c", script], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (elsewhere / "risk.png").stat().st_size > 1000
