"""Bad input and faults (issue 13): a clear one-line error every time, nothing executed, nothing lost.

Each case is what a hostile or careless user tried on the previous version (the note has the
table: case → before → after). Every test is fast: refusals happen before anything large is
built, and each one is checked to come within a second where the old code hung.
"""

import importlib.util
import json
import os
import pathlib
import shutil
import sys
import time
import zipfile

import numpy as np
import pytest

from momentgen.core.errors import MomentgenError, UnsupportedLoss
from momentgen.dynamics.closures import solve_with_closure
from momentgen.interface.cli import main
from momentgen.setting.config import ConfigError, load_config, parse_config
from momentgen.setting.losses import parse_expression
from tests.helpers import TIED, changed, write_toml

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_cli(argv, capsys):
    """(exit status, stderr) of the command line, and that stderr is one line."""
    status = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    return status, err


def test_default_observables_with_the_zero_closure_run(tmp_path):
    """observables omitted ("all"), zero closure, degree 6 — before: ValueError: 'S1 S1 S1 S1 S1 S1 S1'
    is not in list (the horizon check looked up degree-M words in the M − 2 run)."""
    out = solve_with_closure(parse_config(TIED))
    assert out.status == "partial" and "S1 S1 S1 S1 S1 S1" in out.series


def test_an_observable_of_degree_m_is_accepted():
    """Before: refused with a message naming degree M − 2 (the coarser run's)."""
    out = solve_with_closure(parse_config(changed("truncation", "observables", ["S1 S2 S1 S2 S1 S2"])))
    assert out.status == "partial" and "S1 S2 S1 S2 S1 S2" in out.series


@pytest.mark.parametrize(
    "degree, needle", [(0, "degree must be an integer ≥ 1, got 0"), (200, "degree 200 is too large")]
)
def test_degrees_out_of_range_name_the_degree_asked_for(degree, needle):
    """Before: degree = 0 said "got -2", degree = 200 said "198 too large"."""
    with pytest.raises(MomentgenError, match=needle):
        solve_with_closure(parse_config(changed("truncation", "degree", degree)))


def test_hostile_file_names_never_run_code(tmp_path, monkeypatch):
    """A config named ``x\"\"\"\\nimport …\\n\"\"\".toml`` and an --out path with backslashes: before, the
    first ran its code on import and the second wrote a module that did not import. Every string is
    now a literal: the module imports, runs nothing, and records both names verbatim."""
    monkeypatch.chdir(tmp_path)
    marker = tmp_path / "pwned"
    name = 'x"""\nimport pathlib; pathlib.Path("pwned").touch()\n""".toml'
    config = write_toml(tmp_path / name, TIED)
    out = tmp_path / "gen\\x\\N{SNOWMAN}" / "mod\\ule.py"
    assert main(["generate-truncation", str(config), "--out", str(out)]) == 0
    spec = importlib.util.spec_from_file_location("hostile_module", out)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert not marker.exists()
    assert module.SPEC["source"] == str(config) and str(config) in module._STAMP["command"]
    assert module.rhs(0.0, module.initial_state()).shape == (len(module.WORDS),)


