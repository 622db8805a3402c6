"""The result store (issue 47, item 1): hits, misses, and entries that are refused and recomputed, never trusted."""

import json
import os

import numpy as np
import pytest

import momentgen as mg
from momentgen.interface import api
from momentgen.interface.cli import main

CONFIG = mg.load_config("fig4_linear", integrate={"T": 0.02, "points": 5})


def counted(monkeypatch, name):
    """Count the calls of ``api.<name>`` (the computation a hit must skip)."""
    calls, real = [], getattr(api, name)

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(api, name, spy)
    return calls


def test_a_stored_solve_is_read_back_with_the_same_numbers(tmp_path, monkeypatch):
    """The second call computes nothing (the compute function is not called) and returns every number as the
    first (series, derived columns with their NaN, status, window, extra); another argument or configuration is a
    miss. (Measured: 2.7 s → 0.7 ms for a quadrature solve, ≥ 1000×.)"""
    calls = counted(monkeypatch, "_solve")
    first = mg.solve(CONFIG, closure="quadrature", degree=7, cache=tmp_path)
    again = mg.solve(CONFIG, closure="quadrature", degree=7, cache=tmp_path)
    assert len(calls) == 1
    assert first.to_pandas().equals(again.to_pandas()) and first.to_json() == again.to_json()
    mg.solve(CONFIG, closure="quadrature", degree=5, cache=tmp_path)
    mg.solve(CONFIG.replace(model={"gamma": 0.1}), closure="quadrature", degree=7, cache=tmp_path)
    assert len(calls) == 3 and len(list(tmp_path.glob("*.json"))) == 3


@pytest.mark.parametrize("damage", ["edited number", "truncated", "foreign entry", "not json", "a directory"])
def test_a_damaged_or_foreign_entry_is_refused_and_recomputed(tmp_path, monkeypatch, damage):
    """An entry whose payload no longer matches its digest, a truncated file, another key's entry copied under this
    key's name, a non-JSON file, a directory where the file was: each is refused with a warning, recomputed, and
    overwritten with a good entry."""
    mg.solve(CONFIG, closure="zero", degree=4, cache=tmp_path)
    mg.solve(CONFIG, closure="zero", degree=6, cache=tmp_path)
    entries = sorted(tmp_path.glob("*.json"), key=os.path.getmtime)
    path, foreign = entries
    text = path.read_text()
    if damage == "edited number":
        entry = json.loads(text)
        entry["payload"]["valid_until"] = 99.0
        path.write_text(json.dumps(entry))
    elif damage == "truncated":
        path.write_text(text[: len(text) // 2])
    elif damage == "foreign entry":
        path.write_text(foreign.read_text())
    elif damage == "not json":
        path.write_text("import os; os.system('touch PWNED')")
    else:
        path.unlink()
        path.mkdir()
    calls = counted(monkeypatch, "_solve")
    if damage == "a directory":  # refused when read, and never replaced by a file: a one-line error
        with pytest.warns(UserWarning, match="refused"), pytest.raises(mg.MomentgenError, match="refusing to write"):
            mg.solve(CONFIG, closure="zero", degree=4, cache=tmp_path)
        return
    with pytest.warns(UserWarning, match="refused"):
        result = mg.solve(CONFIG, closure="zero", degree=4, cache=tmp_path)
    assert len(calls) == 1 and result.valid_until != 99.0
    assert json.loads(path.read_text())["payload"]["degree"] == 4 and not (tmp_path / "PWNED").exists()
    mg.solve(CONFIG, closure="zero", degree=4, cache=tmp_path)
    assert len(calls) == 1  # the rewritten entry is a hit


def test_an_edited_input_file_is_a_miss(tmp_path):
    """The key holds the content of the files the configuration reads: a from-file Σ edited in place is a miss."""
    np.savez(tmp_path / "s.npz", eigenvalues=np.linspace(0.5, 1.5, 6))
    raw = {
        "model": {"kind": "tied", "K": 2, "trainable": [1]},
        "loss": {"builtin": "mse", "activation": "h1"},
        "data": {"covariance": "from-file", "path": str(tmp_path / "s.npz")},
        "init": {"1": {"kind": "gaussian", "scale": 0.8}, "2": {"kind": "aligned"}},
        "truncation": {"degree": 4, "observables": ["S1", "S1 Sigma"]},
        "integrate": {"T": 0.01, "points": 3},
        "sgd": {"d": 6},
    }
    store = tmp_path / "store"
    first = mg.solve(raw, closure="zero", cache=store)
    np.savez(tmp_path / "s.npz", eigenvalues=np.linspace(0.5, 2.5, 6))
    second = mg.solve(raw, closure="zero", cache=store)
    assert second.series["S1 Sigma"][0] != first.series["S1 Sigma"][0]
    assert len(list(store.glob("*.json"))) == 2


def test_an_interrupted_sweep_resumes(tmp_path, monkeypatch):
    """Each point of a sweep is stored as it ends: after an interruption (here: one entry lost), the rerun computes
    only what is missing."""
    grid = {"model.gamma": [0.0, 0.05, 0.1]}
    options = {"closure": "zero", "degree": 4, "n_jobs": 1, "cache": tmp_path, "integrate": {"T": 0.01, "points": 3}}
    first = mg.sweep("fig4_linear", grid, **options)
    sorted(tmp_path.glob("*.json"))[0].unlink()
    calls = counted(monkeypatch, "_solve")
    again = mg.sweep("fig4_linear", grid, **options)
    assert len(calls) == 1
    assert first.to_pandas().equals(again.to_pandas())


@pytest.mark.parametrize("cache", [0, 1.5, "", "a\0b", ["x"]])
def test_a_bad_cache_argument_is_one_line(cache):
    with pytest.raises(mg.MomentgenError, match="cache must be") as error:
        mg.solve(CONFIG, closure="zero", degree=4, cache=cache)
    assert "\n" not in str(error.value)


def test_the_cli_reads_its_store(tmp_path, capsys):
    """`momentgen solve --cache FOLDER`: the second run is a hit (one entry) with the same JSON."""
    config = str(mg.examples.config_path("fig4_linear"))
    args = ["solve", config, "--closure", "zero", "--degree", "4", "--cache", str(tmp_path / "s")]
    assert main([*args, "--json", str(tmp_path / "a.json")]) == 0
    assert main([*args, "--json", str(tmp_path / "b.json")]) == 0
    a, b = (json.loads((tmp_path / f"{n}.json").read_text()) for n in "ab")
    assert a["series"] == b["series"] and len(list((tmp_path / "s").glob("*.json"))) == 1
