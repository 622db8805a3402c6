"""Hostile input, round 3 (issue 41): figure sidecars, data files, schedules, spectra and the run state.

Each test is one case of the issue (its note has the table case → before → after); every refusal is a one-line
`MomentgenError` that names the file, key or argument, and comes before any long computation.
"""

import json
import os
import pathlib
import zipfile

import numpy as np
import pytest

from momentgen.core.errors import MomentgenError
from momentgen.interface.cli import main
from momentgen.setting.config import ConfigError, load_config, parse_config
from tests.helpers import bare_result

ROOT = pathlib.Path(__file__).resolve().parents[2]


def one_line(error):
    text = str(error.value)
    assert "\n" not in text and text, text
    return text


def tied_sigma(path, **init1):
    """A small tied configuration on a from-file Σ (aligned teacher), quadrature closure."""
    return {
        "model": {"kind": "tied", "K": 2, "trainable": [1]},
        "loss": {"builtin": "mse", "activation": "h1"},
        "data": {"covariance": "from-file", "path": str(path)},
        "init": {"1": {"kind": "gaussian", "scale": 0.8, **init1}, "2": {"kind": "aligned", "c": 1.0, "exponent": 1.0}},
        "truncation": {"degree": 5, "closure": "quadrature", "observables": ["S1", "S1 Sigma"]},
        "integrate": {"T": 0.1, "points": 3},
        "sgd": {"d": 6, "lr": 0.01, "batch": 32},
    }


@pytest.mark.parametrize(
    "drawn_by",
    ["subprocess:run", "builtins:input", "logging.config:dictConfig", "os:system", "figure", "payload.py:figure",
     "../payload.py:figure", "examples/fig4_linear.py:main", None, 3],
)  # fmt: skip
def test_a_figure_sidecar_names_a_registered_drawer_or_nothing_runs(tmp_path, drawn_by):
    """`figures.draw_again` imports nothing and runs nothing a sidecar names unless it is one of `figures.DRAWERS`
    (before: `"subprocess:run"`, `"logging.config:dictConfig"` and any `.py` path in `provenance.command` ran;
    `"builtins:input"` hung on stdin). The payload writes a marker file if it is ever executed."""
    from momentgen.core.figures import draw_again

    marker = tmp_path / "ran"
    payload = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('x')\ndef figure(data):\n    return None\n"
    (tmp_path / "payload.py").write_text(payload)
    data = {"drawn_by": drawn_by, "provenance": {"command": f"{tmp_path / 'payload.py'} --out x"}, "args": ["ls"]}
    with pytest.raises(MomentgenError, match="not one of momentgen's drawing functions") as error:
        draw_again(data, tmp_path)
    one_line(error)
    assert not marker.exists()


def test_redraw_figures_refuses_a_hostile_sidecar_in_one_line(tmp_path):
    """`examples/redraw_figures.py` on a sidecar naming `os:system` exits with one line naming the file; the
    command in the sidecar is not run."""
    import subprocess
    import sys

    marker = tmp_path / "ran"
    sidecar = tmp_path / "x.json"
    sidecar.write_text(json.dumps({"drawn_by": "os:system", "provenance": {"command": f"touch {marker}"}}))
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "redraw_figures.py"), str(sidecar)], capture_output=True, text=True
    )
    assert done.returncode != 0 and "not one of momentgen's drawing functions" in done.stderr
    assert "Traceback" not in done.stderr and not marker.exists()


def test_every_drawer_in_the_registry_exists():
    """Each registered drawer names a library function or a script function that exists (a registry entry that
    does not resolve would make its figure impossible to redraw)."""
    import ast
    import importlib

    from momentgen.core.figures import DRAWERS

    for name in DRAWERS:
        where, function = name.split(":")
        if where.endswith(".py"):
            tree = ast.parse((ROOT / where).read_text())
            assert function in {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}, name
        else:
            assert callable(getattr(importlib.import_module(where), function)), name