@pytest.mark.parametrize(
    "data, needle",
    [
        (changed("model", "C", [[1.0, 0.0], [0.0, 1.0]]), r"`C` has shape \(2, 2\); with L = 1"),
        (changed("model", "C", [[-1.0]]), "positive semi-definite"),
        (changed("model", "C", [[float("nan")]]), "C must be finite"),
        (changed("model", "gamma", float("nan")), "gamma must be finite"),
        (changed("init", "2", {"kind": "identity", "c": -1.0}), "c` = -1.0 < 0"),
        (changed("sgd", "d", 0), "d must be an integer ≥ 1"),
        (changed("model", "trainable", "12"), "trainable must be a non-empty list"),
        (changed("model", "trainable", [1.7]), "1.7 is not one"),
        (changed("integrate", "validity_tol", float("nan")), "validity_tol must be finite"),
        (changed("integrate", "T", float("inf")), "T must be finite"),
        (changed("loss", "activation", "relu"), "relu.*softplus"),
        (
            {**changed("loss", "builtin", "softmax-mse"), "loss": {"builtin": "softmax-mse", "activation": "tanh"}},
            'activation. applies to builtin = "mse" only',
        ),
        ({**TIED, "loss": {"builtin": "softmax-mse"}}, "softmax-mse needs L ≥ 2"),
        ({**TIED, "loss": {"expression": "1/G[1,1,1]**2"}}, "singular on the real line"),
        ({**TIED, "loss": {"expression": "log(G[1,1,1]**2)"}}, "singular on the real line"),
        ({**TIED, "loss": {"expression": "G[1,1,2]**2"}}, "does not depend on a trainable index"),
    ],
)
def test_every_command_validates_the_same_way(data, needle, tmp_path, capsys):
    """Before, simulate ran all of these and wrote NaN or wrong numbers with exit code 0 (C was never
    checked there, nor γ, c, d; trainable "12" became (1, 2) and [1.7] became 1; validity_tol = nan made
    the run "valid" to the blow-up; T = inf wrote t: [NaN]; singular losses reported ok; softmax-mse at
    L = 1 — identically 0 — reported ok; an activation with softmax-mse was ignored). Now the file fails
    for every command with one line naming the key."""
    path = write_toml(tmp_path / "bad.toml", data)
    with pytest.raises(ConfigError, match=needle):
        load_config(path)
    for command in ("simulate", "solve"):
        status, err = run_cli([command, path, "--json", tmp_path / "out.json"], capsys)
        assert status == 2 and err.startswith("momentgen: error:") and "\n" not in err
    assert not (tmp_path / "out.json").exists()


def test_d_zero_on_the_command_line_is_refused(tmp_path, capsys):
    path = write_toml(tmp_path / "ok.toml", TIED)
    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", str(path), "--json", str(tmp_path / "x.json"), "--d", "0"])
    assert exit_info.value.code == 2 and "must be a positive integer" in capsys.readouterr().err


def test_a_value_given_to_no_estimate_is_refused(tmp_path, capsys):
    """``--no-estimate`` is a switch: ``--no-estimate=yes`` is refused in one line, and nothing is written."""
    path = write_toml(tmp_path / "ok.toml", TIED)
    with pytest.raises(SystemExit) as exit_info:
        main(["solve", str(path), "--json", str(tmp_path / "x.json"), "--no-estimate=yes"])
    assert exit_info.value.code == 2 and "--no-estimate: ignored explicit argument" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_nan_in_a_file_matrix_is_refused(tmp_path):
    W = np.eye(20)
    W[3, 4] = np.nan
    np.savez(tmp_path / "w.npz", W=W)
    data = changed("init", "1", {"kind": "from-file", "path": str(tmp_path / "w.npz")})
    with pytest.raises(ConfigError, match="non-finite values"):
        parse_config(data).start_factors()


@pytest.mark.parametrize(
    "data",
    [
        changed("sgd", "lr", 2.0),
        {
            **changed("model", "gamma", 1e4),
            "model": {"kind": "untied", "K": 2, "trainable": [1], "gamma": 1e4},
            "init": {"1": {"kind": "gaussian"}, "2": {"kind": "gaussian"}},
            "truncation": {"degree": 3},
            "sgd": {"d": 30, "lr": 5.0, "batch": 16, "seeds": [0]},
        },
    ],
)
def test_sgd_stops_at_the_first_non_finite_step_and_keeps_what_it_had(data, tmp_path, capsys):
    """An exploding learning rate, an untied γ = 1e4: before, NaN/Infinity in the JSON with exit 0.
    Now the run stops at the first non-finite step with status "diverged" (the step and time in the
    message), exit status 1, and the JSON holds the finite part it reached."""
    path = write_toml(tmp_path / "diverge.toml", {**data, "integrate": {"T": 5.0, "points": 11}})
    out = tmp_path / "sgd.json"
    status, err = run_cli(["simulate", path, "--json", out], capsys)
    result = json.loads(out.read_text())  # strict JSON: a NaN would not parse with the default hook below
    assert status == 1 and result["status"] == "diverged" and "diverged at step" in result["message"]
    assert len(result["t"]) < 11 and all(np.isfinite(v).all() for v in result["series"].values())
    json.loads(out.read_text(), parse_constant=lambda name: pytest.fail(f"{name} in the JSON"))


