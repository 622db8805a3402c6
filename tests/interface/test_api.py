"""The notebook API (`momentgen.interface.api`), exports (CSV, provenance, LaTeX) and the small commands."""

import json

import numpy as np
import pytest

import momentgen as mg
from momentgen.core.figures import layout_problems
from momentgen.interface.cli import main
from momentgen.setting.config import ConfigError

SMALL = {
    "model": {"kind": "tied", "K": 2, "trainable": [1]},
    "loss": {"builtin": "mse", "activation": "h1"},
    "init": {"1": {"kind": "gaussian"}, "2": {"kind": "identity", "c": 1.0}},
    "truncation": {"degree": 9, "observables": ["S1", "S1 S1"], "closure": "quadrature"},
    "integrate": {"T": 0.2, "points": 5},
    "sgd": {"d": 60, "lr": 0.02, "batch": 64, "seeds": [0, 1]},
}


def test_load_config_takes_a_path_a_dict_an_example_name_and_overrides(tmp_path):
    by_name = mg.load_config("fig4_linear", truncation={"degree": 6})
    assert by_name.settings.truncation.degree == 6 and by_name.model.kind == "tied"
    by_dict = mg.load_config(SMALL, model={"gamma": 0.1})
    assert by_dict.settings.model.gamma == 0.1
    assert mg.load_config(by_dict).digest == by_dict.digest
    with pytest.raises(ConfigError, match="no shipped example"):
        mg.load_config("fig9_nothing")
    with pytest.raises(ConfigError, match="gamma"):
        mg.load_config(SMALL, model={"gamma": float("nan")})


def test_solve_returns_a_result_with_a_frame_and_a_plot():
    """The frame holds the curves on t with the run's status; μ(S1) at t = 0 is the Wishart mean 1
    and decreases towards the teacher's c·r = 1 … here from q11 = 2 (independent: MP moments). With
    validity_tol = 1e-6 the closure vouches for the start only (its estimate reaches 2.5e-5 at t = 0.2)."""
    res = mg.solve(mg.load_config(SMALL, integrate={"validity_tol": 1e-6}))
    frame = res.to_pandas()
    assert list(frame.index) == pytest.approx(np.linspace(0, 0.2, 5)) and frame.index.name == "t"
    assert frame["S1 S1"].iloc[0] == pytest.approx(2.0) and frame.attrs["status"] == "partial"
    assert frame["vouched"].iloc[0] and not frame["vouched"].iloc[-1]  # the closure's window ends early
    assert frame.attrs["time_scale"].startswith("t = 4 n eta / d")
    ax = res.plot()
    assert {line.get_label() for line in ax.get_lines()} >= {
        "μ(S1), quadrature closure",
        "μ(S1 S1), quadrature closure",
    }


def test_simulate_returns_the_same_kind_of_result():
    res = mg.simulate(SMALL, d=40, seeds=[0, 1], progress=False)
    frame = res.to_pandas()
    assert res.closure == "sgd" and res.extra["d"] == 40 and frame.shape[0] == 5
    assert abs(frame["S1 S1"].iloc[0] - 2.0) < 0.3  # a d = 40 Wishart draw: 2 + O(1/√d)


def test_sweep_runs_the_product_of_the_grid_in_parallel():
    """Weight decay only lowers q11 (it adds −γ q11 to its derivative): the swept curves are ordered."""
    runs = mg.sweep(SMALL, {"model.gamma": [0.0, 0.5], "integrate.T": [0.1, 0.2]}, n_jobs=2)
    assert [p for p, _ in runs] == [
        {"model.gamma": g, "integrate.T": T} for g in (0.0, 0.5) for T in (0.1, 0.2)
    ]  # fmt: skip
    final = {(p["model.gamma"], p["integrate.T"]): r.series["S1 S1"][-1] for p, r in runs}
    assert final[(0.5, 0.2)] < final[(0.0, 0.2)] and final[(0.5, 0.1)] < final[(0.0, 0.1)]
    frame = runs.to_pandas()
    assert frame.index.names == ["model.gamma", "integrate.T", "t"] and len(frame) == 20
    with pytest.raises(ConfigError, match="no key"):
        mg.sweep(SMALL, {"model.gama": [0.0]})