def test_spectrum_json_must_name_a_json_file(tmp_path, capsys):
    """`spectrum --json X.ext` also wrote X.json unchecked (it replaced an unrelated X.json and the configuration
    itself). Now a --json that is not a .json is refused before anything runs, and X.json is untouched."""
    neighbour = tmp_path / "exp.json"
    neighbour.write_text("keep")
    code = main(["spectrum", "examples/configs/fig4_linear.toml", "--letter", "S1", "--times", "0",
                 "--json", str(tmp_path / "exp.txt")])  # fmt: skip
    assert code == 2 and "name a .json file" in capsys.readouterr().err
    assert neighbour.read_text() == "keep"


def test_sweep_reads_data_files_relative_to_the_configuration(tmp_path, monkeypatch):
    """A sweep of a configuration whose Σ file is relative to its folder reads that file at every point, whatever the
    working directory (before: the working directory's `sigma.npz`, another Σ, silently). Independent value:
    μ(S1 Sigma) at t = 0 is τ(S1)τ(Σ) = 0.8² × 0.5 (a Gaussian student is free from Σ) with the configuration's
    file, not 0.8² × 2.0 with the decoy's."""
    from momentgen.interface.api import sweep

    folder, elsewhere = tmp_path / "exp", tmp_path / "cwd"
    folder.mkdir()
    elsewhere.mkdir()
    np.savez(folder / "sigma.npz", eigenvalues=np.full(6, 0.5))
    np.savez(elsewhere / "sigma.npz", eigenvalues=np.full(6, 2.0))
    raw = tied_sigma("sigma.npz")
    raw["truncation"] = {"degree": 4, "closure": "zero", "observables": ["S1", "S1 Sigma"]}
    lines = [f"[{t}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in raw[t].items()) for t in raw if t != "init"]
    lines += [
        f"[init.{k}]\n" + "".join(f"{a} = {json.dumps(v)}\n" for a, v in s.items()) for k, s in raw["init"].items()
    ]
    (folder / "c.toml").write_text("\n".join(lines))
    monkeypatch.chdir(elsewhere)
    runs = sweep(folder / "c.toml", {"model.gamma": [0.0, 0.1]}, n_jobs=1, closure="zero", degree=4)
    for _, result in runs:
        assert result.series["S1 Sigma"][0] == pytest.approx(0.64 * 0.5, abs=1e-14)


def test_unsorted_eigenvalues_are_the_diagonal_in_the_files_order(tmp_path):
    """`[data]` eigenvalues are Σ = diag(values) in the file's coordinate order, the same Σ as the file's dense
    `Sigma = diag(values)` (before: sorted, so Σ was permuted against from-file matrices and SGD's tokens). The
    independent value is the input array itself; the theory's law (its moments) is order-free."""
    from momentgen.reference import SGDRun

    values = np.array([3.0, 0.5, 1.0, 0.25, 2.0, 0.25])
    np.savez(tmp_path / "ev.npz", eigenvalues=values)
    np.savez(tmp_path / "dense.npz", Sigma=np.diag(values))
    by_values = parse_config(tied_sigma(tmp_path / "ev.npz")).data()
    by_matrix = parse_config(tied_sigma(tmp_path / "dense.npz")).data()
    assert np.array_equal(by_values.matrix(6), np.diag(values))
    assert np.allclose(by_matrix.matrix(6), np.diag(values), atol=1e-15)
    assert by_values.moment(3) == pytest.approx(np.mean(values**3), rel=1e-14)
    run = SGDRun.__new__(SGDRun)
    run.data, run.d, run._covariance = by_values, 6, None
    assert np.array_equal(run.covariance()[0], values)  # SGD's tokens: x = Σ^{1/2} z with this diagonal


@pytest.mark.parametrize("levels", [[2.0], [0.5, 1.5]])
def test_a_sigma_with_few_levels_has_an_exact_rule(levels):
    """Σ = 2I (one level) and a two-level Σ: the Gauss rule has one node per distinct eigenvalue with its share
    as weight — every moment exact (before: NaN in the Stieltjes recurrence asked for more polynomials than the
    measure has)."""
    from momentgen.setting.data import DataCovariance

    values = np.repeat(levels, 30)
    sigma = DataCovariance("from-file", path="x", values=tuple(values))
    for n in (1, 4, 9):
        nodes, weights = sigma.rule(n)
        assert np.allclose(np.sort(nodes), levels, rtol=1e-13) and np.allclose(weights, 1 / len(levels), rtol=1e-13)


def test_the_quadrature_closure_starts_right_on_a_two_level_sigma(tmp_path):
    """End to end, tied, degree 9 on Σ with levels 0.5 and 1.5 (before: a crash at degree 5, a wrong start reported
    as left-feasible-set at degree 9): the run reaches the horizon and starts from the exact μ(S1 Sigma S1 Sigma) =
    σ⁴(τ(Σ)² + τ(Σ²)) of a square Wishart student (σ = 0.8), 1e-12."""
    from momentgen.dynamics.closures import solve_with_closure

    values = np.repeat([0.5, 1.5], 3)
    np.savez(tmp_path / "two.npz", eigenvalues=values)
    raw = tied_sigma(tmp_path / "two.npz")
    raw["truncation"]["degree"] = 9
    result = solve_with_closure(parse_config(raw))
    assert result.status in ("ok", "partial", "unverified"), result.message
    m1, m2 = values.mean(), np.mean(values**2)
    assert result.series["S1 Sigma S1 Sigma"][0] == pytest.approx(0.8**4 * (m1**2 + m2), abs=1e-12)


def _damaged(folder, how, arrays, name):
    """An .npz of ``arrays`` whose member ``name`` (stored last) is damaged ``how``."""
    path = folder / f"{how}.npz"
    np.savez_compressed(path, **arrays)
    data = bytearray(path.read_bytes())
    if how == "truncated":
        path.write_bytes(bytes(data[: len(data) // 2]))
        return path
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(f"{name}.npy")
        size, local = info.compress_size, info.header_offset  # the member's data follows its local header
    start = (
        local
        + 30
        + int.from_bytes(data[local + 26 : local + 28], "little")
        + int.from_bytes(data[local + 28 : local + 30], "little")
    )
    if how == "bad-crc":
        data[start + size // 2] ^= 0x01
    elif how == "broken-deflate":
        data[start : start + 4] = b"\xff\xff\xff\xff"
    path.write_bytes(bytes(data))
    if how == "lying-header":  # a header that declares more data than the member holds
        header = "{'descr': '<f8', 'fortran_order': False, 'shape': (600,), }".ljust(117) + "\n"
        member = bytes(np.lib.format.magic(1, 0)) + len(header).to_bytes(2, "little") + header.encode()
        with zipfile.ZipFile(path, "w") as archive:
            for other, array in arrays.items():
                archive.writestr(f"{other}.npy", member + np.zeros(6).tobytes() if other == name else _npy(array))
    return path


def _npy(array):
    import io

    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array)
    return buffer.getvalue()


@pytest.mark.parametrize("how", ["truncated", "bad-crc", "broken-deflate", "lying-header"])
def test_a_damaged_npz_member_is_a_one_line_error(tmp_path, how):
    """A damaged member of a Σ file, a from-file init or a schedule table is a one-line `ConfigError` naming the
    file (before: raw ValueError / BadZipFile / zlib.error tracebacks)."""
    folders = {role: tmp_path / role for role in ("sigma", "init", "table")}
    for folder in folders.values():
        folder.mkdir()
    sigma = _damaged(folders["sigma"], how, {"eigenvalues": np.linspace(0.5, 1.5, 6)}, "eigenvalues")
    init = _damaged(folders["init"], how, {"W": np.eye(6) * 0.3}, "W")
    table = _damaged(folders["table"], how, {"u": np.linspace(0, 1, 5), "f": np.ones(5)}, "f")
    base = tied_sigma(sigma)
    cases = {sigma: base}
    cases[init] = {**base, "data": {"covariance": "isotropic"}, "truncation": {"degree": 5, "observables": ["S1"]},
                   "init": {"1": {"kind": "from-file", "path": str(init)}, "2": {"kind": "identity"}}}  # fmt: skip
    cases[table] = {**cases[init], "init": {"1": {"kind": "gaussian"}, "2": {"kind": "identity"}},
                    "sgd": {**base["sgd"], "schedule": "from-file", "path": str(table)}}  # fmt: skip
    for path, raw in cases.items():
        with pytest.raises(ConfigError) as error:
            parse_config(raw)
        assert str(path) in one_line(error)


def test_a_covariance_file_with_both_arrays_and_an_oversized_dense_sigma_are_refused(tmp_path):
    """An .npz holding both `eigenvalues` and `Sigma` is refused (before: one was used silently), and a dense `Sigma`
    above `MAX_DENSE_SIGMA` is refused from its header, before its data is read or decomposed (before: a 300 KB file
    of a 6000 × 6000 Σ took 83 s and 1.4 GB to load). The oversized member here holds a header only."""
    from momentgen.setting.matrices import MAX_DENSE_SIGMA

    np.savez(tmp_path / "both.npz", eigenvalues=np.ones(6), Sigma=np.eye(6))
    with pytest.raises(ConfigError, match="both `eigenvalues` and `Sigma`") as error:
        parse_config(tied_sigma(tmp_path / "both.npz"))
    one_line(error)
    d = MAX_DENSE_SIGMA + 1
    header = f"{{'descr': '<f8', 'fortran_order': False, 'shape': ({d}, {d}), }}"
    header = header.ljust(117) + "\n"
    member = bytes(np.lib.format.magic(1, 0)) + len(header).to_bytes(2, "little") + header.encode()
    with zipfile.ZipFile(tmp_path / "big.npz", "w") as archive:
        archive.writestr("Sigma.npy", member)
    with pytest.raises(ConfigError, match=f"limited to d ≤ {MAX_DENSE_SIGMA}") as error:
        parse_config(tied_sigma(tmp_path / "big.npz"))
    one_line(error)


def test_spectrum_of_two_letters_is_a_one_line_error(capsys):
    """`spectrum --letter "S1 S2"` (before: a traceback)."""
    code = main(["spectrum", "examples/configs/fig4_linear.toml", "--letter", "S1 S2", "--times", "0", "--no-sgd",
                 "--json", "/tmp/never-written.json"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "a spectrum is of one letter" in err and "Traceback" not in err


def test_spectrum_on_a_closed_hierarchy_names_the_closure_that_can():
    """The direct model's hierarchy is closed: asked for the quadrature closure's spectrum, the message says why
    there is none and names the matrix model (before: "use quadrature" when quadrature was asked)."""
    from momentgen.evidence.evolution import spectrum_evolution

    config = load_config("fig2_direct_h2", truncation={"degree": 7, "closure": "quadrature"}, integrate={"T": 0.05})
    with pytest.raises(MomentgenError, match='closed.*use closure = "matrix-model"') as error:
        spectrum_evolution(config, "S1", [0.0], with_sgd=False)
    one_line(error)


def test_bad_arguments_of_result_spectrum_are_one_line_errors():
    """`Result.spectrum(letter, t, points, x)` checks its arguments (before: raw TypeErrors)."""
    from momentgen.interface.api import solve

    result = solve("fig4_linear", closure="quadrature", degree=7, spectra=True, integrate={"T": 0.05, "points": 3})
    for kwargs, needle in [
        ({"letter": 1, "t": 0.0}, "letter"),
        ({"letter": "S1", "t": "0"}, "t=…"),
        ({"letter": "S1", "t": float("nan")}, "t=…"),
        ({"letter": "S1", "t": 0.0, "points": 1.5}, "points=…"),
        ({"letter": "S1", "t": 0.0, "points": 10**9}, "points=…"),
        ({"letter": "S1", "t": 0.0, "x": "abc"}, "x=…"),
        ({"letter": "S1", "t": 0.0, "x": [[1.0, 2.0]]}, "x=…"),
        ({"letter": "S1", "t": 0.0, "x": [0.0, float("inf")]}, "x=…"),
    ]:
        with pytest.raises(MomentgenError, match=needle) as error:
            result.spectrum(**kwargs)
        one_line(error)
    assert result.spectrum("S1", 0.0, points=5)["x"].shape == (5,)


@pytest.mark.parametrize("n_jobs", [-1, 0, 2.5, "2", 1025, True])
def test_a_bad_n_jobs_is_an_argument_error_not_a_verdict(n_jobs):
    """`verify(n_jobs=…)` (and `compare`, `sweep`) refuse a bad worker count before anything runs (before: the
    verdict `disagree`)."""
    from momentgen.interface.api import compare, sweep, verify

    config = load_config("fig4_linear")
    for call in (
        lambda: verify(config, n_jobs=n_jobs, progress=False),
        lambda: compare(config, n_jobs=n_jobs),
        lambda: sweep(config, {"model.gamma": [0.0]}, n_jobs=n_jobs),
    ):
        with pytest.raises(MomentgenError, match="n_jobs") as error:
            call()
        one_line(error)


@pytest.mark.parametrize("budget", [float("inf"), float("nan"), -1.0, 0, 10**9, "60"])
def test_a_bad_budget_is_refused_before_anything_runs(budget):
    """`verify --budget inf` ran and then could not write its JSON; now every budget outside (0, one week] is an
    argument error first."""
    from momentgen.interface.api import verify

    with pytest.raises(MomentgenError, match="budget") as error:
        verify(load_config("fig4_linear"), budget=budget, progress=False)
    one_line(error)


def test_never_more_workers_than_tasks(monkeypatch):
    """`--jobs 64` for 2 tasks starts 2 workers (before: 64, and leaked semaphores)."""
    import joblib

    from momentgen.core import parallel

    asked = []
    real = joblib.Parallel

    class Recording(real):
        def __init__(self, n_jobs=None, **kwargs):
            asked.append(n_jobs)
            super().__init__(n_jobs=n_jobs, **kwargs)

    monkeypatch.setattr(parallel.joblib, "Parallel", Recording)
    assert parallel.run_tasks([(abs, (-1,)), (abs, (-2,))], n_jobs=64, progress=False) == [1, 2]
    assert asked == [2]


@pytest.mark.parametrize("address", ["ucx://127.0.0.1:8786", "inproc://x", "ws://h:1", "tcp://nohost", "tcp://a:b"])
def test_only_network_dask_schedulers_pass(address):
    """Schedulers the workers cannot use (ucx, inproc, ws) passed validation and then crashed; now refused."""
    from momentgen.interface.api import sweep

    with pytest.raises(MomentgenError, match="tcp://host:port") as error:
        sweep(load_config("fig4_linear"), {"model.gamma": [0.0]}, scheduler=address)
    one_line(error)


def test_many_output_times_are_refused():
    """`solve(times=…)` of 10⁴ times took 131 s; the limit is `MAX_OUTPUT_TIMES` (the grid is [integrate] points)."""
    from momentgen.interface.api import MAX_OUTPUT_TIMES, solve

    with pytest.raises(ConfigError, match="points instead") as error:
        solve("fig4_linear", times=np.linspace(0, 0.1, MAX_OUTPUT_TIMES + 1))
    one_line(error)


def test_a_batch_schedule_below_one_sample_is_refused():
    """A batch schedule that takes B·b(u) below 1 (SGD clamped to 1 sample, the theory used 0.32: κ 0.2 vs 0.625,
    both `ok`) is refused with the smallest batch it reaches."""
    with pytest.raises(ConfigError, match="down to 0.32 samples") as error:
        load_config("fig4_linear", sgd={"batch": 32, "batch_schedule": {"schedule": "linear", "final": 0.01}})
    one_line(error)


@pytest.mark.parametrize("table", ["sgd", "batch_schedule"])
def test_an_overflowing_step_schedule_is_refused(table):
    """factor ** milestones beyond 1e6 (overflow unchecked; a traceback for batch schedules)."""
    step = {"schedule": "step", "milestones": [i / 200 for i in range(1, 200)], "factor": 1000.0}
    overrides = {"sgd": step} if table == "sgd" else {"sgd": {"batch_schedule": step}}
    with pytest.raises(ConfigError, match="reaches the multiplier") as error:
        load_config("fig4_linear", **overrides)
    one_line(error)


def test_a_scheduled_runs_messages_and_risk_window_are_on_the_nominal_axis():
    """Under a schedule the integrator runs on s = T F(t/T): its messages' times and `risk_valid_until` are
    reported on the nominal t (before: "blowup at t = 0.37" with T = 0.02). Independent value: the linear decay
    to 0 has F(u) = u − u²/2, so t = T(1 − √(1 − 2s/T))."""
    from momentgen.dynamics.problem import Problem

    T = 2.0
    config = load_config("fig4_linear", integrate={"T": T, "points": 5}, sgd={"schedule": "linear", "final": 0.0})
    problem = Problem(config)
    s = float(problem.times[2])
    result = bare_result(problem.times, "blowup", f"blowup at t = {s:.6g}: too large", s)
    result.extra["risk_valid_until"] = s
    reported = problem.on_nominal_axis(result)
    nominal = T * (1 - np.sqrt(1 - 2 * s / T))
    assert nominal == pytest.approx(1.0, rel=1e-9)  # the grid's middle point
    assert f"t = {nominal:.6g} (integrated s = {s:.6g})" in reported.message
    assert reported.extra["risk_valid_until"] == pytest.approx(nominal, rel=1e-6)
    assert reported.valid_until == pytest.approx(nominal, rel=1e-6)


def test_a_from_file_sigma_runs_at_multiples_of_its_dimension(tmp_path):
    """A file's Σ at d = 2·d_file is Σ ⊗ I₂ (the same spectral law, so the same d = ∞ theory): `verify` extrapolates
    from d_file and 2·d_file instead of refusing (before: d fixed, and the error came after the closure check).
    Independent value: numpy's kron of the file's own matrix."""
    from momentgen.evidence.verification_plan import _States

    rng = np.random.default_rng(0)
    A = rng.standard_normal((6, 6))
    Sigma = A @ A.T / 6 + np.eye(6)
    np.savez(tmp_path / "dense.npz", Sigma=Sigma)
    config = parse_config(tied_sigma(tmp_path / "dense.npz"))
    data = config.data()
    assert np.allclose(data.matrix(12), np.kron(Sigma, np.eye(2)), atol=1e-12)
    assert np.allclose(data.matrix(6), Sigma, atol=1e-12)
    assert _States(config).dims == (6, 12)
    with pytest.raises(MomentgenError, match="a multiple of it") as error:
        data.matrix(9)
    one_line(error)


def test_a_rule_level_below_the_calibrated_one_is_refused():
    """An explicit `RunState` whose quadrature level is below the calibrated one gave an rhs off by 74–166 %
    silently; it is now a one-line error naming the levels allowed."""
    from momentgen.compiler.slaved_mean import RunState
    from momentgen.compiler.truncation import from_config

    config = load_config("fig1_tied_softmax", truncation={"degree": 4})
    truncation, y0 = from_config(config)
    truncation.rhs(0.0, y0)
    lowest = truncation.potential.lowest_rule_level
    assert lowest is not None and lowest > 1
    with pytest.raises(MomentgenError, match=f"rule level {lowest - 1} is not one") as error:
        truncation.rhs(0.0, y0, RunState(np.zeros(2), lowest - 1))
    one_line(error)


def test_a_generated_module_notices_an_edited_init_file(tmp_path):
    """A generated module records its from-file inits' content: after the file is edited, importing it is a
    `StaleModuleError` (before: the old moments with the new file's mean)."""
    import importlib.util

    from momentgen.compiler.emit import StaleModuleError, write_module

    rng = np.random.default_rng(1)
    np.savez(tmp_path / "W.npz", W=rng.standard_normal((8, 8)) / np.sqrt(8))
    raw = {
        "model": {"kind": "tied", "K": 2, "trainable": [1]},
        "loss": {"builtin": "mse", "activation": "h1"},
        "init": {"1": {"kind": "from-file", "path": "W.npz"}, "2": {"kind": "identity"}},
        "truncation": {"degree": 3},
        "integrate": {"T": 0.1, "points": 3},
        "sgd": {"d": 8},
    }
    (tmp_path / "c.toml").write_text("")
    write_module(parse_config(raw, source=str(tmp_path / "c.toml")), tmp_path / "gen.py")

    def load(name):
        spec = importlib.util.spec_from_file_location(name, tmp_path / "gen.py")
        spec.loader.exec_module(importlib.util.module_from_spec(spec))

    load("fresh")
    np.savez(tmp_path / "W.npz", W=rng.standard_normal((8, 8)) / np.sqrt(8))
    with pytest.raises(StaleModuleError, match="a file they read") as error:
        load("edited")
    one_line(error)


@pytest.mark.parametrize(
    "changes, needle",
    [
        ({"init": {"2": {"kind": "aligned", "exponent": 100.0}}}, "exponent must be at most 4"),
        ({"init": {"2": {"kind": "aligned", "exponent": -100.0}}}, "exponent must be at most 4"),
        ({"init": {"2": {"kind": "aligned", "exponent": -1.5}}}, "diverges for the power law"),
        ({"data": {"covariance": "power-law", "exponent": 1e-200}}, "at least 1e-06"),
        ({"init": {"2": {"kind": "aligned", "c": 100.0}}}, "must be below 100"),
        ({"init": {"1": {"kind": "gaussian", "c": 2.0}}}, '`c` is not read by kind = "gaussian"'),
        ({"init": {"2": {"kind": "identity", "scale": 2.0}}}, '`scale` is not read by kind = "identity"'),
        ({"data": {"covariance": "from-file", "path": "s\0.npz"}}, "NUL byte"),
    ],
)
def test_bad_keys_are_refused_when_the_configuration_is_read(changes, needle):
    """Aligned exponents ±100 and power-law exponents below 1e-154 crashed late; an aligned teacher with c ≥ 100 on
    a power-law Σ ran for minutes; stray keys in [init.k] were ignored; a NUL byte in a path was a traceback."""
    raw = {
        "model": {"kind": "tied", "K": 2, "trainable": [1]},
        "loss": {"builtin": "mse", "activation": "h1"},
        "data": {"covariance": "power-law", "exponent": 1.0},
        "init": {"1": {"kind": "gaussian", "scale": 0.5}, "2": {"kind": "aligned"}},
        "truncation": {"degree": 5, "closure": "quadrature"},
        "integrate": {"T": 0.1},
    }
    for table, values in changes.items():
        if table == "init":
            for k, spec in values.items():
                raw["init"][k] = spec
        else:
            raw[table] = values
    with pytest.raises(ConfigError, match=needle) as error:
        parse_config(raw)
    one_line(error)


def test_a_nul_byte_in_a_path_is_a_one_line_error(capsys, tmp_path, monkeypatch):
    """A NUL byte in the configuration's path or an output path (before: a ValueError traceback)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="NUL byte") as error:
        load_config("exp\0.toml")
    one_line(error)
    code = main(["solve", str(ROOT / "examples" / "configs" / "fig4_linear.toml"), "--json", "out\0.json"])
    err = capsys.readouterr().err
    assert code == 2 and "NUL byte" in err and "Traceback" not in err
    assert not os.listdir(tmp_path)  # nothing was written