@pytest.mark.parametrize(
    "text, needle",
    [
        ("((G[1,1,1]-G[1,1,2])**12)**12", "polynomial degree up to 144"),
        ("(((9**12)**12)**12)*G[1,1,1]", "out of range"),
        ("tanh(" * 150 + "G[1,1,1]" + ")" * 150, r"nested \d+ deep; the limit is 40"),
        ("1e300 * G[1,1,1]**2", "out of range"),
        ("relu(G[1,1,1]) - G[1,1,2]", "relu.*softplus"),
    ],
)
def test_costly_losses_are_refused_within_a_second(text, needle):
    """Before: the first kept `solve` at 100 % CPU for minutes (Wick expansion of degree 144), the second
    hung in the parser, the third ended in a RecursionError traceback."""
    start = time.perf_counter()
    with pytest.raises(UnsupportedLoss, match=needle):
        parse_expression(text, 1, 2)
    assert time.perf_counter() - start < 1.0


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh kernel cache; kernels already imported by this process are forgotten."""
    directory = tmp_path / "cache"
    monkeypatch.setenv("MOMENTGEN_CACHE", str(directory))
    for name in [n for n in sys.modules if n.startswith("momentgen_kernel_")]:
        monkeypatch.delitem(sys.modules, name)
    from momentgen.core import codegen

    monkeypatch.setattr(codegen, "_FALLBACK", {})
    return directory


def softmax_value():
    from momentgen.compiler.potential import Potential
    from momentgen.setting.losses import builtin

    return Potential(builtin("softmax-mse", L=2, K=2), "tied", rtol=1e-6).evaluate(q=np.eye(2)).phi


def forget_kernels(monkeypatch):
    for name in [n for n in sys.modules if n.startswith("momentgen_kernel_")]:
        monkeypatch.delitem(sys.modules, name)


def test_an_edited_or_corrupted_kernel_is_rebuilt(cache, monkeypatch):
    """Before: an edited but valid cached kernel was reused (results off by 8e-4, status ok) and a
    corrupted one failed every later run. Each file now carries its source's sha256 and is rebuilt
    when they differ."""
    reference = softmax_value()
    files = sorted((cache / "kernels").glob("k_*.py"))
    assert files
    for kernel in files:  # an edit that still compiles, then plain garbage
        kernel.write_text(kernel.read_text().replace("out[0] += ws *", "out[0] += 1.001 * ws *"))
    forget_kernels(monkeypatch)
    assert softmax_value() == reference
    for kernel in files:
        kernel.write_bytes(b"\x00garbage")
    forget_kernels(monkeypatch)
    assert softmax_value() == reference


def test_a_read_only_cache_falls_back_to_a_temporary_one(cache, monkeypatch):
    """Before: a read-only cache crashed even with every kernel present (numba: "no locator"). Now the
    kernels are verified, copied to a temporary cache for the process (numba compiles there), and a
    warning says so. Read-only is simulated by refusing writes under the cache directory (file modes
    do not stop root, who runs CI)."""
    from momentgen.core import codegen

    reference = softmax_value()
    forget_kernels(monkeypatch)
    real = codegen.check_writable

    def read_only(path):
        if str(path).startswith(str(cache)):
            raise PermissionError(13, "Permission denied")
        real(path)

    monkeypatch.setattr(codegen, "check_writable", read_only)
    before = {p: p.read_bytes() for p in (cache / "kernels").glob("k_*.py")}
    with pytest.warns(UserWarning, match="cannot be written"):
        assert softmax_value() == reference
    fallback = codegen.cache_dir()
    assert fallback != cache and {p.name for p in (fallback / "kernels").glob("k_*.py")} >= {p.name for p in before}
    assert {p: p.read_bytes() for p in (cache / "kernels").glob("k_*.py")} == before  # nothing written there


def test_an_unwritable_cache_directory_falls_back_with_a_warning(tmp_path, monkeypatch):
    """The same fall-back where the cache cannot even be created (a file stands where its directory
    should be) — this one holds for root too."""
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    monkeypatch.setenv("MOMENTGEN_CACHE", str(blocker / "cache"))
    from momentgen.core import codegen

    monkeypatch.setattr(codegen, "_FALLBACK", {})
    forget_kernels(monkeypatch)
    with pytest.warns(UserWarning, match="cannot be written"):
        directory = codegen.cache_dir()
    assert directory.exists() and directory != blocker / "cache"


def test_an_empty_cache_variable_is_not_the_working_directory(tmp_path, monkeypatch):
    """Before: MOMENTGEN_CACHE="" wrote ./kernels/ into the working directory."""
    from momentgen.core import codegen

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MOMENTGEN_CACHE", "")
    assert codegen.configured_cache_dir() == pathlib.Path.home() / ".cache" / "momentgen"


@pytest.fixture
def module_copy(tmp_path):
    module = ROOT / "generated" / "fig4_linear.py"
    (data,) = module.parent.glob("fig4_linear.*.npz")
    shutil.copy(module, tmp_path / module.name)
    shutil.copy(data, tmp_path / data.name)
    return tmp_path / module.name, tmp_path / data.name


def import_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_stamp_consistent_data_file_with_a_bad_index_is_refused(module_copy):
    """Before: an .npz with an out-of-range target index (and a matching stamp) segfaulted (exit 139).
    The arrays are now range-checked on load."""
    from momentgen.compiler.emit import StaleModuleError

    module, data = module_copy
    with np.load(data) as arrays:
        content = {name: arrays[name] for name in arrays.files}
    content["target"] = content["target"].copy()
    content["target"][3] = 10**6
    buffer = pathlib.Path(data).with_suffix(".tmp")
    np.savez(buffer, **content)
    raw = buffer.with_suffix(".tmp.npz").read_bytes()
    data.write_bytes(raw)
    import hashlib

    text = module.read_text()
    old = text.split("'data_sha256': '")[1].split("'")[0]
    module.write_text(text.replace(old, hashlib.sha256(raw).hexdigest()))
    with pytest.raises(StaleModuleError, match="corrupt .*target indices out of range"):
        import_module(module, "bad_index")


def test_nan_in_a_config_never_reaches_a_generated_module(tmp_path, capsys):
    """Before: NaN was accepted and the module failed with NameError: nan."""
    path = write_toml(tmp_path / "nan.toml", changed("model", "gamma", float("nan")))
    status, err = run_cli(["generate-truncation", path, "--out", tmp_path / "m.py"], capsys)
    assert status == 2 and "gamma must be finite" in err and not (tmp_path / "m.py").exists()


def test_a_run_killed_between_the_two_writes_leaves_the_old_pair(tmp_path, monkeypatch):
    """Before: a kill (or a concurrent run) between the .npz and .py writes left a mismatched pair and
    the previous good module was lost. The data file is named by its content and written first, the
    module that names it last: a kill after the data file leaves the old module importable."""
    from momentgen.compiler import emit

    config = parse_config(TIED)
    out = tmp_path / "pair.py"
    emit.write_module(config, out)
    first = out.read_text()
    original = emit.write_atomic

    def killed(path, data):
        if pathlib.Path(path).suffix == ".py":
            raise KeyboardInterrupt  # the process dies before the module is written
        original(path, data)

    monkeypatch.setattr(emit, "write_atomic", killed)
    with pytest.raises(KeyboardInterrupt):
        emit.write_module(config.replace(truncation={"degree": 4}), out)
    assert out.read_text() == first
    assert import_module(out, "pair_after_kill").SPEC["degree"] == 6


def test_a_failing_write_keeps_the_previous_result(tmp_path, monkeypatch, capsys):
    """Before: on a full disk solve/simulate/compare replaced the previous good JSON with a truncated
    one. Writes go to a temporary file that is fsync'ed and then renamed: a failure leaves the old file."""
    path = write_toml(tmp_path / "ok.toml", TIED)
    out = tmp_path / "result.json"
    assert main(["solve", str(path), "--json", str(out)]) == 0
    good = out.read_text()

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    status, err = run_cli(["solve", path, "--json", out], capsys)
    assert status == 2 and "No space left on device" in err
    assert out.read_text() == good and not list(tmp_path.glob(".result.json.*"))