def test_sweep_runs_on_a_dask_cluster():
    distributed = pytest.importorskip("dask.distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        remote = mg.sweep(SMALL, {"model.gamma": [0.0, 0.5]}, scheduler=cluster.scheduler_address)
    local = mg.sweep(SMALL, {"model.gamma": [0.0, 0.5]}, n_jobs=1)
    for (_, a), (_, b) in zip(remote, local):
        assert np.array_equal(a.series["S1 S1"], b.series["S1 S1"])


def test_solve_writes_csv_and_provenance(tmp_path):
    from tests.helpers import write_config

    path, out = write_config(tmp_path, SMALL), tmp_path / "run.json"
    assert main(["solve", str(path), "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["provenance"]["momentgen"] == mg.__version__
    assert data["provenance"]["config"]["hash"] == mg.load_config(path).digest
    rows = (tmp_path / "run.csv").read_text().splitlines()
    assert rows[0].split(",")[:2] == ["t", "S1"] and len(rows) == 6


def test_version_and_cache_commands(tmp_path, monkeypatch, capsys):
    with pytest.raises(SystemExit):
        main(["--version"])
    assert mg.__version__ in capsys.readouterr().out
    monkeypatch.setenv("MOMENTGEN_CACHE", str(tmp_path / "cache"))
    mg.solve(SMALL, loss={"builtin": "mse", "activation": "tanh"}, truncation={"degree": 5})  # compiles kernels
    assert main(["cache", "info"]) == 0 and "files" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0
    assert not list((tmp_path / "cache" / "kernels").glob("*.py"))


def test_theory_and_sgd_overlaid_are_told_apart(tmp_path):
    """Issue 32: an SGD result is titled as SGD, theory and SGD on one Axes get distinct labels, and the
    legend sits inside the axes (a plain savefig keeps it)."""
    config = mg.load_config("fig4_linear", integrate={"T": 0.01, "points": 3}, sgd={"d": 40, "seeds": [0]})
    theory, run = mg.solve(config), mg.simulate(config, progress=False)
    ax = run.plot(words=["S1 S1"])
    theory.plot(words=["S1 S1"], ax=ax)
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert sorted(labels) == ["μ(S1 S1), online SGD, d = 40", "μ(S1 S1), zero closure"]
    assert layout_problems(ax.figure) == []  # the theory's line above SGD's markers, the legend over no data
    assert ax.get_title().startswith("tied: zero closure") and run.plot().get_title().startswith("tied: online SGD")
    ax.figure.savefig(tmp_path / "overlay.png")
    assert (tmp_path / "overlay.png").stat().st_size > 0


def test_where_no_closure_is_named_the_one_that_vouches_runs():
    """Issue 45: `mg.solve(cfg)` on fig4_linear, whose configured zero closure vouches only until t = 0.01 of 0.05,
    runs the whole-curve closure instead — the exact riccati closure, one trainable tied letter (issue 44) — and says
    so; naming the zero closure (or a degree) keeps it."""
    config = mg.load_config("fig4_linear", integrate={"points": 6})
    result = mg.solve(config)
    assert result.closure == "riccati" and result.valid_until == pytest.approx(0.05)
    assert result.message.startswith("the configured zero closure vouches only until t = 0.01 of 0.05")
    assert mg.solve(config, closure="zero").closure == "zero"
    assert mg.solve(config, degree=6).closure == "zero"


def test_without_an_estimate_the_reported_leg_runs_alone():
    """``estimate=False``: the matrix model runs its reported leg alone — the curve its estimate comes with, no
    estimate, status ``unverified``, its one leg named — and `mg.solve` switches to no closure that vouches
    (fig4_linear's zero closure would give way to the riccati one); the zero closure keeps its cheap check."""
    config = mg.load_config("fig4_linear", integrate={"points": 6})
    checked = mg.solve(config, closure="matrix-model", size=32)
    alone = mg.solve(config, closure="matrix-model", size=32, estimate=False)
    assert checked.extra["estimate_legs"] == ["coarse", "fine"] and alone.extra["estimate_legs"] == ["fine"]
    assert np.array_equal(alone.series["S1 S1"], checked.series["S1 S1"]) and checked.error_estimate is not None
    assert alone.status == "unverified" and alone.error_estimate is None and "estimate=False" in alone.message
    zero = mg.solve(config, estimate=False)
    assert zero.closure == "zero" and zero.status == "partial" and zero.valid_until == pytest.approx(0.01)


def test_papercuts_of_the_first_hour():
    """Issue 45's papercuts: `momentgen.examples.names()` without importing the submodule; `plot(words="risk")` is
    one column (it was read letter by letter: "no column 'r'"); `q11`/`q12` name the order parameters the figures
    label; a sweep over sgd.schedule says that the configuration's warm-up reaches every arm."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import momentgen; print(momentgen.examples.names()[0])"],
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "fig1_tied_softmax", done.stderr
    result = mg.solve("fig4_linear", closure="quadrature", degree=5, integrate={"T": 0.01, "points": 3})
    assert result.plot(words="risk").get_ylabel() == "population risk"
    labels = [line.get_label() for line in result.plot(words=["q11", "q12"]).get_lines()]
    assert labels[0].startswith("q11 = μ(S1 S1)") and labels[1].startswith("q12 = μ(S1 S2)")
    with pytest.warns(UserWarning, match="every arm keeps the configuration's warmup = 0.1"):
        with pytest.raises(mg.MomentgenError, match="closure"):  # the warning comes before any run
            mg.sweep("schedules", {"sgd.schedule": ["constant", "cosine"]}, n_jobs=1, closure="nope")


def test_a_folder_named_momentgen_beside_a_script_does_not_shadow_the_package(tmp_path):
    """Issue 45: a script run beside a clone named `momentgen` imported the clone's folder as an empty namespace
    package ("module 'momentgen' has no attribute 'load_config'", "unknown location"), even with `pip install -e`:
    `make install` installs in setuptools' compat editable mode, which puts the package's folder on sys.path, where
    a regular package wins over a namespace portion."""
    import subprocess
    import sys

    (tmp_path / "momentgen").mkdir()
    (tmp_path / "momentgen" / "pyproject.toml").write_text("[project]\nname = 'momentgen'\n")
    (tmp_path / "s.py").write_text("import momentgen as mg\nprint(mg.load_config('fig4_linear').model.kind)\n")
    done = subprocess.run([sys.executable, "s.py"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "tied", done.stderr[-500:]


def test_a_long_integration_prints_a_status_line(monkeypatch, capsys):
    """Issue 45: a 353 s solve printed nothing. The stepping loop writes one status line on stderr every
    `STATUS_EVERY` seconds (here made 0: every step), with the time reached and the horizon; a short run at the
    default prints none."""
    from momentgen.core import stepper

    config = mg.load_config("fig4_linear", integrate={"T": 0.01, "points": 3})
    mg.solve(config, closure="zero", degree=4)
    assert "momentgen: integrating" not in capsys.readouterr().err
    monkeypatch.setattr(stepper, "STATUS_EVERY", 0.0)
    mg.solve(config, closure="zero", degree=4)
    assert "momentgen: integrating, t = " in capsys.readouterr().err


def test_results_as_labelled_arrays_round_trip_through_netcdf(tmp_path):
    """Issue 47 (items 2 and 5, in part): `Result.to_xarray()` (dimension t, a variable per word and derived
    column, the status and window in attrs) survives `to_netcdf` and back exactly; `Sweep.to_xarray()` has the swept
    parameter as a dimension; a notebook shows a Result, a Verification and a Comparison as short HTML, escaped."""
    import xarray

    from momentgen.evidence.verification import Verification

    result = mg.solve("fig4_linear", closure="quadrature", degree=5, integrate={"T": 0.02, "points": 5})
    dataset = result.to_xarray()
    assert list(dataset.dims) == ["t"] and dataset.attrs["status"] == result.status
    assert np.array_equal(dataset["S1 S2"].values, np.asarray(result.series["S1 S2"]))
    dataset.to_netcdf(tmp_path / "r.nc")
    back = xarray.open_dataset(tmp_path / "r.nc")
    assert all(np.array_equal(back[v].values, dataset[v].values, equal_nan=True) for v in dataset.data_vars)
    assert back.attrs["valid_until"] == result.valid_until
    sweep = mg.sweep("fig4_linear", {"model.gamma": [0.0, 0.1]}, closure="zero", degree=4, n_jobs=1,
                     integrate={"T": 0.01, "points": 3})  # fmt: skip
    grid = sweep.to_xarray()
    assert dict(grid.sizes) == {"model.gamma": 2, "t": 3}
    assert grid["S1 S1"].sel({"model.gamma": 0.1}).values[-1] == sweep[1][1].series["S1 S1"][-1]
    page = result._repr_html_()
    assert result.status in page and "<table>" in page and len(page) < 4000
    hostile = Verification("disagree", "<script>alert(1)</script>", {"drift": {"passed": False, "message": "<b>"}})
    assert "<script>" not in hostile._repr_html_() and "&lt;script&gt;" in hostile._repr_html_()


def test_comparison_html_and_a_missing_xarray(monkeypatch):
    """A Comparison shows its note and its sup errors, theory–SGD rows first; without xarray, `to_xarray` is a
    one-line error saying how to install it."""
    import sys

    from momentgen.interface.api import Comparison

    rows = [{"observable": "S1", "comparison": c, "theory": "M=4", "d": 100, "sup_error": e}
            for c, e in (("flow-sgd", 0.3), ("theory-sgd", 0.25))]  # fmt: skip
    page = Comparison({"model": "tied", "table": rows, "note": "ran <quadrature>"})._repr_html_()
    assert page.index("theory-sgd") < page.index("flow-sgd") and "ran &lt;quadrature&gt;" in page
    monkeypatch.setitem(sys.modules, "xarray", None)
    result = mg.solve("fig4_linear", closure="zero", degree=4, integrate={"T": 0.01, "points": 3})
    with pytest.raises(mg.MomentgenError, match=r"pip install 'momentgen\[xarray\]'"):
        result.to_xarray()