def test_an_unwritable_output_fails_before_the_work(tmp_path, capsys):
    """The output path is checked first: a directory where the JSON should go fails at once."""
    path = write_toml(tmp_path / "ok.toml", changed("integrate", "T", 5.0))
    (tmp_path / "taken").mkdir()
    start = time.perf_counter()
    status, err = run_cli(["simulate", path, "--json", tmp_path / "taken"], capsys)
    assert status == 2 and "is a directory" in err and time.perf_counter() - start < 1.0


def test_a_non_finite_potential_is_its_own_status():
    """exp(G²) has no Gaussian expectation once Var G ≥ 1/2: before, reported as "left-feasible-set"."""
    data = {
        **TIED,
        "loss": {"expression": "exp(G[1,1,1]**2) - G[1,1,2]"},
        "integrate": {"T": 0.5, "points": 5},
        "init": {"1": {"kind": "gaussian", "scale": 0.6}, "2": {"kind": "identity", "c": 1.0}},
        "truncation": {"degree": 3},
    }
    out = solve_with_closure(parse_config(data))
    assert out.status == "non-finite-potential" and "does not converge" in out.message


def test_a_wrong_closure_name_is_one_line(tmp_path, capsys):
    """Before: `compare --closures magic` ended in a traceback."""
    path = write_toml(tmp_path / "ok.toml", TIED)
    status, err = run_cli(["compare", path, "--closures", "magic", "--out", tmp_path / "cmp"], capsys)
    assert status == 2 and "'magic' is not a closure" in err and "\n" not in err


@pytest.mark.parametrize(
    "data, needle",
    [
        (changed("truncation", "degree", 40), "degree 40 .*(GiB|candidate words)"),
        (
            {
                **TIED,
                "model": {"kind": "tied", "K": 50, "trainable": [1]},
                "loss": {"builtin": "mse", "teacher": [2]},
                "init": {str(k): {"kind": "gaussian"} for k in range(1, 51)},
            },
            "K = 50 at degree 6",
        ),
    ],
)
def test_oversized_truncations_are_refused_with_the_estimate(data, needle):
    """degree 40 with every observable; K = 50 at degree 6 (> 4 GB): estimated and refused at once
    (the message gives the estimate and how to override: [truncation] max_memory_gb)."""
    start = time.perf_counter()
    with pytest.raises(MomentgenError, match=needle):
        solve_with_closure(parse_config(data))
    assert time.perf_counter() - start < 1.0


def test_words_refuses_to_list_too_many(capsys):
    status, err = run_cli(["words", "--model", "tied", "--K", "2", "--degree", "40"], capsys)
    assert status == 2 and "degree 40" in err


def test_a_small_file_cannot_ask_for_gigabytes(tmp_path):
    """A 160 kB W of shape (20000, 1) makes 20000 × 20000 letters (3.2 GB each): refused from its .npy
    header. A zip bomb (100 kB compressed) whose header declares a 40000 × 40000 array (12 GiB):
    refused from the header, before the data is decompressed; a zip entry declaring more than 2 GiB
    is refused from the zip directory alone."""
    np.savez(tmp_path / "thin.npz", W=np.ones((20_000, 1)))
    data = changed("init", "1", {"kind": "from-file", "path": str(tmp_path / "thin.npz")})
    with pytest.raises(ConfigError, match=r"letters would be 20000 × 20000"):
        parse_config(data).start_factors()
    bomb = tmp_path / "bomb.npz"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("W.npy", "w", force_zip64=True) as member:
            np.lib.format.write_array_header_2_0(
                member, {"descr": "<f8", "fortran_order": False, "shape": (40_000, 40_000)}
            )
            chunk = bytes(1 << 20)
            for _ in range(100):  # 100 MiB of zeros: about 100 kB compressed
                member.write(chunk)
    data = changed("init", "1", {"kind": "from-file", "path": str(bomb)})
    with pytest.raises(ConfigError, match="(letters would be|exceeds)"):
        parse_config(data).start_factors()
